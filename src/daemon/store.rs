//! `llamay serve` over the model store: the real model loader (store -> llama.cpp -> model
//! worker), the store as the API's model catalog, model administration (pulls, copies,
//! deletes, creates), the snapshot shelf and the stored responses, handed to a [`super::Daemon`].
//!
//! Key items: [`serve_store`], [`StoreCatalog`]. Cost: nothing beyond what the loader and the store do, but
//! for a model whose facts were recorded before they said whether it is an embedding model:
//! its file's header is read once (well under a megabyte) and the answer remembered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::actors::model::{StoreLoader, WorkerSettings};
use crate::config::Config;
use crate::core::{CatalogEntry, CoreError, ModelCatalog, ModelDescription};
use crate::llm::ContextParams;
use crate::store::{Manifest, ModelName, ModelRef, Store, StoreError};
use super::settings::queue_limits;

/// The store as `/api/tags`, `/v1/models` and `/api/show` see it, with the file given to
/// `serve -m PATH` listed under the name it is served by.
pub struct StoreCatalog {
    store: Arc<Store>,
    /// Facts of served files, read once at start-up (no digest: the file is not hashed).
    files: Vec<Manifest>,
    /// Whether a blob is an embedding model, by digest, for manifests recorded before their
    /// facts said so.
    embedding_blobs: Mutex<HashMap<String, bool>>,
}

impl StoreCatalog {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store, files: Vec::new(), embedding_blobs: Mutex::new(HashMap::new()) }
    }

    /// Whether the model is an embedding model: from its facts, or, for facts recorded before
    /// they said so, from its file's header (read once per blob; unreadable reads as a chat
    /// model, which is what every model was listed as before).
    fn is_embedding(&self, manifest: &Manifest) -> bool {
        if let Some(embedding) = manifest.facts.embedding {
            return embedding;
        }
        let remembered = self.embedding_blobs.lock().ok().and_then(|blobs| blobs.get(&manifest.digest).copied());
        if let Some(embedding) = remembered {
            return embedding;
        }
        let embedding = crate::gguf::read_gguf_facts(&self.store.blob_path(manifest))
            .ok()
            .and_then(|facts| facts.embedding)
            .unwrap_or(false);
        if let Ok(mut blobs) = self.embedding_blobs.lock() {
            blobs.insert(manifest.digest.clone(), embedding);
        }
        embedding
    }

    fn entry(&self, manifest: &Manifest) -> CatalogEntry {
        entry(manifest, self.is_embedding(manifest))
    }

    /// Lists the GGUF file at `path` under `name`, ahead of a store model of that name.
    pub fn with_file(mut self, name: ModelName, path: &std::path::Path) -> std::io::Result<Self> {
        let facts = crate::gguf::read_gguf_facts(path)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
        let metadata = std::fs::metadata(path)?;
        let added_at = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        self.files.push(Manifest { name, digest: String::new(), size: metadata.len(), facts, added_at, extras: Default::default() });
        Ok(self)
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

fn entry(manifest: &Manifest, embedding: bool) -> CatalogEntry {
    CatalogEntry {
        name: manifest.name.to_string(),
        size_bytes: manifest.size,
        digest: manifest.digest_hex().to_string(),
        modified_at: chrono::DateTime::from_timestamp(manifest.added_at as i64, 0),
        family: manifest.facts.architecture.clone(),
        parameter_size: parameter_size(manifest.facts.parameter_count),
        quantization_level: manifest.facts.quantization.clone(),
        capabilities: crate::core::capabilities_of(embedding),
    }
}

impl ModelCatalog for StoreCatalog {
    fn list(&self) -> Result<Vec<CatalogEntry>, CoreError> {
        let manifests = self.store.list().map_err(|e| CoreError::internal(e.to_string()))?;
        let shadowed = |m: &Manifest| self.files.iter().any(|file| file.name == m.name);
        let stored = manifests.iter().filter(|m| !shadowed(m));
        Ok(self.files.iter().chain(stored).map(|manifest| self.entry(manifest)).collect())
    }

    fn describe(&self, name: &str) -> Result<ModelDescription, CoreError> {
        let parsed = ModelName::parse(name)?;
        let manifest = match self.files.iter().find(|file| file.name == parsed) {
            Some(file) => file.clone(),
            None => self.store.resolve(&parsed).map_err(|e| store_error(e, name))?,
        };
        let facts = &manifest.facts;
        let mut metadata = serde_json::Map::new();
        metadata.insert("general.architecture".into(), facts.architecture.clone().into());
        metadata.insert("general.parameter_count".into(), facts.parameter_count.into());
        if let Some(length) = facts.context_length {
            metadata.insert(format!("{}.context_length", facts.architecture), length.into());
        }
        Ok(ModelDescription {
            entry: self.entry(&manifest),
            parameter_count: facts.parameter_count,
            context_length: facts.context_length.unwrap_or(0),
            template: facts.chat_template.clone(),
            metadata,
            defaults: crate::core::ModelDefaults {
                parameters: manifest.extras.parameters.clone(),
                system: manifest.extras.system.clone(),
                template: manifest.extras.template.clone(),
                license: manifest.extras.license.clone(),
            },
        })
    }
}

/// Checks that every RPC worker answers and lists them. The daemon itself never talks ggml's
/// RPC protocol (its client aborts the process when a worker is lost): each model loads in a
/// runner process that does ([`crate::actors::runner`]) and reports what each worker holds.
fn check_rpc_workers(endpoints: &[String], ratios: &[f64]) -> std::io::Result<()> {
    crate::llm::rpc::check_reachable(endpoints).map_err(|e| std::io::Error::other(e.to_string()))?;
    if !ratios.is_empty() {
        crate::llm::rpc::check_split(ratios, endpoints.len()).map_err(|e| std::io::Error::other(e.to_string()))?;
        println!("RPC workers (each model runs in its own process, its layers split over this CPU and them by -split {ratios:?}):");
    } else {
        println!("RPC workers (each model runs in its own process, its layers split over this CPU and them by free memory):");
    }
    for worker in endpoints {
        println!("  {worker}");
    }
    Ok(())
}

/// A model reference that is a file path becomes the name made from its stem (the reference is
/// rewritten to it); the name and path are returned for the loader and the catalog.
fn register_file(reference: &mut Option<String>) -> std::io::Result<Option<(ModelName, std::path::PathBuf)>> {
    match reference.as_deref().map(ModelRef::parse).transpose() {
        Ok(Some(ModelRef::Path(path))) => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let name = ModelName::from_stem(&stem);
            tracing::info!(path = %path.display(), model = %name, "serving a model file under a name; requests use the name");
            *reference = Some(name.to_string());
            Ok(Some((name, path)))
        }
        Ok(_) => Ok(None),
        Err(error) => Err(std::io::Error::other(error.to_string())),
    }
}

