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

/// Starts eval with `args`, kills it (SIGKILL) once `out` holds `lines` whole lines, and
/// returns the lines it wrote, fewer than the `total` items.
fn killed_after(args: &[String], out: &Path, lines: usize, total: usize) -> Vec<String> {
    let mut child = llamay()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eval starts");
    let deadline = Instant::now() + Duration::from_secs(600);
    while whole_lines(out).len() < lines {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!(
                "eval ended ({status}) before {lines} lines: {}",
                stderr(&child.wait_with_output().expect("output"))
            );
        }
        assert!(Instant::now() < deadline, "no {lines} lines in 10 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let before = whole_lines(out);
    assert!(
        before.len() < total,
        "the kill came after the end: {} lines",
        before.len()
    );
    before
}

/// Runs `args` again after a kill left `done` of `total` items written: it must succeed, say it
/// found them, and run only the rest (its summary, opening with `label`, is returned).
fn rerun_resuming(args: &[String], done: usize, total: usize, label: &str) -> String {
    let rerun = llamay().args(args).output().expect("eval reruns");
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let err = stderr(&rerun);
    assert!(err.contains(&format!("{done} of {total} items already in")), "{err}");
    let summary = String::from_utf8_lossy(&rerun.stdout).into_owned();
    assert!(summary.contains(&format!("{label}: {} items in", total - done)), "{summary}");
    summary
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

    let before = killed_after(&args, &out, 25, 50);

    let summary = rerun_resuming(&args, before.len(), 50, "eval");
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

/// Items whose right choice SmolLM2 cannot miss, and two whose answer is less plain.
const SCORED: &[(&str, &[&str], usize)] = &[
    (
        "The capital of France is",
        &[" Paris", " banana", " a spoon"],
        0,
    ),
    (
        "One, two, three, four,",
        &[" purple", " five", " Tuesday"],
        1,
    ),
    ("The cat sat on the", &[" mat", " theorem of Pythagoras"], 0),
    (
        "Water is made of hydrogen and",
        &[" oxygen", " cardboard"],
        0,
    ),
    ("Monday, Tuesday, Wednesday, ", &["Thursday", "Saturday"], 0),
    ("Q: What colour is grass?\nA:", &[" green", " loud"], 0),
];

const SCORE_PREFIX: &str = "Complete each sentence with the most sensible words.\n";

/// Each choice's (log-likelihood, tokens, greedy) for item `prompt`, computed by the test: the
/// tokens tokenized as lm-evaluation-harness does (trailing whitespace of the prompt moves to
/// the choice; the choice's tokens are those of prompt + choice after the prompt's), their
/// log-probabilities from one decode of the whole sequence with logits at every position
/// (f64 log-softmax), through the llm layer, not eval's path.
fn reference_choices(
    model: &llamay::llm::Model,
    prompt: &str,
    choices: &[&str],
) -> Vec<(f64, usize, bool)> {
    use llamay::llm::{BatchEntry, ContextParams, KvType};
    let prefix = model
        .tokenize(SCORE_PREFIX, true, true)
        .expect("prefix tokens");
    let context = model
        .tokenize(prompt.trim_end(), false, true)
        .expect("context tokens");
    choices
        .iter()
        .map(|choice| {
            let whole = model
                .tokenize(&format!("{prompt}{choice}"), false, true)
                .expect("tokens");
            let continuation = &whole[context.len()..];
            let tokens: Vec<u32> = prefix
                .iter()
                .chain(&context)
                .chain(continuation)
                .copied()
                .collect();
            let mut decoder = model
                .new_context(&ContextParams {
                    n_ctx: 512,
                    batch: 512,
                    kv_type: KvType::F32,
                    ..ContextParams::default()
                })
                .expect("a context");
            let seq = decoder.seq(0).expect("sequence 0");
            let rows = decoder
                .decode_scoring(
                    &[BatchEntry {
                        seq,
                        tokens: &tokens,
                        first_pos: 0,
                        logits: 0,
                    }],
                    &[0],
                )
                .expect("decode");
            let from = prefix.len() + context.len();
            let (mut sum, mut greedy) = (0.0, true);
            for at in from..tokens.len() {
                let logits = decoder.logits(rows[0][at - 1]).expect("logits");
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let total: f64 = logits.iter().map(|l| (*l as f64 - max as f64).exp()).sum();
                sum += logits[tokens[at] as usize] as f64 - max as f64 - total.ln();
                greedy &= logits[tokens[at] as usize] >= max;
            }
            (sum, continuation.len(), greedy)
        })
        .collect()
}

fn load_smollm2() -> llamay::llm::Model {
    use llamay::store::{ModelName, Store};
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store
        .resolve(&ModelName::parse("smollm2:135m").expect("name"))
        .expect("smollm2 imported by scripts/setup");
    llamay::llm::Model::load(&store.blob_path(&manifest)).expect("model loads")
}

/// Writes `copies` rounds of [`SCORED`] as items (ids `"<round>-<index>"`) and the prefix.
fn scoring_files(dir: &Path, copies: usize) -> (PathBuf, PathBuf) {
    let items = dir.join("choices.jsonl");
    let mut lines = Vec::new();
    for round in 0..copies {
        for (index, (prompt, choices, answer)) in SCORED.iter().enumerate() {
            lines.push(
                serde_json::json!({"id": format!("{round}-{index}"), "prompt": prompt, "choices": choices, "answer": answer})
                    .to_string(),
            );
        }
    }
    std::fs::write(&items, lines.join("\n")).expect("items");
    let prefix = dir.join("prefix.txt");
    std::fs::write(&prefix, SCORE_PREFIX).expect("prefix");
    (items, prefix)
}

fn score_args(prefix: &Path, items: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "eval",
        "-score",
        "-m",
        "smollm2:135m",
        "-kv",
        "f32",
        "-t",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (flag, path) in [("-prefix", prefix), ("-items", items), ("-o", out)] {
        args.push(flag.into());
        args.push(path.display().to_string());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Every result line against the test's own decode (within 1e-4 nats), its argmax and
/// correctness against the reference's; returns how many items the reference gets right.
fn check_scored_lines(lines: &[String], reference: &[Vec<(f64, usize, bool)>]) -> usize {
    let mut right = 0;
    for line in lines {
        let result: Value = serde_json::from_str(line).expect("a result line is JSON");
        let id = result["id"].as_str().expect("id");
        let index: usize = id
            .split('-')
            .nth(1)
            .and_then(|i| i.parse().ok())
            .expect("id <round>-<index>");
        let (_, choices, answer) = SCORED[index];
        let expected = &reference[index];
        let scored = result["choices"].as_array().expect("choices");
        assert_eq!(scored.len(), choices.len(), "{line}");
        for (choice, (sum, tokens, greedy)) in scored.iter().zip(expected) {
            let got = choice["logprob_sum"].as_f64().expect("logprob_sum");
            assert!(
                (got - sum).abs() <= 1e-4,
                "{id}: {got} against the direct decode's {sum}: {line}"
            );
            assert_eq!(choice["tokens"].as_u64(), Some(*tokens as u64), "{line}");
            let mean = choice["logprob_per_token"]
                .as_f64()
                .expect("logprob_per_token");
            assert!((mean - got / *tokens as f64).abs() <= 1e-9, "{line}");
            assert_eq!(choice["is_greedy"].as_bool(), Some(*greedy), "{line}");
        }
        let best = (0..expected.len()).fold(0, |best, i| {
            if expected[i].0 > expected[best].0 {
                i
            } else {
                best
            }
        });
        assert_eq!(result["argmax"].as_u64(), Some(best as u64), "{line}");
        assert_eq!(result["answer"].as_u64(), Some(answer as u64), "{line}");
        assert_eq!(result["correct"].as_bool(), Some(best == answer), "{line}");
        right += usize::from(best == answer);
    }
    right
}

fn summary_accuracy(stdout: &str) -> (usize, usize) {
    let after = stdout
        .split("accuracy ")
        .nth(1)
        .unwrap_or_else(|| panic!("no accuracy in {stdout:?}"));
    let fraction = after.split(' ').next().expect("n/m");
    let (right, of) = fraction.split_once('/').expect("n/m");
    (right.parse().expect("n"), of.parse().expect("m"))
}

#[test]
fn score_ranks_choices_by_the_model_s_own_log_likelihoods_and_resumes_after_a_kill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rounds = 4;
    let total = rounds * SCORED.len();
    let (items, prefix) = scoring_files(dir.path(), rounds);
    let out = dir.path().join("scores.jsonl");
    let args = score_args(&prefix, &items, &out, &["-parallel", "1"]);
    let before = killed_after(&args, &out, 6, total);

    let summary = rerun_resuming(&args, before.len(), total, "eval -score");

    let after = whole_lines(&out);
    assert_eq!(after.len(), total);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the lines written before the kill are unchanged"
    );
    let ids: HashSet<String> = after
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON")["id"].to_string())
        .collect();
    assert_eq!(ids.len(), total, "every item once");

    let model = load_smollm2();
    let reference: Vec<_> = SCORED
        .iter()
        .map(|(prompt, choices, _)| reference_choices(&model, prompt, choices))
        .collect();
    let right = check_scored_lines(&after, &reference);
    assert_eq!(summary_accuracy(&summary), (right, total), "{summary}");
    // The plainest question: Paris beats a banana and a spoon.
    let france: Value = serde_json::from_str(
        &after[after
            .iter()
            .position(|l| l.contains("\"0-0\""))
            .expect("item 0-0")],
    )
    .expect("JSON");
    assert_eq!(france["correct"], Value::Bool(true), "{france}");
    // Every choice reused the prefix's scored positions (all but its last, whose score was
    // for the prefix's own end), and each choice after an item's first reused its prompt too.
    let prefix_tokens = model
        .tokenize(SCORE_PREFIX, true, true)
        .expect("tokens")
        .len() as u64;
    for line in &after {
        let result: Value = serde_json::from_str(line).expect("JSON");
        let reused = result["cached_tokens"].as_u64().expect("cached_tokens");
        let choices = result["choices"].as_array().map_or(0, |c| c.len() as u64);
        assert!(reused >= (prefix_tokens - 1) * choices, "{line}");
    }
}

#[test]
fn score_on_a_daemon_gives_what_the_direct_decode_gives() {
    let daemon = Daemon::builder()
        .model("smollm2:135m")
        .args([
            "-parallel",
            "2",
            "-context",
            "2048",
            "-t",
            "2",
            "-kv",
            "f32",
        ])
        .start();
    let dir = tempfile::tempdir().expect("temp dir");
    let (items, prefix) = scoring_files(dir.path(), 1);
    let out = dir.path().join("scores.jsonl");
    let evaluated = llamay()
        .env("LLAMAY_ADDR", daemon.addr())
        .args(score_args(&prefix, &items, &out, &["-parallel", "2"]))
        .output()
        .expect("eval runs");
    assert!(evaluated.status.success(), "{}", stderr(&evaluated));
    assert!(
        stderr(&evaluated).contains("on the running daemon"),
        "{}",
        stderr(&evaluated)
    );
    let model = load_smollm2();
    let reference: Vec<_> = SCORED
        .iter()
        .map(|(prompt, choices, _)| reference_choices(&model, prompt, choices))
        .collect();
    let lines = whole_lines(&out);
    assert_eq!(lines.len(), SCORED.len());
    let right = check_scored_lines(&lines, &reference);
    let summary = String::from_utf8_lossy(&evaluated.stdout).into_owned();
    assert_eq!(
        summary_accuracy(&summary),
        (right, SCORED.len()),
        "{summary}"
    );
}

#[test]
fn score_input_errors_name_the_item_and_field_before_the_model_loads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, prefix) = scoring_files(dir.path(), 1);
    let out = dir.path().join("scores.jsonl");
    let cases: &[(&str, &str)] = &[
        (
            r#"{"id": "a", "prompt": "x"}"#,
            "bad.jsonl:2: item \"a\": -score needs choices",
        ),
        (
            r#"{"id": 1, "prompt": "x", "choices": []}"#,
            "bad.jsonl:2: item 1: choices is empty",
        ),
        (
            r#"{"id": 1, "prompt": "x", "choices": [" y", ""]}"#,
            "bad.jsonl:2: item 1: choices[1] is empty",
        ),
        (
            r#"{"id": 1, "prompt": "x", "choices": [" y", " z"], "answer": 2}"#,
            "item 1: answer is 2; it is the index of the right choice, 0 to 1",
        ),
        (
            r#"{"id": 1, "messages": [{"role": "user", "content": "x"}], "choices": [" y"]}"#,
            "item 1: -score takes prompt items",
        ),
    ];
    let items = dir.path().join("bad.jsonl");
    for (line, needle) in cases {
        std::fs::write(
            &items,
            format!("{{\"id\": 0, \"prompt\": \"ok\", \"choices\": [\" a\"]}}\n{line}\n"),
        )
        .expect("write");
        let output = llamay()
            .args(score_args(&prefix, &items, &out, &[]))
            .output()
            .expect("eval");
        assert_fails_with(&output, needle);
    }
    std::fs::write(&items, r#"{"id": 0, "prompt": "ok", "choices": [" a"]}"#).expect("write");
    let schema = testdata("schema.json").display().to_string();
    let output = llamay()
        .args(score_args(&prefix, &items, &out, &["-schema", &schema]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "cannot be used with");
    let output = llamay()
        .args(score_args(&prefix, &items, &out, &["-temp", "0.5"]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "cannot be used with");
    // Choices belong to -score.
    let output = llamay()
        .args(eval_args(&items, &out, &[]))
        .output()
        .expect("eval");
    assert_fails_with(&output, "item 0: choices is for scoring; run with -score");
    assert!(!out.exists(), "nothing was written for bad input");
}
