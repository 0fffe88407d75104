//! The contract between the supervisor, the API and a model actor: what a loaded model offers
//! ([`LoadedModel`], with a capability accessor each for [`Generate`], [`HoldContexts`],
//! embeddings and [`Rerank`]), how a model gets loaded ([`ModelLoader`], behind a trait so the supervisor's
//! eviction and keepalive are tested without a model), and what a submitted request returns
//! ([`Generation`]: a bounded event channel plus a cancel-on-drop guard).
//!
//! Costs: one bounded mpsc channel and one shared flag per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::contexts::{ContextRecord, ContextUse};
use crate::core::{ModelInfo, ModelTotals, StreamEvent, ValidGenerateRequest};
use crate::embed::rerank::{Reranker, ScorerKind};
use crate::embed::EmbeddingService;
use crate::error::CoreError;

/// Events buffered per request before the model thread waits for the client to read.
pub const GENERATION_CHANNEL_CAPACITY: usize = 256;

/// A model in memory: what every kind of worker reports about itself, and one accessor per
/// capability it may have (generating, holding contexts, embedding, reranking). Implemented by
/// the model worker, the embedding model, the runner process's stand-in, and test fakes.
pub trait LoadedModel: Send + Sync {
    fn info(&self) -> &ModelInfo;
    fn totals(&self) -> ModelTotals;
    /// Sequences decoding right now.
    fn sequences_in_use(&self) -> usize;
    /// Requests waiting for a free sequence right now (bounded by `max_queue`).
    fn queue_depth(&self) -> usize {
        0
    }
    /// What each device holds when the model is split over RPC workers (empty: all local).
    fn placement(&self) -> Vec<crate::core::DevicePlacement> {
        Vec::new()
    }
    /// Whether the model can no longer serve (its runner process ended): the supervisor then
    /// forgets it, and the next request loads it again.
    fn is_lost(&self) -> bool {
        false
    }
    /// Generating text; `None` for an embedding model.
    fn generator(&self) -> Option<&dyn Generate> {
        None
    }
    /// Named contexts' KV state; `None` for a model that keeps none of its own.
    fn context_states(&self) -> Option<&dyn HoldContexts> {
        None
    }
    /// The embedding thread of a model made for embeddings; `None` for a chat model.
    fn embeddings(&self) -> Option<EmbeddingService> {
        None
    }
    /// How `/rerank` scores documents with this model; `None` when it cannot.
    fn reranking(&self) -> Option<&dyn Rerank> {
        None
    }
    /// The model's tokenizer; `None` for a model whose vocabulary lives in another process.
    fn tokenizer(&self) -> Option<&dyn Tokenize> {
        None
    }
}

/// A model's tokenizer, on the calling thread (it costs a tokenisation or a template render).
pub trait Tokenize: Send + Sync {
    /// `text` as token ids; `add_special`: with the begin-of-sequence token where the model
    /// puts one. Control-token text in `text` (`<|im_end|>`) becomes its token, as a Hugging
    /// Face tokenizer (and vLLM's `/tokenize`) reads it: clients find the end-of-sequence
    /// token's id by tokenizing its text.
    fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, CoreError>;
    /// A conversation rendered through the model's chat template (ending with the assistant's
    /// turn opened), as token ids.
    fn tokenize_chat(&self, messages: &[crate::core::ChatMessage]) -> Result<Vec<u32>, CoreError>;
    /// The text of `tokens`; an id outside the vocabulary is a 400 naming it.
    fn detokenize(&self, tokens: &[u32]) -> Result<String, CoreError>;
    fn tokenizer_info(&self) -> crate::core::TokenizerInfo;
}

/// What a loaded model is for: an embedding model offers embeddings and no generation.
pub fn model_kind(model: &dyn LoadedModel) -> ModelKind {
    match (model.generator(), model.embeddings()) {
        (None, Some(_)) => ModelKind::Embedding,
        _ => ModelKind::Chat,
    }
}

/// The reranker of `model`, started on first use (blocks: call it on a blocking thread); a
/// model that cannot rerank says so by name.
pub fn reranker_of(model: &dyn LoadedModel) -> Result<Reranker, CoreError> {
    match model.reranking() {
        Some(rerank) => rerank.reranker(),
        None => Err(CoreError::bad_request(format!("model {} cannot rerank", model.info().name))),
    }
}

