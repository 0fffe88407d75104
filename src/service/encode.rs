//! Embeddings and reranking as the service runs them: the model leased (loaded on demand, kept
//! alive as a chat model is), its capability checked, the work done on its thread.
//!
//! Key types: [`Embedding`], [`Ranking`]. Costs: the embedding or scorer thread's; starting a
//! chat model's scorer on first use runs on a blocking thread.

use std::sync::Arc;
use std::time::Duration;

use super::GenerationService;
use crate::actors::messages::reranker_of;
use crate::actors::supervisor::acquire;
use crate::core::{KeepAlive, ModelInfo};
use crate::embed::rerank::Scores;
use crate::embed::{EmbedInput, Embedded};
use crate::error::CoreError;

/// What one embedding request produced, with the facts the responses report.
pub struct Embedding {
    pub embedded: Embedded,
    /// The model's name as it is loaded.
    pub model: String,
    pub load_duration: Duration,
    pub dimensions: usize,
}

/// How relevant each document is to the query, by the model named.
pub struct Ranking {
    pub scores: Scores,
    pub model: String,
}

impl GenerationService {
    /// Embeds `inputs` with `model`; a model that makes no embeddings gets `not_an_encoder`'s
    /// error (each route names its own alternative).
    pub async fn embed(
        &self,
        model: &str,
        keep_alive: Option<KeepAlive>,
        inputs: Vec<EmbedInput>,
        truncate: bool,
        not_an_encoder: impl FnOnce(&ModelInfo) -> CoreError,
    ) -> Result<Embedding, CoreError> {
        let lease = acquire(&self.supervisor, model, keep_alive).await?;
        let Some(service) = lease.model().embeddings() else {
            return Err(not_an_encoder(lease.model().info()));
        };
        let embedded = service.embed(inputs, truncate).await?;
        Ok(Embedding {
            embedded,
            model: lease.model().info().name.clone(),
            load_duration: lease.load_duration(),
            dimensions: service.info().dimensions,
        })
    }

    /// Scores `documents` against `query` with `model`: cosine for an embedding model, query
    /// likelihood for a chat model (its scorer started on first use).
    pub async fn rerank(&self, model: &str, query: String, documents: Vec<String>) -> Result<Ranking, CoreError> {
        let lease = acquire(&self.supervisor, model, None).await?;
        let loaded = Arc::clone(lease.model());
        let reranker = tokio::task::spawn_blocking(move || reranker_of(loaded.as_ref()))
            .await
            .map_err(|e| CoreError::internal(format!("the reranker would not start: {e}")))??;
        let scores = reranker.score(query, documents).await?;
        Ok(Ranking { scores, model: lease.model().info().name.clone() })
    }
}
