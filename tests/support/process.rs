//! Server processes for tests and benches (llamay itself, its rpc workers, llama-server): a
//! guard that kills the child when the test lets go of it, pass or fail; a free loopback port;
//! and bounded waits for a port to listen or `/health` to answer. Included by `#[path]` from
//! each test or bench that starts a process, so none carries its own copy.
//!
//! Key items: [`Process`], [`llamay_command`], [`free_port`], [`wait_for_port`],
//! [`wait_for_health`].
//! Cost: a poll every 100-200 ms while waiting.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
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
