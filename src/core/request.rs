//! Validated generation requests: every API route converts its own JSON into a
//! [`ValidGenerateRequest`]; the actors accept nothing else (validation is a type boundary).
//!
//! Key types: [`ChatMessage`], [`PromptInput`], [`SamplingParams`], [`Constraint`] and its
//! [`ConstraintSource`].
//! Costs: a request owns its messages and stop strings; the compiled grammar is shared in an Arc.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::keepalive::KeepAlive;
use crate::grammar::automaton::CompiledGrammar;
use crate::grammar::lexicon::{ConstraintError, Lexicon, Target};
use crate::grammar::limits::Limits;
use crate::grammar::schema::FormatMode;

/// Who wrote a message, in the chat template's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A function the model was offered (OpenAI `tools[].function`, Anthropic `tools[]`, Ollama `tools`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// A call the model made (or made earlier, when it comes back in the history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON object.
    pub arguments: serde_json::Value,
}

/// How tools may be used (issue 6); `Auto` when a request names none.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
    Named(String),
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub name: Option<String>,
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            name: None,
            tool_call_id: None,
        }
    }
}

/// What the model reads: a conversation rendered through its chat template, or raw text
/// (Ollama `/api/generate`; `template: false` is Ollama's `raw: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PromptInput {
    Chat {
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
    },
    Raw {
        prompt: String,
        system: Option<String>,
        template: bool,
    },
    /// Token ids evaluated exactly as given: no template, no BOS added (`/v1/completions` with
    /// a prompt of token ids, as vLLM takes it).
    Tokens(Vec<u32>),
}

/// Which distribution a log-probability is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LogprobMode {
    /// The model's own: a log-softmax of the raw logits row, before the constraint's mask,
    /// lexicons, repeat penalty and temperature (what vLLM reports by default).
    #[default]
    Model,
    /// `llamay_logprobs: "constrained"`: the model's distribution over the tokens the
    /// constraint allowed at that step, renormalised (still before penalty and temperature).
    Constrained,
}

/// What log-probabilities a request wants back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LogprobsRequest {
    /// Of each sampled token.
    pub answer: bool,
    /// Alternatives reported per position, at most [`super::MAX_TOP_LOGPROBS`].
    pub top: usize,
    pub mode: LogprobMode,
    /// Of every prompt token too (`echo` on `/v1/completions`).
    pub prompt: bool,
}

/// Sampling knobs, already range-checked by the API conversion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    pub seed: Option<u32>,
    /// Generated-token budget; `None` = until the context is full. The daemon's routes never
    /// leave it `None`: [`SamplingParams::limit_tokens`] applies its default and its cap.
    pub max_tokens: Option<u32>,
}

/// The daemon's token budget rules (config `default_max_tokens` and `max_tokens_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimits {
    /// The budget of a request that names none, so that an answer that never ends (a model
    /// repeating digits in JSON mode) stops long before the context is full.
    pub default_max_tokens: u32,
    /// The largest budget a request gets; a larger `max_tokens` is clamped to it, as the
    /// context size already clamps it, rather than refused.
    pub max_tokens_limit: u32,
}

impl Default for TokenLimits {
    fn default() -> Self {
        TokenLimits { default_max_tokens: 2048, max_tokens_limit: 32768 }
    }
}

impl SamplingParams {
    /// Gives a request without a budget the default one, and clamps any budget to the limit.
    pub fn limit_tokens(&mut self, limits: TokenLimits) {
        let asked = self.max_tokens.unwrap_or(limits.default_max_tokens);
        self.max_tokens = Some(asked.min(limits.max_tokens_limit));
    }
}

impl Default for SamplingParams {
    /// Ollama's defaults; the OpenAI and Anthropic conversions override what their APIs define.
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.0,
            repeat_penalty: 1.1,
            repeat_last_n: 64,
            seed: None,
            max_tokens: None,
        }
    }
}

