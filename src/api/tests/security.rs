//! The real app, mounted with a scripted model, under the security rules: a model is a name on
//! every route (paths, `..`, encoded and NUL-carrying names get a 400 that reveals nothing about
//! files), the API key on every route but `/health`, and the CORS policy. Then the real server on
//! loopback against a raw TCP client: slow headers, a slow body, idle keep-alive connections and
//! the connection cap. Every wait is bounded.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use actix_web::body::MessageBody;
use actix_web::http::StatusCode;
use actix_web::{test, web};
use serde_json::{json, Value};

use crate::service::GenerationPolicy;
use crate::api::auth::ApiKey;
use crate::api::limits::HttpLimits;
use crate::api::server::start_http;
use super::support::{app_state, ScriptedLoader};
use crate::api::{build_app, AppState, RouteSettings};
use crate::actors::supervisor::{Supervisor, SupervisorConfig};
use crate::core::KeepAlive;

fn state() -> AppState {
    state_with(RouteSettings::new(64 * 1024))
}

fn state_with(settings: RouteSettings) -> AppState {
    let config = SupervisorConfig {
        max_loaded: 2,
        default_keep_alive: KeepAlive::For(Duration::from_secs(300)),
        max_queue: 8,
    };
    let supervisor = Supervisor::new(Arc::new(ScriptedLoader::new()), config).start();
    app_state(supervisor, GenerationPolicy::default(), settings)
}

struct Answer {
    status: StatusCode,
    headers: actix_web::http::header::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn send<S, R, B>(app: &S, request: R) -> Answer
where
    S: actix_web::dev::Service<
        R,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: MessageBody,
{
    let response = test::call_service(app, request).await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = actix_web::body::to_bytes(response.into_body())
        .await
        .unwrap_or_default();
    Answer {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Model names that are paths, or would become one somewhere, in every spelling a client might try.
const PATH_LIKE: [&str; 11] = [
    "../../etc/passwd",
    "/etc/passwd",
    "/proc/self/environ",
    "..",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "~/.llamay/blobs",
    "~",
    "smollm2\0:135m",
    "C:\\Windows\\win.ini",
    "./model.gguf",
    "models/tiny.gguf",
];

/// The routes that take a model name in their body, with a body carrying `model`.
fn bodies_naming(model: &str) -> Vec<(&'static str, Value)> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": messages}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": messages, "stream": true}),
        ),
        (
            "/v1/messages",
            json!({"model": model, "max_tokens": 8, "messages": messages}),
        ),
        (
            "/api/chat",
            json!({"model": model, "messages": messages, "stream": false}),
        ),
        ("/api/chat", json!({"model": model, "messages": []})),
        ("/api/generate", json!({"model": model, "prompt": "hi"})),
        ("/api/generate", json!({"model": model})),
        ("/api/show", json!({"model": model})),
        ("/api/show", json!({"name": model})),
    ]
}

/// The error message of a body in the shape of the API `path` belongs to.
fn message_in_shape(path: &str, body: &Value) -> String {
    let message = if path.starts_with("/api/") {
        &body["error"]
    } else if path.starts_with("/v1/messages") {
        assert_eq!(body["type"], "error", "{body}");
        &body["error"]["message"]
    } else {
        assert_eq!(body["error"]["code"], "invalid_model_name", "{body}");
        assert_eq!(body["error"]["param"], "model", "{body}");
        &body["error"]["message"]
    };
    message
        .as_str()
        .unwrap_or_else(|| panic!("no message: {body}"))
        .to_string()
}

fn assert_reveals_nothing(message: &str) {
    assert!(
        message.contains("NAME or NAME:TAG"),
        "the rule is not named: {message}"
    );
    for leak in [
        "does not exist",
        "GGUF",
        "root",
        "No such file",
        "not a file",
        "permission",
    ] {
        assert!(!message.contains(leak), "{leak:?} in {message}");
    }
}

#[actix_web::test]
async fn path_like_model_names_get_a_400_naming_the_rule_on_every_route() {
    let app = test::init_service(build_app(web::Data::new(state()))).await;
    for name in PATH_LIKE {
        for (path, body) in bodies_naming(name) {
            let request = test::TestRequest::post()
                .uri(path)
                .set_payload(body.to_string())
                .to_request();
            let answer = send(&app, request).await;
            assert_eq!(
                answer.status,
                StatusCode::BAD_REQUEST,
                "{path} {name:?}: {}",
                answer.text
            );
            assert_reveals_nothing(&message_in_shape(path, &answer.json()));
        }
    }
}

#[actix_web::test]
async fn path_like_names_in_the_url_get_the_same_400() {
    let app = test::init_service(build_app(web::Data::new(state()))).await;
    let encoded = [
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "%252e%252e%252f",
        "..",
        "../../etc/passwd",
        "~%2F.llamay%2Fblobs",
        "tiny%00:1m",
        "..%5C..%5Cwin.ini",
    ];
    for name in encoded {
        let request = test::TestRequest::get()
            .uri(&format!("/v1/models/{name}"))
            .to_request();
        let answer = send(&app, request).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{name}: {}",
            answer.text
        );
        assert_reveals_nothing(&message_in_shape("/v1/models", &answer.json()));
    }
    let known = send(
        &app,
        test::TestRequest::get()
            .uri("/v1/models/tiny:1m")
            .to_request(),
    )
    .await;
    assert_eq!(known.status, StatusCode::OK, "{}", known.text);
}

