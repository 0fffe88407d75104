//! Tests of the forced-call grammar: what it accepts and refuses, checked through the real
//! automaton, and random sentences of it read back by `parse_calls` and checked against each
//! tool's schema with an independent validator.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::*;
use crate::grammar::automaton::CompiledGrammar;
use crate::grammar::BytePath;
use crate::grammar::check::{check_input, CheckOutcome};
use crate::grammar::limits::Limits;
use crate::tools::parse_calls;

fn weather_tools() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../../testdata/tools/get_weather.json")).expect("fixture parses")
}

fn order_tools() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../../testdata/tools/order_tools.json")).expect("fixture parses")
}

fn compiled(tools: &[ToolSpec], choice: &ToolChoice, parallel: bool) -> CompiledGrammar {
    let grammar = forced_call_grammar(tools, choice, parallel).expect("grammar builds");
    CompiledGrammar::new(grammar, &Limits::default()).expect("grammar compiles")
}

fn weather_call(city: &str, unit: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\", \"unit\": \"{unit}\"}}}}\n</tool_call>")
}

fn accepts(grammar: &CompiledGrammar, text: &str) -> bool {
    check_input(grammar, text.as_bytes()) == CheckOutcome::Match
}

fn is_mismatch(grammar: &CompiledGrammar, text: &str) -> bool {
    matches!(check_input(grammar, text.as_bytes()), CheckOutcome::Mismatch { .. })
}

#[test]
fn accepts_the_spec_call() {
    let grammar = compiled(&weather_tools(), &ToolChoice::Required, true);
    assert!(accepts(&grammar, &weather_call("Paris", "c")));
    let compact = r#"<tool_call>
{"name":"get_weather","arguments":{"unit":"f","city":"Tokyo"}}
</tool_call>"#;
    assert!(accepts(&grammar, compact), "{:?}", check_input(&grammar, compact.as_bytes()));
}

#[test]
fn parallel_accepts_several_blocks_and_single_refuses_a_second() {
    let two = format!("{}\n{}", weather_call("Paris", "c"), weather_call("Tokyo", "f"));
    let parallel = compiled(&weather_tools(), &ToolChoice::Required, true);
    assert!(accepts(&parallel, &two));
    let three = format!("{two}\n{}", weather_call("Lima", "c"));
    assert!(accepts(&parallel, &three));

    let single = compiled(&weather_tools(), &ToolChoice::Required, false);
    assert!(accepts(&single, &weather_call("Paris", "c")));
    match check_input(&single, two.as_bytes()) {
        CheckOutcome::Mismatch { offset, .. } => assert_eq!(offset, weather_call("Paris", "c").len()),
        other => panic!("a second call must be refused, got {other:?}"),
    }
}

#[test]
fn arguments_are_held_to_the_tools_schema() {
    let grammar = compiled(&weather_tools(), &ToolChoice::Required, true);
    assert!(is_mismatch(&grammar, &weather_call("Paris", "k")));
    let missing_unit = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert!(is_mismatch(&grammar, missing_unit));
    let number_city =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 7, \"unit\": \"c\"}}\n</tool_call>";
    assert!(is_mismatch(&grammar, number_city));
    let unfinished = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"";
    assert!(matches!(check_input(&grammar, unfinished.as_bytes()), CheckOutcome::Incomplete { .. }));
    assert!(matches!(
        check_input(&grammar, b"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}"),
        CheckOutcome::Mismatch { .. }
    ));
}

#[test]
fn a_tool_not_offered_cannot_be_named() {
    let grammar = compiled(&weather_tools(), &ToolChoice::Required, true);
    let other = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    assert!(is_mismatch(&grammar, other));
    let prefix = "<tool_call>\n{\"name\": \"get_weather2\"";
    assert!(is_mismatch(&grammar, prefix));
}

