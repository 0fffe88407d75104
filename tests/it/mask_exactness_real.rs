//! Token masks on the real vocabularies (SmolLM2 49k, Gemma 3 262k) against the definition:
//! a token is allowed exactly when the bytes so far plus its bytes are still a prefix of the
//! grammar, and an end-of-generation token exactly when the grammar is complete.

use std::sync::Arc;

use llamay::actors::model::load_vocabulary;
use llamay::grammar::schema::compile_schema;
use llamay::grammar::{check_input, compile_gbnf, BytePath, CheckOutcome, CompiledGrammar, Limits, Matcher, TokenTrie};
use llamay::llm::Vocabulary;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/grammars");

/// Asserts that `mask` allows exactly the tokens that keep `text` a prefix of `grammar`. The
/// definition is checked byte by byte through the uncached automaton (`BytePath`, the steps
/// `check_input` takes), not through the matcher's mask walks; the walk over `text` is shared by
/// every token, so a token costs only its own bytes.
fn assert_exact(vocabulary: &Vocabulary, grammar: &CompiledGrammar, mask: &llamay::grammar::TokenMask, text: &[u8], what: &str) {
    let mut after_text = BytePath::new(grammar);
    let text_alive = text.iter().all(|&byte| after_text.push(byte));
    let complete = text_alive && after_text.is_accepting();
    assert_eq!(complete, check_input(grammar, text) == CheckOutcome::Match, "{what}: the byte walk and check_input disagree");
    for token in 0..vocabulary.len() as u32 {
        let expected = if vocabulary.is_end_of_generation(token) {
            complete
        } else {
            let piece = vocabulary.piece(token);
            // Empty pieces (control tokens) add nothing and are never offered.
            !piece.is_empty() && piece.len() <= 512 && text_alive && {
                let mut path = after_text.clone();
                piece.iter().all(|&byte| path.push(byte))
            }
        };
        assert_eq!(
            mask.is_set(token),
            expected,
            "{what}: token {token} {:?} after {:?}",
            String::from_utf8_lossy(vocabulary.piece(token)),
            String::from_utf8_lossy(text)
        );
    }
}

/// Up to `steps` steps of a seeded walk from where `matcher` stands after `text`: at each, the
/// mask is checked with [`assert_exact`], then a token it allows is committed.
fn check_seeded_steps(
    vocabulary: &Vocabulary,
    grammar: &CompiledGrammar,
    matcher: &mut Matcher,
    text: &mut Vec<u8>,
    seed: &mut u64,
    steps: usize,
    what: &str,
) {
    for step in 0..steps {
        let mask = matcher.compute_mask().clone();
        assert_exact(vocabulary, grammar, &mask, text, &format!("{what} step {step}"));
        let choices: Vec<u32> = mask.iter_set().filter(|t| !vocabulary.is_end_of_generation(*t)).collect();
        if choices.is_empty() {
            break;
        }
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let token = choices[(*seed % choices.len() as u64) as usize];
        matcher.commit(token).expect("an allowed token commits");
        text.extend_from_slice(vocabulary.piece(token));
    }
}

/// Inside JSON Schema strings (where masks come from the vocabulary's loop tables, and where
/// tokens that end inside a character count as staying in the string) and beside them (a
/// string owing a first character, whose mask is the body's corrected where the two differ,
/// non-ASCII first characters included): after each prefix, read greedily token by token,
/// and a few seeded steps on.
#[test]
fn string_masks_match_the_definition() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "any": {},
            "short": {"type": "string", "maxLength": 5},
            "first": {"type": "string", "minLength": 1}
        },
        "required": ["name", "any", "short", "first"]
    });
    let prefixes = [
        "{\"name\": \"",
        "{\"name\": \"caf\u{e9} ",
        "{\"name\": \"x\", \"any\": \"",
        "{\"name\": \"x\", \"any\": \"\u{65e5}\u{672c}",
        "{\"name\": \"x\", \"any\": \"y\", \"short\": \"ab",
        // Beside the string body: one character is owed before the body's loop.
        "{\"name\": \"x\", \"any\": \"y\", \"short\": \"\", \"first\": \"",
    ];
    let grammar = Arc::new(CompiledGrammar::new(compile_schema(&schema).unwrap(), &Limits::default()).unwrap());
    for model in ["smollm2:135m", "gemma3:270m"] {
        let vocabulary = load_vocabulary(model).expect("model in the store (scripts/setup)");
        let trie = Arc::new(TokenTrie::new(vocabulary.pieces(), vocabulary.end_of_generation()));
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for prefix in prefixes {
            let (mut matcher, mut text) = matcher_after(&vocabulary, &grammar, &trie, prefix);
            check_seeded_steps(&vocabulary, &grammar, &mut matcher, &mut text, &mut seed, 2, &format!("{model} {prefix:?}"));
        }
    }
}

