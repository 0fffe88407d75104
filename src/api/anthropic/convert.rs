//! Anthropic Messages request -> core request. Pure: the system prompt, text / tool_use /
//! tool_result blocks, sampling (temperature 0..1 as Anthropic allows), stop_sequences, tools and
//! the llamay_* structured-output fields. Images and hosted tools are refused by name.

use std::collections::HashMap;

use serde_json::Value;

use super::types::{
    ContentBlock, InputContent, MessagesRequest, SystemField, ToolChoiceField, ToolDefinition,
};
use crate::api::fields::{check_stops, context_request, joined_text, openai_defaults, SamplingFields, SamplingRules};
use crate::service::constraint::ConstraintSources;
use crate::api::tool_wire::{check_tool_type, checked_tools, client_tool};
use crate::core::{
    ChatMessage, PromptInput, Role, ToolCall, ToolChoice, ToolSpec,
    UncheckedGenerateRequest,
};
use crate::error::CoreError;

/// Anthropic's ranges (temperature 0-1; it sends no repeat_penalty) and defaults, which are
/// OpenAI's.
const SAMPLING: SamplingRules = SamplingRules {
    prefix: "",
    max_temperature: 1.0,
    max_repeat_penalty: 10.0,
    defaults: openai_defaults,
};

#[derive(Debug)]
pub struct Converted {
    pub request: UncheckedGenerateRequest,
    pub constraint: ConstraintSources,
    pub stream: bool,
}

pub fn convert(mut body: MessagesRequest) -> Result<Converted, CoreError> {
    if body.model.trim().is_empty() {
        return Err(CoreError::invalid("model: field required"));
    }
    // The Anthropic API has no log-probabilities: asking for them here is refused by name,
    // rather than answered without them.
    let asks = |value: &Option<serde_json::Value>| value.as_ref().is_some_and(|v| !v.is_null() && *v != serde_json::json!(false));
    for (field, asked) in [
        ("logprobs", asks(&body.logprobs)),
        ("top_logprobs", asks(&body.top_logprobs)),
        ("llamay_logprobs", body.llamay.llamay_logprobs.is_some()),
    ] {
        if asked {
            return Err(CoreError::invalid(format!(
                "{field}: the Anthropic Messages API has no log-probabilities; ask POST /v1/chat/completions or /v1/completions (logprobs), or /api/chat"
            ))
            .with_param(field));
        }
    }
    if body.max_tokens == 0 {
        return Err(CoreError::invalid("max_tokens: must be at least 1"));
    }
    if body.messages.is_empty() {
        return Err(CoreError::invalid(
            "messages: at least one message is required",
        ));
    }
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    let mut messages = Vec::new();
    if let Some(system) = body.system {
        let text = match system {
            SystemField::Text(text) => text,
            SystemField::Blocks(blocks) => text_of_blocks("system", blocks)?,
        };
        messages.push(ChatMessage::new(Role::System, text));
    }
    // Anthropic's tool_result names only the tool_use id; the prompt wants the tool's name.
    let mut call_names: HashMap<String, String> = HashMap::new();
    for (index, message) in body.messages.into_iter().enumerate() {
        let role = match message.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(CoreError::invalid(format!(
                    "messages.{index}.role: {other:?} is not \"user\" or \"assistant\""
                )))
            }
        };
        match message.content {
            InputContent::Text(text) => messages.push(ChatMessage::new(role, text)),
            InputContent::Blocks(blocks) => {
                push_blocks(&mut messages, &mut call_names, role, index, blocks)?
            }
        }
    }
    // A forced call may be several calls unless the choice says `disable_parallel_tool_use`.
    let parallel_tool_calls = !body.tool_choice.as_ref().and_then(|choice| choice.disable_parallel_tool_use).unwrap_or(false);
    let choice = body.tool_choice;
    let (tools, tool_choice) = checked_tools(body.tools.unwrap_or_default(), convert_tool, || convert_tool_choice(choice))?;

    let fields = SamplingFields { temperature: body.temperature, top_p: body.top_p, top_k: body.top_k, ..SamplingFields::default() };
    let mut sampling = fields.check(&SAMPLING)?;
    sampling.max_tokens = Some(body.max_tokens);
    let stop = check_stops("stop_sequences", body.stop_sequences.unwrap_or_default())?;

    let constraint = body.llamay.constraint_sources(body.grammar, || Ok(ConstraintSources::default()))?;

    let request = UncheckedGenerateRequest {
        sampling,
        stop,
        tool_choice,
        parallel_tool_calls,
        ..body.llamay.generate_request(body.model, PromptInput::Chat { messages, tools }, context)
    };
    Ok(Converted {
        request,
        constraint,
        stream: body.stream,
    })
}

fn text_of_blocks(field: &str, blocks: Vec<ContentBlock>) -> Result<String, CoreError> {
    joined_text(blocks.into_iter().map(|block| (block.kind, block.text)), |kind| {
        CoreError::invalid(format!("{field}: a {kind:?} block is not offered here; send text"))
    })
}

