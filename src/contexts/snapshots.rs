//! Context snapshots (issue 11): a context's KV sequence state kept in the model store, so it
//! outlives the daemon. Taking one asks the model's worker for the sequence state and writes
//! it as a content-addressed blob with a manifest (see `store::kv_snapshots`); restoring reads
//! the blob back (its SHA-256 checked), refuses a model whose file differs from the one the
//! state was computed with, and makes a new context whose sequence is the saved state.
//!
//! Key types: [`SnapshotShelf`] (the store side, for the API), [`SnapshotError`].
//! Costs: a snapshot writes and hashes the state once (a few MB per thousand tokens for small
//! models); a restore reads and hashes it once. Store calls block: callers run them off the
//! async threads.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{random_hex, ContextContent, ContextRecord};
use crate::core::{ChatMessage, Role, ToolCall, ToolSpec};
use crate::error::{CoreError, ErrorCode};
pub use crate::store::SnapshotManifest;
use crate::store::{NewSnapshot, Store, StoreError};

/// A message as a snapshot stores it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredMessage {
    role: Role,
    content: String,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// A context's content as a snapshot stores it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum StoredContent {
    Chat {
        messages: Vec<StoredMessage>,
        tools: Vec<ToolSpec>,
    },
    Raw,
}

fn store_content(content: &ContextContent) -> serde_json::Value {
    let stored = match content {
        ContextContent::Chat { messages, tools } => StoredContent::Chat {
            messages: messages
                .iter()
                .map(|m| StoredMessage {
                    role: m.role,
                    content: m.content.clone(),
                    tool_calls: m.tool_calls.clone(),
                    name: m.name.clone(),
                    tool_call_id: m.tool_call_id.clone(),
                })
                .collect(),
            tools: tools.clone(),
        },
        ContextContent::Raw => StoredContent::Raw,
    };
    serde_json::to_value(stored).unwrap_or(serde_json::Value::Null)
}

/// The context content a snapshot recorded.
pub fn snapshot_content(manifest: &SnapshotManifest) -> Result<ContextContent, CoreError> {
    let stored: StoredContent = serde_json::from_value(manifest.content.clone()).map_err(|e| {
        CoreError::new(
            ErrorCode::SnapshotDamaged,
            format!(
                "snapshot {}: its recorded conversation cannot be read ({e}); nothing was restored \
                 (delete the snapshot and take it again)",
                manifest.id
            ),
        )
    })?;
    Ok(match stored {
        StoredContent::Chat { messages, tools } => ContextContent::Chat {
            messages: messages
                .into_iter()
                .map(|m| ChatMessage {
                    role: m.role,
                    content: m.content,
                    tool_calls: m.tool_calls,
                    name: m.name,
                    tool_call_id: m.tool_call_id,
                })
                .collect(),
            tools,
        },
        StoredContent::Raw => ContextContent::Raw,
    })
}

/// A store failure as the API answers it: a damaged snapshot (its manifest unreadable, its
/// blob missing or changed) is 409 `snapshot_damaged`, naming the damage; anything else is the
/// daemon's own trouble (500).
fn store_error(action: &str, error: StoreError) -> CoreError {
    match error {
        StoreError::Corrupt { .. } => {
            CoreError::new(ErrorCode::SnapshotDamaged, format!("could not {action}: {error}"))
        }
        other => CoreError::internal(format!("could not {action}: {other}")),
    }
}

fn not_found(id: &str) -> CoreError {
    CoreError::new(
        ErrorCode::ContextNotFound,
        format!("no snapshot {id:?}; POST /v1/contexts/{{id}}/snapshot takes one"),
    )
}

/// The snapshots in the model store.
pub struct SnapshotShelf {
    store: Arc<Store>,
}

impl SnapshotShelf {
    pub fn new(store: Arc<Store>) -> Self {
        SnapshotShelf { store }
    }

    /// Where parked contexts past the memory bound are written (see `contexts.rs`).
    pub fn parked_dir(&self) -> std::path::PathBuf {
        self.store.home().join("parked")
    }

