//! A model split across two `llamay rpc-worker` processes on loopback, with the real binary
//! and the real SmolLM2: greedy text through `serve -rpc` equals greedy text without it; an
//! unreachable worker is a start-up error naming it; free memory and `-split` decide what each
//! worker holds (seen in `/v1/stats`, as llama.cpp placed it); and a worker lost mid-stream fails that request with an
//! error naming it while the daemon keeps serving, and reloads the model once it is back.
//!
//! Needs smollm2:135m in the store at `$LLAMAY_HOME` (scripts/setup imports it). Every wait is
//! bounded; every process is killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use llamay_test_support::daemon::{Daemon, RpcWorker};
use llamay_test_support::process::{free_port, llamay_command as llamay};

const MODEL: &str = "smollm2:135m";

/// `llamay serve` with SmolLM2 preloaded, one sequence and one thread (so both runs decode
/// with the same batch layout); `rpc` adds `-rpc`. Returns when /health answers.
fn start_daemon(rpc: Option<&str>) -> Daemon {
    start_daemon_with(rpc, &[])
}

fn start_daemon_with(rpc: Option<&str>, extra: &[&str]) -> Daemon {
    let mut args = vec!["-parallel", "1", "-t", "1", "-context", "512"];
    if let Some(workers) = rpc {
        args.extend(["-rpc", workers]);
    }
    args.extend(extra);
    Daemon::builder().model(MODEL).args(args).start()
}

/// A greedy chat request with `extra` fields merged into its body: its status and body.
fn greedy_request_with(daemon: &Daemon, extra: serde_json::Value) -> (u16, serde_json::Value) {
    let mut body = serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "temperature": 0,
        "max_tokens": 32,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    daemon.post("/v1/chat/completions", &body)
}

fn greedy_request(daemon: &Daemon) -> (u16, serde_json::Value) {
    greedy_request_with(daemon, serde_json::json!({}))
}

fn greedy_text_with(daemon: &Daemon, extra: serde_json::Value) -> String {
    let (status, value) = greedy_request_with(daemon, extra);
    assert_eq!(status, 200, "{value}");
    value["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

fn greedy_text(daemon: &Daemon) -> String {
    greedy_text_with(daemon, serde_json::json!({}))
}

/// The constraints a split model must enforce as a local one does: a JSON schema, a GBNF
/// grammar and "any JSON" (the runner compiles each again from its source).
fn constrained_requests() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "colours",
            "schema": {"type": "object", "properties": {"colours": {"type": "array",
                "items": {"enum": ["red", "orange", "yellow", "green", "blue", "indigo", "violet"]},
                "minItems": 3, "maxItems": 3}}, "required": ["colours"], "additionalProperties": false}}}}),
        serde_json::json!({"llamay_grammar": "root ::= \"The colours are \" [a-z]+ \", \" [a-z]+ \" and \" [a-z]+ \".\""}),
        serde_json::json!({"response_format": {"type": "json_object"}}),
    ]
}

#[test]
fn split_over_two_workers_gives_the_same_greedy_text() {
    let local_daemon = start_daemon(None);
    let local = greedy_text(&local_daemon);
    let local_constrained: Vec<String> = constrained_requests()
        .into_iter()
        .map(|extra| greedy_text_with(&local_daemon, extra))
        .collect();
    drop(local_daemon);
    assert!(!local.is_empty(), "the local run generated nothing");

    let first = RpcWorker::start_any();
    let second = RpcWorker::start_any();
    let workers = format!("{},{}", first.endpoint(), second.endpoint());
    let daemon = start_daemon(Some(&workers));
    let split = greedy_text(&daemon);
    assert_eq!(
        split, local,
        "greedy text differs between the split and the local model"
    );
    for (extra, local) in constrained_requests().into_iter().zip(local_constrained) {
        let split = greedy_text_with(&daemon, extra.clone());
        assert_eq!(split, local, "constrained greedy text differs for {extra}");
    }
}

