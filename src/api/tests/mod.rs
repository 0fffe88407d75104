//! The real app mounted with a scripted model: every route, both streaming forms, structured
//! output wiring, and each error path in each API's own shape and status. The GPU placement
//! routes (`devices`), the server's guards (`security`) and the tool routes (`tools`) have
//! modules of their own; `support` is what they and the converters' tests share.

mod devices;
mod security;
pub(crate) mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use actix_web::body::MessageBody;
use actix_web::http::StatusCode;
use actix_web::{test, web};
use serde_json::{json, Value};

use self::support::{app_state, ScriptedLoader};
use super::{build_app, AppState, RouteSettings};
use crate::service::GenerationPolicy;
use crate::actors::supervisor::{acquire, Supervisor, SupervisorConfig};
use crate::core::{Constraint, ConstraintSource, KeepAlive};

const BODY_LIMIT: usize = 64 * 1024;

struct Harness {
    state: web::Data<AppState>,
    /// The supervisor under the state, for tests that lease a model themselves.
    supervisor: actix::Addr<Supervisor>,
    in_use: Arc<AtomicUsize>,
}

fn harness(max_loaded: usize, max_queue: usize) -> Harness {
    let loader = ScriptedLoader::new();
    let in_use = loader.in_use.clone();
    let config = SupervisorConfig {
        max_loaded,
        default_keep_alive: KeepAlive::For(Duration::from_secs(300)),
        max_queue,
    };
    let supervisor = Supervisor::new(Arc::new(loader), config).start();
    let state = web::Data::new(app_state(supervisor.clone(), GenerationPolicy::default(), RouteSettings::new(BODY_LIMIT)));
    Harness { state, supervisor, in_use }
}

/// POSTs `body` (a JSON value, or raw text) to `path`; returns status, headers' Retry-After, body.
macro_rules! call {
    ($app:expr, $method:ident, $path:expr) => {{
        let request = test::TestRequest::$method().uri($path).to_request();
        let response = test::call_service(&$app, request).await;
        finish(response).await
    }};
    ($app:expr, $method:ident, $path:expr, raw $body:expr) => {{
        let request = test::TestRequest::$method().uri($path).set_payload($body).to_request();
        let response = test::call_service(&$app, request).await;
        finish(response).await
    }};
    ($app:expr, $method:ident, $path:expr, $body:expr) => {{
        let text = serde_json::to_string(&$body).unwrap();
        call!($app, $method, $path, raw text)
    }};
}

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    content_type: String,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

async fn finish<B: MessageBody>(response: actix_web::dev::ServiceResponse<B>) -> Answer {
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let retry_after = header("retry-after");
    let content_type = header("content-type").unwrap_or_default();
    let Ok(bytes) = actix_web::body::to_bytes(response.into_body()).await else {
        panic!("the body failed")
    };
    Answer {
        status,
        retry_after,
        content_type,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn chat_body(model: &str, content: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": content}]})
}

fn sse_data(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap_or(Value::String(data.into())))
        .collect()
}

#[actix_web::test]
async fn openai_chat_answers_with_usage() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(
        app,
        post,
        "/v1/chat/completions",
        chat_body("tiny:1m", "hi there")
    );
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let body = answer.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "tiny:1m");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello there, friend"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    let mut limited = chat_body("tiny:1m", "hi");
    limited["max_tokens"] = json!(1);
    let body = call!(app, post, "/v1/chat/completions", limited).json();
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[actix_web::test]
async fn openai_stream_is_sse_with_usage_and_done() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let mut body = chat_body("tiny:1m", "hi");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let answer = call!(app, post, "/v1/chat/completions", body);
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.content_type.starts_with("text/event-stream"));
    let frames = sse_data(&answer.text);
    let text: String = frames
        .iter()
        .filter_map(|f| f["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello there, friend");
    assert_eq!(frames.last(), Some(&Value::String("[DONE]".into())));
    let usage = &frames[frames.len() - 2];
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert_eq!(
        frames[frames.len() - 3]["choices"][0]["finish_reason"],
        "stop"
    );
}

