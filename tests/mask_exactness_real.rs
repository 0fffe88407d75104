//! Token masks on the real vocabularies (SmolLM2 49k, Gemma 3 262k) against the definition:
//! a token is allowed exactly when the bytes so far plus its bytes are still a prefix of the
//! grammar, and an end-of-generation token exactly when the grammar is complete.

use std::sync::Arc;

use llamay::actors::model::load_vocabulary;
use llamay::grammar::{check_input, compile_gbnf, CheckOutcome, Limits, Matcher, TokenTrie};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/gbnf");

fn alive(grammar: &llamay::grammar::CompiledGrammar, text: &[u8]) -> bool {
    !matches!(check_input(grammar, text), CheckOutcome::Mismatch { .. })
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
            for step in 0..5 {
                let mask = matcher.compute_mask().clone();
                let complete = check_input(&grammar, &text) == CheckOutcome::Match;
                for token in 0..vocabulary.len() as u32 {
                    let expected = if vocabulary.is_end_of_generation(token) {
                        complete
                    } else {
                        let piece = vocabulary.piece(token);
                        // Empty pieces (control tokens) add nothing and are never offered.
                        !piece.is_empty() && piece.len() <= 512 && {
                            let mut extended = text.clone();
                            extended.extend_from_slice(piece);
                            alive(&grammar, &extended)
                        }
                    };
                    assert_eq!(
                        mask.is_set(token),
                        expected,
                        "{model} {name} step {step}: token {token} {:?} after {:?}",
                        String::from_utf8_lossy(vocabulary.piece(token)),
                        String::from_utf8_lossy(&text)
                    );
                }
                let choices: Vec<u32> =
                    mask.iter_set().filter(|t| !vocabulary.is_end_of_generation(*t)).collect();
                if choices.is_empty() {
                    break;
                }
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let token = choices[(seed % choices.len() as u64) as usize];
                matcher.commit(token).expect("an allowed token commits");
                text.extend_from_slice(vocabulary.piece(token));
            }
        }
    }
}
