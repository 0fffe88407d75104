//! Responses streaming as a pure state machine: core events in, typed SSE events out, each with
//! its `event:` name and a `sequence_number` counting from 0.
//!
//! Sequence: `response.created`, `response.in_progress`; for text, `response.output_item.added`
//! (a message), `response.content_part.added`, a `response.output_text.delta` per piece as it
//! is decoded, then `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`; for each call (calls arrive whole with the end of the answer),
//! `response.output_item.added`, `response.function_call_arguments.delta` and `.done`,
//! `response.output_item.done`; then `response.completed`, `response.incomplete` (the budget ran
//! out) or, after an `error` event, `response.failed`.
//!
//! Key type: [`ResponsesStream`]; its [`ResponsesStream::take_finished`] hands the finished
//! response to whoever stores it. Costs: a frame per event; the text is kept once.

use actix_web::web::Bytes;
use serde_json::{json, Value};

use super::object::{new_message_id, output_items, output_text_part, Finished, ResponseHead};
use crate::api::common::{sse_frame, StreamTranslator};
use crate::core::{FinishReason, StreamEvent};

pub struct ResponsesStream {
    head: ResponseHead,
    sequence: u64,
    message_id: String,
    /// The answer's text so far; `Some` once its message item is open.
    text: Option<String>,
    finished: Option<Finished>,
    done: bool,
}

impl ResponsesStream {
    pub fn new(head: ResponseHead) -> Self {
        ResponsesStream { head, sequence: 0, message_id: new_message_id(), text: None, finished: None, done: false }
    }

    /// The finished response, once, after the last event.
    pub fn take_finished(&mut self) -> Option<Finished> {
        self.finished.take()
    }

    fn frame(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        sse_frame(Some(kind), &data)
    }

    /// `response.output_item.added` and `response.content_part.added` of the message item.
    fn open_message(&mut self, frames: &mut Vec<Bytes>, output_index: usize) {
        let item = json!({"type": "message", "id": self.message_id, "status": "in_progress", "role": "assistant", "content": []});
        frames.push(self.frame("response.output_item.added", json!({"output_index": output_index, "item": item})));
        let part = json!({"item_id": self.message_id, "output_index": output_index, "content_index": 0, "part": output_text_part("")});
        frames.push(self.frame("response.content_part.added", part));
    }

    fn close_message(&mut self, frames: &mut Vec<Bytes>, output_index: usize, item: &Value, text: &str) {
        let id = self.message_id.clone();
        let done = json!({"item_id": id, "output_index": output_index, "content_index": 0, "text": text, "logprobs": []});
        frames.push(self.frame("response.output_text.done", done));
        let part = json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": output_text_part(text)});
        frames.push(self.frame("response.content_part.done", part));
        frames.push(self.frame("response.output_item.done", json!({"output_index": output_index, "item": item})));
    }

    fn call(&mut self, frames: &mut Vec<Bytes>, output_index: usize, item: &Value) {
        let mut opened = item.clone();
        opened["arguments"] = json!("");
        opened["status"] = json!("in_progress");
        frames.push(self.frame("response.output_item.added", json!({"output_index": output_index, "item": opened})));
        let (id, arguments) = (item["id"].clone(), item["arguments"].clone());
        let delta = json!({"item_id": id, "output_index": output_index, "delta": arguments});
        frames.push(self.frame("response.function_call_arguments.delta", delta));
        let done = json!({"item_id": id, "output_index": output_index, "arguments": arguments, "name": item["name"]});
        frames.push(self.frame("response.function_call_arguments.done", done));
        frames.push(self.frame("response.output_item.done", json!({"output_index": output_index, "item": item})));
    }
}

