//! Tool calls through the real routes with the scripted model: each API's call shape and ids,
//! the stream carrying each call whole, `parallel_tool_calls` reaching the model,
//! and tool refusals in each API's error shape before any model is loaded.

use serde_json::{json, Value};

use super::*;

fn weather_openai() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"]}}})
}

fn weather_anthropic() -> Value {
    json!({"name": "get_weather", "input_schema": weather_openai()["function"]["parameters"].clone()})
}

fn openai_forced(content: &str, stream: bool) -> Value {
    json!({"model": "tiny:1m", "messages": [{"role": "user", "content": content}], "stream": stream,
           "tools": [weather_openai()], "tool_choice": "required"})
}

#[actix_web::test]
async fn openai_forced_calls_have_null_content() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    for content in ["weather?", "weather? TWO"] {
        let answer = call!(
            app,
            post,
            "/v1/chat/completions",
            openai_forced(content, false)
        );
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        let choice = &answer.json()["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null, "{content}");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments["unit"], "c");
    }
}

#[actix_web::test]
async fn openai_stream_sends_the_call_whole_and_no_fragment() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    let answer = call!(
        app,
        post,
        "/v1/chat/completions",
        openai_forced("weather?", true)
    );
    let chunks = sse_data(&answer.text);
    let texts: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(texts, "", "the fragment of a cut-off call is not streamed");
    let with_calls: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .collect();
    assert_eq!(with_calls.len(), 1);
    let call = &with_calls[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (call["index"].as_u64(), call["id"].as_str()),
        (Some(0), Some("call_0123456789ab"))
    );
    assert_eq!(
        call["function"]["arguments"],
        "{\"city\":\"Paris\",\"unit\":\"c\"}"
    );
    let finishes: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("tool_calls")]);
}

#[actix_web::test]
async fn anthropic_tool_use_blocks_have_toolu_ids_in_json_and_stream() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    let body = |stream: bool| {
        json!({"model": "tiny:1m", "max_tokens": 50, "stream": stream, "tools": [weather_anthropic()],
               "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
               "messages": [{"role": "user", "content": "weather?"}]})
    };
    let answer = call!(app, post, "/v1/messages", body(false)).json();
    assert_eq!(answer["stop_reason"], "tool_use");
    let content = answer["content"].as_array().unwrap();
    assert_eq!(
        content.len(),
        1,
        "no text block beside a forced call: {answer}"
    );
    assert_eq!(content[0]["type"], "tool_use");
    assert!(content[0]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(content[0]["input"], json!({"city": "Paris", "unit": "c"}));

    let events = sse_data(&call!(app, post, "/v1/messages", body(true)).text);
    let start = events
        .iter()
        .find(|e| e["content_block"]["type"] == "tool_use")
        .unwrap();
    assert!(start["content_block"]["id"]
        .as_str()
        .unwrap()
        .starts_with("toolu_"));
    let json_deltas: Vec<&Value> = events
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .collect();
    assert_eq!(json_deltas.len(), 1);
    assert_eq!(
        json_deltas[0]["delta"]["partial_json"],
        "{\"city\":\"Paris\",\"unit\":\"c\"}"
    );
    assert!(events.iter().all(|e| e["delta"]["type"] != "text_delta"));
}

#[actix_web::test]
async fn ollama_call_has_object_arguments_in_one_chunk() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    let body = json!({"model": "tiny:1m", "messages": [{"role": "user", "content": "weather?"}],
                      "tools": [weather_openai()], "tool_choice": "required"});
    let answer = call!(app, post, "/api/chat", body);
    let lines: Vec<Value> = answer
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", answer.text);
    assert_eq!(lines[0]["message"]["content"], "");
    assert_eq!(
        lines[0]["message"]["tool_calls"][0]["function"]["arguments"],
        json!({"city": "Paris", "unit": "c"})
    );
    assert_eq!(lines[0]["done"], true);
}

