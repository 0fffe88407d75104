//! Store schema version 1: the `manifests` tree.
//!
//! Layout after this migration: sled tree `manifests`, key `name:tag` (UTF-8), value the JSON
//! of a `Manifest` (name, `sha256:<hex>` digest, size, GGUF facts, added-at Unix seconds).
//! Blobs live outside sled as files `blobs/sha256-<hex>`. Opening a tree is idempotent, so
//! running this twice is harmless.

use crate::{Migration, MANIFESTS_TREE};

pub struct Initial;

impl Migration for Initial {
    fn version(&self) -> u64 {
        1
    }

    fn description(&self) -> &'static str {
        "create the manifests tree"
    }

    fn apply(&self, db: &sled::Db) -> sled::Result<()> {
        db.open_tree(MANIFESTS_TREE)?;
        Ok(())
    }
}
