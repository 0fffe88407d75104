//! Finding and loading models for the model actor: [`StoreLoader`] (the daemon's
//! [`ModelLoader`]: a name, never a path a request gives, to a store blob or an operator's
//! `serve -m` file), the command line's [`locate_model`] (a name or a path), and the loaders
//! that start a model's worker ([`load_model`], [`load_any_model`]), plus the vocabulary lookup
//! the mask benchmarks use. Cost: reading a GGUF header to locate; loading maps the weights.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::messages::{LoadedModel, ModelLoader};
use super::{LlamaModelHandle, WorkerSettings};
use crate::core::{ModelInfo, ModelName};
use crate::error::CoreError;
use crate::llm::offload::{EstimateParams, LayerPlacement, MemoryEstimate, ModelShape};
use crate::llm::Model;

/// Loads models by name, never by path: from the store, or from the GGUF files the operator
/// registered under names at start-up (`serve -m PATH`). A name is all a request can give, so
/// no request can make the daemon open a file of its choosing.
pub struct StoreLoader {
    store: Arc<crate::store::Store>,
    settings: WorkerSettings,
    files: HashMap<ModelName, PathBuf>,
}

impl StoreLoader {
    pub fn new(store: Arc<crate::store::Store>, settings: WorkerSettings) -> Self {
        Self { store, settings, files: HashMap::new() }
    }

    /// Serves the file at `path` under `name`, ahead of a store model of the same name.
    pub fn with_file(mut self, name: ModelName, path: PathBuf) -> Self {
        self.files.insert(name, path);
        self
    }

    /// The file a name loads and its facts, without loading it.
    pub fn locate(&self, name: &str) -> Result<(PathBuf, ModelInfo), CoreError> {
        let name = ModelName::parse(name)?;
        match self.files.get(&name) {
            Some(path) => locate_file(path, &name.to_string()),
            None => locate_stored(&name, &self.store),
        }
    }

    pub fn settings(&self) -> &WorkerSettings {
        &self.settings
    }
}

/// Resolves `reference` (a store name, or a path to a GGUF file) to a file and its facts.
/// A store is needed only for names. For the command line only: the daemon resolves names
/// alone ([`StoreLoader`]).
pub fn locate_model(reference: &str, store: Option<&crate::store::Store>) -> Result<(PathBuf, ModelInfo), CoreError> {
    match crate::store::ModelRef::parse(reference).map_err(|e| CoreError::bad_request(e.to_string()))? {
        crate::store::ModelRef::Path(path) => locate_file(&path, &path.display().to_string()),
        crate::store::ModelRef::Name(name) => {
            let store = store.ok_or_else(|| CoreError::internal("no model store is open"))?;
            locate_stored(&name, store)
        }
    }
}

/// A GGUF file's facts, reported under `name`.
fn locate_file(path: &Path, name: &str) -> Result<(PathBuf, ModelInfo), CoreError> {
    let facts = crate::gguf::read_gguf_facts(path).map_err(|e| CoreError::bad_request(e.to_string()))?;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok((path.to_path_buf(), info_from_facts(name, &facts, size, String::new())))
}

/// The store's blob for `name` and its facts.
fn locate_stored(name: &ModelName, store: &crate::store::Store) -> Result<(PathBuf, ModelInfo), CoreError> {
    let manifest = store.resolve(name).map_err(|_| CoreError::model_not_found(&name.to_string()))?;
    let path = store.blob_path(&manifest);
    Ok((path, info_from_facts(&name.to_string(), &manifest.facts, manifest.size, manifest.digest.clone())))
}

/// The vocabulary named by `reference`: a `.json` file written by `Vocabulary::to_json`, or a
/// model (store name or GGUF path) loaded to read it. Benchmarks take either, so they can run
/// on the store's models or on a saved vocabulary without a model.
pub fn load_vocabulary(reference: &str) -> Result<crate::llm::Vocabulary, String> {
    if reference.ends_with(".json") {
        let text = std::fs::read_to_string(reference).map_err(|e| format!("{reference}: {e}"))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{reference}: {e}"))?;
        return crate::llm::Vocabulary::from_json(&value)
            .ok_or_else(|| format!("{reference}: not a {{\"tokens\": [...], \"eog\": [...]}} vocabulary"));
    }
    let store = crate::store::Store::open(&crate::store::Store::default_home()).map_err(|e| e.to_string())?;
    let (path, _) = locate_model(reference, Some(&store)).map_err(|e| e.to_string())?;
    let model = Model::load(&path).map_err(|e| e.to_string())?;
    Ok(model.vocabulary().as_ref().clone())
}

