//! Store schema version 2: the `snapshots` tree (context snapshots, issue 11) and the daemon id.
//!
//! Layout after this migration: sled tree `snapshots`, key the snapshot id (`snap_<hex>`),
//! value the JSON of a `SnapshotManifest` (context, model, model digest, `sha256:<hex>` of the
//! state blob, its size, the token ids, the conversation, created-at Unix seconds). State blobs
//! are ordinary `blobs/sha256-<hex>` files. The default tree gains `daemon_id`: twelve hex
//! digits drawn once, which prefix this store's context ids so replicas behind one proxy can
//! route a context to its daemon. Opening a tree is idempotent and the id is only written when
//! absent, so running this twice is harmless.

use crate::{Migration, DAEMON_ID_KEY, SNAPSHOTS_TREE};

pub struct Snapshots;

impl Migration for Snapshots {
    fn version(&self) -> u64 {
        2
    }

    fn description(&self) -> &'static str {
        "create the snapshots tree and draw the daemon id"
    }

    fn apply(&self, db: &sled::Db) -> sled::Result<()> {
        db.open_tree(SNAPSHOTS_TREE)?;
        if db.get(DAEMON_ID_KEY)?.is_none() {
            let id: u64 = rand::random::<u64>() & 0xffff_ffff_ffff;
            db.insert(DAEMON_ID_KEY, format!("{id:012x}").as_bytes())?;
        }
        Ok(())
    }
}
