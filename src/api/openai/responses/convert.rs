//! Responses request -> core request. Pure: reads `input` (a string, or items: messages with
//! text parts, `function_call`, `function_call_output`; `reasoning` items carry nothing to
//! render and are kept only as input items), puts `instructions` first and a stored
//! conversation (`previous_response_id`) before the new input, and reads tools, `tool_choice`,
//! `text.format`, sampling and the `llamay_*` fields through the chat conversion's own pieces.
//! Refused by name: an unknown item type, a non-text part, a `function_call_output` whose
//! `call_id` no call in the conversation made, hosted tools, bad `metadata` or `truncation`.
//!
//! Key items: [`convert`], [`ConvertedResponse`], [`Echo`]. Costs: linear in the input.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::types::{InputField, ResponsesRequest, TextFormat};
use crate::api::common::random_id;
use crate::api::fields::{context_request, SamplingFields};
use crate::api::openai::convert::{arguments_value, chat_role, format_sources, function_tool, openai_sampling};
use crate::api::tool_wire::{checked_tools, openai_style_choice};
use crate::core::{ChatMessage, PromptInput, Role, ToolCall, ToolSpec, UncheckedGenerateRequest};
use crate::error::CoreError;
use crate::service::constraint::ConstraintSources;

/// Most `metadata` pairs, and the longest key and value, as OpenAI bounds them.
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

/// A converted request: the generation service checks `request` and compiles `constraint`.
#[derive(Debug)]
pub struct ConvertedResponse {
    pub request: UncheckedGenerateRequest,
    pub constraint: ConstraintSources,
    pub stream: bool,
    /// `store` (true unless the request says false).
    pub store: bool,
    /// The stored conversation this one continues, then this request's input; no instructions.
    pub conversation: Vec<ChatMessage>,
    /// This request's input as items, each with an id (what `input_items` lists).
    pub input_items: Vec<Value>,
    pub echo: Echo,
}

/// What the response object repeats of its request.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub model: String,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub metadata: Value,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: f64,
    pub top_p: f64,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub truncation: String,
    pub user: Option<String>,
}

/// `body` as a core request continuing `previous` (the stored conversation of
/// `previous_response_id`, empty without one).
pub fn convert(mut body: ResponsesRequest, previous: Vec<ChatMessage>) -> Result<ConvertedResponse, CoreError> {
    if body.model.trim().is_empty() {
        return Err(CoreError::invalid("model is required").with_param("model"));
    }
    refuse_hosted_state(&body)?;
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    let items = match body.input.take() {
        None => Vec::new(),
        Some(InputField::Text(text)) => vec![json!({"type": "message", "role": "user", "content": text})],
        Some(InputField::Items(items)) => items,
    };
    if items.is_empty() {
        return Err(CoreError::invalid("input is empty; send a string or at least one item").with_param("input"));
    }
    let mut conversation = previous;
    let input_items = convert_input(items, &mut conversation)?;

    let raw_tools = body.tools.take().unwrap_or_default();
    let choice = body.tool_choice.as_ref();
    let (tools, tool_choice) =
        checked_tools(raw_tools.iter().enumerate(), |(i, tool)| convert_tool(i, tool), || openai_style_choice(choice))?;
    let ResponsesRequest { temperature, top_p, min_p, repeat_penalty, top_k, seed, .. } = body;
    let fields = SamplingFields { temperature, top_p, min_p, repeat_penalty, top_k, seed };
    let sampling = openai_sampling(fields, ("max_output_tokens", body.max_output_tokens))?;
    let metadata = check_metadata(body.metadata.take())?;
    let truncation = match body.truncation.as_deref() {
        None | Some("disabled") => "disabled",
        Some("auto") => "auto",
        Some(other) => {
            return Err(CoreError::invalid(format!("truncation {other:?} is not \"auto\" or \"disabled\""))
                .with_param("truncation"))
        }
    };
    let format = body.text.take().and_then(|text| text.format);
    let text = text_echo(format.as_ref());
    let constraint = body.llamay.constraint_sources(body.grammar.take(), || match format {
        None => Ok(ConstraintSources::default()),
        Some(format) => format_sources(&format.kind, format.schema, "text.format"),
    })?;

    let mut messages = Vec::with_capacity(conversation.len() + 1);
    if let Some(instructions) = body.instructions.as_ref().filter(|text| !text.is_empty()) {
        messages.push(ChatMessage::new(Role::System, instructions.clone()));
    }
    messages.extend(conversation.iter().cloned());
    let parallel_tool_calls = body.parallel_tool_calls.unwrap_or(true);
    let store = body.store.unwrap_or(true);
    let echo = Echo {
        model: body.model.clone(),
        instructions: body.instructions,
        max_output_tokens: body.max_output_tokens,
        metadata,
        parallel_tool_calls,
        previous_response_id: body.previous_response_id,
        reasoning: json!({"effort": body.reasoning.as_ref().and_then(|r| r.get("effort")).cloned(), "summary": null}),
        store,
        temperature: body.temperature.unwrap_or(1.0),
        top_p: body.top_p.unwrap_or(1.0),
        text,
        tool_choice: body.tool_choice.unwrap_or_else(|| json!("auto")),
        tools: raw_tools,
        truncation: truncation.to_string(),
        user: body.user,
    };
    // Responses requests send no stop strings and ask for no log-probabilities.
    let request = UncheckedGenerateRequest {
        sampling,
        tool_choice,
        parallel_tool_calls,
        ..body.llamay.generate_request(body.model, PromptInput::Chat { messages, tools }, context)
    };
    Ok(ConvertedResponse { request, constraint, stream: body.stream, store, conversation, input_items, echo })
}

