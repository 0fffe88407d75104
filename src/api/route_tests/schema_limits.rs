//! Issue 48: a schema whose `$ref`s chain 3,000 definitions deep, on every route that takes a
//! schema before a model runs (OpenAI `response_format` and `llamay_schema`, Anthropic
//! `llamay_schema`, Ollama `format` on `/api/chat` and `/api/generate`). Each answers 400 in
//! its API's shape, naming the compiler's depth limit and where it was passed, and the app
//! answers the next request. Compiled on the test's own thread, as a worker compiles it, a
//! compiler whose recursion grew with the chain would overflow this thread's stack.
//! Tool schemas compile where the model runs; `tests/deep_schemas.rs` covers them.

use super::*;

/// Large enough for the chain (about 200 kB of JSON).
const LARGE_BODY_LIMIT: usize = 1 << 20;

/// `d0.a -> d1.a -> ... -> d{length}`, each an object whose one property refers to the next.
fn reference_chain(length: usize) -> Value {
    let mut definitions = serde_json::Map::new();
    for index in 0..length {
        let next = format!("#/$defs/d{}", index + 1);
        definitions.insert(format!("d{index}"), json!({"type": "object", "properties": {"a": {"$ref": next}}}));
    }
    definitions.insert(format!("d{length}"), json!({"type": "string"}));
    json!({"$defs": definitions, "$ref": "#/$defs/d0"})
}

fn app_state() -> web::Data<AppState> {
    let config = SupervisorConfig { max_loaded: 1, default_keep_alive: KeepAlive::For(Duration::from_secs(60)), max_queue: 4 };
    let supervisor = Supervisor::new(Arc::new(ScriptedLoader::new()), config).start();
    web::Data::new(AppState::new(supervisor, Arc::new(FakeCatalog), None, LARGE_BODY_LIMIT))
}

#[actix_web::test]
async fn a_reference_chain_past_the_depth_limit_is_a_400_on_every_schema_route() {
    let app = test::init_service(build_app(app_state())).await;
    let schema = reference_chain(3_000);
    let messages = json!([{"role": "user", "content": "x"}]);
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "tiny:1m", "messages": messages,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}}),
            "/error/message",
        ),
        ("/v1/chat/completions", json!({"model": "tiny:1m", "messages": messages, "llamay_schema": schema}), "/error/message"),
        ("/v1/messages", json!({"model": "tiny:1m", "max_tokens": 5, "messages": messages, "llamay_schema": schema}), "/error/message"),
        ("/api/chat", json!({"model": "tiny:1m", "stream": false, "messages": messages, "format": schema}), "/error"),
        ("/api/generate", json!({"model": "tiny:1m", "stream": false, "prompt": "x", "format": schema}), "/error"),
    ];
    for (path, body, message_at) in cases {
        let answer = call!(app, post, path, body);
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{path}: {}", answer.text);
        let message = answer.json().pointer(message_at).and_then(Value::as_str).map(String::from).unwrap_or_default();
        assert!(message.contains("uses \"$ref\", which nests subschemas more than 64 deep"), "{path}: {message}");
        assert!(message.contains("$defs.d"), "{path}: {message}");
        assert_eq!(call!(app, get, "/health").status, StatusCode::OK, "{path}: the app stopped answering");
    }
    // The same app still serves a schema within the limit.
    let within = json!({"model": "tiny:1m", "messages": messages, "llamay_schema": reference_chain(20)});
    assert_eq!(call!(app, post, "/v1/chat/completions", within).status, StatusCode::OK);
}
