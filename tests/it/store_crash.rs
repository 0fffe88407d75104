//! Crash safety of the model store, with the real binary and the real SmolLM2 GGUF:
//! `llamay import`, `cp` and `rm` are killed with SIGKILL at several moments (a bounded list),
//! then the store must be consistent. `llamay doctor` must exit 0, or report only what a crash
//! may leave (orphan blobs, temporary files, a lagging snapshot), which `doctor -repair`
//! removes; every listed model's blob must hash to its digest; and the killed command either
//! happened or did not (a name is registered with the right blob, or absent).
//!
//! Needs smollm2:135m in the store at `$LLAMAY_HOME` (scripts/setup imports it) as the large
//! file to import; the stores under test are temporary directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use llamay::store::{ModelName, Store};
use llamay_test_support::process::llamay_command;
use sha2::{Digest, Sha256};

/// Findings a crash may leave behind; anything else means the store was left inconsistent.
const LEFTOVER_LABELS: &[&str] = &["orphan blob", "temporary file", "stale manifests file"];
const OTHER_LABELS: &[&str] =
    &["missing blob", "damaged blob", "unreadable entry", "unknown tree", "unknown file"];

fn llamay(home: &Path) -> Command {
    let mut command = llamay_command();
    command.env("LLAMAY_HOME", home);
    command
}

fn name(text: &str) -> ModelName {
    ModelName::parse(text).expect("valid name")
}

