//! Store tests on a real sled database in a temporary directory, with synthetic GGUF files.

mod doctor;

use super::*;
use crate::gguf::testing::GgufBuilder;
use sha2::{Digest, Sha256};

struct Fixture {
    dir: tempfile::TempDir,
    store: Store,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("home")).expect("open store");
        Fixture { dir, store }
    }

    /// Writes a synthetic model file outside the store and returns its path.
    fn model_file(&self, file: &str, builder: &GgufBuilder) -> PathBuf {
        let path = self.dir.path().join(file);
        builder.write_to(&path);
        path
    }

    fn blob_files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.store.home().join("blobs"))
            .expect("blobs dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

fn db(store: &Store) -> &sled::Db {
    &store.database.as_ref().expect("a writable store").db
}

fn manifests(store: &Store) -> &sled::Tree {
    &store.database.as_ref().expect("a writable store").manifests
}

fn name(text: &str) -> ModelName {
    ModelName::parse(text).expect("valid name")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn import_registers_a_content_addressed_blob_and_its_facts() {
    let fx = Fixture::new();
    let builder = GgufBuilder::llama_like();
    let source = fx.model_file("tiny.gguf", &builder);
    let before = unix_now();
    let manifest = fx.store.import_file(&source, &name("tiny:1b")).expect("import");

    let bytes = builder.build();
    let hex = sha256_hex(&bytes);
    assert_eq!(manifest.digest, format!("sha256:{hex}"));
    assert_eq!(manifest.short_id(), hex[..12]);
    assert_eq!(manifest.size, bytes.len() as u64);
    assert_eq!(manifest.facts.architecture, "llama");
    assert_eq!(manifest.facts.quantization, "Q4_1");
    assert!(manifest.facts.has_chat_template);
    assert!(manifest.added_at >= before && manifest.added_at <= unix_now());

    let blob = fx.store.blob_path(&manifest);
    assert_eq!(blob, fx.store.home().join("blobs").join(format!("sha256-{hex}")));
    assert_eq!(fs::read(&blob).expect("blob"), bytes);
    assert_eq!(fx.store.resolve(&name("tiny:1b")).expect("resolve"), manifest);
    assert_eq!(fx.store.list().expect("list"), vec![manifest]);
    assert_eq!(fx.blob_files(), vec![format!("sha256-{hex}")]);
}

#[test]
fn manifests_survive_reopening_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let source = dir.path().join("m.gguf");
    GgufBuilder::llama_like().write_to(&source);
    let manifest = {
        let store = Store::open(&home).expect("open");
        store.import_file(&source, &name("m")).expect("import")
    };
    let store = Store::open(&home).expect("reopen");
    assert_eq!(store.resolve(&name("m:latest")).expect("resolve"), manifest);
    assert!(store.blob_path(&manifest).is_file());
    assert_eq!(migrate::stored_version(db(&store)).expect("version"), migrate::current_version());
}

#[test]
fn resolving_an_unknown_name_is_not_found() {
    let fx = Fixture::new();
    match fx.store.resolve(&name("ghost:7b")) {
        Err(error @ StoreError::NotFound { .. }) => {
            assert!(error.to_string().contains("'ghost:7b' is not in the store"), "{error}")
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(fx.store.remove(&name("ghost")), Err(StoreError::NotFound { .. })));
    assert!(matches!(
        fx.store.copy(&name("ghost"), &name("other")),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn same_content_shares_one_blob_and_removal_keeps_it_until_the_last_name_goes() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let first = fx.store.import_file(&source, &name("first")).expect("import");
    let second = fx.store.import_file(&source, &name("second")).expect("import");
    assert_eq!(first.digest, second.digest);
    assert_eq!(fx.blob_files().len(), 1);

    fx.store.remove(&name("first")).expect("remove");
    assert!(matches!(fx.store.resolve(&name("first")), Err(StoreError::NotFound { .. })));
    assert!(fx.store.blob_path(&second).is_file(), "blob still used by 'second'");

    fx.store.remove(&name("second")).expect("remove");
    assert!(fx.blob_files().is_empty());
    assert!(fx.store.list().expect("list").is_empty());
}

#[test]
fn reimporting_a_name_with_new_content_replaces_it_and_frees_the_old_blob() {
    let fx = Fixture::new();
    let old = fx
        .store
        .import_file(&fx.model_file("old.gguf", &GgufBuilder::llama_like()), &name("m"))
        .expect("old");
    let new_builder = GgufBuilder::llama_like().fill(0x22);
    let new =
        fx.store.import_file(&fx.model_file("new.gguf", &new_builder), &name("m")).expect("new");
    assert_ne!(old.digest, new.digest);
    assert_eq!(fx.store.list().expect("list"), vec![new.clone()]);
    assert!(!fx.store.blob_path(&old).exists());
    assert_eq!(fx.blob_files(), vec![format!("sha256-{}", new.digest_hex())]);
}

#[test]
fn copy_adds_a_name_for_the_same_blob() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let original = fx.store.import_file(&source, &name("base:v1")).expect("import");
    let copy = fx.store.copy(&name("base:v1"), &name("mine")).expect("copy");
    assert_eq!(copy.name, name("mine:latest"));
    assert_eq!((copy.digest.as_str(), copy.size), (original.digest.as_str(), original.size));
    assert_eq!(copy.facts, original.facts);
    assert_eq!(fx.store.resolve(&name("mine")).expect("resolve"), copy);
    assert_eq!(fx.store.list().expect("list").len(), 2);
    assert_eq!(fx.blob_files().len(), 1);

    // Removing the original keeps the blob for the copy.
    fx.store.remove(&name("base:v1")).expect("remove");
    assert!(fx.store.blob_path(&copy).is_file());
    // Copying onto itself changes nothing.
    assert_eq!(fx.store.copy(&name("mine"), &name("mine")).expect("self copy"), copy);
}

#[test]
fn copy_over_an_existing_name_frees_the_blob_it_displaced() {
    let fx = Fixture::new();
    let a = fx
        .store
        .import_file(&fx.model_file("a.gguf", &GgufBuilder::llama_like()), &name("a"))
        .expect("a");
    let b = fx
        .store
        .import_file(&fx.model_file("b.gguf", &GgufBuilder::llama_like().fill(7)), &name("b"))
        .expect("b");
    fx.store.copy(&name("a"), &name("b")).expect("copy");
    assert!(!fx.store.blob_path(&b).exists());
    assert_eq!(fx.blob_files(), vec![format!("sha256-{}", a.digest_hex())]);
}

#[test]
fn list_is_newest_first() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let mut older = fx.store.import_file(&source, &name("older")).expect("import");
    older.added_at -= 3600;
    fx.store.put_manifest(&older).expect("backdate");
    fx.store.import_file(&source, &name("newer")).expect("import");
    let names: Vec<String> =
        fx.store.list().expect("list").iter().map(|m| m.name.to_string()).collect();
    assert_eq!(names, ["newer:latest", "older:latest"]);
    let table = render_list_table(&fx.store.list().expect("list"), unix_now());
    assert!(
        table
            .lines()
            .nth(2)
            .is_some_and(|l| l.contains("older:latest") && l.contains("About an hour ago")),
        "{table}"
    );
}

#[test]
fn non_gguf_and_truncated_imports_leave_nothing_behind() {
    let fx = Fixture::new();
    let text = fx.dir.path().join("notes.txt");
    fs::write(&text, "just some text, long enough to look like a file").expect("write");
    match fx.store.import_file(&text, &name("notes")) {
        Err(error @ StoreError::NotGguf { .. }) => {
            assert!(error.to_string().contains("not a GGUF file"), "{error}")
        }
        other => panic!("expected NotGguf, got {other:?}"),
    }

    let mut cut = GgufBuilder::llama_like().build();
    cut.truncate(cut.len() / 2);
    let truncated = fx.dir.path().join("cut.gguf");
    fs::write(&truncated, &cut).expect("write");
    match fx.store.import_file(&truncated, &name("cut")) {
        Err(error @ StoreError::NotGguf { .. }) => {
            assert!(error.to_string().contains("truncated"), "{error}")
        }
        other => panic!("expected NotGguf, got {other:?}"),
    }

    let missing = fx.dir.path().join("missing.gguf");
    assert!(
        matches!(fx.store.import_file(&missing, &name("x")), Err(StoreError::MissingFile { path }) if path == missing)
    );

    assert!(fx.store.list().expect("list").is_empty());
    assert!(fx.blob_files().is_empty());
}

/// Yields `limit` bytes of a real file, then fails like a disk or network error would.
struct FailingReader {
    inner: File,
    left: usize,
}

impl Read for FailingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other("device went away"));
        }
        let want = buf.len().min(self.left);
        let read = self.inner.read(&mut buf[..want])?;
        self.left -= read;
        Ok(read)
    }
}

