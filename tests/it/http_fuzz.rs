//! Fuzzes the HTTP layer of the real daemon: `llamay serve` (the built binary) with the real
//! smollm2:135m on a loopback port, driven by a blocking HTTP client. For every route a valid
//! body is mutated (fields dropped, wrong types, huge and negative numbers, deep nesting,
//! invalid UTF-8, giant strings, unknown fields, schemas and grammars of random shape) and the
//! answer must be a 4xx in that API's error shape or a valid answer: never a 5xx but 503, and
//! the daemon still answers `/health` after each case and never logs a panic.
//!
//! Bounded: a fixed number of cases and a wall-clock budget (cases past it are skipped), small
//! `max_tokens` in the seeds and a small context, so an accepted mutation stays cheap.

use std::time::{Duration, Instant};

use llamay_test_support::daemon::Daemon;
use llamay_test_support::json_pointers::{all_pointers, remove_at};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";
/// Cases past this budget are skipped, so the test stays within CI's minutes on a busy machine.
const BUDGET: Duration = Duration::from_secs(100);
const CASES: u32 = 400;
/// Largest body a mutation builds; the daemon's limit is below it, so 413 is exercised too.
const GIANT_STRING_BYTES: usize = 9 << 20;

/// Which error shape a route answers in.
#[derive(Clone, Copy, Debug)]
enum Shape {
    OpenAi,
    Anthropic,
    Ollama,
}

#[derive(Clone, Copy, Debug)]
enum Method {
    Get,
    Post,
}

struct Route {
    method: Method,
    path: &'static str,
    shape: Shape,
    seed: fn() -> Value,
}

fn no_body() -> Value {
    Value::Null
}

fn openai_seed() -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["\n\n"],
        "stream": false,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]}}},
    })
}

fn openai_tools_seed() -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "max_tokens": 4,
        "stream": true,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}],
        "tool_choice": "auto",
    })
}

fn anthropic_seed() -> Value {
    json!({
        "model": MODEL,
        "max_tokens": 3,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "temperature": 0.5,
        "stop_sequences": ["\n\n"],
        "stream": false,
    })
}

fn ollama_chat_seed() -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": false,
        "format": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        "options": {"num_predict": 3, "temperature": 0.2, "top_k": 20, "seed": 1},
        "keep_alive": "5m",
    })
}

fn ollama_generate_seed() -> Value {
    json!({
        "model": MODEL,
        "prompt": "The sky is",
        "stream": true,
        "grammar": "root ::= (\"blue\" | \"grey\") \" today\"",
        "options": {"num_predict": 3, "stop": ["."]},
    })
}

fn ollama_show_seed() -> Value {
    json!({"model": MODEL})
}

fn routes() -> Vec<Route> {
    let r = |method, path, shape, seed| Route {
        method,
        path,
        shape,
        seed,
    };
    vec![
        r(
            Method::Post,
            "/v1/chat/completions",
            Shape::OpenAi,
            openai_seed,
        ),
        r(
            Method::Post,
            "/v1/chat/completions",
            Shape::OpenAi,
            openai_tools_seed,
        ),
        r(
            Method::Post,
            "/v1/messages",
            Shape::Anthropic,
            anthropic_seed,
        ),
        r(Method::Post, "/api/chat", Shape::Ollama, ollama_chat_seed),
        r(
            Method::Post,
            "/api/generate",
            Shape::Ollama,
            ollama_generate_seed,
        ),
        r(Method::Post, "/api/show", Shape::Ollama, ollama_show_seed),
        r(Method::Post, "/v1/responses", Shape::OpenAi, openai_seed),
        r(Method::Get, "/v1/models", Shape::OpenAi, no_body),
        r(Method::Get, "/v1/models/{name}", Shape::OpenAi, no_body),
        r(Method::Get, "/api/tags", Shape::Ollama, no_body),
        r(Method::Get, "/api/ps", Shape::Ollama, no_body),
        r(Method::Get, "/api/version", Shape::Ollama, no_body),
        r(Method::Get, "/v1/stats", Shape::OpenAi, no_body),
        r(Method::Get, "/metrics", Shape::OpenAi, no_body),
        r(Method::Get, "/health", Shape::OpenAi, no_body),
        r(Method::Get, "/", Shape::OpenAi, no_body),
    ]
}