fn push_blocks(
    messages: &mut Vec<ChatMessage>,
    call_names: &mut HashMap<String, String>,
    role: Role,
    index: usize,
    blocks: Vec<ContentBlock>,
) -> Result<(), CoreError> {
    let mut current = ChatMessage::new(role, String::new());
    for block in blocks {
        match block.kind.as_str() {
            "text" => current.content.push_str(block.text.as_deref().unwrap_or("")),
            "tool_use" if role == Role::Assistant => {
                let call = ToolCall {
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    arguments: block.input.unwrap_or(Value::Object(Default::default())),
                };
                call_names.insert(call.id.clone(), call.name.clone());
                current.tool_calls.push(call);
            }
            "tool_result" if role == Role::User => {
                let content = match block.content {
                    None => String::new(),
                    Some(Value::String(text)) => text,
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|part| part.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(""),
                    Some(other) => other.to_string(),
                };
                let mut result = ChatMessage::new(Role::Tool, content);
                result.name = block
                    .tool_use_id
                    .as_deref()
                    .and_then(|id| call_names.get(id))
                    .cloned();
                result.tool_call_id = block.tool_use_id;
                messages.push(result);
            }
            kind => {
                return Err(CoreError::invalid(format!(
                    "messages.{index}.content: a {kind:?} block is not offered in this version (for {} messages)",
                    role.as_str()
                )))
            }
        }
    }
    if !current.content.is_empty() || !current.tool_calls.is_empty() {
        messages.push(current);
    }
    Ok(())
}

fn convert_tool(tool: ToolDefinition) -> Result<ToolSpec, CoreError> {
    if let Some(kind) = tool.kind.as_deref() {
        check_tool_type(kind)?;
    }
    Ok(client_tool(tool.name, tool.description, tool.input_schema))
}

/// The core choice; its `disable_parallel_tool_use` is read beside it.
fn convert_tool_choice(choice: Option<ToolChoiceField>) -> Result<ToolChoice, CoreError> {
    let Some(choice) = choice else {
        return Ok(ToolChoice::Auto);
    };
    let converted = match (choice.kind.as_str(), choice.name) {
        ("auto", _) => ToolChoice::Auto,
        ("none", _) => ToolChoice::None,
        ("any", _) => ToolChoice::Required,
        ("tool", Some(name)) => ToolChoice::Named(name),
        _ => {
            return Err(CoreError::invalid(
                "tool_choice: expected {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}",
            ))
        }
    };
    Ok(converted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::support::from_wire;
    use serde_json::json;

    #[test]
    fn system_blocks_and_tool_results_become_messages() {
        let converted = from_wire(convert, json!({
            "model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "sys"}],
            "stop_sequences": ["END"], "temperature": 0.5,
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "text", "text": "checking"}, {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Lyon"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]}]}
            ]
        }))
        .unwrap();
        let PromptInput::Chat { messages, .. } = converted.request.input else {
            panic!("chat expected")
        };
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![Role::System, Role::User, Role::Assistant, Role::Tool]
        );
        assert_eq!(messages[2].tool_calls[0].arguments, json!({"city": "Lyon"}));
        assert_eq!(messages[3].content, "sunny");
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("t1"));
        assert_eq!(converted.request.stop, vec!["END"]);
        assert_eq!(converted.request.sampling.max_tokens, Some(10));
    }

    #[test]
    fn refuses_missing_max_tokens_images_hosted_tools_and_hot_temperatures() {
        assert!(
            serde_json::from_value::<MessagesRequest>(json!({"model": "m", "messages": []}))
                .is_err()
        );
        let base =
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
        let with = |key: &str, value: Value| {
            let mut body = base.clone();
            body[key] = value;
            from_wire(convert, body).unwrap_err().message
        };
        assert!(with("temperature", json!(1.5)).contains("temperature"));
        assert!(with(
            "tools",
            json!([{"type": "web_search_20250305", "name": "web_search"}])
        )
        .contains("web_search_20250305"));
        assert!(with(
            "messages",
            json!([{"role": "user", "content": [{"type": "image", "source": {}}]}])
        )
        .contains("image"));
        assert!(with("llamay_format", json!("xml")).contains("llamay_format"));
    }

    #[test]
    fn tool_choice_forms_and_tool_result_names() {
        let converted = from_wire(convert, json!({
            "model": "m", "max_tokens": 10,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"},
                                             {"type": "text", "text": "and tomorrow?"}]}
            ]
        }))
        .unwrap();
        assert_eq!(
            converted.request.tool_choice,
            ToolChoice::Named("get_weather".into())
        );
        assert!(!converted.request.parallel_tool_calls);
        let PromptInput::Chat { messages, .. } = converted.request.input else {
            panic!("chat expected")
        };
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].name.as_deref(), Some("get_weather"));
        assert_eq!(messages[3].content, "and tomorrow?");

        let base = |choice: Value| {
            from_wire(
                convert,
                json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                         "tools": [{"name": "a"}], "tool_choice": choice}),
            )
        };
        let any = base(json!({"type": "any"})).unwrap().request;
        assert_eq!(
            (any.tool_choice, any.parallel_tool_calls),
            (ToolChoice::Required, true)
        );
        assert_eq!(
            base(json!({"type": "none"})).unwrap().request.tool_choice,
            ToolChoice::None
        );
        let error = base(json!({"type": "tool", "name": "b"})).unwrap_err();
        assert!(error.message.contains("\"b\""), "{}", error.message);
    }
}
