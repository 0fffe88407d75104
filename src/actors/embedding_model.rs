//! How the supervisor holds an embedding model ([`EmbeddingModelHandle`]): loaded on demand,
//! kept alive and counted like a chat model, it offers embeddings and cosine reranking through
//! its embedding thread (`crate::embed`) and no generation.
//!
//! Key type: [`EmbeddingModelHandle`]. Cost: the embedding thread's (one thread and one
//! context per model).

use std::sync::Arc;

use super::messages::{LoadedModel, Rerank};
use crate::core::{ModelInfo, ModelTotals};
use crate::embed::rerank::{Reranker, ScorerKind};
use crate::embed::EmbeddingService;
use crate::error::CoreError;
use crate::llm::embed::EmbedderParams;
use crate::llm::Model;

/// An embedding model as the supervisor holds it. Dropping it (unload) closes the service's
/// queue; the thread ends once the last request holding a clone of the service is answered.
pub struct EmbeddingModelHandle {
    info: ModelInfo,
    service: EmbeddingService,
}

impl EmbeddingModelHandle {
    /// Starts the embedding thread on `model`; `info` is completed with what the context allows.
    pub fn start(model: Arc<Model>, mut info: ModelInfo, params: EmbedderParams) -> Result<Self, CoreError> {
        let sequences = params.sequences;
        let service = EmbeddingService::start_loaded(&info.name, model, params)?;
        info.context_length = service.info().max_input_tokens as u32;
        info.parallel = sequences;
        Ok(Self { info, service })
    }
}

impl LoadedModel for EmbeddingModelHandle {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn sequences_in_use(&self) -> usize {
        0
    }

    fn totals(&self) -> ModelTotals {
        self.service.totals()
    }

    fn embeddings(&self) -> Option<EmbeddingService> {
        Some(self.service.clone())
    }

    fn reranking(&self) -> Option<&dyn Rerank> {
        Some(self)
    }
}

impl Rerank for EmbeddingModelHandle {
    fn scorer(&self) -> ScorerKind {
        ScorerKind::Cosine
    }

    fn reranker(&self) -> Result<Reranker, CoreError> {
        Ok(Reranker::Cosine(self.service.clone()))
    }
}
