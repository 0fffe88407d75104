//! `doctor` on deliberately broken stores (real sled on disk, synthetic GGUF files): each kind
//! of damage is found, `repair` removes only what no entry references, and models stay.

use std::sync::atomic::{AtomicU64, Ordering};

use sha2::Digest;

use crate::store::*;
use crate::gguf::testing::{GgufBuilder, TestValue};

struct Broken {
    dir: tempfile::TempDir,
    store: Store,
}

impl Broken {
    fn new() -> Broken {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("home")).expect("open store");
        Broken { dir, store }
    }

    /// Imports a synthetic model whose content depends on `name`.
    fn import(&self, name: &str) -> Manifest {
        let builder = GgufBuilder::llama_like().kv("general.name", TestValue::Str(name.into()));
        let source = self.dir.path().join(format!("{name}.gguf"));
        builder.write_to(&source);
        self.store.import_file(&source, &model(name)).expect("import")
    }

    fn blobs(&self) -> PathBuf {
        self.store.home().join("blobs")
    }

    fn check(&self) -> CheckReport {
        self.store.check(&Silent).expect("check")
    }

    /// Closes the store and opens it again for checking, as `llamay doctor` does.
    fn reopen_for_check(self) -> Broken {
        let Broken { dir, store } = self;
        let home = store.home().to_path_buf();
        drop(store);
        Broken { store: Store::open_for_check(&home).expect("reopen"), dir }
    }
}

fn model(name: &str) -> ModelName {
    ModelName::parse(name).expect("valid name")
}

fn labels(report: &CheckReport) -> Vec<&'static str> {
    report.findings.iter().map(Finding::label).collect()
}

fn shown(manifest: &Manifest) -> PathBuf {
    PathBuf::from("blobs").join(format!("sha256-{}", manifest.digest_hex()))
}

#[test]
fn a_healthy_store_is_consistent_and_every_blob_is_hashed() {
    let fx = Broken::new();
    let a = fx.import("a");
    let b = fx.import("b");
    fx.store.copy(&model("a"), &model("a-copy")).expect("copy");
    let report = fx.check();
    assert!(report.is_consistent(), "{:?}", report.findings);
    assert_eq!((report.entries, report.blobs_verified), (3, 2), "a shared blob is hashed once");
    assert_eq!(report.bytes_verified, a.size + b.size);
    assert!(report.summary().ends_with(": consistent"), "{}", report.summary());
    assert!(fx.store.repair(&report).expect("repair").actions.is_empty());
}

#[test]
fn a_truncated_blob_is_damaged_and_its_model_is_kept() {
    let fx = Broken::new();
    let a = fx.import("a");
    let blob = fx.store.blob_path(&a);
    let file = File::options().write(true).open(&blob).expect("open blob");
    file.set_len(a.size / 2).expect("truncate");
    drop(file);

    let report = fx.check();
    assert_eq!(labels(&report), ["damaged blob"]);
    let line = report.findings[0].to_string();
    assert!(
        line.contains("model 'a:latest'")
            && line.contains(&shown(&a).display().to_string())
            && line.contains(&format!("has {} bytes where {} were recorded", a.size / 2, a.size)),
        "{line}"
    );
    assert!(report.summary().contains("1 problem (1 damaged blob)"), "{}", report.summary());

    let repair = fx.store.repair(&report).expect("repair");
    assert_eq!(repair.unrepaired(), 1);
    let said = repair.actions[0].to_string();
    assert!(
        said.starts_with("not repaired") && said.contains("llamay import FILE a:latest"),
        "{said}"
    );
    assert_eq!(fx.store.resolve(&model("a")).expect("model kept"), a);
    assert!(blob.is_file(), "a referenced blob is never deleted");
}

#[test]
fn a_blob_with_the_right_size_but_other_bytes_fails_its_sha256() {
    let fx = Broken::new();
    let a = fx.import("a");
    let blob = fx.store.blob_path(&a);
    let mut bytes = fs::read(&blob).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&blob, &bytes).expect("write");

    let report = fx.check();
    assert_eq!(labels(&report), ["damaged blob"]);
    let actual = hex::encode(sha2::Sha256::digest(&bytes));
    assert!(report.findings[0].to_string().contains(&format!("has sha256 {actual}")));

    // Importing the original file again replaces the damaged bytes.
    let source = fx.dir.path().join("a.gguf");
    fx.store.import_file(&source, &model("a")).expect("re-import");
    assert!(fx.check().is_consistent());
}

#[test]
fn a_missing_blob_is_reported_per_model_and_nothing_is_removed() {
    let fx = Broken::new();
    let a = fx.import("a");
    fx.store.copy(&model("a"), &model("b")).expect("copy");
    fs::remove_file(fx.store.blob_path(&a)).expect("delete blob");

    let report = fx.check();
    assert_eq!(labels(&report), ["missing blob", "missing blob"]);
    let lines: Vec<String> = report.findings.iter().map(|f| f.to_string()).collect();
    assert!(lines[0].starts_with("model 'a:latest': its blob blobs/sha256-"), "{lines:?}");
    assert!(lines[1].starts_with("model 'b:latest'"), "{lines:?}");
    let repair = fx.store.repair(&report).expect("repair");
    assert_eq!(repair.unrepaired(), 2);
    assert_eq!(fx.store.list().expect("list").len(), 2, "models are never removed by repair");
}

