//! What protects a running `llamay serve` from its network and fits it to a service manager,
//! checked on the real binary with a real HTTP client and real sockets (no model needed):
//!
//! - the `Host` check of a loopback bind: loopback names and the operator's `allowed_hosts`
//!   are answered, any other name gets 403 in each API's error shape naming it, and a bind
//!   beyond loopback does not check;
//! - idle connections are shed when connections run short, so `/health` answers while one
//!   client holds far more idle connections than `max_connections`;
//! - logs: no ANSI escape codes when stderr is a file, and one JSON object a line with
//!   `-log-format json`, the `llamay serving` line included.
//!
//! Each daemon has its own empty store (a temporary `LLAMAY_HOME`) and is stopped on drop.

use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llamay_test_support::daemon::Daemon;
use reqwest::blocking::Client;
use reqwest::header::HOST;
use serde_json::Value;

/// A daemon with the empty store it was started over, removed after it stops.
struct Served {
    daemon: Daemon,
    _home: tempfile::TempDir,
}

impl Served {
    fn base(&self) -> &str {
        &self.daemon.base
    }

    fn port(&self) -> u16 {
        let (_, port) = self.daemon.addr().rsplit_once(':').expect("host:port");
        port.parse().expect("port")
    }
}

/// `llamay serve` on `bind_ip` with `args`, logging at info, once `/health` answers.
fn start(bind_ip: &str, args: &[&str]) -> Served {
    let home = tempfile::tempdir().expect("home");
    let daemon = Daemon::builder()
        .bind_ip(bind_ip)
        .home(home.path())
        .env("RUST_LOG", "info")
        .args(args)
        .start();
    Served { daemon, _home: home }
}

fn with_host(client: &Client, url: String, host: &str) -> (u16, Value) {
    let response = client.get(url).header(HOST, host).send().expect("answer");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn a_loopback_bind_answers_loopback_and_added_hosts_and_refuses_others_in_each_shape() {
    let daemon = start("127.0.0.1", &["-allowed-hosts", "box.lan,proxy.example"]);
    let client = Client::new();
    let port = daemon.port();
    let tags = format!("{}/api/tags", daemon.base());
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "app.localhost".to_string(),
        format!("box.lan:{port}"),
        "PROXY.example".to_string(),
    ] {
        let (status, body) = with_host(&client, tags.clone(), &host);
        assert_eq!(status, 200, "Host {host}: {body}");
    }

    let attacker = format!("attacker.example:{port}");
    let (status, body) = with_host(&client, tags, &attacker);
    assert_eq!(status, 403, "{body}");
    let message = body["error"].as_str().expect("Ollama's shape: error is the message");
    assert!(message.contains("attacker.example") && message.contains("allowed_hosts"), "{message}");

    let (status, body) = with_host(&client, format!("{}/v1/models", daemon.base()), &attacker);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed", "OpenAI's shape: {body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("attacker.example"));

    let response = client
        .post(format!("{}/v1/messages", daemon.base()))
        .header(HOST, &attacker)
        .json(&serde_json::json!({"model": "m", "max_tokens": 1, "messages": []}))
        .send()
        .expect("answer");
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().expect("json");
    assert_eq!(body["type"], "error", "Anthropic's shape: {body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");

    // A DNS-rebinding page cannot even read liveness.
    let (status, _) = with_host(&client, format!("{}/health", daemon.base()), &attacker);
    assert_eq!(status, 403);
}

#[test]
fn a_bind_beyond_loopback_leaves_the_host_to_the_api_key() {
    let daemon = start("0.0.0.0", &[]);
    let (status, body) =
        with_host(&Client::new(), format!("{}/api/tags", daemon.base()), "attacker.example");
    assert_eq!(status, 200, "{body}");
}

/// Keeps `count` idle connections to `port` open, opening a new one for each the daemon
/// closes, until `stop`; counts the connections the daemon closed.
fn hold_idle_connections(port: u16, count: usize, stop: Arc<AtomicBool>, closed: Arc<AtomicUsize>) {
    let mut held: Vec<TcpStream> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        held.retain_mut(|socket| {
            let mut byte = [0u8; 1];
            match socket.read(&mut byte) {
                Ok(0) => {
                    closed.fetch_add(1, Ordering::AcqRel);
                    false
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => true,
                _ => false,
            }
        });
        while held.len() < count {
            match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) {
                Ok(socket) => {
                    socket.set_nonblocking(true).expect("nonblocking");
                    held.push(socket);
                }
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn health_answers_while_one_client_holds_many_idle_connections() {
    let config = tempfile::NamedTempFile::new().expect("config");
    // Long head and keep-alive deadlines: without shedding, a new connection would wait in
    // the listen backlog until idle ones time out, 30 s.
    std::fs::write(
        config.path(),
        "max_connections = 64\nclient_request_timeout = \"30s\"\nhttp_keep_alive = \"30s\"\n",
    )
    .expect("write config");
    let daemon = start("127.0.0.1", &["-config", &config.path().display().to_string()]);
    let (stop, closed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let holder = {
        let (stop, closed, port) = (Arc::clone(&stop), Arc::clone(&closed), daemon.port());
        std::thread::spawn(move || hold_idle_connections(port, 200, stop, closed))
    };
    std::thread::sleep(Duration::from_secs(2));
    let client = Client::builder().timeout(Duration::from_secs(25)).build().expect("client");
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        // A new connection each time, as a liveness probe makes.
        let started = Instant::now();
        let response = client
            .get(format!("{}/health", daemon.base()))
            .header("connection", "close")
            .send()
            .expect("/health answers while idle connections are held");
        assert_eq!(response.status().as_u16(), 200);
        slowest = slowest.max(started.elapsed());
    }
    stop.store(true, Ordering::Release);
    holder.join().expect("holder");
    assert!(closed.load(Ordering::Acquire) > 0, "idle connections were shed");
    assert!(
        slowest < Duration::from_secs(10),
        "/health took {slowest:?}, as long as the idle connections' own deadline"
    );
}

#[test]
fn logs_have_no_colour_codes_in_a_file_and_are_json_lines_when_asked() {
    // The daemon's stderr is a file: the log a service manager keeps.
    let text = start("127.0.0.1", &[]).daemon.log();
    assert!(text.contains("llamay serving"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in a log file: {text:?}");

    let lines = start("127.0.0.1", &["-log-format", "json"]).daemon.log();
    let mut serving = None;
    for line in lines.lines().filter(|line| !line.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if entry["fields"]["message"] == "llamay serving" {
            serving = Some(entry);
        }
    }
    let serving = serving.expect("the llamay serving line");
    assert_eq!(serving["level"], "INFO");
    assert!(serving["fields"]["listening"].as_str().is_some_and(|l| l.starts_with("127.0.0.1:")), "{serving}");
}