#[test]
fn an_unreachable_worker_is_an_error_naming_it() {
    let port = free_port(); // bound and released: nothing listens
    let worker = format!("127.0.0.1:{port}");
    let output = llamay()
        .args([
            "serve",
            "-m",
            MODEL,
            "-addr",
            &format!("127.0.0.1:{}", free_port()),
            "-rpc",
            &worker,
        ])
        .output()
        .expect("run serve");
    assert!(!output.status.success(), "serve started without its worker");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&worker) && stderr.contains("unreachable"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_worker_refuses_a_remote_address_without_allow_remote() {
    let output = llamay()
        .args(["rpc-worker", "-addr", "0.0.0.0:1"])
        .output()
        .expect("run rpc-worker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("-allow-remote") && stderr.contains("authentication"),
        "stderr: {stderr}"
    );
}

/// Each device's (name, layers, bytes) of the loaded model, from `/v1/stats`.
fn placement(daemon: &Daemon) -> Vec<(String, String, u64)> {
    let (_, stats) = daemon.get("/v1/stats");
    stats["models"][0]["rpc_placement"]
        .as_array()
        .unwrap_or_else(|| panic!("no rpc_placement: {stats}"))
        .iter()
        .map(|part| {
            (
                part["device"].as_str().unwrap_or_default().to_string(),
                part["layers"].as_str().unwrap_or_default().to_string(),
                part["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The first and last block of a `/v1/stats` layer range ("0-15", "7"), or `None` for "none".
fn block_range(layers: &str) -> Option<(u32, u32)> {
    let (first, last) = layers.split_once('-').unwrap_or((layers, layers));
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// SmolLM2-135M has 30 blocks plus the output layer. Two workers on this machine report the
/// same free memory as its CPU, so each of the three holds about a third of the 31 blocks, the
/// CPU the first ones; `-split 1,1,2` gives a quarter to this CPU, a quarter to the first worker
/// and the rest to the second, and llama.cpp's own log of the bytes it put on each worker
/// agrees with `/v1/stats` (the split reached llama.cpp).
#[test]
fn free_memory_and_split_decide_what_each_worker_holds() {
    let first_worker = RpcWorker::start_any();
    let second_worker = RpcWorker::start_any();
    let (first, second) = (first_worker.endpoint(), second_worker.endpoint());
    let workers = format!("{first},{second}");
    {
        let daemon = start_daemon(Some(&workers));
        let parts = placement(&daemon);
        let devices: Vec<&str> = parts.iter().map(|(d, _, _)| d.as_str()).collect();
        assert_eq!(devices, ["local CPU", first.as_str(), second.as_str()]);
        let ranges: Vec<(u32, u32)> = parts
            .iter()
            .map(|(_, layers, _)| block_range(layers).unwrap_or_else(|| panic!("every part holds blocks: {parts:?}")))
            .collect();
        assert_eq!(ranges[0].0, 0, "{parts:?}");
        assert_eq!(ranges[2].1, 30, "{parts:?}");
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0, "ranges follow each other: {parts:?}");
        }
        for (first, last) in &ranges {
            assert!((7..=14).contains(&(last + 1 - first)), "about a third each: {parts:?}");
        }
        // The input embeddings stay on this CPU; each worker holds weights.
        assert!(parts.iter().all(|(_, _, bytes)| *bytes > 0), "{parts:?}");
    }
    // llama.cpp's own log says how many bytes of weights it put on each worker.
    let daemon = Daemon::builder()
        .model(MODEL)
        .args(["-parallel", "1", "-t", "1", "-context", "512", "-rpc", &workers, "-split", "1,1,2"])
        .env("RUST_LOG", "info,llama.cpp=info")
        .start();
    let parts = placement(&daemon);
    let layers: Vec<&str> = parts.iter().map(|(_, l, _)| l.as_str()).collect();
    assert_eq!(layers, ["0-7", "8-15", "16-30"]);
    let log = daemon.log();
    for (endpoint, _, bytes) in &parts[1..] {
        let placed = llama_model_buffer_mib(&log, endpoint).unwrap_or_else(|| panic!("no buffer of {endpoint} in the log:\n{log}"));
        let reported = *bytes as f64 / (1024.0 * 1024.0);
        assert!((placed - reported).abs() <= 0.05 * reported + 1.0, "{endpoint}: llama.cpp placed {placed} MiB, /v1/stats says {reported}");
    }
}

/// The size llama.cpp logged for the model weights it put on the worker at `endpoint`
/// ("RPC0[127.0.0.1:5000] model buffer size =    16.91 MiB").
fn llama_model_buffer_mib(log: &str, endpoint: &str) -> Option<f64> {
    let marker = format!("[{endpoint}] model buffer size =");
    let line = log.lines().find(|line| line.contains(&marker))?;
    let after = &line[line.find(&marker)? + marker.len()..];
    after.split_whitespace().next()?.parse().ok()
}

#[test]
fn bad_mem_and_split_values_are_named() {
    let output = llamay()
        .args(["rpc-worker", "-addr", "127.0.0.1:1", "-mem", "0"])
        .output()
        .expect("run rpc-worker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("-mem 0") && stderr.contains("serve -split"), "stderr: {stderr}");
    let output = llamay()
        .args([
            "serve",
            "-addr",
            &format!("127.0.0.1:{}", free_port()),
            "-rpc",
            "127.0.0.1:1",
            "-split",
            "1,1,1",
        ])
        .output()
        .expect("run serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("split") && stderr.contains("one per rpc worker"),
        "stderr: {stderr}"
    );
}

/// ggml's RPC client aborts its process when a worker is lost mid-computation, so a model split
/// over workers runs in a runner process of its own: losing a worker ends that process, the
/// request it served ends with an error naming the worker, and the daemon serves on. While the
/// worker is down a request gets 503 naming it; once it is back, the model loads again.
#[test]
fn a_worker_lost_mid_stream_fails_that_request_and_the_daemon_serves_on() {
    let kept = RpcWorker::start_any();
    let lost = RpcWorker::start_any();
    let (lost_port, lost_endpoint) = (lost.port, lost.endpoint());
    let workers = format!("{},{lost_endpoint}", kept.endpoint());
    let mut daemon = start_daemon(Some(&workers));
    // A long answer (about 120 tokens greedy), so the loss lands well inside it.
    let body = serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "List the numbers from 1 to 300, separated by commas."}],
        "temperature": 0,
        "max_tokens": 400,
        "stream": true,
    });
    let response = daemon
        .client()
        .post(daemon.url("/v1/chat/completions"))
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .expect("stream request");
    assert!(response.status().is_success());
    let mut reader = BufReader::new(response);
    let mut line = String::new();
    let mut chunks = 0;
    while chunks < 3 {
        line.clear();
        if reader.read_line(&mut line).expect("read the stream") == 0 {
            panic!("the stream ended before the worker was killed");
        }
        if line.starts_with("data: {") {
            chunks += 1;
        }
    }
    drop(lost);
    let mut rest = String::new();
    reader
        .read_to_string(&mut rest)
        .expect("the stream ends cleanly");
    let error_event = rest
        .lines()
        .find(|l| l.contains("\"error\""))
        .unwrap_or_else(|| panic!("no error event after the worker was lost: {rest}"));
    assert!(
        error_event.contains(&lost_endpoint),
        "the error does not name {lost_endpoint}: {error_event}"
    );

    assert!(
        daemon.exit_status().is_none(),
        "the daemon ended with its worker"
    );
    let health = daemon
        .client()
        .get(daemon.url("/health"))
        .timeout(Duration::from_secs(10))
        .send()
        .expect("health after the loss");
    assert!(health.status().is_success());

    // Down: the reload fails with a 503 naming the worker.
    let (status, value) = greedy_request(&daemon);
    assert_eq!(status, 503, "{value}");
    assert!(value.to_string().contains(&lost_endpoint), "{value}");

    // Back on the same port: the next request loads the model again and is answered.
    let _back = RpcWorker::start(lost_port, &[]);
    let text = greedy_text(&daemon);
    assert!(!text.is_empty(), "the reloaded model generated nothing");
}