#[actix_web::test]
async fn structured_output_reaches_the_model_on_every_route() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let mut openai = chat_body("tiny:1m", "order");
    openai["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}});
    assert_eq!(
        call!(app, post, "/v1/chat/completions", openai).json()["choices"][0]["message"]["content"],
        "{\"ok\":true}"
    );
    let anthropic = json!({"model": "tiny:1m", "max_tokens": 20, "llamay_format": "json", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(
        call!(app, post, "/v1/messages", anthropic).json()["content"][0]["text"],
        "{\"ok\":true}"
    );
    let ollama = json!({"model": "tiny:1m", "stream": false, "format": {"type": "object"}, "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(
        call!(app, post, "/api/chat", ollama).json()["message"]["content"],
        "{\"ok\":true}"
    );
    let grammar =
        json!({"model": "tiny:1m", "stream": false, "prompt": "x", "grammar": "root ::= \"a\""});
    assert_eq!(
        call!(app, post, "/api/generate", grammar).json()["response"],
        "{\"ok\":true}"
    );
}

#[actix_web::test]
async fn refusals_are_400s_in_each_shape() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let refused_schema =
        json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}});
    let mut openai = chat_body("tiny:1m", "x");
    openai["llamay_schema"] = refused_schema.clone();
    let answer = call!(app, post, "/v1/chat/completions", openai);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let body = answer.json();
    assert_eq!(
        body["error"]["message"],
        "properties.a uses \"not\", which llamay's constraint cannot honour; send a schema without it rather than one that is silently not enforced"
    );
    assert_eq!(body["error"]["type"], "Bad Request");

    let anthropic = json!({"model": "tiny:1m", "max_tokens": 5, "llamay_schema": refused_schema, "messages": [{"role": "user", "content": "x"}]});
    let answer = call!(app, post, "/v1/messages", anthropic);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["type"], "error");
    assert_eq!(answer.json()["error"]["type"], "invalid_request_error");
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"not\""));

    let both = json!({"model": "tiny:1m", "format": "json", "grammar": "root ::= \"a\"", "messages": [{"role": "user", "content": "x"}]});
    let answer = call!(app, post, "/api/chat", both);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["error"]
        .as_str()
        .unwrap()
        .contains("grammar and a JSON schema"));

    let mut bad_grammar = chat_body("tiny:1m", "x");
    bad_grammar["llamay_grammar"] = json!("root = oops");
    let answer = call!(app, post, "/v1/chat/completions", bad_grammar);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"]["code"], "grammar_refused");
    assert_eq!(answer.json()["error"]["param"], "llamay_grammar");
}

#[actix_web::test]
async fn malformed_and_mistyped_bodies_are_400_in_the_routes_shape() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(app, post, "/v1/chat/completions", raw "{\"model\": ");
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"]["code"], "malformed_json");
    let answer = call!(app, post, "/v1/messages", raw "not json");
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["type"], "error");
    let answer = call!(app, post, "/api/chat", json!({"model": 3, "messages": []}));
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["error"]
        .as_str()
        .unwrap()
        .contains("invalid type"));
    let answer = call!(
        app,
        post,
        "/v1/messages",
        json!({"model": "tiny:1m", "messages": [{"role": "user", "content": "x"}]})
    );
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));
    let answer = call!(app, post, "/api/generate", raw "");
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let deep = "[".repeat(100_000);
    let answer = call!(app, post, "/api/chat", raw deep);
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    let deep = "[".repeat(10_000);
    let answer = call!(app, post, "/api/chat", raw deep);
    assert_eq!(
        answer.status,
        StatusCode::BAD_REQUEST,
        "nesting past serde's limit is an error, not a crash"
    );
}

