//! Unit tests: every keyword enforced, every refusal naming keyword and location; the number
//! rules (`numbers`) and the shapes the compiler emits (`shapes`) in modules of their own.

mod numbers;
mod shapes;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::json::{canonical_escape, grouped_escapes};
use super::{any_json, any_json_object, compile_schema, review_schema, Verdict};
use crate::automaton::CompiledGrammar;
use crate::check::{check_input, CheckOutcome};
use crate::ir::{Grammar, Symbol};
use crate::limits::Limits;

fn compiled(grammar: Grammar) -> CompiledGrammar {
    match CompiledGrammar::new(grammar, &Limits::default()) {
        Ok(compiled) => compiled,
        Err(error) => panic!("the automaton refused the grammar: {error}"),
    }
}

pub(super) fn schema(schema: Value) -> CompiledGrammar {
    match compile_schema(&schema) {
        Ok(grammar) => compiled(grammar),
        Err(error) => panic!("schema refused: {error}"),
    }
}

fn accepts(grammar: &CompiledGrammar, text: &str) -> bool {
    check_input(grammar, text.as_bytes()) == CheckOutcome::Match
}

pub(super) fn assert_accepts(grammar: &CompiledGrammar, docs: &[&str]) {
    for doc in docs {
        assert_eq!(check_input(grammar, doc.as_bytes()), CheckOutcome::Match, "should accept {doc}");
    }
}

pub(super) fn assert_rejects(grammar: &CompiledGrammar, docs: &[&str]) {
    for doc in docs {
        assert!(!accepts(grammar, doc), "should reject {doc}");
    }
}

fn refusal(schema: Value) -> super::SchemaError {
    match compile_schema(&schema) {
        Ok(_) => panic!("schema should be refused: {schema}"),
        Err(error) => error,
    }
}

#[test]
fn any_json_accepts_json_and_rejects_the_rest() {
    let grammar = compiled(any_json());
    assert_accepts(
        &grammar,
        &[
            "{}", "[]", "0", "-1.5e+3", "\"a\\u00e9\\n\\\"\"", "true", "null",
            "{\"a\": [1, 2, {\"b\": null}], \"c\": \"\u{e9}\u{1F600}\"}",
            " { }", "\"\\ud83d\\ude00\"",
        ],
    );
    assert_rejects(&grammar, &["{", "01", "[1,]", "{\"a\"}", "\"\\x\"", "tru", "\"\\ud800\"", "1.", "\"a\nb\""]);
}

#[test]
fn json_mode_is_an_object_at_the_top_level_with_any_json_inside() {
    let grammar = compiled(any_json_object());
    assert_accepts(
        &grammar,
        &["{}", " { }", "{\"a\": [1, 2, {\"b\": null}], \"c\": \"x\"}", "{\"n\": -1.5e+3, \"t\": true}"],
    );
    assert_rejects(&grammar, &["1.1121111111111111E+00", "[]", "[{}]", "\"a\"", "null", "true", "{", "{\"a\"}"]);
    // The same bounds as any JSON: number digits and the whitespace budget.
    assert!(!accepts(&grammar, "{\"a\": 12345678901234567}"));
    assert!(accepts(&grammar, &format!("{{{}\"a\": 1}}", " ".repeat(60))));
    assert!(!accepts(&grammar, &format!("{{{}\"a\": 1}}", " ".repeat(70))));
}

#[test]
fn whitespace_beyond_the_budget_is_rejected() {
    let grammar = compiled(any_json());
    let within = format!("[{}1]", " ".repeat(60));
    let beyond = format!("[{}1]", " ".repeat(70));
    assert!(accepts(&grammar, &within));
    assert!(!accepts(&grammar, &beyond));
}

#[test]
fn types_one_or_a_list() {
    let grammar = schema(json!({"type": ["string", "null"]}));
    assert_accepts(&grammar, &["\"x\"", "null", " \n null"]);
    assert_rejects(&grammar, &["1", "{}", "true"]);
    let integer = schema(json!({"type": "integer"}));
    assert_accepts(&integer, &["0", "-12", "123456789012345678901234"]);
    assert_rejects(&integer, &["1.5", "\"1\"", "01", "1e3"]);
    let boolean = schema(json!({"type": "boolean"}));
    assert_accepts(&boolean, &["true", "false"]);
    assert_rejects(&boolean, &["null", "0"]);
}

#[test]
fn properties_imply_object_and_are_closed_by_default() {
    let grammar = schema(json!({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}));
    assert_accepts(&grammar, &["{\"a\": 1}", "{\"a\":1,\"b\":\"x\"}", "{\"b\": \"x\", \"a\": 1}", "{ \"a\" : 1 }"]);
    assert_rejects(&grammar, &["{}", "{\"b\":\"x\"}", "{\"a\":1,\"c\":2}", "{\"a\":\"1\"}", "{\"a\":1,\"a\":1}", "[]"]);
}