/// OpenAI's conversations, background runs and stored prompts live on OpenAI's side; llamay
/// keeps conversations through `previous_response_id` and answers while the request waits.
fn refuse_hosted_state(body: &ResponsesRequest) -> Result<(), CoreError> {
    let refused = if body.conversation.as_ref().is_some_and(|value| !value.is_null()) {
        Some(("conversation", "conversations are not offered; continue a stored response with previous_response_id"))
    } else if body.background == Some(true) {
        Some(("background", "background responses are not offered; every response runs while its request waits"))
    } else if body.prompt.as_ref().is_some_and(|value| !value.is_null()) {
        Some(("prompt", "stored prompt templates are not offered; send instructions and input"))
    } else {
        None
    };
    match refused {
        Some((param, message)) => Err(CoreError::invalid(format!("{param}: {message}")).with_param(param)),
        None => Ok(()),
    }
}

/// Appends each input item to `conversation`; returns the items with ids, as stored.
fn convert_input(items: Vec<Value>, conversation: &mut Vec<ChatMessage>) -> Result<Vec<Value>, CoreError> {
    // Which calls the conversation made, so an output names one of them and renders with its name.
    let mut calls: HashMap<String, String> = conversation
        .iter()
        .flat_map(|message| message.tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())))
        .collect();
    let mut stored = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let param = format!("input[{index}]");
        let Value::Object(item) = item else {
            return Err(CoreError::invalid(format!("{param} must be an object (an input item)")).with_param(param));
        };
        let kind = match item.get("type") {
            None if item.contains_key("role") => "message",
            None => return Err(CoreError::invalid(format!("{param}.type is required")).with_param(param)),
            Some(kind) => kind.as_str().unwrap_or(""),
        };
        let id = item.get("id").and_then(Value::as_str).map(str::to_string);
        let text_field = |name: &str| item.get(name).and_then(Value::as_str).map(str::to_string);
        match kind {
            "message" => {
                let role_name = text_field("role").unwrap_or_default();
                let role = chat_role(&param, &role_name)?;
                if role == Role::Tool {
                    return Err(CoreError::invalid(format!(
                        "{param}.role \"{role_name}\" is a chat role; send a tool's result as a function_call_output item"
                    ))
                    .with_param(param));
                }
                let text = message_text(&param, item.get("content"))?;
                let part = match role {
                    Role::Assistant => json!({"type": "output_text", "text": text, "annotations": []}),
                    _ => json!({"type": "input_text", "text": text}),
                };
                stored.push(json!({
                    "type": "message", "id": id.unwrap_or_else(|| format!("msg_{}", random_id(24))),
                    "role": role_name, "content": [part], "status": "completed",
                }));
                conversation.push(ChatMessage::new(role, text));
            }
            "function_call" => {
                let call_id = required_text(&param, "call_id", text_field("call_id"))?;
                let name = required_text(&param, "name", text_field("name"))?;
                let arguments = text_field("arguments").unwrap_or_else(|| "{}".to_string());
                calls.insert(call_id.clone(), name.clone());
                stored.push(json!({
                    "type": "function_call", "id": id.unwrap_or_else(|| format!("fc_{}", random_id(24))),
                    "call_id": call_id, "name": name, "arguments": arguments, "status": "completed",
                }));
                let call = ToolCall { id: call_id, name, arguments: arguments_value(arguments) };
                // Calls that follow an answer (or each other) belong to that assistant turn.
                match conversation.last_mut() {
                    Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
                    _ => conversation.push(ChatMessage { tool_calls: vec![call], ..ChatMessage::new(Role::Assistant, "") }),
                }
            }
            "function_call_output" => {
                let call_id = required_text(&param, "call_id", text_field("call_id"))?;
                let Some(name) = calls.get(&call_id) else {
                    return Err(CoreError::invalid(format!(
                        "{param}.call_id {call_id:?} names no function_call of this conversation; send the call \
                         first (as a function_call item, or through previous_response_id)"
                    ))
                    .with_param(format!("{param}.call_id")));
                };
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(_)) => message_text(&format!("{param}.output"), item.get("output"))?,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                stored.push(json!({
                    "type": "function_call_output", "id": id.unwrap_or_else(|| format!("fco_{}", random_id(24))),
                    "call_id": call_id, "output": output, "status": "completed",
                }));
                conversation.push(ChatMessage {
                    name: Some(name.clone()),
                    tool_call_id: Some(call_id),
                    ..ChatMessage::new(Role::Tool, output)
                });
            }
            // A model that reasons sends these back; there is nothing in them to render.
            "reasoning" => stored.push(Value::Object(item)),
            "item_reference" => {
                return Err(CoreError::invalid(format!(
                    "{param} is an item_reference; llamay does not resolve item references: send the item itself, \
                     or continue a stored response with previous_response_id"
                ))
                .with_param(param))
            }
            other => {
                return Err(CoreError::invalid(format!(
                    "{param}.type {other:?} is not one of message, function_call, function_call_output, reasoning"
                ))
                .with_param(format!("{param}.type")))
            }
        }
    }
    Ok(stored)
}

