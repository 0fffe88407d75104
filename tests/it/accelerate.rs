//! Acceleration (issue 50): drafts decoded with each sampled token and verified. On the real
//! SmolLM2 through the model worker: greedy and seeded output on the extraction prompts
//! (testdata/extraction) against `accelerate` off, and four sequences together against one at a
//! time; through the daemon, `llamay_accelerate: false` on each route drafts nothing. And over
//! the JSON Schema test suite's schemas, with random documents: the forced bytes a draft is
//! made from are bytes every document from there must write, so a draft never leaves the
//! automaton.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use llamay::actors::messages::{Generate, Generation};
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{
    ChatMessage, Constraint, ConstraintSource, FinishReason, PromptInput, Role, SamplingParams,
    UncheckedGenerateRequest,
};
use llamay::grammar::schema::{compile_schema, FormatMode};
use llamay::grammar::{CompiledGrammar, Limits, Matcher, TokenTrie};
use llamay::llm::{ContextParams, KvType, Model};
use llamay::service::validate_local;
use llamay::store::Store;
use llamay_test_support::daemon::Daemon;

use crate::in_process::collect;
use llamay_test_support::extraction::{extraction_prompts, ExtractionPrompt};
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";

/// One SmolLM2 worker with four sequences, shared by the tests in this file.
fn smollm2() -> &'static LlamaModelHandle {
    static HANDLE: OnceLock<LlamaModelHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let store = Store::open(&Store::default_home()).expect("store");
        let (path, info) = locate_model(MODEL, Some(&store)).expect("smollm2:135m (scripts/setup)");
        let model = Arc::new(Model::load(&path).expect("model loads"));
        let context = ContextParams { n_ctx: 4096, threads: 1, batch: 512, sequences: 4, kv_type: KvType::F16, flash_attention: true };
        LlamaModelHandle::start(model, info, &WorkerSettings { context, ..WorkerSettings::default() }).expect("worker")
    })
}

fn submit(prompt: &ExtractionPrompt, accelerate: bool, seed: Option<u32>) -> Generation {
    let source = ConstraintSource::schema(prompt.schema.clone(), FormatMode::Ignore);
    let constraint = Constraint::from_source(source, &Limits::default()).expect("the schema compiles");
    let input = PromptInput::Chat { messages: vec![ChatMessage::new(Role::User, prompt.message())], tools: Vec::new() };
    let sampling = SamplingParams {
        temperature: if seed.is_some() { 0.8 } else { 0.0 },
        seed,
        repeat_penalty: 1.0,
        max_tokens: Some(72),
        ..Default::default()
    };
    let mut request = UncheckedGenerateRequest::new(MODEL, input).with_sampling(sampling);
    request.accelerate = Some(accelerate);
    smollm2().submit(validate_local(request, Some(constraint), None).expect("valid")).expect("submit")
}

/// Every row after a confirmed draft token is the step plain decoding takes next, computed in a
/// batch instead of alone: greedy output differs only where batched kernels round a near tie
/// the other way, and seeded output draws once per token either way. Measured here: every
/// prompt agrees, greedy and seeded.
#[test]
fn accelerated_output_is_plain_decoding_s_greedy_and_seeded() {
    let prompts: Vec<ExtractionPrompt> = extraction_prompts().into_iter().step_by(3).take(6).collect();
    let (mut agree, mut drafted, mut kept) = (0, 0, 0);
    for prompt in &prompts {
        for seed in [None, Some(7)] {
            let (plain, plain_done) = collect(submit(prompt, false, seed));
            let (fast, fast_done) = collect(submit(prompt, true, seed));
            assert_eq!(plain_done.drafts.drafted(), 0, "{}: accelerate off drafts nothing", prompt.name);
            drafted += fast_done.drafts.drafted();
            kept += fast_done.drafts.accepted;
            if plain == fast {
                agree += 1;
                // Kept drafts count as generated tokens, once each.
                assert_eq!(plain_done.usage.completion_tokens, fast_done.usage.completion_tokens, "{}", prompt.name);
            } else {
                eprintln!("{} (seed {seed:?}) differs\n  plain: {plain}\n  fast:  {fast}", prompt.name);
            }
            if fast_done.finish_reason == FinishReason::Stop {
                let document: Value = serde_json::from_str(&fast).unwrap_or_else(|e| panic!("{}: {e}: {fast}", prompt.name));
                let validator = jsonschema::validator_for(&prompt.schema).expect("valid schema");
                assert!(validator.is_valid(&document), "{}: {fast}", prompt.name);
            }
        }
    }
    eprintln!("accelerated = plain on {agree} of {} runs; {kept} of {drafted} draft tokens kept", prompts.len() * 2);
    assert!(kept > 0, "no draft was kept on {} extraction prompts", prompts.len());
    assert!(agree + 1 >= prompts.len() * 2, "accelerated output differs from plain decoding on {} of {} runs", prompts.len() * 2 - agree, prompts.len() * 2);
}

