//! The answer of a request that offers tools, as the model writes it: text is sent as soon as
//! it can no longer be a call, a call is held back until the answer ends (a partial call is
//! nothing a client can act on), and a call identical to one already made ends the answer.
//! The model worker pushes each piece of text, sends what comes back and stops the sequence
//! when told; [`ToolOutput::finish`] reads the held calls when the model stops.
//!
//! What may still become a call, and is held: an answer that so far is blank, or the start of
//! `<tool_call>`, or of a Markdown fence around JSON; an answer that begins as JSON (the whole
//! of it may be a bare call); and, once text streams, a tail that may be the start of
//! `<tool_call>`, with the blank run before it. A forced answer is all calls, held from the
//! start.
//!
//! Key types: [`ToolOutput`], [`Pushed`]. Cost: each piece is scanned once while text streams
//! (the tail held is a blank run and at most a tag's length); once calls begin, the blocks
//! since the last whole one are parsed when a closing tag arrives, to spot a repeat.

use serde_json::Value;

use super::answer::{finish_tool_answer, ToolAnswer};
use super::markup::{MarkupFilter, CLOSE_TAG, OPEN_TAG};
use super::parse::parse_calls_with_ids;
use crate::core::{FinishReason, ToolSpec};

/// The fence small models like to put around JSON.
const FENCE: &str = "```";

/// What one piece of the answer gives the client now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Text to send now (may be empty).
    pub text: String,
    /// The answer repeated a call: stop generating (the repeat is dropped when it finishes).
    pub stop: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing sent yet, and what came may still open a call.
    Opening,
    /// The answer is text; only a tail that may open a call is held.
    Text,
    /// A call began, or the answer is JSON that may be one: everything from there is held.
    Calls,
}

/// One answer being written, for a request that reads calls back.
#[derive(Debug)]
pub struct ToolOutput {
    offered: Vec<ToolSpec>,
    single_call: bool,
    forced_tools: Vec<String>,
    phase: Phase,
    /// Text some of which was sent before the held part (the answer streamed as text first).
    streamed: bool,
    /// Written and not sent.
    held: String,
    /// Takes stray call tags out of the text that streams.
    markup: MarkupFilter,
    /// The calls in whole blocks read so far, and where in `held` the next block begins.
    made: Vec<(String, Value)>,
    read_up_to: usize,
}

impl ToolOutput {
    /// `single_call` keeps the first call; `forced_tools` are the tools a forced grammar lets
    /// the answer name (empty when nothing is forced: the answer may be text).
    pub fn new(offered: Vec<ToolSpec>, single_call: bool, forced_tools: Vec<String>) -> Self {
        let phase = if forced_tools.is_empty() { Phase::Opening } else { Phase::Calls };
        ToolOutput {
            offered,
            single_call,
            forced_tools,
            phase,
            streamed: false,
            held: String::new(),
            markup: MarkupFilter::default(),
            made: Vec::new(),
            read_up_to: 0,
        }
    }

    /// Takes the next piece of the answer.
    pub fn push(&mut self, piece: &str) -> Pushed {
        self.held.push_str(piece);
        if self.phase == Phase::Opening {
            match opening(&self.held) {
                Opening::Undecided => return Pushed::default(),
                Opening::Call => self.phase = Phase::Calls,
                Opening::Text => {
                    self.phase = Phase::Text;
                    self.streamed = true;
                }
            }
        }
        let text = match self.phase {
            Phase::Text => self.stream_text(),
            _ => String::new(),
        };
        // Only a piece that ends a tag can close a block.
        let stop = self.phase == Phase::Calls && piece.contains('>') && self.repeats_a_call();
        Pushed { text, stop }
    }

