//! The daemon's [`ModelAdmin`]: pulls, copies, deletes and creates models in the store, turning
//! store and pull errors into the API's error codes. The CLI without a daemon uses the same
//! type, so both paths behave alike.
//!
//! Key type: [`StoreAdmin`]. Cost: what the store and the pull cost; nothing of its own.

use std::path::Path;
use std::sync::Arc;

use super::reference::{PullSource, RegistrySettings};
use super::{pull, PullError};
use crate::core::{CreateModel, ModelAdmin, ProgressSink, PullProgress};
use crate::error::{CoreError, ErrorCode};
use crate::gguf::read_gguf_facts;
use crate::store::{BlobSource, ModelExtras, ModelName, Store, StoreError};

/// The store and the registry settings, as the API's [`ModelAdmin`].
pub struct StoreAdmin {
    store: Arc<Store>,
    settings: RegistrySettings,
}

impl StoreAdmin {
    pub fn new(store: Arc<Store>, settings: RegistrySettings) -> StoreAdmin {
        StoreAdmin { store, settings }
    }
}

/// The API's view of a pull failure.
pub fn pull_error(error: PullError) -> CoreError {
    let code = match &error {
        PullError::InvalidName { .. } | PullError::InsecureRefused { .. } => {
            ErrorCode::InvalidRequest
        }
        PullError::NotFound { .. } => ErrorCode::ModelNotFound,
        PullError::WouldReplace { .. } => ErrorCode::Conflict,
        PullError::DiskFull { .. } => ErrorCode::InsufficientStorage,
        PullError::Store(store) => return store_error(store),
        _ => ErrorCode::Internal,
    };
    CoreError::new(code, error.to_string())
}

/// The API's view of a store failure.
pub fn store_error(error: &StoreError) -> CoreError {
    let code = match error {
        StoreError::NotFound { .. } => ErrorCode::ModelNotFound,
        StoreError::InvalidName { .. } => ErrorCode::InvalidRequest,
        StoreError::DiskFull { .. } => ErrorCode::InsufficientStorage,
        _ => ErrorCode::Internal,
    };
    CoreError::new(code, error.to_string())
}

fn parse_name(text: &str, field: &str) -> Result<ModelName, CoreError> {
    ModelName::parse(text).map_err(|e| CoreError::from(e).with_param(field))
}

impl StoreAdmin {
    fn create_blocking(
        &self,
        request: CreateModel,
        progress: &mut dyn FnMut(PullProgress) -> bool,
    ) -> Result<(), CoreError> {
        let name = parse_name(&request.name, "model")?;
        let extras = ModelExtras {
            source: None,
            parameters: request.parameters,
            system: request.system,
            template: request.template,
            license: request.license,
        };
        let from = request.from.trim();
        if from.is_empty() {
            return Err(
                CoreError::invalid("`from` is required: a model name or a blob digest")
                    .with_param("from"),
            );
        }
        progress(PullProgress::status("reading model metadata"));
        let base = if let Some(hex) = from.strip_prefix("sha256:") {
            self.base_from_blob(hex, &name)?
        } else if let Some(installed) = ModelName::parse(from)
            .ok()
            .filter(|n| self.store.resolve(n).is_ok())
        {
            installed
        } else if from.starts_with("http://")
            || from.starts_with("https://")
            || from.contains('/') && !request.allow_paths
        {
            let report = pull(&self.store, from, &self.settings, progress).map_err(pull_error)?;
            report.manifest.name
        } else if request.allow_paths && Path::new(from).is_file() {
            progress(PullProgress::status("copying file"));
            self.store
                .import_file(Path::new(from), &name)
                .map_err(|e| store_error(&e))?
                .name
        } else {
            return Err(CoreError::new(
                ErrorCode::ModelNotFound,
                format!(
                    "`from` '{from}' is not an installed model{}",
                    if request.allow_paths {
                        " nor a GGUF file"
                    } else {
                        ""
                    }
                ),
            )
            .with_param("from"));
        };
        let manifest = self.store.resolve(&base).map_err(|e| store_error(&e))?;
        progress(PullProgress {
            status: format!("using existing layer {}", manifest.digest),
            digest: None,
            total: None,
            completed: None,
        });
        progress(PullProgress::status("writing manifest"));
        self.store
            .derive(&base, &name, extras)
            .map_err(|e| store_error(&e))?;
        progress(PullProgress::status("success"));
        Ok(())
    }

    /// A store name for the blob `hex`: a model already using it, else `name` registered for it.
    fn base_from_blob(&self, hex: &str, name: &ModelName) -> Result<ModelName, CoreError> {
        if let Some(manifest) = self
            .store
            .manifest_with_blob(hex)
            .map_err(|e| store_error(&e))?
        {
            return Ok(manifest.name);
        }
        let missing = || {
            CoreError::new(
                ErrorCode::ModelNotFound,
                format!("blob sha256:{hex} is not in the store"),
            )
            .with_param("from")
        };
        let path = self
            .store
            .blob_path_for_hex(hex)
            .filter(|p| p.is_file())
            .ok_or_else(missing)?;
        let size = std::fs::metadata(&path).map_err(|_| missing())?.len();
        let facts = read_gguf_facts(&path).map_err(|e| {
            CoreError::invalid(format!("blob sha256:{hex} is not a GGUF model: {}", e.kind))
        })?;
        self.store
            .register_download(
                BlobSource::Stored,
                hex,
                size,
                facts,
                name,
                ModelExtras::default(),
            )
            .map_err(|e| store_error(&e))?;
        Ok(name.clone())
    }
}

impl ModelAdmin for StoreAdmin {
    fn pull(&self, model: &str, progress: ProgressSink<'_>) -> Result<(), CoreError> {
        pull(&self.store, model, &self.settings, progress)
            .map(|_| ())
            .map_err(pull_error)
    }

    fn copy(&self, source: &str, destination: &str) -> Result<(), CoreError> {
        let from = parse_name(source, "source")?;
        let to = parse_name(destination, "destination")?;
        self.store
            .copy(&from, &to)
            .map(|_| ())
            .map_err(|e| store_error(&e))
    }

    fn delete(&self, model: &str) -> Result<(), CoreError> {
        let name = parse_name(model, "model")?;
        self.store.remove(&name).map_err(|e| store_error(&e))
    }

    fn create(&self, request: CreateModel, progress: ProgressSink<'_>) -> Result<(), CoreError> {
        self.create_blocking(request, progress)
    }

    fn local_name(&self, model: &str) -> Result<String, CoreError> {
        let source = PullSource::parse(model, &self.settings).map_err(pull_error)?;
        source
            .local_name()
            .map(|n| n.to_string())
            .map_err(pull_error)
    }
}