    /// Writes `state` (the sequence state of `record`'s tokens on a model file of digest
    /// `model_digest`) to the store. The context is not touched whatever happens.
    pub fn put(
        &self,
        record: &ContextRecord,
        tokens: Vec<u32>,
        model_digest: &str,
        state: &[u8],
    ) -> Result<SnapshotManifest, CoreError> {
        let new = NewSnapshot {
            id: format!("snap_{}", random_hex(24)),
            context: record.id.clone(),
            model: record.model.clone(),
            model_digest: model_digest.to_string(),
            tokens,
            content: store_content(&record.body().content),
        };
        self.store
            .put_snapshot(new, state)
            .map_err(|e| store_error("write the snapshot", e))
    }

    /// The snapshot `id` (404 when there is none).
    pub fn get(&self, id: &str) -> Result<SnapshotManifest, CoreError> {
        self.store
            .snapshot(id)
            .map_err(|e| store_error("read the snapshot", e))?
            .ok_or_else(|| not_found(id))
    }

    pub fn list(&self) -> Result<Vec<SnapshotManifest>, CoreError> {
        self.store
            .snapshots()
            .map_err(|e| store_error("list the snapshots", e))
    }

    /// Deletes the snapshot `id` and its blob (unless something else names the blob).
    pub fn remove(&self, id: &str) -> Result<(), CoreError> {
        match self.store.remove_snapshot(id) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(not_found(id)),
            Err(error) => Err(store_error("delete the snapshot", error)),
        }
    }

    /// The state of `manifest`, for a model whose file has digest `model_digest`: 409 when the
    /// snapshot was taken on another file, and 409 `snapshot_damaged` naming the damage when its
    /// blob is missing or its SHA-256 does not match the manifest (the request is fine; the
    /// stored snapshot is not, until it is deleted and taken again).
    pub fn state_for(
        &self,
        manifest: &SnapshotManifest,
        model_digest: &str,
    ) -> Result<Vec<u8>, CoreError> {
        if manifest.model_digest != model_digest {
            let shown = |digest: &str| {
                if digest.is_empty() {
                    "none (a file outside the store)".to_string()
                } else {
                    digest.to_string()
                }
            };
            return Err(CoreError::new(
                ErrorCode::Conflict,
                format!(
                    "snapshot {} was taken on {} with digest {}, but the {} loaded now has digest \
                     {}; its KV state fits only the model file it came from",
                    manifest.id,
                    manifest.model,
                    shown(&manifest.model_digest),
                    manifest.model,
                    shown(model_digest)
                ),
            ));
        }
        self.store
            .read_snapshot_state(manifest)
            .map_err(|e| store_error("restore the snapshot", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_round_trips_through_a_snapshot_manifest() {
        let content = ContextContent::Chat {
            messages: vec![
                ChatMessage::new(Role::System, "be brief"),
                ChatMessage::new(Role::User, "hi"),
            ],
            tools: Vec::new(),
        };
        let manifest = SnapshotManifest {
            id: "snap_1".into(),
            context: "ctx_1".into(),
            model: "m".into(),
            model_digest: String::new(),
            digest: String::new(),
            bytes: 0,
            tokens: vec![],
            content: store_content(&content),
            created: 0,
        };
        assert_eq!(snapshot_content(&manifest).unwrap(), content);
    }

    #[test]
    fn another_model_file_is_refused_naming_both_digests() {
        let dir = tempfile::tempdir().unwrap();
        let shelf = SnapshotShelf::new(Arc::new(Store::open(dir.path()).unwrap()));
        let manifest = SnapshotManifest {
            id: "snap_2".into(),
            context: "ctx_1".into(),
            model: "m".into(),
            model_digest: "sha256:aaa".into(),
            digest: String::new(),
            bytes: 0,
            tokens: vec![],
            content: serde_json::Value::Null,
            created: 0,
        };
        let error = shelf.state_for(&manifest, "sha256:bbb").unwrap_err();
        assert_eq!(error.status(), 409);
        assert!(error.message.contains("sha256:aaa") && error.message.contains("sha256:bbb"));
    }
}