    /// Sends held text up to where a call may begin; from a whole opening tag on, holds all.
    fn stream_text(&mut self) -> String {
        let (send_up_to, calls_begin) = match self.held.find(OPEN_TAG) {
            Some(at) => (blank_run_start(&self.held[..at]), true),
            None => (tail_that_may_open_a_call(&self.held), false),
        };
        let mut text = self.markup.push(&self.held[..send_up_to]);
        self.held.drain(..send_up_to);
        if calls_begin {
            text.push_str(&self.markup.finish());
            self.phase = Phase::Calls;
        }
        text
    }

    /// Whether the block that just closed holds a call made before. The blocks since the last
    /// whole one are read; a closing tag that ended no call (one inside an argument) reads
    /// nothing and leaves them to the next.
    fn repeats_a_call(&mut self) -> bool {
        let Some(unread) = self.held.get(self.read_up_to..) else { return false };
        if !unread.trim_end().ends_with(CLOSE_TAG) {
            return false;
        }
        let parsed = parse_calls_with_ids(unread, &self.offered, String::new);
        if parsed.calls.is_empty() || parsed.unfinished.is_some() {
            return false;
        }
        self.read_up_to = self.held.len();
        for call in parsed.calls {
            let call = (call.name, call.arguments);
            if self.made.contains(&call) {
                return true;
            }
            self.made.push(call);
        }
        false
    }

    /// The answer once the model stopped (`last` is its last text): the calls, and the text
    /// not sent yet.
    pub fn finish(mut self, last: &str, reason: FinishReason) -> ToolAnswer {
        let mut text = self.push(last).text;
        text.push_str(&self.markup.finish());
        // After streamed text, the blank run before a call is the break between the text and
        // whatever follows the call; calls alone need none.
        let blank = match self.streamed {
            true => self.held.len() - self.held.trim_start().len(),
            false => 0,
        };
        let (blank, rest) = self.held.split_at(blank);
        let mut answer = finish_tool_answer(rest, &self.offered, self.single_call, &self.forced_tools, reason);
        if answer.calls.is_empty() || !answer.content.is_empty() {
            text.push_str(blank);
        }
        text.push_str(&answer.content);
        answer.content = text;
        answer
    }
}

/// How the start of an answer reads so far.
#[derive(Debug, PartialEq, Eq)]
enum Opening {
    /// Blank, or the start of an opening tag or of a fence around JSON.
    Undecided,
    /// An opening tag, or JSON (fenced or not) that may be a bare call.
    Call,
    Text,
}

fn opening(answer: &str) -> Opening {
    let start = answer.trim_start();
    if start.is_empty() || OPEN_TAG.starts_with(start) || FENCE.starts_with(start) {
        return Opening::Undecided;
    }
    if start.starts_with(OPEN_TAG) || begins_json(start) {
        return Opening::Call;
    }
    if let Some(fenced) = start.strip_prefix(FENCE) {
        if "json".starts_with(fenced) {
            return Opening::Undecided;
        }
        let inner = fenced.strip_prefix("json").unwrap_or(fenced).trim_start();
        if inner.is_empty() {
            return Opening::Undecided;
        }
        if begins_json(inner) {
            return Opening::Call;
        }
    }
    Opening::Text
}

/// A JSON object or list: what a bare call (or a list of calls) begins with.
fn begins_json(text: &str) -> bool {
    text.starts_with('{') || text.starts_with('[')
}

/// Where the blank run that ends `text` begins (`text.len()` when it ends in no blank).
fn blank_run_start(text: &str) -> usize {
    text.trim_end().len()
}

/// Where the tail of streaming text that may still open a call begins: a proper start of the
/// opening tag at the end, and the blank run before it (`text.len()` when there is neither).
fn tail_that_may_open_a_call(text: &str) -> usize {
    // The tag has one `<`, so only a start of it at the last `<` can still grow into it.
    let tag_start = text.rfind('<').filter(|&at| OPEN_TAG.starts_with(&text[at..])).unwrap_or(text.len());
    blank_run_start(&text[..tag_start])
}

#[cfg(test)]
mod tests;
