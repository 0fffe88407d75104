//! The model store: content-addressed GGUF blobs plus sled manifests mapping `name:tag` to them.
//!
//! Layout under the store's home (`$LLAMAY_HOME`, else `~/.llamay`):
//! `blobs/sha256-<hex>` (the model files, named by their SHA-256), `db/` (sled: the
//! `manifests` tree keyed by `name:tag`, the `snapshots` and `responses` trees (see
//! `kv_snapshots.rs`, [`responses`]), and the schema version, see [`migrate`]) and
//! `manifests.json` (a copy of the manifests for other processes, see `manifests_file.rs`).
//!
//! Key types: [`Store`], [`Manifest`], [`ModelName`], [`ModelRef`], [`StoreError`].
//!
//! Atomicity: an import hashes while copying into a `.partial-*` file, fsyncs it, renames it
//! to its digest name and fsyncs `blobs/`; only then is the manifest written and sled flushed,
//! so a crash at any step leaves either nothing registered or a manifest whose blob is durable
//! with the bytes its name says. A removal unregisters first and deletes the blob after the
//! flush. What a crash can leave (a partial file, a blob no entry names, a manifests-file temp file,
//! a stale manifests file) is swept and rewritten at the next open; `doctor` (see `doctor.rs`)
//! checks all of it without changing anything, and `refs.rs` says which entries own blobs.
//! sled holds an exclusive lock on `db/`, so one process at a time has the store open for
//! writing; within that process, commits, removals and copies are serialized by a mutex so a
//! blob is never deleted while another manifest is being pointed at it. Other processes open the
//! store read-only from a manifests file the owner keeps (see `manifests_file.rs`): they can resolve and list
//! models, and get [`StoreError::Locked`] if they try to change anything.
//!
//! Costs: import reads the source once (hash + copy, 1 MiB buffer) plus the GGUF header twice;
//! resolve is one sled lookup (one small file read when read-only); list, remove, copy and
//! open scan the manifests and rewrite the manifests file (both a few hundred bytes per model).

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::gguf::{read_gguf_facts, GgufError, GgufErrorKind, GgufFacts};

mod doctor;
mod hash;
mod kv_snapshots;
pub mod migrate;
mod name;
mod probe;
mod pulled;
pub mod refs;
pub mod responses;
mod manifests_file;
mod table;

pub use doctor::{CheckReport, Finding, RepairAction, RepairReport};
pub use hash::{Progress, Silent};
pub use kv_snapshots::{NewSnapshot, SnapshotManifest, SNAPSHOTS_TREE};
pub use name::{InvalidModelName, ModelName, ModelRef, DEFAULT_TAG, MAX_PART_LEN};
use probe::{probe_is_leftover, probe_writable, PROBE_PREFIX};
pub use pulled::{BlobSource, ModelExtras};
pub use table::{human_age, human_size, render_list_table, UnixSeconds};

/// Name of the sled tree holding manifests.
pub use llamay_migrations::MANIFESTS_TREE;
/// Key, in sled's default tree, of the id this store's daemon puts in its context ids.
pub use llamay_migrations::DAEMON_ID_KEY;
/// Environment variable overriding the store's home.
pub use crate::environment::HOME_ENV;
const BLOB_PREFIX: &str = "sha256-";
const DIGEST_PREFIX: &str = "sha256:";
const PARTIAL_PREFIX: &str = ".partial-";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("model '{name}' is not in the store (`llamay list` shows what is)")]
    NotFound { name: String },
    #[error("invalid model name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("{} does not exist", path.display())]
    MissingFile { path: PathBuf },
    #[error("{} is not a usable GGUF model: {reason}", path.display())]
    NotGguf { path: PathBuf, reason: String },
    #[error(
        "the model store at {} is not writable: {source} (set {HOME_ENV} to a writable directory)",
        path.display()
    )]
    NotWritable { path: PathBuf, source: io::Error },
    #[error(
        "the model store at {} was written by a newer llamay (schema version {found}; this build \
         supports up to {supported}); upgrade llamay or point {HOME_ENV} at another directory",
        path.display()
    )]
    NewerStore { path: PathBuf, found: u64, supported: u64 },
    #[error(
        "the model store at {} is in use by another llamay process (a running `llamay serve`?); \
         stop it to import, remove or copy models",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error("could not {context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("model store database: could not {context}: {source}")]
    Db { context: String, source: sled::Error },
    #[error("the model store entry '{key}' is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    #[error(
        "the disk holding the model store is full (could not {context}); nothing was registered \
         and the partial copy was deleted: free space, then try again"
    )]
    DiskFull { context: String },
}

