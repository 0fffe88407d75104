//! Issue 48: a schema whose `$ref`s chain 3,000 definitions deep (about 200 kB of JSON), sent
//! to the real daemon (`llamay serve` with smollm2:135m from the store) on every route that
//! takes a schema: OpenAI `response_format` and `llamay_schema`, Anthropic `llamay_schema`,
//! Ollama `format` on `/api/chat` and `/api/generate`, and as a tool's schema (an OpenAI
//! tool's `parameters`, an Anthropic tool's `input_schema`, an Ollama tool), each tool forced.
//! Each answers 400 in its API's shape naming the compiler's depth limit and where the schema
//! passed it, and the daemon keeps answering: before the limit, the first of them overflowed
//! an HTTP worker's stack and aborted the whole process. `cli_run` checks `llamay schema check`
//! with the same chain.

use llamay_test_support::daemon::Daemon;
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";

/// How the compiler's refusal of the chain reads, on every route.
const DEPTH_REFUSAL: &str = "uses \"$ref\", which nests subschemas more than 64 deep";

/// `d0.a -> d1.a -> ... -> d{length}`, each an object whose one property refers to the next.
pub fn reference_chain(length: usize) -> Value {
    let mut definitions = serde_json::Map::new();
    for index in 0..length {
        let next = format!("#/$defs/d{}", index + 1);
        definitions.insert(
            format!("d{index}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}}}),
        );
    }
    definitions.insert(format!("d{length}"), json!({"type": "string"}));
    json!({"$defs": definitions, "$ref": "#/$defs/d0"})
}

/// Tokens each request may write: enough for the shortest forced call (`<tool_call>` and the
/// name come before `{}`), since a budget below a constraint's shortest document is a 400.
const BUDGET: u32 = 40;

/// Each request carrying `schema`: the route, its body, and where its API puts the message.
fn schema_requests(schema: &Value) -> Vec<(&'static str, Value, &'static str)> {
    let messages = json!([{"role": "user", "content": "Look it up."}]);
    let openai_tool =
        json!([{"type": "function", "function": {"name": "lookup", "parameters": schema}}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "max_tokens": BUDGET, "messages": messages,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}}),
            "/error/message",
        ),
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "max_tokens": BUDGET, "messages": messages, "llamay_schema": schema}),
            "/error/message",
        ),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": BUDGET, "messages": messages, "llamay_schema": schema}),
            "/error/message",
        ),
        (
            "/api/chat",
            json!({"model": MODEL, "stream": false, "options": {"num_predict": BUDGET}, "messages": messages, "format": schema}),
            "/error",
        ),
        (
            "/api/generate",
            json!({"model": MODEL, "stream": false, "options": {"num_predict": BUDGET}, "prompt": "Look it up.", "format": schema}),
            "/error",
        ),
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "max_tokens": BUDGET, "messages": messages, "tool_choice": "required", "tools": openai_tool}),
            "/error/message",
        ),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": BUDGET, "messages": messages, "tool_choice": {"type": "any"},
                   "tools": [{"name": "lookup", "input_schema": schema}]}),
            "/error/message",
        ),
        (
            "/api/chat",
            json!({"model": MODEL, "stream": false, "options": {"num_predict": BUDGET}, "messages": messages,
                   "tool_choice": "required", "tools": openai_tool}),
            "/error",
        ),
    ]
}

#[test]
fn a_reference_chain_past_the_depth_limit_is_a_400_on_every_schema_route() {
    let mut daemon = Daemon::builder()
        .model(MODEL)
        .args(["-context", "2048", "-parallel", "1", "-t", "1"])
        .start();
    for (path, body, message_at) in schema_requests(&reference_chain(3_000)) {
        let (status, answer) = daemon.post(path, &body);
        assert_eq!(status, 400, "{path}: {answer}");
        let message = answer
            .pointer(message_at)
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(message.contains(DEPTH_REFUSAL), "{path}: {answer}");
        assert!(
            message.contains("$defs.d"),
            "{path}: the location is named: {answer}"
        );
        if body.get("tools").is_some() {
            assert!(
                message.contains("lookup"),
                "{path}: the tool is named: {answer}"
            );
        }
        assert!(
            daemon.exit_status().is_none(),
            "{path}: the daemon exited:\n{}",
            daemon.log()
        );
        assert_eq!(
            daemon.get("/health").0,
            200,
            "{path}: the daemon stopped answering"
        );
    }
    // The same daemon still serves the same shape within the limit, on every route.
    for (path, body, _) in schema_requests(&reference_chain(20)) {
        let (status, answer) = daemon.post(path, &body);
        assert_eq!(status, 200, "{path} within the limit: {answer}");
    }
}
