//! Context snapshots as the service keeps them (issue 11): a context's KV state saved by its
//! model's worker and written to the snapshot shelf in the model store, the shelf listed, shown
//! and pruned, and a snapshot restored as a new context whose sequence is written from the saved
//! state. Routes see a snapshot as a [`SnapshotSummary`], never its manifest.
//!
//! Without a writable store the daemon has no shelf, and every snapshot call answers 500 saying
//! why.
//!
//! Key items: [`GenerationService::snapshot_context`], [`GenerationService::restore_context`],
//! [`SnapshotSummary`], [`RestoredContext`]. Costs: a snapshot runs one job on the model's
//! worker (no prefill when the context is in a sequence or parked) and one blob write; a
//! restore reads and hashes the blob and writes it into a sequence, with no prefill. Store
//! calls run on blocking threads, off the async ones.

use std::sync::Arc;
use std::time::Instant;

use super::contexts::ContextSummary;
use super::{collect, context_holder, GenerationService, Started};
use crate::actors::supervisor::acquire;
use crate::contexts::snapshots::{snapshot_content, SnapshotManifest, SnapshotShelf};
use crate::contexts::ContextRecord;
use crate::core::{KeepAlive, ModelName};
use crate::error::CoreError;

/// A snapshot as callers see it: its facts, not its state or conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSummary {
    /// `snap_<hex>`.
    pub id: String,
    /// The context it was taken from.
    pub context: String,
    pub model: String,
    /// Digest of the model file its state fits (`sha256:<hex>`; empty for a file outside the store).
    pub model_digest: String,
    /// Tokens whose KV state it holds.
    pub tokens: usize,
    /// Size of the saved state.
    pub bytes: u64,
    /// Unix seconds.
    pub created: u64,
}

impl SnapshotSummary {
    fn of(manifest: &SnapshotManifest) -> SnapshotSummary {
        SnapshotSummary {
            id: manifest.id.clone(),
            context: manifest.context.clone(),
            model: manifest.model.clone(),
            model_digest: manifest.model_digest.clone(),
            tokens: manifest.tokens.len(),
            bytes: manifest.bytes,
            created: manifest.created,
        }
    }
}

/// A context made from a snapshot, and the snapshot it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoredContext {
    pub context: ContextSummary,
    pub snapshot: String,
}

/// Runs a blocking store call off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoreError> + Send + 'static,
) -> Result<T, CoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| CoreError::internal(format!("the store call did not finish: {e}")))?
}

impl GenerationService {
    /// The same service, keeping context snapshots on `shelf` (the daemon's writable store).
    pub fn with_snapshots(mut self, shelf: Arc<SnapshotShelf>) -> Self {
        self.snapshots = Some(shelf);
        self
    }

    fn shelf(&self) -> Result<Arc<SnapshotShelf>, CoreError> {
        self.snapshots.clone().ok_or_else(|| {
            CoreError::internal(
                "snapshots need the model store, and this daemon has it read-only (another llamay \
                 process holds it)",
            )
        })
    }

    /// Writes the context `id`'s KV state to the model store as a new snapshot. The context is
    /// not changed whatever happens.
    pub async fn snapshot_context(&self, id: &str) -> Result<SnapshotSummary, CoreError> {
        let shelf = self.shelf()?;
        let record = self.contexts.get(id)?;
        let (digest, bytes) = self.save_context_state(&record).await?;
        let tokens = record.tokens().as_ref().clone();
        let manifest = blocking(move || shelf.put(&record, tokens, &digest, &bytes)).await?;
        Ok(SnapshotSummary::of(&manifest))
    }

    /// Every snapshot in the store.
    pub async fn list_snapshots(&self) -> Result<Vec<SnapshotSummary>, CoreError> {
        let shelf = self.shelf()?;
        let all = blocking(move || shelf.list()).await?;
        Ok(all.iter().map(SnapshotSummary::of).collect())
    }

    /// The snapshot `id`; 404 when there is none.
    pub async fn snapshot(&self, id: &str) -> Result<SnapshotSummary, CoreError> {
        let shelf = self.shelf()?;
        let id = id.to_string();
        let manifest = blocking(move || shelf.get(&id)).await?;
        Ok(SnapshotSummary::of(&manifest))
    }

    /// Deletes the snapshot `id` and its state; 404 when there is none.
    pub async fn delete_snapshot(&self, id: &str) -> Result<(), CoreError> {
        let shelf = self.shelf()?;
        let id = id.to_string();
        blocking(move || shelf.remove(&id)).await
    }

    /// A new context holding the snapshot `id`'s tokens, its sequence written from the saved
    /// state (no prefill). `model`, when given, must be the snapshot's (any spelling of it);
    /// the loaded model's file must be the one the state was saved on (409 otherwise).
    pub async fn restore_context(
        &self,
        id: &str,
        model: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<RestoredContext, CoreError> {
        let shelf = self.shelf()?;
        let manifest = {
            let shelf = Arc::clone(&shelf);
            let id = id.to_string();
            blocking(move || shelf.get(&id)).await?
        };
        // Spellings of one model are the same model (a snapshot taken before names were
        // normalised may hold any of them).
        let same_model = |asked: &str| {
            ModelName::parse(asked).ok().is_some_and(|asked| ModelName::parse(&manifest.model).ok() == Some(asked))
        };
        if let Some(model) = model.filter(|m| !same_model(m)) {
            return Err(CoreError::invalid(format!(
                "snapshot {} holds the state of model {:?}, not {model:?}; leave model out or send {:?}",
                manifest.id, manifest.model, manifest.model
            ))
            .with_param("model"));
        }
        let content = snapshot_content(&manifest)?;
        let (model, tokens, snapshot) = (manifest.model.clone(), manifest.tokens.clone(), manifest.id.clone());
        self.contexts.check_room(1)?;
        let arrived = Instant::now();
        let lease = acquire(&self.supervisor, &model, None).await?;
        let digest = lease.model().info().digest.clone();
        let state = blocking(move || shelf.state_for(&manifest, &digest)).await?;
        let record = self.contexts.new_record(&model, content, Arc::new(tokens), keep_alive, None);
        let generation = context_holder(lease.model().as_ref(), &record)?.restore_context(Arc::clone(&record), Arc::new(state))?;
        let tally = Arc::clone(&self.book).open(&lease.model().info().name, arrived);
        collect(Started { generation, lease, tally }).await?;
        record.touch();
        self.contexts.insert(Arc::clone(&record))?;
        Ok(RestoredContext { context: ContextSummary::of(&record), snapshot })
    }

    /// A context's KV state, saved by its model's worker (no prefill when the context is in a
    /// sequence or parked), with the digest of the model it belongs to.
    async fn save_context_state(&self, record: &Arc<ContextRecord>) -> Result<(String, Vec<u8>), CoreError> {
        record.touch();
        let arrived = Instant::now();
        let lease = acquire(&self.supervisor, &record.model, None).await?;
        let digest = lease.model().info().digest.clone();
        let saving = context_holder(lease.model().as_ref(), record)?.save_context(Arc::clone(record))?;
        let tally = Arc::clone(&self.book).open(&lease.model().info().name, arrived);
        collect(Started { generation: saving.generation, lease, tally }).await?;
        let bytes = saving
            .state
            .await
            .map_err(|_| CoreError::internal("the model stopped before sending the context's state"))?
            .map_err(|e| CoreError::internal(format!("could not read the context's state: {e}")))?;
        Ok((digest, bytes))
    }
}