#[test]
fn orphans_and_stale_partials_are_found_and_removed() {
    let fx = Broken::new();
    let a = fx.import("a");
    let b = fx.import("b");
    // What a crash leaves: b's blob renamed but its manifest never written, a half-written
    // import, and a manifests-file temp file.
    manifests_tree(&fx.store).remove(b.name.key().as_bytes()).expect("unregister b");
    fs::write(fx.blobs().join(".partial-77-1-0"), vec![0u8; 1000]).expect("partial");
    fs::write(fx.store.home().join(".manifests.json.tmp-77-0"), b"{").expect("manifests-file temp");
    let fx = fx.reopen_for_check();

    let report = fx.check();
    let mut found = labels(&report);
    found.sort();
    assert_eq!(found, ["orphan blob", "stale manifests file", "temporary file", "temporary file"]);
    let orphan = report.findings.iter().find(|f| f.label() == "orphan blob").expect("orphan");
    assert_eq!(*orphan, Finding::OrphanBlob { path: shown(&b), bytes: b.size });
    let stale = report.findings.iter().find(|f| f.label() == "stale manifests file").expect("a stale manifests file");
    assert!(stale.to_string().contains("lists removed b:latest"), "{stale}");

    let repair = fx.store.repair(&report).expect("repair");
    assert_eq!(repair.unrepaired(), 0, "{:?}", repair.actions);
    assert!(repair.actions.contains(&RepairAction::Removed { path: shown(&b), bytes: b.size }));
    assert!(repair.actions.contains(&RepairAction::RewroteManifestsFile));
    assert!(fx.check().is_consistent(), "{:?}", fx.check().findings);
    assert!(fx.store.blob_path(&a).is_file());
    assert_eq!(fx.store.list().expect("list"), vec![a]);
}

/// A process id no process has now: a child that has exited and been reaped.
fn gone_process_id() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid
}

#[test]
fn a_probe_is_a_leftover_once_its_writer_is_gone_and_the_next_open_removes_it() {
    let fx = Broken::new();
    let gone = fx.blobs().join(format!(".probe-{}-0", gone_process_id()));
    let ours = fx.blobs().join(format!(".probe-{}-999999", std::process::id()));
    fs::write(&gone, b"").expect("probe of a killed process");
    fs::write(&ours, b"").expect("probe of a live process");
    let fx = fx.reopen_for_check();

    let report = fx.check();
    let shown_gone = PathBuf::from("blobs").join(gone.file_name().expect("name"));
    assert_eq!(report.findings, vec![Finding::TemporaryFile { path: shown_gone, bytes: 0 }]);
    let Broken { dir, store } = fx;
    let home = store.home().to_path_buf();
    drop(store);
    let store = Store::open(&home).expect("open sweeps");
    assert!(!gone.exists(), "a dead writer's probe is swept at open");
    assert!(ours.exists(), "a live writer's fresh probe is its work in progress");
    drop((store, dir));
}

#[test]
fn a_missing_or_lagging_manifests_file_is_rewritten() {
    let fx = Broken::new();
    let a = fx.import("a");
    fs::remove_file(fx.store.home().join("manifests.json")).expect("remove the manifests file");
    let report = fx.check();
    assert_eq!(labels(&report), ["stale manifests file"]);
    assert!(report.findings[0].to_string().contains("missing, while the database has 1 model"));
    fx.store.repair(&report).expect("repair");
    assert!(fx.check().is_consistent());

    // The database changed but the manifests file did not (a crash between the two writes).
    let mut changed = a.clone();
    changed.added_at += 1;
    manifests_tree(&fx.store)
        .insert(a.name.key().as_bytes(), serde_json::to_vec(&changed).expect("json"))
        .expect("insert");
    let report = fx.check();
    assert!(report.findings[0].to_string().contains("has old entries for a:latest"));

    fs::write(fx.store.home().join("manifests.json"), b"{ half").expect("write");
    let report = fx.check();
    assert!(report.findings[0].to_string().contains("cannot be read"), "{:?}", report.findings);
    fx.store.repair(&report).expect("repair");
    assert!(fx.check().is_consistent());
}

