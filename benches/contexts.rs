//! What named contexts and prefix reuse buy (issue 11), each against its anchor in the same
//! run on the same `llamay serve` (SmolLM2 135M, loopback), with the ratio printed:
//!
//! 1. a ~1,000-token prefix and 8 continuations of up to 32 tokens: `POST /v1/contexts` +
//!    `fork?n=8` + 8 requests with `llamay_context`, against 8 independent full-prompt
//!    requests; time to all 8 answers (goal >= 4x);
//! 2. turn 5 of a 5-turn chat that resends its history, with the earlier turns in the cache,
//!    against the same request with nothing cached; time to first token (a one-token answer,
//!    goal >= 5x);
//! 3. restoring a snapshot of the prefix's context and answering one token, against prefilling
//!    the same prefix and answering one token (goal >= 10x), on a restarted daemon so that no
//!    sequence still holds the prefix. This needs the snapshot routes; on a daemon without
//!    them the bench prints the other rows and then fails naming the route.
//!
//! Anchors never share a prefix with anything cached: each prompt starts with a nonce of its
//! own, so the daemon's automatic reuse finds nothing and the anchor prefills everything, as a
//! server without reuse would (the token counts are the same but for the nonce).
//!
//! `cargo bench --bench contexts` (smollm2:135m from the store). Env: LLAMAY_BENCH_ROUNDS
//! (default 2; the best round of each side is kept), LLAMAY_BENCH_THREADS (daemon threads).

use std::time::{Duration, Instant};

use llamay_test_support::daemon::Daemon;
use llamay_test_support::http::post_ok as post;
use reqwest::blocking::Client;
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";
const CONTINUATIONS: usize = 8;
const CONTINUATION_TOKENS: u32 = 32;

fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn start_daemon() -> Daemon {
    // 8 forks plus the prefix's own context, 2048 tokens each.
    let daemon = Daemon::builder()
        .model(MODEL)
        .args(["-parallel", "9", "-context", "2048"]);
    match env_number("LLAMAY_BENCH_THREADS") {
        Some(threads) => daemon.args(["-t", &threads.to_string()]),
        None => daemon,
    }
    .start()
}