fn required_text(param: &str, field: &str, value: Option<String>) -> Result<String, CoreError> {
    value
        .filter(|text| !text.is_empty())
        .ok_or_else(|| CoreError::invalid(format!("{param}.{field} is required (a string)")).with_param(format!("{param}.{field}")))
}

/// A message's text: a string, or its text parts (`input_text`, `output_text`, `refusal`) joined.
fn message_text(param: &str, content: Option<&Value>) -> Result<String, CoreError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (index, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                let field = match kind {
                    "input_text" | "output_text" | "text" => "text",
                    "refusal" => "refusal",
                    other => {
                        return Err(CoreError::invalid(format!(
                            "{param}.content[{index}] is a {other:?} part; only text is offered in this version"
                        ))
                        .with_param(param))
                    }
                };
                text.push_str(part.get(field).and_then(Value::as_str).unwrap_or(""));
            }
            Ok(text)
        }
        Some(_) => Err(CoreError::invalid(format!("{param}.content must be a string or a list of parts")).with_param(param)),
    }
}

/// A tool as Responses sends it: `{"type": "function", "name", "description", "parameters", "strict"}`.
fn convert_tool(index: usize, tool: &Value) -> Result<ToolSpec, CoreError> {
    let param = format!("tools[{index}]");
    let kind = tool
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| CoreError::invalid(format!("{param}.type is required")).with_param(param.clone()))?;
    function_tool(kind, &param, || {
        let text = |name: &str| tool.get(name).and_then(Value::as_str).map(str::to_string);
        let parameters = tool.get("parameters").filter(|value| !value.is_null()).cloned();
        Some((text("name").unwrap_or_default(), text("description"), parameters))
    })
}