/// Which kind of structured output a constraint enforces (for logs, stats and refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConstraintKind {
    /// Any valid JSON (`json_object`, `format: "json"`, `llamay_format: "json"`).
    Json,
    /// A JSON Schema compiled to a grammar.
    Schema,
    /// GBNF text from the request or `-grammar-file`.
    Grammar,
    /// A forced tool call (issue 6).
    Tool,
}

/// A compiled constraint the sampler enforces on every step.
#[derive(Clone)]
pub struct Constraint {
    pub kind: ConstraintKind,
    pub grammar: Arc<CompiledGrammar>,
    /// What the grammar was compiled from, so that a runner process (a model split over RPC
    /// workers) can compile the same grammar: a compiled grammar has no wire form.
    pub source: Option<Arc<ConstraintSource>>,
}

/// Why a token budget (`limit`, such as "max_tokens is 10") is refused for a constraint whose
/// shortest document, `document`, takes `needed` tokens: a smaller budget could only cut it off.
pub fn budget_too_small_message(limit: &str, needed: usize, document: &str) -> String {
    format!(
        "{limit}, too few for any valid document: the shortest one the constraint allows, {document:?}, \
         takes {needed} tokens; raise max_tokens (num_predict on Ollama's routes), or send \
         \"llamay_close_on_budget\": false to let the budget cut the output where it falls"
    )
}

/// The text a constraint is compiled from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConstraintSource {
    Gbnf { text: String },
    Schema { schema: serde_json::Value, enforce_formats: bool },
    /// JSON mode (`json_object`, `format: "json"`, `llamay_format: "json"`, `-json`): a JSON
    /// object at the top level, any JSON inside it.
    AnyJson,
}

/// Which stage refused a [`ConstraintSource`]; callers map each to their own error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConstraintCompileError {
    #[error("{0}")]
    Grammar(String),
    #[error("{0}")]
    Schema(String),
    #[error("{0}")]
    Automaton(String),
    /// The lexicon rules out every output of the grammar or schema.
    #[error("{0}")]
    Lexicon(String),
}

impl Constraint {
    /// Compiles `source` (no cache): the kind follows from what it is.
    pub fn from_source(source: ConstraintSource, limits: &Limits) -> Result<Self, ConstraintCompileError> {
        Constraint::from_source_under(source, limits, None)
    }

    /// [`Constraint::from_source`] under a lexicon (see [`ConstraintSource::compile`]).
    pub fn from_source_under(
        source: ConstraintSource,
        limits: &Limits,
        lexicon: Option<&Arc<Lexicon>>,
    ) -> Result<Self, ConstraintCompileError> {
        let kind = match &source {
            ConstraintSource::Gbnf { .. } => ConstraintKind::Grammar,
            ConstraintSource::Schema { .. } => ConstraintKind::Schema,
            ConstraintSource::AnyJson => ConstraintKind::Json,
        };
        Ok(Constraint { kind, grammar: Arc::new(source.compile(limits, lexicon)?), source: Some(Arc::new(source)) })
    }
}

impl ConstraintSource {
    pub fn schema(schema: serde_json::Value, formats: FormatMode) -> Self {
        ConstraintSource::Schema { schema, enforce_formats: formats == FormatMode::Enforce }
    }