/// Drafts join the batch of all live sequences: four accelerated sequences decoded together
/// give what each gives alone, as often as plain decoding does (llama.cpp's kernels round
/// differently for other batch shapes, with or without drafts).
#[test]
fn four_accelerated_sequences_together_give_what_each_gives_alone() {
    let prompts: Vec<ExtractionPrompt> = extraction_prompts().into_iter().skip(1).step_by(5).take(4).collect();
    let mut equal = [0; 2];
    for (at, accelerate) in [false, true].into_iter().enumerate() {
        let alone: Vec<String> = prompts.iter().map(|p| collect(submit(p, accelerate, None)).0).collect();
        let together: Vec<Generation> = prompts.iter().map(|p| submit(p, accelerate, None)).collect();
        for ((prompt, alone), together) in prompts.iter().zip(&alone).zip(together) {
            let (together, _) = collect(together);
            if *alone == together {
                equal[at] += 1;
            } else {
                eprintln!("{} (accelerate {accelerate}) differs with three others:\n  alone:    {alone}\n  together: {together}", prompt.name);
            }
        }
    }
    eprintln!("together = alone: plain {} of 4, accelerated {} of 4", equal[0], equal[1]);
    assert!(equal[1] + 1 >= equal[0] && equal[1] >= 3, "together changed {} of 4 accelerated outputs (plain: {})", 4 - equal[1], 4 - equal[0]);
}

/// The daemon's draft counters, summed over its models.
fn drafted_so_far(daemon: &Daemon) -> u64 {
    let (_, stats) = daemon.get("/v1/stats");
    let models = stats["models"].as_array().cloned().unwrap_or_default();
    models.iter().map(|m| m["totals"]["drafts"]["forced"].as_u64().unwrap_or(0) + m["totals"]["drafts"]["copied"].as_u64().unwrap_or(0)).sum()
}

/// Each route on a daemon of its own: a worker drafts from the start, but once it has measured
/// what rows cost it may rightly stop (a busy machine, as under a parallel test run, makes rows
/// dear), so only a fresh worker's first accelerated answer is sure to draft.
#[test]
fn llamay_accelerate_false_drafts_nothing_on_every_route_and_the_default_drafts() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "postcode": {"type": "string"}},
        "required": ["city", "postcode"], "additionalProperties": false});
    let message = json!([{"role": "user", "content": "Ship to Lyon, postcode 69001. Give the city and postcode as JSON."}]);
    let format = json!({"type": "json_schema", "json_schema": {"name": "address", "schema": schema}});
    let routes: [(&str, Value); 3] = [
        ("/v1/chat/completions", json!({"model": MODEL, "messages": message, "temperature": 0, "max_tokens": 40, "response_format": format})),
        ("/v1/messages", json!({"model": MODEL, "messages": message, "temperature": 0, "max_tokens": 40, "llamay_schema": schema})),
        ("/api/chat", json!({"model": MODEL, "messages": message, "stream": false, "format": schema, "options": {"temperature": 0, "num_predict": 40}})),
    ];
    for (route, body) in routes {
        let daemon = Daemon::builder().model(MODEL).args(["-parallel", "1", "-t", "1", "-context", "1024"]).start();
        let mut off = body.clone();
        off["llamay_accelerate"] = json!(false);
        let before = drafted_so_far(&daemon);
        let (status, answer) = daemon.post(route, &off);
        assert_eq!(status, 200, "{route}: {answer}");
        assert_eq!(drafted_so_far(&daemon), before, "{route}: llamay_accelerate false drafted");
        let (status, answer) = daemon.post(route, &body);
        assert_eq!(status, 200, "{route}: {answer}");
        assert!(drafted_so_far(&daemon) > before, "{route}: the default drafted nothing");
        let metrics = daemon.client().get(daemon.url("/metrics")).send().and_then(|r| r.text()).expect("/metrics");
        assert!(metrics.contains("llamay_draft_tokens_accepted_total{model=\"smollm2:135m\"}"), "{metrics}");
    }
}

