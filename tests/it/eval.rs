//! `llamay eval` as a user runs it (issue 11): the real binary and SmolLM2 from the store, in
//! this process (LLAMAY_ADDR points where no daemon answers). Fifty items with a schema give
//! fifty valid lines; a run killed with SIGKILL half way resumes without redoing what it wrote;
//! a greedy item answers what a plain greedy run of the whole prompt answers; bad input is named.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use llamay_test_support::daemon::Daemon;
use llamay_test_support::process::llamay_command;
use serde_json::Value;

fn llamay() -> Command {
    let mut command = llamay_command();
    // Nothing answers on port 1: eval loads the model itself.
    command.env("LLAMAY_ADDR", "127.0.0.1:1");
    command
}

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/eval")
        .join(name)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn eval_args(items: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["eval", "-m", "smollm2:135m", "-prefix"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(testdata("prefix.txt").display().to_string());
    args.extend([
        "-items".into(),
        items.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn whole_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or(0, |at| at + 1);
    text[..whole].lines().map(str::to_string).collect()
}

fn item_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("items")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("item JSON")["id"].to_string())
        .collect()
}

#[test]
fn fifty_items_with_a_schema_survive_a_kill_and_finish_without_redoing_the_first_half() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results.jsonl");
    let items = testdata("items.jsonl");
    let schema_path = testdata("schema.json");
    let schema_flag = schema_path.display().to_string();
    let args = eval_args(
        &items,
        &out,
        &["-schema", &schema_flag, "-n", "24", "-parallel", "2"],
    );

    let mut child = llamay()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eval starts");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if whole_lines(&out).len() >= 25 {
            break;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!(
                "eval ended ({status}) before 25 lines: {}",
                stderr(&child.wait_with_output().expect("output"))
            );
        }
        assert!(Instant::now() < deadline, "no 25 lines in 10 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let before = whole_lines(&out);
    assert!(
        before.len() < 50,
        "the kill came after the end: {} lines",
        before.len()
    );

    let rerun = llamay().args(&args).output().expect("eval reruns");
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let err = stderr(&rerun);
    assert!(
        err.contains(&format!("{} of 50 items already in", before.len())),
        "{err}"
    );
    let summary = String::from_utf8_lossy(&rerun.stdout).into_owned();
    assert!(
        summary.contains(&format!("eval: {} items in", 50 - before.len())),
        "{summary}"
    );
    assert!(summary.contains("prompt tokens reused"), "{summary}");

    let after = whole_lines(&out);
    let text = std::fs::read_to_string(&out).expect("results");
    assert!(text.ends_with('\n'), "the file ends with a whole line");
    assert_eq!(after.len(), 50, "{text}");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the lines written before the kill are unchanged"
    );

    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).expect("schema"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("valid JSON Schema");
    let mut seen = HashSet::new();
    for line in &after {
        let result: Value = serde_json::from_str(line).expect("a result line is JSON");
        assert!(
            seen.insert(result["id"].to_string()),
            "id {} repeated",
            result["id"]
        );
        let output = result["output"].as_str().expect("output");
        let answer: Value =
            serde_json::from_str(output).unwrap_or_else(|e| panic!("{output:?} is not JSON: {e}"));
        assert!(validator.is_valid(&answer), "{output} breaks the schema");
        assert!(result["tokens"].as_u64().is_some_and(|t| t > 0), "{line}");
        assert!(
            result["cached_tokens"].as_u64().is_some_and(|t| t > 0),
            "the prefix was reused: {line}"
        );
    }
    let expected: HashSet<String> = item_ids(&items).into_iter().collect();
    assert_eq!(seen, expected);
}

#[test]
fn a_greedy_item_answers_what_a_greedy_run_of_the_whole_prompt_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let items = dir.path().join("items.jsonl");
    let prompts = [
        "Q: Is a horse a mammal?\nA:",
        "Q: Name a mammal that flies.\nA:",
        "Q: Is a frog a mammal?\nA:",
    ];
    let lines: Vec<String> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| serde_json::json!({"id": i, "prompt": p}).to_string())
        .collect();
    std::fs::write(&items, lines.join("\n")).expect("items");
    let out = dir.path().join("results.jsonl");
    let evaluated = llamay()
        .args(eval_args(
            &items,
            &out,
            &[
                "-temp",
                "0",
                "-n",
                "16",
                "-parallel",
                "1",
                "-kv",
                "f32",
                "-t",
                "1",
            ],
        ))
        .output()
        .expect("eval runs");
    assert!(evaluated.status.success(), "{}", stderr(&evaluated));
    let prefix = std::fs::read_to_string(testdata("prefix.txt")).expect("prefix");
    let mut answered = 0;
    for line in whole_lines(&out) {
        let result: Value = serde_json::from_str(&line).expect("result");
        let index = result["id"].as_u64().expect("id") as usize;
        let output = result["output"].as_str().expect("output");
        let full = format!("{prefix}{}", prompts[index]);
        let plain = llamay()
            .args([
                "run",
                "-m",
                "smollm2:135m",
                "-p",
                &full,
                "-temp",
                "0",
                "-n",
                "16",
                "-kv",
                "f32",
                "-t",
                "1",
            ])
            .output()
            .expect("run");
        assert!(plain.status.success(), "{}", stderr(&plain));
        let printed = String::from_utf8_lossy(&plain.stdout).into_owned();
        // `run` ends its output with a newline when the answer does not.
        let expected = printed
            .strip_suffix('\n')
            .filter(|_| !output.ends_with('\n'))
            .unwrap_or(&printed);
        assert_eq!(output, expected, "item {index}");
        assert!(
            result["cached_tokens"].as_u64().is_some_and(|t| t > 0),
            "{line}"
        );
        answered += 1;
    }
    assert_eq!(answered, prompts.len());
}