/// Whether `error` says the disk (or the user's quota) is full.
pub fn is_disk_full(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull
        || matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

impl From<InvalidModelName> for StoreError {
    fn from(error: InvalidModelName) -> Self {
        StoreError::InvalidName { name: error.name, reason: error.reason }
    }
}

impl StoreError {
    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
        let context = context.into();
        move |source| match is_disk_full(&source) {
            true => StoreError::DiskFull { context },
            false => StoreError::Io { context, source },
        }
    }

    fn db(context: &'static str) -> impl Fn(sled::Error) -> StoreError {
        move |source| match &source {
            sled::Error::Io(io) if is_disk_full(io) => {
                StoreError::DiskFull { context: context.to_string() }
            }
            _ => StoreError::Db { context: context.to_string(), source },
        }
    }

    fn from_gguf(path: &Path, error: GgufError) -> StoreError {
        match error.kind {
            GgufErrorKind::Io(source) if source.kind() == io::ErrorKind::NotFound => {
                StoreError::MissingFile { path: path.to_path_buf() }
            }
            GgufErrorKind::Io(source) => {
                StoreError::Io { context: format!("read {}", path.display()), source }
            }
            kind => StoreError::NotGguf { path: path.to_path_buf(), reason: kind.to_string() },
        }
    }
}

/// One registered model: a name pointing at a blob, with the blob's facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: ModelName,
    /// `sha256:<64 lowercase hex>` of the blob.
    pub digest: String,
    /// Blob size in bytes.
    pub size: u64,
    pub facts: GgufFacts,
    /// When this name was registered, in Unix seconds.
    pub added_at: u64,
    /// Default options, system prompt, template and license of a pulled or created model.
    #[serde(default, skip_serializing_if = "ModelExtras::is_empty")]
    pub extras: ModelExtras,
}

impl Manifest {
    /// The first 12 hex digits of the digest, as `ollama list` shows.
    pub fn short_id(&self) -> String {
        self.digest_hex().chars().take(12).collect()
    }

    /// The digest without its `sha256:` prefix.
    pub fn digest_hex(&self) -> &str {
        self.digest.strip_prefix(DIGEST_PREFIX).unwrap_or(&self.digest)
    }
}

fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Current time in Unix seconds (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// An open model store.
pub struct Store {
    home: PathBuf,
    blobs: PathBuf,
    /// The database, or `None` when another process holds it and this store is a read-only
    /// view of that process's manifests file.
    database: Option<Database>,
    /// Serializes the steps that register or release blobs.
    commit_lock: Mutex<()>,
}

struct Database {
    db: sled::Db,
    manifests: sled::Tree,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("home", &self.home).finish_non_exhaustive()
    }
}

impl Store {
    /// `$LLAMAY_HOME` when set and non-empty, else `~/.llamay`.
    pub fn default_home() -> PathBuf {
        crate::environment::environment().store_home()
    }

