//! Model files for daemons that serve a store model by path from a store of their own (a
//! temporary `LLAMAY_HOME`), so a test never holds the shared store. It reads the store through
//! llamay's library, which the test-support crate does not depend on.
//!
//! Key item: [`link_model_file`]. Cost: a hard link (a copy where the directories are on
//! different file systems).

use std::path::{Path, PathBuf};

/// The store model `reference`'s file (from the default store, where scripts/setup imports
/// the test models), linked (or copied) into `dir` as `file_name`.
pub fn link_model_file(reference: &str, dir: &Path, file_name: &str) -> PathBuf {
    let store = llamay::store::Store::open(&llamay::store::Store::default_home()).expect("store");
    let (path, _) = llamay::actors::model::locate_model(reference, Some(&store))
        .unwrap_or_else(|e| panic!("{reference} (scripts/setup): {e}"));
    let target = dir.join(file_name);
    if std::fs::hard_link(&path, &target).is_err() {
        std::fs::copy(&path, &target).expect("copy the model");
    }
    target
}
