//! Anthropic Messages streaming as a pure state machine: core events in, named SSE events out.
//! Sequence: `message_start`; a text block (`content_block_start`, `content_block_delta`*,
//! `content_block_stop`) opened by the first text; one start/delta/stop triple per tool call;
//! `message_delta` (stop reason, usage), `message_stop`. `ping` follows the first block's
//! start, as Anthropic sends it. An answer of calls alone (a forced call) has no text block, as
//! its non-streamed answer has none; an answer with neither has one empty text block. An error
//! part way is an `error` event.

use actix_web::web::Bytes;
use serde_json::{json, Value};

use crate::api::common::{sse_frame, StreamTranslator};
use crate::core::{Completion, FinishReason, StreamEvent, ToolCall};
use crate::tools::anthropic_call_id;

/// Anthropic's `stop_reason` and `stop_sequence` for a core finish reason.
pub fn stop_reason(reason: &FinishReason) -> (Option<&'static str>, Option<String>) {
    match reason {
        FinishReason::Stop | FinishReason::Cancelled => (Some("end_turn"), None),
        FinishReason::StopSequence(sequence) => (Some("stop_sequence"), Some(sequence.clone())),
        FinishReason::Length => (Some("max_tokens"), None),
        FinishReason::ToolCalls => (Some("tool_use"), None),
        FinishReason::Error(_) => (None, None),
    }
}

/// The completion's calls with ids in Anthropic's shape: the model worker names calls the
/// OpenAI way (`call_…`), so each gets a fresh `toolu_…` id here, the one place both the JSON
/// and the streamed answers take their calls from.
pub fn with_anthropic_ids(calls: &[ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|call| ToolCall {
            id: if call.id.starts_with("toolu_") {
                call.id.clone()
            } else {
                anthropic_call_id()
            },
            ..call.clone()
        })
        .collect()
}

pub fn tool_use_block(call: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
}

pub struct MessageStream {
    id: String,
    model: String,
    /// Whether the text block (index 0) has been opened.
    text_open: bool,
    finished: bool,
}

impl MessageStream {
    pub fn new(id: String, model: String) -> Self {
        MessageStream {
            id,
            model,
            text_open: false,
            finished: false,
        }
    }

    /// The start of a block; the first one is followed by `ping`, as Anthropic sends it.
    fn block_start(index: usize, block: Value) -> Vec<Bytes> {
        let mut frames = vec![sse_frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        )];
        if index == 0 {
            frames.push(sse_frame(Some("ping"), &json!({"type": "ping"})));
        }
        frames
    }

    fn finish(&mut self, completion: Completion) -> Vec<Bytes> {
        if let FinishReason::Error(message) = &completion.finish_reason {
            return vec![sse_frame(
                Some("error"),
                &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            )];
        }
        let mut frames = Vec::new();
        if !self.text_open && completion.tool_calls.is_empty() {
            frames.extend(Self::block_start(0, json!({"type": "text", "text": ""})));
            self.text_open = true;
        }
        if self.text_open {
            frames.push(sse_frame(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}),
            ));
        }
        let first_call = usize::from(self.text_open);
        for (offset, call) in with_anthropic_ids(&completion.tool_calls)
            .iter()
            .enumerate()
        {
            let index = offset + first_call;
            frames.extend(Self::block_start(
                index,
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
            ));
            frames.push(sse_frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": call.arguments.to_string()}}),
            ));
            frames.push(sse_frame(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
        let (reason, sequence) = stop_reason(&completion.finish_reason);
        frames.push(sse_frame(
            Some("message_delta"),
            &json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": {"input_tokens": completion.usage.prompt_tokens.saturating_sub(completion.usage.cached_tokens), "output_tokens": completion.usage.completion_tokens,
                              "cache_read_input_tokens": completion.usage.cached_tokens}}),
        ));
        frames.push(sse_frame(
            Some("message_stop"),
            &json!({"type": "message_stop"}),
        ));
        frames
    }
}

