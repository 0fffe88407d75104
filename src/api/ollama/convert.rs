//! Ollama chat/generate requests -> core requests. Pure: messages, `options` (temperature,
//! num_predict, seed, stop, num_ctx, num_gpu...), `format` (a schema or "json"), the grammar fields,
//! `keep_alive`, and the load/unload form (an empty prompt or no messages).

use serde_json::Value;

use super::types::{ChatRequest, GenerateRequest, Message, Options, Tool};
use crate::api::fields::{check_stops, context_request, SamplingFields, SamplingRules};
use crate::service::constraint::ConstraintSources;
use crate::api::tool_wire::{check_tool_type, checked_tools, client_tool, earlier_calls, openai_style_choice};
use crate::core::{
    ChatMessage, KeepAlive, PromptInput, Role, SamplingParams, ToolChoice, ToolSpec,
    UncheckedGenerateRequest,
};
use crate::error::CoreError;

/// Ollama's ranges (temperature and repeat_penalty 0-100) under `options.`, and its defaults.
const SAMPLING: SamplingRules = SamplingRules {
    prefix: "options.",
    max_temperature: 100.0,
    max_repeat_penalty: 100.0,
    defaults: SamplingParams::default,
};

#[derive(Debug)]
pub struct Converted {
    pub request: UncheckedGenerateRequest,
    pub constraint: ConstraintSources,
    pub stream: bool,
    /// Nothing to generate: load the model (or unload it, with keep_alive 0) and answer at once.
    pub load_only: bool,
    /// `options.num_gpu`: layers on a GPU. A load-time option, as in Ollama: a loaded copy
    /// with other layers is loaded again once idle.
    pub gpu_layers: Option<u32>,
}

/// Ollama's `logprobs` and `top_logprobs` (alternatives per token, 0-20; only with `logprobs`).
fn logprobs_request(
    llamay: &crate::api::extensions::LlamayFields,
    logprobs: Option<bool>,
    top: Option<i64>,
) -> Result<Option<crate::core::LogprobsRequest>, CoreError> {
    let logprobs = logprobs == Some(true);
    if !logprobs && top.is_some_and(|n| n > 0) {
        return Err(CoreError::invalid("top_logprobs needs logprobs: true").with_param("top_logprobs"));
    }
    llamay.logprobs(logprobs, top, "top_logprobs", false)
}

pub fn convert_chat(mut body: ChatRequest) -> Result<Converted, CoreError> {
    check_model(&body.model)?;
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    let load_only = body.messages.is_empty();
    let messages = body.messages.into_iter().enumerate().map(|(i, m)| convert_message(i, m)).collect::<Result<Vec<_>, _>>()?;
    let choice = body.tool_choice.as_ref();
    let (tools, tool_choice) = checked_tools(body.tools.unwrap_or_default(), convert_tool, || openai_style_choice(choice))?;
    let gpu_layers = gpu_layers(body.options.as_ref());
    let (sampling, stop, num_ctx) = convert_options(body.options)?;
    let request = UncheckedGenerateRequest {
        sampling,
        stop,
        num_ctx,
        keep_alive: convert_keep_alive(body.keep_alive)?,
        tool_choice,
        logprobs: logprobs_request(&body.llamay, body.logprobs, body.top_logprobs)?,
        ..body.llamay.generate_request(body.model, PromptInput::Chat { messages, tools }, context)
    };
    Ok(Converted {
        request,
        constraint: body.llamay.constraint_sources(body.grammar, || format_sources(body.format))?,
        stream: body.stream.unwrap_or(true),
        load_only,
        gpu_layers,
    })
}

pub fn convert_generate(mut body: GenerateRequest) -> Result<Converted, CoreError> {
    check_model(&body.model)?;
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    if body.template.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err(CoreError::invalid("template: a per-request template is not offered; the model's own chat template is used (raw: true sends the prompt as is)"));
    }
    if body.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(CoreError::invalid(
            "suffix: fill-in-the-middle is not offered in this version",
        ));
    }
    if body.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(CoreError::invalid(
            "images: image input is not offered in this version",
        ));
    }
    let context = match (context, body.context.take().filter(|c| !c.is_empty())) {
        (Some(_), Some(_)) => {
            return Err(CoreError::invalid("send context (token ids) or llamay_context (a context id), not both"));
        }
        (named, None) => named,
        (None, Some(tokens)) => Some(crate::core::ContextRequest::Tokens(
            tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    u32::try_from(t)
                        .map_err(|_| CoreError::invalid(format!("context[{i}] is {t}, which is not a token id")))
                })
                .collect::<Result<Vec<_>, _>>()?,
        )),
    };
    let prompt = body.prompt.unwrap_or_default();
    let load_only = prompt.is_empty();
    let gpu_layers = gpu_layers(body.options.as_ref());
    let (sampling, stop, num_ctx) = convert_options(body.options)?;
    let input = PromptInput::Raw { prompt, system: body.system, template: !body.raw.unwrap_or(false) };
    let request = UncheckedGenerateRequest {
        sampling,
        stop,
        num_ctx,
        keep_alive: convert_keep_alive(body.keep_alive)?,
        tool_choice: ToolChoice::Auto,
        logprobs: logprobs_request(&body.llamay, body.logprobs, body.top_logprobs)?,
        ..body.llamay.generate_request(body.model, input, context)
    };
    Ok(Converted {
        request,
        constraint: body.llamay.constraint_sources(body.grammar, || format_sources(body.format))?,
        stream: body.stream.unwrap_or(true),
        load_only,
        gpu_layers,
    })
}

