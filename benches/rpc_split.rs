//! The network cost of splitting a model over RPC workers: generation tok/s of `llamay serve`
//! with SmolLM2 on this machine alone (the anchor) against the same daemon with its layers
//! split over two `llamay rpc-worker` processes on loopback, in the same run, with the ratio.
//! Loopback has no wire latency, so this is the floor of the cost: serialisation, the
//! protocol's round trips per graph and the extra threads, plus the hop to the runner process
//! a split model runs in (one line per token over a pipe).
//!
//! `cargo bench --bench rpc_split` (smollm2:135m from the store: run scripts/setup first).
//! Env: LLAMAY_BENCH_TOKENS (default 64), LLAMAY_BENCH_ROUNDS (default 3).

use std::process::{Command, Stdio};
use std::time::Duration;

const MODEL: &str = "smollm2:135m";
const PROMPT: &str = "Write a short story about a lighthouse keeper who finds a message in a bottle.";

#[path = "../tests/support/process.rs"]
mod process;

use process::{free_port, wait_for_health, wait_for_port, Process};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn llamay() -> Command {
    let mut command = process::llamay_command();
    command.stdout(Stdio::null()).stderr(Stdio::null());
    command
}

fn start_worker() -> (Process, String) {
    let port = free_port();
    let endpoint = format!("127.0.0.1:{port}");
    let worker = Process(llamay().args(["rpc-worker", "-addr", &endpoint, "-t", "1"]).spawn().expect("rpc-worker"));
    assert!(wait_for_port(port, Duration::from_secs(30)), "worker {endpoint}");
    (worker, endpoint)
}

fn start_daemon(rpc: Option<&str>) -> (Process, String) {
    let base_port = free_port();
    let mut command = llamay();
    command.args(["serve", "-m", MODEL, "-addr", &format!("127.0.0.1:{base_port}"), "-parallel", "1", "-t", "1"]);
    if let Some(workers) = rpc {
        command.args(["-rpc", workers]);
    }
    let daemon = Process(command.spawn().expect("serve"));
    let base = format!("http://127.0.0.1:{base_port}");
    assert!(wait_for_health(&base, Duration::from_secs(120)), "daemon {rpc:?} did not start");
    (daemon, base)
}

/// Generated tokens per second of one greedy request, best of `rounds`.
fn generation_rate(base: &str, tokens: usize, rounds: usize) -> f64 {
    let client = reqwest::blocking::Client::new();
    let mut best = 0.0f64;
    for _ in 0..rounds {
        let body = serde_json::json!({
            "model": MODEL, "prompt": PROMPT, "stream": false,
            "options": {"temperature": 0, "num_predict": tokens},
        });
        let response: serde_json::Value = client
            .post(format!("{base}/api/generate"))
            .json(&body)
            .timeout(Duration::from_secs(300))
            .send()
            .expect("generate")
            .json()
            .expect("json");
        // Ollama's eval_count / eval_duration: the generation phase alone, prompt excluded.
        let count = response["eval_count"].as_f64().unwrap_or(0.0);
        let nanos = response["eval_duration"].as_f64().unwrap_or(0.0);
        if nanos > 0.0 {
            best = best.max(count / (nanos / 1e9));
        }
    }
    best
}

fn main() {
    let tokens = env_number("LLAMAY_BENCH_TOKENS", 64);
    let rounds = env_number("LLAMAY_BENCH_ROUNDS", 3);
    let local = {
        let (_daemon, base) = start_daemon(None);
        generation_rate(&base, tokens, rounds)
    };
    let split = {
        let (_first, a) = start_worker();
        let (_second, b) = start_worker();
        let (_daemon, base) = start_daemon(Some(&format!("{a},{b}")));
        generation_rate(&base, tokens, rounds)
    };
    println!("{MODEL}, {tokens} tokens, best of {rounds}, one thread per process");
    println!("{:<34} {:>12}", "setup", "gen tok/s");
    println!("{:<34} {:>12.1}", "local CPU (anchor)", local);
    println!("{:<34} {:>12.1}", "split: local + 2 loopback workers", split);
    println!("{:<34} {:>12.2}", "ratio split / local", split / local);
}
