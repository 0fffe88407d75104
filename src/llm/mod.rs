//! Inference on llama.cpp: the only module that touches `llama_cpp_sys_2`.
//!
//! Owns model loading ([`Model`]), the vocabulary as bytes ([`Vocabulary`]), chat templates
//! ([`template`]), batched decode over parallel sequences ([`Context`]), incremental
//! detokenization ([`detok`]), sampling with a constraint hook ([`sampling`]), the CPU
//! threadpool each context computes on, with its thread-count tuner ([`threadpool`]), the GPUs
//! layers can go to ([`devices`]) and the memory estimate that decides how many ([`offload`]).
//! Everything above this module speaks in token ids (`u32`), bytes and strings.

mod backend;
pub mod context;
pub mod detok;
pub mod devices;
pub mod model;
pub mod offload;
pub mod rpc;
pub mod sampling;
pub mod template;
pub mod threadpool;
pub mod vocab;
pub mod embed;
mod ffi;

/// The tracing target of llama.cpp's own log (a line per event, at llama.cpp's level).
pub use ffi::LOG_TARGET as LLAMA_LOG_TARGET;
/// A tracing filter that silences llama.cpp's log: thousands of lines a run otherwise.
pub const QUIET_LLAMA_LOGS: &str = "llama.cpp=off";

pub use ffi::system_info;
pub use context::{BatchEntry, Context, ContextParams, KvType, LogitsRow, SeqId};
pub use model::{Model, SpecialTokens};
pub use vocab::Vocabulary;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{path} is not a usable model: {reason}")]
    NotAModel { path: PathBuf, reason: String },
    #[error("could not create a context: {0}")]
    Context(String),
    #[error("invalid context settings: {0}")]
    Config(String),
    #[error("decode failed: {0}")]
    Decode(String),
    #[error("sequence state: {0}")]
    State(String),
    #[error("tokenizing failed: {0}")]
    Tokenize(String),
    #[error(transparent)]
    Template(#[from] template::TemplateError),
    #[error(transparent)]
    Rpc(#[from] rpc::RpcError),
}
