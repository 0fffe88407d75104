//! The response object and its output items, built the same way for a whole answer and at the
//! end of a stream: a `message` item with one `output_text` part (when there is text, or
//! nothing else), then a `function_call` item per call; `status` and `incomplete_details` from
//! the finish reason; `usage` with the cached and reasoning token details.
//!
//! Key items: [`ResponseHead`], [`output_items`], [`Finished`]. Pure; costs a copy of the text.

use serde_json::{json, Value};

use super::convert::Echo;
use crate::api::common::random_id;
use crate::core::{ChatMessage, Completion, FinishReason, Role, Usage};

/// What a response object says before its answer exists.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub id: String,
    pub created_at: i64,
    pub echo: Echo,
}

/// A finished response: the object as answered, and the answer as a turn of the conversation.
#[derive(Debug, Clone)]
pub struct Finished {
    pub object: Value,
    pub assistant: ChatMessage,
}

/// The id of a new message item.
pub fn new_message_id() -> String {
    format!("msg_{}", random_id(24))
}

pub fn usage_object(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
    })
}

/// A message item holding `text` as one `output_text` part.
pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": status, "role": "assistant",
        "content": [output_text_part(text)],
    })
}

pub fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// Whether the answer was cut off (`incomplete` items and response).
fn cut_off(reason: &FinishReason) -> bool {
    matches!(reason, FinishReason::Length | FinishReason::Cancelled)
}

/// The output items of an answer: its text as a message (also when there is nothing else to
/// say), then each call. A call cut off by the budget keeps its arguments as far as they got.
pub fn output_items(message_id: &str, text: &str, completion: &Completion) -> Vec<Value> {
    let status = if cut_off(&completion.finish_reason) { "incomplete" } else { "completed" };
    let mut items = Vec::with_capacity(completion.tool_calls.len() + 1);
    if !text.is_empty() || completion.tool_calls.is_empty() {
        items.push(message_item(message_id, text, status));
    }
    let last = completion.tool_calls.len().saturating_sub(1);
    for (index, call) in completion.tool_calls.iter().enumerate() {
        let arguments = match &completion.cut_off_arguments {
            Some(partial) if index == last => partial.clone(),
            _ => call.arguments.to_string(),
        };
        items.push(json!({
            "type": "function_call", "id": format!("fc_{}", random_id(24)), "call_id": call.id,
            "name": call.name, "arguments": arguments, "status": status,
        }));
    }
    items
}

impl ResponseHead {
    /// The object as `response.created` and `response.in_progress` carry it.
    pub fn in_progress(&self) -> Value {
        self.object("in_progress", Vec::new(), Value::Null, Value::Null, Value::Null)
    }

    /// The object of the finished answer, with `output` from [`output_items`].
    pub fn finish(&self, output: Vec<Value>, text: &str, completion: &Completion) -> Finished {
        let (status, incomplete, error) = match &completion.finish_reason {
            FinishReason::Length => ("incomplete", json!({"reason": "max_output_tokens"}), Value::Null),
            FinishReason::Cancelled => ("incomplete", json!({"reason": "cancelled"}), Value::Null),
            FinishReason::Error(message) => ("failed", Value::Null, json!({"code": "server_error", "message": message})),
            FinishReason::Stop | FinishReason::StopSequence(_) | FinishReason::ToolCalls => ("completed", Value::Null, Value::Null),
        };
        let object = self.object(status, output, incomplete, error, usage_object(&completion.usage));
        let assistant = ChatMessage { tool_calls: completion.tool_calls.clone(), ..ChatMessage::new(Role::Assistant, text) };
        Finished { object, assistant }
    }

    fn object(&self, status: &str, output: Vec<Value>, incomplete: Value, error: Value, usage: Value) -> Value {
        let output_text: String = output
            .iter()
            .filter(|item| item["type"] == "message")
            .flat_map(|item| item["content"].as_array().into_iter().flatten())
            .filter_map(|part| part["text"].as_str())
            .collect();
        let echo = &self.echo;
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": error, "incomplete_details": incomplete,
            "instructions": echo.instructions, "max_output_tokens": echo.max_output_tokens,
            "model": echo.model, "output": output, "output_text": output_text,
            "parallel_tool_calls": echo.parallel_tool_calls, "previous_response_id": echo.previous_response_id,
            "reasoning": echo.reasoning, "store": echo.store, "temperature": echo.temperature,
            "text": echo.text, "tool_choice": echo.tool_choice, "tools": echo.tools, "top_p": echo.top_p,
            "truncation": echo.truncation, "usage": usage, "user": echo.user, "metadata": echo.metadata,
        })
    }
}
