//! Every input a request can send compiles in bounded stack and memory: schemas and grammars
//! nested or chained far past the limits are refused with an error naming the limit and
//! where, on a thread whose stack is small, so a recursion that still grows with the input
//! fails these tests by overflowing rather than passing by luck.

use serde_json::{json, Value};

use crate::schema::{compile_schema, review_schema, SchemaError, MAX_SCHEMA_SYMBOLS};
use crate::{CompiledGrammar, Limits};

mod gbnf;
mod properties;

/// Stack for the compiling thread: far below the 2 MiB of an HTTP worker or a test thread.
pub(crate) const SMALL_STACK: usize = 256 * 1024;

/// Runs `work` on a thread with [`SMALL_STACK`] of stack; a stack overflow aborts the test run.
pub(crate) fn on_small_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let thread = std::thread::Builder::new().stack_size(SMALL_STACK).spawn(work).expect("spawn a thread");
    thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `d0.a -> d1.a -> ... -> d{length}`, each an object whose one property refers to the next.
pub(crate) fn reference_chain(length: usize) -> Value {
    let mut definitions = serde_json::Map::new();
    for index in 0..length {
        let next = format!("#/$defs/d{}", index + 1);
        definitions.insert(format!("d{index}"), json!({"type": "object", "properties": {"a": {"$ref": next}}}));
    }
    definitions.insert(format!("d{length}"), json!({"type": "string"}));
    json!({"$defs": definitions, "$ref": "#/$defs/d0"})
}

/// Compiles a schema to an automaton as a request does.
fn compile_whole(schema: &Value) -> Result<CompiledGrammar, String> {
    let ir = compile_schema(schema).map_err(|e| e.to_string())?;
    CompiledGrammar::new(ir, &Limits::default()).map_err(|e| e.to_string())
}

#[test]
fn a_reference_chain_past_the_depth_limit_is_refused_naming_the_limit_and_where() {
    for length in [550, 3_000, 100_000] {
        let refusal: SchemaError = on_small_stack(move || compile_schema(&reference_chain(length)))
            .map(|_| ())
            .expect_err("a chain past the limit compiles");
        assert_eq!(refusal.keyword, "$ref", "{refusal}");
        assert!(refusal.location.starts_with("$defs.d"), "{refusal}");
        assert!(refusal.to_string().contains("more than 64 deep"), "{refusal}");
        let report = on_small_stack(move || review_schema(&reference_chain(length)));
        assert_eq!(report.refusal.as_ref().map(|r| r.keyword.as_str()), Some("$ref"), "{length}");
    }
}

#[test]
fn a_reference_chain_within_the_limit_compiles_and_reads_its_documents() {
    let grammar = on_small_stack(|| compile_whole(&reference_chain(60))).expect("60 levels compile");
    let document = format!("{}\"x\"{}", "{\"a\":".repeat(60), "}".repeat(60));
    assert_eq!(crate::check_input(&grammar, document.as_bytes()), crate::CheckOutcome::Match);
}


/// A chain of `length` definitions, each holding the next the way `shape` says.
fn chain_of(length: usize, shape: impl Fn(Value) -> Value) -> Value {
    let mut definitions = serde_json::Map::new();
    for index in 0..length {
        definitions.insert(format!("d{index}"), shape(json!({"$ref": format!("#/$defs/d{}", index + 1)})));
    }
    definitions.insert(format!("d{length}"), json!({"type": "integer"}));
    json!({"$defs": definitions, "$ref": "#/$defs/d0"})
}

