//! A token budget never breaks the shape (issue 65), with the real SmolLM2 on all three routes:
//! as `max_tokens` or the context runs out, the constraint closes the document along its
//! shortest valid ending, the finish reason still says the budget ended it, and a budget too
//! small for any document is a 400 that names both numbers. `llamay_close_on_budget: false`
//! gives the old cut.

use llamay_test_support::daemon::Daemon;
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";

/// A daemon for a test that sets `max_tokens`, stopped when the test lets go of it (a daemon in a
/// static would never be dropped, and would outlive the test binary holding the model store).
fn start() -> Daemon {
    Daemon::builder().model(MODEL).args(["-parallel", "1", "-context", "1024"]).start()
}

const ROUTES: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/api/chat"];

/// instructor's JSON mode: the schema in the system message, JSON mode, no `max_tokens`.
fn instructor_system(schema: &Value) -> String {
    format!(
        "As a genius expert, your task is to understand the content and provide the parsed objects in json that \
         match the following json_schema:\n\n{}\n\nMake sure to return an instance of the JSON, not the schema itself",
        serde_json::to_string_pretty(schema).unwrap_or_default()
    )
}

/// A greedy request on `route` with `messages` (system first, if any), `shape` the route's own
/// field for the output's shape (`response_format`, `llamay_schema`/`llamay_format`, `format`)
/// and `max_tokens` where given.
fn request(route: &str, messages: &Value, shape: Option<(&str, Value)>, max_tokens: Option<u32>) -> Value {
    let mut body = match route {
        "/v1/messages" => {
            let (system, rest): (Vec<&Value>, Vec<&Value>) =
                messages.as_array().into_iter().flatten().partition(|m| m["role"] == "system");
            let mut body = json!({"model": MODEL, "messages": rest, "temperature": 0, "max_tokens": max_tokens.unwrap_or(2048)});
            if let Some(system) = system.first() {
                body["system"] = system["content"].clone();
            }
            body
        }
        "/api/chat" => {
            let mut body = json!({"model": MODEL, "messages": messages, "stream": false, "options": {"temperature": 0}});
            if let Some(limit) = max_tokens {
                body["options"]["num_predict"] = json!(limit);
            }
            body
        }
        _ => {
            let mut body = json!({"model": MODEL, "messages": messages, "temperature": 0});
            if let Some(limit) = max_tokens {
                body["max_tokens"] = json!(limit);
            }
            body
        }
    };
    if let Some((field, value)) = shape {
        body[field] = value;
    }
    body
}

/// The text answer and the finish reason as the route spells it.
fn text_and_reason(route: &str, answer: &Value) -> (String, String) {
    let (text, reason) = match route {
        "/v1/messages" => (&answer["content"][0]["text"], &answer["stop_reason"]),
        "/api/chat" => (&answer["message"]["content"], &answer["done_reason"]),
        _ => (&answer["choices"][0]["message"]["content"], &answer["choices"][0]["finish_reason"]),
    };
    (text.as_str().unwrap_or_default().to_string(), reason.as_str().unwrap_or_default().to_string())
}

/// What each route calls a generation the budget ended.
fn length_reason(route: &str) -> &'static str {
    match route {
        "/v1/messages" => "max_tokens",
        _ => "length",
    }
}

/// JSON mode on each route.
fn json_mode(route: &str) -> (&'static str, Value) {
    match route {
        "/v1/messages" => ("llamay_format", json!("json")),
        "/api/chat" => ("format", json!("json")),
        _ => ("response_format", json!({"type": "json_object"})),
    }
}

/// A schema on each route.
fn schema_shape(route: &str, schema: &Value) -> (&'static str, Value) {
    match route {
        "/v1/messages" => ("llamay_schema", schema.clone()),
        "/api/chat" => ("format", schema.clone()),
        _ => ("response_format", json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})),
    }
}

fn post_to(daemon: &Daemon, route: &str, body: &Value) -> Value {
    let (status, answer) = daemon.post(route, body);
    assert_eq!(status, 200, "{route}: {answer}");
    answer
}

/// The runaway of the issue: greedy SmolLM2 under instructor's JSON-mode prompt opens a string
/// and writes into it until the context is full. With no `max_tokens`, the context's room is
/// the budget: the answer closes within it and parses; without closing (checked on one route)
/// it does not. The context is small, so the runaway meets its end within seconds.
#[test]
fn json_mode_without_max_tokens_ends_as_an_object_when_the_context_runs_out() {
    let daemon = Daemon::builder().model(MODEL).args(["-parallel", "1", "-context", "256"]).start();
    let schema = json!({"type": "object", "properties": {"poem": {"type": "string"}, "lines": {"type": "integer"}},
        "required": ["poem", "lines"]});
    let messages = json!([
        {"role": "system", "content": instructor_system(&schema)},
        {"role": "user", "content": "Write a very long poem about the sea, with every wave and every ship, and never stop."},
    ]);
    for route in ROUTES {
        let body = request(route, &messages, Some(json_mode(route)), None);
        if route == ROUTES[0] {
            let mut cut = body.clone();
            cut["llamay_close_on_budget"] = json!(false);
            let (text, reason) = text_and_reason(route, &post_to(&daemon, route, &cut));
            assert_eq!(reason, length_reason(route), "{route}: the prompt no longer runs away: {text}");
            assert!(serde_json::from_str::<Value>(&text).is_err(), "{route}: the cut answer parses: {text}");
        }
        let (text, reason) = text_and_reason(route, &post_to(&daemon, route, &body));
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{route}: {e}: {text}"));
        assert!(value.is_object(), "{route}: {text}");
        // Where it was seen running away, the budget ended it (Ollama's route samples with its
        // own repeat penalty, and may finish on its own).
        if route == ROUTES[0] {
            assert_eq!(reason, length_reason(route), "{route}: {text}");
        }
    }
}

