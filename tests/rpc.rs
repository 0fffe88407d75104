//! A model split across two `llamay rpc-worker` processes on loopback, with the real binary
//! and the real SmolLM2: greedy text through `serve -rpc` equals greedy text without it; an
//! unreachable worker is a start-up error naming it; and what a worker lost mid-stream does.
//!
//! Needs smollm2:135m in the store at `$LLAMAY_HOME` (scripts/setup imports it). Every wait is
//! bounded; every process is killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "smollm2:135m";

/// A child process killed when the test lets go of it, pass or fail.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn llamay() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llamay"));
    command
        .env("RUST_LOG", "warn")
        .env_remove("LLAMAY_CONFIG")
        .env_remove("LLAMAY_RPC");
    command
}

/// Waits until something accepts TCP connections on `port`, for at most `limit`.
fn wait_for_port(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn start_worker() -> (Process, u16) {
    let port = free_port();
    let child = llamay()
        .args([
            "rpc-worker",
            "-addr",
            &format!("127.0.0.1:{port}"),
            "-t",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rpc-worker");
    let worker = Process(child);
    assert!(
        wait_for_port(port, Duration::from_secs(30)),
        "rpc-worker on {port} did not listen"
    );
    (worker, port)
}

/// `llamay serve` with SmolLM2 preloaded, one sequence and one thread (so both runs decode
/// with the same batch layout); `rpc` adds `-rpc`. Returns when /health answers.
fn start_daemon(rpc: Option<&str>) -> (Process, String) {
    let port = free_port();
    let mut command = llamay();
    command.args([
        "serve",
        "-m",
        MODEL,
        "-addr",
        &format!("127.0.0.1:{port}"),
        "-parallel",
        "1",
        "-t",
        "1",
        "-context",
        "512",
    ]);
    if let Some(workers) = rpc {
        command.args(["-rpc", workers]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serve");
    let daemon = Process(child);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        if let Ok(response) = client
            .get(format!("{base}/health"))
            .timeout(Duration::from_secs(2))
            .send()
        {
            if response.status().is_success() {
                return (daemon, base);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("serve {rpc:?} did not answer /health within 120 s");
}

fn greedy_text(base: &str) -> String {
    let body = serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "temperature": 0,
        "max_tokens": 32,
    });
    let response = reqwest::blocking::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .expect("chat request");
    assert!(
        response.status().is_success(),
        "status {}",
        response.status()
    );
    let value: serde_json::Value = response.json().expect("json");
    value["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

#[test]
fn split_over_two_workers_gives_the_same_greedy_text() {
    let (local_daemon, local_base) = start_daemon(None);
    let local = greedy_text(&local_base);
    drop(local_daemon);
    assert!(!local.is_empty(), "the local run generated nothing");

    let (_first, first_port) = start_worker();
    let (_second, second_port) = start_worker();
    let workers = format!("127.0.0.1:{first_port},127.0.0.1:{second_port}");
    let (_daemon, base) = start_daemon(Some(&workers));
    let split = greedy_text(&base);
    assert_eq!(
        split, local,
        "greedy text differs between the split and the local model"
    );
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

/// ggml's RPC client aborts its process when a worker is lost mid-computation, and gives no
/// way to fail only that call; this pins down what llamay makes of it: the stream ends (no
/// hang), and the daemon's last words name the RPC workers, so the service manager's log
/// says why it must restart.
#[test]
fn a_worker_lost_mid_stream_ends_the_stream_and_names_the_workers() {
    let (_kept, kept_port) = start_worker();
    let (lost, lost_port) = start_worker();
    let workers = format!("127.0.0.1:{kept_port},127.0.0.1:{lost_port}");
    let (mut daemon, base) = start_daemon(Some(&workers));
    let body = serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count from one to two hundred in words."}],
        "temperature": 0,
        "max_tokens": 400,
        "stream": true,
    });
    let response = reqwest::blocking::Client::new()
        .post(format!("{base}/v1/chat/completions"))
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
    let _ = reader.read_to_string(&mut rest); // ends: an error or a closed connection
    assert!(
        !rest.contains("[DONE]") || rest.contains("error"),
        "the stream finished as if nothing happened: {rest}"
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = daemon.0.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = status.expect("with a lost RPC worker the daemon ends (ggml aborts)");
    assert!(!status.success());
    let mut stderr = String::new();
    daemon
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let report = stderr
        .lines()
        .find(|l| l.contains("a lost RPC worker ends the daemon"))
        .unwrap_or_default();
    assert!(
        report.contains(&format!("127.0.0.1:{lost_port}")),
        "no abort report naming the workers: {stderr}"
    );
    eprintln!("daemon's last words: {report}");
}
