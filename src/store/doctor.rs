//! `llamay doctor`: checks that the store on disk is what its database says, and repairs what
//! can be repaired without losing a model.
//!
//! [`Store::check`] changes nothing: every entry that references a blob (`refs.rs`) must find
//! it under `blobs/` with the recorded size and SHA-256; every blob must be referenced; no
//! temporary file may be left over; the manifests file must match the database. Each
//! problem is one [`Finding`]. [`Store::repair`] then deletes what no entry references
//! (orphan blobs, temporary files), rewrites the manifests file, and reports every other finding as
//! kept with what the user can do: it never unregisters a model or deletes a referenced blob.
//!
//! A read-only view (another process holds the database) checks the manifests file's models against
//! their blobs only: orphans and temporary files may be that process's work in progress.
//!
//! Key types: [`CheckReport`], [`Finding`], [`RepairReport`], [`RepairAction`].
//! Cost: reads every referenced blob once (hashing runs at several hundred MB/s), one listing
//! of `blobs/` and one read of the manifests file.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::hash::{self, Progress};
use super::refs::Referrer;
use super::probe::probe_is_leftover;
use super::{human_size, manifests_file, sync_dir, FileKind, Manifest, Store, StoreError, BLOB_PREFIX};

/// One thing wrong with the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// An entry names a blob that is not there.
    MissingBlob { referrer: Referrer, path: PathBuf },
    /// A blob's bytes are not what its entries recorded (truncated, overwritten, bit rot).
    DamagedBlob { referrers: Vec<Referrer>, path: PathBuf, problem: String },
    /// An entry the database holds but this build cannot read.
    UnreadableEntry { referrer: Referrer, reason: String },
    /// A database tree this build does not know: blobs it names cannot be told from orphans.
    UnknownTree { tree: String },
    /// A blob no entry references.
    OrphanBlob { path: PathBuf, bytes: u64 },
    /// A partial import, a manifests-file temp file or an old probe: left by interrupted work.
    TemporaryFile { path: PathBuf, bytes: u64 },
    /// A file in the store's directories that the store never writes.
    UnknownFile { path: PathBuf },
    /// The manifests file other processes read is missing, unreadable or not what the database says.
    StaleManifestsFile { problem: String },
}

impl Finding {
    /// A few words naming the kind of problem, for a column.
    pub fn label(&self) -> &'static str {
        match self {
            Finding::MissingBlob { .. } => "missing blob",
            Finding::DamagedBlob { .. } => "damaged blob",
            Finding::UnreadableEntry { .. } => "unreadable entry",
            Finding::UnknownTree { .. } => "unknown tree",
            Finding::OrphanBlob { .. } => "orphan blob",
            Finding::TemporaryFile { .. } => "temporary file",
            Finding::UnknownFile { .. } => "unknown file",
            Finding::StaleManifestsFile { .. } => "stale manifests file",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::MissingBlob { referrer, path } => {
                write!(f, "{referrer}: its blob {} does not exist", path.display())
            }
            Finding::DamagedBlob { referrers, path, problem } => {
                let owners: Vec<String> = referrers.iter().map(|r| r.to_string()).collect();
                write!(f, "{}: its blob {} {problem}", owners.join(", "), path.display())
            }
            Finding::UnreadableEntry { referrer, reason } => {
                write!(f, "{referrer} in tree '{}' cannot be read: {reason}", referrer.tree)
            }
            Finding::UnknownTree { tree } => write!(
                f,
                "database tree '{tree}' is unknown to this build; blobs it names look unreferenced"
            ),
            Finding::OrphanBlob { path, bytes } => {
                write!(f, "{} ({}) is referenced by no entry", path.display(), human_size(*bytes))
            }
            Finding::TemporaryFile { path, bytes } => {
                write!(
                    f,
                    "{} ({}) was left by interrupted work",
                    path.display(),
                    human_size(*bytes)
                )
            }
            Finding::UnknownFile { path } => {
                write!(f, "{} is not a file the store writes", path.display())
            }
            Finding::StaleManifestsFile { problem } => write!(f, "{}: {problem}", manifests_file::MANIFESTS_FILE),
        }
    }
}

