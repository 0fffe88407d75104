//! Random schemas and grammars nested far past the limits compile or are refused cleanly,
//! never panic and never overflow, on a small stack.
//!
//! Schemas are chains of definitions, each wrapping a reference to the next in a random
//! shape (a property, items, anyOf/oneOf/allOf, additionalProperties, patternProperties,
//! several shapes inline), some referring back to make cycles, with random leaves; chains run
//! to 3,000 links, far past the nesting limit. Grammars nest parentheses and chain rules to
//! random depths, with repetitions of things that may match nothing.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

use super::on_small_stack;
use crate::gbnf::compile_gbnf;
use crate::schema::{compile_schema, review_schema};
use crate::{check_input, CompiledGrammar, Limits};

/// How one definition holds the next: shape index, and a second value used by some shapes.
fn wrap(shape: u8, extra: u8, next: Value) -> Value {
    match shape % 9 {
        0 => json!({"type": "object", "properties": {"p": next}, "required": ["p"]}),
        1 => json!({"type": "array", "items": next, "maxItems": extra % 4}),
        2 => json!({"anyOf": [next, {"type": "null"}]}),
        3 => json!({"oneOf": [{"type": "string", "maxLength": extra % 5}, next]}),
        4 => json!({"allOf": [next, {"minimum": extra}]}),
        5 => json!({"type": "object", "additionalProperties": next}),
        6 => json!({"type": "object", "patternProperties": {"^k": next}}),
        7 => json!({"properties": {"a": next}, "anyOf": [{"required": ["a"]}, {}]}),
        _ => json!({"items": {"items": {"anyOf": [next]}}}),
    }
}

fn leaf(kind: u8) -> Value {
    match kind % 7 {
        0 => json!({"type": "string"}),
        1 => json!({"type": "integer", "minimum": -5, "maximum": 500}),
        2 => json!({"type": "number", "exclusiveMinimum": 0, "maximum": 0.5}),
        3 => json!({"enum": ["a", 1, null, {"k": [true]}]}),
        4 => json!({"type": "string", "pattern": "^[a-c]{1,3}$"}),
        5 => json!({"not": {"type": "string"}}),
        _ => json!(false),
    }
}

/// A chain of `links`: (shape, extra, refer back to this earlier link instead of the next?).
fn chain_schema(links: &[(u8, u8, Option<u16>)], end: u8) -> Value {
    let mut definitions = serde_json::Map::new();
    for (index, &(shape, extra, back)) in links.iter().enumerate() {
        let target = match back {
            Some(back) if index > 0 => usize::from(back) % index,
            _ => index + 1,
        };
        let next = json!({"$ref": format!("#/$defs/d{target}")});
        definitions.insert(format!("d{index}"), wrap(shape, extra, next));
    }
    definitions.insert(format!("d{}", links.len()), leaf(end));
    json!({"$defs": definitions, "$ref": "#/$defs/d0"})
}

/// Links of a chain: short ones, and long ones with no way back (nested as deep as they are
/// long) or with a rare one (a cycle somewhere along them).
fn links() -> impl Strategy<Value = Vec<(u8, u8, Option<u16>)>> {
    let link = |back: f64| (any::<u8>(), any::<u8>(), proptest::option::weighted(back, any::<u16>()));
    let straight = (any::<u8>(), any::<u8>(), Just(None));
    prop_oneof![
        proptest::collection::vec(link(0.05), 0..80),
        proptest::collection::vec(straight, 60..3_000),
        proptest::collection::vec(link(0.002), 60..3_000),
    ]
}

#[test]
fn random_deep_schemas_compile_or_are_refused_never_overflow() {
    on_small_stack(|| {
        let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
        let outcome = runner.run(&(links(), any::<u8>()), |(links, end)| {
            let schema = chain_schema(&links, end);
            let report = review_schema(&schema);
            match compile_schema(&schema) {
                Ok(ir) => {
                    prop_assert!(report.refusal.is_none(), "the review refused what compiled: {:?}", report.refusal);
                    if let Ok(grammar) = CompiledGrammar::new(ir, &Limits::default()) {
                        for text in ["{\"p\":", "[[[[", "null", "{\"a\":{\"a\":1}}"] {
                            let _ = check_input(&grammar, text.as_bytes());
                        }
                    }
                }
                Err(refusal) => {
                    prop_assert!(!refusal.keyword.is_empty() && !refusal.message.is_empty(), "{refusal:?}");
                    prop_assert_eq!(report.refusal.as_ref(), Some(&refusal));
                }
            }
            Ok(())
        });
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
    });
}

/// A grammar: `depth` parentheses around an item, `rules` rules chained before or after
/// their byte, and a repetition operator on each group.
fn grammar_source(depth: usize, rules: usize, called_first: bool, operators: &[u8]) -> String {
    let operator = |index: usize| ["", "*", "+", "?", "{0,2}", "{1,}"][usize::from(operators[index % operators.len()]) % 6];
    let mut body = String::from("(\"x\"? | [a-c])");
    for level in 0..depth {
        body = format!("({body}{} \"y\")", operator(level));
    }
    let mut source = format!("root ::= {body} r0\n");
    for index in 0..rules {
        let call = format!("r{}{}", index + 1, operator(index));
        let line = if called_first { format!("r{index} ::= {call} \"z\"\n") } else { format!("r{index} ::= \"z\" {call}\n") };
        source.push_str(&line);
    }
    source.push_str(&format!("r{rules} ::= \"end\" | \"\"\n"));
    source
}

#[test]
fn random_deep_grammars_compile_or_are_refused_never_overflow() {
    on_small_stack(|| {
        let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
        let strategy = (0usize..600, 0usize..3_000, any::<bool>(), proptest::collection::vec(any::<u8>(), 1..8));
        let outcome = runner.run(&strategy, |(depth, rules, called_first, operators)| {
            let source = grammar_source(depth, rules, called_first, &operators);
            match compile_gbnf(source.as_bytes(), &Limits::default()) {
                Ok(grammar) => {
                    for text in ["x", "yyz", "zzzend", "abcyz"] {
                        let _ = check_input(&grammar, text.as_bytes());
                    }
                }
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
            Ok(())
        });
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
    });
}
