//! Property test: a token budget never breaks the shape. Over every schema of the JSON Schema
//! Test Suite's draft 2020-12 files that compiles with every keyword enforced, and over the
//! GBNF corpus, generations sampled from random logits with a random budget between the
//! shortest document's length and three times it always end as a complete document: the
//! schema's validator accepts it, the grammar's own check matches it. The sampling loop is
//! the daemon sampler's: sample, check, a full mask only when refused, then the budget check
//! and a second draw when the budget refuses.

use std::sync::Arc;

use serde_json::Value;

use crate::schema::{compile_schema, review_schema, Verdict};
use crate::{check_input, CheckOutcome, CompiledGrammar, Constraint, Limits, Matcher, TokenTrie};

const SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/json-schema-test-suite/tests/draft2020-12");
const GRAMMARS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/grammars");

/// Budgets tried per schema, and per grammar.
const SCHEMA_BUDGETS: usize = 3;
const GRAMMAR_BUDGETS: usize = 24;

/// xorshift64*: a seeded source of logits and budgets, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Every single byte, JSON's punctuation and words, the corpus's pieces, and the end token
/// last: one token per byte always exists, and longer tokens cross structure as a real
/// vocabulary's do.
fn vocabulary() -> (Arc<TokenTrie>, u32) {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|byte| vec![byte]).collect();
    let pieces = [
        "{\"", "\"}", "\":", "\": ", "\", \"", "\",\"", "true", "false", "null", "12", "0.5", "-3", "[]", "{}", "[{",
        "}]", "  ", "\n", "\n  ", "abc", "\"a\"", "foo", "bar", "\"foo\"", "\"bar\"", "1e5", "\"\"", "}}", "]]", "::=",
        "e4", "Nf3", "O-O", "the ", " and", "int ", "();", "0,", "ab\"", "x\"}", "\"]", ", ", "=\"", "ç", "日本",
    ];
    tokens.extend(pieces.iter().map(|piece| piece.as_bytes().to_vec()));
    let eog = tokens.len() as u32;
    tokens.push(Vec::new());
    (Arc::new(TokenTrie::new(&tokens, &[eog])), eog)
}

/// The daemon sampler's loop over random logits with `budget` tokens; the bytes written.
fn generate(grammar: &Arc<CompiledGrammar>, trie: &Arc<TokenTrie>, eog: u32, budget: u32, rng: &mut Rng) -> Vec<u8> {
    let matcher = Matcher::new(grammar.clone(), trie.clone());
    let Some(mut constraint) = Constraint::new(Some(matcher), None) else { return Vec::new() };
    assert!(constraint.can_close_on_budget(), "every byte is a token here");
    let mut output = Vec::new();
    let vocab = trie.vocab_size();
    let mut logits = vec![0f32; vocab];
    for generated in 0..budget {
        constraint.set_tokens_left(budget - generated);
        for logit in &mut logits {
            *logit = (rng.below(1 << 20) as f32) / 1024.0;
        }
        // End tokens are drawn rarely, so that most generations meet their budget.
        logits[eog as usize] -= 900.0;
        let mut token = sample(&mut constraint, &logits);
        if token.is_some_and(|t| !constraint.fits_budget(t)) {
            token = sample(&mut constraint, &logits);
        }
        let Some(token) = token else { break };
        if token == eog {
            break;
        }
        if let Err(error) = constraint.commit(token) {
            panic!("committed a refused token: {error}");
        }
        output.extend_from_slice(trie.token_bytes(token).unwrap_or_default());
        if constraint.is_accepting() && !constraint.can_continue() {
            break;
        }
    }
    output
}

/// Greedy over the logits: the best token if allowed, else the best of the mask.
fn sample(constraint: &mut Constraint, logits: &[f32]) -> Option<u32> {
    let best = |allowed: &dyn Fn(u32) -> bool| {
        (0..logits.len() as u32).filter(|&t| allowed(t)).max_by(|&a, &b| logits[a as usize].total_cmp(&logits[b as usize]))
    };
    let first = best(&|_| true)?;
    if constraint.is_allowed(first) {
        return Some(first);
    }
    let mask = constraint.compute_mask().clone();
    best(&|t| mask.is_set(t))
}

/// Budgets between the shortest document's length in tokens (the fewest the constraint finds,
/// often fewer than its bytes) and three times it.
fn budgets(grammar: &Arc<CompiledGrammar>, trie: &Arc<TokenTrie>, count: usize, rng: &mut Rng) -> Vec<u32> {
    let fresh = Constraint::new(Some(Matcher::new(grammar.clone(), trie.clone())), None);
    let shortest = fresh.map_or(1, |mut fresh| fresh.closing_tokens()).clamp(1, 1 << 16);
    (0..count).map(|_| shortest + rng.below(u64::from(shortest) * 2 + 1) as u32).collect()
}

/// Assertions parsed but not enforced (and `oneOf`, read as `anyOf`): a schema holding one
/// is left out.
const UNENFORCED: &[&str] = &[
    "oneOf", "format", "uniqueItems", "prefixItems", "contains", "minContains", "maxContains", "minProperties",
    "maxProperties", "propertyNames", "dependentRequired",
];

