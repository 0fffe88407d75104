//! What a client can make the daemon hold is bounded, checked on the real binary with the real
//! SmolLM2 and real HTTP clients:
//!
//! - a loaded model's queue: with one sequence busy and `max_queue` requests waiting, the next
//!   request gets 503 with `Retry-After` in the OpenAI, Anthropic and Ollama error shapes, and
//!   `/v1/stats` and `/metrics` report the request that waits;
//! - contexts: past `max_contexts` creating and forking answer 503 with
//!   `Retry-After`, naming the limit, deleting
//!   makes room, and `GET /v1/contexts` pages with `limit` / `after` / `has_more`.
//!
//! Each daemon has its own store (a temporary `LLAMAY_HOME`) and serves the SmolLM2 file from
//! the default store by path; every wait is bounded, every process stopped on drop.

use std::time::{Duration, Instant};

use llamay_test_support::daemon::Daemon;
use llamay_test_support::http;
use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

/// The name `serve -m <dir>/smollm2.gguf` serves the file under, as the daemon spells it.
const MODEL: &str = "smollm2:latest";

/// A daemon with the store and the model file it was started over, removed after it stops.
struct Served {
    daemon: Daemon,
    _home: tempfile::TempDir,
    _files: tempfile::TempDir,
}

/// `llamay serve` with SmolLM2 on one thread, `env` set, once `/health` answers.
fn start(extra: &[&str], env: &[(&str, &str)]) -> Served {
    let home = tempfile::tempdir().expect("home");
    let files = tempfile::tempdir().expect("files");
    let model = crate::model_files::link_model_file("smollm2:135m", files.path(), "smollm2.gguf");
    let mut builder = Daemon::builder()
        .home(home.path())
        .model(&model)
        .args(["-t", "1", "-context", "2048"])
        .args(extra);
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    Served { daemon: builder.start(), _home: home, _files: files }
}

fn stats(daemon: &Daemon) -> Value {
    let (status, stats) = daemon.get("/v1/stats");
    assert_eq!(status, 200, "{stats}");
    stats
}

/// Polls `/v1/stats` until `done` holds (at most 60 s); the last stats either way.
fn wait_for_stats(daemon: &Daemon, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let now = stats(daemon);
        if done(&now) || start.elapsed() > Duration::from_secs(60) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn past_max_queue_a_loaded_model_answers_503_with_retry_after_in_each_shape() {
    let served = start(&["-parallel", "1"], &[("LLAMAY_MAX_QUEUE", "1")]);
    let daemon = &served.daemon;
    let client = daemon.client();

    // The one sequence: a streamed answer held to 4,000 letters, cut at 1,500 tokens.
    let busy = client
        .post(format!("{}/api/generate", daemon.base))
        .json(&json!({
            "model": MODEL, "prompt": "Letters:", "raw": true, "stream": true,
            "grammar": "root ::= [a-z]{4000}", "options": {"num_predict": 1500},
        }))
        .send()
        .expect("the long request starts");
    assert_eq!(busy.status().as_u16(), 200);
    let running = wait_for_stats(daemon, |s| s["models"][0]["sequences_in_use"] == 1);
    assert_eq!(running["models"][0]["sequences_in_use"], 1, "{running}");

    // The one place in the queue.
    let waiting = {
        let (client, base): (Client, String) = (client.clone(), daemon.base.clone());
        std::thread::spawn(move || {
            client
                .post(format!("{base}/api/generate"))
                .json(&json!({"model": MODEL, "prompt": "Hi", "stream": false, "options": {"num_predict": 2}}))
                .send()
                .map(|response| response.status().as_u16())
        })
    };
    let queued = wait_for_stats(daemon, |s| s["queue_depth"] == 1);
    assert_eq!(queued["queue_depth"], 1, "the waiting request is counted: {queued}");
    assert_eq!(queued["models"][0]["queue_depth"], 1, "{queued}");
    assert_eq!(queued["models"][0]["sequences_in_use"], 1, "{queued}");
    let metrics = client.get(format!("{}/metrics", daemon.base)).send().expect("metrics").text().expect("text");
    assert!(metrics.lines().any(|l| l == "llamay_queue_depth 1"), "{metrics}");
    assert!(
        metrics.lines().any(|l| l == format!("llamay_model_queue_depth{{model=\"{MODEL}\"}} 1")),
        "{metrics}"
    );

    let refused = |path: &str, body: Value| {
        let response = client.post(format!("{}{path}", daemon.base)).json(&body).send().expect("answer");
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_string());
        (status, retry_after, response.json::<Value>().expect("json"))
    };
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let (status, retry, body) =
        refused("/v1/chat/completions", json!({"model": MODEL, "messages": messages, "max_tokens": 2}));
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");
    assert_eq!(body["error"]["code"], "overloaded", "OpenAI's shape: {body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("max_queue 1"), "{body}");
    let (status, retry, body) =
        refused("/v1/messages", json!({"model": MODEL, "messages": messages, "max_tokens": 2}));
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");
    assert_eq!((body["type"].as_str(), body["error"]["type"].as_str()), (Some("error"), Some("overloaded_error")), "{body}");
    let (status, retry, body) =
        refused("/api/chat", json!({"model": MODEL, "messages": messages, "stream": false}));
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("max_queue 1"), "Ollama's shape: {body}");

    // The client of the long answer leaves: its sequence goes to the waiting request.
    drop(busy);
    assert_eq!(waiting.join().expect("thread").expect("answer"), 200);
    let idle = wait_for_stats(daemon, |s| s["queue_depth"] == 0 && s["models"][0]["sequences_in_use"] == 0);
    assert_eq!((idle["queue_depth"].as_u64(), idle["models"][0]["sequences_in_use"].as_u64()), (Some(0), Some(0)), "{idle}");
}

