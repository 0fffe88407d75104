//! `llamay serve` and `llamay rpc-worker` as tests and benches run them: the built binary on a
//! free loopback port, started and waited for with a bound, stopped as a service manager
//! would (SIGTERM) or killed when the test lets go of it, pass or fail.
//!
//! Key types: [`DaemonBuilder`] (model, flags, environment, store; from [`Daemon::builder`]),
//! [`Daemon`] (its `base` URL, JSON requests, its log, stop), [`RpcWorker`]. A daemon's stderr
//! goes to a log file of its own, which start-up failures quote.
//! Cost: a process each; a `/health` poll every 200 ms while starting.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::Value;

use crate::http;
use crate::process::{answers_health, free_port, llamay_command, wait_for_port, Process};

/// How long a daemon may take to answer `/health` (it loads its models first).
pub const START_LIMIT: Duration = Duration::from_secs(120);
/// How long [`Daemon::stop`] waits after SIGTERM.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);

/// What `llamay serve` is started with; [`DaemonBuilder::start`] runs it.
pub struct DaemonBuilder {
    command: Command,
    addr: String,
}

impl DaemonBuilder {
    /// `-m model`: a store name or a GGUF path.
    pub fn model(mut self, model: impl AsRef<OsStr>) -> Self {
        self.command.arg("-m").arg(model);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(name, value);
        self
    }

    /// The store at `home` (`LLAMAY_HOME`) instead of the one the tests run with.
    pub fn home(self, home: impl AsRef<Path>) -> Self {
        self.env("LLAMAY_HOME", home.as_ref())
    }

    /// Starts the daemon and returns it once `/health` answers; panics with its log if it
    /// exits first or does not answer within [`START_LIMIT`].
    pub fn start(mut self) -> Daemon {
        let log_dir = tempfile::tempdir().expect("a directory for the daemon's log");
        let log = log_dir.path().join("serve.log");
        let log_file = File::create(&log).expect("the daemon's log file");
        let child = self
            .command
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("llamay serve starts");
        let mut daemon = Daemon {
            process: Process(child),
            base: format!("http://{}", self.addr),
            addr: self.addr,
            client: http::client(),
            log,
            _log_dir: log_dir,
        };
        let started = Instant::now();
        while !answers_health(&daemon.client, &daemon.base) {
            if let Some(status) = daemon.exit_status() {
                panic!(
                    "llamay serve exited ({status}) before answering /health:\n{}",
                    daemon.log()
                );
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "llamay serve did not answer /health within {START_LIMIT:?}:\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        daemon
    }
}

/// A running `llamay serve`, killed on drop.
pub struct Daemon {
    process: Process,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    addr: String,
    client: Client,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Daemon {
    /// `llamay serve` on a free loopback port (`-addr`), with the environment of
    /// [`llamay_command`]; the builder adds the rest.
    pub fn builder() -> DaemonBuilder {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut command = llamay_command();
        command.args(["serve", "-addr", &addr]);
        DaemonBuilder { command, addr }
    }

    /// `127.0.0.1:PORT`, as `-addr` and `LLAMAY_ADDR` take it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `base` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A client for this daemon, whose requests give up after [`http::TIMEOUT`].
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        http::post(&self.client, &self.url(path), body)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        http::get(&self.client, &self.url(path))
    }

    pub fn delete(&self, path: &str) -> (u16, Value) {
        http::delete(&self.client, &self.url(path))
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// How the daemon ended, or `None` while it runs.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.process.exit_status()
    }

    /// SIGTERM, then waits for the daemon to exit, for at most `limit`; `false` if it was
    /// still running then (it is killed).
    pub fn terminate(self, limit: Duration) -> bool {
        self.process.terminate(limit)
    }

    /// Stops the daemon as a service manager would (SIGTERM); panics if it has not exited
    /// within [`STOP_LIMIT`].
    pub fn stop(self) {
        assert!(
            self.terminate(STOP_LIMIT),
            "the daemon did not stop within {STOP_LIMIT:?} of SIGTERM"
        );
    }
}

/// A running `llamay rpc-worker` on a loopback port, killed on drop.
pub struct RpcWorker {
    _process: Process,
    pub port: u16,
}

impl RpcWorker {
    /// A worker on loopback `port` with one thread and `extra` flags, once it listens; panics
    /// if it does not within 30 s.
    pub fn start(port: u16, extra: &[&str]) -> RpcWorker {
        let child = llamay_command()
            .args([
                "rpc-worker",
                "-addr",
                &format!("127.0.0.1:{port}"),
                "-t",
                "1",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("llamay rpc-worker starts");
        let worker = RpcWorker {
            _process: Process(child),
            port,
        };
        assert!(
            wait_for_port(port, Duration::from_secs(30)),
            "rpc-worker on {port} did not listen within 30 s"
        );
        worker
    }

    /// A worker on a free port with one thread.
    pub fn start_any() -> RpcWorker {
        RpcWorker::start(free_port(), &[])
    }

    /// `127.0.0.1:PORT`, as `serve -rpc` takes it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}
