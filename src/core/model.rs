//! What the API knows about models: a loaded model's facts and running totals, and the catalog
//! of installed models (the store, seen through a trait so `api` never imports it).
//!
//! Key types: [`ModelInfo`], [`ModelTotals`], [`ModelCatalog`], [`CatalogEntry`], [`ModelDescription`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// Facts about a loaded model, fixed at load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The name it was asked for by (`smollm2:135m`).
    pub name: String,
    /// `general.architecture` (`llama`, `gemma3`).
    pub architecture: String,
    pub parameter_count: u64,
    /// File type as a name (`Q8_0`, `F16`).
    pub quantization: String,
    /// The context the model was loaded with (tokens, all sequences share it).
    pub context_length: u32,
    /// The context the model was trained for.
    pub trained_context_length: u32,
    pub size_bytes: u64,
    /// `sha256:<hex>` of the GGUF blob.
    pub digest: String,
    /// How many sequences decode together (`-parallel`).
    pub parallel: u32,
}

/// What a model's tokenizer is, as `/tokenizer_info` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenizerInfo {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    /// The chat template's Jinja source (`None`: the model has none; a built-in one is used).
    pub chat_template: Option<String>,
    /// Tokens one sequence may hold, as the model is loaded.
    pub model_max_length: u32,
    pub vocabulary_size: usize,
    /// Whether a text prompt starts with the begin-of-sequence token.
    pub adds_bos: bool,
}

/// Counters a loaded model keeps over its life, for `/v1/stats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ModelTotals {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Generations whose constraint closed its document early to end valid within the token
    /// budget.
    pub budget_closings: u64,
    /// Time spent decoding generated tokens, summed over steps (not over sequences).
    #[serde(serialize_with = "serialize_seconds")]
    pub generation_time: Duration,
    #[serde(serialize_with = "serialize_seconds")]
    pub prompt_eval_time: Duration,
    /// The constraint caches (states, masks, hit rates, clears) of the last constrained
    /// generation, as the engine reports them.
    pub constraint_caches: Option<crate::grammar::MaskStats>,
    /// Requests that started from KV state already in the cache (a context or a shared
    /// prefix), and the prompt tokens they did not prefill.
    pub prefix_reuse_hits: u64,
    pub prefix_tokens_saved: u64,
    /// Where the decode steps spent their time, phase by phase.
    pub step_split: StepSplit,
    /// Draft tokens proposed and confirmed, summed over requests.
    #[serde(default)]
    pub drafts: crate::core::DraftCounts,
}

/// Where a model's decode steps spent their wall time, summed over steps and sequences: what a
/// profiler would say per token, measured in the daemon so it holds under any load. The phases
/// are parts of `steps`; what `steps` has beyond their sum is the loop's own bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StepSplit {
    /// `llama_decode`: the forward pass of the whole batch, the logits copy out included.
    pub decode: Duration,
    /// Choosing tokens from logits (penalties, truncation, the draw), constraint work excluded.
    pub sampling: Duration,
    /// The constraint engine: token checks, masks, commits.
    pub constraint: Duration,
    /// Token to text: UTF-8 assembly, stop strings, the tool-markup filter.
    pub detokenize: Duration,
    /// Handing text to each request's channel, which the HTTP side drains.
    pub deliver: Duration,
    /// Whole steps, from planning the batch to the last delivery.
    pub steps: Duration,
}

impl StepSplit {
    /// The phases by name, in step order, then the whole.
    pub fn phases(&self) -> [(&'static str, Duration); 6] {
        [
            ("decode", self.decode),
            ("sampling", self.sampling),
            ("constraint", self.constraint),
            ("detokenize", self.detokenize),
            ("deliver", self.deliver),
            ("steps", self.steps),
        ]
    }

    pub fn add(&mut self, other: &StepSplit) {
        self.decode += other.decode;
        self.sampling += other.sampling;
        self.constraint += other.constraint;
        self.detokenize += other.detokenize;
        self.deliver += other.deliver;
        self.steps += other.steps;
    }
}

impl ModelTotals {
    /// Generated tokens per second of decoding, 0 before the first token.
    pub fn tokens_per_second(&self) -> f64 {
        let seconds = self.generation_time.as_secs_f64();
        if seconds > 0.0 {
            self.generated_tokens as f64 / seconds
        } else {
            0.0
        }
    }
}

fn serialize_seconds<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// One installed model, as `/api/tags` and `/v1/models` list it.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    pub name: String,
    pub size_bytes: u64,
    pub digest: String,
    pub modified_at: Option<DateTime<Utc>>,
    /// `general.architecture`.
    pub family: String,
    /// Human parameter size (`135M`, `1.6B`).
    pub parameter_size: String,
    pub quantization_level: String,
    /// What the model can be asked for, in Ollama's words ([`capabilities_of`]).
    pub capabilities: Vec<&'static str>,
}

/// What a model can be asked for, as Ollama's `/api/show` and `/api/tags` list it: an
/// embedding model (`embedding`, told by its GGUF) embeds; any other completes and takes tools
/// (through its template's own tools section, or the convention llamay describes them in).
/// Never `insert` (no fill-in-the-middle) nor `vision` (no image input).
pub fn capabilities_of(embedding: bool) -> Vec<&'static str> {
    if embedding {
        vec!["embedding"]
    } else {
        vec!["completion", "tools"]
    }
}

/// One installed model in detail, for `/api/show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDescription {
    pub entry: CatalogEntry,
    pub parameter_count: u64,
    pub context_length: u64,
    /// The chat template from the GGUF metadata, if any.
    pub template: Option<String>,
    /// GGUF metadata, keys as in the file (`general.architecture`...), large arrays left out.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Default options, system prompt, Ollama template and license of a pulled or created model.
    pub defaults: crate::core::ModelDefaults,
}

/// The installed models. The lead wires this to the store; tests use an in-memory list.
pub trait ModelCatalog: Send + Sync + 'static {
    fn list(&self) -> Result<Vec<CatalogEntry>, CoreError>;
    /// The model `name` names. A name that breaks the name rule gets
    /// [`ModelName::parse`](crate::core::ModelName::parse)'s 400 here, so routes need not check
    /// it first; `ErrorCode::ModelNotFound` when it is not installed.
    fn describe(&self, name: &str) -> Result<ModelDescription, CoreError>;
}

/// What one device holds of a model split over RPC workers (`serve -rpc`): shown at start-up
/// and by `/v1/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePlacement {
    /// `local CPU`, or the worker's host:port.
    pub device: String,
    /// Blocks held, as `11-15` (the output layer counts as the block after the last), or `none`.
    pub layers: String,
    /// Weight bytes held.
    pub bytes: u64,
}
