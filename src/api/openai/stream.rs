//! OpenAI chat-completion streaming as a pure state machine: core events in, SSE frames out.
//! Sequence: a role chunk, one chunk per text delta, tool calls whole (if any), a chunk with the
//! finish reason, a usage chunk when `stream_options.include_usage`, then `data: [DONE]`.

use actix_web::web::Bytes;
use serde_json::{json, Value};

use super::types::{FunctionCall, ResponseToolCall, UsageBody};
use crate::api::common::{logprob_entries, sse_frame, StreamTranslator};
use crate::core::{FinishReason, StreamEvent, TokenLogprob, ToolCall, Usage};

/// OpenAI's `finish_reason` for a core one (`None` for an error, which is sent as an error object).
pub fn finish_reason(reason: &FinishReason) -> Option<&'static str> {
    match reason {
        FinishReason::Stop | FinishReason::StopSequence(_) | FinishReason::Cancelled => {
            Some("stop")
        }
        FinishReason::Length => Some("length"),
        FinishReason::ToolCalls => Some("tool_calls"),
        FinishReason::Error(_) => None,
    }
}

/// The SSE frame of a generation that failed part way, after its status was sent.
pub fn failure_frame(reason: &FinishReason) -> Bytes {
    let message = match reason {
        FinishReason::Error(message) => message.clone(),
        _ => String::new(),
    };
    sse_frame(
        None,
        &json!({"error": {"message": message, "type": "Internal Server Error", "param": null, "code": "generation_failed"}}),
    )
}

pub fn usage_body(usage: Usage) -> UsageBody {
    UsageBody {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
        prompt_tokens_details: super::types::PromptTokensDetails { cached_tokens: usage.cached_tokens },
    }
}

/// Tool calls with their arguments as JSON text, as OpenAI sends them. A last call the token
/// budget cut off (`cut_off_arguments`) carries its arguments exactly as far as they got, as
/// OpenAI's own answers do with `finish_reason: "length"`.
pub fn response_tool_calls(calls: &[ToolCall], cut_off_arguments: Option<&str>) -> Vec<ResponseToolCall> {
    let last = calls.len().saturating_sub(1);
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| ResponseToolCall {
            index: index as u32,
            id: call.id.clone(),
            kind: "function",
            function: FunctionCall {
                name: call.name.clone(),
                arguments: match cut_off_arguments {
                    Some(text) if index == last => text.to_string(),
                    _ => call.arguments.to_string(),
                },
            },
        })
        .collect()
}

/// Answer tokens' log-probabilities in OpenAI's chat shape: `{"content": [{"token", "logprob",
/// "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.
pub fn chat_logprobs(tokens: &[TokenLogprob]) -> Value {
    json!({ "content": logprob_entries(tokens) })
}

pub struct ChatStream {
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
    finished: bool,
    /// Whether the request asked for log-probabilities; those of tokens whose text has not
    /// gone out yet wait in `pending` and ride with the next content chunk.
    logprobs: bool,
    pending: Vec<TokenLogprob>,
}

impl ChatStream {
    pub fn new(id: String, created: i64, model: String, include_usage: bool) -> Self {
        ChatStream {
            id,
            created,
            model,
            include_usage,
            finished: false,
            logprobs: false,
            pending: Vec::new(),
        }
    }

    /// The same stream, with each content chunk's tokens' log-probabilities.
    pub fn with_logprobs(mut self, logprobs: bool) -> Self {
        self.logprobs = logprobs;
        self
    }

    fn chunk(&mut self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        let logprobs = if self.logprobs && (delta.get("content").is_some() || !self.pending.is_empty()) {
            chat_logprobs(&std::mem::take(&mut self.pending))
        } else {
            Value::Null
        };
        let mut chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "system_fingerprint": "llamay",
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        sse_frame(None, &chunk)
    }
}