#[test]
fn a_copy_that_fails_midway_leaves_no_partial_file() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let mut reader = FailingReader { inner: File::open(&source).expect("open"), left: 100 };
    match fx.store.write_partial(&mut reader, &source, 0, &Silent) {
        Err(error @ StoreError::Io { .. }) => {
            assert!(error.to_string().contains("device went away"), "{error}")
        }
        Err(other) => panic!("expected Io, got {other:?}"),
        Ok(_) => panic!("a failing read must not produce a blob"),
    }
    assert!(fx.blob_files().is_empty(), "{:?}", fx.blob_files());
    assert!(fx.store.list().expect("list").is_empty());
}

#[test]
fn open_sweeps_partial_files_and_orphaned_blobs_but_keeps_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let source = dir.path().join("a.gguf");
    GgufBuilder::llama_like().write_to(&source);
    let kept = {
        let store = Store::open(&home).expect("open");
        store.import_file(&source, &name("kept")).expect("import")
    };
    let blobs = home.join("blobs");
    fs::write(blobs.join(".partial-1-2-3"), b"half a download").expect("write");
    fs::write(blobs.join(format!("sha256-{}", "0".repeat(64))), b"orphan").expect("write");
    fs::write(blobs.join("README"), b"not ours").expect("write");

    let store = Store::open(&home).expect("reopen");
    let mut left: Vec<String> = fs::read_dir(&blobs)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["README".to_string(), format!("sha256-{}", kept.digest_hex())]);
    assert!(store.resolve(&name("kept")).is_ok());
}