/// One change to a JSON body. `at` picks a node of the tree (modulo its node count).
#[derive(Clone, Debug)]
enum Mutation {
    Drop {
        at: usize,
    },
    Replace {
        at: usize,
        with: Value,
    },
    AddUnknown {
        at: usize,
        key: String,
        with: Value,
    },
    /// Replaces a node with `depth` nested arrays.
    Nest {
        at: usize,
        depth: usize,
    },
    /// Replaces a node with a string of `bytes` bytes.
    Giant {
        at: usize,
        bytes: usize,
    },
    /// A random schema where a schema goes, or a random grammar where a grammar goes.
    Constraint {
        shape: Value,
        grammar: String,
    },
}

/// A change to the serialized body.
#[derive(Clone, Debug)]
enum ByteMutation {
    None,
    InvalidUtf8 { at: usize },
    Truncate { at: usize },
    Garbage(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Case {
    route: usize,
    mutations: Vec<Mutation>,
    bytes: ByteMutation,
    /// A path segment for `/v1/models/{name}`.
    name: String,
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1e308)),
        Just(json!(-1e308)),
        Just(json!(4294967296u64)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
        Just(json!("\u{0}\u{fffd}\u{10ffff}")),
        Just(json!("../../etc/passwd")),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_$]{1,12}", inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Schemas built from the keywords llamay knows (and some it refuses), with random values.
fn random_schema() -> impl Strategy<Value = Value> {
    let keyword = prop_oneof![
        Just("type"),
        Just("properties"),
        Just("required"),
        Just("items"),
        Just("enum"),
        Just("const"),
        Just("minimum"),
        Just("maximum"),
        Just("minLength"),
        Just("maxLength"),
        Just("pattern"),
        Just("anyOf"),
        Just("oneOf"),
        Just("allOf"),
        Just("$ref"),
        Just("$defs"),
        Just("minItems"),
        Just("maxItems"),
        Just("additionalProperties"),
        Just("format"),
        Just("not"),
        Just("if"),
        Just("multipleOf"),
        Just("exclusiveMinimum"),
    ];
    let leaf = prop_oneof![
        Just(json!("string")),
        Just(json!("integer")),
        Just(json!("object")),
        Just(json!("array")),
        Just(json!(["string", "null"])),
        Just(json!("#/$defs/x")),
        Just(json!("#")),
        Just(json!("^[a-z]{2,5}$")),
        Just(json!("(a|b)*c{3,}")),
        Just(json!("[")),
        Just(json!(4096)),
        Just(json!(-5)),
        Just(json!(1e300)),
        scalar(),
    ];
    leaf.prop_recursive(5, 48, 5, move |inner| {
        prop_oneof![
            prop::collection::vec((keyword.clone(), inner.clone()), 0..5).prop_map(|pairs| {
                Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
            prop::collection::vec(inner, 0..4).prop_map(Value::Array),
        ]
    })
}

/// GBNF-looking text: pieces of the syntax in random order, sometimes valid.
fn random_grammar() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("root ::= "),
        Just("x ::= "),
        Just("\"a\""),
        Just("\"\\x00\""),
        Just("[a-z]"),
        Just("[^\\n]"),
        Just("x"),
        Just("root"),
        Just(" | "),
        Just("("),
        Just(")"),
        Just("*"),
        Just("+"),
        Just("?"),
        Just("{2,5}"),
        Just("{0,4096}"),
        Just("{99999}"),
        Just("\n"),
        Just("\"\\u{10FFFF}\""),
        Just("# c\n"),
        Just("[]"),
        Just("\""),
        Just("::="),
        Just("."),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0usize..64;
    prop_oneof![
        at.clone().prop_map(|at| Mutation::Drop { at }),
        (at.clone(), any_json()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        (at.clone(), "[a-z_]{1,16}", any_json()).prop_map(|(at, key, with)| Mutation::AddUnknown {
            at,
            key,
            with
        }),
        (
            at.clone(),
            prop_oneof![1usize..8, 100usize..300, Just(20_000usize)]
        )
            .prop_map(|(at, depth)| Mutation::Nest { at, depth }),
        (
            at,
            prop_oneof![
                Just(70_000usize),
                Just(600_000usize),
                Just(GIANT_STRING_BYTES)
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Giant { at, bytes }),
        (random_schema(), random_grammar())
            .prop_map(|(shape, grammar)| Mutation::Constraint { shape, grammar }),
    ]
}

fn case(route_count: usize) -> impl Strategy<Value = Case> {
    let bytes = prop_oneof![
        6 => Just(ByteMutation::None),
        1 => (0usize..4096).prop_map(|at| ByteMutation::InvalidUtf8 { at }),
        1 => (0usize..4096).prop_map(|at| ByteMutation::Truncate { at }),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(ByteMutation::Garbage),
    ];
    let name = prop_oneof![
        Just(MODEL.to_string()),
        "[ -~]{0,30}",
        Just("..%2F..%2Fetc%2Fpasswd".to_string()),
        Just("%00".to_string()),
        Just("a/b/c".to_string()),
    ];
    (
        0..route_count,
        prop::collection::vec(mutation(), 0..4),
        bytes,
        name,
    )
        .prop_map(|(route, mutations, bytes, name)| Case {
            route,
            mutations,
            bytes,
            name,
        })
}

fn pick(body: &Value, at: usize) -> String {
    let mut all = all_pointers(body);
    all.swap_remove(at % all.len())
}

fn apply(body: &mut Value, mutation: &Mutation) {
    if body.is_null() {
        return;
    }
    match mutation {
        Mutation::Drop { at } => remove_at(body, &pick(body, *at)),
        Mutation::Replace { at, with } => {
            let pointer = pick(body, *at);
            if let Some(node) = body.pointer_mut(&pointer) {
                *node = with.clone();
            }
        }
        Mutation::AddUnknown { at, key, with } => {
            let pointer = pick(body, *at);
            if let Some(Value::Object(map)) = body.pointer_mut(&pointer) {
                map.insert(key.clone(), with.clone());
            }
        }
        Mutation::Nest { at, depth } => {
            let pointer = pick(body, *at);
            if let Some(node) = body.pointer_mut(&pointer) {
                *node = Value::String(format!("{NEST_MARKER}{depth}"));
            }
        }
        Mutation::Giant { at, bytes } => {
            let pointer = pick(body, *at);
            if let Some(node) = body.pointer_mut(&pointer) {
                *node = Value::String("é".repeat(bytes / 2));
            }
        }
        Mutation::Constraint { shape, grammar } => {
            let Value::Object(map) = body else { return };
            let schema_slots = [
                "/response_format/json_schema/schema",
                "/format",
                "/tools/0/function/parameters",
            ];
            for slot in schema_slots {
                if let Some(node) = map_pointer(map, slot) {
                    *node = shape.clone();
                }
            }
            for key in ["grammar", "llamay_grammar"] {
                if map.contains_key(key) {
                    map.insert(key.to_string(), Value::String(grammar.clone()));
                }
            }
            if !map.contains_key("grammar") && map.contains_key("prompt") {
                map.insert("grammar".into(), Value::String(grammar.clone()));
            }
        }
    }
}

fn map_pointer<'a>(
    map: &'a mut serde_json::Map<String, Value>,
    pointer: &str,
) -> Option<&'a mut Value> {
    let (first, rest) = pointer
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((pointer.trim_start_matches('/'), ""));
    let node = map.get_mut(first)?;
    if rest.is_empty() {
        Some(node)
    } else {
        node.pointer_mut(&format!("/{rest}"))
    }
}

/// Deep nesting goes in as a marker string, expanded when serialized: serde_json (rightly)
/// refuses to write what it would refuse to read.
const NEST_MARKER: &str = "\u{1}nest:";

fn serialize(body: &Value) -> Vec<u8> {
    let text = serde_json::to_string(body).expect("serializes");
    let marker = serde_json::to_string(NEST_MARKER).expect("serializes");
    let marker = &marker[..marker.len() - 1];
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(found) = rest.find(marker) {
        out.push_str(&rest[..found]);
        let after = &rest[found + marker.len()..];
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let depth: usize = digits.parse().unwrap_or(1);
        out.push_str(&"[".repeat(depth));
        out.push('0');
        out.push_str(&"]".repeat(depth));
        rest = &after[digits.len() + 1..];
    }
    out.push_str(rest);
    out.into_bytes()
}

fn mutate_bytes(mut body: Vec<u8>, mutation: &ByteMutation) -> Vec<u8> {
    match mutation {
        ByteMutation::None => body,
        ByteMutation::InvalidUtf8 { at } => {
            // Inside a string where there is one, so the JSON is otherwise well formed.
            let quotes: Vec<usize> = body
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'"')
                .map(|(i, _)| i)
                .collect();
            let position = if quotes.is_empty() {
                at % (body.len() + 1)
            } else {
                quotes[at % quotes.len()] + 1
            };
            let position = position.min(body.len());
            body.splice(position..position, [0xff, 0xfe, 0xc3]);
            body
        }
        ByteMutation::Truncate { at } => {
            body.truncate(at % (body.len() + 1));
            body
        }
        ByteMutation::Garbage(bytes) => bytes.clone(),
    }
}

fn start_daemon() -> Daemon {
    Daemon::builder()
        .model(MODEL)
        .args([
            "-c",
            "1024",
            "-parallel",
            "2",
            "-t",
            "1",
            "-max-loaded",
            "1",
            "-keepalive",
            "-1",
        ])
        .start()
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

/// The body of a 4xx must be that API's error object with a message.
fn check_error_shape(shape: Shape, status: u16, body: &[u8]) -> Result<(), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "{status} with a body that is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })?;
    let message = match shape {
        Shape::OpenAi => value.pointer("/error/message"),
        Shape::Anthropic => {
            if value.get("type") != Some(&json!("error")) || value.pointer("/error/type").is_none()
            {
                return Err(format!("{status} not in Anthropic's error shape: {value}"));
            }
            value.pointer("/error/message")
        }
        Shape::Ollama => value.get("error"),
    };
    match message.and_then(Value::as_str) {
        Some(text) if !text.is_empty() => Ok(()),
        _ => Err(format!(
            "{status} not in the {shape:?} error shape: {value}"
        )),
    }
}

/// A 2xx body must parse: one JSON document, SSE frames of JSON, or NDJSON lines.
fn check_success(path: &str, content_type: &str, body: &[u8]) -> Result<(), String> {
    let text =
        std::str::from_utf8(body).map_err(|e| format!("a 2xx body that is not UTF-8: {e}"))?;
    if path == "/metrics" || path == "/" || content_type.starts_with("text/plain") {
        return Ok(());
    }
    if content_type.starts_with("text/event-stream") {
        let mut frames = 0;
        for line in text.lines().filter_map(|line| line.strip_prefix("data: ")) {
            frames += 1;
            if line != "[DONE]" {
                let frame: Value = serde_json::from_str(line)
                    .map_err(|e| format!("an SSE frame that is not JSON ({e}): {line}"))?;
                // A generation that failed after the head was sent ends in an error frame.
                if frame.get("error").is_some() {
                    return Err(format!("a stream that ended in an error: {line}"));
                }
            }
        }
        return if frames > 0 {
            Ok(())
        } else {
            Err(format!("an event stream with no frame: {text}"))
        };
    }
    if content_type.starts_with("application/x-ndjson") {
        for line in text.lines().filter(|line| !line.is_empty()) {
            let value: Value = serde_json::from_str(line)
                .map_err(|e| format!("an NDJSON line that is not JSON ({e}): {line}"))?;
            if value.get("error").is_some() {
                return Err(format!("a stream that ended in an error: {line}"));
            }
        }
        return Ok(());
    }
    serde_json::from_str::<Value>(text)
        .map(|_| ())
        .map_err(|e| format!("a 2xx body that is not JSON ({e}): {text}"))
}

fn run_case(
    daemon: &mut Daemon,
    client: &reqwest::blocking::Client,
    routes: &[Route],
    case: &Case,
) -> Result<(), String> {
    let route = &routes[case.route];
    let path = route.path.replace("{name}", &case.name);
    let url = format!("{}{}", daemon.base, path);
    let response = match route.method {
        Method::Get => client.get(&url).send(),
        Method::Post => {
            let mut body = (route.seed)();
            for mutation in &case.mutations {
                apply(&mut body, mutation);
            }
            let bytes = mutate_bytes(serialize(&body), &case.bytes);
            client
                .post(&url)
                .header("content-type", "application/json")
                .body(bytes)
                .send()
        }
    };
    let outcome = match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = response
                .bytes()
                .map_err(|e| format!("{path}: reading the body failed: {e}"))?;
            match status {
                200..=299 => check_success(&path, &content_type, &body),
                503 => Ok(()),
                400..=499 => check_error_shape(route.shape, status, &body),
                _ => Err(format!("{status}: {}", String::from_utf8_lossy(&body))),
            }
            .map_err(|e| {
                format!(
                    "{} {path}: {e}",
                    if matches!(route.method, Method::Get) {
                        "GET"
                    } else {
                        "POST"
                    }
                )
            })
        }
        // A path the client cannot even form as a URL never reaches the daemon.
        Err(error) if error.is_builder() => Ok(()),
        Err(error) => Err(format!("{path}: no answer: {error}")),
    };
    if let Some(status) = daemon.exit_status() {
        return Err(format!(
            "the daemon exited ({status}) on {path}: {}",
            daemon.log()
        ));
    }
    let health = client
        .get(format!("{}/health", daemon.base))
        .send()
        .map(|r| r.status().as_u16());
    if health.as_ref().ok() != Some(&200) {
        return Err(format!(
            "/health did not answer 200 after {path}: {health:?}"
        ));
    }
    outcome
}

#[test]
fn every_route_answers_mutated_bodies_with_a_4xx_in_its_shape_or_a_valid_answer() {
    let mut daemon = start_daemon();
    let client = client();
    let routes = routes();
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    // The runner takes a `Fn`: the daemon and the count are borrowed through cells.
    let ran = std::cell::Cell::new(0u32);
    let shared = std::cell::RefCell::new(&mut daemon);
    let result = runner.run(&case(routes.len()), |case| {
        if started.elapsed() > BUDGET {
            return Ok(());
        }
        ran.set(ran.get() + 1);
        let mut daemon = shared.borrow_mut();
        run_case(&mut daemon, &client, &routes, &case).map_err(TestCaseError::fail)
    });
    let ran = ran.get();
    drop(shared);
    let log = daemon.log();
    assert!(
        !log.contains("panicked"),
        "the daemon logged a panic:\n{log}"
    );
    if let Err(failure) = result {
        panic!(
            "{failure}\ndaemon log (tail):\n{}",
            log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!("{ran} cases in {:.0?}", started.elapsed());
}