#[test]
fn an_unreadable_entry_keeps_orphans_that_might_be_its_blob() {
    let fx = Broken::new();
    let a = fx.import("a");
    manifests_tree(&fx.store).insert("bad:latest", b"{not json".as_ref()).expect("insert");
    manifests_tree(&fx.store).remove(a.name.key().as_bytes()).expect("unregister a");
    let home = fx.store.home().to_path_buf();
    drop(fx.store);

    // A normal open works despite the bad entry, and keeps the blob it cannot rule out.
    let store = Store::open(&home).expect("open with a corrupt entry");
    assert!(store.blob_path(&a).is_file());
    let report = store.check(&Silent).expect("check");
    let mut found = labels(&report);
    found.sort();
    assert_eq!(found, ["orphan blob", "unreadable entry"]);
    let repair = store.repair(&report).expect("repair");
    assert_eq!(repair.unrepaired(), 2);
    assert!(store.blob_path(&a).is_file(), "kept: the unreadable entry may reference it");
    assert!(repair.actions.iter().any(|a| a.to_string().contains("llamay rm bad:latest")));

    // `rm` gets rid of a corrupt entry; then the orphan goes at the next open.
    store.remove(&model("bad")).expect("rm a corrupt entry");
    drop(store);
    let store = Store::open(&home).expect("reopen");
    assert!(!store.blob_path(&a).is_file());
    assert!(store.check(&Silent).expect("check").is_consistent());
}

#[test]
fn a_tree_this_build_does_not_know_keeps_orphans() {
    let fx = Broken::new();
    let a = fx.import("a");
    db_of(&fx.store)
        .open_tree("future_snapshots")
        .expect("tree")
        .insert("s", b"x".as_ref())
        .expect("insert");
    manifests_tree(&fx.store).remove(a.name.key().as_bytes()).expect("unregister a");
    let home = fx.store.home().to_path_buf();
    drop(fx.store);
    let store = Store::open(&home).expect("open");
    assert!(store.blob_path(&a).is_file(), "the sweep keeps it: the unknown tree may own it");
    let report = store.check(&Silent).expect("check");
    let mut found = labels(&report);
    found.sort();
    assert_eq!(found, ["orphan blob", "unknown tree"]);
    assert!(report.findings.iter().any(|f| f.to_string().contains("'future_snapshots'")));
    assert_eq!(store.repair(&report).expect("repair").unrepaired(), 2);
    assert!(store.blob_path(&a).is_file());
}

#[test]
fn files_the_store_never_writes_are_reported_and_left_alone() {
    let fx = Broken::new();
    fx.import("a");
    fs::write(fx.blobs().join("README"), b"mine").expect("write");
    let report = fx.check();
    assert_eq!(labels(&report), ["unknown file"]);
    assert_eq!(fx.store.repair(&report).expect("repair").unrepaired(), 1);
    assert!(fx.blobs().join("README").is_file());
}

#[test]
fn a_read_only_view_checks_models_only_and_cannot_repair() {
    let fx = Broken::new();
    let a = fx.import("a");
    fs::write(fx.blobs().join(".partial-1-2-3"), b"in progress").expect("partial");
    let reader = Store::open_for_check(fx.store.home()).expect("read-only open");
    assert!(reader.is_read_only());
    let report = reader.check(&Silent).expect("check");
    assert!(report.read_only && report.is_consistent(), "{:?}", report.findings);
    assert_eq!(report.bytes_verified, a.size);
    assert!(report.summary().contains("open in another process"), "{}", report.summary());
    assert!(matches!(reader.repair(&report), Err(StoreError::Locked { .. })));

    fs::remove_file(fx.store.blob_path(&a)).expect("delete blob");
    assert_eq!(labels(&reader.check(&Silent).expect("check")), ["missing blob"]);
}

#[test]
fn hashing_reports_progress_per_blob() {
    struct Count(AtomicU64, AtomicU64);
    impl Progress for Count {
        fn begin(&self, label: &str, _: u64) {
            assert!(label.starts_with("verifying sha256-"), "{label}");
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn advance(&self, bytes: u64) {
            self.1.fetch_add(bytes, Ordering::Relaxed);
        }
        fn end(&self) {}
    }
    let fx = Broken::new();
    let a = fx.import("a");
    let b = fx.import("b");
    let count = Count(AtomicU64::new(0), AtomicU64::new(0));
    fx.store.check(&count).expect("check");
    assert_eq!(count.0.load(Ordering::Relaxed), 2);
    assert_eq!(count.1.load(Ordering::Relaxed), a.size + b.size);
}

#[test]
fn a_failed_manifest_write_never_leaves_a_manifest_without_its_blob() {
    // The order of an import: the blob is in place (renamed, directory synced) before the
    // manifest exists. Simulate a crash right after the rename: only an orphan remains.
    let fx = Broken::new();
    let source = fx.dir.path().join("c.gguf");
    GgufBuilder::llama_like().write_to(&source);
    let mut file = File::open(&source).expect("open");
    let partial = fx.store.write_partial(&mut file, &source, 0, &Silent).expect("partial");
    let blob = fx.blobs().join(format!("sha256-{}", partial.hex));
    fs::rename(&partial.path, &blob).expect("rename");
    std::mem::forget(partial);
    let fx = fx.reopen_for_check();
    assert_eq!(labels(&fx.check()), ["orphan blob"]);
    assert!(fx.store.list().expect("list").is_empty());
}

fn manifests_tree(store: &Store) -> &sled::Tree {
    &store.database.as_ref().expect("writable").manifests
}

fn db_of(store: &Store) -> &sled::Db {
    &store.database.as_ref().expect("writable").db
}
