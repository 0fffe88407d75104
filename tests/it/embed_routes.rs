//! The embedding and rerank routes over real HTTP (the real app on a loopback port, reqwest as
//! the client) with the real models of the store: all-MiniLM-L6-v2 (imported by scripts/setup)
//! for vectors and cosine reranking, smollm2:135m and gemma3:270m as query-likelihood rerankers. Vectors
//! are checked against the independent numpy reference in testdata/embeddings; reranking is
//! scored by MRR@10 on testdata/embeddings/retrieval.json against the random baseline.

use std::time::Duration;

use actix_web::web;
use llamay::api::limits::HttpLimits;
use llamay::api::RouteSettings;
use llamay::api::server::start_http;
use serde_json::{json, Value};

const ENCODER: &str = "all-minilm:l6-v2";
const CHAT: &str = "smollm2:135m";
const OTHER_CHAT: &str = "gemma3:270m";

/// The real daemon on a free loopback port; returns its base URL.
fn start_daemon() -> String {
    let routes = RouteSettings {
        embed_model: Some(ENCODER.to_string()),
        rerank_model: Some(CHAT.to_string()),
        ..RouteSettings::new(8 << 20)
    };
    let state = crate::in_process::store_backed_state(2048, 2, routes);
    let addr = "127.0.0.1:0".parse().unwrap();
    let (server, bound) =
        start_http(web::Data::new(state), &HttpLimits::default(), &[addr]).expect("bind");
    actix_web::rt::spawn(server);
    format!("http://{}", bound[0])
}

fn testdata(name: &str) -> Value {
    let path = format!("{}/testdata/embeddings/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("testdata")).expect("json")
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .expect("the daemon answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

fn floats(value: &Value) -> Vec<f32> {
    serde_json::from_value(value.clone()).expect("an array of numbers")
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk
            .iter()
            .filter(|c| **c != b'=')
            .fold((0u32, 0), |(n, k), c| {
                (n | (u32::from(value(*c)) << (18 - 6 * k)), k + 1)
            });
        let bytes = [(n.0 >> 16) as u8, (n.0 >> 8) as u8, n.0 as u8];
        out.extend_from_slice(&bytes[..n.1 - 1]);
    }
    out
}

#[actix_web::test]
async fn openai_embeddings_match_the_reference_in_every_encoding() {
    let base = start_daemon();
    let reference = testdata("minilm_reference.json");
    let sentences = reference["sentences"].as_array().unwrap();
    let texts: Vec<&str> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": ENCODER, "input": texts}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], ENCODER);
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 20);
    let expected_tokens: usize = sentences
        .iter()
        .map(|s| s["tokens"].as_array().unwrap().len())
        .sum();
    assert_eq!(body["usage"]["prompt_tokens"], expected_tokens);
    for (index, (item, sentence)) in data.iter().zip(sentences).enumerate() {
        assert_eq!(item["index"], index);
        let vector = floats(&item["embedding"]);
        assert_eq!(vector.len(), 384);
        assert!((norm(&vector) - 1.0).abs() < 1e-4);
        let similarity = cosine(&vector, &floats(&sentence["embedding"]));
        assert!(
            similarity >= 0.999,
            "{:?}: cosine {similarity}",
            sentence["text"]
        );
    }

    // The same sentence as the reference's token ids, as base64, and shortened.
    let first = floats(&data[0]["embedding"]);
    let tokens = sentences[0]["tokens"].clone();
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": ENCODER, "input": [tokens], "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let bytes = decode_base64(
        body["data"][0]["embedding"]
            .as_str()
            .expect("a base64 string"),
    );
    let decoded: Vec<f32> = bytes
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(decoded.len(), 384);
    assert!(cosine(&decoded, &first) > 0.99999);
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"input": texts[0], "dimensions": 64}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let short = floats(&body["data"][0]["embedding"]);
    assert_eq!(short.len(), 64);
    assert!((norm(&short) - 1.0).abs() < 1e-4);
    assert!(cosine(&short, &first[..64]) > 0.99999);
}