#[test]
fn contexts_are_capped_at_max_contexts_and_listed_a_page_at_a_time() {
    let served = start(&["-parallel", "2"], &[("LLAMAY_MAX_CONTEXTS", "5")]);
    let daemon = &served.daemon;
    let client = daemon.client();
    let contexts = format!("{}/v1/contexts", daemon.base);
    let create = || http::call(client, Method::POST, &contexts, Some(&json!({"model": MODEL, "prompt": "Once upon a time"})));
    let (status, first) = create();
    assert_eq!(status, 201, "{first}");
    let first_id = first["id"].as_str().expect("id").to_string();
    let fork = |n: usize| http::call(client, Method::POST, &format!("{contexts}/{first_id}/fork?n={n}"), None);
    let (status, forked) = fork(4);
    assert_eq!(status, 201, "{forked}");

    // A capacity limit, answered as a full queue is: 503 with Retry-After (507 is the disk's).
    let refused_with_retry = |method: Method, url: &str, body: Option<Value>| {
        let mut request = client.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().expect("answer");
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_string());
        (status, retry_after, response.json::<Value>().expect("json"))
    };
    let (status, retry, refused) =
        refused_with_retry(Method::POST, &contexts, Some(json!({"model": MODEL, "prompt": "Once upon a time"})));
    assert_eq!((status, retry.as_deref()), (503, Some("5")), "{refused}");
    assert_eq!(refused["error"]["code"], "context_limit_reached", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("max_contexts 5"), "{refused}");
    let (status, retry, refused) = refused_with_retry(Method::POST, &format!("{contexts}/{first_id}/fork?n=1"), None);
    assert_eq!((status, retry.as_deref()), (503, Some("5")), "{refused}");
    let counted = stats(daemon);
    assert_eq!((counted["contexts"]["total"].as_u64(), counted["contexts"]["max_contexts"].as_u64()), (Some(5), Some(5)), "{counted}");

    // Three pages of two, oldest first, each after the last id of the one before.
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    for expect_more in [true, true, false] {
        let query = match &after {
            Some(id) => format!("?limit=2&after={id}"),
            None => "?limit=2".to_string(),
        };
        let (status, page) = http::call(client, Method::GET, &format!("{contexts}{query}"), None);
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["has_more"], expect_more, "{page}");
        let ids: Vec<String> = page["data"].as_array().expect("data").iter().map(|c| c["id"].as_str().unwrap_or("").to_string()).collect();
        assert_eq!(page["first_id"].as_str(), ids.first().map(String::as_str), "{page}");
        assert_eq!(page["last_id"].as_str(), ids.last().map(String::as_str), "{page}");
        after = ids.last().cloned();
        listed.extend(ids);
    }
    let children: Vec<String> = forked["contexts"].as_array().expect("contexts").iter().map(|c| c["id"].as_str().unwrap_or("").to_string()).collect();
    let mut expected = vec![first_id.clone()];
    expected.extend(children.iter().cloned());
    assert_eq!(listed, expected, "every context once, in creation order");
    let (status, refused) = http::call(client, Method::GET, &format!("{contexts}?limit=0"), None);
    assert_eq!((status, refused["error"]["param"].as_str()), (400, Some("limit")), "{refused}");
    let (status, refused) = http::call(client, Method::GET, &format!("{contexts}?after=ctx_gone"), None);
    assert_eq!((status, refused["error"]["param"].as_str()), (404, Some("after")), "{refused}");

    let (status, _) = http::call(client, Method::DELETE, &format!("{contexts}/{}", children[0]), None);
    assert_eq!(status, 200);
    let (status, made) = create();
    assert_eq!(status, 201, "deleting one makes room: {made}");
}