#[test]
fn every_way_of_nesting_is_held_to_the_depth_limit() {
    let shapes: Vec<(&str, fn(Value) -> Value)> = vec![
        ("items", |next| json!({"type": "array", "items": next})),
        ("anyOf", |next| json!({"anyOf": [next, {"type": "null"}]})),
        ("oneOf inside allOf", |next| json!({"allOf": [{"oneOf": [next, {"type": "string"}]}]})),
        ("additionalProperties", |next| json!({"type": "object", "additionalProperties": next})),
        ("patternProperties", |next| json!({"type": "object", "patternProperties": {"^x": next}})),
        ("properties beside anyOf", |next| json!({"properties": {"p": next}, "anyOf": [{"required": ["p"]}, {}]})),
    ];
    for (name, shape) in shapes {
        let refusal = on_small_stack(move || compile_schema(&chain_of(5_000, shape)))
            .map(|_| ())
            .expect_err(name);
        assert!(refusal.to_string().contains("more than 64 deep"), "{name}: {refusal}");
        assert!(refusal.location.starts_with("$defs.d"), "{name}: {refusal}");
        on_small_stack(move || compile_whole(&chain_of(20, shape))).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Many single-alternative choices side by side split one inside the other.
    let side_by_side = json!({"allOf": vec![json!({"anyOf": [{"type": "integer"}]}); 500]});
    let refusal = on_small_stack(move || compile_schema(&side_by_side)).map(|_| ()).expect_err("500 splits");
    assert_eq!(refusal.keyword, "anyOf", "{refusal}");
}

#[test]
fn a_recursive_reference_compiles_once_and_nests_as_deep_as_the_automaton_allows() {
    let tree = json!({"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["kids"]}},
                      "$ref": "#/$defs/node"});
    let grammar = on_small_stack(move || compile_whole(&tree)).expect("a tree compiles");
    let nested = |depth: usize| format!("{}{}", "{\"kids\":[".repeat(depth), "]}".repeat(depth));
    assert_eq!(crate::check_input(&grammar, nested(200).as_bytes()), crate::CheckOutcome::Match);
    let too_deep = crate::check_input(&grammar, nested(2_000).as_bytes());
    assert!(
        matches!(&too_deep, crate::CheckOutcome::Mismatch { expected, .. } if expected.contains("nesting deeper than 1024 open rules")),
        "{too_deep:?}"
    );
}

#[test]
fn what_grows_with_the_schema_text_is_refused_before_it_is_built() {
    let big = "x".repeat(7_000_000);
    let error = compile_schema(&json!({"type": "object", "properties": {"a": {"const": big}}}))
        .map(|_| ())
        .expect_err("a 7 MB const compiles");
    assert_eq!((error.keyword.as_str(), error.location.as_str()), ("const", "properties.a"), "{error}");
    assert!(error.message.contains(&MAX_SCHEMA_SYMBOLS.to_string()), "{error}");
    // Refused with next to nothing built: the value was measured, not expanded.
    let built: usize = error.message.split(" to the ").nth(1).and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse().ok()).expect("a count");
    assert!(built < 1_000, "{error}");

    let members: Vec<String> = (0..30).map(|i| format!("{i}{}", "y".repeat(100_000))).collect();
    let error = compile_schema(&json!({"enum": members})).map(|_| ()).expect_err("3 MB of enum members compile");
    assert_eq!(error.keyword, "enum", "{error}");

    let long_name = "k".repeat(2_000_000);
    let error = compile_schema(&json!({"properties": {long_name: {"type": "integer"}}})).map(|_| ()).expect_err("a 2 MB name compiles");
    assert_eq!(error.keyword, "properties", "{error}");
    // Within the budget, a long literal still compiles, and one built already costs nothing
    // more where it is used again.
    compile_whole(&json!({"const": "z".repeat(100_000)})).expect("a 100 kB const compiles");
    let reused = json!({"$defs": {"big": {"const": "q".repeat(1_200_000)}}, "type": "object", "properties": {
        "a": {"$ref": "#/$defs/big"}, "b": {"allOf": [{"$ref": "#/$defs/big"}, {"minLength": 1}]}}});
    compile_schema(&reused).map(|_| ()).unwrap_or_else(|e| panic!("a 1.2 MB const used twice: {e}"));
}

#[test]
fn a_schema_document_nested_past_the_parsers_limit_is_refused_naming_where() {
    let mut deep = json!("leaf");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let schema = json!({"properties": {"a": {"const": deep}}});
    let error = on_small_stack(move || compile_schema(&schema)).map(|_| ()).expect_err("200 levels compile");
    assert!(error.message.contains("more than 128 deep"), "{error}");
    assert!(error.location.starts_with("properties.a.const.0.0"), "{error}");
}

/// Patterns are parsed by regex-syntax, whose nesting limit (250) bounds every walk over them,
/// ours and the DFA compiler's: as a pattern, as a key pattern, and checking enum members.
#[test]
fn patterns_nested_deep_compile_or_are_refused_in_bounded_stack() {
    for depth in [200, 249, 250, 1_000, 100_000] {
        let pattern = format!("^{}a{}$", "(".repeat(depth), ")*".repeat(depth));
        let schema = json!({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern},
                                                             "e": {"pattern": pattern, "enum": ["a", "b"]}},
                            "patternProperties": {pattern.clone(): {"type": "integer"}}});
        let compiled = on_small_stack(move || compile_whole(&schema));
        if let Err(refusal) = compiled {
            assert!(refusal.contains("pattern"), "{depth}: {refusal}");
        }
    }
}
