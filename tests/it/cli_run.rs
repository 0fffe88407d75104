//! `llamay run`, `import` and `list` as a user runs them: the real binary, the real models from
//! the store (scripts/setup imports them), and every bad input from the foundation issue.

use std::path::PathBuf;
use std::process::Output;

use llamay_test_support::process::llamay_command as llamay;

fn run(args: &[&str]) -> Output {
    llamay().args(args).output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Fails with the command's output, so a red test says what the binary printed.
fn assert_fails_with(output: &Output, needle: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(1), "expected exit 1; stderr: {err}");
    assert!(err.contains(needle), "stderr should mention {needle:?}: {err}");
    assert!(!err.contains("panicked"), "a panic: {err}");
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn chat_with_stats_prints_text_then_the_stats_line() {
    let output = run(&["run", "-m", "smollm2:135m", "-chat", "-n", "40", "-p", "Name three colours.", "-stats", "-t", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stdout(&output).trim().is_empty());
    let err = stderr(&output);
    let line = err.lines().find(|l| l.starts_with("prompt ")).unwrap_or_else(|| panic!("no stats line: {err}"));
    let shape = regex_lite(line);
    assert!(shape, "stats line shape: {line}");
}

/// `prompt 25 tokens in 175ms (142.5 tok/s) · generated 90 in 7.357s (12.2 tok/s) · stop: length`
fn regex_lite(line: &str) -> bool {
    let parts: Vec<&str> = line.split(" · ").collect();
    parts.len() == 3
        && parts[0].starts_with("prompt ")
        && parts[0].contains(" tokens in ")
        && parts[0].ends_with(" tok/s)")
        && parts[1].starts_with("generated ")
        && parts[1].ends_with(" tok/s)")
        && ["stop: eog", "stop: length", "stop: stop"].contains(&parts[2])
}

#[test]
fn temperature_zero_is_deterministic() {
    let args = ["run", "-m", "smollm2:135m", "-chat", "-n", "24", "-p", "Say something about rivers.", "-temp", "0", "-t", "1"];
    let first = run(&args);
    let second = run(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first), stdout(&second));
}

#[test]
fn the_same_seed_gives_the_same_sample_and_another_seed_usually_differs() {
    let with_seed = |seed: &str| {
        let output = run(&["run", "-m", "smollm2:135m", "-chat", "-n", "24", "-p", "Invent a word.", "-temp", "1.2", "-seed", seed, "-t", "1"]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    assert_eq!(with_seed("42"), with_seed("42"));
    let others: Vec<String> = ["1", "2", "3"].iter().map(|s| with_seed(s)).collect();
    assert!(others.iter().any(|o| *o != with_seed("42")), "three other seeds all gave the same text");
}

#[test]
fn a_base_model_continues_plain_text() {
    let output = run(&["run", "-m", "gemma3:270m", "-n", "20", "-p", "The capital of France is", "-temp", "0", "-t", "1", "-stats"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.split_whitespace().count() >= 3, "gemma's continuation: {text}");
    // No chat template: the continuation is plain text, not a turn marker.
    assert!(!text.contains("<start_of_turn>"), "{text}");
    let err = stderr(&output);
    assert!(err.contains("generated 20 in") || err.contains("stop: eog"), "{err}");
}

#[test]
fn the_prompt_can_come_from_stdin() {
    use std::io::Write;
    let mut child = llamay()
        .args(["run", "-m", "smollm2:135m", "-n", "5", "-temp", "0", "-t", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(b"Once upon a time").expect("write");
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stdout(&output).trim().is_empty());
}

#[test]
fn a_model_name_not_in_the_store_is_refused() {
    let home = temp_dir();
    let output = llamay().env("LLAMAY_HOME", home.path()).args(["run", "-m", "nosuch:model", "-p", "hi"]).output().unwrap();
    assert_fails_with(&output, "nosuch:model");
}

#[test]
fn a_path_that_does_not_exist_is_refused() {
    let output = run(&["run", "-m", "/nonexistent/dir/model.gguf", "-p", "hi"]);
    assert_fails_with(&output, "/nonexistent/dir/model.gguf");
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let dir = temp_dir();
    let path = dir.path().join("notes.gguf");
    std::fs::write(&path, b"this is plain text, not a model").unwrap();
    let output = run(&["run", "-m", path.to_str().unwrap(), "-p", "hi"]);
    assert_fails_with(&output, "GGUF");
}

fn smollm2_blob() -> PathBuf {
    let store = llamay::store::Store::open(&llamay::store::Store::default_home()).expect("store");
    let name = llamay::store::ModelName::parse("smollm2:135m").unwrap();
    let manifest = store.resolve(&name).expect("smollm2:135m imported by scripts/setup");
    store.blob_path(&manifest)
}

#[test]
fn a_truncated_model_is_refused() {
    let dir = temp_dir();
    let path = dir.path().join("cut.gguf");
    let bytes = std::fs::read(smollm2_blob()).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let output = run(&["run", "-m", path.to_str().unwrap(), "-p", "hi"]);
    assert_fails_with(&output, "truncated");
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let prompt = "word ".repeat(400);
    let output = run(&["run", "-m", "smollm2:135m", "-c", "64", "-p", &prompt, "-t", "1"]);
    assert_fails_with(&output, "context");
}

#[test]
fn zero_or_negative_counts_are_refused() {
    assert_fails_with(&run(&["run", "-m", "smollm2:135m", "-p", "hi", "-n", "0"]), "-n must be a positive number");
    assert_fails_with(&run(&["run", "-m", "smollm2:135m", "-p", "hi", "-n", "-5"]), "-n must be a positive number");
    assert_fails_with(&run(&["run", "-m", "smollm2:135m", "-p", "hi", "-t", "0"]), "-t must be a positive number");
    assert_fails_with(&run(&["run", "-m", "smollm2:135m", "-p", "hi", "-c", "-1"]), "-c must be a positive number");
}

#[test]
fn invalid_store_names_are_refused_on_import() {
    let home = temp_dir();
    for bad in ["../escape", "a/b", "", "name:"] {
        let output = llamay().env("LLAMAY_HOME", home.path()).args(["import", "whatever.gguf", bad]).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{bad:?} was accepted: {}", stderr(&output));
        assert!(!stderr(&output).contains("panicked"));
    }
}

#[test]
fn a_store_that_cannot_be_written_is_refused() {
    // Root ignores permission bits, so the store home is put under a regular file.
    let dir = temp_dir();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let output = llamay().env("LLAMAY_HOME", file.join("store")).args(["list"]).output().unwrap();
    assert_fails_with(&output, "store");
}

#[test]
fn import_then_list_shows_the_model() {
    let home = temp_dir();
    let output = llamay()
        .env("LLAMAY_HOME", home.path())
        .args(["import", smollm2_blob().to_str().unwrap(), "tiny:test"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let listed = llamay().env("LLAMAY_HOME", home.path()).args(["list"]).output().unwrap();
    let table = stdout(&listed);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("tiny:test") && table.contains("b179c9523d0e") && table.contains("98 MB"), "{table}");
}

#[test]
fn schema_check_enforces_pattern_properties() {
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/schemas/pattern-properties.json");
    let valid = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/schemas/pattern-properties.valid.json");
    let invalid = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/schemas/pattern-properties.invalid.json");
    let accepted = run(&["schema", "check", schema, valid]);
    assert!(accepted.status.success(), "{}{}", stdout(&accepted), stderr(&accepted));
    let report = stdout(&accepted);
    assert!(report.contains("patternProperties") && report.contains("matches"), "{report}");
    assert!(!report.contains("refused"), "{report}");
    let rejected = run(&["schema", "check", schema, invalid]);
    assert_eq!(rejected.status.code(), Some(1), "{}", stdout(&rejected));
    assert!(stdout(&rejected).contains("does not match at byte"), "{}", stdout(&rejected));
}