#[test]
fn additional_properties_true_opens_and_a_schema_constrains_extras() {
    let open = schema(json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true}));
    assert_accepts(&open, &["{\"a\":1,\"zz\":[1]}", "{\"zz\":null}", "{\"ab\":1}", "{\"\":1}"]);
    assert_rejects(&open, &["{\"a\":\"no\"}", "{\"zz\":1,\"a\":\"x\"}"]);
    let typed = schema(json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}));
    assert_accepts(&typed, &["{\"a\":1,\"b\":true}", "{\"b\":false}"]);
    assert_rejects(&typed, &["{\"b\":1}", "{\"a\":true}"]);
    let none = schema(json!({"type": "object"}));
    assert_accepts(&none, &["{\"x\":{\"y\":[1,2]}}", "{}"]);
}

#[test]
fn many_properties_take_declared_order() {
    let mut properties = serde_json::Map::new();
    for name in ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"] {
        properties.insert(name.to_string(), json!({"type": "integer"}));
    }
    let grammar = schema(json!({"type": "object", "properties": properties, "required": ["p1", "p6"]}));
    assert_accepts(&grammar, &["{\"p1\":1,\"p6\":2}", "{\"p0\":0,\"p1\":1,\"p2\":2,\"p6\":6,\"p7\":7}"]);
    assert_rejects(&grammar, &["{\"p6\":2,\"p1\":1}", "{\"p1\":1}", "{\"p1\":1,\"p6\":2,\"p9\":0}"]);
}

#[test]
fn items_min_and_max_items() {
    let grammar = schema(json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}));
    assert_accepts(&grammar, &["[1]", "[1, 2, 3]", "[ 1 ]"]);
    assert_rejects(&grammar, &["[]", "[1,2,3,4]", "[\"a\"]", "[1,]"]);
    let implied = schema(json!({"items": {"type": "string"}}));
    assert_accepts(&implied, &["[]", "[\"a\",\"b\"]"]);
    assert_rejects(&implied, &["{}", "[1]"]);
    let forbidden = schema(json!({"type": "array", "items": false}));
    assert_accepts(&forbidden, &["[]"]);
    assert_rejects(&forbidden, &["[1]"]);
}

#[test]
fn enum_and_const_with_members_other_keywords_rule_out_dropped() {
    let grammar = schema(json!({"enum": ["a", 1, null, {"k": [true]}]}));
    assert_accepts(&grammar, &["\"a\"", "1", "1.0", "null", "{\"k\":[true]}", "{ \"k\" : [ true ] }"]);
    assert_rejects(&grammar, &["\"b\"", "2", "{\"k\":[false]}"]);
    let typed = schema(json!({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1}));
    assert_accepts(&typed, &["\"a\""]);
    assert_rejects(&typed, &["1", "\"bb\""]);
    let object = schema(json!({"const": {"a": 1, "b": [2], "c": null}}));
    assert_accepts(&object, &["{\"c\":null,\"a\":1,\"b\":[2]}", "{\"a\":1,\"b\":[2],\"c\":null}"]);
    assert_rejects(&object, &["{\"a\":1,\"b\":[2]}", "{\"a\":1,\"a\":1,\"c\":null}"]);
    let constant = schema(json!({"const": "x\"y"}));
    assert_accepts(&constant, &["\"x\\\"y\""]);
    assert_rejects(&constant, &["\"xy\""]);
}

#[test]
fn lengths_count_characters_not_bytes() {
    let grammar = schema(json!({"type": "string", "minLength": 2, "maxLength": 3}));
    assert_accepts(&grammar, &["\"ab\"", "\"\u{e9}\u{e9}\u{e9}\"", "\"a\\n\"", "\"\\u00e9x\""]);
    assert_rejects(&grammar, &["\"a\"", "\"abcd\"", "\"\u{e9}\""]);
}

#[test]
fn patterns_are_unanchored_unless_anchored() {
    let anchored = schema(json!({"type": "string", "pattern": "^[0-9]{5}$"}));
    assert_accepts(&anchored, &["\"69001\""]);
    assert_rejects(&anchored, &["\"6900\"", "\"690012\"", "\"a69001\""]);
    let unanchored = schema(json!({"type": "string", "pattern": "ab+"}));
    assert_accepts(&unanchored, &["\"xxabbby\"", "\"ab\""]);
    assert_rejects(&unanchored, &["\"a\"", "\"ba\""]);
    let quoted = schema(json!({"type": "string", "pattern": "^\"\\\\\\n$"}));
    assert_accepts(&quoted, &["\"\\\"\\\\\\n\""]);
    let re2_classes = schema(json!({"type": "string", "pattern": "^\\d[\\w\\s]$"}));
    assert_accepts(&re2_classes, &["\"1a\"", "\"9 \""]);
    assert_rejects(&re2_classes, &["\"\u{661}a\"", "\"1\u{e9}\""]);
    let unicode = schema(json!({"type": "string", "pattern": "^.$"}));
    assert_accepts(&unicode, &["\"\u{e9}\"", "\"\u{1F600}\""]);
    assert_rejects(&unicode, &["\"ab\""]);
}

#[test]
fn pattern_and_length_bounds_intersect() {
    let grammar = schema(json!({"type": "string", "pattern": "^a*$", "minLength": 2, "maxLength": 3}));
    assert_accepts(&grammar, &["\"aa\"", "\"aaa\""]);
    assert_rejects(&grammar, &["\"a\"", "\"aaaa\"", "\"ab\""]);
}