/// A vocabulary of the 256 bytes, so a matcher commits a document byte by byte.
fn byte_trie() -> Arc<TokenTrie> {
    let pieces: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).chain([Vec::new()]).collect();
    Arc::new(TokenTrie::new(&pieces, &[256]))
}

/// Random documents walked byte by byte through each schema of the suite; at every step the
/// forced bytes (with a whitespace habit of none, one space, or a newline and two spaces) are
/// committed on a matcher replaying the document so far: every one is accepted, and where no
/// habit is used, any byte the grammar allows next is the forced one.
#[test]
fn forced_bytes_never_leave_the_automaton_on_the_json_schema_suite() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/json-schema-test-suite/tests/draft2020-12");
    let trie = byte_trie();
    let mut random = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        (random % n as u64) as usize
    };
    let (mut schemas, mut forced_bytes) = (0, 0);
    let mut files: Vec<_> = std::fs::read_dir(&suite).expect("the suite").flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("JSON");
        for case in &cases {
            let Ok(grammar) = compile_schema(&case["schema"]) else { continue };
            let Ok(grammar) = CompiledGrammar::new(grammar, &Limits::default()) else { continue };
            let grammar = Arc::new(grammar);
            schemas += 1;
            let habits: [Option<&[u8]>; 3] = [Some(b""), Some(b" "), Some(b"\n  ")];
            let mut walker = Matcher::new(Arc::clone(&grammar), Arc::clone(&trie));
            let mut document: Vec<u8> = Vec::new();
            for _ in 0..48 {
                let habit = habits[next(habits.len())];
                let forced = walker.forced_bytes(32, document.last().copied(), &|_, _| habit.map(<[u8]>::to_vec));
                let mut replay = Matcher::new(Arc::clone(&grammar), Arc::clone(&trie));
                for &byte in document.iter().chain(&forced) {
                    replay.commit(u32::from(byte)).unwrap_or_else(|e| {
                        panic!("{}: forced {:?} after {:?} leaves the grammar: {e}", file.display(), String::from_utf8_lossy(&forced), String::from_utf8_lossy(&document))
                    });
                }
                forced_bytes += forced.len();
                let allowed: Vec<u32> = walker.compute_mask().iter_set().filter(|&t| t < 256).collect();
                if allowed.is_empty() {
                    break;
                }
                if let (Some(first), true) = (forced.first(), habit == Some(b"".as_slice()) || !forced.first().is_some_and(u8::is_ascii_whitespace)) {
                    if !walker.is_accepting() && allowed.len() == 1 {
                        assert_eq!(allowed[0], u32::from(*first), "{}: the one allowed byte is not the forced one", file.display());
                    }
                }
                let byte = allowed[next(allowed.len())] as u8;
                walker.commit(u32::from(byte)).expect("an allowed byte commits");
                document.push(byte);
            }
        }
    }
    eprintln!("{schemas} schemas, {forced_bytes} forced bytes checked");
    assert!(schemas > 200 && forced_bytes > 1000, "{schemas} schemas, {forced_bytes} forced bytes");
}