/// A matcher that has read `prefix`, greedily token by token, and the bytes it read.
fn matcher_after(vocabulary: &Vocabulary, grammar: &Arc<CompiledGrammar>, trie: &Arc<TokenTrie>, prefix: &str) -> (Matcher, Vec<u8>) {
    let mut matcher = Matcher::new(Arc::clone(grammar), Arc::clone(trie));
    let mut text: Vec<u8> = Vec::new();
    while text.len() < prefix.len() {
        let rest = &prefix.as_bytes()[text.len()..];
        let token = (0..vocabulary.len() as u32)
            .filter(|&t| !vocabulary.piece(t).is_empty() && rest.starts_with(vocabulary.piece(t)))
            .max_by_key(|&t| vocabulary.piece(t).len())
            .expect("every byte is a token");
        matcher.commit(token).expect("the prefix is valid");
        text.extend_from_slice(vocabulary.piece(token));
    }
    (matcher, text)
}

/// Between values, where a mask walk reads the vocabulary's whitespace tokens as runs and
/// passes over the bytes after a run that the state is known to refuse: after a colon, a
/// comma and an opening bracket, with the document's whitespace budget whole, half spent
/// and nearly spent (where a run can spend the rest and the run state no longer stands for
/// the state after it).
#[test]
fn masks_between_values_match_the_definition() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "on": {"type": "boolean"}
        },
        "required": ["id", "tags", "on"]
    });
    let budget = llamay::grammar::schema::WHITESPACE_BUDGET as usize;
    let spent = |bytes: usize| " ".repeat(bytes);
    let prefixes = [
        "{\"id\":".to_string(),
        format!("{{{}\"id\": 7,", spent(budget / 2)),
        format!("{{\"id\": 7, \"tags\":{}[", spent(budget - 8)),
        format!("{{\"id\": 7,{}\"tags\": [\"a\"],", spent(budget - 5)),
    ];
    let grammar = Arc::new(CompiledGrammar::new(compile_schema(&schema).unwrap(), &Limits::default()).unwrap());
    for model in ["smollm2:135m", "gemma3:270m"] {
        let vocabulary = load_vocabulary(model).expect("model in the store (scripts/setup)");
        let trie = Arc::new(TokenTrie::new(vocabulary.pieces(), vocabulary.end_of_generation()));
        let mut seed = 0x51AF_D7ED_558C_CD1Du64;
        for prefix in &prefixes {
            let (mut matcher, mut text) = matcher_after(&vocabulary, &grammar, &trie, prefix);
            check_seeded_steps(&vocabulary, &grammar, &mut matcher, &mut text, &mut seed, 3, &format!("{model} {prefix:?}"));
        }
    }
}

#[test]
fn masks_match_the_definition_along_seeded_walks() {
    for model in ["smollm2:135m", "gemma3:270m"] {
        let vocabulary = load_vocabulary(model).expect("model in the store (scripts/setup)");
        let trie = Arc::new(TokenTrie::new(vocabulary.pieces(), vocabulary.end_of_generation()));
        for name in ["json", "list", "arithmetic", "japanese"] {
            let source = std::fs::read(format!("{CORPUS}/{name}.gbnf")).unwrap();
            let grammar = Arc::new(compile_gbnf(&source, &Limits::default()).unwrap());
            let mut matcher = Matcher::new(Arc::clone(&grammar), Arc::clone(&trie));
            let mut text: Vec<u8> = Vec::new();
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ name.len() as u64;
            check_seeded_steps(&vocabulary, &grammar, &mut matcher, &mut text, &mut seed, 5, &format!("{model} {name}"));
        }
    }
}