#[test]
fn integer_bounds_are_exact() {
    let grammar = schema(json!({"type": "integer", "minimum": -15, "maximum": 1234}));
    assert_accepts(&grammar, &["-15", "-1", "0", "9", "10", "999", "1234", "1000"]);
    assert_rejects(&grammar, &["-16", "1235", "2000", "12345", "-100", "01", "1.5"]);
    let exclusive = schema(json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100}));
    assert_accepts(&exclusive, &["1", "99"]);
    assert_rejects(&exclusive, &["0", "100"]);
    let wide = schema(json!({"type": "integer", "minimum": 5}));
    assert_accepts(&wide, &["5", "999999999999999999"]);
    assert_rejects(&wide, &["4", "-5"]);
    let fractional_bounds = schema(json!({"type": "integer", "minimum": 1.5, "maximum": 3.5}));
    assert_accepts(&fractional_bounds, &["2", "3"]);
    assert_rejects(&fractional_bounds, &["1", "4"]);
}

#[test]
fn decimal_bounds_are_exact_without_exponent() {
    let grammar = schema(json!({"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25}));
    assert_accepts(&grammar, &["-1.5", "-1.49", "0", "2", "2.2499", "1.000", "-0.5"]);
    assert_rejects(&grammar, &["-1.51", "2.25", "2.250", "3", "1e0", "-2"]);
    let positive = schema(json!({"type": "number", "exclusiveMinimum": 0}));
    assert_accepts(&positive, &["0.001", "5", "123.25"]);
    assert_rejects(&positive, &["0", "0.000", "-0.1"]);
}

#[test]
fn multiple_of_on_integers_any_step() {
    let grammar = schema(json!({"type": "integer", "multipleOf": 7}));
    assert_accepts(&grammar, &["0", "7", "-14", "700000000000007"]);
    assert_rejects(&grammar, &["1", "8", "-13", "700000000000008"]);
    let hundreds = schema(json!({"type": "integer", "multipleOf": 100, "minimum": 0}));
    assert_accepts(&hundreds, &["0", "100", "123400", "99999999999999999999900"]);
    assert_rejects(&hundreds, &["150", "-100", "00"]);
    let positive = schema(json!({"type": "integer", "multipleOf": 5, "minimum": 1}));
    assert_accepts(&positive, &["5", "1000"]);
    assert_rejects(&positive, &["0", "-5", "7"]);
    let wide = schema(json!({"type": "integer", "multipleOf": 250, "minimum": -1000000, "maximum": 999_999_999_999i64}));
    assert_accepts(&wide, &["-1000000", "-250", "0", "999999999750"]);
    assert_rejects(&wide, &["-1000250", "999999999999", "125"]);
    let bounded = schema(json!({"type": "integer", "multipleOf": 3, "minimum": 10, "maximum": 1000}));
    assert_accepts(&bounded, &["12", "999"]);
    assert_rejects(&bounded, &["9", "1002", "13"]);
}

#[test]
fn multiple_of_on_numbers_whole_or_power_of_ten() {
    let cents = schema(json!({"type": "number", "minimum": 0, "multipleOf": 0.01}));
    assert_accepts(&cents, &["4.50", "4.5", "0", "12"]);
    assert_rejects(&cents, &["4.505", "-1"]);
    let whole = schema(json!({"type": "number", "multipleOf": 5}));
    assert_accepts(&whole, &["10", "-5"]);
    assert_rejects(&whole, &["7", "2.5"]);
}

#[test]
fn local_refs_and_recursion() {
    let grammar = schema(json!({
        "$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}},
        "$ref": "#/$defs/node"
    }));
    assert_accepts(&grammar, &["{\"value\":1}", "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3}]}]}"]);
    assert_rejects(&grammar, &["{\"value\":1,\"children\":[{}]}"]);
    let definitions = schema(json!({"definitions": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/definitions/a"}}}));
    assert_accepts(&definitions, &["{\"x\":\"s\"}"]);
    assert_rejects(&definitions, &["{\"x\":1}"]);
}

#[test]
fn any_of_merges_sibling_keywords_into_each_alternative() {
    let grammar = schema(json!({"type": "string", "anyOf": [{"maxLength": 1}, {"pattern": "^x+$"}]}));
    assert_accepts(&grammar, &["\"a\"", "\"xxxx\""]);
    assert_rejects(&grammar, &["\"ab\"", "1"]);
    let one_of = schema(json!({"oneOf": [{"type": "integer"}, {"type": "null"}]}));
    assert_accepts(&one_of, &["1", "null"]);
    assert_rejects(&one_of, &["\"a\""]);
}

#[test]
fn all_of_is_merged() {
    let grammar = schema(json!({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
        {"properties": {"a": {"maximum": 10}, "b": {"type": "string"}}, "additionalProperties": true}
    ]}));
    assert_accepts(&grammar, &["{\"a\":5}", "{\"a\":10,\"b\":\"x\"}"]);
    assert_rejects(&grammar, &["{\"a\":11}", "{\"a\":-1}", "{\"b\":\"x\"}", "{\"a\":1,\"c\":1}"]);
}

fn assert_refused(value: Value, keyword: &str, location: &str) {
    let error = refusal(value);
    assert_eq!((error.keyword.as_str(), error.location.as_str()), (keyword, location), "{error}");
    let text = error.to_string();
    assert!(text.contains(keyword) && text.contains(location), "{text}");
}

#[test]
fn refusals_name_the_keyword_and_where() {
    assert_refused(json!({"properties": {"a": {"not": {"type": "string"}}}}), "not", "properties.a");
    assert_refused(json!({"if": {"type": "string"}, "then": {"minLength": 1}}), "if", "(root)");
    assert_refused(json!({"type": "object", "patternProperties": {"(?=x)": {}}}), "patternProperties", "(root)");
    assert_refused(json!({"properties": {"t": {"items": [{"type": "string"}]}}}), "items", "properties.t");
    assert_refused(json!({"properties": {"r": {"$ref": "https://example.com/s.json"}}}), "$ref", "properties.r");
    assert_refused(json!({"$defs": {"a": {"$anchor": "x"}}, "$ref": "#/$defs/a"}), "$anchor", "$defs.a");
    assert_refused(json!({"properties": {"p": {"type": "string", "pattern": "(?=a)b"}}}), "pattern", "properties.p");
    assert_refused(json!({"properties": {"p": {"type": "string", "pattern": "\\bword"}}}), "pattern", "properties.p");
    assert_refused(json!({"properties": {"p": {"type": "string", "pattern": "(?m)^a$"}}}), "pattern", "properties.p");
    assert_refused(json!({"properties": {"n": {"type": "number", "multipleOf": 0.3}}}), "multipleOf", "properties.n");
    assert_refused(json!({"allOf": [{"type": "string"}, {"type": "integer"}]}), "allOf", "(root)");
    assert_refused(json!({"properties": {"n": {"allOf": [{"type": "string"}, {"type": "integer"}]}}}), "allOf", "properties.n");
    assert_refused(json!({"properties": {"a": {}}, "required": ["b"]}), "required", "(root)");
    assert_refused(json!({"properties": {"i": {"type": "integer", "minimum": 1e30}}}), "minimum", "properties.i");
    assert_refused(json!({"properties": {"s": {"minLength": 100000}}}), "minLength", "properties.s");
    assert_refused(json!({"properties": {"i": {"type": "integer", "multipleOf": 999983}}}), "multipleOf", "properties.i");
    assert_refused(json!({"unevaluatedProperties": false}), "unevaluatedProperties", "(root)");
    assert_refused(json!({"dependentSchemas": {"a": {}}}), "dependentSchemas", "(root)");
    assert_refused(json!({"$dynamicRef": "#meta"}), "$dynamicRef", "(root)");
    assert_refused(json!({"anyOf": [{"not": {}}]}), "not", "anyOf.0");
}

#[test]
fn refusal_message_is_the_specs() {
    let error = refusal(json!({"properties": {"a": {"not": {}}}}));
    assert_eq!(
        error.to_string(),
        "properties.a uses \"not\", which llamay's constraint cannot honour; send a schema without it rather than one that is silently not enforced"
    );
}

#[test]
fn ignored_keywords_are_listed_not_enforced() {
    let value = json!({"type": "array", "uniqueItems": true, "items": {"type": "string", "format": "email"}, "title": "t"});
    let grammar = schema(value.clone());
    assert_accepts(&grammar, &["[\"a\",\"a\"]"]);
    let report = review_schema(&value);
    let ignored: Vec<(&str, &str)> =
        report.with_verdict(Verdict::Ignored).map(|o| (o.keyword.as_str(), o.location.as_str())).collect();
    assert_eq!(ignored.len(), 3, "{ignored:?}");
    for expected in [("uniqueItems", "(root)"), ("format", "items"), ("title", "(root)")] {
        assert!(ignored.contains(&expected), "{expected:?} missing from {ignored:?}");
    }
    assert!(report.with_verdict(Verdict::Enforced).any(|o| o.keyword == "type" && o.location == "items"));
    assert!(!report.is_refused());
}

#[test]
fn review_reports_a_compile_time_refusal() {
    let report = review_schema(&json!({"properties": {"n": {"multipleOf": 0.3}}}));
    assert!(report.is_refused());
    let refused: Vec<&super::Occurrence> = report.with_verdict(Verdict::Refused).collect();
    assert_eq!(refused.len(), 1);
    assert_eq!((refused[0].keyword.as_str(), refused[0].location.as_str()), ("multipleOf", "properties.n"));
    assert!(report.to_string().contains("refused"));
}

#[test]
fn the_specs_order_schema_accepts_the_specs_output() {
    let order: Value = match serde_json::from_str(include_str!("../../../../testdata/schemas/order.json")) {
        Ok(value) => value,
        Err(error) => panic!("order.json: {error}"),
    };
    let grammar = schema(order);
    assert_accepts(&grammar, &[
        "{ \"order_id\": \"7\", \"delivery\": { \"postcode\": \"69001\", \"city\": \"Lyon\" }, \"lines\": [ { \"item\": \"Widget 1\", \"unit_price\": 4.50, \"qty\": 3 } ] }",
        "{\"order_id\":\"123456\",\"lines\":[{\"item\":\"a\",\"qty\":999,\"unit_price\":0}],\"delivery\":null}",
    ]);
    assert_rejects(&grammar, &[
        "{\"order_id\":\"1234567\",\"lines\":[{\"item\":\"a\",\"qty\":1,\"unit_price\":0}],\"delivery\":null}",
        "{\"order_id\":\"1\",\"lines\":[],\"delivery\":null}",
        "{\"order_id\":\"1\",\"lines\":[{\"item\":\"a\",\"qty\":1000,\"unit_price\":0}],\"delivery\":null}",
        "{\"order_id\":\"1\",\"lines\":[{\"item\":\"a\",\"qty\":1,\"unit_price\":4.505}],\"delivery\":null}",
        "{\"order_id\":\"1\",\"lines\":[{\"item\":\"a\",\"qty\":1,\"unit_price\":1}],\"delivery\":{\"city\":\"x\",\"postcode\":\"6900\"}}",
    ]);
}

mod walks {
    //! Property test: documents reached by random walks through the automaton's allowed bytes
    //! parse as JSON and validate against the schema with an independent validator.

    use proptest::prelude::*;
    use serde_json::Value;

    use super::super::compile_schema;
    use crate::automaton::{config_is_accepting, CompiledGrammar};
    use crate::limits::Limits;

    const FIXTURES: &[(&str, &str)] = &[
        ("order.json", include_str!("../../../../testdata/schemas/order.json")),
        ("weather_tool.json", include_str!("../../../../testdata/schemas/weather_tool.json")),
        ("numbers.json", include_str!("../../../../testdata/schemas/numbers.json")),
        ("tree.json", include_str!("../../../../testdata/schemas/tree.json")),
        ("mixed.json", include_str!("../../../../testdata/schemas/mixed.json")),
        ("object_union.json", include_str!("../../../../testdata/schemas/object_union.json")),
    ];

    /// Soft length: past it the walk prefers bytes that close things.
    const SOFT_LENGTH: usize = 160;
    const HARD_LENGTH: usize = 3000;

    /// Walks the automaton using `choices` as the source of randomness; `None` if it got stuck
    /// or ran past the hard length without finishing.
    fn walk(grammar: &CompiledGrammar, choices: &[u32]) -> Option<Vec<u8>> {
        let mut config = grammar.initial_config().to_vec();
        let mut out = Vec::new();
        for step in 0..HARD_LENGTH {
            let choice = choices[step % choices.len()].wrapping_add(step as u32 * 2654435761);
            let accepting = config_is_accepting(&config);
            let allowed: Vec<u8> = grammar.allowed_bytes(&config).iter().collect();
            if allowed.is_empty() || (accepting && (out.len() > SOFT_LENGTH || choice % 8 == 0)) {
                return accepting.then_some(out);
            }
            let closers: Vec<u8> = if allowed.contains(&b'"') { vec![b'"'] } else { allowed.iter().copied().filter(|b| b"}]".contains(b)).collect() };
            let ascii: Vec<u8> = allowed.iter().copied().filter(|b| b.is_ascii()).collect();
            let pool = if out.len() > SOFT_LENGTH && !closers.is_empty() {
                &closers
            } else if !ascii.is_empty() && choice % 16 != 0 {
                &ascii
            } else {
                &allowed
            };
            let byte = pool[(choice as usize / 8) % pool.len()];
            config = grammar.step(&config, byte).ok()?;
            out.push(byte);
        }
        None
    }

    fn check_fixture(name: &str, source: &str, choices: &[u32]) -> Result<(), TestCaseError> {
        let schema: Value = serde_json::from_str(source).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let grammar = compile_schema(&schema).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let grammar = CompiledGrammar::new(grammar, &Limits::default()).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let Some(document) = walk(&grammar, choices) else {
            return Ok(());
        };
        let recheck = crate::check::check_input(&grammar, &document);
        prop_assert_eq!(&recheck, &crate::check::CheckOutcome::Match, "{}: the walk and check_input disagree on {:?}", name, String::from_utf8_lossy(&document));
        let text = String::from_utf8(document).map_err(|e| TestCaseError::fail(format!("{name}: not UTF-8: {e}")))?;
        let value: Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            // RFC 8259 allows numbers serde_json cannot hold (1e999); they are not schema errors.
            Err(e) if e.to_string().contains("number out of range") => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("{name}: {text:?} does not parse: {e}"))),
        };
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .filter(|error| !float_rounding_artifact(error))
            .map(|error| error.to_string())
            .collect();
        prop_assert!(errors.is_empty(), "{}: {} does not validate: {:?}", name, text, errors);
        Ok(())
    }

    /// The validator checks `multipleOf` in binary floating point (2315174.8 / 0.01 is not a
    /// whole number there); the grammar decides it exactly in decimal. Such an error is
    /// discounted only when exact decimal arithmetic says the value is a multiple.
    fn float_rounding_artifact(error: &jsonschema::ValidationError) -> bool {
        let jsonschema::error::ValidationErrorKind::MultipleOf { multiple_of } = &error.kind else {
            return false;
        };
        crate::schema::is_decimal_multiple(&error.instance, *multiple_of)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        #[test]
        fn walks_through_the_automaton_validate(choices in proptest::collection::vec(any::<u32>(), 64..256), which in 0usize..FIXTURES.len()) {
            let (name, source) = FIXTURES[which];
            check_fixture(name, source, &choices)?;
        }

        #[test]
        fn walks_through_any_json_parse(choices in proptest::collection::vec(any::<u32>(), 64..256)) {
            let grammar = CompiledGrammar::new(super::super::any_json(), &Limits::default())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            if let Some(document) = walk(&grammar, &choices) {
                let text = String::from_utf8(document).map_err(|e| TestCaseError::fail(e.to_string()))?;
                if let Err(e) = serde_json::from_str::<Value>(&text) {
                    prop_assert!(e.to_string().contains("number out of range"), "{:?} does not parse: {}", text, e);
                }
            }
        }
    }
}

mod fuzz {
    //! Random schemas from the keyword table: compiling never panics, and whatever compiles
    //! is accepted by the automaton (no left recursion, nothing over its limits).

    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::super::compile_schema;
    use crate::automaton::CompiledGrammar;
    use crate::limits::Limits;

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            (-1000i64..1000).prop_map(Value::from),
            (-1000.0f64..1000.0).prop_map(|f| json!((f * 100.0).round() / 100.0)),
            Just(json!(0.01)),
            Just(json!(0.3)),
            Just(json!(7)),
        ]
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(true)),
            Just(json!(false)),
            prop::sample::select(vec!["string", "integer", "number", "boolean", "null", "object", "array"]).prop_map(|t| json!({"type": t})),
            Just(json!({"$ref": "#"})),
            Just(json!({"$ref": "#/$defs/a"})),
            Just(json!({"enum": ["x", 1, null, {"k": [1]}]})),
            Just(json!({"const": 1.5})),
            prop::sample::select(vec!["^a+$", "[0-9]{2,3}", "(?=x)", "\\bw", "^\\d{1,4}$", "a|b|c"]).prop_map(|p| json!({"type": "string", "pattern": p})),
        ]
    }

    fn schema() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 40, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"anyOf": v})),
                prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"allOf": v})),
                prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"oneOf": v})),
                (prop::collection::btree_map("[a-c]{1,2}", inner.clone(), 0..4), any::<bool>(), prop::option::of(inner.clone()))
                    .prop_map(|(props, require, additional)| {
                        let names: Vec<Value> = props.keys().take(2).map(|k| json!(k)).collect();
                        let mut map = Map::new();
                        map.insert("properties".into(), json!(props));
                        if require {
                            map.insert("required".into(), Value::Array(names));
                        }
                        if let Some(additional) = additional {
                            map.insert("additionalProperties".into(), additional);
                        }
                        Value::Object(map)
                    }),
                (inner.clone(), 0u64..3, prop::option::of(0u64..5)).prop_map(|(items, min, max)| {
                    let mut map = json!({"type": "array", "items": items, "minItems": min});
                    if let Some(max) = max {
                        map["maxItems"] = json!(max);
                    }
                    map
                }),
                (prop::option::of(number()), prop::option::of(number()), prop::option::of(number()), any::<bool>()).prop_map(
                    |(low, high, step, integer)| {
                        let mut map = json!({"type": if integer { "integer" } else { "number" }});
                        if let Some(low) = low { map["minimum"] = low; }
                        if let Some(high) = high { map["exclusiveMaximum"] = high; }
                        if let Some(step) = step { map["multipleOf"] = step; }
                        map
                    }
                ),
                (inner.clone(), inner).prop_map(|(a, root)| {
                    let mut root = match root { Value::Object(map) => map, other => { let mut m = Map::new(); m.insert("allOf".into(), json!([other])); m } };
                    root.insert("$defs".into(), json!({"a": a}));
                    Value::Object(root)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
        #[test]
        fn random_schemas_compile_or_are_refused_never_panic(schema in schema()) {
            if let Ok(grammar) = compile_schema(&schema) {
                let compiled = CompiledGrammar::new(grammar, &Limits::default());
                prop_assert!(compiled.is_ok(), "{} compiled to a grammar the automaton refuses: {:?}", schema, compiled.err());
            }
        }
    }
}