#[actix_web::test]
async fn a_name_that_merely_ends_in_gguf_is_a_name_looked_up_in_the_store() {
    let app = test::init_service(build_app(web::Data::new(state()))).await;
    let body = json!({"model": "model.gguf", "messages": [{"role": "user", "content": "hi"}]});
    let request = test::TestRequest::post()
        .uri("/v1/chat/completions")
        .set_payload(body.to_string())
        .to_request();
    let answer = send(&app, request).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
    assert_eq!(answer.json()["error"]["code"], "model_not_found");
}

fn keyed_app_state() -> web::Data<AppState> {
    web::Data::new(state_with(RouteSettings { api_key: Some(ApiKey::new("k-123")), ..RouteSettings::new(64 * 1024) }))
}

/// One request per route, as its API's client sends it.
fn every_route() -> Vec<(&'static str, &'static str, Option<Value>)> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    vec![
        (
            "POST",
            "/v1/chat/completions",
            Some(json!({"model": "tiny:1m", "messages": messages})),
        ),
        ("POST", "/v1/responses", Some(json!({"model": "tiny:1m", "input": "hi"}))),
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/tiny:1m", None),
        ("GET", "/v1/stats", None),
        (
            "POST",
            "/v1/messages",
            Some(json!({"model": "tiny:1m", "max_tokens": 8, "messages": messages})),
        ),
        (
            "POST",
            "/api/chat",
            Some(json!({"model": "tiny:1m", "messages": messages, "stream": false})),
        ),
        (
            "POST",
            "/api/generate",
            Some(json!({"model": "tiny:1m", "prompt": "hi", "stream": false})),
        ),
        ("GET", "/api/tags", None),
        ("GET", "/api/ps", None),
        ("POST", "/api/show", Some(json!({"model": "tiny:1m"}))),
        ("GET", "/api/version", None),
        ("GET", "/", None),
    ]
}

fn request(method: &str, path: &str, body: &Option<Value>) -> test::TestRequest {
    let request = match method {
        "POST" => test::TestRequest::post(),
        _ => test::TestRequest::get(),
    }
    .uri(path);
    match body {
        Some(body) => request.set_payload(body.to_string()),
        None => request,
    }
}