impl StreamTranslator for MessageStream {
    fn start(&mut self) -> Vec<Bytes> {
        vec![sse_frame(
            Some("message_start"),
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        )]
    }

    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        match event {
            StreamEvent::Delta { text } if text.is_empty() => Vec::new(),
            // The Anthropic API has no log-probabilities; its route never asks for them.
            StreamEvent::Logprobs { .. } => Vec::new(),
            StreamEvent::Delta { text } => {
                let mut frames = Vec::new();
                if !self.text_open {
                    frames.extend(Self::block_start(0, json!({"type": "text", "text": ""})));
                    self.text_open = true;
                }
                frames.push(sse_frame(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ));
                frames
            }
            StreamEvent::Done(completion) => {
                self.finished = true;
                self.finish(completion)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Usage;

    fn parse(frame: &Bytes) -> (String, Value) {
        let text = std::str::from_utf8(frame).unwrap();
        let mut lines = text.lines();
        let event = lines
            .next()
            .unwrap()
            .strip_prefix("event: ")
            .unwrap()
            .to_string();
        let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
        assert!(text.ends_with("\n\n"));
        (event, serde_json::from_str(data).unwrap())
    }

    #[test]
    fn the_real_event_sequence() {
        let mut stream = MessageStream::new("msg_1".into(), "m".into());
        let mut frames = stream.start();
        frames.extend(stream.event(StreamEvent::Delta { text: "Hi".into() }));
        let done = Completion {
            finish_reason: FinishReason::StopSequence("END".into()),
            usage: Usage {
                prompt_tokens: 4,
                completion_tokens: 1,
                ..Usage::default()
            },
            ..Completion::default()
        };
        frames.extend(stream.event(StreamEvent::Done(done)));
        let parsed: Vec<(String, Value)> = frames.iter().map(parse).collect();
        let names: Vec<&str> = parsed.iter().map(|(e, _)| e.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (event, data) in &parsed {
            assert_eq!(
                &data["type"],
                event.as_str(),
                "data.type repeats the event name"
            );
        }
        assert_eq!(parsed[3].1["delta"]["text"], "Hi");
        assert_eq!(parsed[5].1["delta"]["stop_reason"], "stop_sequence");
        assert_eq!(parsed[5].1["delta"]["stop_sequence"], "END");
        assert_eq!(parsed[5].1["usage"]["output_tokens"], 1);
    }

    /// The events of a stream fed `events`, and their names in one line.
    fn stream_of(events: Vec<StreamEvent>) -> (Vec<(String, Value)>, String) {
        let mut stream = MessageStream::new("msg_1".into(), "m".into());
        let mut frames = stream.start();
        for event in events {
            frames.extend(stream.event(event));
        }
        let parsed: Vec<(String, Value)> = frames.iter().map(parse).collect();
        let names = parsed.iter().map(|(event, _)| event.as_str()).collect::<Vec<_>>().join(" ");
        (parsed, names)
    }

    fn weather_call_done() -> StreamEvent {
        StreamEvent::Done(Completion {
            finish_reason: FinishReason::ToolCalls,
            tool_calls: vec![ToolCall {
                id: "call_0123456789ab".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Pune"}),
            }],
            ..Completion::default()
        })
    }

    #[test]
    fn a_forced_call_streams_as_its_tool_use_block_alone() {
        let (parsed, names) = stream_of(vec![weather_call_done()]);
        assert_eq!(
            names,
            "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"
        );
        assert_eq!(parsed[1].1["index"], 0);
        assert_eq!(parsed[1].1["content_block"]["type"], "tool_use");
        assert_eq!(parsed[1].1["content_block"]["name"], "get_weather");
        let id = parsed[1].1["content_block"]["id"].as_str().unwrap();
        assert!(id.starts_with("toolu_") && id.len() == 30, "{id}");
        assert_eq!(parsed[3].1["delta"]["partial_json"], "{\"city\":\"Pune\"}");
        assert_eq!(parsed[3].1["index"], 0);
        assert_eq!(parsed[5].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn calls_after_text_come_whole_after_the_text_block() {
        let text = StreamEvent::Delta { text: "Let me look.".into() };
        let (parsed, names) = stream_of(vec![text, weather_call_done()]);
        assert_eq!(
            names,
            "message_start content_block_start ping content_block_delta content_block_stop \
             content_block_start content_block_delta content_block_stop message_delta message_stop"
        );
        assert_eq!(parsed[1].1["content_block"]["type"], "text");
        assert_eq!(parsed[5].1["index"], 1);
        assert_eq!(parsed[5].1["content_block"]["type"], "tool_use");
    }

    #[test]
    fn an_empty_answer_has_one_empty_text_block() {
        let nothing = StreamEvent::Delta { text: String::new() };
        let (parsed, names) = stream_of(vec![nothing, StreamEvent::Done(Completion::default())]);
        assert_eq!(names, "message_start content_block_start ping content_block_stop message_delta message_stop");
        assert_eq!(parsed[1].1["content_block"], json!({"type": "text", "text": ""}));
    }

    #[test]
    fn an_error_is_an_error_event() {
        let mut stream = MessageStream::new("msg_1".into(), "m".into());
        let done = Completion {
            finish_reason: FinishReason::Error("boom".into()),
            ..Completion::default()
        };
        let parsed: Vec<(String, Value)> = stream
            .event(StreamEvent::Done(done))
            .iter()
            .map(parse)
            .collect();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].0, "error");
        assert_eq!(parsed[0].1["error"]["message"], "boom");
    }
}
