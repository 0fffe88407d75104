//! Server processes for tests and benches (llamay itself, its rpc workers, llama-server): a
//! guard that kills the child when the test lets go of it, pass or fail; a free loopback port;
//! and bounded waits for a port to listen or `/health` to answer. Included by `#[path]` from
//! each test or bench that starts a process, so none carries its own copy.
//!
//! Key items: [`Process`], [`llamay_command`], [`llama_server_binary`],
//! [`start_llama_server`], [`link_model_file`], [`free_port`], [`wait_for_port`],
//! [`wait_for_health`].
//! Cost: a poll every 100-200 ms while waiting.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) on drop.
pub struct Process(pub Child);

impl Process {
    /// Stops the process as a service manager would (SIGTERM) and waits for it to exit, for
    /// at most `limit`; `false` if it was still running then (the drop then kills it).
    pub fn terminate(mut self, limit: Duration) -> bool {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.0.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The llamay binary under test, logging warnings only, with no config file or rpc workers
/// taken from the environment that runs the tests.
pub fn llamay_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llamay"));
    command
        .env("RUST_LOG", "warn")
        .env_remove("LLAMAY_CONFIG")
        .env_remove("LLAMAY_RPC");
    command
}

/// The llama-server binary benches compare against: `LLAMA_SERVER` (`none`: no anchor), else
/// the one `benches/peer/build-llama-server.sh` caches (in `LLAMA_SERVER_CACHE`, by default
/// `~/.cache/llamay-peer`), if it was built.
pub fn llama_server_binary() -> Option<PathBuf> {
    match std::env::var("LLAMA_SERVER") {
        Ok(path) if path == "none" => return None,
        Ok(path) => return Some(path.into()),
        Err(_) => {}
    }
    let cache = std::env::var("LLAMA_SERVER_CACHE")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|home| Path::new(&home).join(".cache/llamay-peer")))
        .ok()?;
    let path = cache.join("build-0.3.36/bin/llama-server");
    path.is_file().then_some(path)
}

/// llama-server on `model` with one slot of 1,024 tokens, `threads` threads, flash attention
/// and an f16 KV cache (llamay's defaults), on a free loopback port; its process and base URL
/// once `/health` answers.
pub fn start_llama_server(binary: &Path, model: &Path, threads: i32) -> Result<(Process, String), String> {
    let port = free_port();
    let child = Command::new(binary)
        .args(["-m", &model.display().to_string(), "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-t", &threads.to_string(), "-tb", &threads.to_string(), "-c", "1024", "-np", "1", "--no-webui"])
        .args(["-fa", "on", "-ctk", "f16", "-ctv", "f16"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let process = Process(child);
    let url = format!("http://127.0.0.1:{port}");
    if wait_for_health(&url, Duration::from_secs(120)) {
        Ok((process, url))
    } else {
        Err("llama-server did not answer /health within 120 s".into())
    }
}

/// The store model `reference`'s file (from the default store, where scripts/setup imports
/// the test models), linked (or copied) into `dir` as `file_name`, so a daemon can serve it by
/// path from a store of its own.
pub fn link_model_file(reference: &str, dir: &Path, file_name: &str) -> PathBuf {
    let store = llamay::store::Store::open(&llamay::store::Store::default_home()).expect("store");
    let (path, _) = llamay::actors::model::locate_model(reference, Some(&store))
        .unwrap_or_else(|e| panic!("{reference} (scripts/setup): {e}"));
    let target = dir.join(file_name);
    if std::fs::hard_link(&path, &target).is_err() {
        std::fs::copy(&path, &target).expect("copy the model");
    }
    target
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Whether something accepts TCP connections on loopback `port` within `limit`.
pub fn wait_for_port(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Whether `{base}/health` answers a success within `limit`.
pub fn wait_for_health(base: &str, limit: Duration) -> bool {
    let client = reqwest::blocking::Client::new();
    let start = Instant::now();
    while start.elapsed() < limit {
        let health = client
            .get(format!("{base}/health"))
            .timeout(Duration::from_secs(2))
            .send();
        if health.is_ok_and(|response| response.status().is_success()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}