#[actix_web::test]
async fn with_a_key_every_route_but_health_answers_401_in_its_shape_without_it() {
    let app = test::init_service(build_app(keyed_app_state())).await;
    for (method, path, body) in every_route() {
        for header in [
            None,
            Some(("authorization", "Bearer wrong")),
            Some(("authorization", "k-123")),
        ] {
            let mut unauthorized = request(method, path, &body);
            if let Some(header) = header {
                unauthorized = unauthorized.insert_header(header);
            }
            let answer = send(&app, unauthorized.to_request()).await;
            assert_eq!(
                answer.status,
                StatusCode::UNAUTHORIZED,
                "{path} {header:?}: {}",
                answer.text
            );
            assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
            let body = answer.json();
            let message = if path.starts_with("/api/") {
                body["error"].as_str().map(String::from)
            } else if path.starts_with("/v1/messages") {
                assert_eq!(body["error"]["type"], "authentication_error", "{body}");
                body["error"]["message"].as_str().map(String::from)
            } else {
                assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
                assert_eq!(body["error"]["type"], "Unauthorized", "{body}");
                body["error"]["message"].as_str().map(String::from)
            };
            let message = message.unwrap_or_else(|| panic!("{path}: no message in {body}"));
            assert!(message.contains("API key"), "{message}");
            assert!(!message.contains("k-123"), "the key leaked: {message}");
        }
        let authorized = request(method, path, &body)
            .insert_header(("authorization", "Bearer k-123"))
            .to_request();
        let answer = send(&app, authorized).await;
        assert!(
            answer.status.is_success(),
            "{path} with the key: {} {}",
            answer.status,
            answer.text
        );
    }
    let health = send(&app, test::TestRequest::get().uri("/health").to_request()).await;
    assert_eq!(health.status, StatusCode::OK, "{}", health.text);
}

