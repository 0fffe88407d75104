//! OpenAI chat request -> core request. Pure: checks every field, maps roles and content parts,
//! collects the structured-output sources (llamay_schema and llamay_format win over
//! response_format), and refuses what this daemon does not do (n > 1, images, hosted tools).

use serde_json::Value;

use super::types::{
    ChatCompletionRequest, MessageContent, RequestMessage, ResponseFormat, StopField, Tool,
};
use crate::api::fields::{check_stops, context_request, joined_text, openai_defaults, SamplingFields, SamplingRules};
use crate::service::constraint::ConstraintSources;
use crate::api::tool_wire::{check_tool_type, checked_tools, client_tool, earlier_calls, openai_style_choice};
use crate::core::{
    ChatMessage, PromptInput, Role, SamplingParams, ToolSpec, UncheckedGenerateRequest,
};
use crate::error::CoreError;

/// A converted request: the generation service checks `request` and compiles `constraint`.
#[derive(Debug)]
pub struct Converted {
    pub request: UncheckedGenerateRequest,
    pub constraint: ConstraintSources,
    pub stream: bool,
    pub include_usage: bool,
}

pub fn convert(mut body: ChatCompletionRequest) -> Result<Converted, CoreError> {
    if body.model.trim().is_empty() {
        return Err(CoreError::invalid("model is required").with_param("model"));
    }
    if let Some(n) = body.n {
        if n != 1 {
            return Err(CoreError::invalid(format!(
                "n is {n}: llamay returns one choice per request; send n = 1 or leave it out"
            ))
            .with_param("n"));
        }
    }
    let logprobs = body.logprobs == Some(true);
    if !logprobs && body.top_logprobs.is_some_and(|n| n > 0) {
        return Err(CoreError::invalid("top_logprobs needs logprobs: true").with_param("top_logprobs"));
    }
    let logprobs = body.llamay.logprobs(logprobs, body.top_logprobs, "top_logprobs", false)?;
    if body.messages.is_empty() {
        return Err(
            CoreError::invalid("messages is empty; send at least one message")
                .with_param("messages"),
        );
    }
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    let messages = body.messages.into_iter().enumerate().map(|(i, m)| convert_message(i, m)).collect::<Result<Vec<_>, _>>()?;
    let choice = body.tool_choice.as_ref();
    let (tools, tool_choice) = checked_tools(body.tools.unwrap_or_default(), convert_tool, || openai_style_choice(choice))?;

    let ChatCompletionRequest { temperature, top_p, min_p, repeat_penalty, top_k, seed, .. } = body;
    let fields = SamplingFields { temperature, top_p, min_p, repeat_penalty, top_k, seed };
    let sampling = openai_sampling(fields, ("max_tokens", body.max_completion_tokens.or(body.max_tokens)))?;
    let stop = check_stops("stop", StopField::list(body.stop))?;

    let response_format = body.response_format;
    let constraint = body.llamay.constraint_sources(body.grammar, || response_format_sources(response_format))?;
    let request = UncheckedGenerateRequest {
        sampling,
        stop,
        tool_choice,
        parallel_tool_calls: body.parallel_tool_calls.unwrap_or(true),
        logprobs,
        ..body.llamay.generate_request(body.model, PromptInput::Chat { messages, tools }, context)
    };
    Ok(Converted {
        request,
        constraint,
        stream: body.stream,
        include_usage: body.stream_options.is_some_and(|o| o.include_usage),
    })
}

fn convert_message(index: usize, message: RequestMessage) -> Result<ChatMessage, CoreError> {
    let param = format!("messages[{index}]");
    let role = chat_role(&param, &message.role)?;
    let content = match message.content {
        None => String::new(),
        Some(MessageContent::Text(text)) => text,
        Some(MessageContent::Parts(parts)) => joined_text(parts.into_iter().map(|part| (part.kind, part.text)), |kind| {
            CoreError::invalid(format!("{param}.content has a {kind:?} part; only text is offered in this version"))
                .with_param(param.clone())
        })?,
    };
    let calls = message.tool_calls.unwrap_or_default().into_iter();
    let tool_calls = earlier_calls(
        calls.map(|call| (call.id, call.function.name, arguments_value(call.function.arguments))),
        |i| format!("call_{i}"),
    );
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        name: message.name,
        tool_call_id: message.tool_call_id,
    })
}

