use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::grammar::matcher::Matcher;
use crate::grammar::schema::compile_schema;
use crate::grammar::toktrie::TokenTrie;
use crate::grammar::{CompiledGrammar, Limits};

/// Every byte as a token, and a few words, as a BPE vocabulary has them.
fn vocabulary() -> (Arc<Vocabulary>, Arc<TokenTrie>) {
    let mut pieces: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    for word in ["\"city\"", "\": \"", "Lyon", "Acme", " Corporation", "Ac", "me", "\"}"] {
        pieces.push(word.as_bytes().to_vec());
    }
    pieces.push(Vec::new()); // end of generation
    let eog = pieces.len() as u32 - 1;
    let trie = Arc::new(TokenTrie::new(&pieces, &[eog]));
    (Arc::new(Vocabulary::from_parts(pieces, vec![eog])), trie)
}

/// Longest match over the toy vocabulary, standing in for the model's tokenizer.
fn tokenizer(vocabulary: &Arc<Vocabulary>) -> DraftTokenizer {
    let vocabulary = Arc::clone(vocabulary);
    Arc::new(move |bytes: &[u8], most: usize| {
        let mut tokens = Vec::new();
        let mut at = 0;
        while at < bytes.len() && tokens.len() < most {
            let best = (0..vocabulary.len() as u32)
                .filter(|&t| !vocabulary.piece(t).is_empty() && bytes[at..].starts_with(vocabulary.piece(t)))
                .max_by_key(|&t| vocabulary.piece(t).len());
            let Some(token) = best else { break };
            at += vocabulary.piece(token).len();
            tokens.push(token);
        }
        tokens
    })
}

/// A drafter for `prompt` that has seen `answer` so far (no constraint).
fn drafter_after(vocabulary: &Arc<Vocabulary>, prompt: &str, answer: &str) -> Drafter {
    let mut drafter = Drafter::new(tokenizer(vocabulary), Arc::clone(vocabulary), &tokens_of(vocabulary, prompt));
    for token in tokens_of(vocabulary, answer) {
        drafter.push(token);
    }
    drafter
}

fn tokens_of(vocabulary: &Vocabulary, text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).filter(|&t| vocabulary.piece(t).len() == 1).collect()
}

fn text_of(vocabulary: &Vocabulary, tokens: &[u32]) -> String {
    String::from_utf8(tokens.iter().flat_map(|&t| vocabulary.piece(t).to_vec()).collect()).unwrap()
}

fn constraint(schema: serde_json::Value, trie: &Arc<TokenTrie>) -> OutputConstraint {
    let grammar = Arc::new(CompiledGrammar::new(compile_schema(&schema).unwrap(), &Limits::default()).unwrap());
    OutputConstraint::new(Some(Matcher::new(grammar, Arc::clone(trie))), None).unwrap()
}

#[test]
fn the_grammar_s_forced_bytes_are_drafted_with_the_whitespace_the_answer_used_before() {
    let (vocabulary, trie) = vocabulary();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        "required": ["city", "zip"], "additionalProperties": false});
    let mut constraint = constraint(schema, &trie);
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &[]);
    // Text the answer wrote before (a space between a quote and a colon), then `{"c`.
    for token in tokens_of(&vocabulary, "\"a\" : ") {
        drafter.push(token);
    }
    for token in tokens_of(&vocabulary, "{\"c") {
        constraint.commit(token).unwrap();
        drafter.push(token);
    }
    // `ity"` is the one key left that starts with `c`; the space before the colon is the
    // answer's habit; after the colon, where it has none yet, the space JSON writers put; the
    // string's quote; then the value is the model's.
    let draft = drafter.propose(Some(&mut constraint), MAX_DRAFT);
    assert_eq!(text_of(&vocabulary, &draft), "ity\" : \"");
    drafter.settle(draft.len());
    assert_eq!(drafter.counts(), DraftCounts { forced: draft.len() as u64, copied: 0, accepted: draft.len() as u64 });
}

