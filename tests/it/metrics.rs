//! `GET /metrics` on the real app (build_app) over the real store and llama.cpp with
//! smollm2:135m and gemma3:270m: the exposition parses with a Prometheus parser (the
//! `prometheus-parse` crate) and its counters, gauges and histograms move with real requests.
//!
//! prometheus-parse reads a label value only up to the first `}`, so this test leaves the
//! `/v1/models/{name:.*}` series to integration/test_metrics.py, whose parser (the official
//! Python client's) reads the whole format.


use actix_web::{test, web};
use llamay::api::{build_app, AppState};
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::json;

const MODEL: &str = "smollm2:135m";
const OTHER_MODEL: &str = "gemma3:270m";

fn state() -> web::Data<AppState> {
    web::Data::new(crate::in_process::store_backed_state(1024, 1, llamay::api::RouteSettings::new(1 << 20)))
}

fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && has_labels(s, labels))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            Value::Summary(_) => f64::NAN,
        })
}

fn has_labels(sample: &Sample, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(key, wanted)| sample.labels.get(key) == Some(*wanted))
}

/// The value, or 0 when the series does not exist yet (a counter never incremented).
fn counter(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    value(scrape, name, labels).unwrap_or(0.0)
}

/// GETs /metrics from `$app`, checks its content type and parses it: (scrape, text).
macro_rules! scrape {
    ($app:expr) => {{
        let response =
            test::call_service(&$app, test::TestRequest::get().uri("/metrics").to_request()).await;
        assert_eq!(response.status(), 200);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        assert_eq!(
            content_type.as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let body = test::read_body(response).await;
        let text = String::from_utf8(body.to_vec()).expect("UTF-8 exposition");
        let parsed = Scrape::parse(text.lines().map(|line| Ok(line.to_string()))).expect("parses");
        (parsed, text)
    }};
}

#[actix_web::test]
async fn metrics_parse_and_move_with_real_requests() {
    let app = test::init_service(build_app(state())).await;
    let (before, _) = scrape!(app);
    assert_eq!(value(&before, "llamay_models_loaded", &[]), Some(0.0));
    assert_eq!(value(&before, "llamay_queue_depth", &[]), Some(0.0));

    let chat = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Give me a number."}],
        "max_tokens": 6,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}},
    });
    let response = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/v1/chat/completions")
            .set_json(&chat)
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = test::read_body_json(response).await;
    let completion_tokens = answer["usage"]["completion_tokens"]
        .as_f64()
        .expect("usage");
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_f64().expect("usage");

    let generate = json!({"model": MODEL, "prompt": "The sky is", "stream": true,
        "grammar": "root ::= (\"blue\" | \"grey\") \" and \" [a-z]{1,8}", "options": {"num_predict": 4}});
    let response = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/api/generate")
            .set_json(&generate)
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let _ = test::read_body(response).await;

    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/no/such/route/42")
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), 404);
    let bad = test::TestRequest::post()
        .uri("/v1/chat/completions")
        .set_payload("{")
        .to_request();
    assert_eq!(test::call_service(&app, bad).await.status(), 400);

    let (after, text) = scrape!(app);
    let chat_route = [("route", "/v1/chat/completions"), ("status", "200")];
    assert_eq!(
        counter(&after, "llamay_http_requests_total", &chat_route),
        counter(&before, "llamay_http_requests_total", &chat_route) + 1.0,
        "{text}"
    );
    assert_eq!(
        counter(
            &after,
            "llamay_http_requests_total",
            &[("route", "/v1/chat/completions"), ("status", "400")]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        counter(
            &after,
            "llamay_http_requests_total",
            &[("route", "/api/generate"), ("status", "200")]
        ),
        1.0,
        "{text}"
    );
    // An unknown path is one label, whatever the path: label values stay bounded.
    assert_eq!(
        counter(
            &after,
            "llamay_http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ),
        1.0,
        "{text}"
    );
    assert!(
        !text.contains("/no/such/route"),
        "a raw path leaked into a label:\n{text}"
    );
    // The first scrape answered before it was counted; the second sees it.
    assert!(
        counter(
            &after,
            "llamay_http_requests_total",
            &[("route", "/metrics"), ("status", "200")]
        ) >= 1.0,
        "{text}"
    );

    let model = [("model", MODEL)];
    assert!(
        counter(&after, "llamay_prompt_tokens_total", &model) >= prompt_tokens,
        "{text}"
    );
    assert!(
        counter(&after, "llamay_generated_tokens_total", &model) >= completion_tokens + 1.0,
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_time_to_first_token_seconds_count", &model),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_time_to_first_token_seconds", &model),
        Some(2.0),
        "+Inf bucket: {text}"
    );
    assert_eq!(
        value(
            &after,
            "llamay_http_request_duration_seconds_count",
            &[("route", "/api/generate")]
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        counter(
            &after,
            "llamay_constraint_mask_steps_total",
            &[("kind", "json")]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        counter(
            &after,
            "llamay_constraint_mask_steps_total",
            &[("kind", "grammar")]
        ) >= 1.0,
        "{text}"
    );
    // The decode-step split: every phase is there, the forward pass and (both requests were
    // constrained) the constraint engine took time, and the phases fit inside the whole steps.
    let phase = |name: &str| {
        value(&after, "llamay_decode_step_seconds_total", &[("model", MODEL), ("phase", name)])
            .unwrap_or_else(|| panic!("phase {name}: {text}"))
    };
    let steps = phase("steps");
    let parts = ["decode", "sampling", "constraint", "detokenize", "deliver"].map(phase);
    assert!(parts[0] > 0.0 && parts[2] > 0.0, "{text}");
    assert!(parts.iter().all(|p| *p >= 0.0), "{text}");
    assert!(parts.iter().sum::<f64>() <= steps, "phases {parts:?} exceed the steps {steps}: {text}");
    let ratio = value(
        &after,
        "llamay_constraint_mask_cache_hit_ratio",
        &[("kind", "json")],
    )
    .expect("a hit ratio");
    assert!((0.0..=1.0).contains(&ratio), "{text}");
    assert_eq!(
        counter(&after, "llamay_constraint_compile_cache_misses_total", &[]),
        2.0,
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_models_loaded", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_model_loads_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_sequences_in_use", &model),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value(&after, "llamay_sequences_capacity", &model),
        Some(2.0),
        "{text}"
    );

    // A switch to another model with room for one: a load and an eviction.
    let other = json!({"model": OTHER_MODEL, "prompt": "Hi", "stream": false, "options": {"num_predict": 2}});
    let response = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/api/generate")
            .set_json(&other)
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let _ = test::read_body(response).await;
    let (switched, text) = scrape!(app);
    assert_eq!(
        value(&switched, "llamay_model_loads_total", &[]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&switched, "llamay_model_evictions_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        counter(
            &switched,
            "llamay_model_unloads_total",
            &[("reason", "evicted")]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(&switched, "llamay_sequences_in_use", &[("model", MODEL)]),
        None,
        "{text}"
    );
    assert!(
        counter(
            &switched,
            "llamay_generated_tokens_total",
            &[("model", OTHER_MODEL)]
        ) >= 1.0,
        "{text}"
    );
}
