//! Wiring for `llamay serve`: the real model loader (store -> llama.cpp -> model worker) and the
//! store as the API's model catalog, handed to the daemon in `api::serve`.
//!
//! Key types: [`StoreCatalog`]. Cost: nothing beyond what the loader and the store do.

use std::sync::Arc;

use crate::actors::model::{StoreLoader, WorkerSettings};
use crate::config::Config;
use crate::core::{CatalogEntry, CoreError, ModelCatalog, ModelDescription};
use crate::llm::ContextParams;
use crate::store::{Manifest, ModelName, Store, StoreError};

/// The store as `/api/tags`, `/v1/models` and `/api/show` see it.
pub struct StoreCatalog {
    store: Arc<Store>,
}

impl StoreCatalog {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
    }
}

fn store_error(error: StoreError, name: &str) -> CoreError {
    match error {
        StoreError::NotFound { .. } | StoreError::InvalidName { .. } => CoreError::model_not_found(name),
        other => CoreError::internal(other.to_string()),
    }
}

/// `135M`, `1.6B`: how Ollama writes parameter counts.
fn parameter_size(count: u64) -> String {
    match count {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{}M", (n as f64 / 1e6).round()),
        n => format!("{n}"),
    }
}

fn entry(manifest: &Manifest) -> CatalogEntry {
    CatalogEntry {
        name: manifest.name.to_string(),
        size_bytes: manifest.size,
        digest: manifest.digest_hex().to_string(),
        modified_at: chrono::DateTime::from_timestamp(manifest.added_at as i64, 0),
        family: manifest.facts.architecture.clone(),
        parameter_size: parameter_size(manifest.facts.parameter_count),
        quantization_level: manifest.facts.quantization.clone(),
    }
}

impl ModelCatalog for StoreCatalog {
    fn list(&self) -> Result<Vec<CatalogEntry>, CoreError> {
        let manifests = self.store.list().map_err(|e| CoreError::internal(e.to_string()))?;
        Ok(manifests.iter().map(entry).collect())
    }

    fn describe(&self, name: &str) -> Result<ModelDescription, CoreError> {
        let parsed = ModelName::parse(name).map_err(|e| store_error(e, name))?;
        let manifest = self.store.resolve(&parsed).map_err(|e| store_error(e, name))?;
        let facts = &manifest.facts;
        let mut metadata = serde_json::Map::new();
        metadata.insert("general.architecture".into(), facts.architecture.clone().into());
        metadata.insert("general.parameter_count".into(), facts.parameter_count.into());
        if let Some(length) = facts.context_length {
            metadata.insert(format!("{}.context_length", facts.architecture), length.into());
        }
        Ok(ModelDescription {
            entry: entry(&manifest),
            parameter_count: facts.parameter_count,
            context_length: facts.context_length.unwrap_or(0),
            template: facts.chat_template.clone(),
            metadata,
        })
    }
}

/// Serves until a stop signal, with models loaded from `store`.
pub fn run(config: Config, store: Arc<Store>) -> std::io::Result<()> {
    // `context` is per sequence, as Ollama's num_ctx: the KV cache holds `parallel` of them.
    let settings = WorkerSettings {
        context: ContextParams {
            n_ctx: config.context.saturating_mul(config.parallel),
            threads: config.threads.min(i32::MAX as usize) as i32,
            batch: 512,
            sequences: config.parallel,
            kv_type: config.kv,
            flash_attention: config.flash_attention,
        },
    };
    let loader = Arc::new(StoreLoader::new(Arc::clone(&store), settings));
    let catalog = Arc::new(StoreCatalog::new(store));
    crate::api::serve::serve_blocking(config, loader, catalog)
}