impl StreamTranslator for ChatStream {
    fn start(&mut self) -> Vec<Bytes> {
        vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
    }


    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        match event {
            StreamEvent::Delta { text } if text.is_empty() => Vec::new(),
            StreamEvent::Delta { text } => vec![self.chunk(json!({"content": text}), None)],
            StreamEvent::Logprobs { tokens, .. } => {
                self.pending.extend(tokens);
                Vec::new()
            }
            StreamEvent::Done(completion) => {
                self.finished = true;
                let mut frames = Vec::new();
                if !self.pending.is_empty() {
                    // Tokens whose text was held back (a stop string's start, tool markup).
                    frames.push(self.chunk(json!({"content": ""}), None));
                }
                if !completion.tool_calls.is_empty() {
                    let calls = serde_json::to_value(response_tool_calls(
                        &completion.tool_calls,
                        completion.cut_off_arguments.as_deref(),
                    ))
                        .unwrap_or(Value::Null);
                    frames.push(self.chunk(json!({"tool_calls": calls}), None));
                }
                match finish_reason(&completion.finish_reason) {
                    Some(reason) => frames.push(self.chunk(json!({}), Some(reason))),
                    None => frames.push(failure_frame(&completion.finish_reason)),
                }
                if self.include_usage {
                    let usage = usage_body(completion.usage);
                    frames.push(sse_frame(
                        None,
                        &json!({
                            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                            "system_fingerprint": "llamay", "choices": [], "usage": usage,
                        }),
                    ));
                }
                frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
                frames
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Completion;

    fn data(frame: &Bytes) -> Value {
        let text = std::str::from_utf8(frame).unwrap();
        let payload = text
            .strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap();
        serde_json::from_str(payload).unwrap_or(Value::String(payload.to_string()))
    }

    fn run(include_usage: bool, events: Vec<StreamEvent>) -> Vec<Value> {
        let mut stream = ChatStream::new("chatcmpl-1".into(), 7, "m".into(), include_usage);
        let mut frames = stream.start();
        for event in events {
            frames.extend(stream.event(event));
        }
        frames.iter().map(data).collect()
    }

    #[test]
    fn role_then_deltas_then_finish_then_done() {
        let done = Completion {
            finish_reason: FinishReason::Length,
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                ..Usage::default()
            },
            ..Completion::default()
        };
        let frames = run(
            false,
            vec![
                StreamEvent::Delta { text: "He".into() },
                StreamEvent::Delta { text: "".into() },
                StreamEvent::Delta { text: "y".into() },
                StreamEvent::Done(done),
            ],
        );
        assert_eq!(frames.len(), 5);
        assert_eq!(frames[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(frames[1]["choices"][0]["delta"]["content"], "He");
        assert_eq!(frames[2]["choices"][0]["delta"]["content"], "y");
        assert_eq!(frames[3]["choices"][0]["finish_reason"], "length");
        assert!(frames[3].get("usage").is_none());
        assert_eq!(frames[4], "[DONE]");
    }

    #[test]
    fn usage_chunk_when_asked() {
        let done = Completion {
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                ..Usage::default()
            },
            ..Completion::default()
        };
        let frames = run(true, vec![StreamEvent::Done(done)]);
        assert_eq!(frames[0]["usage"], Value::Null);
        assert_eq!(frames[1]["choices"][0]["finish_reason"], "stop");
        assert_eq!(frames[2]["choices"], json!([]));
        assert_eq!(frames[2]["usage"]["total_tokens"], 5);
        assert_eq!(frames[3], "[DONE]");
    }

    #[test]
    fn an_error_mid_stream_is_an_error_object_and_nothing_follows_done() {
        let mut stream = ChatStream::new("c".into(), 0, "m".into(), false);
        let frames: Vec<Value> = stream
            .event(StreamEvent::Done(Completion {
                finish_reason: FinishReason::Error("decode failed".into()),
                ..Completion::default()
            }))
            .iter()
            .map(data)
            .collect();
        assert_eq!(frames[0]["error"]["message"], "decode failed");
        assert_eq!(frames[1], "[DONE]");
        assert!(stream
            .event(StreamEvent::Delta {
                text: "late".into()
            })
            .is_empty());
    }
}
