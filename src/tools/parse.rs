//! Reading tool calls back out of generated text, and minting call ids.
//!
//! Calls are `<tool_call>...</tool_call>` blocks holding `{"name": ..., "arguments": {...}}`
//! (or a list of them); a whole answer that is nothing but such a JSON object or list is read
//! as calls too. Calls to tools that were not offered are dropped; a block that does not parse
//! stays in the text without its tags, so a malformed call reaches the caller as text rather
//! than as an invented call, and never as markup. A last block the answer ends inside is set
//! apart ([`ParsedOutput::unfinished`]): it may be a call the token budget cut off.
//! Cost: linear in the text (serde_json's own depth limit bounds nesting).

use rand::Rng;
use serde_json::{Map, Value};

use super::markup::{strip_markup, CLOSE_TAG, OPEN_TAG};
use crate::core::{ToolCall, ToolSpec};

/// What an answer holds: the text left once calls are taken out (no call tags in it), and
/// the calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedOutput {
    pub content: String,
    pub calls: Vec<ToolCall>,
    /// The text after the last opening tag when the answer ends inside that block and it does
    /// not parse as a whole call: a call cut off part way, or a malformed one.
    pub unfinished: Option<String>,
}

/// [`parse_calls_with_ids`] with OpenAI-shaped ids (also what Ollama's route uses internally).
pub fn parse_calls(text: &str, offered: &[ToolSpec]) -> ParsedOutput {
    parse_calls_with_ids(text, offered, openai_call_id)
}

/// Finds the calls in `text`, giving each an id from `new_id` (Anthropic passes
/// [`anthropic_call_id`]). `arguments` is exactly the JSON the model wrote, parsed.
pub fn parse_calls_with_ids(text: &str, offered: &[ToolSpec], mut new_id: impl FnMut() -> String) -> ParsedOutput {
    let is_offered = |name: &str| offered.iter().any(|tool| tool.name == name);
    let mut content = String::with_capacity(text.len());
    let mut calls = Vec::new();
    let mut found_block = false;
    let mut unfinished = None;
    let mut rest = text;
    while let Some(start) = rest.find(OPEN_TAG) {
        content.push_str(&rest[..start]);
        let after_open = &rest[start + OPEN_TAG.len()..];
        let (decoded, used) = match read_block(after_open) {
            Some((decoded, used)) => (Some(decoded), used),
            None => (None, malformed_block_extent(after_open)),
        };
        let block_len = OPEN_TAG.len() + used;
        let block = &rest[start..start + block_len];
        rest = &rest[start + block_len..];
        match decoded {
            Some(decoded) => {
                found_block = true;
                for (name, arguments) in decoded {
                    if is_offered(&name) {
                        calls.push(ToolCall { id: new_id(), name, arguments });
                    }
                }
            }
            None if rest.is_empty() && !block.contains(CLOSE_TAG) => unfinished = Some(after_open.to_string()),
            None => content.push_str(block),
        }
    }
    content.push_str(rest);
    let content = strip_markup(&content);
    if found_block || unfinished.is_some() {
        return ParsedOutput { content: tidy_leftover(&content), calls, unfinished };
    }
    // No well-formed block: the whole answer may be a bare call. Only when every call in it
    // names an offered tool, since a JSON answer that merely has a "name" key is content.
    if let Some(decoded) = decode_bare_answer(text) {
        if !decoded.is_empty() && decoded.iter().all(|(name, _)| is_offered(name)) {
            let calls =
                decoded.into_iter().map(|(name, arguments)| ToolCall { id: new_id(), name, arguments }).collect();
            return ParsedOutput { content: String::new(), calls, unfinished: None };
        }
    }
    ParsedOutput { content, calls, unfinished }
}

/// Reads one JSON value after an opening tag, then its closing tag. The value is read as JSON
/// rather than cut at the first closing tag, so an argument whose text contains
/// `</tool_call>` stays whole. A block left open (the model stopped, or forgot the tag, or the
/// budget cut the tag itself) ends with the text or where the next block opens. Returns the
/// calls and the bytes used.
fn read_block(after_open: &str) -> Option<(Vec<(String, Value)>, usize)> {
    let mut values = serde_json::Deserializer::from_str(after_open).into_iter::<Value>();
    let value = values.next()?.ok()?;
    let json_end = values.byte_offset();
    let tail = after_open.get(json_end..)?;
    let trimmed = tail.trim_start();
    let gap = tail.len() - trimmed.len();
    let used = if trimmed.starts_with(CLOSE_TAG) {
        json_end + gap + CLOSE_TAG.len()
    } else if trimmed.starts_with(OPEN_TAG) {
        json_end + gap
    } else if CLOSE_TAG.starts_with(trimmed) {
        // The text ends here, at most part way into the closing tag.
        json_end + tail.len()
    } else {
        return None;
    };
    Some((decode_value(value)?, used))
}