/// A schema with required fields and `max_tokens: 24`, which the model would overrun: a
/// document the schema's validator accepts, ended with the route's length reason.
#[test]
fn a_schema_cut_by_max_tokens_gives_a_valid_document_ended_by_length() {
    let schema = json!({"type": "object",
        "properties": {"name": {"type": "string"}, "history": {"type": "string"}, "height_m": {"type": "integer"},
            "visitors": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "history", "height_m", "visitors"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let messages = json!([{"role": "user", "content": "Tell the whole history of the Eiffel Tower in detail, as JSON."}]);
    let daemon = start();
    let closings_before = closings_so_far(&daemon);
    for route in ROUTES {
        let body = request(route, &messages, Some(schema_shape(route, &schema)), Some(24));
        let answer = post_to(&daemon, route, &body);
        let (text, reason) = text_and_reason(route, &answer);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{route}: {e}: {text}"));
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{route}: {text}: {errors:?}");
        assert_eq!(reason, length_reason(route), "{route}: {text}");
    }
    assert!(closings_so_far(&daemon) >= closings_before + 3, "the stats counted fewer than three closings");
    let metrics = daemon.client().get(daemon.url("/metrics")).send().and_then(|r| r.text()).expect("/metrics");
    assert!(metrics.contains("llamay_budget_closings_total{model=\"smollm2:135m\"}"), "{metrics}");
}

/// The budget closings the daemon's stats count, over its models.
fn closings_so_far(daemon: &Daemon) -> u64 {
    let (_, stats) = daemon.get("/v1/stats");
    let models = stats["models"].as_array().cloned().unwrap_or_default();
    models.iter().map(|m| m["totals"]["budget_closings"].as_u64().unwrap_or(0)).sum()
}

/// A forced tool call cut by `max_tokens`: its arguments are valid against the tool's schema.
#[test]
fn a_forced_tool_call_cut_by_max_tokens_has_valid_arguments() {
    let parameters = json!({"type": "object",
        "properties": {"title": {"type": "string"}, "body": {"type": "string"}, "priority": {"type": "integer"}},
        "required": ["title", "body", "priority"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&parameters).expect("a valid schema");
    let messages = json!([{"role": "user", "content": "File a ticket describing, in great detail and at length, every problem with the office printer."}]);
    let openai_tools = json!([{"type": "function", "function": {"name": "file_ticket", "description": "File a ticket", "parameters": parameters}}]);
    let daemon = start();
    for route in ROUTES {
        let mut body = request(route, &messages, None, Some(40));
        match route {
            "/v1/messages" => {
                body["tools"] = json!([{"name": "file_ticket", "description": "File a ticket", "input_schema": parameters}]);
                body["tool_choice"] = json!({"type": "any"});
            }
            _ => {
                body["tools"] = openai_tools.clone();
                body["tool_choice"] = json!("required");
            }
        }
        let answer = post_to(&daemon, route, &body);
        let arguments = match route {
            "/v1/messages" => answer["content"].as_array().into_iter().flatten().find(|c| c["type"] == "tool_use").map(|c| c["input"].clone()),
            "/api/chat" => answer["message"]["tool_calls"][0]["function"].get("arguments").cloned(),
            _ => answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(|text| serde_json::from_str(text).unwrap_or_else(|e| panic!("{route}: {e}: {text}"))),
        };
        let arguments = arguments.unwrap_or_else(|| panic!("{route}: no call: {answer}"));
        let errors: Vec<String> = validator.iter_errors(&arguments).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{route}: {arguments}: {errors:?}");
    }
}

/// A budget below the shortest document's tokens is a 400 naming both numbers; with
/// `llamay_close_on_budget: false` the request runs and is cut.
#[test]
fn a_budget_below_the_shortest_document_is_refused_naming_both_numbers() {
    let schema = json!({"type": "object",
        "properties": {"first_name": {"type": "string"}, "last_name": {"type": "string"}, "birth_year": {"type": "integer"},
            "email_address": {"type": "string"}},
        "required": ["first_name", "last_name", "birth_year", "email_address"], "additionalProperties": false});
    let messages = json!([{"role": "user", "content": "Invent a person."}]);
    let daemon = start();
    for route in ROUTES {
        let body = request(route, &messages, Some(schema_shape(route, &schema)), Some(5));
        let (status, answer) = daemon.post(route, &body);
        assert_eq!(status, 400, "{route}: {answer}");
        let message = match route {
            "/api/chat" => answer["error"].as_str(),
            _ => answer["error"]["message"].as_str(),
        }
        .unwrap_or_default();
        assert!(message.contains("max_tokens is 5"), "{route}: {message}");
        let needed: Vec<u32> = message
            .split("takes ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .into_iter()
            .collect();
        assert!(needed.first().is_some_and(|&n| n > 5), "{route}: no token count above 5 in {message}");
        let mut cut = body.clone();
        cut["llamay_close_on_budget"] = json!(false);
        let (_, reason) = text_and_reason(route, &post_to(&daemon, route, &cut));
        assert_eq!(reason, length_reason(route), "{route}");
    }
}
