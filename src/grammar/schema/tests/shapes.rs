//! Unit tests for the shapes the compiler emits so the automaton reads them cheaply: bounded
//! numbers as one minimal digit automaton, a choice between closed objects as one object;
//! each with the language it must keep.

use serde_json::{json, Value};

use crate::schema::compile_schema;
use super::{assert_accepts, assert_rejects, schema};
use crate::ir::Grammar;

/// The digit rules of a compiled number: each alternative is empty or one byte set then a
/// rule, and no byte leads two ways from one rule (so a digit read leaves one parse stack).
fn deterministic_digit_rules(grammar: &Grammar) -> usize {
    use crate::ir::{ByteSet, Symbol};
    let digit_rules: Vec<_> = grammar.rules.iter().filter(|rule| rule.name.ends_with("-digit")).collect();
    for rule in &digit_rules {
        let mut seen = ByteSet::EMPTY;
        for alternative in &rule.alternatives {
            match alternative.as_slice() {
                [] => {}
                [Symbol::Bytes(bytes), Symbol::Rule(_)] => {
                    assert!(seen.intersect(bytes).is_empty(), "{} reads a byte two ways", rule.name);
                    seen = seen.union(bytes);
                }
                other => panic!("{} has the alternative {other:?}", rule.name),
            }
        }
    }
    digit_rules.len()
}

#[test]
fn bounded_numbers_are_one_minimal_digit_automaton() {
    let compile = |value: Value| match compile_schema(&value) {
        Ok(grammar) => grammar,
        Err(error) => panic!("schema refused: {error}"),
    };
    // [0, 10^18): `0`, or up to 18 digits not starting with 0: the DFA's states are the
    // start, `0`, and one per count of digits after the first.
    let non_negative = compile(json!({"type": "integer", "minimum": 0}));
    assert_eq!(deterministic_digit_rules(&non_negative), 19);
    for value in [
        json!({"type": "integer", "minimum": -15, "maximum": 1234}),
        json!({"type": "integer", "multipleOf": 3, "minimum": 10, "maximum": 1000}),
        json!({"type": "integer", "minimum": 1, "maximum": 64}),
        json!({"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25}),
        json!({"type": "number", "exclusiveMinimum": 0}),
    ] {
        assert!(deterministic_digit_rules(&compile(value.clone())) > 0, "{value}");
    }
    let small = schema(json!({"type": "integer", "minimum": 1, "maximum": 64}));
    assert_accepts(&small, &["1", "9", "10", "19", "60", "64"]);
    assert_rejects(&small, &["0", "65", "100", "01", "640"]);
}

#[test]
fn any_of_closed_objects_reads_as_one_object_with_the_same_language() {
    let merged = |value: &Value| match compile_schema(value) {
        Ok(grammar) => grammar.rules.iter().filter(|rule| rule.name == "object-union").count(),
        Err(error) => panic!("schema refused: {error}"),
    };
    let artifact_schema = json!({
        "definitions": {"sync": {"type": "object", "additionalProperties": {"type": "string"}}},
        "anyOf": [
            {"properties": {"image": {"type": "string"}, "context": {"type": "string"}}, "required": ["image"], "additionalProperties": false},
            {"properties": {"image": {"type": "string"}, "context": {"type": "string"}, "docker": {"type": "object", "properties": {"file": {"type": "string"}}, "additionalProperties": false}}, "additionalProperties": false},
            {"properties": {"image": {"type": "string"}, "bazel": {"type": "integer"}}, "required": ["bazel"], "additionalProperties": false},
            {"properties": {"image": {"type": "integer"}, "sync": {"$ref": "#/definitions/sync"}}, "additionalProperties": false},
            {"type": "null"}
        ]
    });
    assert_eq!(merged(&artifact_schema), 1);
    // The walk fixture (tests.rs) that checks documents against a validator is one such choice.
    let fixture: Value = serde_json::from_str(include_str!("../../../../testdata/schemas/object_union.json")).expect("fixture");
    assert_eq!(merged(&fixture), 1);
    let artifact = schema(artifact_schema);
    assert_accepts(&artifact, &[
        r#"{"image":"a"}"#,
        r#"{"context":".","image":"a"}"#,
        r#"{"image":"a","context":".","docker":{"file":"f"}}"#,
        r#"{"docker":{}}"#,
        r#"{}"#,
        r#"{"bazel":1,"image":"x"}"#,
        r#"{"image":3,"sync":{"a":"b"}}"#,
        r#"{"sync":{}}"#,
        r#"{ "image" : "a" , "context" : "." }"#,
        "null",
    ]);
    assert_rejects(&artifact, &[
        // Keys of two alternatives that no one alternative has.
        r#"{"docker":{},"bazel":1}"#,
        r#"{"context":".","bazel":1}"#,
        r#"{"image":"a","sync":{}}"#,
        // A value only another alternative allows for this key set.
        r#"{"image":3,"context":"."}"#,
        r#"{"bazel":1,"image":2}"#,
        // The same key twice; a value of the wrong type; a key no alternative has.
        r#"{"image":"a","image":"b"}"#,
        r#"{"bazel":"1"}"#,
        r#"{"other":1}"#,
        "1",
    ]);
    // Many properties: declared order, each alternative its own positions.
    let names = ["a", "b", "c", "d", "e", "f", "g"];
    let object = |extra: &str, required: &str| {
        let mut properties = serde_json::Map::new();
        for name in names.iter().chain([&extra]) {
            properties.insert(name.to_string(), json!({"type": "integer"}));
        }
        json!({"type": "object", "properties": properties, "required": [required], "additionalProperties": false})
    };
    let ordered_schema = json!({"oneOf": [object("x", "a"), object("y", "y")]});
    assert_eq!(merged(&ordered_schema), 1);
    let ordered = schema(ordered_schema);
    assert_accepts(&ordered, &[r#"{"a":1,"c":2,"x":3}"#, r#"{"b":1,"y":2}"#, r#"{"a":1,"y":2}"#, r#"{"y":1}"#]);
    assert_rejects(&ordered, &[r#"{"b":1,"x":2}"#, r#"{"c":1,"a":2}"#, r#"{"a":1,"x":2,"y":3}"#, r#"{}"#, r#"{"b":1}"#]);
}
