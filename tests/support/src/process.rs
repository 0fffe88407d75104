//! Server processes for tests and benches (llamay itself, its rpc workers, llama-server): the
//! binary under test, a guard that kills the child when the test lets go of it, pass or fail;
//! a free loopback port; and bounded waits for a port to listen or `/health` to answer.
//!
//! Key items: [`Process`], [`llamay_binary`], [`llamay_command`], [`llama_server_binary`],
//! [`start_llama_server`], [`free_port`], [`wait_until`], [`wait_for_port`],
//! [`wait_for_health`]. Cost: a poll every 100-200 ms while waiting.

use std::ffi::OsStr;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) on drop.
pub struct Process(pub Child);

impl Process {
    /// Stops the process as a service manager would (SIGTERM) and waits for it to exit, for
    /// at most `limit`; `false` if it was still running then (the drop then kills it).
    pub fn terminate(mut self, limit: Duration) -> bool {
        // SAFETY: kill(2) with a plain signal number on the pid of our own child, which is not
        // reaped yet (`self` owns it), so the pid cannot name another process.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        wait_until(limit, Duration::from_millis(100), || {
            self.exit_status().is_some()
        })
    }

    /// How the process ended, or `None` while it runs.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().ok().flatten()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The llamay binary cargo built for the running test or bench. Cargo writes test and bench
/// executables to `target/<profile>/deps/` and the package's binaries one level up, and builds
/// those binaries before it runs any integration test or bench (the layout assert_cmd's
/// `cargo_bin` relies on too). `env!("CARGO_BIN_EXE_llamay")` would name the same file, but
/// cargo sets it only when compiling llamay's own test targets, not this crate.
pub fn llamay_binary() -> PathBuf {
    let executable = std::env::current_exe().expect("the path of the running test");
    let mut directory = executable
        .parent()
        .expect("the test's directory")
        .to_path_buf();
    if directory.ends_with("deps") {
        directory.pop();
    }
    let binary = directory.join(format!("llamay{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "no llamay binary at {} (cargo builds it for `cargo test` and `cargo bench`)",
        binary.display()
    );
    binary
}

/// The llamay binary under test, logging warnings only. Of the environment that runs the tests
/// it keeps the model store (`LLAMAY_HOME`) and drops every other `LLAMAY_*` setting (a config
/// file, rpc workers, an address, an API key), so a developer's shell does not change what a
/// test sees; a test sets what it needs on the returned command.
pub fn llamay_command() -> Command {
    let mut command = Command::new(llamay_binary());
    command.env("RUST_LOG", "warn");
    for (name, _) in std::env::vars_os() {
        if is_llamay_setting(&name) {
            command.env_remove(name);
        }
    }
    command
}

fn is_llamay_setting(name: &OsStr) -> bool {
    name.to_str()
        .is_some_and(|name| name.starts_with("LLAMAY_") && name != "LLAMAY_HOME")
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
pub fn start_llama_server(
    binary: &Path,
    model: &Path,
    threads: i32,
) -> Result<(Process, String), String> {
    let (model, threads) = (model.display().to_string(), threads.to_string());
    let args = [
        "-m", &model, "-t", &threads, "-tb", &threads, "-c", "1024", "-np", "1", "-fa", "on",
        "-ctk", "f16", "-ctv", "f16",
    ];
    start_llama_server_with(binary, &args)
}

/// llama-server with `args` (everything but its address and web UI) on a free loopback port;
/// its process and base URL once `/health` answers (within 120 s).
pub fn start_llama_server_with(binary: &Path, args: &[&str]) -> Result<(Process, String), String> {
    let port = free_port();
    let child = Command::new(binary)
        .args(args)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--no-webui",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let process = Process(child);
    let url = format!("http://127.0.0.1:{port}");
    if wait_for_health(&url, Duration::from_secs(120)) {
        Ok((process, url))
    } else {
        Err(format!(
            "{} did not answer /health within 120 s",
            binary.display()
        ))
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Whether `ready` holds within `limit`, asking every `every`.
pub fn wait_until(limit: Duration, every: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Whether something accepts TCP connections on loopback `port` within `limit`.
pub fn wait_for_port(port: u16, limit: Duration) -> bool {
    wait_until(limit, Duration::from_millis(100), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
}

/// Whether `{base}/health` answers a success within `limit`.
pub fn wait_for_health(base: &str, limit: Duration) -> bool {
    let client = reqwest::blocking::Client::new();
    wait_until(limit, Duration::from_millis(200), || {
        answers_health(&client, base)
    })
}

/// Whether `{base}/health` answers a success now (within 2 s).
pub fn answers_health(client: &reqwest::blocking::Client, base: &str) -> bool {
    client
        .get(format!("{base}/health"))
        .timeout(Duration::from_secs(2))
        .send()
        .is_ok_and(|response| response.status().is_success())
}