#[actix_web::test]
async fn unknown_model_is_404_and_long_prompt_400_and_big_body_413() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(app, post, "/v1/chat/completions", chat_body("nope:1b", "x"));
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.json()["error"]["code"], "model_not_found");
    let answer = call!(app, post, "/api/chat", chat_body("nope:1b", "x"));
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.json()["error"].as_str().unwrap().contains("nope:1b"));
    let answer = call!(
        app,
        post,
        "/v1/messages",
        json!({"model": "nope", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]})
    );
    assert_eq!(answer.json()["error"]["type"], "not_found_error");

    let answer = call!(
        app,
        post,
        "/v1/chat/completions",
        chat_body("tiny:1m", "TOO LONG")
    );
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"]["code"], "prompt_too_long");

    let huge = chat_body("tiny:1m", &"x".repeat(BODY_LIMIT + 1));
    let answer = call!(app, post, "/v1/chat/completions", huge);
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.json()["error"]["type"], "Payload Too Large");
}

#[actix_web::test]
async fn overload_is_503_with_retry_after() {
    let h = harness(1, 1);
    let app = test::init_service(build_app(h.state.clone())).await;
    let _busy = acquire(&h.supervisor, "tiny:1m", None).await.unwrap();
    let supervisor = h.supervisor.clone();
    let _waiting =
        actix::spawn(async move { acquire(&supervisor, "other:2m", None).await.map(|_| ()) });
    actix::clock::sleep(Duration::from_millis(50)).await;
    let answer = call!(app, post, "/api/chat", chat_body("other:2m", "x"));
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.retry_after.as_deref(), Some("1"));
    let answer = call!(
        app,
        post,
        "/v1/chat/completions",
        chat_body("other:2m", "x")
    );
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.retry_after.is_some());
}

#[actix_web::test]
async fn anthropic_stream_has_the_real_event_sequence() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let body = json!({"model": "tiny:1m", "max_tokens": 50, "stream": true, "system": "be kind", "messages": [{"role": "user", "content": "x"}]});
    let answer = call!(app, post, "/v1/messages", body);
    assert_eq!(answer.status, StatusCode::OK);
    let events: Vec<&str> = answer
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"));
    assert_eq!(
        &events[events.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == "content_block_delta")
            .count(),
        3
    );
    let plain = json!({"model": "tiny:1m", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]});
    let body = call!(app, post, "/v1/messages", plain).json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["content"][0]["text"], "Hello there, friend");
}

#[actix_web::test]
async fn ollama_streams_ndjson_by_default_and_reports_counts() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(app, post, "/api/chat", chat_body("tiny:1m", "hi"));
    assert!(answer.content_type.starts_with("application/x-ndjson"));
    let lines: Vec<Value> = answer
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["message"]["content"], "Hello");
    let last = &lines[3];
    assert_eq!(last["done"], true);
    assert_eq!(last["eval_count"], 3);
    assert!(last["total_duration"].as_u64().unwrap() > 0);
    let body =
        json!({"model": "tiny:1m", "prompt": "hi", "stream": false, "options": {"num_predict": 2}});
    let answer = call!(app, post, "/api/generate", body).json();
    assert_eq!(answer["response"], "Hello there");
    assert_eq!(answer["done_reason"], "length");
}

#[actix_web::test]
async fn ollama_load_and_unload_with_an_empty_request() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(app, post, "/api/generate", json!({"model": "tiny:1m"})).json();
    assert_eq!(answer["done_reason"], "load");
    let ps = call!(app, get, "/api/ps").json();
    assert_eq!(ps["models"][0]["name"], "tiny:1m");
    assert_eq!(ps["models"][0]["details"]["family"], "llama");
    let answer = call!(
        app,
        post,
        "/api/chat",
        json!({"model": "tiny:1m", "messages": [], "keep_alive": 0})
    )
    .json();
    assert_eq!(answer["done_reason"], "unload");
    actix::clock::sleep(Duration::from_millis(20)).await;
    assert_eq!(call!(app, get, "/api/ps").json()["models"], json!([]));
}