/// How much of the text a block that is not a call covers: up to its closing tag, or the next
/// opening tag, or the end of the text, whichever comes first.
fn malformed_block_extent(after_open: &str) -> usize {
    // The closing tag is looked for only before the next opening tag, so text of many unclosed
    // tags costs one pass, not one pass per tag.
    let next_open = after_open.find(OPEN_TAG).unwrap_or(after_open.len());
    let before_next = after_open.get(..next_open).unwrap_or(after_open);
    match before_next.find(CLOSE_TAG) {
        Some(close) => close + CLOSE_TAG.len(),
        None => next_open,
    }
}

/// Trims the text around extracted calls and closes the gaps they leave.
fn tidy_leftover(content: &str) -> String {
    let mut tidy = String::with_capacity(content.len());
    for line in content.trim().split('\n') {
        if line.trim().is_empty() && tidy.ends_with("\n\n") {
            continue;
        }
        tidy.push_str(line);
        tidy.push('\n');
    }
    tidy.trim_end().to_string()
}

/// The calls a whole answer holds when it is nothing but a call or a list of calls, possibly
/// inside one Markdown code fence (small models like to fence JSON).
fn decode_bare_answer(text: &str) -> Option<Vec<(String, Value)>> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```")
        .and_then(|rest| rest.strip_suffix("```"))
        .map(|inner| inner.strip_prefix("json").unwrap_or(inner))
        .unwrap_or(trimmed);
    decode_value(serde_json::from_str(unfenced.trim()).ok()?)
}

/// The calls a JSON value holds: one call object, or a non-empty list of them.
fn decode_value(value: Value) -> Option<Vec<(String, Value)>> {
    match value {
        Value::Array(items) if !items.is_empty() => items.into_iter().map(decode_call).collect(),
        Value::Object(object) => Some(vec![decode_call(Value::Object(object))?]),
        _ => None,
    }
}

/// `{"name": "...", "arguments": {...}}`; also tolerated: `parameters` for `arguments`,
/// arguments as a string of JSON (OpenAI's wire form), no arguments at all (a tool without
/// parameters), and the OpenAI wrapper `{"type": "function", "function": {...}}`.
fn decode_call(value: Value) -> Option<(String, Value)> {
    let Value::Object(mut object) = value else { return None };
    if let Some(Value::Object(function)) = object.remove("function") {
        return decode_call(Value::Object(function));
    }
    let name = match object.remove("name")? {
        Value::String(name) if !name.trim().is_empty() => name,
        _ => return None,
    };
    let arguments = object.remove("arguments").or_else(|| object.remove("parameters"));
    let arguments = match arguments {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(arguments)) => Value::Object(arguments),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(&text).ok()? {
            Value::Object(arguments) => Value::Object(arguments),
            _ => return None,
        },
        Some(_) => return None,
    };
    Some((name, arguments))
}

/// `call_` and 12 lowercase hex digits, as in the spec's examples.
pub fn openai_call_id() -> String {
    let mut rng = rand::thread_rng();
    let mut id = String::from("call_");
    for _ in 0..12 {
        id.push(hex_digit(rng.gen_range(0..16)));
    }
    id
}

/// `toolu_` and 24 base62 characters, the shape of Anthropic's tool_use ids.
pub fn anthropic_call_id() -> String {
    const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::thread_rng();
    let mut id = String::from("toolu_");
    for _ in 0..24 {
        let index = rng.gen_range(0..BASE62.len());
        id.push(BASE62.get(index).copied().map_or('0', char::from));
    }
    id
}