fn info_from_facts(name: &str, facts: &crate::gguf::GgufFacts, size: u64, digest: String) -> ModelInfo {
    ModelInfo {
        name: name.to_string(),
        architecture: facts.architecture.clone(),
        parameter_count: facts.parameter_count,
        quantization: facts.quantization.clone(),
        context_length: 0,
        trained_context_length: facts.context_length.unwrap_or(0) as u32,
        size_bytes: size,
        digest,
        parallel: 0,
    }
}

/// Loads the file at `path` and starts its worker.
pub fn load_model(path: &Path, info: ModelInfo, settings: &WorkerSettings) -> Result<LlamaModelHandle, CoreError> {
    let model = Model::load(path).map_err(|e| CoreError::bad_request(e.to_string()))?;
    LlamaModelHandle::start(Arc::new(model), info, settings)
}

/// Loads the file at `path` and starts what it is made for: an embedding thread for an
/// encoder (a pooling type in its GGUF), the generation worker for a chat model.
pub fn load_any_model(path: &Path, info: ModelInfo, settings: &WorkerSettings) -> Result<Arc<dyn LoadedModel>, CoreError> {
    load_any_model_placed(path, info, settings, LayerPlacement::LlamaDefault)
}

/// [`load_any_model`] with the model's layers where `placement` says.
fn load_any_model_placed(
    path: &Path,
    info: ModelInfo,
    settings: &WorkerSettings,
    placement: LayerPlacement,
) -> Result<Arc<dyn LoadedModel>, CoreError> {
    let model = Model::load_placed(path, placement).map_err(|e| CoreError::bad_request(e.to_string()))?;
    if model.is_embedding_model() {
        let params = embedder_params(model.context_train(), settings);
        return Ok(Arc::new(super::super::embedding_model::EmbeddingModelHandle::start(Arc::new(model), info, params)?));
    }
    Ok(Arc::new(LlamaModelHandle::start(Arc::new(model), info, settings)?))
}

/// The embedding context of a model trained on `context_train` tokens.
fn embedder_params(context_train: u32, settings: &WorkerSettings) -> crate::llm::embed::EmbedderParams {
    // A pass attends over all its tokens at once (a mask keeps inputs apart), so its cost
    // per token grows with its size: passes no larger than one whole input need be.
    crate::llm::embed::EmbedderParams {
        threads: settings.context.threads,
        batch_tokens: context_train.clamp(512, 2048),
        ..crate::llm::embed::EmbedderParams::default()
    }
}

impl ModelLoader for StoreLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        let (path, info) = self.locate(name)?;
        load_any_model(&path, info, &self.settings)
    }

    fn estimate(&self, name: &str) -> Result<Option<MemoryEstimate>, CoreError> {
        let (path, _) = self.locate(name)?;
        let shape = ModelShape::read(&path).map_err(|reason| CoreError::bad_request(format!("{}: {reason}", path.display())))?;
        let params = if shape.embedding {
            let embedder = embedder_params(u32::try_from(shape.context_train).unwrap_or(u32::MAX), &self.settings);
            EstimateParams {
                n_ctx: embedder.batch_tokens,
                sequences: embedder.sequences,
                ubatch: embedder.batch_tokens,
                kv_type: crate::llm::KvType::F16,
                flash_attention: true,
            }
        } else {
            EstimateParams::for_context(&self.settings.context)
        };
        Ok(Some(MemoryEstimate::new(&shape, &params)))
    }

    fn load_placed(&self, name: &str, placement: LayerPlacement) -> Result<Arc<dyn LoadedModel>, CoreError> {
        let (path, info) = self.locate(name)?;
        load_any_model_placed(&path, info, &self.settings, placement)
    }

    /// An operator's file, or a store entry: one lookup, no file read.
    fn check_installed(&self, name: &str) -> Result<(), CoreError> {
        let name = ModelName::parse(name)?;
        if self.files.contains_key(&name) {
            return Ok(());
        }
        self.store
            .resolve(&name)
            .map(drop)
            .map_err(|_| CoreError::model_not_found(&name.to_string()))
    }
}