#[test]
fn a_store_written_by_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    {
        let store = Store::open(&home).expect("open");
        migrate::write_version(db(&store), migrate::current_version() + 1).expect("stamp");
    }
    match Store::open(&home) {
        Err(error @ StoreError::NewerStore { .. }) => {
            let message = error.to_string();
            assert!(message.contains("newer llamay"), "{message}");
            assert!(
                message.contains(&format!("schema version {}", migrate::current_version() + 1)),
                "{message}"
            );
        }
        other => panic!("expected NewerStore, got {other:?}"),
    }
}

#[test]
fn a_fresh_store_is_at_the_current_schema_version() {
    let fx = Fixture::new();
    assert_eq!(
        migrate::stored_version(db(&fx.store)).expect("version"),
        migrate::current_version()
    );
    assert!(db(&fx.store).tree_names().iter().any(|t| t.as_ref() == MANIFESTS_TREE.as_bytes()));
}

#[test]
fn a_store_home_that_cannot_be_a_directory_is_not_writable() {
    // Tests run as root, where permission bits do not stop writes; a path beneath a regular
    // file fails for every user, so it stands in for an unwritable directory.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    fs::write(&file, b"x").expect("write");
    let home = file.join("home");
    match Store::open(&home) {
        Err(error @ StoreError::NotWritable { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("not writable") && message.contains("LLAMAY_HOME"),
                "{message}"
            );
        }
        other => panic!("expected NotWritable, got {other:?}"),
    }
    // Same when only blobs/ is blocked.
    let home = dir.path().join("home");
    fs::create_dir(&home).expect("mkdir");
    fs::write(home.join("blobs"), b"x").expect("write");
    assert!(matches!(Store::open(&home), Err(StoreError::NotWritable { .. })));
}

#[test]
fn a_read_only_directory_is_not_writable_for_other_users() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    fs::create_dir(&home).expect("mkdir");
    fs::set_permissions(&home, fs::Permissions::from_mode(0o500)).expect("chmod");
    let writes_anyway = File::create(home.join("probe")).is_ok();
    if writes_anyway {
        println!(
            "skipped: this user (root) writes through permission bits; see the regular-file test"
        );
    } else {
        assert!(matches!(Store::open(&home), Err(StoreError::NotWritable { .. })));
    }
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).expect("chmod back");
}

