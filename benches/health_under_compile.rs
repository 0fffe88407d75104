//! `/health` latency while clients hammer the daemon with a costly schema (issue 48): each
//! sends, in a loop, a chat request whose `response_format` is a JSON Schema with a 7 MB
//! `const` (seconds and hundreds of MB to compile). Compiling must delay only that request,
//! not the connections an HTTP worker serves, so `/health` should stay at its idle latency,
//! the anchor measured first in the same run on the same daemon.
//!
//! No model is needed: the schema is compiled before the model is looked up, so each costly
//! request compiles and then answers 404 for its made-up model.
//!
//! `cargo bench --bench health_under_compile`. Env: LLAMAY_BENCH_BINARY (a llamay binary to
//! measure instead of this build's, e.g. an older one), LLAMAY_BENCH_SECONDS (per row,
//! default 10), LLAMAY_BENCH_CLIENTS (comma-separated client counts, default 2,8).

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;

use llamay_test_support::process::{self, free_port, wait_for_health, Process};

/// The `const` string's length: about 7 MB of body.
const CONST_BYTES: usize = 7 * 1000 * 1000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn start_daemon(home: &std::path::Path) -> (Process, String) {
    let port = free_port();
    let mut command = match std::env::var("LLAMAY_BENCH_BINARY") {
        Ok(binary) => {
            let mut command = std::process::Command::new(binary);
            command.env("RUST_LOG", "warn").env_remove("LLAMAY_CONFIG").env_remove("LLAMAY_RPC");
            command
        }
        Err(_) => process::llamay_command(),
    };
    command
        .env("LLAMAY_HOME", home)
        .args(["serve", "-addr", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let daemon = Process(command.spawn().expect("serve"));
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_for_health(&base, Duration::from_secs(60)), "the daemon did not start");
    (daemon, base)
}

/// `/health` latencies, one probe every 100 ms on a new connection each, for `seconds`.
fn probe_health(base: &str, seconds: f64) -> Vec<Duration> {
    let client = Client::builder().timeout(Duration::from_secs(60)).pool_max_idle_per_host(0).build().expect("client");
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut latencies = Vec::new();
    while Instant::now() < end {
        let started = Instant::now();
        let ok = client.get(format!("{base}/health")).send().is_ok_and(|r| r.status().is_success());
        latencies.push(if ok { started.elapsed() } else { Duration::from_secs(60) });
        std::thread::sleep(Duration::from_millis(100));
    }
    latencies
}

fn summary(mut latencies: Vec<Duration>) -> (f64, f64, f64) {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.9), at(1.0))
}

fn main() {
    let seconds: f64 = env_or("LLAMAY_BENCH_SECONDS", 10.0);
    let clients: Vec<usize> = std::env::var("LLAMAY_BENCH_CLIENTS")
        .unwrap_or_else(|_| "2,8".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let home = tempfile::tempdir().expect("home");
    let (_daemon, base) = start_daemon(home.path());
    let body = Arc::new(
        serde_json::to_vec(&serde_json::json!({
            "model": "no-such-model:bench",
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "big", "schema": {"const": "x".repeat(CONST_BYTES)}
            }},
        }))
        .expect("body"),
    );
    println!("/health while clients send a {:.0} MB-const schema in a loop ({seconds} s a row)", CONST_BYTES as f64 / 1e6);
    println!("{:>22} {:>10} {:>10} {:>10} {:>14} {:>10}", "row", "median ms", "p90 ms", "max ms", "costly answers", "vs idle");
    let (idle, _, _) = summary(probe_health(&base, seconds.min(5.0)));
    println!("{:>22} {:>10.1} {:>10} {:>10} {:>14} {:>10}", "idle (anchor)", idle, "", "", "", "1.0x");
    for count in clients {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let hammers: Vec<_> = (0..count)
            .map(|_| {
                let (stop, answered, body, base) = (Arc::clone(&stop), Arc::clone(&answered), Arc::clone(&body), base.clone());
                std::thread::spawn(move || {
                    let client = Client::builder().timeout(Duration::from_secs(120)).build().expect("client");
                    while !stop.load(Ordering::Acquire) {
                        let sent = client
                            .post(format!("{base}/v1/chat/completions"))
                            .header("content-type", "application/json")
                            .body(body.as_ref().clone())
                            .send();
                        if sent.is_ok() {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let (median, p90, max) = summary(probe_health(&base, seconds));
        stop.store(true, Ordering::Release);
        for hammer in hammers {
            let _ = hammer.join();
        }
        println!(
            "{:>22} {:>10.1} {:>10.1} {:>10.1} {:>14} {:>9.1}x",
            format!("{count} costly clients"),
            median,
            p90,
            max,
            answered.load(Ordering::Relaxed),
            median / idle.max(0.001)
        );
    }
}
