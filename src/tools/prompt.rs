//! Tools as prompt text, in the Hermes convention most open chat models were tuned on: the
//! tools described in a `<tools>` block of the system prompt, calls written as
//! `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`, results fed back as
//! `<tool_response>` blocks. Used when a model's own chat template has no tools section, so a
//! multi-turn tool loop works with any template.
//!
//! Cost: linear in the tools and messages rendered.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::core::{ChatMessage, Role, ToolCall, ToolSpec};

/// The system-prompt block describing `tools`, one JSON object per tool per line.
pub fn hermes_tools_prompt(tools: &[ToolSpec]) -> String {
    let mut text = String::from(
        "# Tools\n\n\
         You may call one or more functions to help with the user's request.\n\n\
         The functions you can call are described inside <tools></tools> tags, one JSON object per line:\n\
         <tools>\n",
    );
    for tool in tools {
        text.push_str(&tool_description_json(tool));
        text.push('\n');
    }
    text.push_str(
        "</tools>\n\n\
         To call a function, write a JSON object with its name and arguments inside \
         <tool_call></tool_call> tags, one block per call:\n\
         <tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <arguments-json-object>}\n\
         </tool_call>",
    );
    text
}

/// The tools as a Hugging Face chat template expects its `tools` variable (for templates with
/// their own tools section): `{"type": "function", "function": {"name", "description",
/// "parameters"}}` per tool, the same objects the Hermes block lists.
pub fn tools_as_template_json(tools: &[ToolSpec]) -> Vec<Value> {
    tools.iter().map(tool_description).collect()
}

/// An assistant's calls as a Hugging Face template expects a message's `tool_calls`:
/// `{"id", "type": "function", "function": {"name", "arguments": {...}}}`, arguments an object.
pub fn calls_as_template_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|call| {
                let arguments = match &call.arguments {
                    Value::Null => Value::Object(Map::new()),
                    other => other.clone(),
                };
                json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}})
            })
            .collect(),
    )
}

/// One tool as the model reads it: `{"type":"function","function":{"name",...}}`.
fn tool_description_json(tool: &ToolSpec) -> String {
    tool_description(tool).to_string()
}

fn tool_description(tool: &ToolSpec) -> Value {
    let mut function = Map::new();
    function.insert("name".to_string(), Value::String(tool.name.clone()));
    if let Some(description) = tool.description.as_deref().filter(|d| !d.is_empty()) {
        function.insert("description".to_string(), Value::String(description.to_string()));
    }
    let parameters = match &tool.parameters {
        Value::Null => json!({"type": "object", "properties": {}}),
        other => other.clone(),
    };
    function.insert("parameters".to_string(), parameters);
    json!({"type": "function", "function": Value::Object(function)})
}

/// An assistant's calls as text, one `<tool_call>` block per call separated by newlines: the
/// exact form a forced call is generated in, so the model sees its own convention in the history.
pub fn render_calls_as_text(calls: &[ToolCall]) -> String {
    let blocks: Vec<String> = calls.iter().map(render_call).collect();
    blocks.join("\n")
}

fn render_call(call: &ToolCall) -> String {
    let name = Value::String(call.name.clone());
    let arguments = match &call.arguments {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    };
    format!("<tool_call>\n{{\"name\": {name}, \"arguments\": {arguments}}}\n</tool_call>")
}

/// A tool's result as a `<tool_response>` block. With the tool's name, the block holds
/// `{"name": ..., "content": ...}` (the content as JSON when it is JSON, else as a string), so
/// a model that made several calls can tell the results apart.
pub fn render_tool_result(name: Option<&str>, content: &str) -> String {
    let body = match name {
        None => content.trim().to_string(),
        Some(name) => {
            let content =
                serde_json::from_str::<Value>(content.trim()).unwrap_or_else(|_| Value::String(content.to_string()));
            json!({"name": name, "content": content}).to_string()
        }
    };
    format!("<tool_response>\n{body}\n</tool_response>")
}