#[actix_web::test]
async fn listing_routes_stats_health_and_the_rest() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let tags = call!(app, get, "/api/tags").json();
    assert_eq!(tags["models"].as_array().unwrap().len(), 2);
    assert_eq!(tags["models"][0]["digest"], "abcd");
    let models = call!(app, get, "/v1/models").json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][1]["id"], "other:2m");
    assert_eq!(tags["models"][0]["capabilities"], json!(["completion", "tools"]));
    let show = call!(app, post, "/api/show", json!({"model": "tiny:1m"}));
    assert_eq!(show.json()["details"]["quantization_level"], "Q8_0");
    assert_eq!(show.json()["capabilities"], json!(["completion", "tools"]));
    assert_eq!(
        call!(app, post, "/api/show", json!({"name": "nope"})).status,
        StatusCode::NOT_FOUND
    );
    assert!(call!(app, get, "/api/version").json()["version"].is_string());
    assert_eq!(call!(app, get, "/health").json()["status"], "ok");

    call!(
        app,
        post,
        "/v1/chat/completions",
        chat_body("tiny:1m", "hi")
    );
    let stats = call!(app, get, "/v1/stats").json();
    assert_eq!(stats["models"][0]["name"], "tiny:1m");
    assert_eq!(stats["models"][0]["sequences_in_use"], 0);
    assert_eq!(stats["max_loaded"], 2);
    assert!(stats["models"][0]["expires_at"].is_string());

    let unknown = call!(app, get, "/api/nothing");
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(
        unknown.json()["error"].is_string(),
        "Ollama shape under /api"
    );
    assert!(call!(app, get, "/v2/what").json()["error"]["message"].is_string());
}

#[actix_web::test]
async fn errors_after_the_first_token() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(
        app,
        post,
        "/v1/chat/completions",
        chat_body("tiny:1m", "FAIL")
    );
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("fake decode failed"));
    let mut streaming = chat_body("tiny:1m", "FAIL");
    streaming["stream"] = json!(true);
    let frames = sse_data(&call!(app, post, "/v1/chat/completions", streaming).text);
    assert!(frames.iter().any(|f| f["error"]["message"].is_string()));
    assert_eq!(frames.last(), Some(&Value::String("[DONE]".into())));
    let lines = call!(
        app,
        post,
        "/api/generate",
        json!({"model": "tiny:1m", "prompt": "FAIL"})
    )
    .text;
    assert!(lines.lines().last().unwrap().contains("\"error\""));
}

#[actix_web::test]
async fn a_client_that_goes_away_frees_its_sequence() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let mut body = chat_body("tiny:1m", "SLOW");
    body["stream"] = json!(true);
    let request = test::TestRequest::post()
        .uri("/v1/chat/completions")
        .set_json(&body)
        .to_request();
    let response = test::call_service(&app, request).await;
    let mut stream = Box::pin(response.into_body());
    let mut frames = 0;
    while frames < 3 {
        let next = futures_util::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await;
        assert!(next.is_some_and(|chunk| chunk.is_ok()));
        frames += 1;
    }
    assert_eq!(h.in_use.load(Ordering::SeqCst), 1);
    drop(stream);
    let mut waited = 0;
    while h.in_use.load(Ordering::SeqCst) != 0 && waited < 200 {
        actix::clock::sleep(Duration::from_millis(25)).await;
        waited += 1;
    }
    assert_eq!(
        h.in_use.load(Ordering::SeqCst),
        0,
        "the cancelled request left its sequence"
    );
    let stats = call!(app, get, "/v1/stats").json();
    assert_eq!(
        stats["models"][0]["requests_in_flight"], 0,
        "the lease was released"
    );
}

#[actix_web::test]
async fn the_grammar_file_applies_unless_the_request_brings_its_own_constraint() {
    let loader = ScriptedLoader::new();
    let config = SupervisorConfig {
        max_loaded: 1,
        default_keep_alive: KeepAlive::For(Duration::from_secs(60)),
        max_queue: 4,
    };
    let supervisor = Supervisor::new(Arc::new(loader), config).start();
    let limits = crate::grammar::limits::Limits::default();
    let grammar = Constraint::from_source(
        ConstraintSource::Gbnf { text: "root ::= \"yes\" | \"no\"".into() },
        &limits,
    )
    .unwrap();
    let policy = GenerationPolicy { default_grammar: Some(grammar), ..Default::default() };
    let state = web::Data::new(app_state(supervisor, policy, RouteSettings::new(BODY_LIMIT)));
    let app = test::init_service(build_app(state.clone())).await;
    let body = call!(app, post, "/v1/chat/completions", chat_body("tiny:1m", "x")).json();
    assert_eq!(
        body["choices"][0]["message"]["content"], "{\"ok\":true}",
        "the scripted model saw a constraint"
    );
    let mut with_schema = chat_body("tiny:1m", "x");
    with_schema["llamay_schema"] = json!({"type": "integer"});
    assert_eq!(
        call!(app, post, "/v1/chat/completions", with_schema).status,
        StatusCode::OK,
        "a request schema replaces the file's grammar"
    );
}