#[actix_web::test]
async fn x_api_key_is_taken_as_well_as_bearer_on_every_route() {
    let app = test::init_service(build_app(keyed_app_state())).await;
    for (method, path, body) in every_route() {
        let with_header = request(method, path, &body)
            .insert_header(("x-api-key", "k-123"))
            .to_request();
        let answer = send(&app, with_header).await;
        assert!(
            answer.status.is_success(),
            "{path}: {} {}",
            answer.status,
            answer.text
        );
        let wrong = request(method, path, &body)
            .insert_header(("x-api-key", "k-12"))
            .to_request();
        assert_eq!(
            send(&app, wrong).await.status,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
}

#[actix_web::test]
async fn an_unauthorized_request_is_refused_before_its_body_is_read() {
    let app = test::init_service(build_app(keyed_app_state())).await;
    // A body over the limit would be a 413 if it were read; without the key it never is.
    let big = "x".repeat(128 * 1024);
    let answer = send(
        &app,
        test::TestRequest::post()
            .uri("/api/chat")
            .set_payload(big)
            .to_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.text);
}

fn app_state_with_origins(origins: &[&str]) -> web::Data<AppState> {
    let origins = origins.iter().map(|o| o.to_string()).collect();
    web::Data::new(state_with(RouteSettings { origins, ..RouteSettings::new(64 * 1024) }))
}

fn preflight(origin: &str) -> test::TestRequest {
    test::TestRequest::default()
        .method(actix_web::http::Method::OPTIONS)
        .uri("/v1/chat/completions")
        .insert_header(("origin", origin))
        .insert_header(("access-control-request-method", "POST"))
        .insert_header((
            "access-control-request-headers",
            "authorization, content-type",
        ))
}

#[actix_web::test]
async fn cors_answers_allowed_origins_and_refuses_the_rest() {
    let app = test::init_service(build_app(app_state_with_origins(&[
        "http://localhost:3000",
    ])))
    .await;
    let allowed = send(&app, preflight("http://localhost:3000").to_request()).await;
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.text);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    let methods = allowed
        .header("access-control-allow-methods")
        .unwrap_or_default();
    assert!(methods.contains("POST"), "{methods}");
    let refused = send(&app, preflight("http://evil.example").to_request()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert_eq!(refused.header("access-control-allow-origin"), None);

    let get = |origin: Option<&'static str>| {
        let request = test::TestRequest::get().uri("/api/tags");
        match origin {
            Some(origin) => request.insert_header(("origin", origin)).to_request(),
            None => request.to_request(),
        }
    };
    let answer = send(&app, get(Some("http://localhost:3000"))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    let answer = send(&app, get(Some("http://evil.example"))).await;
    assert_eq!(
        answer.status,
        StatusCode::BAD_REQUEST,
        "a simple cross-site request is refused"
    );
    let answer = send(&app, get(None)).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "clients without Origin are not browsers"
    );
    assert_eq!(answer.header("access-control-allow-origin"), None);
}

#[actix_web::test]
async fn no_origin_is_allowed_by_default_and_a_star_allows_any() {
    let closed = test::init_service(build_app(app_state_with_origins(&[]))).await;
    assert_eq!(
        send(&closed, preflight("http://localhost:3000").to_request())
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let open = test::init_service(build_app(app_state_with_origins(&["*"]))).await;
    let answer = send(&open, preflight("http://anything.example").to_request()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
}

#[actix_web::test]
async fn a_preflight_needs_no_key_but_the_request_after_it_does() {
    let state = state_with(RouteSettings {
        api_key: Some(ApiKey::new("k-123")),
        origins: vec!["http://localhost:3000".into()],
        ..RouteSettings::new(64 * 1024)
    });
    let app = test::init_service(build_app(web::Data::new(state))).await;
    assert_eq!(
        send(&app, preflight("http://localhost:3000").to_request())
            .await
            .status,
        StatusCode::OK
    );
    let without_key = test::TestRequest::get()
        .uri("/v1/models")
        .insert_header(("origin", "http://localhost:3000"))
        .to_request();
    let answer = send(&app, without_key).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    // The browser can read the refusal, so a page learns it needs a key.
    assert_eq!(
        answer.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
}

// ---- The real server on loopback, driven by a raw TCP client. ----

const SHORT: Duration = Duration::from_millis(1500);
/// Longest any raw-socket test waits for the server before failing.
const PATIENCE: Duration = Duration::from_secs(20);

fn short_limits() -> HttpLimits {
    HttpLimits {
        client_request_timeout: SHORT,
        request_body_timeout: SHORT,
        keep_alive: SHORT,
        max_connections: 64,
    }
}

async fn serving(limits: HttpLimits) -> (actix_web::dev::ServerHandle, SocketAddr) {
    let app_state = state_with(RouteSettings { request_body_timeout: limits.request_body_timeout, ..RouteSettings::new(64 * 1024) });
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    let (server, bound) = start_http(web::Data::new(app_state), &limits, &[loopback])
        .unwrap_or_else(|e| panic!("cannot bind loopback: {e}"));
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (handle, bound[0])
}

/// Writes `head` and then trickles `trickle` a byte at a time, reading between bytes, until the
/// server closes the connection. Returns what it answered, or panics after [`PATIENCE`].
fn trickle_until_closed(addr: SocketAddr, head: &[u8], trickle: &[u8]) -> String {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap_or_else(|e| panic!("{e}"));
    stream
        .write_all(head)
        .unwrap_or_else(|e| panic!("write: {e}"));
    let mut answer = Vec::new();
    let mut next = trickle.iter().cycle();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < PATIENCE {
        match stream.read(&mut buffer) {
            Ok(0) => return String::from_utf8_lossy(&answer).into_owned(),
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return String::from_utf8_lossy(&answer).into_owned(),
        }
        if let Some(byte) = next.next() {
            // A write error means the server hung up; the next read says so.
            let _ = stream.write_all(std::slice::from_ref(byte));
        }
    }
    panic!(
        "the server kept a slow client for {PATIENCE:?}; it answered {:?}",
        String::from_utf8_lossy(&answer)
    );
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| panic!("client thread: {e}"))
}

#[actix_web::test]
async fn a_client_sending_its_headers_too_slowly_is_dropped() {
    let (server, addr) = serving(short_limits()).await;
    let answer = blocking(move || {
        trickle_until_closed(
            addr,
            b"GET /health HTTP/1.1\r\nHost: localhost\r\n",
            b"X-Slow: aaaaaaaaaaaaaaaa\r\n",
        )
    })
    .await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    server.stop(false).await;
}

#[actix_web::test]
async fn a_client_sending_its_body_too_slowly_gets_408_and_is_dropped() {
    let (server, addr) = serving(short_limits()).await;
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"model\": \"tiny:1m\", ";
    let answer = blocking(move || trickle_until_closed(addr, head, b" ")).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("request_timeout"),
        "not in the OpenAI shape: {answer}"
    );
    server.stop(false).await;
}

#[actix_web::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let (server, addr) = serving(short_limits()).await;
    let answer = blocking(move || {
        trickle_until_closed(addr, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", b"")
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop(false).await;
}

/// Reads one response head from `stream` within `wait`, or `None`.
fn read_response(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .ok()?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < wait {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buffer[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    return Some(String::from_utf8_lossy(&answer).into_owned());
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    None
}

#[actix_web::test]
async fn an_idle_connection_makes_room_when_connections_run_short() {
    let limits = HttpLimits {
        keep_alive: Duration::from_secs(30),
        max_connections: 1,
        ..short_limits()
    };
    let (server, addr) = serving(limits).await;
    blocking(move || {
        let request = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let mut first = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        first.write_all(request).unwrap_or_else(|e| panic!("{e}"));
        let answer = read_response(&mut first, PATIENCE);
        assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
        // The first connection stays open (keep-alive 30 s) and idle; the second, past the
        // cap, is answered at once rather than waiting for it...
        let mut second = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        second.write_all(request).unwrap_or_else(|e| panic!("{e}"));
        let answer = read_response(&mut second, PATIENCE);
        assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
        // ...and the idle one is closed to make room, long before its keep-alive ends.
        assert!(closes_within(&mut first, Duration::from_secs(10)), "the idle connection was kept");
    })
    .await;
    server.stop(false).await;
}

/// Whether the server closes `stream` within `wait` (reading nothing more from it).
fn closes_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let started = Instant::now();
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buffer = [0u8; 256];
    while started.elapsed() < wait {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[actix_web::test]
async fn a_streaming_answer_is_not_shed_while_idle_connections_are() {
    let limits = HttpLimits {
        keep_alive: Duration::from_secs(30),
        client_request_timeout: Duration::from_secs(30),
        max_connections: 1,
        ..short_limits()
    };
    let (server, addr) = serving(limits).await;
    blocking(move || {
        // A stream that sends a word every 50 ms until its client leaves.
        let body = br#"{"model": "tiny:1m", "stream": true, "messages": [{"role": "user", "content": "SLOW"}]}"#;
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let mut streaming = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        streaming.write_all(head.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        streaming.write_all(body).unwrap_or_else(|e| panic!("{e}"));
        let answer = read_response(&mut streaming, PATIENCE);
        assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
        // An idle connection puts the daemon over its cap of one.
        let mut idle = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        assert!(closes_within(&mut idle, Duration::from_secs(10)), "the idle connection was kept");
        // Three times the idle allowance later, the stream still flows.
        std::thread::sleep(crate::api::head_deadline::IDLE_CHECK * 3);
        let _ = streaming.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buffer = [0u8; 1024];
        let flowing = streaming.read(&mut buffer).is_ok_and(|n| n > 0);
        assert!(flowing, "the streaming answer was cut");
    })
    .await;
    server.stop(false).await;
}

#[actix_web::test]
async fn a_second_request_whose_headers_trickle_on_a_kept_alive_connection_is_dropped() {
    let limits = HttpLimits {
        keep_alive: Duration::from_secs(30),
        ..short_limits()
    };
    let (server, addr) = serving(limits).await;
    // The first request is whole; then the second one's head comes a byte per read, for ever
    // (keep-alive is long, so only the head deadline can end it).
    let answer = blocking(move || {
        trickle_until_closed(
            addr,
            b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET /health HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaa\r\n",
        )
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let late = answer.find("HTTP/1.1 408").map(|at| &answer[at..]);
    assert!(
        late.is_some_and(|late| late.contains("connection: close")),
        "the second head was not answered 408: {answer}"
    );
    server.stop(false).await;
}

#[actix_web::test]
async fn requests_sent_whole_on_a_kept_alive_connection_are_all_answered() {
    let (server, addr) = serving(short_limits()).await;
    blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3 {
            stream
                .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap_or_else(|e| panic!("{e}"));
            let answer = read_response(&mut stream, PATIENCE);
            assert!(answer.is_some_and(|a| a.contains("HTTP/1.1 200")));
            // Idle for longer than a head may take, but under keep-alive: still open.
            std::thread::sleep(SHORT.mul_f32(0.7));
        }
    })
    .await;
    server.stop(false).await;
}