impl StreamTranslator for ResponsesStream {
    fn start(&mut self) -> Vec<Bytes> {
        let response = self.head.in_progress();
        vec![
            self.frame("response.created", json!({"response": response})),
            self.frame("response.in_progress", json!({"response": response})),
        ]
    }

    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        if self.done {
            return Vec::new();
        }
        let mut frames = Vec::new();
        match event {
            StreamEvent::Delta { text } if text.is_empty() => {}
            // A Responses request asks for no log-probabilities, so none arrive.
            StreamEvent::Logprobs { .. } => {}
            StreamEvent::Delta { text } => {
                if self.text.is_none() {
                    self.open_message(&mut frames, 0);
                    self.text = Some(String::new());
                }
                self.text.get_or_insert_with(String::new).push_str(&text);
                let delta = json!({"item_id": self.message_id, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []});
                frames.push(self.frame("response.output_text.delta", delta));
            }
            StreamEvent::Done(completion) => {
                self.done = true;
                let opened = self.text.is_some();
                let text = self.text.take().unwrap_or_default();
                let items = output_items(&self.message_id, &text, &completion);
                for (index, item) in items.iter().enumerate() {
                    if item["type"] == "message" {
                        if !opened {
                            self.open_message(&mut frames, index);
                        }
                        self.close_message(&mut frames, index, item, &text);
                    } else {
                        self.call(&mut frames, index, item);
                    }
                }
                let terminal = match &completion.finish_reason {
                    FinishReason::Error(message) => {
                        let error = json!({"code": "server_error", "message": message, "param": null});
                        frames.push(self.frame("error", error));
                        "response.failed"
                    }
                    FinishReason::Length | FinishReason::Cancelled => "response.incomplete",
                    FinishReason::Stop | FinishReason::StopSequence(_) | FinishReason::ToolCalls => "response.completed",
                };
                let finished = self.head.finish(items, &text, &completion);
                frames.push(self.frame(terminal, json!({"response": finished.object})));
                self.finished = Some(finished);
            }
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::openai::responses::convert::Echo;
    use crate::core::{Completion, ToolCall, Usage};

    fn head() -> ResponseHead {
        ResponseHead {
            id: "resp_1".into(),
            created_at: 7,
            echo: Echo {
                model: "m".into(),
                instructions: None,
                max_output_tokens: None,
                metadata: json!({}),
                parallel_tool_calls: true,
                previous_response_id: None,
                reasoning: json!({"effort": null, "summary": null}),
                store: true,
                temperature: 1.0,
                top_p: 1.0,
                text: json!({"format": {"type": "text"}}),
                tool_choice: json!("auto"),
                tools: Vec::new(),
                truncation: "disabled".into(),
                user: None,
            },
        }
    }

    /// Each frame's event name and data, checking the two agree and the numbering runs on.
    fn run(events: Vec<StreamEvent>) -> (Vec<(String, Value)>, Option<Finished>) {
        let mut stream = ResponsesStream::new(head());
        let mut frames = stream.start();
        for event in events {
            frames.extend(stream.event(event));
        }
        let parsed: Vec<(String, Value)> = frames
            .iter()
            .map(|frame| {
                let text = std::str::from_utf8(frame).unwrap();
                let (name, data) = text.strip_prefix("event: ").unwrap().split_once("\ndata: ").unwrap();
                (name.to_string(), serde_json::from_str(data.trim_end()).unwrap())
            })
            .collect();
        for (index, (name, data)) in parsed.iter().enumerate() {
            assert_eq!(data["type"], json!(name));
            assert_eq!(data["sequence_number"], json!(index));
        }
        (parsed, stream.take_finished())
    }

    fn names(frames: &[(String, Value)]) -> Vec<&str> {
        frames.iter().map(|(name, _)| name.as_str()).collect()
    }

    #[test]
    fn text_streams_as_deltas_inside_one_message() {
        let done = Completion {
            usage: Usage { prompt_tokens: 5, completion_tokens: 2, cached_tokens: 3 },
            ..Completion::default()
        };
        let (frames, finished) = run(vec![
            StreamEvent::Delta { text: "He".into() },
            StreamEvent::Delta { text: "".into() },
            StreamEvent::Delta { text: "y".into() },
            StreamEvent::Done(done),
        ]);
        assert_eq!(
            names(&frames),
            [
                "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
                "response.content_part.done", "response.output_item.done", "response.completed",
            ]
        );
        assert_eq!(frames[0].1["response"]["status"], "in_progress");
        assert_eq!(frames[4].1["delta"], "He");
        assert_eq!(frames[6].1["text"], "Hey");
        let completed = &frames[9].1["response"];
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["output_text"], "Hey");
        assert_eq!(completed["output"][0]["id"], frames[2].1["item"]["id"]);
        assert_eq!(completed["usage"]["input_tokens_details"]["cached_tokens"], 3);
        assert_eq!(completed["usage"]["total_tokens"], 7);
        let finished = finished.unwrap();
        assert_eq!(finished.assistant.content, "Hey");
        assert_eq!(finished.object, *completed);
    }

    #[test]
    fn calls_arrive_whole_after_the_text_and_the_budget_makes_it_incomplete() {
        let call = ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments: json!({"city": "Pune"}) };
        let done = Completion { finish_reason: FinishReason::ToolCalls, tool_calls: vec![call.clone()], ..Completion::default() };
        let (frames, finished) = run(vec![StreamEvent::Done(done)]);
        assert_eq!(
            names(&frames)[2..],
            [
                "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done", "response.completed",
            ]
        );
        assert_eq!(frames[2].1["item"]["arguments"], "");
        assert_eq!(frames[4].1["arguments"], "{\"city\":\"Pune\"}");
        let output = &frames[6].1["response"]["output"];
        assert_eq!((output[0]["call_id"].as_str(), output[0]["name"].as_str()), (Some("call_1"), Some("get_weather")));
        assert_eq!(finished.unwrap().assistant.tool_calls, vec![call]);

        let cut = Completion { finish_reason: FinishReason::Length, ..Completion::default() };
        let (frames, _) = run(vec![StreamEvent::Delta { text: "a".into() }, StreamEvent::Done(cut)]);
        let (name, last) = frames.last().unwrap();
        assert_eq!(name, "response.incomplete");
        assert_eq!(last["response"]["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    }

    #[test]
    fn a_failure_after_the_start_is_an_error_event_then_failed_and_nothing_follows() {
        let failed = Completion { finish_reason: FinishReason::Error("decode failed".into()), ..Completion::default() };
        let mut stream = ResponsesStream::new(head());
        stream.start();
        stream.event(StreamEvent::Delta { text: "par".into() });
        let frames: Vec<String> =
            stream.event(StreamEvent::Done(failed)).iter().map(|f| String::from_utf8(f.to_vec()).unwrap()).collect();
        let error = frames.iter().position(|f| f.starts_with("event: error\n")).expect("an error event");
        assert!(frames[error].contains("decode failed"));
        assert!(frames[error + 1].starts_with("event: response.failed\n") && frames[error + 1].contains("\"status\":\"failed\""));
        assert_eq!(error + 2, frames.len());
        assert!(stream.event(StreamEvent::Delta { text: "late".into() }).is_empty());
    }

    #[test]
    fn an_empty_answer_is_still_one_message() {
        let (frames, _) = run(vec![StreamEvent::Done(Completion::default())]);
        assert_eq!(names(&frames)[2], "response.output_item.added");
        assert_eq!(frames.last().unwrap().1["response"]["output"][0]["content"][0]["text"], "");
    }
}
