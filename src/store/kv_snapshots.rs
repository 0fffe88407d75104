//! Context snapshots on disk (issue 11): a context's KV sequence state as a content-addressed
//! blob under `blobs/` (the same `sha256-<hex>` files, written the same way as models: partial
//! file, fsync, rename, fsync of the directory), and a JSON manifest per snapshot in the sled
//! tree `snapshots` (created by migration v0002), keyed by the snapshot id.
//!
//! The manifest carries what restoring needs besides the state: the model and the digest of
//! the model file the state was computed with, the token ids, and the context's conversation
//! (kept opaque here: the actors layer owns its shape). A blob is read back only after its
//! SHA-256 matches the manifest, so a damaged file is refused rather than handed to llama.cpp.
//!
//! Key types: [`SnapshotManifest`], [`NewSnapshot`]. Costs: one write and one hash of the
//! state (a few MB per thousand tokens for small models), one sled insert and flush; reading
//! hashes the blob once.

use std::fs;
use std::io;

use serde::{Deserialize, Serialize};

use super::{hash, is_sha256_hex, unix_now, Silent, Store, StoreError, BLOB_PREFIX, DIGEST_PREFIX};

/// Name of the sled tree holding snapshot manifests.
pub use llamay_migrations::SNAPSHOTS_TREE;

/// One stored snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotManifest {
    /// `snap_<hex>`, the key in the tree.
    pub id: String,
    /// The context it was taken from.
    pub context: String,
    pub model: String,
    /// Digest of the model file the state belongs to (`sha256:<hex>`; empty for a model served
    /// from a file outside the store).
    pub model_digest: String,
    /// `sha256:<hex>` of the state blob.
    pub digest: String,
    /// Size of the state blob.
    pub bytes: u64,
    /// The token ids whose KV state the blob holds, position 0 first.
    pub tokens: Vec<u32>,
    /// The context's conversation, as the actors layer wrote it.
    pub content: serde_json::Value,
    /// Unix seconds.
    pub created: u64,
}

impl SnapshotManifest {
    pub fn digest_hex(&self) -> &str {
        self.digest
            .strip_prefix(DIGEST_PREFIX)
            .unwrap_or(&self.digest)
    }
}

/// What a new snapshot is made of, before its blob exists.
pub struct NewSnapshot {
    pub id: String,
    pub context: String,
    pub model: String,
    pub model_digest: String,
    pub tokens: Vec<u32>,
    pub content: serde_json::Value,
}

/// Decodes a manifest and checks it belongs under `key` and names a blob inside `blobs/`.
pub(super) fn decode_snapshot(key: &str, raw: &[u8]) -> Result<SnapshotManifest, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: format!("snapshot {key}"),
        reason,
    };
    let manifest: SnapshotManifest =
        serde_json::from_slice(raw).map_err(|e| corrupt(e.to_string()))?;
    if manifest.id != key {
        return Err(corrupt(format!(
            "it is stored under '{key}' but names '{}'",
            manifest.id
        )));
    }
    if !manifest
        .digest
        .strip_prefix(DIGEST_PREFIX)
        .is_some_and(is_sha256_hex)
    {
        return Err(corrupt(format!(
            "digest '{}' is not sha256:<64 hex>",
            manifest.digest
        )));
    }
    Ok(manifest)
}

impl Store {
    fn snapshots_tree(&self) -> Result<sled::Tree, StoreError> {
        self.writable()?
            .db
            .open_tree(SNAPSHOTS_TREE)
            .map_err(StoreError::db("open the snapshots tree"))
    }

    /// Writes `state` as a blob and registers the snapshot. Nothing is registered when any
    /// step fails (a blob written before the failure is released again).
    pub fn put_snapshot(
        &self,
        new: NewSnapshot,
        state: &[u8],
    ) -> Result<SnapshotManifest, StoreError> {
        let tree = self.snapshots_tree()?;
        let origin = std::path::PathBuf::from(format!("the state of {}", new.context));
        let mut source = state;
        let partial = self.write_partial(&mut source, &origin, state.len() as u64, &Silent)?;
        let _guard = self
            .commit_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut partial = partial;
        let blob = self.blobs.join(format!("{BLOB_PREFIX}{}", partial.hex));
        fs::rename(&partial.path, &blob)
            .map_err(StoreError::io(format!("rename into {}", blob.display())))?;
        partial.keep = true;
        super::sync_dir(&self.blobs);
        let manifest = SnapshotManifest {
            id: new.id,
            context: new.context,
            model: new.model,
            model_digest: new.model_digest,
            digest: format!("{DIGEST_PREFIX}{}", partial.hex),
            bytes: partial.size,
            tokens: new.tokens,
            content: new.content,
            created: unix_now(),
        };
        let written = serde_json::to_vec(&manifest)
            .map_err(|e| StoreError::Corrupt {
                key: manifest.id.clone(),
                reason: e.to_string(),
            })
            .and_then(|bytes| {
                tree.insert(manifest.id.as_bytes(), bytes)
                    .map_err(StoreError::db("write a snapshot manifest"))
            })
            .and_then(|_| self.flush());
        if let Err(error) = written {
            let _ = tree.remove(manifest.id.as_bytes());
            let _ = self.release_blob(&manifest.digest);
            return Err(error);
        }
        Ok(manifest)
    }

