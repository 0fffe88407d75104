//! Issue 48: tool schemas whose `$ref`s chain 3,000 definitions deep, sent to the real daemon
//! (`llamay serve` with smollm2:135m from the store) as an OpenAI tool's `parameters`
//! (`tool_choice: "required"`), an Anthropic tool's `input_schema` (`tool_choice: any`) and an
//! Ollama tool (`tool_choice: "required"`). A tool's schema compiles where the model runs, so
//! these need a model; the schemas a route compiles itself are covered in-process by
//! `src/api/route_tests/schema_limits.rs`. Each answers 400 naming the compiler's depth limit,
//! and the daemon keeps answering: before the limit, the first of them overflowed a thread's
//! stack and aborted the whole process.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

#[path = "support/process.rs"]
mod process;
use process::{free_port, llamay_command, wait_for_health, Process};

const MODEL: &str = "smollm2:135m";

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

fn start_daemon() -> (Process, String) {
    let port = free_port();
    let child = llamay_command()
        .args(["serve", "-m", MODEL, "-addr", &format!("127.0.0.1:{port}"), "-c", "512", "-parallel", "1", "-t", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llamay serve starts");
    let daemon = Process(child);
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_for_health(&base, Duration::from_secs(120)), "llamay serve did not answer /health");
    (daemon, base)
}

#[test]
fn a_tool_schema_past_the_depth_limit_is_a_400_and_the_daemon_keeps_answering() {
    let (mut daemon, base) = start_daemon();
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().expect("a client");
    let schema = reference_chain(3_000);
    let messages = json!([{"role": "user", "content": "Look it up."}]);
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "max_tokens": 4, "messages": messages, "tool_choice": "required",
                   "tools": [{"type": "function", "function": {"name": "lookup", "parameters": schema}}]}),
            "/error/message",
        ),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": 4, "messages": messages, "tool_choice": {"type": "any"},
                   "tools": [{"name": "lookup", "input_schema": schema}]}),
            "/error/message",
        ),
        (
            "/api/chat",
            json!({"model": MODEL, "stream": false, "options": {"num_predict": 4}, "messages": messages, "tool_choice": "required",
                   "tools": [{"type": "function", "function": {"name": "lookup", "parameters": schema}}]}),
            "/error",
        ),
    ];
    for (path, body, message_at) in cases {
        let response = client.post(format!("{base}{path}")).json(&body).send().unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        let answer: Value = response.json().unwrap_or_else(|e| panic!("{path}: not JSON: {e}"));
        assert_eq!(status, 400, "{path}: {answer}");
        let message = answer.pointer(message_at).and_then(Value::as_str).unwrap_or_default();
        assert!(message.contains("nests subschemas more than 64 deep"), "{path}: {answer}");
        assert!(message.contains("lookup"), "{path}: the tool is named: {answer}");
        assert!(daemon.0.try_wait().expect("the daemon's status").is_none(), "{path}: the daemon exited");
        assert!(wait_for_health(&base, Duration::from_secs(5)), "{path}: the daemon stopped answering");
    }
}
