//! Store schema migrations: the history is the `llamay-migrations` crate in `migrations/` (one
//! module per version, each a [`Migration`]); this module applies it in order when the store opens.
//!
//! The store's schema version is a big-endian `u64` under [`SCHEMA_VERSION_KEY`] in sled's
//! default tree; a fresh store is version 0. [`run`] applies every migration whose version is
//! above the stored one, writing the new version and flushing after each, and refuses a store
//! whose version is above the newest migration this build knows ([`StoreError::NewerStore`]).
//! A migration interrupted before its version is written runs again at the next open, so each
//! must be safe to repeat. Cost: one key read per open when the store is current.

use std::path::Path;

use super::StoreError;

pub use llamay_migrations::{Migration, MIGRATIONS};

/// Key of the schema version in sled's default tree.
pub const SCHEMA_VERSION_KEY: &[u8] = b"schema_version";

/// The schema version this build writes.
pub fn current_version() -> u64 {
    MIGRATIONS.last().map_or(0, |m| m.version())
}

/// The version recorded in `db` (0 for a store no migration has touched).
pub fn stored_version(db: &sled::Db) -> Result<u64, StoreError> {
    let Some(raw) =
        db.get(SCHEMA_VERSION_KEY).map_err(StoreError::db("read the schema version"))?
    else {
        return Ok(0);
    };
    let bytes: [u8; 8] = raw.as_ref().try_into().map_err(|_| StoreError::Corrupt {
        key: "schema_version".into(),
        reason: format!("{} bytes where 8 were expected", raw.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

pub fn write_version(db: &sled::Db, version: u64) -> Result<(), StoreError> {
    db.insert(SCHEMA_VERSION_KEY, &version.to_be_bytes())
        .map_err(StoreError::db("write the schema version"))?;
    db.flush().map_err(StoreError::db("flush the schema version"))?;
    Ok(())
}

/// Applies the migrations of `list` (oldest first, numbered 1, 2, ... without gaps) that `db`
/// has not had yet. Returns the versions applied. `home` is only used in error messages.
pub fn run(db: &sled::Db, list: &[&dyn Migration], home: &Path) -> Result<Vec<u64>, StoreError> {
    for (index, migration) in list.iter().enumerate() {
        if migration.version() != index as u64 + 1 {
            return Err(StoreError::Corrupt {
                key: "migrations".into(),
                reason: format!(
                    "migration #{index} ({}) has version {}, expected {}",
                    migration.description(),
                    migration.version(),
                    index + 1
                ),
            });
        }
    }
    let supported = list.last().map_or(0, |m| m.version());
    let found = stored_version(db)?;
    if found > supported {
        return Err(StoreError::NewerStore { path: home.to_path_buf(), found, supported });
    }
    let mut applied = Vec::new();
    for migration in list.iter().filter(|m| m.version() > found) {
        migration.apply(db).map_err(|source| StoreError::Db {
            context: format!(
                "apply store migration {} ({})",
                migration.version(),
                migration.description()
            ),
            source,
        })?;
        write_version(db, migration.version())?;
        applied.push(migration.version());
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends its version to a `log` tree, so tests can see which ran and in what order.
    struct Logging(u64);

    impl Migration for Logging {
        fn version(&self) -> u64 {
            self.0
        }
        fn description(&self) -> &'static str {
            "test step"
        }
        fn apply(&self, db: &sled::Db) -> sled::Result<()> {
            let log = db.open_tree("log")?;
            let next = log.len() as u64;
            log.insert(next.to_be_bytes(), &self.0.to_be_bytes())?;
            Ok(())
        }
    }

    fn log_of(db: &sled::Db) -> Vec<u64> {
        let log = db.open_tree("log").expect("tree");
        log.iter()
            .values()
            .map(|v| u64::from_be_bytes(v.expect("value").as_ref().try_into().expect("8 bytes")))
            .collect()
    }

    fn temp_db() -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path().join("db")).expect("open sled");
        (dir, db)
    }

    #[test]
    fn migrations_apply_in_order_once() {
        let (dir, db) = temp_db();
        let steps: [&dyn Migration; 3] = [&Logging(1), &Logging(2), &Logging(3)];
        assert_eq!(run(&db, &steps[..1], dir.path()).expect("run"), vec![1]);
        assert_eq!(stored_version(&db).expect("version"), 1);
        // A newer build with two more migrations applies only those, in order.
        assert_eq!(run(&db, &steps, dir.path()).expect("run"), vec![2, 3]);
        assert_eq!(run(&db, &steps, dir.path()).expect("run"), Vec::<u64>::new());
        assert_eq!(log_of(&db), vec![1, 2, 3]);
        assert_eq!(stored_version(&db).expect("version"), 3);
    }

    #[test]
    fn a_newer_store_is_refused_and_left_alone() {
        let (dir, db) = temp_db();
        write_version(&db, 7).expect("stamp");
        let steps: [&dyn Migration; 2] = [&Logging(1), &Logging(2)];
        match run(&db, &steps, dir.path()) {
            Err(StoreError::NewerStore { found: 7, supported: 2, .. }) => {}
            other => panic!("expected NewerStore, got {other:?}"),
        }
        assert!(log_of(&db).is_empty());
        assert_eq!(stored_version(&db).expect("version"), 7);
    }

    #[test]
    fn a_list_with_gaps_or_disorder_is_rejected_before_anything_runs() {
        let (dir, db) = temp_db();
        let gap: [&dyn Migration; 2] = [&Logging(1), &Logging(3)];
        assert!(matches!(run(&db, &gap, dir.path()), Err(StoreError::Corrupt { .. })));
        let swapped: [&dyn Migration; 2] = [&Logging(2), &Logging(1)];
        assert!(matches!(run(&db, &swapped, dir.path()), Err(StoreError::Corrupt { .. })));
        assert!(log_of(&db).is_empty());
        assert_eq!(stored_version(&db).expect("version"), 0);
    }

    #[test]
    fn the_shipped_migrations_are_numbered_from_one() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version(), index as u64 + 1, "{}", migration.description());
        }
        assert_eq!(current_version(), MIGRATIONS.len() as u64);
    }

    #[test]
    fn a_corrupt_version_key_is_reported() {
        let (_dir, db) = temp_db();
        db.insert(SCHEMA_VERSION_KEY, b"xyz".as_ref()).expect("insert");
        assert!(matches!(stored_version(&db), Err(StoreError::Corrupt { .. })));
    }
}
