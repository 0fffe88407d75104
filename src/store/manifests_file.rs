//! The manifests file: `<home>/manifests.json`, a read-only view of the store for other
//! processes.
//!
//! sled lets one process at a time open the database, so while `llamay serve` holds the store,
//! `llamay list` or `llamay run -m NAME` in another shell could not even read it. The process
//! holding the database therefore rewrites this file (temp file, fsync, rename, fsync of the
//! directory, so readers never see half of it and a crash never leaves an empty one) after
//! every change and at open, and a process that finds the database locked reads the manifests file
//! instead. It is a copy, never the source of truth: it can lag the database
//! only if its owner crashed between the two writes, until that store is next opened.
//! Cost: one small JSON file per change, O(models).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::{migrate, validate_manifest, Manifest, StoreError};

pub const MANIFESTS_FILE: &str = "manifests.json";
/// How the temporary files a write renames into place begin.
pub const TEMP_PREFIX: &str = ".manifests.json.tmp-";

#[derive(Serialize, Deserialize)]
struct ManifestsFile {
    schema_version: u64,
    manifests: Vec<Manifest>,
}

pub fn path(home: &Path) -> PathBuf {
    home.join(MANIFESTS_FILE)
}

/// Replaces the manifests file with `manifests`.
pub fn write(home: &Path, manifests: &[Manifest]) -> io::Result<()> {
    let file =
        ManifestsFile { schema_version: migrate::current_version(), manifests: manifests.to_vec() };
    let bytes = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let temp = home.join(format!("{TEMP_PREFIX}{}-{serial}", std::process::id()));
    let written = File::create(&temp)
        .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
        .and_then(|()| fs::rename(&temp, path(home)));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written?;
    File::open(home)?.sync_all()
}

/// The manifests in the manifests file; `Ok(None)` when there is none.
pub fn read(home: &Path) -> Result<Option<Vec<Manifest>>, StoreError> {
    let file = path(home);
    let bytes = match fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StoreError::Io { context: format!("read {}", file.display()), source: e })
        }
    };
    let corrupt = |reason: String| StoreError::Corrupt { key: MANIFESTS_FILE.into(), reason };
    let file: ManifestsFile = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let supported = migrate::current_version();
    if file.schema_version > supported {
        return Err(StoreError::NewerStore {
            path: home.to_path_buf(),
            found: file.schema_version,
            supported,
        });
    }
    for manifest in &file.manifests {
        validate_manifest(&manifest.name.key(), manifest)?;
    }
    Ok(Some(file.manifests))
}