#[actix_web::test]
async fn ollama_embed_and_the_legacy_route() {
    let base = start_daemon();
    let (status, body) = post(
        &base,
        "/api/embed",
        json!({"model": ENCODER, "input": ["why is the sky blue?", "grass is green"], "keep_alive": "1m", "options": {"temperature": 0}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], ENCODER);
    let embeddings = body["embeddings"].as_array().unwrap();
    assert_eq!(embeddings.len(), 2);
    assert!(body["prompt_eval_count"].as_u64().unwrap() >= 8);
    assert!(body["total_duration"].as_u64().unwrap() >= body["load_duration"].as_u64().unwrap());
    let (status, legacy) = post(
        &base,
        "/api/embeddings",
        json!({"model": ENCODER, "prompt": "why is the sky blue?"}),
    )
    .await;
    assert_eq!(status, 200, "{legacy}");
    assert!(cosine(&floats(&legacy["embedding"]), &floats(&embeddings[0])) > 0.99999);

    // Too long: cut by default, refused by name with truncate false.
    let long = "word ".repeat(700);
    let (status, body) = post(
        &base,
        "/api/embed",
        json!({"model": ENCODER, "input": ["short", long]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["prompt_eval_count"].as_u64().unwrap(), 3 + 512);
    let (status, body) = post(
        &base,
        "/api/embed",
        json!({"model": ENCODER, "input": ["short", long], "truncate": false}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("input 1 is 702 tokens"),
        "{body}"
    );
}

#[actix_web::test]
async fn bad_inputs_get_the_right_status_in_each_shape() {
    let base = start_daemon();
    let openai_error = |body: &Value| {
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": ENCODER, "input": []}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("input")),
        "{body}"
    );
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": ENCODER, "input": ["ok", ""]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(openai_error(&body), "input 1 is empty");
    let many: Vec<String> = (0..2049).map(|i| format!("s{i}")).collect();
    let (status, _) = post(
        &base,
        "/v1/embeddings",
        json!({"model": ENCODER, "input": many}),
    )
    .await;
    assert_eq!(status, 413);
    let (status, body) = post(&base, "/api/embed", json!({"model": ENCODER, "input": ""})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "input 0 is empty");
    let (status, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": CHAT, "input": "hi"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(openai_error(&body).contains("is a chat model"), "{body}");
    let (status, body) = post(&base, "/api/embed", json!({"model": CHAT, "input": "hi"})).await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("is a chat model"),
        "{body}"
    );
    let chat = json!({"model": ENCODER, "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(&base, "/v1/chat/completions", chat.clone()).await;
    assert_eq!(status, 400);
    assert!(
        openai_error(&body).contains("is an embedding model"),
        "{body}"
    );
    let (status, body) = post(
        &base,
        "/api/chat",
        json!({"stream": false, "model": ENCODER, "messages": chat["messages"]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("is an embedding model"),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/rerank",
        json!({"query": "q", "documents": ["a", 7]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        openai_error(&body),
        "documents[1] is a number, not a string or {\"text\": ...}"
    );
    let (status, _) = post(
        &base,
        "/rerank",
        json!({"query": "q", "documents": ["a"], "top_n": 0}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &base,
        "/v1/rerank",
        json!({"query": "", "documents": ["a"]}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(&base, "/rerank", json!({"query": "q", "documents": []})).await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &base,
        "/rerank",
        json!({"query": "q", "documents": vec!["d"; 2049]}),
    )
    .await;
    assert_eq!(status, 413);
}

/// MRR@10 of a scorer over the retrieval set, through `/rerank`.
async fn mean_reciprocal_rank(base: &str, model: &str) -> f64 {
    let set = testdata("retrieval.json");
    let documents = set["documents"].clone();
    let relevant: Vec<usize> = serde_json::from_value(set["relevant"].clone()).unwrap();
    let mut total = 0.0;
    for (query, answer) in set["queries"].as_array().unwrap().iter().zip(&relevant) {
        let request = json!({"model": model, "query": query, "documents": documents, "return_documents": true});
        let (status, body) = post(base, "/rerank", request).await;
        assert_eq!(status, 200, "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 10);
        let scores: Vec<f64> = results
            .iter()
            .map(|r| r["relevance_score"].as_f64().unwrap())
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "results sorted by relevance: {scores:?}"
        );
        let first = &results[0];
        let index = first["index"].as_u64().unwrap() as usize;
        assert_eq!(first["document"]["text"], documents[index]);
        let rank = results.iter().position(|r| r["index"] == *answer).unwrap() + 1;
        total += 1.0 / rank as f64;
    }
    total / relevant.len() as f64
}

/// MRR@10 per scorer, printed as a table: each must rank well above the random baseline (0.29),
/// and the chat model's scores must be probabilities that depend on the document.
#[actix_web::test]
async fn every_scorer_is_measured_against_the_random_baseline() {
    let base = start_daemon();
    // A random order puts the relevant one of 10 at each rank equally often.
    let random: f64 = (1..=10).map(|rank| 1.0 / rank as f64).sum::<f64>() / 10.0;
    let mut table = vec![
        format!("{:<20} {:<12} {:>7}", "model", "scorer", "MRR@10"),
        format!("{:<20} {:<12} {random:>7.3}", "(random order)", ""),
    ];
    let mut mrrs = Vec::new();
    let models = std::env::var("LLAMAY_RERANK_MODELS")
        .unwrap_or_else(|_| format!("{ENCODER},{CHAT},{OTHER_CHAT}"));
    for model in models.split(',').filter(|m| !m.is_empty()) {
        let scorer = if model == ENCODER {
            "cosine"
        } else {
            "relevance"
        };
        let mrr = mean_reciprocal_rank(&base, model).await;
        table.push(format!("{model:<20} {scorer:<12} {mrr:>7.3}"));
        mrrs.push((model.to_string(), mrr));
    }
    println!("{}", table.join("\n"));
    for (model, mrr) in mrrs {
        assert!(mrr >= 0.8, "{model}: MRR@10 {mrr:.3}");
    }
    let documents = [
        "The capital of France is Paris.",
        "Bananas are yellow.",
        "Paris is the capital and largest city of France.",
    ];
    let (status, body) = post(
        &base,
        "/rerank",
        json!({"query": "What is the capital of France?", "documents": documents, "top_n": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["model"], CHAT,
        "the -rerank model answers when none is named"
    );
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0].get("document").is_none());
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.iter().all(|s| (0.0..=1.0).contains(s)) && scores[0] >= scores[1],
        "{scores:?}"
    );
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 30);
}
