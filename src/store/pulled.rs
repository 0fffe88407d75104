//! What a pulled or created model carries beside its GGUF blob, and how a verified download
//! enters the store.
//!
//! Key types: [`ModelExtras`] (the registry layers that are not the model: default options from
//! the params layer, the system prompt, the Ollama Go template, kept to be shown, not executed,
//! the license, and where the model came from). They live inside the model's [`Manifest`], so
//! `cp`, `rm` and the read-only snapshot carry them with no extra tree, and an older manifest
//! without them reads as empty extras (no migration needed).
//!
//! [`Store::register_download`] moves a verified file into `blobs/` and writes the manifest in
//! one sled insert: until then nothing shows in `list`. Pull leftovers live under
//! [`Store::pull_dir`] (`tmp/pulls/`), which the open-time sweep does not touch, so an
//! interrupted pull can resume; `llamay prune` and the daemon's start-up delete the stale ones.
//!
//! Costs: one rename and one manifest write per registration; nothing when reading.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    is_sha256_hex, sync_dir, unix_now, Manifest, ModelName, Store, StoreError, BLOB_PREFIX,
    DIGEST_PREFIX,
};
use crate::gguf::GgufFacts;

/// The parts of a model that are not its weights.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelExtras {
    /// Where it was pulled from (`registry.ollama.ai/library/smollm2:135m`, a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Default options (`temperature`, `stop`, `num_ctx`...), Ollama's params layer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Default system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Ollama's Go template, shown by `show`; prompts are rendered by the GGUF's own template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub license: Vec<String>,
}

impl ModelExtras {
    pub fn is_empty(&self) -> bool {
        self == &ModelExtras::default()
    }

    /// `self` with every field `other` sets replaced (parameters merged key by key).
    pub fn overlaid(mut self, other: ModelExtras) -> ModelExtras {
        if other.source.is_some() {
            self.source = other.source;
        }
        self.parameters.extend(other.parameters);
        if other.system.is_some() {
            self.system = other.system;
        }
        if other.template.is_some() {
            self.template = other.template;
        }
        if !other.license.is_empty() {
            self.license = other.license;
        }
        self
    }
}

/// The blob a registration points at.
pub enum BlobSource<'a> {
    /// A verified file (in the pull directory) to move into `blobs/`.
    File(&'a Path),
    /// A blob the store already has.
    Stored,
}

impl Store {
    /// Where pulls keep partial downloads between attempts.
    pub fn pull_dir(&self) -> PathBuf {
        self.home.join("tmp").join("pulls")
    }

    /// Where the blob of `hex` lives (whether or not it exists).
    pub fn blob_path_for_hex(&self, hex: &str) -> Option<PathBuf> {
        is_sha256_hex(hex).then(|| self.blobs.join(format!("{BLOB_PREFIX}{hex}")))
    }

    /// True when the blob of `hex` is in the store with `size` bytes.
    pub fn has_blob(&self, hex: &str, size: u64) -> bool {
        self.blob_path_for_hex(hex)
            .and_then(|path| fs::metadata(path).ok())
            .is_some_and(|m| m.is_file() && m.len() == size)
    }

    /// Registers `name` for the blob `hex` (moving `source` into `blobs/` unless the store
    /// has it), with `facts` and `extras`, replacing what `name` pointed at.
    pub fn register_download(
        &self,
        source: BlobSource<'_>,
        hex: &str,
        size: u64,
        facts: GgufFacts,
        name: &ModelName,
        extras: ModelExtras,
    ) -> Result<Manifest, StoreError> {
        self.writable()?;
        let blob = self
            .blob_path_for_hex(hex)
            .ok_or_else(|| StoreError::Corrupt {
                key: name.key(),
                reason: format!("digest '{hex}' is not 64 hex digits"),
            })?;
        let _guard = self
            .commit_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut moved = false;
        if !self.has_blob(hex, size) {
            let BlobSource::File(file) = source else {
                return Err(StoreError::MissingFile { path: blob });
            };
            fs::rename(file, &blob).map_err(StoreError::io(format!(
                "move the download into {}",
                blob.display()
            )))?;
            sync_dir(&self.blobs);
            moved = true;
        }
        let manifest = Manifest {
            name: name.clone(),
            digest: format!("{DIGEST_PREFIX}{hex}"),
            size,
            facts,
            added_at: unix_now(),
            extras,
        };
        if let Err(error) = self.put_manifest(&manifest) {
            if moved {
                let _ = self.release_blob(&manifest.digest);
            }
            return Err(error);
        }
        Ok(manifest)
    }

    /// Registers `to` as `from`'s blob with `from`'s extras overlaid by `extras` (what
    /// `create` does when it starts from a model in the store).
    pub fn derive(
        &self,
        from: &ModelName,
        to: &ModelName,
        extras: ModelExtras,
    ) -> Result<Manifest, StoreError> {
        self.writable()?;
        let _guard = self
            .commit_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let base = self.resolve(from)?;
        if !self.blob_path(&base).is_file() {
            return Err(StoreError::Corrupt {
                key: from.key(),
                reason: format!("its blob {} is missing", self.blob_path(&base).display()),
            });
        }
        let derived = Manifest {
            name: to.clone(),
            added_at: unix_now(),
            extras: base.extras.clone().overlaid(extras),
            ..base
        };
        self.put_manifest(&derived)?;
        Ok(derived)
    }

    /// The manifest of the blob `hex`, from any model using it (for `create` from a digest).
    pub fn manifest_with_blob(&self, hex: &str) -> Result<Option<Manifest>, StoreError> {
        Ok(self.list()?.into_iter().find(|m| m.digest_hex() == hex))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_overlay_field_by_field() {
        let mut base = ModelExtras {
            system: Some("a".into()),
            ..Default::default()
        };
        base.parameters.insert("temperature".into(), 0.5.into());
        base.parameters
            .insert("stop".into(), serde_json::json!(["x"]));
        let mut over = ModelExtras {
            template: Some("t".into()),
            ..Default::default()
        };
        over.parameters.insert("temperature".into(), 0.1.into());
        let merged = base.overlaid(over);
        assert_eq!(merged.system.as_deref(), Some("a"));
        assert_eq!(merged.template.as_deref(), Some("t"));
        assert_eq!(merged.parameters["temperature"], serde_json::json!(0.1));
        assert_eq!(merged.parameters["stop"], serde_json::json!(["x"]));
    }

    #[test]
    fn manifests_without_extras_still_read() {
        let old = r#"{"name":{"name":"m","tag":"latest"},"digest":"sha256:00","size":1,
            "facts":{"architecture":"llama","parameter_count":1,"quantization":"F16",
            "context_length":null,"has_chat_template":false,"chat_template":null,"name":null},
            "added_at":0}"#;
        let manifest: Manifest = serde_json::from_str(old).unwrap();
        assert!(manifest.extras.is_empty());
        let written = serde_json::to_string(&manifest).unwrap();
        assert!(!written.contains("extras"), "{written}");
    }
}