#[test]
fn a_second_open_reads_the_snapshot_and_refuses_changes() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let manifest = fx.store.import_file(&source, &name("a")).expect("import");

    let reader = Store::open(fx.store.home()).expect("read-only open while the owner is live");
    assert!(reader.is_read_only() && !fx.store.is_read_only());
    assert_eq!(reader.resolve(&name("a")).expect("resolve"), manifest);
    assert_eq!(reader.list().expect("list"), fx.store.list().expect("list"));
    assert!(reader.blob_path(&manifest).is_file());
    assert!(matches!(reader.resolve(&name("zzz")), Err(StoreError::NotFound { .. })));
    for refused in [
        reader.import_file(&source, &name("b")).map(|_| ()),
        reader.remove(&name("a")),
        reader.copy(&name("a"), &name("c")).map(|_| ()),
    ] {
        match refused {
            Err(error @ StoreError::Locked { .. }) => {
                assert!(error.to_string().contains("in use by another llamay process"), "{error}")
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    }
    assert_eq!(fx.blob_files().len(), 1, "a refused import copies nothing");

    // The reader follows the owner's later changes.
    let copy = fx.store.copy(&name("a"), &name("c")).expect("copy");
    assert_eq!(reader.resolve(&name("c")).expect("resolve the copy"), copy);
    fx.store.remove(&name("a")).expect("remove");
    assert!(matches!(reader.resolve(&name("a")), Err(StoreError::NotFound { .. })));

    // Once the owner is gone, the next open owns the database again.
    let home = fx.store.home().to_path_buf();
    drop(reader);
    drop(fx.store);
    assert!(!Store::open(&home).expect("reopen").is_read_only());
}

#[test]
fn a_locked_store_without_a_snapshot_is_refused_as_in_use() {
    let fx = Fixture::new();
    fs::remove_file(fx.store.home().join("manifests.json")).expect("snapshot written at open");
    match Store::open(fx.store.home()) {
        Err(StoreError::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn a_snapshot_from_a_newer_store_or_with_bad_entries_is_refused() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    fx.store.import_file(&source, &name("a")).expect("import");
    let snapshot_path = fx.store.home().join("manifests.json");
    let original = fs::read_to_string(&snapshot_path).expect("snapshot");

    let mut json: serde_json::Value = serde_json::from_str(&original).expect("json");
    json["schema_version"] = serde_json::json!(migrate::current_version() + 1);
    fs::write(&snapshot_path, json.to_string()).expect("write");
    assert!(matches!(Store::open(fx.store.home()), Err(StoreError::NewerStore { .. })));

    let mut json: serde_json::Value = serde_json::from_str(&original).expect("json");
    json["manifests"][0]["digest"] = serde_json::json!("sha256:../../../etc/passwd");
    fs::write(&snapshot_path, json.to_string()).expect("write");
    assert!(matches!(Store::open(fx.store.home()), Err(StoreError::Corrupt { .. })));

    fs::write(&snapshot_path, b"{ half a file").expect("write");
    assert!(matches!(Store::open(fx.store.home()), Err(StoreError::Corrupt { .. })));
}

#[test]
fn corrupt_manifests_are_reported_not_trusted() {
    let fx = Fixture::new();
    manifests(&fx.store).insert("bad:latest", b"{not json".as_ref()).expect("insert");
    assert!(matches!(fx.store.resolve(&name("bad")), Err(StoreError::Corrupt { .. })));
    manifests(&fx.store).remove("bad:latest").expect("remove");

    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let mut manifest = fx.store.import_file(&source, &name("good")).expect("import");
    manifest.digest = "sha256:../../etc/passwd".into();
    let bytes = serde_json::to_vec(&manifest).expect("json");
    manifests(&fx.store).insert("good:latest", bytes).expect("insert");
    assert!(matches!(fx.store.resolve(&name("good")), Err(StoreError::Corrupt { .. })));
    assert_eq!(fx.store.blob_path(&manifest), fx.store.home().join("blobs").join("sha256-invalid"));
}

#[test]
fn model_path_resolves_names_to_blobs_and_passes_paths_through() {
    let fx = Fixture::new();
    let source = fx.model_file("a.gguf", &GgufBuilder::llama_like());
    let manifest = fx.store.import_file(&source, &name("a")).expect("import");
    let by_name = ModelRef::parse("a").expect("name");
    assert_eq!(fx.store.model_path(&by_name).expect("path"), fx.store.blob_path(&manifest));
    let by_path = ModelRef::parse(source.to_str().expect("utf-8")).expect("path");
    assert_eq!(fx.store.model_path(&by_path).expect("path"), source);
}

#[test]
fn gguf_facts_of_real_models_in_the_store() {
    let Some(home) = crate::environment::environment().llamay_home() else {
        println!(
            "skipped: {HOME_ENV} is not set, so there is no store with the real models to read"
        );
        return;
    };
    let store = Store::open(Path::new(&home)).expect("open the store at LLAMAY_HOME");
    let expect =
        [("smollm2:135m", "llama", "Q4_1", true), ("gemma3:270m", "gemma3", "Q4_K_M", false)];
    for (model, architecture, quantization, has_template) in expect {
        let manifest = store
            .resolve(&name(model))
            .unwrap_or_else(|e| panic!("{e}; scripts/setup imports {model} into {HOME_ENV}"));
        let blob = store.blob_path(&manifest);
        assert_eq!(fs::metadata(&blob).expect("blob").len(), manifest.size);
        // Read the blob again rather than trusting the manifest's copy of the facts.
        let facts = read_gguf_facts(&blob).expect("real model parses");
        // Facts recorded before `embedding` was read lack it; the catalog reads it from the blob.
        let recorded = GgufFacts { embedding: manifest.facts.embedding.or(facts.embedding), ..manifest.facts.clone() };
        assert_eq!(facts, recorded);
        assert_eq!(facts.embedding, Some(false), "{model} is a chat model");
        assert_eq!(facts.architecture, architecture);
        assert_eq!(facts.quantization, quantization);
        assert_eq!(facts.has_chat_template, has_template);
        assert!(facts.parameter_count > 100_000_000, "{model}: {}", facts.parameter_count);
        assert!(
            facts.context_length.is_some_and(|c| c >= 8192),
            "{model}: {:?}",
            facts.context_length
        );
    }
}

#[test]
fn the_store_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
}

/// A smoke test of shared use: unique partial names, shared blobs, counts. The race the commit
/// lock closes (a removal deleting a blob a concurrent import is about to reuse) has a window of
/// microseconds, which this test does not reliably hit.
#[test]
fn concurrent_imports_and_removals_keep_names_and_blobs_consistent() {
    let fx = Fixture::new();
    let source = fx.model_file("shared.gguf", &GgufBuilder::llama_like());
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let (store, source) = (&fx.store, &source);
            scope.spawn(move || {
                for round in 0..10 {
                    let own = name(&format!("w{worker}:r{round}"));
                    store.import_file(source, &own).expect("import");
                    if round % 2 == 0 {
                        store.remove(&own).expect("remove");
                    }
                }
            });
        }
    });
    let listed = fx.store.list().expect("list");
    assert_eq!(listed.len(), 4 * 5);
    for manifest in &listed {
        assert!(fx.store.blob_path(manifest).is_file(), "{} lost its blob", manifest.name);
    }
    assert_eq!(fx.blob_files().len(), 1, "{:?}", fx.blob_files());
}

#[test]
fn a_full_disk_is_its_own_error_and_says_nothing_was_kept() {
    let full = StoreError::io("write /store/blobs/.partial-1")(io::Error::from_raw_os_error(libc::ENOSPC));
    assert!(matches!(full, StoreError::DiskFull { .. }), "{full}");
    let message = full.to_string();
    assert!(message.contains("full") && message.contains("partial copy was deleted"), "{message}");
    assert!(!message.contains("resume"), "{message}");
    let quota = StoreError::db("write a manifest")(sled::Error::Io(io::Error::from_raw_os_error(libc::EDQUOT)));
    assert!(matches!(quota, StoreError::DiskFull { .. }), "{quota}");
    let other = StoreError::io("write x")(io::Error::from_raw_os_error(libc::EIO));
    assert!(matches!(other, StoreError::Io { .. }), "{other}");
}