fn must(result: Result<Value, String>) -> Value {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn nonce(round: usize, side: &str, index: usize) -> String {
    format!("[{side} {round}.{index} {:x}]\n", std::process::id())
}

/// About 1,000 SmolLM2 tokens of few-shot text.
fn prefix() -> String {
    let facts = [
        ("Lisbon", "Portugal", "the Tagus"),
        ("Vienna", "Austria", "the Danube"),
        ("Cairo", "Egypt", "the Nile"),
        ("Warsaw", "Poland", "the Vistula"),
        ("Prague", "Czechia", "the Vltava"),
        ("Paris", "France", "the Seine"),
        ("London", "the United Kingdom", "the Thames"),
        ("Budapest", "Hungary", "the Danube"),
        ("Baghdad", "Iraq", "the Tigris"),
        ("Bern", "Switzerland", "the Aare"),
    ];
    let mut text = String::from("You answer questions about cities in one short sentence.\n");
    // 28 questions and answers of about 35 tokens each.
    for round in 0..3 {
        for (city, country, river) in facts.iter().take(if round == 2 { 8 } else { 10 }) {
            text.push_str(&format!(
                "Q: Which river flows through {city}, and which country is it in (case {round})?\n\
                 A: {river} flows through {city}, a city of {country}.\n"
            ));
        }
    }
    text
}

fn generate(
    client: &Client,
    base: &str,
    prompt: &str,
    context: Option<&str>,
    tokens: u32,
) -> Value {
    let mut body = json!({
        "model": MODEL, "prompt": prompt, "raw": true, "stream": false,
        "options": {"temperature": 0, "num_predict": tokens},
    });
    if let Some(context) = context {
        body["llamay_context"] = json!(context);
    }
    must(post(client, &format!("{base}/api/generate"), &body))
}

fn questions() -> Vec<String> {
    [
        "Rome", "Berlin", "Madrid", "Oslo", "Athens", "Dublin", "Kyiv", "Seoul",
    ]
    .iter()
    .map(|city| format!("Q: Which river flows through {city}, and which country is it in?\nA:"))
    .collect()
}

/// Row 1, our side: one context, 8 forks, 8 answers at once. Returns (seconds, prefix tokens).
fn forked_answers(client: &Client, base: &str, round: usize) -> (f64, u64) {
    let start = Instant::now();
    let prompt = format!("{}{}", nonce(round, "ctx", 0), prefix());
    let created = must(post(
        client,
        &format!("{base}/v1/contexts"),
        &json!({"model": MODEL, "prompt": prompt}),
    ));
    let id = created["id"].as_str().expect("context id").to_string();
    let forked = must(post(
        client,
        &format!("{base}/v1/contexts/{id}/fork?n={CONTINUATIONS}"),
        &json!({}),
    ));
    let children: Vec<String> = forked["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .map(|c| c["id"].as_str().expect("child id").to_string())
        .collect();
    assert_eq!(children.len(), CONTINUATIONS);
    let questions = questions();
    std::thread::scope(|scope| {
        for (child, question) in children.iter().zip(&questions) {
            scope.spawn(move || generate(client, base, question, Some(child), CONTINUATION_TOKENS));
        }
    });
    (
        start.elapsed().as_secs_f64(),
        created["tokens"].as_u64().unwrap_or(0),
    )
}

/// Row 1, the anchor: 8 full prompts, nothing shared.
fn independent_answers(client: &Client, base: &str, round: usize) -> f64 {
    let start = Instant::now();
    let questions = questions();
    std::thread::scope(|scope| {
        for (index, question) in questions.iter().enumerate() {
            let prompt = format!("{}{}{question}", nonce(round, "full", index), prefix());
            scope.spawn(move || generate(client, base, &prompt, None, CONTINUATION_TOKENS));
        }
    });
    start.elapsed().as_secs_f64()
}

/// A 5-turn conversation whose turns are long (about 200 tokens each), with fixed answers.
fn conversation(session: &str, turns: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": format!("{session}You are a careful travel guide.")}),
    ];
    let topics = ["rivers", "bridges", "markets", "museums", "parks"];
    for (turn, topic) in topics.iter().enumerate().take(turns) {
        let detail = format!(
            "I am planning a long walk through the old town and I care about {topic}. Tell me what \
             to look for, how long to stay, what the locals say about them, and which times of day \
             are quiet. "
        )
        .repeat(4);
        messages.push(json!({"role": "user", "content": format!("Turn {}: {detail}", turn + 1)}));
        if turn + 1 < turns {
            messages.push(json!({"role": "assistant", "content": format!(
                "For {topic}, start early, walk slowly, and ask at the first cafe you pass; the quiet hours are before nine."
            )}));
        }
    }
    messages
}

fn chat_one_token(client: &Client, base: &str, messages: &[Value]) -> (f64, Value) {
    let body = json!({"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0});
    let start = Instant::now();
    let answer = must(post(client, &format!("{base}/v1/chat/completions"), &body));
    (start.elapsed().as_secs_f64(), answer)
}

/// Row 2: (turn 5 with turns 1-4 sent before, turn 5 cold, cached tokens, prompt tokens).
fn fifth_turn(client: &Client, base: &str, round: usize) -> (f64, f64, u64, u64) {
    let warm_session = nonce(round, "chat", 0);
    for turns in 1..5 {
        chat_one_token(client, base, &conversation(&warm_session, turns));
    }
    let (warm, answer) = chat_one_token(client, base, &conversation(&warm_session, 5));
    let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    let (cold, _) = chat_one_token(client, base, &conversation(&nonce(round, "chat", 1), 5));
    (warm, cold, cached, prompt)
}

/// Row 3, first half: a snapshot of a context holding the prefix (its id), or why not.
fn snapshot_of_prefix(client: &Client, base: &str, round: usize) -> Result<String, String> {
    let prompt = format!("{}{}", nonce(round, "snap", 0), prefix());
    let created = post(
        client,
        &format!("{base}/v1/contexts"),
        &json!({"model": MODEL, "prompt": prompt}),
    )?;
    let id = created["id"].as_str().ok_or("no context id")?.to_string();
    let snapshot = post(
        client,
        &format!("{base}/v1/contexts/{id}/snapshot"),
        &json!({}),
    )?;
    let snap = snapshot["snapshot"].as_str().ok_or_else(|| {
        format!("POST /v1/contexts/{id}/snapshot answered no snapshot id: {snapshot}")
    })?;
    Ok(snap.to_string())
}

/// Row 3, second half, on a restarted daemon (so no sequence holds the prefix and only the
/// snapshot can spare its prefill): (snapshot restore + first token, prefill + first token).
fn restore_against_prefill(
    client: &Client,
    base: &str,
    round: usize,
    snap: &str,
) -> Result<(f64, f64), String> {
    let question = "Q: Which river flows through Rome, and which country is it in?\nA:";
    let start = Instant::now();
    let fresh = format!("{}{}{question}", nonce(round, "snap", 1), prefix());
    generate(client, base, &fresh, None, 1);
    let prefill = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let restored = post(
        client,
        &format!("{base}/v1/contexts"),
        &json!({"snapshot": snap}),
    )?;
    let restored_id = restored["id"]
        .as_str()
        .ok_or_else(|| format!("restoring {snap} made no context: {restored}"))?;
    generate(client, base, question, Some(restored_id), 1);
    Ok((start.elapsed().as_secs_f64(), prefill))
}

fn main() {
    let rounds = env_number("LLAMAY_BENCH_ROUNDS").unwrap_or(2).max(1);
    let daemon = start_daemon();
    let (client, base) = (daemon.client(), daemon.base.as_str());
    // Warm-up: the model loads.
    generate(client, base, "Hello", None, 1);

    let mut fork_best = f64::MAX;
    let mut full_best = f64::MAX;
    let mut prefix_tokens = 0;
    let (mut warm_best, mut cold_best, mut cached, mut prompt) = (f64::MAX, f64::MAX, 0, 0);
    let mut snapshots = Vec::new();
    for round in 0..rounds {
        eprintln!(
            "round {}/{rounds}: context + fork, then 8 independent prompts",
            round + 1
        );
        let (seconds, tokens) = forked_answers(client, base, round);
        fork_best = fork_best.min(seconds);
        prefix_tokens = tokens;
        full_best = full_best.min(independent_answers(client, base, round));
        eprintln!(
            "round {}/{rounds}: a 5-turn chat, then its turn 5 cold",
            round + 1
        );
        let (warm, cold, c, p) = fifth_turn(client, base, round);
        warm_best = warm_best.min(warm);
        cold_best = cold_best.min(cold);
        (cached, prompt) = (c, p);
        eprintln!("round {}/{rounds}: a snapshot of the prefix", round + 1);
        snapshots.push(snapshot_of_prefix(client, base, round));
    }
    // Any failed round fails the row: a number from the other rounds would hide it.
    let snapshots: Result<Vec<String>, String> = snapshots.into_iter().collect();
    let restore = snapshots.and_then(|snapshots| {
        eprintln!("restarting the daemon; then snapshot restore against prefill");
        if !daemon.terminate(Duration::from_secs(30)) {
            eprintln!("the daemon did not stop within 30 s of SIGTERM: killed");
        }
        let daemon = start_daemon();
        let (client, base) = (daemon.client(), daemon.base.as_str());
        generate(client, base, "Hello", None, 1);
        snapshots.iter().enumerate().try_fold(
            (f64::MAX, f64::MAX),
            |(best_r, best_f), (round, snap)| {
                restore_against_prefill(client, base, round, snap)
                    .map(|(r, f)| (r.min(best_r), f.min(best_f)))
            },
        )
    });
    println!(
        "{MODEL}, one daemon (-parallel 9; restarted for the last row), best of {rounds} rounds; prefix {prefix_tokens} tokens"
    );
    println!(
        "{:<58} {:>10} {:>10} {:>8} {:>6}",
        "measure", "anchor s", "llamay s", "ratio", "goal"
    );
    println!(
        "{:<58} {:>10.3} {:>10.3} {:>7.1}x {:>6}",
        format!("{CONTINUATIONS} x {CONTINUATION_TOKENS} tokens: independent vs context + fork?n={CONTINUATIONS}"),
        full_best,
        fork_best,
        full_best / fork_best,
        ">=4x"
    );
    println!(
        "{:<58} {:>10.3} {:>10.3} {:>7.1}x {:>6}",
        format!("turn 5 first token: cold vs reuse ({cached} of {prompt} cached)"),
        cold_best,
        warm_best,
        cold_best / warm_best,
        ">=5x"
    );
    match restore {
        Ok((restored, prefilled)) => println!(
            "{:<58} {:>10.3} {:>10.3} {:>7.1}x {:>6}",
            "first token: prefill vs snapshot restore",
            prefilled,
            restored,
            prefilled / restored,
            ">=10x"
        ),
        Err(why) => {
            println!(
                "{:<58} {:>10} {:>10} {:>8} {:>6}",
                "first token: prefill vs snapshot restore", "-", "-", "FAILED", ">=10x"
            );
            eprintln!("snapshot row failed: {why}");
            std::process::exit(1);
        }
    }
}
