//! Finishing the answer of a request that offered tools, once the model stops: the calls, the
//! text beside them, a call the token budget cut off part way, and why the answer ended. The
//! model worker applies it; each API then writes the result in its own shape, so a cut-off call
//! never reaches a client as `<tool_call>` text.
//!
//! Key items: [`finish_tool_answer`], [`ToolAnswer`]. Cost: linear in the answer.

use super::markup::strip_markup;
use super::parse::{openai_call_id, parse_calls};
use super::partial::read_cut_off_call;
use crate::core::{FinishReason, ToolCall, ToolSpec};

/// A finished tool answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// Text beside the calls, without any call markup (empty for a forced call).
    pub content: String,
    pub calls: Vec<ToolCall>,
    /// Set when the token budget cut the last of `calls` off: its arguments' JSON text as far
    /// as the model wrote it (`calls`' last `arguments` holds it closed into an object).
    pub cut_off_arguments: Option<String>,
    pub reason: FinishReason,
}

/// Reads the calls out of `held`. Whole calls end the answer as `ToolCalls`; a call the
/// budget cut off (`reason` is `Length`) is kept as far as it got and the answer stays
/// `Length`; a block that is neither loses its tags and stays text. A forced grammar allows
/// nothing but calls, so a forced answer has no text. `single_call` keeps the first call.
pub fn finish_tool_answer(
    held: &str,
    offered: &[ToolSpec],
    single_call: bool,
    forced: bool,
    reason: FinishReason,
) -> ToolAnswer {
    let mut parsed = parse_calls(held, offered);
    if single_call {
        parsed.calls.truncate(1);
    }
    let mut cut_off_arguments = None;
    if let Some(open) = parsed.unfinished.take() {
        let room_for_another = !(single_call && !parsed.calls.is_empty());
        if reason == FinishReason::Length {
            if let Some(call) = read_cut_off_call(&open, offered).filter(|_| room_for_another) {
                cut_off_arguments = Some(call.arguments_text);
                parsed.calls.push(ToolCall {
                    id: openai_call_id(),
                    name: call.name,
                    arguments: call.arguments,
                });
            }
        } else {
            // The model stopped inside a block that is not a call: its words, without the tags.
            if !parsed.content.is_empty() {
                parsed.content.push('\n');
            }
            parsed.content.push_str(strip_markup(&open).trim());
        }
    }
    let reason = match reason {
        FinishReason::Length if cut_off_arguments.is_some() => FinishReason::Length,
        FinishReason::Stop | FinishReason::Length if !parsed.calls.is_empty() => {
            FinishReason::ToolCalls
        }
        other => other,
    };
    if forced {
        parsed.content.clear();
    }
    ToolAnswer {
        content: parsed.content,
        calls: parsed.calls,
        cut_off_arguments,
        reason,
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
