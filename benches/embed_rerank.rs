//! Embeddings and rerank throughput over HTTP, printed as a table: 256 sentences embedded in
//! one request against one request per sentence, on llamay and (the anchor) llama-server
//! `--embedding` serving the same all-MiniLM-L6-v2 GGUF with the same threads, with the ratio;
//! then reranking 100 documents with each scorer (no anchor: llama-server reranks only with a
//! cross-encoder GGUF, and none is available here).
//!
//! `cargo bench --bench embed_rerank`. Environment: LLAMA_SERVER (a llama-server binary; else
//! the one benches/peer/build-llama-server.sh caches), BENCH_THREADS (default 1).

use std::time::Instant;

use llamay::store::{ModelName, Store};
use llamay_test_support::daemon::Daemon;
use llamay_test_support::http;
use llamay_test_support::process::{llama_server_binary, start_llama_server_with};
use reqwest::blocking::Client;
use serde_json::{json, Value};

const ENCODER: &str = "all-minilm:l6-v2";
const JUDGE: &str = "smollm2:135m";
const SENTENCES: usize = 256;
const DOCUMENTS: usize = 100;

fn post(client: &Client, url: &str, body: &Value) -> Value {
    http::post_ok(client, url, body).unwrap_or_else(|e| panic!("{e}"))
}

fn sentences(count: usize) -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/embeddings/retrieval.json"
    );
    let set: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("testdata")).expect("json");
    let mut pool: Vec<String> = serde_json::from_value(set["documents"].clone()).unwrap();
    pool.extend(serde_json::from_value::<Vec<String>>(set["queries"].clone()).unwrap());
    (0..count)
        .map(|i| format!("{} (item {i})", pool[i % pool.len()]))
        .collect()
}

/// Embeddings per second: all in one request, then one request per sentence.
fn embed_rates(client: &Client, base: &str, model: &str, texts: &[String]) -> (f64, f64) {
    let url = format!("{base}/v1/embeddings");
    post(client, &url, &json!({"model": model, "input": texts[..4]})); // warm up
    let started = Instant::now();
    let answer = post(client, &url, &json!({"model": model, "input": texts}));
    assert_eq!(answer["data"].as_array().map(Vec::len), Some(texts.len()));
    let batched = texts.len() as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for text in texts {
        post(client, &url, &json!({"model": model, "input": text}));
    }
    (
        batched,
        texts.len() as f64 / started.elapsed().as_secs_f64(),
    )
}

fn main() {
    let threads = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1u32)
        .to_string();
    let store = Store::open(&Store::default_home()).expect("the model store");
    let manifest = store
        .resolve(&ModelName::parse(ENCODER).unwrap())
        .expect("all-minilm:l6-v2 (scripts/setup)");
    let encoder_file = store.blob_path(&manifest);
    let texts = sentences(SENTENCES);

    let ours = Daemon::builder()
        .args([
            "-embed",
            ENCODER,
            "-rerank",
            JUDGE,
            "-t",
            &threads,
            "-max-loaded",
            "2",
        ])
        .start();
    let client = ours.client();
    let (our_batched, our_single) = embed_rates(client, &ours.base, ENCODER, &texts);

    let anchor = llama_server_binary().and_then(|binary| {
        let encoder_file = encoder_file.display().to_string();
        let args = [
            "-m",
            &encoder_file,
            "--embedding",
            "-t",
            &threads,
            "-tb",
            &threads,
            "-c",
            "4096",
            "-b",
            "2048",
            "-ub",
            "2048",
            "-np",
            "8",
        ];
        match start_llama_server_with(&binary, &args) {
            Ok((_server, url)) => Some((binary, embed_rates(client, &url, ENCODER, &texts))),
            Err(error) => {
                println!("llama-server did not start: {error}");
                None
            }
        }
    });

    println!("\nembeddings, {SENTENCES} sentences, {ENCODER}, {threads} thread(s)");
    println!(
        "{:<28} {:>14} {:>14} {:>10}",
        "", "llamay emb/s", "llama-server", "ratio"
    );
    let row = |label: &str, ours: f64, theirs: Option<f64>| match theirs {
        Some(theirs) => println!(
            "{label:<28} {ours:>14.1} {theirs:>14.1} {:>10.2}",
            ours / theirs
        ),
        None => println!("{label:<28} {ours:>14.1} {:>14} {:>10}", "n/a", "n/a"),
    };
    row(
        "one request of 256",
        our_batched,
        anchor.as_ref().map(|(_, (b, _))| *b),
    );
    row(
        "256 requests of 1",
        our_single,
        anchor.as_ref().map(|(_, (_, s))| *s),
    );
    match &anchor {
        Some((binary, _)) => println!("anchor: {}", binary.display()),
        None => println!("anchor: llama-server NOT AVAILABLE (set LLAMA_SERVER or run benches/peer/build-llama-server.sh)"),
    }

    println!("\nrerank, {DOCUMENTS} documents, one request (no anchor: llama-server reranks only with a cross-encoder)");
    println!(
        "{:<20} {:<40} {:>10} {:>10}",
        "model", "scorer", "seconds", "docs/s"
    );
    let documents = sentences(DOCUMENTS);
    for model in [ENCODER, JUDGE] {
        let body = json!({"model": model, "query": "How do I reset a forgotten email password?", "documents": documents});
        post(
            client,
            &ours.url("/rerank"),
            &json!({"model": model, "query": "warm up", "documents": ["a"]}),
        );
        let started = Instant::now();
        let answer = post(client, &ours.url("/rerank"), &body);
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(answer["results"].as_array().map(Vec::len), Some(DOCUMENTS));
        let (_, stats) = ours.get("/v1/stats");
        let scorer = stats["models"]
            .as_array()
            .and_then(|models| models.iter().find(|m| m["name"] == model))
            .map(|m| m["rerank_scorer"].as_str().unwrap_or("").to_string())
            .unwrap_or_default();
        println!(
            "{model:<20} {scorer:<40} {seconds:>10.2} {:>10.1}",
            DOCUMENTS as f64 / seconds
        );
    }
}