fn check_model(model: &str) -> Result<(), CoreError> {
    if model.trim().is_empty() {
        return Err(CoreError::invalid("model is required"));
    }
    Ok(())
}

fn convert_message(index: usize, message: Message) -> Result<ChatMessage, CoreError> {
    let role = match message.role.as_str() {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(CoreError::invalid(format!(
                "messages[{index}].role {other:?} is not one of system, user, assistant, tool"
            )))
        }
    };
    if message.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(CoreError::invalid(format!(
            "messages[{index}].images: image input is not offered in this version"
        )));
    }
    let calls = message.tool_calls.unwrap_or_default().into_iter();
    // Ollama's calls have no ids; the turn's index makes them unique in the conversation.
    let tool_calls =
        earlier_calls(calls.map(|call| (None, call.function.name, call.function.arguments)), |i| format!("call_{index}_{i}"));
    Ok(ChatMessage {
        role,
        content: message.content.unwrap_or_default(),
        tool_calls,
        name: message.tool_name.or(message.name),
        tool_call_id: None,
    })
}

/// An Ollama tool: OpenAI's shape, its `type` optional.
fn convert_tool(tool: Tool) -> Result<ToolSpec, CoreError> {
    if let Some(kind) = tool.kind.as_deref() {
        check_tool_type(kind)?;
    }
    let function =
        tool.function.ok_or_else(|| CoreError::invalid("tools: a function tool needs its \"function\" object"))?;
    Ok(client_tool(function.name, function.description, function.parameters))
}

fn convert_options(
    options: Option<Options>,
) -> Result<(SamplingParams, Vec<String>, Option<u32>), CoreError> {
    let options = options.unwrap_or_default();
    let Options { temperature, top_p, min_p, repeat_penalty, top_k, .. } = options;
    // A negative seed is Ollama's "random".
    let seed = options.seed.filter(|seed| *seed >= 0);
    let mut sampling = SamplingFields { temperature, top_p, min_p, repeat_penalty, top_k, seed }.check(&SAMPLING)?;
    if let Some(n) = options.repeat_last_n {
        sampling.repeat_last_n = n.max(-1);
    }
    sampling.max_tokens = match options.num_predict {
        None => None,
        Some(0) => return Err(CoreError::invalid("options.num_predict is 0, which generates nothing; use a positive count, or -1 for no limit")),
        // -1 (no limit) and -2 (fill the context): as much as the daemon allows, which
        // The generation service clamps it to max_tokens_limit.
        Some(n) if n < 0 => Some(u32::MAX),
        Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
    };
    if options.num_ctx == Some(0) {
        return Err(CoreError::invalid("options.num_ctx must be at least 1"));
    }
    let stop = check_stops("options.stop", options.stop.unwrap_or_default())?;
    Ok((sampling, stop, options.num_ctx))
}

/// Ollama's `options.num_gpu`; negative is Ollama's "as many as fit", the default.
fn gpu_layers(options: Option<&Options>) -> Option<u32> {
    let layers = options?.num_gpu?;
    (layers >= 0).then(|| u32::try_from(layers).unwrap_or(u32::MAX))
}

fn convert_keep_alive(value: Option<Value>) -> Result<Option<KeepAlive>, CoreError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => KeepAlive::from_json(&value)
            .map(Some)
            .map_err(|e| CoreError::invalid(format!("keep_alive: {e}"))),
    }
}

