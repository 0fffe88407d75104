//! The loaded models as the service administers them: their status (what `/v1/stats`,
//! `/api/ps` and `/metrics` show), loading or unloading one without generating (Ollama's
//! request with no prompt), and retiring a model whose store entry is gone (`/api/delete`).
//! Routes reach the supervisor only through these.
//!
//! Key items: [`GenerationService::model_status`], [`GenerationService::load`],
//! [`GenerationService::retire`], [`SupervisorStatus`] (the supervisor's snapshot, plain data).
//! Costs: one message to the supervisor each (a status reads the GPUs' free memory again, a
//! driver call); a load takes as long as the model's load.

use super::GenerationService;
use crate::actors::supervisor::{acquire_with, GetStatus, Retire};
pub use crate::actors::supervisor::{DeviceStatus, LoadedModelStatus, SupervisorStatus};
use crate::core::{KeepAlive, ModelName};
use crate::error::{CoreError, ErrorCode};

impl GenerationService {
    /// The supervisor's state now: loaded models, queues, GPUs and lifetime counters. 503
    /// `shutting_down` once the supervisor has stopped.
    pub async fn model_status(&self) -> Result<SupervisorStatus, CoreError> {
        self.supervisor
            .send(GetStatus)
            .await
            .map_err(|_| CoreError::new(ErrorCode::ShuttingDown, "llamay is shutting down"))
    }

    /// Loads `model` (with `gpu_layers` on the GPU where it says) and lets it go at once, so
    /// that `keep_alive` decides how long it stays (0 unloads it). A name that does not parse
    /// is refused before the supervisor is asked, as a generation's is.
    pub async fn load(&self, model: &str, keep_alive: Option<KeepAlive>, gpu_layers: Option<u32>) -> Result<(), CoreError> {
        let model = ModelName::parse(model)?.to_string();
        acquire_with(&self.supervisor, &model, keep_alive, gpu_layers).await.map(drop)
    }

    /// `model`'s store entry is gone: its loaded copy (if any) is never granted again and
    /// unloads now, or when its running requests end. A supervisor that is stopping unloads it
    /// anyway, so there is nothing to report.
    pub async fn retire(&self, model: ModelName) {
        let _ = self.supervisor.send(Retire { model }).await;
    }
}