fn assert_fails_with(output: &Output, needle: &str) {
    let err = stderr(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected exit 1; stderr: {err}"
    );
    assert!(
        err.contains(needle),
        "stderr should mention {needle:?}: {err}"
    );
    assert!(!err.contains("panicked"), "a panic: {err}");
}

#[test]
fn bad_input_is_named_before_the_model_loads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results.jsonl");
    let missing = dir.path().join("nope.jsonl");
    let output = llamay()
        .args(eval_args(&missing, &out, &[]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "nope.jsonl");

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"id\": 1, \"prompt\": \"a\"}\n{\"id\": 2, \"prompt\": \n",
    )
    .expect("write");
    let output = llamay()
        .args(eval_args(&bad, &out, &[]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "bad.jsonl:2: not JSON");

    let twice = dir.path().join("twice.jsonl");
    std::fs::write(
        &twice,
        "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}\n",
    )
    .expect("write");
    let output = llamay()
        .args(eval_args(&twice, &out, &[]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "twice.jsonl:2: id \"a\" repeats the id of line 1");

    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(&corrupt, "{\"id\": 1}\nnot a result\n{\"id\": 2}\n").expect("write");
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, "{\"id\": 1, \"prompt\": \"x\"}\n").expect("write");
    let output = llamay()
        .args(eval_args(&good, &corrupt, &[]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "corrupt.jsonl:2: not a result line");
    assert!(!out.exists(), "nothing was written for bad input");
}

#[test]
fn with_a_daemon_running_eval_uses_its_contexts_and_leaves_none_behind() {
    let daemon = Daemon::builder()
        .model("smollm2:135m")
        .args(["-parallel", "3", "-context", "2048", "-t", "1"])
        .start();
    let dir = tempfile::tempdir().expect("temp dir");
    let items = dir.path().join("items.jsonl");
    let lines: Vec<String> = ["horse", "frog", "bat", "trout"]
        .iter()
        .enumerate()
        .map(|(i, animal)| {
            serde_json::json!({"id": i, "messages": [{"role": "user", "content": format!("Is a {animal} a mammal? Answer in JSON.")}]})
                .to_string()
        })
        .collect();
    std::fs::write(&items, lines.join("\n")).expect("items");
    let out = dir.path().join("results.jsonl");
    let evaluated = llamay()
        .env("LLAMAY_ADDR", daemon.addr())
        .args(eval_args(
            &items,
            &out,
            &["-json", "-n", "24", "-parallel", "2"],
        ))
        .output()
        .expect("eval runs");
    assert!(evaluated.status.success(), "{}", stderr(&evaluated));
    assert!(
        stderr(&evaluated).contains("on the running daemon"),
        "{}",
        stderr(&evaluated)
    );
    let summary = String::from_utf8_lossy(&evaluated.stdout).into_owned();
    let reused: u64 = summary
        .trim_end()
        .split(", ")
        .find_map(|part| part.strip_suffix(" prompt tokens reused"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no reuse count in {summary:?}"));
    assert!(reused > 0, "{summary}");
    let results = whole_lines(&out);
    assert_eq!(results.len(), 4);
    for line in &results {
        let result: Value = serde_json::from_str(line).expect("result");
        let output = result["output"].as_str().expect("output");
        let answer = serde_json::from_str::<Value>(output);
        // -json holds until the budget: a cut answer is a prefix of JSON, a finished one parses.
        if result["finish_reason"] == "stop" {
            assert!(answer.is_ok(), "{output:?}");
        }
        assert!(result["tokens"].as_u64().is_some_and(|t| t > 0), "{line}");
    }
    let (_, left) = daemon.get("/v1/contexts");
    assert_eq!(
        left["data"].as_array().map(Vec::len),
        Some(0),
        "eval deletes its contexts: {left}"
    );
}