/// Generating text.
pub trait Generate: Send + Sync {
    /// Queues a request. Failures knowable before the first token (the prompt does not fit the
    /// context, the template fails) are returned here, synchronously, so the API answers 400
    /// rather than a stream that ends in an error.
    fn submit(&self, request: ValidGenerateRequest) -> Result<Generation, CoreError>;
}

/// Keeping named contexts' KV state (issue 11).
pub trait HoldContexts: Send + Sync {
    /// Queues a request that creates, continues or commits to a named context.
    fn submit_in_context(&self, request: ValidGenerateRequest, context: ContextUse) -> Result<Generation, CoreError>;
    /// Puts the context's tokens in a sequence (prefilling what no sequence or parked state
    /// holds) and sends that sequence's state once it is there (snapshots).
    fn save_context(&self, record: Arc<ContextRecord>) -> Result<SavedState, CoreError>;
    /// Writes `state` (saved from the same model with the context's tokens) into a sequence
    /// and gives it to the context: the context is ready with no prefill.
    fn restore_context(&self, record: Arc<ContextRecord>, state: Arc<Vec<u8>>) -> Result<Generation, CoreError>;
}

/// Scoring documents against a query.
pub trait Rerank: Send + Sync {
    /// The scorer, known without starting anything.
    fn scorer(&self) -> ScorerKind;
    /// The reranker, started on first use (blocks while it starts: call it on a blocking
    /// thread).
    fn reranker(&self) -> Result<Reranker, CoreError>;
}

/// What a loaded model is for: generating text, or turning text into vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Chat,
    Embedding,
}

impl ModelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Chat => "chat",
            ModelKind::Embedding => "embedding",
        }
    }
}

/// Loads models by name. `load` blocks (reads a file of gigabytes): call it on a blocking thread.
pub trait ModelLoader: Send + Sync + 'static {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError>;
    /// The memory `name` will take, by part, known before loading it (reads the file's
    /// header). `None`: not known; the supervisor then loads it without placing its layers.
    fn estimate(&self, _name: &str) -> Result<Option<crate::llm::offload::MemoryEstimate>, CoreError> {
        Ok(None)
    }
    /// [`ModelLoader::load`] with the model's layers where `placement` says.
    fn load_placed(
        &self,
        name: &str,
        _placement: crate::llm::offload::LayerPlacement,
    ) -> Result<Arc<dyn LoadedModel>, CoreError> {
        self.load(name)
    }

    /// Whether `name` is installed, from a lookup that reads no model file (a store entry):
    /// the supervisor asks before it makes room, so a request for a missing or just deleted
    /// model is a 404 that evicts nothing. The default leaves it to `load`.
    fn check_installed(&self, _name: &str) -> Result<(), CoreError> {
        Ok(())
    }
}

/// A save in progress: the job that puts the context in a sequence, and the state it sends.
pub struct SavedState {
    pub generation: Generation,
    pub state: tokio::sync::oneshot::Receiver<Result<Vec<u8>, String>>,
}

/// A running request: its events, and the guard whose drop cancels it.
pub struct Generation {
    pub events: mpsc::Receiver<StreamEvent>,
    pub cancel: CancelOnDrop,
}

impl Generation {
    /// A channel pair for a model to feed, with its cancel guard and token.
    pub fn channel() -> (Generation, mpsc::Sender<StreamEvent>, CancelToken) {
        let (sender, events) = mpsc::channel(GENERATION_CHANNEL_CAPACITY);
        let (cancel, token) = CancelOnDrop::new();
        (Generation { events, cancel }, sender, token)
    }
}

/// Held by whoever consumes a generation; dropping it (the client went away, the handler
/// returned) cancels the request at the model's next step.
#[derive(Debug)]
pub struct CancelOnDrop {
    flag: Arc<AtomicBool>,
}

/// The model side of a [`CancelOnDrop`]: checked once per step.
#[derive(Debug, Clone)]
pub struct CancelToken {
    flag: Arc<AtomicBool>,
}

impl CancelOnDrop {
    pub fn new() -> (CancelOnDrop, CancelToken) {
        let flag = Arc::new(AtomicBool::new(false));
        (CancelOnDrop { flag: flag.clone() }, CancelToken { flag })
    }

    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl CancelToken {
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_guard_cancels() {
        let (generation, _sender, token) = Generation::channel();
        assert!(!token.is_cancelled());
        drop(generation);
        assert!(token.is_cancelled());
    }
}
