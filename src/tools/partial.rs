//! A tool call the token budget cut off part way, read as far as it got: the tool's name, and
//! its arguments both as the JSON text the model wrote and closed into the object that text
//! begins. Each API then answers in its own shape (OpenAI sends the text, Anthropic and Ollama
//! the object), so the call never reaches a client as prompt-format text.
//!
//! Key items: [`read_cut_off_call`], [`close_json_prefix`]. Cost: one pass over the block, plus
//! at most two parses of the closed text.

use serde_json::{Map, Value};

use crate::core::ToolSpec;

/// The body of a call block the answer ended inside, read as far as it got.
#[derive(Debug, Clone, PartialEq)]
pub struct CutOffCall {
    pub name: String,
    /// The arguments' JSON text exactly as far as the model wrote it (empty when the budget
    /// ran out before they began).
    pub arguments_text: String,
    /// That text closed into an object: a string cut part way keeps what was written, a member
    /// cut before its value began is left out.
    pub arguments: Value,
}

/// Reads the text after an opening `<tool_call>` that runs to the end of the answer:
/// `{"name": "...", "arguments": {...` cut anywhere. The name must be whole, or a prefix of
/// exactly one offered tool's name; `None` when no offered tool can be told, or when the text
/// is not the start of a call object (it is then malformed, not cut off).
pub fn read_cut_off_call(body: &str, offered: &[ToolSpec]) -> Option<CutOffCall> {
    let object = body.trim_start().strip_prefix('{')?;
    let mut rest = object;
    let mut name: Option<String> = None;
    let mut arguments: Option<(String, Value)> = None;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if rest.starts_with('}') {
            // The object closed: the budget ran out in the closing tag, after a whole call.
            break;
        }
        let (key, after_key) = match read_string(rest) {
            Scanned::Whole(key, used) => (key, &rest[used..]),
            Scanned::Cut => break,
            Scanned::Malformed => return None,
        };
        let after_colon = after_key.trim_start();
        let Some(value_text) = after_colon.strip_prefix(':') else {
            if after_colon.is_empty() {
                break;
            }
            return None;
        };
        let value_text = value_text.trim_start();
        let mut values = serde_json::Deserializer::from_str(value_text).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let used = values.byte_offset();
                match key.as_str() {
                    "name" => name = value.as_str().map(str::to_string),
                    "arguments" | "parameters" => {
                        arguments = Some((value_text[..used].to_string(), value))
                    }
                    _ => {}
                }
                rest = &value_text[used..];
            }
            Some(Err(error)) if error.is_eof() => {
                match key.as_str() {
                    "name" => name = unique_prefix_match(value_text, offered),
                    "arguments" | "parameters" => {
                        let closed = close_json_prefix(value_text)
                            .unwrap_or_else(|| Value::Object(Map::new()));
                        arguments = Some((value_text.to_string(), closed));
                    }
                    _ => {}
                }
                break;
            }
            None => break,
            Some(Err(_)) => return None,
        }
    }
    let name = name.filter(|name| offered.iter().any(|tool| &tool.name == name))?;
    let (arguments_text, arguments) =
        arguments.unwrap_or_else(|| (String::new(), Value::Object(Map::new())));
    let arguments = match arguments {
        Value::Object(_) => arguments,
        Value::String(text) => match close_json_prefix(&text) {
            Some(object @ Value::Object(_)) => object,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    };
    Some(CutOffCall {
        name,
        arguments_text,
        arguments,
    })
}

/// The offered tool whose name the cut-off string `text` (its opening quote included) begins,
/// when exactly one does.
fn unique_prefix_match(text: &str, offered: &[ToolSpec]) -> Option<String> {
    let Value::String(prefix) = close_json_prefix(text)? else {
        return None;
    };
    let mut matching = offered.iter().filter(|tool| tool.name.starts_with(&prefix));
    let first = matching.next()?;
    matching.next().is_none().then(|| first.name.clone())
}

enum Scanned {
    /// The decoded string and the bytes it used, quotes included.
    Whole(String, usize),
    Cut,
    Malformed,
}