/// Rewrites a conversation for a chat template that knows nothing of tools: the Hermes tools
/// block joins the system prompt (or becomes one) when `tools` is not empty, an assistant's
/// calls become `<tool_call>` text after its content, and each run of `role: "tool"` messages
/// becomes one user message of `<tool_response>` blocks (many templates allow only user and
/// assistant turns). A tool message without a name takes it from the call its
/// `tool_call_id` answers.
pub fn messages_for_plain_template(messages: &[ChatMessage], tools: &[ToolSpec]) -> Vec<ChatMessage> {
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    let mut rendered: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut previous_was_tool = false;
    for message in messages {
        match message.role {
            Role::Tool => {
                let name = message
                    .name
                    .as_deref()
                    .or_else(|| message.tool_call_id.as_deref().and_then(|id| call_names.get(id).copied()));
                let block = render_tool_result(name, &message.content);
                match rendered.last_mut() {
                    Some(last) if previous_was_tool => {
                        last.content.push('\n');
                        last.content.push_str(&block);
                    }
                    _ => rendered.push(ChatMessage::new(Role::User, block)),
                }
                previous_was_tool = true;
                continue;
            }
            Role::Assistant if !message.tool_calls.is_empty() => {
                for call in &message.tool_calls {
                    call_names.insert(call.id.as_str(), call.name.as_str());
                }
                let calls = render_calls_as_text(&message.tool_calls);
                let content = if message.content.trim().is_empty() {
                    calls
                } else {
                    format!("{}\n{calls}", message.content.trim_end())
                };
                rendered.push(ChatMessage { content, tool_calls: Vec::new(), ..message.clone() });
            }
            _ => rendered.push(message.clone()),
        }
        previous_was_tool = false;
    }
    if !tools.is_empty() {
        let block = hermes_tools_prompt(tools);
        match rendered.first_mut() {
            Some(first) if first.role == Role::System => {
                first.content = if first.content.trim().is_empty() {
                    block
                } else {
                    format!("{}\n\n{block}", first.content.trim_end())
                };
            }
            _ => rendered.insert(0, ChatMessage::new(Role::System, block)),
        }
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_tools() -> Vec<ToolSpec> {
        serde_json::from_str(include_str!("../../testdata/tools/order_tools.json")).expect("fixture parses")
    }

    #[test]
    fn hermes_prompt_carries_each_tools_json() {
        let tools = fixture_tools();
        assert_eq!(tools.len(), 2);
        let prompt = hermes_tools_prompt(&tools);
        assert!(prompt.starts_with("# Tools\n"));
        let listed = prompt.split("<tools>\n").nth(1).and_then(|rest| rest.split("</tools>").next());
        let lines: Vec<&str> = listed.expect("a <tools> block").lines().collect();
        assert_eq!(lines.len(), tools.len());
        for (line, tool) in lines.iter().zip(&tools) {
            let described: Value = serde_json::from_str(line).expect("each line is JSON");
            assert_eq!(described["type"], "function");
            assert_eq!(described["function"]["name"], tool.name.as_str());
            assert_eq!(described["function"]["parameters"], tool.parameters);
            assert_eq!(described["function"]["description"].as_str(), tool.description.as_deref());
        }
        assert!(prompt.contains("<tool_call>\n{\"name\": <function-name>, \"arguments\": "));
        assert!(prompt.ends_with("</tool_call>"));
    }

    #[test]
    fn a_tool_without_parameters_is_described_with_an_empty_object() {
        let tool = ToolSpec { name: "now".into(), description: None, parameters: Value::Null };
        let prompt = hermes_tools_prompt(&[tool]);
        assert!(
            prompt.contains(
                r#"{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}"#
            ),
            "{prompt}"
        );
    }

    #[test]
    fn template_json_has_the_hugging_face_shape() {
        let tools = fixture_tools();
        let listed = tools_as_template_json(&tools);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1]["function"]["name"], "issue_refund");
        assert_eq!(listed[1]["function"]["parameters"], tools[1].parameters);
        let calls = vec![ToolCall { id: "call_1".into(), name: "issue_refund".into(), arguments: Value::Null }];
        assert_eq!(
            calls_as_template_json(&calls),
            json!([{"id": "call_1", "type": "function", "function": {"name": "issue_refund", "arguments": {}}}])
        );
    }

    #[test]
    fn calls_render_as_hermes_blocks() {
        let calls = vec![
            ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
            ToolCall { id: "call_2".into(), name: "now".into(), arguments: Value::Null },
        ];
        assert_eq!(
            render_calls_as_text(&calls),
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
        );
        assert_eq!(render_calls_as_text(&[]), "");
    }

    #[test]
    fn tool_results_render_with_and_without_a_name() {
        assert_eq!(render_tool_result(None, " sunny \n"), "<tool_response>\nsunny\n</tool_response>");
        let named = render_tool_result(Some("get_weather"), r#"{"temp": 21}"#);
        let body = named.strip_prefix("<tool_response>\n").and_then(|b| b.strip_suffix("\n</tool_response>"));
        let body: Value = serde_json::from_str(body.expect("wrapped")).expect("JSON body");
        assert_eq!(body, json!({"name": "get_weather", "content": {"temp": 21}}));
        let text = render_tool_result(Some("echo"), "not json");
        assert!(text.contains(r#"{"name":"echo","content":"not json"}"#), "{text}");
    }

    #[test]
    fn conversation_is_rewritten_for_a_plain_template() {
        let tools = fixture_tools();
        let mut assistant = ChatMessage::new(Role::Assistant, "");
        assistant.tool_calls = vec![
            ToolCall { id: "call_a".into(), name: "get_order_status".into(), arguments: json!({"order_id": "A-1042"}) },
            ToolCall {
                id: "call_b".into(),
                name: "issue_refund".into(),
                arguments: json!({"order_id": "A-1042", "reason": "late"}),
            },
        ];
        let mut first_result = ChatMessage::new(Role::Tool, r#"{"status": "in_transit"}"#);
        first_result.tool_call_id = Some("call_a".into());
        let mut second_result = ChatMessage::new(Role::Tool, "refused");
        second_result.name = Some("issue_refund".into());
        let messages = vec![
            ChatMessage::new(Role::System, "Be brief."),
            ChatMessage::new(Role::User, "Where is order A-1042?"),
            assistant,
            first_result,
            second_result,
        ];
        let rendered = messages_for_plain_template(&messages, &tools);
        let roles: Vec<Role> = rendered.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
        assert!(rendered[0].content.starts_with("Be brief.\n\n# Tools\n"));
        assert!(rendered[2].tool_calls.is_empty());
        assert_eq!(rendered[2].content, render_calls_as_text(&messages[2].tool_calls));
        assert_eq!(
            rendered[3].content,
            format!(
                "{}\n{}",
                render_tool_result(Some("get_order_status"), r#"{"status": "in_transit"}"#),
                render_tool_result(Some("issue_refund"), "refused")
            )
        );
    }

    #[test]
    fn without_tools_no_system_prompt_is_added() {
        let messages = vec![ChatMessage::new(Role::User, "hi")];
        assert_eq!(messages_for_plain_template(&messages, &[]), messages);
        let with_tools = messages_for_plain_template(&messages, &fixture_tools());
        assert_eq!(with_tools.len(), 2);
        assert_eq!(with_tools[0].role, Role::System);
        assert_eq!(with_tools[0].content, hermes_tools_prompt(&fixture_tools()));
    }
}