#[actix_web::test]
async fn tool_refusals_are_400s_in_each_shape_without_loading_a_model() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let unnamed = json!({"type": "function", "function": {"parameters": {"type": "object"}}});
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "tiny:1m", "messages": user, "tools": [unnamed]}),
            "has no name",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "tiny:1m", "messages": user, "tools": [{"type": "file_search"}]}),
            "file_search",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "tiny:1m", "messages": user, "tools": [weather_openai()],
            "tool_choice": {"type": "function", "function": {"name": "get_news"}}}),
            "get_news",
        ),
        (
            "/v1/messages",
            json!({"model": "tiny:1m", "max_tokens": 5, "messages": user,
            "tools": [weather_anthropic(), weather_anthropic()]}),
            "unique",
        ),
        (
            "/v1/messages",
            json!({"model": "tiny:1m", "max_tokens": 5, "messages": user,
            "tools": [{"type": "code_execution_20250522", "name": "code_execution"}]}),
            "code_execution_20250522",
        ),
        (
            "/api/chat",
            json!({"model": "tiny:1m", "messages": user,
            "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "array"}}}]}),
            "object",
        ),
    ];
    for (path, body, needle) in cases {
        let answer = call!(app, post, path, body);
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            answer.text
        );
        assert!(answer.text.contains(needle), "{path}: {}", answer.text);
    }
    assert_eq!(harness.in_use.load(Ordering::SeqCst), 0);
    let loaded = call!(app, get, "/api/ps").json();
    assert_eq!(
        loaded["models"],
        json!([]),
        "a refused tool list loads nothing"
    );
}

#[actix_web::test]
async fn without_parallel_calls_only_the_first_call_is_kept() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;
    let mut body = openai_forced("weather? TWO", false);
    let calls = |answer: Value| {
        answer["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map(Vec::len)
    };
    assert_eq!(
        calls(call!(app, post, "/v1/chat/completions", body.clone()).json()),
        Some(2)
    );
    body["parallel_tool_calls"] = json!(false);
    assert_eq!(
        calls(call!(app, post, "/v1/chat/completions", body.clone()).json()),
        Some(1)
    );
    body["stream"] = json!(true);
    let streamed = sse_data(&call!(app, post, "/v1/chat/completions", body).text);
    let delta = streamed
        .iter()
        .find(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .unwrap();
    assert_eq!(
        delta["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let ollama = json!({"model": "tiny:1m", "stream": false, "messages": [{"role": "user", "content": "TWO"}],
                        "tools": [weather_openai()], "tool_choice": "required"});
    let answer = call!(app, post, "/api/chat", ollama).json();
    assert_eq!(
        answer["message"]["tool_calls"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
}

/// Issue 9: a forced call the token budget cut off comes back as a call in each API's own
/// shape, with no prompt-format text, in the JSON answer and in the stream.
#[actix_web::test]
async fn a_cut_off_forced_call_comes_back_in_each_apis_shape() {
    let harness = harness(1, 8);
    let app = test::init_service(build_app(harness.state.clone())).await;

    let answer = call!(app, post, "/v1/chat/completions", openai_forced("weather? CUT", false)).json();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "length", "{answer}");
    assert_eq!(choice["message"]["content"], Value::Null, "{answer}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], "{\"city\": \"Par", "the arguments as far as they got");
    let chunks = sse_data(&call!(app, post, "/v1/chat/completions", openai_forced("weather? CUT", true)).text);
    let streamed: Vec<&Value> =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().collect();
    assert_eq!(streamed.len(), 1, "{chunks:?}");
    assert_eq!(streamed[0]["function"]["arguments"], "{\"city\": \"Par");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "");
    let finishes: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes, [&json!("length")]);

    let anthropic = |stream: bool| {
        json!({"model": "tiny:1m", "max_tokens": 5, "stream": stream, "tools": [weather_anthropic()],
               "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "weather? CUT"}]})
    };
    let answer = call!(app, post, "/v1/messages", anthropic(false)).json();
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    let content = answer["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "a tool_use block and no text: {answer}");
    assert_eq!((&content[0]["type"], &content[0]["input"]), (&json!("tool_use"), &json!({"city": "Par"})));
    let events = sse_data(&call!(app, post, "/v1/messages", anthropic(true)).text);
    let partial: String =
        events.iter().filter_map(|e| e["delta"]["partial_json"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({"city": "Par"}));
    assert!(events.iter().all(|e| e["delta"]["type"] != "text_delta"));
    let stop = events.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(stop["delta"]["stop_reason"], "max_tokens");

    for stream in [false, true] {
        let ollama = json!({"model": "tiny:1m", "stream": stream, "messages": [{"role": "user", "content": "CUT"}],
                            "tools": [weather_openai()], "tool_choice": "required"});
        let text = call!(app, post, "/api/chat", ollama).text;
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["done_reason"], "length", "{text}");
        assert_eq!(last["message"]["tool_calls"][0]["function"]["arguments"], json!({"city": "Par"}));
        assert!(!text.contains("tool_call>"), "{text}");
    }
}