    /// The snapshot `id`; `Ok(None)` when there is none.
    pub fn snapshot(&self, id: &str) -> Result<Option<SnapshotManifest>, StoreError> {
        let tree = self.snapshots_tree()?;
        match tree
            .get(id.as_bytes())
            .map_err(StoreError::db("read a snapshot manifest"))?
        {
            Some(raw) => decode_snapshot(id, &raw).map(Some),
            None => Ok(None),
        }
    }

    /// Every readable snapshot, oldest first.
    pub fn snapshots(&self) -> Result<Vec<SnapshotManifest>, StoreError> {
        let tree = self.snapshots_tree()?;
        let mut all = Vec::new();
        for entry in tree.iter() {
            let (key, value) = entry.map_err(StoreError::db("read the snapshots"))?;
            if let Ok(manifest) = decode_snapshot(&String::from_utf8_lossy(&key), &value) {
                all.push(manifest);
            }
        }
        all.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        Ok(all)
    }

    /// Unregisters snapshot `id` and deletes its blob when nothing else names it. `Ok(None)`
    /// when there was no such snapshot.
    pub fn remove_snapshot(&self, id: &str) -> Result<Option<SnapshotManifest>, StoreError> {
        let tree = self.snapshots_tree()?;
        let _guard = self
            .commit_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(raw) = tree
            .remove(id.as_bytes())
            .map_err(StoreError::db("remove a snapshot manifest"))?
        else {
            return Ok(None);
        };
        self.flush()?;
        let manifest = decode_snapshot(id, &raw).ok();
        if let Some(manifest) = &manifest {
            self.release_blob(&manifest.digest)?;
        }
        Ok(manifest)
    }

    /// The state blob of `manifest`, after checking its size and SHA-256 against the manifest.
    pub fn read_snapshot_state(&self, manifest: &SnapshotManifest) -> Result<Vec<u8>, StoreError> {
        let hex = manifest.digest_hex();
        if !is_sha256_hex(hex) {
            return Err(StoreError::Corrupt {
                key: format!("snapshot {}", manifest.id),
                reason: format!("digest '{}' is not sha256:<64 hex>", manifest.digest),
            });
        }
        let path = self.blobs.join(format!("{BLOB_PREFIX}{hex}"));
        let bytes = fs::read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StoreError::Corrupt {
                key: format!("snapshot {}", manifest.id),
                reason: format!("its state blob {} is missing", path.display()),
            },
            _ => StoreError::Io {
                context: format!("read {}", path.display()),
                source: e,
            },
        })?;
        let (found, size) = hash::hash_copy(&mut bytes.as_slice(), &mut io::sink(), "", 0, &Silent)
            .map_err(|_| StoreError::Corrupt {
                key: format!("snapshot {}", manifest.id),
                reason: "its state blob could not be hashed".into(),
            })?;
        if found != hex || size != manifest.bytes {
            return Err(StoreError::Corrupt {
                key: format!("snapshot {}", manifest.id),
                reason: format!(
                    "its state blob {} has sha256:{found} ({size} bytes) where the manifest \
                     says {} ({} bytes); the file was changed or damaged on disk, nothing was \
                     restored (delete the snapshot and take it again)",
                    path.display(),
                    manifest.digest,
                    manifest.bytes
                ),
            });
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_snapshot(id: &str) -> NewSnapshot {
        NewSnapshot {
            id: id.into(),
            context: "ctx_x".into(),
            model: "m:latest".into(),
            model_digest: format!("{DIGEST_PREFIX}{}", "a".repeat(64)),
            tokens: vec![1, 2, 3],
            content: serde_json::json!({"raw": true}),
        }
    }

    #[test]
    fn a_snapshot_survives_reopening_and_its_blob_goes_with_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = vec![9u8; 5000];
        let id = {
            let store = Store::open(dir.path()).expect("open");
            let made = store
                .put_snapshot(new_snapshot("snap_1"), &state)
                .expect("put");
            assert_eq!(made.bytes, 5000);
            made.id
        };
        let store = Store::open(dir.path()).expect("reopen (sweeps orphans)");
        let found = store.snapshot(&id).expect("read").expect("kept");
        assert_eq!(found.tokens, vec![1, 2, 3]);
        assert_eq!(store.read_snapshot_state(&found).expect("state"), state);
        assert_eq!(store.snapshots().expect("list").len(), 1);
        let blob = store
            .blobs
            .join(format!("{BLOB_PREFIX}{}", found.digest_hex()));
        assert!(blob.exists());
        assert!(store.remove_snapshot(&id).expect("remove").is_some());
        assert!(!blob.exists(), "an unreferenced state blob is deleted");
        assert!(store.snapshot(&id).expect("read").is_none());
        assert!(store.remove_snapshot(&id).expect("remove").is_none());
    }

    #[test]
    fn a_damaged_state_blob_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let made = store
            .put_snapshot(new_snapshot("snap_2"), &[1, 2, 3, 4])
            .expect("put");
        let blob = store
            .blobs
            .join(format!("{BLOB_PREFIX}{}", made.digest_hex()));
        fs::write(&blob, [1, 2, 3, 5]).expect("damage");
        let error = store
            .read_snapshot_state(&made)
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("damaged") && error.contains(&made.digest),
            "{error}"
        );
    }

    #[test]
    fn doctor_counts_state_blobs_as_referenced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        store
            .put_snapshot(new_snapshot("snap_3"), &[7; 100])
            .expect("put");
        let report = store.check(&Silent).expect("check");
        assert!(report.is_consistent(), "{:?}", report.findings);
        assert_eq!(report.entries_by_kind.get("snapshot"), Some(&1));
    }
}