/// What [`Store::check`] found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// Another process holds the database: only the manifests file's models were checked.
    pub read_only: bool,
    /// Entries that reference blobs (models, ...), readable or not.
    pub entries: usize,
    /// The same, by kind (`model` -> 2).
    pub entries_by_kind: BTreeMap<&'static str, usize>,
    /// Distinct blobs whose bytes were hashed.
    pub blobs_verified: usize,
    pub bytes_verified: u64,
    pub findings: Vec<Finding>,
}

impl CheckReport {
    pub fn is_consistent(&self) -> bool {
        self.findings.is_empty()
    }

    /// `3 problems: 1 missing blob, 2 temporary files`, or `consistent`.
    pub fn summary(&self) -> String {
        let mut kinds: Vec<String> = self
            .entries_by_kind
            .iter()
            .map(|(kind, n)| format!("{n} {kind}{}", plural(*n, "", "s")))
            .collect();
        if kinds.is_empty() {
            kinds.push("0 models".into());
        }
        let checked = format!(
            "checked {} and {} {} ({} hashed)",
            kinds.join(", "),
            self.blobs_verified,
            plural(self.blobs_verified, "blob", "blobs"),
            human_size(self.bytes_verified)
        );
        let scope = if self.read_only {
            "; the store is open in another process, so only its models were checked (orphans \
             and temporary files may be its work in progress)"
        } else {
            ""
        };
        if self.findings.is_empty() {
            return format!("{checked}: consistent{scope}");
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for finding in &self.findings {
            *counts.entry(finding.label()).or_default() += 1;
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|(label, n)| match (*n, label.strip_suffix('y')) {
                (1, _) => format!("1 {label}"),
                (n, Some(stem)) => format!("{n} {stem}ies"),
                (n, None) => format!("{n} {label}s"),
            })
            .collect();
        let count = self.findings.len();
        format!(
            "{checked}: {count} {} ({}){scope}",
            plural(count, "problem", "problems"),
            parts.join(", ")
        )
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// One step [`Store::repair`] took, or a finding it left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairAction {
    /// A file no entry references was deleted.
    Removed { path: PathBuf, bytes: u64 },
    /// The manifests file was rewritten from the database.
    RewroteManifestsFile,
    /// The finding was left as it is; `advice` says why and what the user can do.
    Kept { finding: Finding, advice: String },
}

impl fmt::Display for RepairAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairAction::Removed { path, bytes } => {
                write!(f, "removed {} ({})", path.display(), human_size(*bytes))
            }
            RepairAction::RewroteManifestsFile => {
                write!(f, "rewrote {} from the database", manifests_file::MANIFESTS_FILE)
            }
            RepairAction::Kept { finding, advice } => {
                write!(f, "not repaired: {finding}; {advice}")
            }
        }
    }
}

/// What [`Store::repair`] did.
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    pub actions: Vec<RepairAction>,
}

impl RepairReport {
    /// Findings left as they were.
    pub fn unrepaired(&self) -> usize {
        self.actions.iter().filter(|a| matches!(a, RepairAction::Kept { .. })).count()
    }
}