/// A JSON string at the start of `text`.
fn read_string(text: &str) -> Scanned {
    if !text.starts_with('"') {
        return Scanned::Malformed;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<String>();
    match values.next() {
        Some(Ok(decoded)) => Scanned::Whole(decoded, values.byte_offset()),
        Some(Err(error)) if error.is_eof() => Scanned::Cut,
        _ => Scanned::Malformed,
    }
}

/// Closes a JSON text cut off part way into the value it begins: an open string is closed
/// where it was cut (a half-written escape dropped), open arrays and objects are closed, and
/// whatever was cut before it could stand (a key without its value, `tru`, `1.`, a trailing
/// comma) is left out. `None` when not even the start of a value can stand.
pub fn close_json_prefix(text: &str) -> Option<Value> {
    let mut closer = PrefixCloser::default();
    closer.scan(text);
    // The last cut point first; if a string cut there does not decode (a lone surrogate
    // escape), the last point between whole values.
    for (end, suffix) in [closer.last, closer.last_outside_string]
        .into_iter()
        .flatten()
    {
        let mut closed = String::with_capacity(end + suffix.len());
        closed.push_str(&text[..end]);
        closed.push_str(&suffix);
        if let Ok(value) = serde_json::from_str(&closed) {
            return Some(value);
        }
    }
    None
}

#[derive(Clone, Copy, PartialEq)]
enum Container {
    /// An object, and whether the next string is a key.
    Object {
        expects_key: bool,
    },
    Array,
}

/// Where a cut text can stand: the bytes to keep and what closes them.
type CutPoint = (usize, String);

#[derive(Default)]
struct PrefixCloser {
    open: Vec<Container>,
    last: Option<CutPoint>,
    last_outside_string: Option<CutPoint>,
}

impl PrefixCloser {
    fn closers(&self) -> String {
        self.open
            .iter()
            .rev()
            .map(|container| match container {
                Container::Object { .. } => '}',
                Container::Array => ']',
            })
            .collect()
    }

    /// A whole value (or an empty container's opening) ends at `end`.
    fn value_ended(&mut self, end: usize) {
        if let Some(Container::Object { expects_key }) = self.open.last_mut() {
            *expects_key = false;
        }
        let point = (end, self.closers());
        self.last_outside_string = Some(point.clone());
        self.last = Some(point);
    }

    fn scan(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b' ' | b'\t' | b'\n' | b'\r' | b':' => at += 1,
                b',' => {
                    if let Some(Container::Object { expects_key }) = self.open.last_mut() {
                        *expects_key = true;
                    }
                    at += 1;
                }
                b'{' | b'[' => {
                    self.open.push(if bytes[at] == b'{' {
                        Container::Object { expects_key: true }
                    } else {
                        Container::Array
                    });
                    at += 1;
                    let point = (at, self.closers());
                    self.last_outside_string = Some(point.clone());
                    self.last = Some(point);
                }
                b'}' | b']' => {
                    self.open.pop();
                    at += 1;
                    self.value_ended(at);
                    if self.open.is_empty() {
                        return;
                    }
                }
                b'"' => {
                    let is_key = matches!(
                        self.open.last(),
                        Some(Container::Object { expects_key: true })
                    );
                    match self.scan_string(text, at, is_key) {
                        Some(end) if is_key => {
                            at = end;
                            if let Some(Container::Object { expects_key }) = self.open.last_mut() {
                                *expects_key = false;
                            }
                        }
                        Some(end) => {
                            at = end;
                            self.value_ended(at);
                        }
                        None => return,
                    }
                }
                _ => {
                    let start = at;
                    while at < bytes.len() && !b" \t\n\r,]}:".contains(&bytes[at]) {
                        at += 1;
                    }
                    // A number cut part way stands as written (`12` of `125`); `1.`, `-`, `tru`
                    // cannot stand.
                    if serde_json::from_str::<Value>(&text[start..at]).is_err() {
                        return;
                    }
                    self.value_ended(at);
                }
            }
        }
    }

    /// Scans the string opening at `start`; returns where it ends, or `None` when the text
    /// ends inside it (after noting the cut points inside a value string).
    fn scan_string(&mut self, text: &str, start: usize, is_key: bool) -> Option<usize> {
        let bytes = text.as_bytes();
        let mut at = start + 1;
        while at < bytes.len() {
            if !is_key && text.is_char_boundary(at) {
                self.last = Some((at, format!("\"{}", self.closers())));
            }
            match bytes[at] {
                b'"' => return Some(at + 1),
                b'\\' => {
                    let escape_len = if bytes.get(at + 1) == Some(&b'u') {
                        6
                    } else {
                        2
                    };
                    at += escape_len;
                }
                _ => at += 1,
            }
        }
        if !is_key && at == bytes.len() {
            self.last = Some((at, format!("\"{}", self.closers())));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn order_tools() -> Vec<ToolSpec> {
        serde_json::from_str(include_str!("../../testdata/tools/order_tools.json"))
            .expect("fixture parses")
    }

    #[test]
    fn closes_what_was_cut_and_drops_what_cannot_stand() {
        let cases = [
            ("{\"order_id\": \"12345", json!({"order_id": "12345"})),
            (
                "{\"a\": 1, \"b\": [true, {\"c\": \"x\\n",
                json!({"a": 1, "b": [true, {"c": "x\n"}]}),
            ),
            ("{\"a\": 1, \"b\"", json!({"a": 1})),
            ("{\"a\": 1, \"b\": ", json!({"a": 1})),
            ("{\"a\": 1, ", json!({"a": 1})),
            ("{\"a\": tru", json!({})),
            ("{\"a\": 12", json!({"a": 12})),
            ("{\"a\": 1.", json!({})),
            ("{\"a\": \"x\\u00", json!({"a": "x"})),
            ("{\"a\": \"x\\", json!({"a": "x"})),
            ("{\"a\": \"\\ud83d\\ude", json!({})),
            ("{\"a\": \"caf\u{e9}", json!({"a": "caf\u{e9}"})),
            (
                "{\"a\": [[], {}], \"b\": {\"c\": [1, 2",
                json!({"a": [[], {}], "b": {"c": [1, 2]}}),
            ),
            ("{", json!({})),
            ("{\"a\": {\"b\": 1}} trailing", json!({"a": {"b": 1}})),
        ];
        for (text, expected) in cases {
            assert_eq!(close_json_prefix(text), Some(expected), "{text}");
        }
        assert_eq!(close_json_prefix(""), None);
        assert_eq!(close_json_prefix("  "), None);
        assert_eq!(close_json_prefix("\"ab"), Some(json!("ab")));
    }

    #[test]
    fn reads_the_name_and_the_arguments_as_far_as_they_got() {
        let call = read_cut_off_call(
            "\n{\"name\": \"issue_refund\", \"arguments\": {\"order_id\": \"A-1\", \"rea",
            &order_tools(),
        )
        .expect("a cut-off call");
        assert_eq!(call.name, "issue_refund");
        assert_eq!(call.arguments_text, "{\"order_id\": \"A-1\", \"rea");
        assert_eq!(call.arguments, json!({"order_id": "A-1"}));
        let before_arguments =
            read_cut_off_call("\n{\"name\": \"issue_refund\", \"argu", &order_tools())
                .expect("named");
        assert_eq!(
            (
                before_arguments.arguments_text.as_str(),
                before_arguments.arguments
            ),
            ("", json!({}))
        );
    }

    #[test]
    fn a_name_is_known_only_when_whole_or_unambiguous() {
        assert_eq!(
            read_cut_off_call("{\"name\": \"get_", &order_tools()).map(|c| c.name),
            Some("get_order_status".into())
        );
        assert_eq!(read_cut_off_call("{\"name\": \"", &order_tools()), None);
        assert_eq!(
            read_cut_off_call(
                "{\"name\": \"launch_rocket\", \"arguments\": {",
                &order_tools()
            ),
            None
        );
        assert_eq!(read_cut_off_call("{\"na", &order_tools()), None);
        assert_eq!(read_cut_off_call("not json", &order_tools()), None);
        assert_eq!(
            read_cut_off_call("{\"name\": 12, \"arguments\": {", &order_tools()),
            None
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                any::<bool>().prop_map(Value::from),
                any::<i32>().prop_map(Value::from),
                "[a-z\u{e9}\u{1F600}\"\\\\\n]{0,6}".prop_map(Value::from),
                Just(Value::Null),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                        .prop_map(|members| Value::Object(members.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn every_prefix_of_an_object_closes_to_an_object(members in prop::collection::btree_map("[a-z]{1,3}", json_value(), 0..4), pretty in any::<bool>()) {
                let object = Value::Object(members.into_iter().collect());
                let text = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) }
                    .expect("serializes");
                for end in (1..=text.len()).filter(|end| text.is_char_boundary(*end)) {
                    let closed = close_json_prefix(&text[..end]);
                    prop_assert!(matches!(closed, Some(Value::Object(_))), "{:?} -> {:?}", &text[..end], closed);
                }
                prop_assert_eq!(close_json_prefix(&text), Some(object));
            }
        }
    }
}
