//! Finishing the answer of a request that offered tools, once the model stops: the calls, the
//! text beside them, a call the token budget cut off part way, and why the answer ended. The
//! model worker applies it (through [`super::ToolOutput`]); each API then writes the result in
//! its own shape, so a cut-off call never reaches a client as `<tool_call>` text.
//!
//! Key items: [`finish_tool_answer`], [`ToolAnswer`]. Cost: linear in the answer, plus a
//! comparison of each call with the ones before it.

use serde_json::{Map, Value};

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

/// Reads the calls out of `held`. Whole calls end the answer as `ToolCalls`; a call identical
/// (name and arguments) to an earlier one ends the calls there, and it and all after it are
/// dropped; a call the budget cut off (`reason` is `Length`) is kept as far as it got and the
/// answer stays `Length`; a block that is neither loses its tags and stays text.
/// `single_call` keeps the first call. `forced_tools` are the tools a forced grammar lets the
/// answer name (empty when nothing is forced): a forced answer has no text, and one the budget
/// cut before its tool could be told is a cut-off call to the one tool it could name, or, when
/// it could name several, an error saying the budget was too small.
pub fn finish_tool_answer(
    held: &str,
    offered: &[ToolSpec],
    single_call: bool,
    forced_tools: &[String],
    reason: FinishReason,
) -> ToolAnswer {
    let forced = !forced_tools.is_empty();
    let mut parsed = parse_calls(held, offered);
    if let Some(repeat) = first_repeat(&parsed.calls) {
        parsed.calls.truncate(repeat);
        parsed.unfinished = None;
    }
    if single_call {
        parsed.calls.truncate(1);
    }
    let mut cut_off_arguments = None;
    if let Some(open) = parsed.unfinished.take() {
        let room_for_another = !(single_call && !parsed.calls.is_empty());
        if reason == FinishReason::Length {
            // A forced call can only name a forced tool, which tells a cut name apart sooner.
            let nameable: Vec<ToolSpec> = match forced {
                true => offered.iter().filter(|tool| forced_tools.contains(&tool.name)).cloned().collect(),
                false => offered.to_vec(),
            };
            if let Some(call) = read_cut_off_call(&open, &nameable).filter(|_| room_for_another) {
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
    if forced {
        parsed.content.clear();
        if reason == FinishReason::Length && parsed.calls.is_empty() {
            match forced_tools {
                [only] => {
                    // Cut before the name was written: the call is still to the one tool allowed.
                    cut_off_arguments = Some(String::new());
                    parsed.calls.push(ToolCall {
                        id: openai_call_id(),
                        name: only.clone(),
                        arguments: Value::Object(Map::new()),
                    });
                }
                _ => {
                    return ToolAnswer {
                        content: String::new(),
                        calls: Vec::new(),
                        cut_off_arguments: None,
                        reason: FinishReason::Error(
                            "the token budget ran out before the forced tool call named its tool; \
                             raise max_tokens (num_predict on Ollama's routes)"
                                .to_string(),
                        ),
                    };
                }
            }
        }
    }
    let reason = match reason {
        FinishReason::Length if cut_off_arguments.is_some() => FinishReason::Length,
        FinishReason::Stop | FinishReason::Length if !parsed.calls.is_empty() => {
            FinishReason::ToolCalls
        }
        other => other,
    };
    ToolAnswer {
        content: parsed.content,
        calls: parsed.calls,
        cut_off_arguments,
        reason,
    }
}

/// The index of the first call identical (name and arguments, as parsed JSON) to one before it.
pub(crate) fn first_repeat(calls: &[ToolCall]) -> Option<usize> {
    (1..calls.len()).find(|&index| {
        calls[..index]
            .iter()
            .any(|earlier| earlier.name == calls[index].name && earlier.arguments == calls[index].arguments)
    })
}

#[cfg(test)]
mod tests;