fn convert_tool(tool: Tool) -> Result<ToolSpec, CoreError> {
    let function = tool.function;
    function_tool(&tool.kind, "tools", || function.map(|f| (f.name, f.description, f.parameters)))
}

/// A client function tool, refusing hosted and unknown `type`s by name: `definition` gives its
/// name, description and parameters (absent parameters: an object with any members).
pub(super) fn function_tool(
    kind: &str,
    param: &str,
    definition: impl FnOnce() -> Option<(String, Option<String>, Option<Value>)>,
) -> Result<ToolSpec, CoreError> {
    check_tool_type(kind).map_err(|error| error.with_param(param))?;
    let (name, description, parameters) = definition().ok_or_else(|| {
        CoreError::invalid("a function tool needs its \"function\" object").with_param(param)
    })?;
    Ok(client_tool(name, description, parameters))
}

/// A role as OpenAI's chat and Responses APIs name them.
pub(super) fn chat_role(param: &str, role: &str) -> Result<Role, CoreError> {
    match role {
        "system" | "developer" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" | "function" => Ok(Role::Tool),
        other => Err(CoreError::invalid(format!(
            "{param}.role {other:?} is not one of system, developer, user, assistant, tool"
        ))
        .with_param(param)),
    }
}

/// A call's arguments as OpenAI sends them (JSON text) read into JSON; text that is not JSON
/// is kept as a string, so a model's malformed call from an earlier turn still renders.
pub(super) fn arguments_value(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// OpenAI's ranges (temperature 0-2; repeat_penalty, llama.cpp's, 0-10) and defaults, for
/// chat, completions and Responses.
pub(super) const SAMPLING: SamplingRules = SamplingRules {
    prefix: "",
    max_temperature: 2.0,
    max_repeat_penalty: 10.0,
    defaults: openai_defaults,
};

/// The sampling fields under OpenAI's rules, with the token budget `max_tokens`: its field's
/// name (`max_tokens`, `max_output_tokens`) and value, at least 1 when sent.
pub(super) fn openai_sampling(
    fields: SamplingFields,
    max_tokens: (&'static str, Option<u32>),
) -> Result<SamplingParams, CoreError> {
    let mut sampling = fields.check(&SAMPLING)?;
    let (name, max_tokens) = max_tokens;
    if max_tokens == Some(0) {
        return Err(CoreError::invalid(format!("{name} must be at least 1")).with_param(name));
    }
    sampling.max_tokens = max_tokens;
    Ok(sampling)
}

/// What OpenAI's `response_format` asks for.
pub(super) fn response_format_sources(response_format: Option<ResponseFormat>) -> Result<ConstraintSources, CoreError> {
    match response_format {
        None => Ok(ConstraintSources::default()),
        Some(format) => format_sources(&format.kind, format.json_schema.and_then(|s| s.schema), "response_format"),
    }
}

/// The constraint of an output format of `kind` (`text`, `json_object`, `json_schema` with
/// `schema`), as chat's `response_format` and Responses' `text.format` name them (`param`).
pub(super) fn format_sources(kind: &str, schema: Option<Value>, param: &'static str) -> Result<ConstraintSources, CoreError> {
    let mut sources = ConstraintSources::default();
    match kind {
        "text" => {}
        "json_object" => sources.any_json = Some(param),
        "json_schema" => {
            let schema = schema.ok_or_else(|| {
                CoreError::invalid(format!("{param} json_schema needs its schema")).with_param(param)
            })?;
            sources.schema = Some((schema, param));
        }
        other => {
            return Err(CoreError::invalid(format!(
                "{param} type {other:?} is not one of \"text\", \"json_object\", \"json_schema\""
            ))
            .with_param(param))
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::support::from_wire;
    use serde_json::json;

    #[test]
    fn maps_messages_sampling_and_stops() {
        let converted = from_wire(convert, json!({
            "model": "smollm2:135m", "temperature": 0, "max_completion_tokens": 20, "seed": -1,
            "stop": "\n", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "developer", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]
        }))
        .unwrap();
        let request = converted.request;
        assert_eq!(request.sampling.temperature, 0.0);
        assert_eq!(request.sampling.max_tokens, Some(20));
        assert_eq!(request.sampling.seed, Some(u32::MAX));
        assert_eq!(request.stop, vec!["\n"]);
        assert!(converted.stream && converted.include_usage);
        let PromptInput::Chat { messages, .. } = request.input else {
            panic!("chat input expected")
        };
        assert_eq!(messages[0].role, Role::System);
        assert_eq!(messages[1].content, "hi there");
    }

    #[test]
    fn refuses_what_is_not_offered() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let with = |key: &str, value: serde_json::Value| {
            let mut body = base.clone();
            body[key] = value;
            from_wire(convert, body).unwrap_err()
        };
        assert_eq!(with("n", json!(2)).param.as_deref(), Some("n"));
        assert_eq!(
            with("temperature", json!(3.5)).param.as_deref(),
            Some("temperature")
        );
        assert_eq!(
            with("max_tokens", json!(0)).param.as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            with("llamay_format", json!("yaml")).param.as_deref(),
            Some("llamay_format")
        );
        assert_eq!(
            with("response_format", json!({"type": "xml"}))
                .param
                .as_deref(),
            Some("response_format")
        );
        assert!(with("tools", json!([{"type": "web_search"}]))
            .message
            .contains("web_search"));
        assert_eq!(
            with("messages", json!([])).param.as_deref(),
            Some("messages")
        );
        assert!(with(
            "messages",
            json!([{"role": "user", "content": [{"type": "image_url"}]}])
        )
        .message
        .contains("image_url"));
        assert!(with("stop", json!(vec!["x"; 17]))
            .message
            .contains("at most"));
    }

    #[test]
    fn logprobs_are_read_and_their_ranges_checked() {
        let ask = |extra: serde_json::Value| {
            let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
            for (key, value) in extra.as_object().unwrap() {
                body[key] = value.clone();
            }
            from_wire(convert, body)
        };
        let asked = ask(json!({"logprobs": true, "top_logprobs": 5})).unwrap().request.logprobs.unwrap();
        assert_eq!((asked.answer, asked.top, asked.mode, asked.prompt), (true, 5, crate::core::LogprobMode::Model, false));
        assert!(ask(json!({"logprobs": false})).unwrap().request.logprobs.is_none());
        for (extra, field) in [
            (json!({"logprobs": true, "top_logprobs": 21}), "top_logprobs"),
            (json!({"logprobs": true, "top_logprobs": -1}), "top_logprobs"),
            (json!({"top_logprobs": 3}), "top_logprobs"),
            (json!({"logprobs": true, "llamay_logprobs": "sampled"}), "llamay_logprobs"),
        ] {
            assert_eq!(ask(extra.clone()).unwrap_err().param.as_deref(), Some(field), "{extra}");
        }
        let constrained = ask(json!({"logprobs": true, "llamay_logprobs": "constrained"})).unwrap();
        assert_eq!(constrained.request.logprobs.unwrap().mode, crate::core::LogprobMode::Constrained);
    }

    #[test]
    fn llamay_schema_wins_over_response_format() {
        let converted = from_wire(convert, json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_object"},
            "llamay_schema": {"type": "integer"}
        }))
        .unwrap();
        assert_eq!(
            converted
                .constraint
                .schema
                .as_ref()
                .map(|(s, p)| (s.clone(), *p)),
            Some((json!({"type": "integer"}), "llamay_schema"))
        );
        assert_eq!(converted.constraint.any_json, None);
        let converted = from_wire(convert, json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}},
            "grammar": "root ::= \"a\""
        }))
        .unwrap();
        assert!(converted.constraint.schema.is_some() && converted.constraint.grammar.is_some());
    }

    #[test]
    fn tool_results_and_earlier_calls_convert() {
        let converted = from_wire(convert, json!({
            "model": "m", "parallel_tool_calls": false,
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Pune\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
            ]
        }))
        .unwrap();
        assert!(!converted.request.parallel_tool_calls);
        let PromptInput::Chat { messages, tools } = converted.request.input else {
            panic!("chat expected")
        };
        assert_eq!(tools[0].parameters, json!({"type": "object"}));
        assert_eq!(messages[1].tool_calls[0].arguments, json!({"city": "Pune"}));
        assert_eq!(messages[1].tool_calls[0].id, "call_1");
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn a_named_tool_that_was_not_offered_is_refused_by_name() {
        let error = from_wire(convert, json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            "tool_choice": {"type": "function", "function": {"name": "get_news"}}
        }))
        .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tool_choice"));
        assert!(error.message.contains("\"get_news\""), "{}", error.message);
    }
}