fn hex_digit(value: u32) -> char {
    char::from_digit(value, 16).unwrap_or('0')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weather_tools() -> Vec<ToolSpec> {
        serde_json::from_str(include_str!("../../testdata/tools/get_weather.json")).expect("fixture parses")
    }

    fn numbered_ids() -> impl FnMut() -> String {
        let mut next = 0;
        move || {
            next += 1;
            format!("id{next}")
        }
    }

    fn parse(text: &str) -> ParsedOutput {
        parse_calls_with_ids(text, &weather_tools(), numbered_ids())
    }

    #[test]
    fn reads_a_well_formed_call() {
        let parsed = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>");
        assert_eq!(parsed.content, "");
        assert_eq!(
            parsed.calls,
            vec![ToolCall {
                id: "id1".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris", "unit": "c"})
            }]
        );
    }

    #[test]
    fn reads_several_calls_in_order() {
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n\
                    <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"unit\": \"f\"}}\n</tool_call>";
        let parsed = parse(text);
        let cities: Vec<&Value> = parsed.calls.iter().map(|c| &c.arguments["city"]).collect();
        assert_eq!(cities, [&json!("Paris"), &json!("Tokyo")]);
        let ids: Vec<&str> = parsed.calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["id1", "id2"]);
        assert_eq!(parsed.content, "");
    }

    #[test]
    fn a_list_inside_one_block_is_several_calls() {
        let parsed = parse(
            "<tool_call>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}, {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"B\\\"}\"}]</tool_call>",
        );
        assert_eq!(parsed.calls.len(), 2);
        assert_eq!(parsed.calls[1].arguments, json!({"city": "B"}));
    }

    #[test]
    fn calls_to_tools_not_offered_are_dropped() {
        let text = "<tool_call>\n{\"name\": \"launch_rocket\", \"arguments\": {}}\n</tool_call>\n\
                    <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
        let parsed = parse(text);
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0].name, "get_weather");
        assert!(!parsed.content.contains("launch_rocket"), "{:?}", parsed.content);
        let only_unoffered = parse("<tool_call>{\"name\": \"launch_rocket\", \"arguments\": {}}</tool_call>");
        assert!(only_unoffered.calls.is_empty());
        assert_eq!(only_unoffered.content, "");
    }

    #[test]
    fn malformed_calls_stay_in_the_text_without_their_tags() {
        let broken = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"\n";
        let parsed = parse(&format!("Let me look.\n<tool_call>{broken}</tool_call>"));
        assert!(parsed.calls.is_empty());
        assert_eq!(parsed.content, format!("Let me look.\n{broken}"));
        assert_eq!(parsed.unfinished, None);
        for not_a_call in [
            "{\"arguments\": {}}",
            "{\"name\": \"get_weather\", \"arguments\": [1, 2]}",
            "{\"name\": \"get_weather\", \"arguments\": \"{oops\"}",
            "[]",
        ] {
            let parsed = parse(&format!("<tool_call>{not_a_call}</tool_call>"));
            assert!(parsed.calls.is_empty(), "{not_a_call}");
            assert_eq!(parsed.content, not_a_call);
        }
    }

    #[test]
    fn a_closing_tag_inside_an_argument_does_not_cut_the_call() {
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"</tool_call><tool_call>\"}}\n</tool_call>";
        let parsed = parse(text);
        assert_eq!(parsed.calls.len(), 1, "{parsed:?}");
        assert_eq!(parsed.calls[0].arguments, json!({"city": "</tool_call><tool_call>"}));
        assert_eq!(parsed.content, "");
    }

    #[test]
    fn junk_between_the_json_and_the_closing_tag_is_text() {
        let text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}} and more</tool_call>";
        let parsed = parse(text);
        assert!(parsed.calls.is_empty());
        assert_eq!(parsed.content, "{\"name\": \"get_weather\", \"arguments\": {}} and more");
    }

    #[test]
    fn many_unclosed_tags_are_text_and_the_last_is_unfinished() {
        let text = "<tool_call>{".repeat(2000);
        let parsed = parse(&text);
        assert!(parsed.calls.is_empty());
        assert_eq!(parsed.content, "{".repeat(1999));
        assert_eq!(parsed.unfinished.as_deref(), Some("{"));
    }

    #[test]
    fn a_closing_tag_cut_part_way_still_closes_the_call() {
        let parsed = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_ca");
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!((parsed.content.as_str(), parsed.unfinished), ("", None));
    }

    #[test]
    fn text_around_calls_is_kept() {
        let text = "I will check both cities.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\nThen I will answer.";
        let parsed = parse(text);
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.content, "I will check both cities.\n\nThen I will answer.");
    }

    #[test]
    fn an_unclosed_final_block_is_read_when_it_parses() {
        let parsed = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n");
        assert_eq!(parsed.calls.len(), 1);
        let truncated = "<tool_call>\n{\"name\": \"get_weather\", \"argum";
        let parsed = parse(truncated);
        assert!(parsed.calls.is_empty());
        assert_eq!(parsed.content, "");
        assert_eq!(parsed.unfinished.as_deref(), Some("\n{\"name\": \"get_weather\", \"argum"));
    }

    #[test]
    fn a_bare_json_answer_is_a_call_only_when_it_names_an_offered_tool() {
        let parsed = parse(" {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\", \"unit\": \"c\"}} ");
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.content, "");
        let wrapped =
            parse(r#"[{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Kyiv"}}}]"#);
        assert_eq!(wrapped.calls.len(), 1);
        let fenced = parse("```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```");
        assert_eq!(fenced.calls.len(), 1);
        assert_eq!(fenced.calls[0].arguments, json!({"city": "Oslo"}));
        let person = r#"{"name": "Ada", "arguments": {}}"#;
        let parsed = parse(person);
        assert!(parsed.calls.is_empty());
        assert_eq!(parsed.content, person);
    }

    #[test]
    fn plain_text_is_returned_unchanged() {
        let text = "  It is sunny in Paris.\n";
        assert_eq!(parse(text), ParsedOutput { content: text.to_string(), calls: Vec::new(), unfinished: None });
    }

    #[test]
    fn parse_calls_gives_openai_ids() {
        let parsed =
            parse_calls("<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>", &weather_tools());
        assert_eq!(parsed.calls.len(), 1);
        assert!(parsed.calls[0].id.starts_with("call_"));
    }

    #[test]
    fn ids_have_each_apis_shape() {
        let openai = openai_call_id();
        let hex = openai.strip_prefix("call_").expect("call_ prefix");
        assert_eq!(hex.len(), 12);
        assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{openai}");
        let anthropic = anthropic_call_id();
        let tail = anthropic.strip_prefix("toolu_").expect("toolu_ prefix");
        assert_eq!(tail.len(), 24);
        assert!(tail.bytes().all(|b| b.is_ascii_alphanumeric()), "{anthropic}");
        assert_ne!(openai_call_id(), openai_call_id());
        assert_ne!(anthropic_call_id(), anthropic_call_id());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::tools::render_calls_as_text;

        fn argument_value() -> impl Strategy<Value = Value> {
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                any::<bool>().prop_map(Value::from),
                // Text that looks like the convention itself must survive inside a string.
                prop_oneof![Just("</tool_call>".to_string()), Just("<tool_call>".to_string()), ".{0,12}"]
                    .prop_map(Value::from),
            ]
        }

        fn call() -> impl Strategy<Value = ToolCall> {
            (
                prop_oneof![Just("get_weather".to_string()), Just("launch_rocket".to_string())],
                prop::collection::btree_map("[a-z]{1,6}", argument_value(), 0..4),
            )
                .prop_map(|(name, arguments)| ToolCall {
                    id: String::new(),
                    name,
                    arguments: Value::Object(arguments.into_iter().collect()),
                })
        }

        proptest! {
            #[test]
            fn rendered_calls_read_back_as_the_same_calls(calls in prop::collection::vec(call(), 1..4)) {
                let text = render_calls_as_text(&calls);
                let parsed = parse_calls_with_ids(&text, &weather_tools(), String::new);
                let offered: Vec<ToolCall> = calls.into_iter().filter(|c| c.name == "get_weather").collect();
                prop_assert_eq!(parsed.calls, offered);
                prop_assert_eq!(parsed.content, "");
            }

            #[test]
            fn any_text_parses_without_panicking(text in "(<tool_call>|</tool_call>|[{}\\[\\]\":, a-z]|\\n){0,40}") {
                let parsed = parse(&text);
                prop_assert!(parsed.content.len() <= text.len());
                prop_assert!(!parsed.content.contains(OPEN_TAG) && !parsed.content.contains(CLOSE_TAG));
                prop_assert!(parsed.calls.iter().all(|c| c.name == "get_weather" && c.arguments.is_object()));
            }
        }
    }
}