/// The real SmolLM2 file, about 98 MB: large enough that a kill lands mid-copy.
fn real_model_file() -> (PathBuf, String) {
    let store = Store::open(&Store::default_home()).expect("the model store (scripts/setup)");
    let manifest = store.resolve(&name("smollm2:135m")).expect("smollm2:135m (scripts/setup)");
    (store.blob_path(&manifest), manifest.digest)
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn kill(mut child: Child) {
    // SIGKILL: no destructor, no flush, exactly a crash.
    let _ = child.kill();
    let _ = child.wait();
}

/// The store at `home` after a crash: doctor finds it consistent or only leftovers, repair
/// removes those, and every model listed has its blob with its sha256. Returns what doctor
/// first said, for the log.
fn assert_consistent_after_crash(home: &Path, moment: &str) -> String {
    let first = llamay(home).arg("doctor").output().expect("run doctor");
    let report = text(&first);
    for line in report.lines() {
        assert!(
            !OTHER_LABELS.iter().any(|label| line.starts_with(label)),
            "{moment}: doctor found damage, not just leftovers:\n{report}"
        );
    }
    let summary =
        report.lines().find(|l| l.starts_with("checked ")).unwrap_or_default().to_string();
    if !first.status.success() {
        assert!(
            report.lines().any(|l| LEFTOVER_LABELS.iter().any(|label| l.starts_with(label))),
            "{moment}: doctor failed without a finding:\n{report}"
        );
        let repair = llamay(home).args(["doctor", "-repair"]).output().expect("run repair");
        assert!(repair.status.success(), "{moment}: repair left something:\n{}", text(&repair));
        let again = llamay(home).arg("doctor").output().expect("run doctor");
        assert!(again.status.success(), "{moment}: not consistent after repair:\n{}", text(&again));
    }
    // Independently of doctor: every registered name's blob hashes to its digest.
    let store = Store::open(home).expect("reopen after the crash");
    for manifest in store.list().expect("list") {
        let bytes = std::fs::read(store.blob_path(&manifest)).expect("the blob of a listed model");
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        assert_eq!(actual, manifest.digest, "{moment}: {} has a wrong blob", manifest.name);
    }
    let visible: Vec<String> = std::fs::read_dir(home.join("blobs"))
        .expect("blobs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("sha256-"))
        .collect();
    assert!(visible.is_empty(), "{moment}: half-written files still visible: {visible:?}");
    summary
}

/// The digest `model` has in the store at `home`, if it is registered.
fn registered(home: &Path, model: &str) -> Option<String> {
    let store = Store::open(home).expect("open");
    store.resolve(&name(model)).ok().map(|m| m.digest)
}

fn import(home: &Path, file: &Path, model: &str) {
    let output = llamay(home).arg("import").arg(file).arg(model).output().expect("import");
    assert!(output.status.success(), "{}", text(&output));
}

/// When to kill an import: a delay after start, or a point in the copy seen on disk.
#[derive(Debug, Clone, Copy)]
enum Moment {
    After(Duration),
    /// When the partial file has this fraction of the source's bytes.
    Copied(f64),
    /// As soon as the blob has its final name (between the rename and the manifest).
    Renamed,
}

/// Waits for `moment` (bounded); false when the import ended first.
fn wait_for(moment: Moment, child: &mut Child, blobs: &Path, total: u64, hex: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    if let Moment::After(delay) = moment {
        std::thread::sleep(delay);
        return true;
    }
    while Instant::now() < deadline {
        if child.try_wait().expect("poll").is_some() {
            return false;
        }
        let reached = match moment {
            Moment::Copied(fraction) => std::fs::read_dir(blobs).ok().is_some_and(|entries| {
                entries.flatten().any(|e| {
                    e.file_name().to_string_lossy().starts_with(".partial-")
                        && e.metadata().is_ok_and(|m| m.len() as f64 >= fraction * total as f64)
                })
            }),
            Moment::Renamed => blobs.join(format!("sha256-{hex}")).exists(),
            Moment::After(_) => true,
        };
        if reached {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("{moment:?} was not reached within a minute");
}

#[test]
fn kill_9_during_import_leaves_a_consistent_store() {
    let (source, digest) = real_model_file();
    let total = std::fs::metadata(&source).expect("source").len();
    let hex = digest.trim_start_matches("sha256:").to_string();
    let moments = [
        Moment::After(Duration::ZERO),
        Moment::After(Duration::from_millis(15)),
        Moment::Copied(0.02),
        Moment::Copied(0.5),
        Moment::Copied(0.98),
        Moment::Renamed,
    ];
    let mut log = Vec::new();
    for moment in moments {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let mut child = llamay(&home)
            .arg("import")
            .arg(&source)
            .arg("smol:crash")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn import");
        let killed = wait_for(moment, &mut child, &home.join("blobs"), total, &hex);
        kill(child);
        let label =
            format!("import killed at {moment:?}{}", if killed { "" } else { " (had ended)" });
        if !home.join("blobs").exists() {
            log.push(format!("{label}: the store was not created yet"));
            continue;
        }
        let summary = assert_consistent_after_crash(&home, &label);
        // All or nothing: the name is absent or points at the whole file.
        let state = registered(&home, "smol:crash");
        assert!(state.is_none() || state.as_deref() == Some(digest.as_str()), "{label}: {state:?}");
        log.push(format!(
            "{label}: doctor said `{summary}`; model {}",
            if state.is_some() { "registered" } else { "absent" }
        ));
        // The store stays usable: the import can be done again.
        import(&home, &source, "smol:crash");
        assert_eq!(registered(&home, "smol:crash").as_deref(), Some(digest.as_str()));
    }
    println!("{}", log.join("\n"));
}

#[test]
fn kill_9_during_cp_and_rm_leaves_a_consistent_store() {
    let (source, digest) = real_model_file();
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    import(&home, &source, "smol:a");
    // Kill at fractions of how long a whole command takes here (start-up and the store's open
    // are most of it), so the kills spread over the command's life on a fast or a busy machine.
    let started = Instant::now();
    let output = llamay(&home).args(["cp", "smol:a", "smol:timed"]).output().expect("cp");
    assert!(output.status.success(), "{}", text(&output));
    let cp_time = started.elapsed();
    let started = Instant::now();
    let output = llamay(&home).args(["rm", "smol:timed"]).output().expect("rm");
    assert!(output.status.success(), "{}", text(&output));
    let rm_time = started.elapsed();
    let fractions = [0.0, 0.3, 0.5, 0.65, 0.8, 0.9, 0.95, 1.0];
    let mut log = vec![format!("a whole cp takes {cp_time:?}, a whole rm {rm_time:?}")];
    for (round, delay) in fractions.iter().map(|f| cp_time.mul_f64(*f)).enumerate() {
        let copy = format!("smol:copy{round}");
        let child = llamay(&home)
            .args(["cp", "smol:a", &copy])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cp");
        std::thread::sleep(delay);
        kill(child);
        let label = format!("cp killed after {delay:?}");
        let summary = assert_consistent_after_crash(&home, &label);
        let state = registered(&home, &copy);
        assert!(state.is_none() || state.as_deref() == Some(digest.as_str()), "{label}: {state:?}");
        assert_eq!(registered(&home, "smol:a").as_deref(), Some(digest.as_str()), "{label}");
        log.push(format!(
            "{label}: doctor said `{summary}`; copy {}",
            if state.is_some() { "made" } else { "absent" }
        ));
    }

    // rm of the only name of a blob: the manifest and the blob both go, in that order.
    let lone = tempfile::tempdir().expect("tempdir");
    let home = lone.path().join("home");
    for delay in fractions.iter().map(|f| rm_time.mul_f64(*f)) {
        if registered(&home, "smol:victim").is_none() {
            import(&home, &source, "smol:victim");
        }
        let child = llamay(&home)
            .args(["rm", "smol:victim"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rm");
        std::thread::sleep(delay);
        kill(child);
        let label = format!("rm killed after {delay:?}");
        let summary = assert_consistent_after_crash(&home, &label);
        let state = registered(&home, "smol:victim");
        assert!(state.is_none() || state.as_deref() == Some(digest.as_str()), "{label}: {state:?}");
        log.push(format!(
            "{label}: doctor said `{summary}`; model {}",
            if state.is_some() { "still there" } else { "removed" }
        ));
    }
    println!("{}", log.join("\n"));
}