    /// Opens (creating if needed) the store at `home`, runs pending migrations, sweeps
    /// leftovers of interrupted work and rewrites the manifests file. When another process has the
    /// store open, this one gets a read-only view ([`Store::is_read_only`]) if that process
    /// left a manifests file, else [`StoreError::Locked`].
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        let store = Store::open_unswept(home)?;
        if !store.is_read_only() {
            store.sweep()?;
            store.write_manifests_file();
        }
        Ok(store)
    }

    /// Opens like [`Store::open`] but sweeps nothing and leaves the manifests file as it is, so
    /// [`Store::check`] sees the store as the last process left it (migrations still run).
    pub fn open_for_check(home: &Path) -> Result<Store, StoreError> {
        Store::open_unswept(home)
    }

    fn open_unswept(home: &Path) -> Result<Store, StoreError> {
        let not_writable = |source| StoreError::NotWritable { path: home.to_path_buf(), source };
        let blobs = home.join("blobs");
        if !blobs.is_dir() {
            fs::create_dir_all(&blobs).map_err(not_writable)?;
            sync_dir(home);
        }
        probe_writable(&blobs).map_err(not_writable)?;
        let db_path = home.join("db");
        let opened = sled::Config::new().path(&db_path).open().map_err(|source| match source {
            sled::Error::Io(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                StoreError::NotWritable { path: home.to_path_buf(), source: e }
            }
            sled::Error::Io(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.to_string().contains("lock") =>
            {
                StoreError::Locked { path: home.to_path_buf() }
            }
            source => StoreError::Db { context: format!("open {}", db_path.display()), source },
        });
        let db = match opened {
            Ok(db) => db,
            Err(StoreError::Locked { path }) => {
                // Validates the manifests file's version and entries before anyone relies on them.
                return match manifests_file::read(home)? {
                    Some(_) => Ok(Store {
                        home: home.to_path_buf(),
                        blobs,
                        database: None,
                        commit_lock: Mutex::new(()),
                    }),
                    None => Err(StoreError::Locked { path }),
                };
            }
            Err(error) => return Err(error),
        };
        migrate::run(&db, migrate::MIGRATIONS, home)?;
        let manifests =
            db.open_tree(MANIFESTS_TREE).map_err(StoreError::db("open the manifests tree"))?;
        Ok(Store {
            home: home.to_path_buf(),
            blobs,
            database: Some(Database { db, manifests }),
            commit_lock: Mutex::new(()),
        })
    }

    /// The id drawn once for this store (migration v0002), so context ids name their daemon;
    /// `None` for a read-only view or a store whose id is missing.
    pub fn daemon_id(&self) -> Option<String> {
        let raw = self.database.as_ref()?.db.get(DAEMON_ID_KEY).ok()??;
        let id = String::from_utf8(raw.to_vec()).ok()?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    }

    /// True when another process holds the database and this store can only read.
    pub fn is_read_only(&self) -> bool {
        self.database.is_none()
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Registers the GGUF file at `path` as `name` (replacing what `name` pointed at). The file
    /// is copied into the store; identical content shares one blob.
    pub fn import_file(&self, path: &Path, name: &ModelName) -> Result<Manifest, StoreError> {
        self.import_file_with_progress(path, name, &Silent)
    }

    /// [`Store::import_file`], telling `progress` how the copy and hash go.
    pub fn import_file_with_progress(
        &self,
        path: &Path,
        name: &ModelName,
        progress: &dyn Progress,
    ) -> Result<Manifest, StoreError> {
        self.writable()?;
        // Refuse non-GGUF and truncated files before copying a byte.
        read_gguf_facts(path).map_err(|e| StoreError::from_gguf(path, e))?;
        let mut source = File::open(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StoreError::MissingFile { path: path.to_path_buf() },
            _ => StoreError::Io { context: format!("open {}", path.display()), source: e },
        })?;
        let expected = source.metadata().map_or(0, |m| m.len());
        let partial = self.write_partial(&mut source, path, expected, progress)?;
        // The facts recorded are those of the bytes actually stored, even if the source changed.
        let facts = read_gguf_facts(&partial.path).map_err(|e| StoreError::NotGguf {
            path: path.to_path_buf(),
            reason: format!("it changed while being imported: {}", e.kind),
        })?;
        self.commit(partial, facts, name)
    }

    /// The manifest registered as `name`.
    pub fn resolve(&self, name: &ModelName) -> Result<Manifest, StoreError> {
        let key = name.key();
        let not_found = || StoreError::NotFound { name: key.clone() };
        let Some(database) = &self.database else {
            return self
                .read_manifests_file()?
                .into_iter()
                .find(|m| m.name == *name)
                .ok_or_else(not_found);
        };
        let raw = database
            .manifests
            .get(key.as_bytes())
            .map_err(StoreError::db("read a manifest"))?
            .ok_or_else(not_found)?;
        decode_manifest(&key, &raw)
    }

    /// Where the model file of `manifest` lives.
    pub fn blob_path(&self, manifest: &Manifest) -> PathBuf {
        let hex = manifest.digest_hex();
        // A digest that is not hex must not name a file outside blobs/; it maps to no blob.
        let file = if is_sha256_hex(hex) {
            format!("{BLOB_PREFIX}{hex}")
        } else {
            format!("{BLOB_PREFIX}invalid")
        };
        self.blobs.join(file)
    }

    /// The file a model reference points at: the path itself, or the blob of a store name.
    pub fn model_path(&self, model: &ModelRef) -> Result<PathBuf, StoreError> {
        match model {
            ModelRef::Path(path) => Ok(path.clone()),
            ModelRef::Name(name) => Ok(self.blob_path(&self.resolve(name)?)),
        }
    }

    /// Every manifest, newest first (ties by name).
    pub fn list(&self) -> Result<Vec<Manifest>, StoreError> {
        let mut all = self.all_manifests()?;
        all.sort_by(|a, b| b.added_at.cmp(&a.added_at).then_with(|| a.name.cmp(&b.name)));
        Ok(all)
    }

    /// Unregisters `name`; its blob is deleted when no other name uses it. A corrupt entry is
    /// removed too (that is how a user gets rid of one); its blob, if any, is left for the
    /// next sweep, which only deletes what no readable entry names.
    pub fn remove(&self, name: &ModelName) -> Result<(), StoreError> {
        let database = self.writable()?;
        let _guard = self.commit_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = name.key();
        let raw = database
            .manifests
            .remove(key.as_bytes())
            .map_err(StoreError::db("remove a manifest"))?
            .ok_or_else(|| StoreError::NotFound { name: key.clone() })?;
        // Durable before the blob goes: a crash in between leaves an orphan, never a manifest
        // without its blob.
        self.flush()?;
        self.write_manifests_file();
        match decode_manifest(&key, &raw) {
            Ok(removed) => self.release_blob(&removed.digest),
            Err(error) => {
                tracing::warn!(%error, "removed a corrupt manifest; its blob is left to the sweep");
                Ok(())
            }
        }
    }

    /// Registers `to` as another name for the model `from` (sharing its blob).
    pub fn copy(&self, from: &ModelName, to: &ModelName) -> Result<Manifest, StoreError> {
        self.writable()?;
        let _guard = self.commit_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let source = self.resolve(from)?;
        if from == to {
            return Ok(source);
        }
        let blob = self.blob_path(&source);
        match fs::metadata(&blob) {
            Ok(meta) if meta.is_file() && meta.len() == source.size => {}
            Ok(meta) => {
                return Err(StoreError::Corrupt {
                    key: from.key(),
                    reason: format!(
                        "its blob {} has {} bytes, the manifest says {} (`llamay doctor` checks \
                         the store)",
                        blob.display(),
                        meta.len(),
                        source.size
                    ),
                })
            }
            Err(_) => {
                return Err(StoreError::Corrupt {
                    key: from.key(),
                    reason: format!(
                        "its blob {} is missing (`llamay doctor` checks the store)",
                        blob.display()
                    ),
                })
            }
        }
        let copy = Manifest { name: to.clone(), added_at: unix_now(), ..source };
        self.put_manifest(&copy)?;
        Ok(copy)
    }

    /// Hashes `source` while copying it into a new partial file under `blobs/`, then fsyncs it.
    fn write_partial(
        &self,
        source: &mut dyn Read,
        origin: &Path,
        expected_bytes: u64,
        progress: &dyn Progress,
    ) -> Result<PartialBlob, StoreError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let unique = format!(
            "{PARTIAL_PREFIX}{}-{}-{}",
            std::process::id(),
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.blobs.join(unique);
        let mut file = File::options().write(true).create_new(true).open(&path).map_err(|source| {
            match is_disk_full(&source) {
                true => StoreError::DiskFull { context: format!("create {}", path.display()) },
                false => StoreError::NotWritable { path: self.home.clone(), source },
            }
        })?;
        let mut partial = PartialBlob { path, hex: String::new(), size: 0, keep: false };
        let label = format!("importing {}", origin.display());
        let (hex, size) = hash::hash_copy(source, &mut file, &label, expected_bytes, progress)
            .map_err(|error| match error {
                hash::HashError::Read(e) => StoreError::io(format!("read {}", origin.display()))(e),
                hash::HashError::Write(e) => {
                    StoreError::io(format!("write {}", partial.path.display()))(e)
                }
            })?;
        file.sync_all().map_err(StoreError::io(format!("sync {}", partial.path.display())))?;
        partial.hex = hex;
        partial.size = size;
        Ok(partial)
    }

    /// Moves `partial` to its blob name, makes the rename durable and writes the manifest.
    ///
    /// The partial replaces a blob of the same name even when one exists: its bytes were just
    /// hashed, so afterwards the blob is certainly what its name says, and re-importing a file
    /// repairs a blob that was damaged on disk. (A process that has the old file mapped keeps
    /// reading the old inode.)
    fn commit(
        &self,
        mut partial: PartialBlob,
        facts: GgufFacts,
        name: &ModelName,
    ) -> Result<Manifest, StoreError> {
        let _guard = self.commit_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let blob = self.blobs.join(format!("{BLOB_PREFIX}{}", partial.hex));
        fs::rename(&partial.path, &blob)
            .map_err(StoreError::io(format!("rename into {}", blob.display())))?;
        partial.keep = true;
        // The manifest must never be durable before the blob's directory entry is.
        sync_dir(&self.blobs);
        let manifest = Manifest {
            name: name.clone(),
            digest: format!("{DIGEST_PREFIX}{}", partial.hex),
            size: partial.size,
            facts,
            added_at: unix_now(),
            extras: ModelExtras::default(),
        };
        if let Err(error) = self.put_manifest(&manifest) {
            // Best effort, and only if no other entry uses the blob; else the next open sweeps it.
            let _ = self.release_blob(&manifest.digest);
            return Err(error);
        }
        Ok(manifest)
    }

    /// Writes `manifest` (replacing any under its name) and releases a blob it displaced.
    /// Callers hold `commit_lock`.
    fn put_manifest(&self, manifest: &Manifest) -> Result<(), StoreError> {
        let key = manifest.name.key();
        let bytes = serde_json::to_vec(manifest)
            .map_err(|e| StoreError::Corrupt { key: key.clone(), reason: e.to_string() })?;
        let previous = self
            .writable()?
            .manifests
            .insert(key.as_bytes(), bytes)
            .map_err(StoreError::db("write a manifest"))?;
        self.flush()?;
        self.write_manifests_file();
        if let Some(previous) = previous {
            if let Ok(previous) = decode_manifest(&key, &previous) {
                if previous.digest != manifest.digest {
                    self.release_blob(&previous.digest)?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the blob of `digest` if no entry refers to it (and every entry could be read).
    /// Callers hold `commit_lock`.
    fn release_blob(&self, digest: &str) -> Result<(), StoreError> {
        let Some(hex) = digest.strip_prefix(DIGEST_PREFIX).filter(|h| is_sha256_hex(h)) else {
            return Ok(());
        };
        let references = self.references()?;
        if !references.complete() || references.referenced().contains(hex) {
            return Ok(());
        }
        let blob = self.blobs.join(format!("{BLOB_PREFIX}{hex}"));
        match fs::remove_file(&blob) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(StoreError::io(format!("remove {}", blob.display()))(e))
            }
            _ => Ok(()),
        }
    }

    fn all_manifests(&self) -> Result<Vec<Manifest>, StoreError> {
        let Some(database) = &self.database else {
            return self.read_manifests_file();
        };
        let mut all = Vec::new();
        for entry in database.manifests.iter() {
            let (key, value) = entry.map_err(StoreError::db("read the manifests"))?;
            all.push(decode_manifest(&String::from_utf8_lossy(&key), &value)?);
        }
        Ok(all)
    }

    /// Every manifest that decodes (those that do not are findings of their own).
    fn readable_manifests(&self) -> Result<Vec<Manifest>, StoreError> {
        let database = self.writable()?;
        let mut all = Vec::new();
        for entry in database.manifests.iter() {
            let (key, value) = entry.map_err(StoreError::db("read the manifests"))?;
            if let Ok(manifest) = decode_manifest(&String::from_utf8_lossy(&key), &value) {
                all.push(manifest);
            }
        }
        Ok(all)
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.writable()?.db.flush().map_err(StoreError::db("flush the store"))?;
        Ok(())
    }

    fn writable(&self) -> Result<&Database, StoreError> {
        self.database.as_ref().ok_or_else(|| StoreError::Locked { path: self.home.clone() })
    }

    /// Re-read on every call, so a long-lived reader sees the owner's later changes.
    fn read_manifests_file(&self) -> Result<Vec<Manifest>, StoreError> {
        manifests_file::read(&self.home)?.ok_or_else(|| StoreError::Locked { path: self.home.clone() })
    }

    /// Refreshes the manifests file other processes read. A failure is logged, not returned: the
    /// database already holds the change, and only other processes' view is stale.
    fn write_manifests_file(&self) {
        // Entries that cannot be read are left out: `doctor` reports them, and the manifests file
        // must not stay stale because of them.
        let result = self.readable_manifests().and_then(|all| {
            manifests_file::write(&self.home, &all)
                .map_err(StoreError::io("write the manifests file"))
        });
        if let Err(error) = result {
            tracing::warn!(home = %self.home.display(), %error, "model store manifests file not updated");
        }
    }

    /// Every blob reference the database holds (see `refs.rs`); a read-only view has only
    /// the manifests of its manifests file.
    pub fn references(&self) -> Result<refs::References, StoreError> {
        match &self.database {
            Some(database) => refs::References::collect(&database.db),
            None => Ok(refs::References::from_manifests(&self.read_manifests_file()?)),
        }
    }

    /// Deletes temporary files and blobs no entry names: leftovers of a crash mid-import or
    /// mid-remove. Safe at open because sled's lock keeps other processes out of this store.
    /// When some entry cannot be read or a tree is unknown, orphans are kept: they might be
    /// that entry's (`doctor` reports it).
    fn sweep(&self) -> Result<(), StoreError> {
        let references = self.references()?;
        let referenced = references.referenced();
        let mut swept = 0usize;
        for file in self.scan_files()? {
            let remove = match file.kind {
                FileKind::Temporary => true,
                FileKind::Blob { ref hex } => {
                    references.complete() && !referenced.contains(hex.as_str())
                }
                FileKind::Probe => probe_is_leftover(&file.path),
                FileKind::Other => false,
            };
            if remove && fs::remove_file(&file.path).is_ok() {
                swept += 1;
            }
        }
        if swept > 0 {
            sync_dir(&self.blobs);
            tracing::info!(home = %self.home.display(), swept, "removed files left by interrupted work");
        }
        if !references.complete() {
            tracing::warn!(
                home = %self.home.display(),
                "the store has entries or trees this build cannot read; unreferenced blobs are \
                 kept (`llamay doctor` says which)"
            );
        }
        Ok(())
    }

    /// The files under `blobs/`, and the manifests file's temporary files in the home, classified.
    fn scan_files(&self) -> Result<Vec<StoreFile>, StoreError> {
        let mut files = Vec::new();
        let entries = fs::read_dir(&self.blobs)
            .map_err(StoreError::io(format!("list {}", self.blobs.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let hex = file_name.strip_prefix(BLOB_PREFIX).filter(|hex| is_sha256_hex(hex));
            let kind = if let Some(hex) = hex {
                FileKind::Blob { hex: hex.to_string() }
            } else if file_name.starts_with(PARTIAL_PREFIX) {
                FileKind::Temporary
            } else if file_name.starts_with(PROBE_PREFIX) {
                FileKind::Probe
            } else {
                FileKind::Other
            };
            files.push(StoreFile { path, kind });
        }
        let entries = fs::read_dir(&self.home)
            .map_err(StoreError::io(format!("list {}", self.home.display())))?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(manifests_file::TEMP_PREFIX) {
                files.push(StoreFile { path: entry.path(), kind: FileKind::Temporary });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}

/// A file in the store's directories and what it is.
struct StoreFile {
    path: PathBuf,
    kind: FileKind,
}

enum FileKind {
    /// `blobs/sha256-<hex>`.
    Blob { hex: String },
    /// A partial import or a manifests file being written: only the process holding the database
    /// writes them, so at its open they are leftovers of a crash.
    Temporary,
    /// A writability probe, which any process opening the store writes for an instant: a
    /// leftover when the process that wrote it is gone, or when it is old.
    Probe,
    /// Anything else: not the store's, left alone.
    Other,
}

/// A file being written under `blobs/`; deleted on drop unless it was renamed into place.
struct PartialBlob {
    path: PathBuf,
    hex: String,
    size: u64,
    keep: bool,
}

impl Drop for PartialBlob {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn decode_manifest(key: &str, raw: &[u8]) -> Result<Manifest, StoreError> {
    let manifest: Manifest = serde_json::from_slice(raw)
        .map_err(|e| StoreError::Corrupt { key: key.to_string(), reason: e.to_string() })?;
    validate_manifest(key, &manifest)?;
    Ok(manifest)
}

/// Checks what deserialization cannot: the manifest belongs under `key` and its digest is a
/// SHA-256 (so it can only ever name a file inside `blobs/`).
fn validate_manifest(key: &str, manifest: &Manifest) -> Result<(), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { key: key.to_string(), reason };
    if ModelName::parse(key).ok().as_ref() != Some(&manifest.name) {
        return Err(corrupt(format!("it is stored under '{key}' but names '{}'", manifest.name)));
    }
    if manifest.name.key() != key {
        return Err(corrupt(format!("it is stored under '{key}' but names '{}'", manifest.name)));
    }
    if !manifest.digest.strip_prefix(DIGEST_PREFIX).is_some_and(is_sha256_hex) {
        return Err(corrupt(format!("digest '{}' is not sha256:<64 hex>", manifest.digest)));
    }
    Ok(())
}

/// Makes a rename durable; failure only weakens crash safety, so it is not an error.
fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

#[cfg(test)]
mod tests;