/// The suite's schemas that compile with every assertion they hold enforced.
fn suite_schemas() -> Vec<(String, Value)> {
    let mut schemas = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(SUITE)
        .unwrap_or_else(|e| panic!("{SUITE}: {e}"))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let groups: Vec<Value> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (index, group) in groups.into_iter().enumerate() {
            let schema = group["schema"].clone();
            let report = review_schema(&schema);
            let unenforced = |o: &crate::schema::Occurrence| {
                o.verdict == Verdict::Refused || UNENFORCED.contains(&o.keyword.as_str())
            };
            if report.occurrences.iter().any(unenforced) {
                continue;
            }
            let name = format!("{}#{index}", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
            schemas.push((name, schema));
        }
    }
    schemas
}

#[test]
fn budgeted_generations_of_the_suites_schemas_validate() {
    let (trie, eog) = vocabulary();
    let mut rng = Rng(0x5eed_0065);
    let mut checked = 0;
    let mut closed_early = 0;
    let mut below_bytes = 0;
    for (name, schema) in suite_schemas() {
        let Ok(ir) = compile_schema(&schema) else { continue };
        let Ok(grammar) = CompiledGrammar::new(ir, &Limits::default()) else { continue };
        let grammar = Arc::new(grammar);
        if grammar.shortest_document().is_none() {
            // A schema no document satisfies (`false`, contradictory bounds), or none written
            // in the bytes an ending may use (`enum` of non-ASCII text).
            continue;
        }
        // A schema naming a metaschema the validator cannot fetch is left out.
        let Ok(validator) = jsonschema::validator_for(&schema) else { continue };
        for budget in budgets(&grammar, &trie, SCHEMA_BUDGETS, &mut rng) {
            let output = generate(&grammar, &trie, eog, budget, &mut rng);
            let text = String::from_utf8_lossy(&output).into_owned();
            assert_eq!(check_input(&grammar, &output), CheckOutcome::Match, "{name}, budget {budget}: {text:?}");
            let value: Value = match serde_json::from_str(&text) {
                Ok(value) => value,
                Err(e) if e.to_string().contains("number out of range") => continue,
                Err(e) => panic!("{name}, budget {budget}: {text:?} does not parse: {e}"),
            };
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .filter(|error| !float_rounding_artifact(error))
                .map(|error| error.to_string())
                .collect();
            assert!(errors.is_empty(), "{name}, budget {budget}: {text} does not validate: {errors:?}");
            checked += 1;
            below_bytes += usize::from(budget < grammar.shortest_document_len());
            closed_early += usize::from(output.len() as u32 >= budget.saturating_sub(2));
        }
    }
    assert!(checked > 300, "only {checked} generations checked");
    assert!(below_bytes > checked / 4, "only {below_bytes} of {checked} budgets were below the document's bytes");
    assert!(closed_early > checked / 10, "only {closed_early} of {checked} generations reached their budget");
}

#[test]
fn budgeted_generations_of_the_gbnf_corpus_match() {
    let (trie, eog) = vocabulary();
    let mut rng = Rng(0x6b6e_6600);
    let mut checked = 0;
    // Not `japanese`: its documents need characters outside the bytes an ending is written in
    // (see `automaton/distance.rs`), so no budget applies to it.
    let names = ["arithmetic", "c", "chess", "english", "json", "json_arr", "list"];
    for name in names {
        let source = std::fs::read(format!("{GRAMMARS}/{name}.gbnf")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let grammar = Arc::new(crate::compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}")));
        assert!(grammar.shortest_document().is_some(), "{name}: no ending in ASCII");
        for budget in budgets(&grammar, &trie, GRAMMAR_BUDGETS, &mut rng) {
            let output = generate(&grammar, &trie, eog, budget, &mut rng);
            assert_eq!(
                check_input(&grammar, &output),
                CheckOutcome::Match,
                "{name}, budget {budget}: {:?}",
                String::from_utf8_lossy(&output)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, names.len() * GRAMMAR_BUDGETS);
}

/// A vocabulary without a token of its own for bytes no ending is written in (SmolLM2 lacks
/// 0xF1 and 0xF2) still closes on budget; one without a single printable byte does not.
#[test]
fn a_budget_applies_where_every_byte_an_ending_uses_is_a_token() {
    let grammar = Arc::new(CompiledGrammar::new(crate::schema::any_json_object(), &Limits::default()).unwrap_or_else(|e| panic!("{e}")));
    let vocabulary = |missing: &[u8]| {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).filter(|b| !missing.contains(b)).map(|b| vec![b]).collect();
        tokens.push(b"ab".to_vec());
        let eog = tokens.len() as u32;
        tokens.push(Vec::new());
        Arc::new(TokenTrie::new(&tokens, &[eog]))
    };
    let closes = |trie: Arc<TokenTrie>| {
        Constraint::new(Some(Matcher::new(grammar.clone(), trie)), None).is_some_and(|c| c.can_close_on_budget())
    };
    assert!(closes(vocabulary(&[0xf1, 0xf2, 0x04])));
    assert!(!closes(vocabulary(&[b'}'])));
}

/// See `schema/tests.rs`: `multipleOf` checked in binary floating point.
fn float_rounding_artifact(error: &jsonschema::ValidationError) -> bool {
    let jsonschema::error::ValidationErrorKind::MultipleOf { multiple_of } = &error.kind else {
        return false;
    };
    crate::schema::is_decimal_multiple(&error.instance, *multiple_of)
}