    /// The grammar of this source; under a `lexicon`, without the fixed text it rules out (and,
    /// for JSON output under an allow list, with free strings made of its words).
    pub fn compile(&self, limits: &Limits, lexicon: Option<&Arc<Lexicon>>) -> Result<CompiledGrammar, ConstraintCompileError> {
        use crate::grammar::schema;
        let automaton = |e: crate::grammar::GrammarError| ConstraintCompileError::Automaton(e.to_string());
        let restricted = |ir: crate::grammar::ir::Grammar| match lexicon {
            Some(lexicon) => lexicon
                .restrict(ir, Target::Json)
                .map_err(|e| ConstraintCompileError::Lexicon(e.to_string())),
            None => Ok(ir),
        };
        match self {
            ConstraintSource::Gbnf { text } => match lexicon {
                Some(lexicon) => crate::grammar::lexicon::compile_gbnf_with_lexicon(text.as_bytes(), limits, lexicon)
                    .map_err(|e| match e {
                        ConstraintError::Grammar(e) => ConstraintCompileError::Grammar(e.to_string()),
                        ConstraintError::Lexicon(e) => ConstraintCompileError::Lexicon(e.to_string()),
                    }),
                None => crate::grammar::gbnf::compile_gbnf(text.as_bytes(), limits)
                    .map_err(|e| ConstraintCompileError::Grammar(e.to_string())),
            },
            ConstraintSource::Schema { schema, enforce_formats } => {
                let formats = if *enforce_formats { FormatMode::Enforce } else { FormatMode::Ignore };
                let ir = match lexicon {
                    Some(lexicon) => schema::compile_schema_with_lexicon(schema, formats, lexicon),
                    None => schema::compile_schema_with(schema, formats),
                }
                .map_err(|e| ConstraintCompileError::Schema(e.to_string()))?;
                CompiledGrammar::new(restricted(ir)?, limits).map_err(automaton)
            }
            ConstraintSource::AnyJson => {
                let ir = match lexicon {
                    Some(lexicon) => schema::any_json_object_with_lexicon(lexicon),
                    None => schema::any_json_object(),
                };
                CompiledGrammar::new(restricted(ir)?, limits).map_err(automaton)
            }
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// A generation as a route, the command line or a test asks for it, before the generation
/// service has checked it against the daemon (model name, token budget, lexicon, context,
/// constraint): what [`crate::service`] turns into a [`ValidGenerateRequest`].
#[derive(Debug, Clone)]
pub struct UncheckedGenerateRequest {
    pub model: String,
    pub input: PromptInput,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Ollama's `options.num_ctx`: a request may ask for less context than the model was loaded
    /// with, never more.
    pub num_ctx: Option<u32>,
    pub keep_alive: Option<KeepAlive>,
    pub tool_choice: ToolChoice,
    /// Whether a forced call may be several calls (OpenAI `parallel_tool_calls`, Anthropic
    /// `!disable_parallel_tool_use`); Ollama's route always makes one.
    pub parallel_tool_calls: bool,
    /// `llamay_context`: continue a named context (issue 11).
    pub context: Option<ContextRequest>,
    /// `llamay_accelerate`: drafts verified with each sampled token (`None`: the daemon's
    /// setting, on where nothing says otherwise).
    pub accelerate: Option<bool>,
    /// `llamay_close_on_budget`: a constraint closes its document within the token budget
    /// (`None`: the daemon's setting, on where nothing says otherwise).
    pub close_on_budget: Option<bool>,
    /// Log-probabilities to send back; `None`: none.
    pub logprobs: Option<LogprobsRequest>,
    /// llama-server's `cache_prompt: false`: decode the whole prompt, reusing no prefix a
    /// sequence holds, and neither wait for nor be waited for by a request sharing it.
    pub cold_prompt: bool,
}

impl UncheckedGenerateRequest {
    /// A request for `model` with `input` and nothing else: default sampling, no stop strings,
    /// no tool choice, no context, the model's own context length and keep-alive.
    pub fn new(model: impl Into<String>, input: PromptInput) -> Self {
        UncheckedGenerateRequest {
            model: model.into(),
            input,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            num_ctx: None,
            keep_alive: None,
            tool_choice: ToolChoice::None,
            parallel_tool_calls: false,
            context: None,
            accelerate: None,
            close_on_budget: None,
            logprobs: None,
            cold_prompt: false,
        }
    }

    pub fn with_sampling(mut self, sampling: SamplingParams) -> Self {
        self.sampling = sampling;
        self
    }
}

/// A request every field of which has been checked; the only thing a model actor accepts.
/// Built in one place, `crate::service`'s validation; read through its accessors.
#[derive(Debug, Clone)]
pub struct ValidGenerateRequest {
    request: UncheckedGenerateRequest,
    constraint: Option<Constraint>,
    /// `llamay_lexicon` or the daemon's `-lexicon`: words allowed or banned, checked beside
    /// `constraint` (which was compiled under it). A forced tool call sets it aside.
    lexicon: Option<Arc<Lexicon>>,
}

/// What a model worker needs to decode a request once its prompt is ready. Why a shape of its
/// own: the valid request's messages and tools are spent once the prompt is rendered, and a
/// snapshot save or restore, which has no request, decodes with a default one.
#[derive(Debug, Clone, Default)]
pub struct Decoding {
    pub sampling: SamplingParams,
    /// Draft tokens (forced bytes, copies from the prompt) verified in the decode of the
    /// sampled one (`llamay_accelerate`, serve `-accelerate`); the output is the same.
    pub accelerate: bool,
    /// Whether the constraint closes its document within the token budget
    /// (`llamay_close_on_budget`, serve `-close-on-budget`).
    pub close_on_budget: bool,
    pub stop: Vec<String>,
    pub num_ctx: Option<u32>,
    pub constraint: Option<Constraint>,
    pub lexicon: Option<Arc<Lexicon>>,
    pub logprobs: Option<LogprobsRequest>,
    /// Decode the whole prompt, reusing nothing (see [`UncheckedGenerateRequest::cold_prompt`]).
    pub cold_prompt: bool,
}

impl ValidGenerateRequest {
    /// Only the generation service's validation calls this, once it has checked `request` and
    /// compiled `constraint` (under `lexicon`).
    pub(crate) fn checked(
        request: UncheckedGenerateRequest,
        constraint: Option<Constraint>,
        lexicon: Option<Arc<Lexicon>>,
    ) -> Self {
        ValidGenerateRequest { request, constraint, lexicon }
    }

    pub fn model(&self) -> &str {
        &self.request.model
    }

    pub fn input(&self) -> &PromptInput {
        &self.request.input
    }

    pub fn sampling(&self) -> &SamplingParams {
        &self.request.sampling
    }

    pub fn stop(&self) -> &[String] {
        &self.request.stop
    }

    pub fn num_ctx(&self) -> Option<u32> {
        self.request.num_ctx
    }

    pub fn keep_alive(&self) -> Option<KeepAlive> {
        self.request.keep_alive
    }

    pub fn tool_choice(&self) -> &ToolChoice {
        &self.request.tool_choice
    }

    pub fn parallel_tool_calls(&self) -> bool {
        self.request.parallel_tool_calls
    }

    pub fn logprobs(&self) -> Option<LogprobsRequest> {
        self.request.logprobs
    }

    pub fn context(&self) -> Option<&ContextRequest> {
        self.request.context.as_ref()
    }

    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    pub fn lexicon(&self) -> Option<&Arc<Lexicon>> {
        self.lexicon.as_ref()
    }

    /// The request as it was asked for, with its checked constraint and lexicon (a runner
    /// forwards these to its own process, which validates them again).
    pub fn into_parts(self) -> (UncheckedGenerateRequest, Option<Constraint>, Option<Arc<Lexicon>>) {
        (self.request, self.constraint, self.lexicon)
    }

    /// The same request with `input` in place of its own: a context's conversation followed by
    /// the request's, as the model worker prepares a continued context.
    pub(crate) fn continued(&self, input: PromptInput) -> Self {
        let mut continued = self.clone();
        continued.request.input = input;
        continued
    }

    /// What decoding needs, once the prompt is prepared.
    pub fn into_decoding(self) -> Decoding {
        let (request, constraint, lexicon) = self.into_parts();
        Decoding {
            sampling: request.sampling,
            accelerate: request.accelerate.unwrap_or(true),
            close_on_budget: request.close_on_budget.unwrap_or(true),
            stop: request.stop,
            num_ctx: request.num_ctx,
            constraint,
            lexicon,
            logprobs: request.logprobs,
            cold_prompt: request.cold_prompt,
        }
    }
}

/// A request's use of a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextRequest {
    /// `llamay_context` (`ctx_<hex>`), and `llamay_context_commit`: append the request's
    /// messages and the answer to the context (one commit at a time).
    Named { id: String, commit: bool },
    /// Ollama's `context` array on `/api/generate`: the tokens of an earlier prompt and answer,
    /// which the prompt continues.
    Tokens(Vec<u32>),
}