impl Store {
    /// Checks the store without changing it; `progress` hears about each blob being hashed.
    pub fn check(&self, progress: &dyn Progress) -> Result<CheckReport, StoreError> {
        let references = self.references()?;
        let mut report = CheckReport {
            read_only: self.is_read_only(),
            entries: references.entries.len() + references.unreadable.len(),
            entries_by_kind: BTreeMap::new(),
            blobs_verified: 0,
            bytes_verified: 0,
            findings: Vec::new(),
        };
        let referrers = references.entries.iter().map(|(r, _)| r);
        for referrer in referrers.chain(references.unreadable.iter().map(|(r, _)| r)) {
            *report.entries_by_kind.entry(referrer.kind).or_default() += 1;
        }
        for (referrer, reason) in &references.unreadable {
            report.findings.push(Finding::UnreadableEntry {
                referrer: referrer.clone(),
                reason: reason.clone(),
            });
        }
        for tree in &references.unknown_trees {
            report.findings.push(Finding::UnknownTree { tree: tree.clone() });
        }

        // Each blob once, however many entries share it.
        let mut by_blob: BTreeMap<&str, (Vec<Referrer>, Option<u64>)> = BTreeMap::new();
        for (referrer, blobs) in &references.entries {
            for blob in blobs {
                let slot = by_blob.entry(blob.hex.as_str()).or_default();
                slot.0.push(referrer.clone());
                slot.1 = slot.1.or(blob.size);
            }
        }
        for (hex, (referrers, size)) in by_blob {
            let path = self.blobs.join(format!("{BLOB_PREFIX}{hex}"));
            let shown = self.shown(&path);
            match verify_blob(&path, hex, size, progress) {
                Ok(bytes) => {
                    report.blobs_verified += 1;
                    report.bytes_verified += bytes;
                }
                Err(BlobProblem::Missing) => {
                    for referrer in referrers {
                        report
                            .findings
                            .push(Finding::MissingBlob { referrer, path: shown.clone() });
                    }
                }
                Err(BlobProblem::Damaged(problem)) => {
                    report.findings.push(Finding::DamagedBlob { referrers, path: shown, problem });
                }
            }
        }

        if self.is_read_only() {
            return Ok(report);
        }
        let referenced = references.referenced();
        for file in self.scan_files()? {
            let meta = fs::symlink_metadata(&file.path).ok();
            let bytes = meta.as_ref().map_or(0, |m| m.len());
            let path = self.shown(&file.path);
            match file.kind {
                FileKind::Blob { hex } if !referenced.contains(hex.as_str()) => {
                    report.findings.push(Finding::OrphanBlob { path, bytes });
                }
                FileKind::Blob { .. } => {}
                FileKind::Temporary => report.findings.push(Finding::TemporaryFile { path, bytes }),
                FileKind::Probe if probe_is_leftover(&file.path) => {
                    report.findings.push(Finding::TemporaryFile { path, bytes });
                }
                FileKind::Probe => {}
                FileKind::Other => report.findings.push(Finding::UnknownFile { path }),
            }
        }
        if let Some(problem) = self.manifests_file_problem()? {
            report.findings.push(Finding::StaleManifestsFile { problem });
        }
        Ok(report)
    }

    /// Deletes the orphans and temporary files of `report`, rewrites a stale manifests file, and
    /// says what it left and why. Needs the database (not a read-only view). Orphans are
    /// checked against the database again first, and kept when some entry cannot be read.
    pub fn repair(&self, report: &CheckReport) -> Result<RepairReport, StoreError> {
        self.writable()?;
        let _guard = self.commit_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let references = self.references()?;
        let referenced = references.referenced();
        let mut repair = RepairReport::default();
        let mut removed_any = false;
        for finding in &report.findings {
            let kept = |advice: &str| RepairAction::Kept {
                finding: finding.clone(),
                advice: advice.to_string(),
            };
            let action = match finding {
                Finding::OrphanBlob { path, bytes } => {
                    let full = self.home.join(path);
                    let hex = full
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.strip_prefix(BLOB_PREFIX))
                        .unwrap_or_default();
                    if !references.complete() {
                        kept(
                            "kept because the database has entries or trees this build cannot \
                             read, and the blob may be theirs",
                        )
                    } else if referenced.contains(hex) {
                        kept("an entry references it now")
                    } else {
                        removed_any = true;
                        self.remove_file(&full, path, *bytes)?
                    }
                }
                Finding::TemporaryFile { path, bytes } => {
                    removed_any = true;
                    self.remove_file(&self.home.join(path), path, *bytes)?
                }
                Finding::StaleManifestsFile { .. } => {
                    let manifests = self.readable_manifests()?;
                    manifests_file::write(&self.home, &manifests)
                        .map_err(StoreError::io("write the manifests file"))?;
                    RepairAction::RewroteManifestsFile
                }
                Finding::MissingBlob { referrer, .. } => kept(&model_advice(referrer)),
                Finding::DamagedBlob { referrers, .. } => {
                    kept(&referrers.iter().map(model_advice).collect::<Vec<_>>().join("; "))
                }
                Finding::UnreadableEntry { referrer, .. } if referrer.kind == "model" => kept(
                    &format!("remove it with `llamay rm {}` and import it again", referrer.key),
                ),
                Finding::UnreadableEntry { .. } => {
                    kept("written by another llamay build; open the store with that build")
                }
                Finding::UnknownTree { .. } => {
                    kept("written by another llamay build; its blobs are kept")
                }
                Finding::UnknownFile { .. } => kept("not the store's; left alone"),
            };
            repair.actions.push(action);
        }
        if removed_any {
            sync_dir(&self.blobs);
        }
        Ok(repair)
    }

    fn remove_file(
        &self,
        full: &Path,
        shown: &Path,
        bytes: u64,
    ) -> Result<RepairAction, StoreError> {
        match fs::remove_file(full) {
            Ok(()) => Ok(RepairAction::Removed { path: shown.to_path_buf(), bytes }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Ok(RepairAction::Removed { path: shown.to_path_buf(), bytes: 0 })
            }
            Err(e) => Err(StoreError::io(format!("remove {}", full.display()))(e)),
        }
    }

    /// `path` relative to the store's home, for messages.
    fn shown(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.home).map_or_else(|_| path.to_path_buf(), Path::to_path_buf)
    }

    /// How the manifests file differs from the database, if it does.
    fn manifests_file_problem(&self) -> Result<Option<String>, StoreError> {
        let in_db: BTreeMap<String, Manifest> =
            self.readable_manifests()?.into_iter().map(|m| (m.name.key(), m)).collect();
        let in_file = match manifests_file::read(&self.home) {
            Ok(Some(list)) => list,
            Ok(None) if in_db.is_empty() => return Ok(None),
            Ok(None) => {
                return Ok(Some(format!(
                    "missing, while the database has {} {}",
                    in_db.len(),
                    plural(in_db.len(), "model", "models")
                )))
            }
            Err(error) => return Ok(Some(format!("cannot be read: {error}"))),
        };
        let in_file: BTreeMap<String, Manifest> =
            in_file.into_iter().map(|m| (m.name.key(), m)).collect();
        let only_db: Vec<&str> =
            in_db.keys().filter(|k| !in_file.contains_key(*k)).map(String::as_str).collect();
        let only_in_file: Vec<&str> =
            in_file.keys().filter(|k| !in_db.contains_key(*k)).map(String::as_str).collect();
        let differing: Vec<&str> = in_db
            .iter()
            .filter(|(k, m)| in_file.get(*k).is_some_and(|s| s != *m))
            .map(|(k, _)| k.as_str())
            .collect();
        let mut parts = Vec::new();
        if !only_db.is_empty() {
            parts.push(format!("missing {}", only_db.join(", ")));
        }
        if !only_in_file.is_empty() {
            parts.push(format!("lists removed {}", only_in_file.join(", ")));
        }
        if !differing.is_empty() {
            parts.push(format!("has old entries for {}", differing.join(", ")));
        }
        Ok((!parts.is_empty()).then(|| format!("differs from the database: {}", parts.join("; "))))
    }
}