/// What Ollama's `format` asks for: `"json"` or a JSON Schema.
fn format_sources(format: Option<Value>) -> Result<ConstraintSources, CoreError> {
    let mut sources = ConstraintSources::default();
    match format {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) if text.is_empty() => {}
        Some(Value::String(text)) if text == "json" => sources.any_json = Some("format"),
        Some(schema @ Value::Object(_)) => sources.schema = Some((schema, "format")),
        Some(other) => {
            return Err(CoreError::invalid(format!(
                "format must be \"json\" or a JSON schema object, not {other}"
            )))
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::support::from_wire;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn options_format_stream_and_keep_alive() {
        let converted = from_wire(convert_chat, json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}], "format": {"type": "object"},
            "options": {"temperature": 0.0, "num_predict": 12, "seed": 42, "stop": ["\n\n"], "num_ctx": 512, "mirostat": 0},
            "keep_alive": "10m"
        }))
        .unwrap();
        assert!(converted.stream, "streaming is on by default, as in Ollama");
        assert!(!converted.load_only);
        let request = converted.request;
        assert_eq!(request.sampling.temperature, 0.0);
        assert_eq!(request.sampling.max_tokens, Some(12));
        assert_eq!(request.sampling.seed, Some(42));
        assert_eq!(request.num_ctx, Some(512));
        assert_eq!(
            request.keep_alive,
            Some(KeepAlive::For(Duration::from_secs(600)))
        );
        assert_eq!(converted.constraint.schema.map(|(_, p)| p), Some("format"));
        let converted = from_wire(convert_chat, json!({"model": "m", "messages": [], "keep_alive": 0, "format": "json", "options": {"num_predict": -1}})).unwrap();
        assert!(converted.load_only);
        assert_eq!(converted.request.keep_alive, Some(KeepAlive::UnloadNow));
        assert_eq!(converted.request.sampling.max_tokens, Some(u32::MAX));
        assert_eq!(converted.constraint.any_json, Some("format"));
    }

    #[test]
    fn num_gpu_is_a_load_option() {
        let layers = |options: Value| from_wire(convert_chat, json!({"model": "m", "messages": [], "options": options})).unwrap().gpu_layers;
        assert_eq!(layers(json!({})), None);
        assert_eq!(layers(json!({"num_gpu": 0})), Some(0), "0 keeps the model on the CPU");
        assert_eq!(layers(json!({"num_gpu": 12})), Some(12));
        assert_eq!(layers(json!({"num_gpu": -1})), None, "-1 is Ollama's default: as many as fit");
        assert_eq!(layers(json!({"num_gpu": 1u64 << 40})), Some(u32::MAX));
        let generate = from_wire(convert_generate, json!({"model": "m", "prompt": "x", "options": {"num_gpu": 3}})).unwrap();
        assert_eq!(generate.gpu_layers, Some(3));
        assert!(from_wire(convert_chat, json!({"model": "m", "messages": [], "options": {"num_gpu": "all"}})).is_err());
    }

    #[test]
    fn refusals() {
        assert!(from_wire(convert_chat, json!({"model": "m", "messages": [], "format": 3})).is_err());
        assert!(from_wire(convert_chat, json!({"model": "m", "messages": [], "keep_alive": "soon"})).is_err());
        assert!(from_wire(convert_chat, json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["AAAA"]}]})).is_err());
        assert!(
            from_wire(convert_chat, json!({"model": "m", "messages": [], "options": {"num_predict": 0}})).is_err()
        );
        let generate = |value: Value| from_wire(convert_generate, value);
        assert!(generate(json!({"model": "m", "prompt": "x", "context": [1, -2]})).is_err());
        assert!(generate(json!({"model": "m", "prompt": "x", "context": [1], "llamay_context": "ctx_1"})).is_err());
        let continued = generate(json!({"model": "m", "prompt": "x", "context": [1, 2]})).unwrap();
        assert_eq!(continued.request.context, Some(crate::core::ContextRequest::Tokens(vec![1, 2])));
        assert!(
            generate(json!({"model": "m", "prompt": "x", "template": "{{ .Prompt }}"})).is_err()
        );
        let raw =
            generate(json!({"model": "m", "prompt": "x", "raw": true, "stream": false})).unwrap();
        assert!(matches!(
            raw.request.input,
            PromptInput::Raw {
                template: false,
                ..
            }
        ));
        assert!(!raw.stream);
    }

    #[test]
    fn tools_take_a_choice_and_tool_messages_a_name() {
        let converted = from_wire(convert_chat, json!({
            "model": "m", "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "get_order_status"}}],
            "messages": [
                {"role": "user", "content": "where?"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_order_status", "arguments": {"order_id": "A-1"}}}]},
                {"role": "tool", "name": "get_order_status", "content": "{}"},
                {"role": "tool", "tool_name": "get_order_status", "content": "{}"}
            ]
        }))
        .unwrap();
        assert_eq!(converted.request.tool_choice, ToolChoice::Required);
        assert!(!converted.request.parallel_tool_calls);
        let PromptInput::Chat { messages, .. } = converted.request.input else {
            panic!("chat expected")
        };
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            json!({"order_id": "A-1"})
        );
        assert_eq!(messages[2].name.as_deref(), Some("get_order_status"));
        assert_eq!(messages[3].name.as_deref(), Some("get_order_status"));
        let hosted = from_wire(convert_chat, json!({"model": "m", "messages": [], "tools": [{"type": "web_search"}]}))
            .unwrap_err();
        assert!(hosted.message.contains("web_search"), "{}", hosted.message);
    }
}
