//! Changing the installed models from the API: pull, copy, delete, create. The store and the
//! registry client sit behind [`ModelAdmin`], so `api` reaches them the way it reaches the
//! catalog, without importing sled or the pull code.
//!
//! Key types: [`ModelAdmin`], [`PullProgress`], [`CreateModel`]. Every method blocks (network
//! and disk): the API calls them on a blocking thread.

use std::collections::BTreeMap;

use crate::error::CoreError;

/// One step of a pull or create, as Ollama reports it: a status line, and for a layer its
/// digest with the bytes done and due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProgress {
    pub status: String,
    pub digest: Option<String>,
    pub total: Option<u64>,
    pub completed: Option<u64>,
}

impl PullProgress {
    pub fn status(status: impl Into<String>) -> PullProgress {
        PullProgress {
            status: status.into(),
            digest: None,
            total: None,
            completed: None,
        }
    }
}

/// Receives progress; returns false when nobody listens any more (the pull stops, resumable).
pub type ProgressSink<'a> = &'a mut (dyn FnMut(PullProgress) -> bool + Send);

/// A model made from another (`/api/create`, `llamay create`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateModel {
    pub name: String,
    /// A model name, a `sha256:<hex>` blob in the store, a GGUF path (CLI only) or a URL.
    pub from: String,
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub system: Option<String>,
    pub template: Option<String>,
    pub license: Vec<String>,
    /// Whether `from` may name a file on this machine (the CLI's Modelfile, never a request).
    pub allow_paths: bool,
}

/// What a pulled or created model carries beside its weights, as `/api/show` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelDefaults {
    /// Default options (`temperature`, `stop`...).
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub system: Option<String>,
    /// Ollama's Go template: shown, not executed (the GGUF's own template renders prompts).
    pub template: Option<String>,
    pub license: Vec<String>,
}

/// The installed models, changed. The daemon wires this to the store and the registry client.
pub trait ModelAdmin: Send + Sync + 'static {
    /// Pulls `model` from its registry or URL, over plain http only where the operator allowed
    /// it when this admin was made. `ErrorCode::ModelNotFound` when the registry has no such
    /// model or tag.
    fn pull(&self, model: &str, progress: ProgressSink<'_>) -> Result<(), CoreError>;
    fn copy(&self, source: &str, destination: &str) -> Result<(), CoreError>;
    /// `ErrorCode::ModelNotFound` when `model` is not installed.
    fn delete(&self, model: &str) -> Result<(), CoreError>;
    fn create(&self, request: CreateModel, progress: ProgressSink<'_>) -> Result<(), CoreError>;
    /// The store name `model` is installed under once pulled (`hf.co/u/R:Q` -> `hf.co/u/r:q`);
    /// an error, before anything starts, for a name or plain-http source that cannot be pulled.
    fn local_name(&self, model: &str) -> Result<String, CoreError>;
}