/// Serves until a stop signal, with models loaded from `store`. A `-m` that is a file path is
/// registered under a name made from its stem: requests use that name, as they cannot name files.
pub fn serve_store(mut config: Config, store: Arc<Store>) -> std::io::Result<()> {
    let file_model = register_file(&mut config.model)?;
    // `-embed` and `-rerank` paths are served under names the same way (issue 14).
    let mut files: Vec<(ModelName, std::path::PathBuf)> = file_model.into_iter().collect();
    for reference in [&mut config.embed, &mut config.rerank] {
        if let Some((name, path)) = register_file(reference)? {
            if !files.iter().any(|(known, _)| *known == name) {
                files.push((name, path));
            }
        }
    }
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
        max_queue: queue_limits(&config).max_queue,
    };
    if !config.rpc.is_empty() {
        check_rpc_workers(&config.rpc, &config.split)?;
    }
    let mut loader = StoreLoader::new(Arc::clone(&store), settings);
    let mut catalog = StoreCatalog::new(Arc::clone(&store));
    for (name, path) in files {
        catalog = catalog.with_file(name.clone(), &path)?;
        loader = loader.with_file(name, path);
    }
    let loader: Arc<dyn crate::actors::messages::ModelLoader> = if config.rpc.is_empty() {
        Arc::new(loader)
    } else {
        let program = std::env::current_exe()?;
        Arc::new(crate::actors::runner::RunnerLoader::new(loader, config.rpc.clone(), config.split.clone(), program))
    };
    let catalog = Arc::new(catalog);
    if store.is_read_only() {
        return super::Daemon::new(config, loader, catalog).run_blocking();
    }
    // Partial downloads abandoned for a day go at start-up, as `llamay prune` does.
    let freed = crate::pull::prune(&store);
    if freed > 0 {
        tracing::info!(bytes = freed, "deleted stale partial downloads");
    }
    // Context ids carry the store's daemon id unless the config names one: stable across
    // restarts, so a proxy keeps routing a context to this daemon.
    if config.daemon_id.is_none() {
        config.daemon_id = store.daemon_id();
    }
    let snapshots = Arc::new(crate::contexts::snapshots::SnapshotShelf::new(Arc::clone(&store)));
    let registries = crate::pull::reference::RegistrySettings {
        insecure: crate::pull::policy::InsecureRegistries::listed(&config.insecure_registries),
        ..crate::pull::reference::RegistrySettings::from_env()
    };
    let responses = super::response_limits(&config);
    let daemon = super::Daemon::new(config, loader, catalog).with_snapshots(snapshots);
    let daemon = match crate::store::responses::ResponseTree::in_store(&store, responses) {
        Ok(tree) => daemon.with_responses(Arc::new(tree)),
        Err(error) => {
            tracing::warn!(%error, "stored responses are kept in memory only: the store's responses tree cannot be opened");
            daemon
        }
    };
    let admin = Arc::new(crate::pull::service::StoreAdmin::new(store, registries));
    daemon.with_admin(admin).run_blocking()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::testing::{GgufBuilder, TestValue};

    #[test]
    fn capabilities_come_from_the_models_facts_even_ones_recorded_before_they_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Store::open(&dir.path().join("home")).expect("open store"));
        let import = |file: &str, name: &str, builder: GgufBuilder| {
            let path = dir.path().join(file);
            builder.write_to(&path);
            store.import_file(&path, &ModelName::parse(name).expect("name")).expect("import")
        };
        import("chat.gguf", "chat:1m", GgufBuilder::llama_like());
        let encoder = GgufBuilder::llama_like()
            .kv("general.architecture", TestValue::Str("bert".into()))
            .kv("bert.pooling_type", TestValue::U32(1));
        let embedder = import("embed.gguf", "embed:1m", encoder);
        let catalog = StoreCatalog::new(Arc::clone(&store));
        let listed: HashMap<String, Vec<&str>> =
            catalog.list().expect("list").into_iter().map(|entry| (entry.name, entry.capabilities)).collect();
        assert_eq!(listed["chat:1m"], ["completion", "tools"]);
        assert_eq!(listed["embed:1m"], ["embedding"]);
        assert_eq!(catalog.describe("embed:1m").expect("describe").entry.capabilities, ["embedding"]);
        // A manifest recorded before facts said: the blob's header tells.
        let mut legacy = embedder.clone();
        legacy.facts.embedding = None;
        assert!(catalog.is_embedding(&legacy));
    }
}