#[test]
fn any_json_numbers_have_bounded_digits_like_llama_cpp() {
    let grammar = compiled(any_json());
    let sixteen = "1234567890123456";
    assert_accepts(
        &grammar,
        &[sixteen, &format!("-{sixteen}.{sixteen}"), "0.5e-12", "1E+99", "[100.25, 3e7]", "{\"a\": -0.0}"],
    );
    assert_rejects(
        &grammar,
        &[
            &format!("{sixteen}7"),
            &format!("1.{sixteen}7"),
            "100.00000000000000120000",
            "1e100",
            "[1, 12345678901234567]",
        ],
    );
    // Schemas keep their own number rules: an unbounded integer stays exact beyond 16 digits.
    assert_accepts(&schema(json!({"type": "integer"})), &["123456789012345678901234"]);
}

#[test]
fn pattern_properties_give_matching_keys_their_schema() {
    // Keys matching ^x- take integers; other extra keys are refused (no additionalProperties
    // beside properties closes the object); declared names keep their own schema.
    let grammar = schema(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "integer"}},
    }));
    assert_accepts(&grammar, &[r#"{"name": "a", "x-count": 3}"#, r#"{"x-a": 1, "x-b": 2}"#, "{}", r#"{"name": "b"}"#]);
    assert_rejects(&grammar, &[r#"{"x-count": "three"}"#, r#"{"other": 1}"#, r#"{"name": 1}"#, r#"{"y-x-": 1}"#]);

    // With additionalProperties a schema, keys matching no pattern take that schema instead;
    // a declared name matching a pattern must satisfy both.
    let grammar = schema(json!({
        "type": "object",
        "properties": {"x-id": {"type": "integer", "minimum": 10}},
        "patternProperties": {"^x-": {"type": "integer"}, "id$": {"type": "integer", "maximum": 20}},
        "additionalProperties": {"type": "boolean"},
    }));
    assert_accepts(&grammar, &[r#"{"x-id": 15, "x-other": -4, "flag": true, "my-id": 19}"#]);
    assert_rejects(&grammar, &[
        r#"{"x-id": 5}"#,
        r#"{"x-id": 25}"#,
        r#"{"flag": 1}"#,
        r#"{"x-other": true}"#,
        r#"{"x-myid": 21}"#,
        r#"{"my-id": false}"#,
    ]);

    // Only patternProperties with additionalProperties true: anything else is open.
    let grammar = schema(json!({"patternProperties": {"^[0-9]+$": {"type": "string"}}, "additionalProperties": true}));
    assert_accepts(&grammar, &[r#"{"12": "a", "b": [1]}"#, r#"{"é": null}"#]);
    assert_rejects(&grammar, &[r#"{"12": 1}"#]);
}

#[test]
fn formats_are_enforced_only_on_request() {
    use super::{compile_schema_with, FormatMode};
    let value = json!({
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "mail": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "note": {"type": "string", "format": "no-such-format"},
        },
        "required": ["at", "mail", "id"],
    });
    let good = r#"{"at": "2032-04-23T10:20:30.400Z", "mail": "jane@mail.example.org", "id": "123e4567-e89b-12d3-a456-426614174000", "note": "x"}"#;
    let bad_date = r#"{"at": "yesterday", "mail": "jane@mail.example.org", "id": "123e4567-e89b-12d3-a456-426614174000"}"#;
    let ignored = schema(value.clone());
    assert_accepts(&ignored, &[good, bad_date]);
    let enforced = match compile_schema_with(&value, FormatMode::Enforce) {
        Ok(grammar) => compiled(grammar),
        Err(error) => panic!("schema refused: {error}"),
    };
    assert_accepts(&enforced, &[good]);
    assert_rejects(&enforced, &[bad_date, &good.replace("jane@", "jane"), &good.replace("-e89b", "e89b")]);
    let error = compile_schema_with(
        &json!({"type": "string", "format": "date", "pattern": "^2"}),
        FormatMode::Enforce,
    )
    .err()
    .map(|e| e.keyword);
    assert_eq!(error.as_deref(), Some("format"));
}

#[test]
fn extra_keys_leave_the_declared_names_by_any_character() {
    // Nodes whose children are plain ASCII leave by a byte set and a shared rule for escaped
    // and multi-byte characters; a node with a non-ASCII or escaped child lists every other
    // character itself. Both must accept exactly the keys that are not declared names.
    let grammar = schema(json!({
        "type": "object",
        "properties": {"name": {"type": "integer"}, "n\u{e9}": {"type": "integer"}, "q\"": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"}
    }));
    assert_accepts(
        &grammar,
        &[
            r#"{"name":1,"nam":true}"#,
            r#"{"namex":true}"#,
            r#"{"n\u00e9":true}"#.replace("\\u00e9", "\u{e8}").as_str(),
            "{\"n\u{e9}x\":false}",
            "{\"na\u{1F600}\":true}",
            r#"{"na\n":true}"#,
            r#"{"na\"":true}"#,
            r#"{"q\\":true}"#,
            r#"{"q":true}"#,
            r#"{"":true}"#,
        ],
    );
    assert_rejects(
        &grammar,
        &[r#"{"name":true}"#, "{\"n\u{e9}\":true}", r#"{"q\"":true}"#, r#"{"nam":1}"#, r#"{"n\u0061me":true}"#],
    );
}

#[test]
fn shared_bounded_strings_numbers_and_patterns_keep_each_use_exact() {
    // The same bounds, spec or pattern on several properties compile to one rule each.
    let grammar = schema(json!({
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 3}, "b": {"type": "string", "maxLength": 3},
            "c": {"type": "integer", "minimum": 1, "maximum": 12}, "d": {"type": "integer", "minimum": 1, "maximum": 12},
            "e": {"type": "string", "pattern": "^.x"}, "f": {"type": "string", "pattern": "^.x"}
        },
        "required": ["a", "b", "c", "d", "e", "f"]
    }));
    assert_accepts(&grammar, &[r#"{"a":"abc","b":"","c":1,"d":12,"e":"\tx","f":"\u0007xy"}"#]);
    assert_rejects(
        &grammar,
        &[
            r#"{"a":"abcd","b":"","c":1,"d":12,"e":"ax","f":"ax"}"#,
            r#"{"a":"abc","b":"abcd","c":1,"d":12,"e":"ax","f":"ax"}"#,
            r#"{"a":"","b":"","c":1,"d":13,"e":"ax","f":"ax"}"#,
            r#"{"a":"","b":"","c":1,"d":12,"e":"ax","f":"\u0007y"}"#,
        ],
    );
}

#[test]
fn multiples_are_decided_in_decimal() {
    use crate::schema::is_decimal_multiple;
    use serde_json::json;
    assert!(is_decimal_multiple(&json!(2.22), 0.01), "2.22 / 0.01 is not whole in binary floating point");
    assert!(is_decimal_multiple(&json!(-1.5), 0.5));
    assert!(is_decimal_multiple(&json!(12), 3.0));
    assert!(!is_decimal_multiple(&json!(2.225), 0.01));
    assert!(!is_decimal_multiple(&json!(7), 0.0), "nothing is a multiple of zero");
    assert!(!is_decimal_multiple(&json!("2.22"), 0.01), "a string is not a number");
}

/// Extra keys are written in canonical encoding: every character that needs an escape has
/// exactly serde_json's (`\n`, `\u0001`, `\u001f`, `\"`), and nothing else is escaped.
#[test]
fn extra_keys_take_exactly_the_canonical_escapes() {
    let grammar = schema(json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "integer"}}));
    assert_accepts(&grammar, &[
        r#"{"\n":1}"#, r#"{"\t\b\f\r":1}"#, r#"{"\u0001":1}"#, r#"{"\u000b":1}"#, r#"{"\u001f":1}"#,
        r#"{"\"\\":1}"#, r#"{"x\u0010y":1}"#, r#"{"a":1,"\u0000":2}"#,
    ]);
    assert_rejects(&grammar, &[
        r#"{"\u000a":1}"#, r#"{"\u0061":1}"#, r#"{"\u001F":1}"#, r#"{"\u0020":1}"#, r#"{"\/":1}"#, r#"{"\u0008":1}"#,
    ]);
}

/// The escapes of a set of characters are read by a few alternatives (a literal prefix, then
/// a set of last bytes): together they read each escape of the set and nothing else.
#[test]
fn grouped_escapes_read_exactly_the_escapes_of_their_characters() {
    let every: Vec<char> = (0..0x80u8).map(char::from).collect();
    let some: Vec<char> = vec!['"', '\n', '\u{1}', '\u{1f}', 'a'];
    for (chars, groups_expected) in [(every, 3), (some, 3)] {
        let expected: BTreeSet<Vec<u8>> =
            chars.iter().filter_map(|&c| canonical_escape(c)).map(|escape| escape.as_bytes().to_vec()).collect();
        let groups = grouped_escapes(chars.iter().copied());
        assert_eq!(groups.len(), groups_expected, "{groups:?}");
        let mut read = BTreeSet::new();
        for sequence in &groups {
            let Some((Symbol::Bytes(lasts), prefix)) = sequence.split_last() else { panic!("no last byte set: {sequence:?}") };
            let prefix: Vec<u8> = prefix
                .iter()
                .map(|symbol| match symbol {
                    Symbol::Bytes(set) if set.len() == 1 => set.iter().next().unwrap_or_default(),
                    other => panic!("not a literal byte: {other:?}"),
                })
                .collect();
            read.extend(lasts.iter().map(|last| [prefix.as_slice(), &[last]].concat()));
        }
        assert_eq!(read, expected);
    }
}

/// Pattern strings and pattern-matched keys read control characters through grouped escapes:
/// exactly serde_json's escape for each, nothing else.
#[test]
fn pattern_strings_and_pattern_keys_take_exactly_the_canonical_escapes() {
    let grammar = schema(json!({"type": "string", "pattern": "^a.*$"}));
    // `.` is any character but a newline.
    assert_accepts(&grammar, &[r#""a\t""#, r#""a\u0001\u001f""#, r#""a\"\\""#, r#""a\u0010b""#]);
    assert_rejects(&grammar, &[r#""a\n""#, r#""a\u0009""#, r#""a\u001F""#, r#""a\u0061""#, r#""a\/""#, r#""\t""#]);
    let grammar = schema(json!({"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": false}));
    assert_accepts(&grammar, &[r#"{"x\n":1}"#, r#"{"x\u0001":1}"#, r#"{"x\t\"":2}"#]);
    assert_rejects(&grammar, &[r#"{"x\u000a":1}"#, r#"{"x\u001F":1}"#, r#"{"\nx":1}"#, r#"{"x\n":"1"}"#]);
}
