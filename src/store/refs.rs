//! Which database entries point at which blobs: the one list the open-time sweep, `doctor`
//! and `doctor --repair` all read, so they agree on what a blob belongs to.
//!
//! Every sled tree whose entries name blobs under `blobs/` is listed in [`REFERENCE_TREES`]
//! with a function that reads the blob references out of one entry. A tree that stores digests
//! must be added there: a blob no listed tree names is an orphan, swept at open. As a guard, a
//! tree that is neither listed nor known to hold no blob references ([`PLAIN_TREES`]) makes
//! the sweep and `--repair` keep every orphan, and `doctor` reports it.
//!
//! Key types: [`BlobRef`], [`Referrer`], [`References`], [`ReferenceTree`].
//! Cost: one scan of each listed tree (a few hundred bytes per entry).

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use super::{decode_manifest, Manifest, StoreError, MANIFESTS_TREE};

/// A blob an entry relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// Lowercase hex SHA-256: the blob is `blobs/sha256-<hex>`.
    pub hex: String,
    /// The size the entry recorded, when it records one.
    pub size: Option<u64>,
}

/// The entry that holds a reference, for messages: `model 'smollm2:135m'`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Referrer {
    /// What the tree's entries are (`model`).
    pub kind: &'static str,
    pub tree: String,
    pub key: String,
}

impl fmt::Display for Referrer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}'", self.kind, self.key)
    }
}

/// A sled tree whose entries name blobs.
pub struct ReferenceTree {
    pub tree: &'static str,
    /// What one entry is, for messages (`model`).
    pub kind: &'static str,
    /// The blobs the entry under `key` names; an error when the entry cannot be read.
    pub blobs: fn(key: &str, value: &[u8]) -> Result<Vec<BlobRef>, StoreError>,
}

/// Every tree that references blobs.
pub static REFERENCE_TREES: &[ReferenceTree] = &[
    ReferenceTree { tree: MANIFESTS_TREE, kind: "model", blobs: manifest_blobs },
    ReferenceTree { tree: super::SNAPSHOTS_TREE, kind: "snapshot", blobs: snapshot_blobs },
];

/// Trees known to hold no blob references: sled's default tree (the schema version) and the
/// stored `/v1/responses` answers (JSON text only).
pub const PLAIN_TREES: &[&str] = &["__sled__default", super::responses::RESPONSES_TREE];

fn manifest_blobs(key: &str, value: &[u8]) -> Result<Vec<BlobRef>, StoreError> {
    let manifest = decode_manifest(key, value)?;
    Ok(vec![manifest_ref(&manifest)])
}

fn snapshot_blobs(key: &str, value: &[u8]) -> Result<Vec<BlobRef>, StoreError> {
    let snapshot = super::kv_snapshots::decode_snapshot(key, value)?;
    Ok(vec![BlobRef { hex: snapshot.digest_hex().to_string(), size: Some(snapshot.bytes) }])
}

fn manifest_ref(manifest: &Manifest) -> BlobRef {
    BlobRef { hex: manifest.digest_hex().to_string(), size: Some(manifest.size) }
}

/// Everything the database says about blobs.
#[derive(Debug, Default)]
pub struct References {
    /// Each readable entry with the blobs it names.
    pub entries: Vec<(Referrer, Vec<BlobRef>)>,
    /// Entries that could not be read, with why: they may name blobs nobody can see.
    pub unreadable: Vec<(Referrer, String)>,
    /// Trees neither in [`REFERENCE_TREES`] nor in [`PLAIN_TREES`].
    pub unknown_trees: Vec<String>,
}

impl References {
    /// Reads every reference tree of `db`.
    pub fn collect(db: &sled::Db) -> Result<References, StoreError> {
        let mut references = References::default();
        for spec in REFERENCE_TREES {
            let tree = db.open_tree(spec.tree).map_err(StoreError::db("open a reference tree"))?;
            for entry in tree.iter() {
                let (key, value) = entry.map_err(StoreError::db("read a reference tree"))?;
                let referrer = Referrer {
                    kind: spec.kind,
                    tree: spec.tree.to_string(),
                    key: String::from_utf8_lossy(&key).into_owned(),
                };
                match (spec.blobs)(&referrer.key, &value) {
                    Ok(blobs) => references.entries.push((referrer, blobs)),
                    Err(error) => references.unreadable.push((referrer, error.to_string())),
                }
            }
        }
        let known: BTreeSet<&str> =
            REFERENCE_TREES.iter().map(|t| t.tree).chain(PLAIN_TREES.iter().copied()).collect();
        references.unknown_trees = db
            .tree_names()
            .iter()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .filter(|name| !known.contains(name.as_str()))
            .collect();
        Ok(references)
    }

    /// The references of a read-only view, which only has the manifests snapshot.
    pub fn from_manifests(manifests: &[Manifest]) -> References {
        let entries = manifests
            .iter()
            .map(|m| {
                let referrer =
                    Referrer { kind: "model", tree: MANIFESTS_TREE.into(), key: m.name.key() };
                (referrer, vec![manifest_ref(m)])
            })
            .collect();
        References { entries, ..References::default() }
    }

    /// The hex digests some readable entry names.
    pub fn referenced(&self) -> HashSet<&str> {
        self.entries.iter().flat_map(|(_, blobs)| blobs.iter().map(|b| b.hex.as_str())).collect()
    }

    /// True when every entry could be read and every tree is known, so a blob none of them
    /// names is certainly unreferenced.
    pub fn complete(&self) -> bool {
        self.unreadable.is_empty() && self.unknown_trees.is_empty()
    }
}