#[actix_web::test]
async fn grammar_refusals_name_the_problem_and_compiled_constraints_are_reused() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let mut left_recursive = chat_body("tiny:1m", "x");
    left_recursive["grammar"] = json!("root ::= root \"a\" | \"a\"");
    let answer = call!(app, post, "/v1/chat/completions", left_recursive);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("left-recursive"),
        "{}",
        answer.text
    );
    let mut schema = chat_body("tiny:1m", "x");
    schema["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer", "minimum": 3}}});
    for _ in 0..3 {
        assert_eq!(
            call!(app, post, "/v1/chat/completions", schema.clone()).status,
            StatusCode::OK
        );
    }
    let stats = call!(app, get, "/v1/stats").json();
    assert_eq!(stats["compiled_constraints"]["hits"], 2);
    assert_eq!(stats["compiled_constraints"]["entries"], 1);
}

mod tools;

/// Issue 9: every API's requests get the daemon's default budget when they name none, and a
/// budget above the limit is clamped to it (the scripted model says one word per token).
#[actix_web::test]
async fn max_tokens_gets_the_configured_default_and_is_clamped_to_the_limit() {
    let loader = ScriptedLoader::new();
    let config = SupervisorConfig {
        max_loaded: 1,
        default_keep_alive: KeepAlive::For(Duration::from_secs(60)),
        max_queue: 4,
    };
    let supervisor = Supervisor::new(Arc::new(loader), config).start();
    let token_limits = crate::core::TokenLimits { default_max_tokens: 1, max_tokens_limit: 2 };
    let state = app_state(supervisor, GenerationPolicy { token_limits, ..Default::default() }, RouteSettings::new(BODY_LIMIT));
    let app = test::init_service(build_app(web::Data::new(state))).await;

    let mut body = chat_body("tiny:1m", "x");
    let answer = call!(app, post, "/v1/chat/completions", body.clone()).json();
    assert_eq!(answer["usage"]["completion_tokens"], 1, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    body["max_tokens"] = json!(1_000_000);
    let answer = call!(app, post, "/v1/chat/completions", body).json();
    assert_eq!(answer["usage"]["completion_tokens"], 2, "clamped, not refused: {answer}");

    let anthropic = json!({"model": "tiny:1m", "max_tokens": 64000, "messages": [{"role": "user", "content": "x"}]});
    let answer = call!(app, post, "/v1/messages", anthropic).json();
    assert_eq!((&answer["usage"]["output_tokens"], &answer["stop_reason"]), (&json!(2), &json!("max_tokens")));

    for (options, expected) in [(json!({}), 1), (json!({"num_predict": -1}), 2), (json!({"num_predict": 1}), 1)] {
        let ollama = json!({"model": "tiny:1m", "stream": false, "options": options,
                            "messages": [{"role": "user", "content": "x"}]});
        let answer = call!(app, post, "/api/chat", ollama).json();
        assert_eq!(answer["eval_count"], expected, "{options}: {answer}");
        assert_eq!(answer["done_reason"], "length");
    }
}

#[actix_web::test]
async fn llamay_formats_enforce_refuses_a_format_with_a_pattern_and_the_default_ignores_formats() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let schema = json!({"type": "object", "properties": {"id": {"type": "string", "format": "uuid", "pattern": "^a"}}});
    let mut openai = chat_body("tiny:1m", "x");
    openai["llamay_schema"] = schema.clone();
    assert_eq!(call!(app, post, "/v1/chat/completions", openai.clone()).status, StatusCode::OK, "formats are ignored by default");
    openai["llamay_formats"] = json!("enforce");
    let answer = call!(app, post, "/v1/chat/completions", openai.clone());
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let message = answer.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("properties.id") && message.contains("format") && message.contains("pattern"), "{message}");
    assert_eq!(answer.json()["error"]["code"], "schema_refused");

    let anthropic = json!({"model": "tiny:1m", "max_tokens": 5, "llamay_schema": schema.clone(), "llamay_formats": "enforce",
                           "messages": [{"role": "user", "content": "x"}]});
    let answer = call!(app, post, "/v1/messages", anthropic);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["error"]["message"].as_str().unwrap_or_default().contains("format"));
    let ollama = json!({"model": "tiny:1m", "stream": false, "format": schema.clone(), "llamay_formats": "enforce",
                        "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(call!(app, post, "/api/chat", ollama).status, StatusCode::BAD_REQUEST);

    openai["llamay_formats"] = json!("sometimes");
    let answer = call!(app, post, "/v1/chat/completions", openai.clone());
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"]["param"], "llamay_formats");

    // The config's `formats = "enforce"` applies to requests that do not say; theirs wins.
    let supervisor = Supervisor::new(
        Arc::new(ScriptedLoader::new()),
        SupervisorConfig { max_loaded: 1, default_keep_alive: KeepAlive::For(Duration::from_secs(60)), max_queue: 4 },
    )
    .start();
    let formats = crate::grammar::schema::FormatMode::Enforce;
    let state = app_state(supervisor, GenerationPolicy { formats, ..Default::default() }, RouteSettings::new(BODY_LIMIT));
    let app = test::init_service(build_app(web::Data::new(state))).await;
    openai.as_object_mut().map(|body| body.remove("llamay_formats"));
    assert_eq!(call!(app, post, "/v1/chat/completions", openai.clone()).status, StatusCode::BAD_REQUEST);
    openai["llamay_formats"] = json!("ignore");
    assert_eq!(call!(app, post, "/v1/chat/completions", openai).status, StatusCode::OK);
}

#[actix_web::test]
async fn openai_responses_answer_whole_and_as_typed_events() {
    let h = harness(2, 8);
    let app = test::init_service(build_app(h.state.clone())).await;
    let answer = call!(app, post, "/v1/responses", json!({"model": "tiny:1m", "input": "hi there"}));
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let body = answer.json();
    assert_eq!((body["object"].as_str(), body["status"].as_str()), (Some("response"), Some("completed")));
    assert_eq!(body["output_text"], "Hello there, friend");
    assert_eq!(body["output"][0]["content"][0]["text"], "Hello there, friend");
    assert_eq!(body["usage"]["total_tokens"], 5);
    // This state keeps no responses: the answer says so, and nothing can be found.
    assert_eq!(body["store"], false);
    let id = body["id"].as_str().unwrap();
    let missing = call!(app, get, &format!("/v1/responses/{id}"));
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["code"], "response_not_found");
    let continued = call!(app, post, "/v1/responses", json!({"model": "tiny:1m", "input": "x", "previous_response_id": id}));
    assert_eq!(continued.status, StatusCode::NOT_FOUND);
    assert_eq!(continued.json()["error"]["param"], "previous_response_id");

    let streamed = call!(app, post, "/v1/responses", json!({"model": "tiny:1m", "input": "hi", "stream": true}));
    assert!(streamed.content_type.starts_with("text/event-stream"), "{}", streamed.content_type);
    let events = sse_data(&streamed.text);
    let kinds: Vec<&str> = events.iter().filter_map(|event| event["type"].as_str()).collect();
    assert_eq!(kinds[..3], ["response.created", "response.in_progress", "response.output_item.added"]);
    assert_eq!(kinds.iter().filter(|kind| **kind == "response.output_text.delta").count(), 3);
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(events.last().unwrap()["response"]["output_text"], "Hello there, friend");

    let failing = call!(app, post, "/v1/responses", json!({"model": "tiny:1m", "input": "FAIL", "stream": true}));
    let kinds: Vec<String> = sse_data(&failing.text).iter().filter_map(|event| event["type"].as_str().map(String::from)).collect();
    assert_eq!(kinds[kinds.len() - 2..], ["error", "response.failed"], "{kinds:?}");
}
