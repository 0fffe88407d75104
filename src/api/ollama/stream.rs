//! Ollama's NDJSON streaming as a pure state machine: one JSON object per line, `done: false`
//! for each piece of text, then one `done: true` object with the durations (nanoseconds) and
//! counts Ollama reports. An error part way is a `{"error": "..."}` line.

use actix_web::web::Bytes;
use serde_json::{json, Map, Value};

use crate::api::common::{logprob_entries, nanos, StreamTranslator};
use crate::core::{Completion, FinishReason, StreamEvent, TokenLogprob, ToolCall};

/// Which route the objects are for: chat objects carry `message`, generate objects `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Generate,
}

pub fn created_at() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

pub fn done_reason(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Error(_) => "error",
        _ => "stop",
    }
}

pub fn tool_calls_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
            .collect(),
    )
}

/// One answer object: a piece of text, or (with `completion`) the final object with its stats.
pub fn answer_object(
    endpoint: Endpoint,
    model: &str,
    text: &str,
    completion: Option<&Completion>,
) -> Value {
    let mut object = Map::new();
    object.insert("model".into(), json!(model));
    object.insert("created_at".into(), json!(created_at()));
    match endpoint {
        Endpoint::Chat => {
            let mut message = json!({"role": "assistant", "content": text});
            if let Some(completion) = completion.filter(|c| !c.tool_calls.is_empty()) {
                message["tool_calls"] = tool_calls_json(&completion.tool_calls);
            }
            object.insert("message".into(), message);
        }
        Endpoint::Generate => {
            object.insert("response".into(), json!(text));
        }
    }
    object.insert("done".into(), json!(completion.is_some()));
    if let Some(completion) = completion {
        let timings = &completion.timings;
        object.insert(
            "done_reason".into(),
            json!(done_reason(&completion.finish_reason)),
        );
        object.insert(
            "total_duration".into(),
            json!(nanos(timings.load + timings.total)),
        );
        object.insert("load_duration".into(), json!(nanos(timings.load)));
        object.insert(
            "prompt_eval_count".into(),
            json!(completion.usage.prompt_tokens),
        );
        object.insert(
            "prompt_eval_duration".into(),
            json!(nanos(timings.prompt_eval)),
        );
        object.insert(
            "eval_count".into(),
            json!(completion.usage.completion_tokens),
        );
        object.insert("eval_duration".into(), json!(nanos(timings.eval)));
        if endpoint == Endpoint::Generate && !completion.context_tokens.is_empty() {
            object.insert("context".into(), json!(completion.context_tokens));
        }
    }
    Value::Object(object)
}

fn line(value: &Value) -> Bytes {
    let mut text = value.to_string();
    text.push('\n');
    Bytes::from(text)
}

pub struct NdjsonStream {
    endpoint: Endpoint,
    model: String,
    finished: bool,
    /// Log-probabilities of tokens whose text has not gone out yet: they ride with the next
    /// object (only a request that asked for them gets any).
    pending: Vec<TokenLogprob>,
}

impl NdjsonStream {
    pub fn new(endpoint: Endpoint, model: String) -> Self {
        NdjsonStream {
            endpoint,
            model,
            finished: false,
            pending: Vec::new(),
        }
    }

    /// `object` with the pending log-probabilities, if any.
    fn with_pending(&mut self, mut object: Value) -> Value {
        if !self.pending.is_empty() {
            object["logprobs"] = json!(logprob_entries(&std::mem::take(&mut self.pending)));
        }
        object
    }
}

impl StreamTranslator for NdjsonStream {
    fn start(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        match event {
            StreamEvent::Delta { text } if text.is_empty() => Vec::new(),
            StreamEvent::Delta { text } => {
                let object = answer_object(self.endpoint, &self.model, &text, None);
                vec![line(&self.with_pending(object))]
            }
            StreamEvent::Logprobs { tokens, .. } => {
                self.pending.extend(tokens);
                Vec::new()
            }
            StreamEvent::Done(completion) => {
                self.finished = true;
                if let FinishReason::Error(message) = &completion.finish_reason {
                    return vec![line(&json!({"error": message}))];
                }
                let object = answer_object(self.endpoint, &self.model, "", Some(&completion));
                vec![line(&self.with_pending(object))]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Timings, Usage};
    use std::time::Duration;

    fn parse(frame: &Bytes) -> Value {
        let text = std::str::from_utf8(frame).unwrap();
        assert!(
            text.ends_with('\n') && text.matches('\n').count() == 1,
            "one object per line"
        );
        serde_json::from_str(text.trim_end()).unwrap()
    }

    #[test]
    fn chat_lines_then_a_final_object_with_stats() {
        let mut stream = NdjsonStream::new(Endpoint::Chat, "m".into());
        assert!(stream.start().is_empty());
        let first = parse(&stream.event(StreamEvent::Delta { text: "Hel".into() })[0]);
        assert_eq!(first["message"]["content"], "Hel");
        assert_eq!(first["done"], false);
        let done = Completion {
            finish_reason: FinishReason::Length,
            usage: Usage {
                prompt_tokens: 5,
                completion_tokens: 7,
                ..Usage::default()
            },
            timings: Timings {
                load: Duration::from_millis(2),
                prompt_eval: Duration::from_millis(3),
                eval: Duration::from_millis(4),
                total: Duration::from_millis(10),
            },
            ..Completion::default()
        };
        let last = parse(&stream.event(StreamEvent::Done(done))[0]);
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "length");
        assert_eq!(last["eval_count"], 7);
        assert_eq!(last["prompt_eval_count"], 5);
        assert_eq!(last["load_duration"], 2_000_000);
        assert_eq!(last["total_duration"], 12_000_000);
        assert_eq!(last["message"]["content"], "");
        assert!(stream
            .event(StreamEvent::Delta {
                text: "late".into()
            })
            .is_empty());
    }

    #[test]
    fn generate_uses_response_and_errors_are_error_lines() {
        let mut stream = NdjsonStream::new(Endpoint::Generate, "m".into());
        assert_eq!(
            parse(&stream.event(StreamEvent::Delta { text: "x".into() })[0])["response"],
            "x"
        );
        let failed = Completion {
            finish_reason: FinishReason::Error("bad".into()),
            ..Completion::default()
        };
        assert_eq!(
            parse(&stream.event(StreamEvent::Done(failed))[0]),
            json!({"error": "bad"})
        );
    }
}