/// `metadata`: at most 16 string pairs, keys up to 64 characters, values up to 512.
fn check_metadata(metadata: Option<Value>) -> Result<Value, CoreError> {
    let map = match metadata {
        None | Some(Value::Null) => return Ok(Value::Object(Map::new())),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(CoreError::invalid("metadata must be an object of strings").with_param("metadata")),
    };
    if map.len() > MAX_METADATA_PAIRS {
        return Err(CoreError::invalid(format!("metadata has {} keys; at most {MAX_METADATA_PAIRS}", map.len()))
            .with_param("metadata"));
    }
    for (key, value) in &map {
        let fits = value.as_str().is_some_and(|text| text.chars().count() <= MAX_METADATA_VALUE);
        if key.chars().count() > MAX_METADATA_KEY || !fits {
            return Err(CoreError::invalid(format!(
                "metadata {key:?}: keys are strings of at most {MAX_METADATA_KEY} characters, values strings of at most {MAX_METADATA_VALUE}"
            ))
            .with_param("metadata"));
        }
    }
    Ok(Value::Object(map))
}

fn text_echo(format: Option<&TextFormat>) -> Value {
    match format {
        None => json!({"format": {"type": "text"}}),
        Some(format) => {
            let mut echoed = json!({"type": format.kind});
            for (key, value) in [("name", format.name.clone().map(Value::String)), ("schema", format.schema.clone()), ("strict", format.strict.map(Value::Bool))] {
                if let Some(value) = value {
                    echoed[key] = value;
                }
            }
            json!({"format": echoed})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value, previous: Vec<ChatMessage>) -> Result<ConvertedResponse, CoreError> {
        convert(serde_json::from_value(value).map_err(|e| CoreError::invalid(e.to_string()))?, previous)
    }

    fn messages(converted: &ConvertedResponse) -> &[ChatMessage] {
        match &converted.request.input {
            PromptInput::Chat { messages, .. } => messages,
            PromptInput::Raw { .. } | PromptInput::Tokens(_) => panic!("chat input expected"),
        }
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_instructions() {
        let converted = parse(
            json!({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 20, "temperature": 0}),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(messages(&converted), [ChatMessage::new(Role::System, "be brief"), ChatMessage::new(Role::User, "hi")]);
        assert_eq!(converted.conversation, [ChatMessage::new(Role::User, "hi")]);
        assert_eq!(converted.request.sampling.max_tokens, Some(20));
        assert_eq!(converted.request.sampling.temperature, 0.0);
        assert!(converted.store && !converted.stream);
        assert_eq!(converted.input_items[0]["content"][0], json!({"type": "input_text", "text": "hi"}));
        assert!(converted.input_items[0]["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(converted.echo.text, json!({"format": {"type": "text"}}));
    }

    #[test]
    fn items_become_turns_with_calls_and_their_results() {
        let converted = parse(
            json!({"model": "m", "store": false, "input": [
                {"role": "developer", "content": "use tools"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather "}, {"type": "input_text", "text": "in Pune?"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Pune\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "reasoning", "id": "rs_1", "summary": []}
            ], "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}]}),
            Vec::new(),
        )
        .unwrap();
        let turns = messages(&converted);
        assert_eq!(turns.len(), 4);
        assert_eq!(turns[0].role, Role::System);
        assert_eq!(turns[1].content, "weather in Pune?");
        assert_eq!((turns[2].content.as_str(), turns[2].tool_calls[0].arguments.clone()), ("Checking.", json!({"city": "Pune"})));
        assert_eq!((turns[3].role, turns[3].name.as_deref(), turns[3].tool_call_id.as_deref()), (Role::Tool, Some("get_weather"), Some("call_1")));
        assert!(!converted.store);
        assert_eq!(converted.input_items.len(), 6);
        let PromptInput::Chat { tools, .. } = &converted.request.input else { panic!("chat") };
        assert_eq!(tools[0].name, "get_weather");
    }

    #[test]
    fn a_continuation_follows_the_stored_conversation_and_may_answer_its_calls() {
        let call = ToolCall { id: "call_9".into(), name: "lookup".into(), arguments: json!({}) };
        let previous = vec![
            ChatMessage::new(Role::User, "find it"),
            ChatMessage { tool_calls: vec![call], ..ChatMessage::new(Role::Assistant, "") },
        ];
        let converted = parse(
            json!({"model": "m", "instructions": "new rules", "previous_response_id": "resp_1",
                   "input": [{"type": "function_call_output", "call_id": "call_9", "output": "found"}]}),
            previous.clone(),
        )
        .unwrap();
        let turns = messages(&converted);
        assert_eq!(turns[0], ChatMessage::new(Role::System, "new rules"));
        assert_eq!(&turns[1..3], previous.as_slice());
        assert_eq!(turns[3].content, "found");
        assert_eq!(converted.conversation.len(), 3);
        assert_eq!(converted.echo.previous_response_id.as_deref(), Some("resp_1"));
    }

    #[test]
    fn text_format_goes_through_the_constraint_sources() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let converted = parse(
            json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "o", "schema": schema, "strict": true}}}),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(converted.constraint.schema, Some((schema, "text.format")));
        assert_eq!(converted.echo.text["format"]["name"], "o");
        let converted = parse(json!({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}), Vec::new()).unwrap();
        assert_eq!(converted.constraint.any_json, Some("text.format"));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let refused = |body: Value| parse(body, Vec::new()).unwrap_err();
        let error = refused(json!({"model": "m", "input": [{"type": "computer_call", "id": "c"}]}));
        assert_eq!(error.param.as_deref(), Some("input[0].type"));
        assert!(error.message.contains("computer_call"), "{}", error.message);
        let error = refused(json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "call_x", "output": "?"}]}));
        assert_eq!(error.param.as_deref(), Some("input[0].call_id"));
        assert!(error.message.contains("call_x"), "{}", error.message);
        let error = refused(json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}));
        assert!(error.message.contains("web_search"), "{}", error.message);
        assert_eq!(error.status(), 400);
        let error = refused(json!({"model": "m", "input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}));
        assert!(error.message.contains("file_search"), "{}", error.message);
        let error = refused(json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}));
        assert!(error.message.contains("input_image"), "{}", error.message);
        assert_eq!(refused(json!({"model": "m", "input": []})).param.as_deref(), Some("input"));
        assert_eq!(refused(json!({"model": "m"})).param.as_deref(), Some("input"));
        assert_eq!(refused(json!({"model": "", "input": "x"})).param.as_deref(), Some("model"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "max_output_tokens": 0})).param.as_deref(), Some("max_output_tokens"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "temperature": 3})).param.as_deref(), Some("temperature"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "truncation": "middle"})).param.as_deref(), Some("truncation"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "metadata": {"k": 1}})).param.as_deref(), Some("metadata"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}})).param.as_deref(), Some("text.format"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "llamay_shcema": {}})).param.as_deref(), Some("llamay_shcema"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "conversation": "conv_1"})).param.as_deref(), Some("conversation"));
        assert_eq!(refused(json!({"model": "m", "input": "x", "background": true})).param.as_deref(), Some("background"));
        let error = refused(json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}],
                                   "tool_choice": {"type": "function", "name": "g"}}));
        assert_eq!(error.param.as_deref(), Some("tool_choice"));
    }
}
