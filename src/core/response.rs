//! What a generation sends back: a stream of [`StreamEvent`]s ending in one [`Completion`].
//!
//! Key types: [`StreamEvent`], [`Completion`], [`FinishReason`], [`Usage`], [`Timings`].
//! Each API's stream.rs translates these into its wire format with a pure state machine.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::request::ToolCall;
use crate::grammar::MaskStats;

/// One event of a generation. The last event is always `Done`; an error after the first token
/// arrives as `Done` with [`FinishReason::Error`], since the HTTP status is already sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamEvent {
    Delta { text: String },
    /// Log-probabilities, sent only when the request asked for them: with `prompt`, one per
    /// prompt token (echo, once, before any answer token); else the one answer token sampled
    /// just now, sent before its text.
    Logprobs { prompt: bool, tokens: Vec<TokenLogprob> },
    Done(Completion),
}

/// At most this many alternatives are reported per position (OpenAI's `top_logprobs` bound).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One token's log-probability (natural log), and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: u32,
    /// The bytes the token adds to the text (control tokens: their marker text).
    pub bytes: Vec<u8>,
    /// `None` for the first token of a prompt, which nothing predicts.
    pub logprob: Option<f32>,
    /// The most likely tokens at this position, most likely first (ties: lower id first).
    pub top: Vec<TopLogprob>,
}

/// One alternative at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: u32,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

impl TokenLogprob {
    /// The token as text (invalid UTF-8, a piece of a character, is replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

impl TopLogprob {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub enum FinishReason {
    /// End of generation token, or the constraint reached an accepting state with nothing more allowed.
    #[default]
    Stop,
    /// One of the request's stop strings matched (it is not part of the output).
    StopSequence(String),
    /// The token budget (`max_tokens`) or the context ran out.
    Length,
    /// The output is tool calls (issue 6).
    ToolCalls,
    /// The client went away or the daemon is shutting down.
    Cancelled,
    /// Generation failed part way; the message says why.
    Error(String),
}

/// Token counts for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens whose KV state was reused rather than prefilled (a context, or a prefix
    /// another request left in the cache); part of `prompt_tokens`.
    pub cached_tokens: u32,
}

/// Tokens proposed to the model as drafts and confirmed by it (acceleration, see
/// `actors::drafts`): per request, and summed per model. Each confirmed draft token is a decode
/// step saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DraftCounts {
    /// Draft tokens from bytes the grammar forced.
    pub forced: u64,
    /// Draft tokens from text copied from the prompt.
    pub copied: u64,
    /// Draft tokens the model's own choice confirmed.
    pub accepted: u64,
}

impl DraftCounts {
    pub fn drafted(&self) -> u64 {
        self.forced + self.copied
    }

    pub fn add(&mut self, other: &DraftCounts) {
        self.forced += other.forced;
        self.copied += other.copied;
        self.accepted += other.accepted;
    }
}

/// Wall-clock durations of a request's phases (Ollama reports them in nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Time spent loading the model for this request (zero when it was already loaded).
    pub load: Duration,
    pub prompt_eval: Duration,
    pub eval: Duration,
    /// From submission to the last token.
    pub total: Duration,
}

/// The end of a generation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Completion {
    pub finish_reason: FinishReason,
    pub usage: Usage,
    pub timings: Timings,
    /// Tool calls parsed from the output (issue 6); empty otherwise.
    pub tool_calls: Vec<ToolCall>,
    /// Set when the token budget cut the last of `tool_calls` off part way (`finish_reason` is
    /// then `Length`): its arguments' JSON text as far as the model wrote it. That call's
    /// `arguments` holds the same text closed into an object, for the APIs that send objects.
    pub cut_off_arguments: Option<String>,
    /// What the constraint cost this generation; `None` without a constraint.
    pub constraint_stats: Option<ConstraintReport>,
    /// Whether the token budget made the constraint close its document early (the finish
    /// reason is then `Length`).
    #[serde(default)]
    pub closed_on_budget: bool,
    /// The prompt and answer as token ids (Ollama's `context` on `/api/generate`).
    pub context_tokens: Vec<u32>,
    /// Draft tokens proposed and confirmed while decoding (all zero when not accelerated).
    #[serde(default)]
    pub drafts: DraftCounts,
}

/// What a constraint cost one generation: the matcher's counters (steps, cached steps, masks
/// computed, time...) as the engine keeps them, and the lines `llamay run -stats` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConstraintReport {
    /// The constraint's kind: `grammar`, `tool`, `json` (JSON mode and schemas) or `lexicon`.
    pub label: String,
    /// One line per part, the grammar's and then the lexicon's.
    pub summary: String,
    /// The grammar's counters, or the lexicon's when it is the only part.
    pub stats: Option<MaskStats>,
    /// The lexicon's counters beside a grammar's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lexicon_stats: Option<MaskStats>,
}

/// Opens the message of a [`FinishReason::Error`] whose cause lies outside the daemon and may
/// pass (an RPC worker lost): such a failure is a 503, not a 500, for a request not yet answered.
const RPC_WORKER_LOST: &str = "RPC worker lost: ";

impl FinishReason {
    /// A generation cut off because an RPC worker its model is split over went away.
    pub fn rpc_worker_lost(message: &str) -> Self {
        FinishReason::Error(format!("{RPC_WORKER_LOST}{message}"))
    }
}

/// The error a request that failed part way gets when nothing has been sent yet: 503 for a
/// lost RPC worker ([`FinishReason::rpc_worker_lost`]), otherwise 500.
pub fn generation_failed(message: &str) -> crate::error::CoreError {
    use crate::error::{CoreError, ErrorCode};
    match message.strip_prefix(RPC_WORKER_LOST) {
        Some(_) => CoreError::new(ErrorCode::RpcWorkerLost, message.to_string()),
        None => CoreError::internal(format!("generation failed: {message}")),
    }
}