#[test]
fn text_the_answer_copies_from_the_prompt_is_drafted_up_to_the_clause_s_end() {
    let (vocabulary, _) = vocabulary();
    let prompt = tokens_of(&vocabulary, "Order 7 from Acme Corporation and Sons, ship to Lyon.");
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &prompt);
    for token in tokens_of(&vocabulary, "{\"customer\": \"Acme") {
        drafter.push(token);
    }
    // A first copy is two tokens at most; the comma ends the clause.
    let draft = drafter.propose(None, MAX_DRAFT);
    assert_eq!(text_of(&vocabulary, &draft), " Corporation ");
    // Refused: one token next; refused at one token: no copies for four steps.
    drafter.settle(0);
    assert_eq!(drafter.propose(None, MAX_DRAFT).len(), 1);
    drafter.settle(0);
    for _ in 0..MIN_COPY_PAUSE {
        assert!(drafter.propose(None, MAX_DRAFT).is_empty());
    }
    let draft = drafter.propose(None, MAX_DRAFT);
    assert_eq!(draft.len(), 1);
    // Kept whole: the next copy may be twice as long.
    drafter.settle(1);
    assert_eq!(drafter.propose(None, MAX_DRAFT).len(), 2);
    assert_eq!(drafter.counts(), DraftCounts { forced: 0, copied: 4, accepted: 1 }, "settled drafts only");
}

#[test]
fn no_copy_without_a_match_of_four_bytes_or_beyond_the_room_left() {
    let (vocabulary, _) = vocabulary();
    let prompt = tokens_of(&vocabulary, "Order 7 from Acme Corporation.");
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &prompt);
    for token in tokens_of(&vocabulary, "The weather is mild") {
        drafter.push(token);
    }
    assert!(drafter.propose(None, MAX_DRAFT).is_empty());
    for token in tokens_of(&vocabulary, " Acme") {
        drafter.push(token);
    }
    assert!(drafter.propose(None, 0).is_empty(), "no room, no draft");
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, 1)), " Corporation", "the full stop ends the clause");
}

#[test]
fn a_copy_the_constraint_refuses_at_once_is_not_drafted() {
    let (vocabulary, trie) = vocabulary();
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut constraint = constraint(schema, &trie);
    let prompt = tokens_of(&vocabulary, "{\"n\": Acme Corporation");
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &prompt);
    for token in tokens_of(&vocabulary, "{\"n\": ") {
        constraint.commit(token).unwrap();
        drafter.push(token);
    }
    assert!(drafter.propose(Some(&mut constraint), MAX_DRAFT).is_empty(), "an integer cannot start with 'A'");
    assert_eq!(drafter.counts(), DraftCounts::default());
}

#[test]
fn a_source_whose_drafts_miss_is_trusted_less() {
    let (vocabulary, _) = vocabulary();
    let prompt = tokens_of(&vocabulary, "Order 7 from Acme Corporation and Sons, ship to Lyon.");
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &prompt);
    for token in tokens_of(&vocabulary, "customer Acme") {
        drafter.push(token);
    }
    assert!(!drafter.propose(None, MAX_DRAFT).is_empty());
    let trusted = drafter.acceptance();
    drafter.cut(1);
    drafter.settle(0);
    assert!(!drafter.propose(None, MAX_DRAFT).is_empty());
    assert!(drafter.acceptance() < trusted);
    drafter.cut(0);
    assert_eq!(drafter.acceptance(), 0.0, "no draft in flight");
    assert_eq!(drafter.counts(), DraftCounts { forced: 0, copied: 1, accepted: 0 });
}

#[test]
fn an_answer_that_repeats_itself_is_drafted_with_the_repeat_s_period() {
    let (vocabulary, _) = vocabulary();
    let mut drafter = drafter_after(&vocabulary, "Order 7.", "{\"id\": \"100000");
    // `0000` was written one byte earlier: the repeat goes on with period one.
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, MAX_DRAFT)), "00", "a first lookup draft is two tokens");
    drafter.settle(2);
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, MAX_DRAFT)), "0000");
    drafter.settle(4);
    assert_eq!(drafter.counts(), DraftCounts { forced: 0, copied: 6, accepted: 6 });
    // A longer period: `ab-ab-` continues as `ab-ab-…`.
    let mut drafter = drafter_after(&vocabulary, "", "xab-ab-ab");
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, MAX_DRAFT)), "-a");
}

#[test]
fn a_prompt_copy_beats_an_equally_long_repeat_and_a_longer_repeat_beats_a_copy() {
    let (vocabulary, _) = vocabulary();
    let prompt = "shipto Lyon Centre, France.";
    // `to Lyon` (7 bytes) is both in the prompt and earlier in the answer.
    let mut drafter = drafter_after(&vocabulary, prompt, "xto Lyon; to Lyon");
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, MAX_DRAFT)), " C", "the prompt's ` Centre`, not the answer's `; `");
    // `x, Lyon` (7 bytes) only in the answer, ` Lyon` (5) in the prompt.
    let mut drafter = drafter_after(&vocabulary, prompt, "x, Lyon! x, Lyon");
    assert_eq!(text_of(&vocabulary, &drafter.propose(None, MAX_DRAFT)), "! ");
}

