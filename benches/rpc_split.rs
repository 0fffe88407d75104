//! The network cost of splitting a model over RPC workers: generation tok/s of `llamay serve`
//! with SmolLM2 on this machine alone (the anchor) against the same daemon with its layers
//! split over two `llamay rpc-worker` processes on loopback, in the same run, with the ratio.
//! Loopback has no wire latency, so this is the floor of the cost: serialisation, the
//! protocol's round trips per graph and the extra threads, plus the hop to the runner process
//! a split model runs in (one line per token over a pipe).
//!
//! `cargo bench --bench rpc_split` (smollm2:135m from the store: run scripts/setup first).
//! Env: LLAMAY_BENCH_TOKENS (default 64), LLAMAY_BENCH_ROUNDS (default 3).

use llamay_test_support::daemon::{Daemon, RpcWorker};

const MODEL: &str = "smollm2:135m";
const PROMPT: &str = "Write a short story about a lighthouse keeper who finds a message in a bottle.";

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn start_daemon(rpc: Option<&str>) -> Daemon {
    let mut args = vec!["-parallel", "1", "-t", "1"];
    if let Some(workers) = rpc {
        args.extend(["-rpc", workers]);
    }
    Daemon::builder().model(MODEL).args(args).start()
}

/// Generated tokens per second of one greedy request, best of `rounds`.
fn generation_rate(daemon: &Daemon, tokens: usize, rounds: usize) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..rounds {
        let body = serde_json::json!({
            "model": MODEL, "prompt": PROMPT, "stream": false,
            "options": {"temperature": 0, "num_predict": tokens},
        });
        let (status, response) = daemon.post("/api/generate", &body);
        assert_eq!(status, 200, "{response}");
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
    let local = generation_rate(&start_daemon(None), tokens, rounds);
    let split = {
        let (first, second) = (RpcWorker::start_any(), RpcWorker::start_any());
        let daemon = start_daemon(Some(&format!("{},{}", first.endpoint(), second.endpoint())));
        generation_rate(&daemon, tokens, rounds)
    };
    println!("{MODEL}, {tokens} tokens, best of {rounds}, one thread per process");
    println!("{:<34} {:>12}", "setup", "gen tok/s");
    println!("{:<34} {:>12.1}", "local CPU (anchor)", local);
    println!("{:<34} {:>12.1}", "split: local + 2 loopback workers", split);
    println!("{:<34} {:>12.2}", "ratio split / local", split / local);
}