#[test]
fn a_named_choice_restricts_to_that_tool() {
    let tools = order_tools();
    let refund = "<tool_call>\n{\"name\": \"issue_refund\", \"arguments\": {\"order_id\": \"A-1\", \"reason\": \"late\"}}\n</tool_call>";
    let status = "<tool_call>\n{\"name\": \"get_order_status\", \"arguments\": {\"order_id\": \"A-1\"}}\n</tool_call>";
    let any = compiled(&tools, &ToolChoice::Required, true);
    assert!(accepts(&any, refund) && accepts(&any, status));
    let named = compiled(&tools, &ToolChoice::Named("issue_refund".into()), true);
    assert!(accepts(&named, refund));
    assert!(is_mismatch(&named, status));
    // Each tool's arguments follow its own schema, not the other's.
    let crossed = "<tool_call>\n{\"name\": \"get_order_status\", \"arguments\": {\"order_id\": \"A-1\", \"reason\": \"late\"}}\n</tool_call>";
    assert!(is_mismatch(&any, crossed));
}

#[test]
fn a_named_choice_is_one_call_even_with_parallel_calls_allowed() {
    let named = compiled(&weather_tools(), &ToolChoice::Named("get_weather".into()), true);
    let one = weather_call("Paris", "c");
    assert!(accepts(&named, &one));
    match check_input(&named, format!("{one}\n{}", weather_call("Paris", "c")).as_bytes()) {
        CheckOutcome::Mismatch { offset, .. } => assert_eq!(offset, one.len()),
        other => panic!("a second call to a named tool must be refused, got {other:?}"),
    }
}