#[test]
fn a_word_begun_in_the_answer_is_copied_from_its_start_in_the_prompt_through_dots_and_commas_inside_it() {
    let (vocabulary, _) = vocabulary();
    let prompt = "Write to Jane at jane.doe@oak.co.uk, total 1249.90 EUR. Thanks.";
    let copy = |answer: &str| {
        drafter_after(&vocabulary, prompt, answer)
            .copy_from_prompt().map(|found| String::from_utf8(found.bytes).unwrap())
    };
    // Two bytes at a word's start are enough; a dot or comma before a letter or digit goes on.
    assert_eq!(copy("{\"email\": \"ja").as_deref(), Some("ne.doe@oak.co.uk"));
    assert_eq!(copy("{\"total\": 1").as_deref(), None, "one byte is too few");
    assert_eq!(copy("{\"total\": 12").as_deref(), Some("49.90 EUR"), "the full stop before a space ends it");
    // Not inside a word (`ane` of `Jane`), and a key's closing quote starts no value.
    assert_eq!(copy("{\"x\": \"an").as_deref(), None);
    assert_eq!(copy("{\"email\"").as_deref(), None);
}

#[test]
fn an_unseen_layout_is_guessed_from_the_first_member_and_json_convention() {
    let (vocabulary, trie) = vocabulary();
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a", "b"], "additionalProperties": false});
    let mut constraint = constraint(schema, &trie);
    let mut drafter = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &[]);
    for token in tokens_of(&vocabulary, "{\n  \"a") {
        constraint.commit(token).unwrap();
        drafter.push(token);
    }
    // No space before the colon, one after it.
    assert_eq!(text_of(&vocabulary, &drafter.propose(Some(&mut constraint), MAX_DRAFT)), "\": \"");
    drafter.settle(0);
    for token in tokens_of(&vocabulary, "\": \"x\",") {
        constraint.commit(token).unwrap();
        drafter.push(token);
    }
    // The second member is laid out as the first: newline, two spaces.
    assert_eq!(text_of(&vocabulary, &drafter.propose(Some(&mut constraint), MAX_DRAFT)), "\n  \"b\": \"");
    drafter.settle(0);
    for token in tokens_of(&vocabulary, "\n  \"b\": \"y\"") {
        constraint.commit(token).unwrap();
        drafter.push(token);
    }
    // The closing brace one level left of the members.
    assert_eq!(text_of(&vocabulary, &drafter.propose(Some(&mut constraint), MAX_DRAFT)), "\n}");
    // The next answer starts from this layout, from its first byte on (drafted with the
    // prompt's last token).
    let habits = drafter.habits().clone();
    let mut next = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &[]).with_habits(habits);
    let mut constraint = constraint_for_next(&trie);
    assert_eq!(text_of(&vocabulary, &next.propose(Some(&mut constraint), MAX_DRAFT)), "{\n  \"");
    // A first answer has no layout yet: nothing before the opening brace, as JSON writers do.
    let mut first = Drafter::new(tokenizer(&vocabulary), Arc::clone(&vocabulary), &[]);
    assert_eq!(text_of(&vocabulary, &first.propose(Some(&mut constraint_for_next(&trie)), MAX_DRAFT)), "{");
}

fn constraint_for_next(trie: &Arc<TokenTrie>) -> OutputConstraint {
    constraint(json!({"type": "object", "properties": {"c": {"type": "string"}, "d": {"type": "string"}},
        "required": ["c", "d"], "additionalProperties": false}), trie)
}

#[test]
fn a_source_not_drafted_for_a_while_is_trusted_as_at_the_start_again() {
    let (vocabulary, _) = vocabulary();
    let mut drafter = drafter_after(&vocabulary, "Order 7 from Acme Corporation and Sons, ship to Lyon.", "customer Acme");
    drafter.propose(None, MAX_DRAFT);
    drafter.settle(0);
    drafter.propose(None, MAX_DRAFT);
    let distrusted = drafter.acceptance();
    assert!(distrusted < PRIOR_ACCEPTANCE[1]);
    for _ in 0..40 {
        drafter.lookups = Default::default();
        drafter.propose(None, MAX_DRAFT);
        drafter.cut(0);
    }
    drafter.propose(None, MAX_DRAFT);
    assert!(drafter.acceptance() > distrusted && (drafter.acceptance() - PRIOR_ACCEPTANCE[1]).abs() < 0.01);
}