fn model_advice(referrer: &Referrer) -> String {
    if referrer.kind == "model" {
        format!(
            "import the model's file again (`llamay import FILE {}`) or remove it (`llamay rm {}`)",
            referrer.key, referrer.key
        )
    } else {
        format!("delete the {} '{}' and create it again", referrer.kind, referrer.key)
    }
}

enum BlobProblem {
    Missing,
    Damaged(String),
}

/// Checks the blob at `path` has `size` bytes (when known) and hashes to `hex`; returns its size.
fn verify_blob(
    path: &Path,
    hex: &str,
    size: Option<u64>,
    progress: &dyn Progress,
) -> Result<u64, BlobProblem> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(BlobProblem::Missing),
        Err(e) => return Err(BlobProblem::Damaged(format!("cannot be read: {e}"))),
    };
    if !meta.is_file() {
        return Err(BlobProblem::Damaged("is not a regular file".into()));
    }
    if let Some(expected) = size.filter(|expected| *expected != meta.len()) {
        return Err(BlobProblem::Damaged(format!(
            "has {} bytes where {expected} were recorded",
            meta.len()
        )));
    }
    let mut file =
        File::open(path).map_err(|e| BlobProblem::Damaged(format!("cannot be read: {e}")))?;
    let label = format!("verifying {BLOB_PREFIX}{}", hex.get(..12).unwrap_or(hex));
    let (actual, bytes) = hash::hash_copy(&mut file, &mut io::sink(), &label, meta.len(), progress)
        .map_err(|e| match e {
            hash::HashError::Read(e) | hash::HashError::Write(e) => {
                BlobProblem::Damaged(format!("cannot be read: {e}"))
            }
        })?;
    if actual != hex {
        return Err(BlobProblem::Damaged(format!("has sha256 {actual}, not the one in its name")));
    }
    Ok(bytes)
}