#[test]
fn a_tool_without_parameters_takes_an_empty_object() {
    let tools = vec![ToolSpec { name: "now".into(), description: None, parameters: Value::Null }];
    let grammar = compiled(&tools, &ToolChoice::Required, false);
    assert!(accepts(&grammar, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    assert!(is_mismatch(&grammar, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
    assert!(is_mismatch(&grammar, "<tool_call>\n{\"name\": \"now\", \"arguments\": []}\n</tool_call>"));
}

#[test]
fn a_schema_without_type_still_takes_an_object() {
    let tools = vec![ToolSpec {
        name: "f".into(),
        description: None,
        parameters: json!({"properties": {"x": {"type": "integer"}}}),
    }];
    let grammar = compiled(&tools, &ToolChoice::Required, false);
    assert!(accepts(&grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>"));
    assert!(is_mismatch(&grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": 3}\n</tool_call>"));
}

#[test]
fn names_needing_escapes_are_matched_as_json_strings() {
    let tools = vec![ToolSpec { name: "say \"hi\"".into(), description: None, parameters: Value::Null }];
    let grammar = compiled(&tools, &ToolChoice::Required, false);
    assert!(accepts(&grammar, "<tool_call>\n{\"name\": \"say \\\"hi\\\"\", \"arguments\": {}}\n</tool_call>"));
}

#[test]
fn a_refused_keyword_names_the_tool_and_where_it_is() {
    let mut tools = weather_tools();
    tools.push(ToolSpec {
        name: "lookup".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}),
    });
    let error = forced_call_grammar(&tools, &ToolChoice::Required, true).unwrap_err();
    match &error {
        ToolError::SchemaRefused { tool, keyword, location, .. } => {
            assert_eq!((tool.as_str(), keyword.as_str(), location.as_str()), ("lookup", "not", "properties.a"));
        }
        other => panic!("expected a schema refusal, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("\"lookup\"") && message.contains("properties.a uses \"not\""), "{message}");
    // Naming only the good tool compiles only its schema.
    assert!(forced_call_grammar(&tools, &ToolChoice::Named("get_weather".into()), true).is_ok());
}

#[test]
fn choices_that_force_nothing_are_refused() {
    let tools = weather_tools();
    assert!(matches!(
        forced_call_grammar(&tools, &ToolChoice::Named("get_time".into()), true),
        Err(ToolError::UnknownChoice { .. })
    ));
    assert!(matches!(forced_call_grammar(&[], &ToolChoice::Required, true), Err(ToolError::NoToolsToChoose { .. })));
    assert!(matches!(forced_call_grammar(&tools, &ToolChoice::None, true), Err(ToolError::NoToolsToChoose { .. })));
}

#[test]
fn embedding_renumbers_rule_references() {
    let inner = forced_call_grammar(&weather_tools(), &ToolChoice::Required, false).expect("builds");
    let mut builder = GrammarBuilder::new();
    let filler = builder.literal("filler", b"x");
    let first = embed_grammar(&mut builder, inner.clone(), "a.");
    let second = embed_grammar(&mut builder, inner.clone(), "b.");
    let count = inner.rules.len() as u32;
    assert_eq!(first, RuleId(filler.0 + 1 + inner.root.0));
    assert_eq!(second, RuleId(filler.0 + 1 + count + inner.root.0));
    let root = builder.add("root", vec![vec![Symbol::Rule(first), Symbol::Rule(second)]]);
    let combined = builder.finish(root, WHITESPACE_BUDGET);
    assert!(combined.rules.iter().any(|rule| rule.name == "b.root"));
    let grammar = CompiledGrammar::new(combined, &Limits::default()).expect("compiles");
    let twice = format!("{}{}", weather_call("A", "c"), weather_call("B", "f"));
    assert!(accepts(&grammar, &twice));
    assert!(!accepts(&grammar, &weather_call("A", "c")));
}

/// Walks the automaton to a random sentence, preferring bytes that close strings and
/// structures so walks end; `None` when a walk runs past `max_len`.
fn random_sentence(grammar: &CompiledGrammar, rng: &mut StdRng, max_len: usize) -> Option<String> {
    let mut path = BytePath::new(grammar);
    let mut out = Vec::new();
    loop {
        if path.is_accepting() && rng.gen_bool(0.5) {
            break;
        }
        let allowed: Vec<u8> = path.allowed().iter().collect();
        if allowed.is_empty() || out.len() > max_len {
            return if path.is_accepting() { String::from_utf8(out).ok() } else { None };
        }
        let closers: Vec<u8> = allowed.iter().copied().filter(|b| b"\"}],".contains(b)).collect();
        let byte = if !closers.is_empty() && rng.gen_bool(0.3) {
            closers[rng.gen_range(0..closers.len())]
        } else {
            allowed[rng.gen_range(0..allowed.len())]
        };
        if !path.push(byte) {
            return None;
        }
        out.push(byte);
    }
    String::from_utf8(out).ok()
}

/// The arguments text of each block, cut out of the wrapper by position (the tool names used
/// with it never contain `"arguments"`).
fn written_arguments(text: &str) -> Vec<&str> {
    text.split("<tool_call>\n")
        .skip(1)
        .filter_map(|block| {
            let body = block.split("\n</tool_call>").next()?.trim_end();
            let after_key = &body[body.find("\"arguments\"")? + "\"arguments\"".len()..];
            let after_colon = &after_key[after_key.find(':')? + 1..];
            after_colon.strip_suffix('}')
        })
        .collect()
}

#[test]
fn every_forced_output_parses_into_calls_matching_their_schemas() {
    let mut tools = order_tools();
    tools.extend(weather_tools());
    tools.push(ToolSpec {
        name: "set_alarm".into(),
        description: None,
        parameters: json!({"type": "object",
            "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                           "days": {"type": "array", "items": {"enum": ["mon", "tue"]}, "maxItems": 2},
                           "loud": {"type": "boolean"}},
            "required": ["hour"]}),
    });
    let validators: Vec<(String, jsonschema::Validator)> = tools
        .iter()
        .map(|tool| (tool.name.clone(), jsonschema::validator_for(&tool.parameters).expect("valid schema")))
        .collect();
    for parallel in [true, false] {
        let grammar = compiled(&tools, &ToolChoice::Required, parallel);
        let mut rng = StdRng::seed_from_u64(if parallel { 6 } else { 7 });
        let mut checked = 0;
        for _ in 0..300 {
            let Some(text) = random_sentence(&grammar, &mut rng, 4000) else { continue };
            checked += 1;
            let parsed = parse_calls(&text, &tools);
            assert_eq!(parsed.content, "", "nothing but calls in {text:?}");
            let blocks = text.matches("<tool_call>").count();
            assert_eq!(parsed.calls.len(), blocks, "{text:?}");
            if !parallel {
                assert_eq!(blocks, 1);
            }
            for (call, written) in parsed.calls.iter().zip(written_arguments(&text)) {
                let (_, validator) = validators.iter().find(|(name, _)| name == &call.name).expect("offered tool");
                assert!(validator.is_valid(&call.arguments), "{} {} in {text:?}", call.name, call.arguments);
                let written: Value = serde_json::from_str(written).expect("the generated arguments parse");
                assert_eq!(call.arguments, written, "in {text:?}");
            }
        }
        assert!(checked >= 100, "only {checked} walks finished");
    }
}

/// The path a sampler takes: a toy vocabulary (every byte, some words, one end-of-generation
/// token) behind the engine's token masks; a random "model" picks among allowed tokens and
/// stops when the end token is allowed. What it writes must read back as valid calls.
#[test]
fn token_masks_only_let_a_model_write_valid_calls() {
    use std::sync::Arc;

    use crate::grammar::matcher::Matcher;
    use crate::grammar::toktrie::TokenTrie;

    let tools = weather_tools();
    let words: [&[u8]; 12] = [
        b"<tool_call>",
        b"<tool_call>\n",
        b"{\"name\": \"",
        b"get_weather",
        b"get_time",
        b"\", \"arguments\": {",
        b"\"city\": \"",
        b"Paris",
        b"\", \"unit\": \"",
        b"k",
        b"\"}}\n</tool_call>",
        b"\n</tool_call>",
    ];
    let mut vocabulary: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    vocabulary.extend(words.iter().map(|w| w.to_vec()));
    let end_of_generation = vocabulary.len() as u32;
    vocabulary.push(Vec::new());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &[end_of_generation]));

    let token_of = |word: &[u8]| vocabulary.iter().rposition(|t| t == word).expect("in the vocabulary") as u32;
    let grammar = Arc::new(compiled(&tools, &ToolChoice::Required, true));
    let mut at_name = Matcher::new(grammar.clone(), trie.clone());
    for word in [&b"<tool_call>\n"[..], b"{\"name\": \""] {
        at_name.commit(token_of(word)).expect("the wrapper commits");
    }
    assert!(at_name.is_allowed(token_of(b"get_weather")));
    assert!(!at_name.is_allowed(token_of(b"get_time")), "a tool not offered can be named");
    assert!(!at_name.is_allowed(end_of_generation));

    for parallel in [true, false] {
        let grammar = Arc::new(compiled(&tools, &ToolChoice::Required, parallel));
        let mut rng = StdRng::seed_from_u64(11);
        let mut finished = 0;
        for _ in 0..40 {
            let mut matcher = Matcher::new(grammar.clone(), trie.clone());
            let mut text = Vec::new();
            for _ in 0..600 {
                let allowed: Vec<u32> = matcher.compute_mask().iter_set().collect();
                assert!(!allowed.is_empty(), "a forced call never leaves the sampler without a token");
                if allowed.contains(&end_of_generation) && rng.gen_bool(0.4) {
                    finished += 1;
                    let parsed = parse_calls(std::str::from_utf8(&text).expect("UTF-8"), &tools);
                    assert_eq!(parsed.content, "");
                    assert!(!parsed.calls.is_empty());
                    if !parallel {
                        assert_eq!(parsed.calls.len(), 1);
                    }
                    for call in &parsed.calls {
                        assert_eq!(call.name, "get_weather");
                        assert!(call.arguments["city"].is_string(), "{}", call.arguments);
                        assert!(matches!(call.arguments["unit"].as_str(), Some("c" | "f")), "{}", call.arguments);
                    }
                    break;
                }
                let long: Vec<u32> = allowed.iter().copied().filter(|&t| t >= 256 && t != end_of_generation).collect();
                let closing: Vec<u32> =
                    allowed.iter().copied().filter(|&t| t < 256 && b"\"}".contains(&(t as u8))).collect();
                let token = if !long.is_empty() && rng.gen_bool(0.7) {
                    long[rng.gen_range(0..long.len())]
                } else if !closing.is_empty() && rng.gen_bool(0.3) {
                    closing[rng.gen_range(0..closing.len())]
                } else {
                    let ordinary: Vec<u32> = allowed.iter().copied().filter(|&t| t != end_of_generation).collect();
                    if ordinary.is_empty() {
                        continue;
                    }
                    ordinary[rng.gen_range(0..ordinary.len())]
                };
                matcher.commit(token).expect("an allowed token commits");
                text.extend_from_slice(&vocabulary[token as usize]);
            }
        }
        assert!(finished >= 20, "only {finished} of 40 generations ended");
    }
}
