//! The model store's schema history: one module per version (`v0001_initial`, ...), each a
//! [`Migration`], listed oldest first in [`MIGRATIONS`], and the names of the sled trees and
//! keys they create. The store (`llamay::store::migrate`) runs them in order when it opens and
//! records the version reached; this crate only says what each version changes.
//!
//! Key types: [`Migration`], [`MIGRATIONS`]. Cost: none until a store opens; each migration
//! opens a tree or writes a key.

mod v0001_initial;
mod v0002_snapshots;
mod v0003_responses;

/// Tree of model manifests, keyed `name:tag` (created by version 1).
pub const MANIFESTS_TREE: &str = "manifests";
/// Tree of context snapshot manifests, keyed by snapshot id (created by version 2).
pub const SNAPSHOTS_TREE: &str = "snapshots";
/// Tree of stored `/v1/responses` answers, keyed by response id (created by version 3).
pub const RESPONSES_TREE: &str = "responses";
/// Key in the default tree of this store's daemon id (written by version 2).
pub const DAEMON_ID_KEY: &[u8] = b"daemon_id";

/// One step of the store's schema history.
pub trait Migration: Sync {
    /// The schema version the store has once this migration has run (1, 2, ...).
    fn version(&self) -> u64;
    /// One line saying what the migration changes, for logs and errors.
    fn description(&self) -> &'static str;
    /// Brings a store at `version() - 1` to `version()`. Must be safe to run twice.
    fn apply(&self, db: &sled::Db) -> sled::Result<()>;
}

/// Every migration, oldest first.
pub static MIGRATIONS: &[&dyn Migration] =
    &[&v0001_initial::Initial, &v0002_snapshots::Snapshots, &v0003_responses::Responses];
