//! Constrained generation with the real SmolLM2: whatever the model picks, the output stays
//! inside the grammar or schema. Runs through the model worker, as `llamay run` and the daemon do.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use llamay::actors::messages::Generate;
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{
    ChatMessage, Completion, Constraint, ConstraintKind, FinishReason, PromptInput, Role, SamplingParams,
    UncheckedGenerateRequest,
};
use llamay::service::validate_local;
use llamay::grammar::{check_input, compile_gbnf, CheckOutcome, CompiledGrammar, Limits};
use llamay::llm::{ContextParams, KvType, Model};
use llamay::store::Store;
use llamay_test_support::decimal_validation;

fn start_smollm2() -> LlamaModelHandle {
    let store = Store::open(&Store::default_home()).expect("store");
    let (path, info) = locate_model("smollm2:135m", Some(&store)).expect("smollm2:135m (scripts/setup)");
    let model = Arc::new(Model::load(&path).expect("model loads"));
    let settings = WorkerSettings {
        context: ContextParams { n_ctx: 4096, threads: 1, batch: 512, sequences: 4, kv_type: KvType::F32, flash_attention: false },
        ..WorkerSettings::default()
    };
    LlamaModelHandle::start(model, info, &settings).expect("worker")
}

/// One SmolLM2 worker with four sequences, shared by the tests in this file.
fn smollm2() -> &'static LlamaModelHandle {
    static HANDLE: OnceLock<LlamaModelHandle> = OnceLock::new();
    HANDLE.get_or_init(start_smollm2)
}

/// The first constrained request must not pay for the token trie (0.4 s at 262k tokens): it is
/// built in the background once the model is loaded, with no request asking for it.
#[test]
fn the_token_trie_is_built_after_loading_without_a_request() {
    let handle = start_smollm2();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !handle.token_trie_ready() {
        assert!(std::time::Instant::now() < deadline, "no token trie 60 s after loading");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn generate(prompt: &str, constraint: Constraint, seed: Option<u32>, max_tokens: u32) -> (String, Completion) {
    let input = PromptInput::Chat { messages: vec![ChatMessage::new(Role::User, prompt)], tools: Vec::new() };
    let sampling = SamplingParams {
        temperature: if seed.is_some() { 0.9 } else { 0.0 },
        seed,
        max_tokens: Some(max_tokens),
        repeat_penalty: 1.0,
        ..Default::default()
    };
    let request = UncheckedGenerateRequest::new("smollm2:135m", input).with_sampling(sampling);
    let request = validate_local(request, Some(constraint), None).expect("a valid request");
    crate::in_process::collect(smollm2().submit(request).expect("submit"))
}

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/grammars").join(name)
}

#[test]
fn every_sample_grammar_holds_greedy_and_sampled() {
    let prompts = [
        ("arithmetic.gbnf", "Write two sums."),
        ("c.gbnf", "Write a small C function."),
        ("chess.gbnf", "Play the first moves of a chess game."),
        ("english.gbnf", "Describe the sea."),
        ("japanese.gbnf", "Say hello in Japanese."),
        ("json.gbnf", "Describe a cat as JSON."),
        ("json_arr.gbnf", "List three fruits as a JSON array."),
        ("list.gbnf", "List four things that break when a laptop goes offline."),
    ];
    for (file, prompt) in prompts {
        let source = std::fs::read(corpus(file)).unwrap();
        let grammar = Arc::new(compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{file}: {e}")));
        for seed in [None, Some(1), Some(2)] {
            let constraint = Constraint { kind: ConstraintKind::Grammar, grammar: Arc::clone(&grammar), source: None };
            let (text, done) = generate(prompt, constraint, seed, 40);
            let outcome = check_input(&grammar, text.as_bytes());
            match done.finish_reason {
                // Ended by the model or the constraint: a whole sentence of the grammar.
                FinishReason::Stop => assert_eq!(outcome, CheckOutcome::Match, "{file} seed {seed:?}: {text:?}"),
                // Cut by the token budget: a prefix that can still be completed.
                FinishReason::Length => assert!(
                    matches!(outcome, CheckOutcome::Match | CheckOutcome::Incomplete { .. }),
                    "{file} seed {seed:?}: {outcome:?} for {text:?}"
                ),
                other => panic!("{file} seed {seed:?}: finished with {other:?}"),
            }
            assert!(!text.is_empty(), "{file} seed {seed:?}: nothing generated");
        }
    }
}

fn schema_constraint(schema: &serde_json::Value) -> Constraint {
    let ir = llamay::grammar::schema::compile_schema(schema).expect("schema compiles");
    let grammar = CompiledGrammar::new(ir, &Limits::default()).expect("automaton");
    Constraint { kind: ConstraintKind::Schema, grammar: Arc::new(grammar), source: None }
}

#[test]
fn the_spec_order_schema_yields_a_document_that_validates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/schemas/order.json");
    let schema: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the order schema is valid JSON Schema");
    let prompt = "Order 7 from Acme: 3 widgets at 4.50 EUR each, ship to Lyon, postcode 69001.";
    for seed in [None, Some(7)] {
        let (text, done) = generate(prompt, schema_constraint(&schema), seed, 400);
        assert_eq!(done.finish_reason, FinishReason::Stop, "seed {seed:?}: {text}");
        let document: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let errors = decimal_validation::errors_in_decimal(&validator, &document);
        assert!(errors.is_empty(), "seed {seed:?}: {errors:?} in {text}");
    }
}

#[test]
fn any_json_output_parses() {
    let grammar = CompiledGrammar::new(llamay::grammar::schema::any_json(), &Limits::default()).unwrap();
    let constraint = Constraint { kind: ConstraintKind::Json, grammar: Arc::new(grammar), source: None };
    let prompt = "Give me a JSON object with keys name, port and tls for a local server.";
    let (text, done) = generate(prompt, constraint, None, 200);
    assert_eq!(done.finish_reason, FinishReason::Stop, "{:?}: {text}", done.finish_reason);
    serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let stats = done.constraint_stats.expect("constraint stats");
    let summary = &stats.summary;
    assert!(summary.starts_with("json mask: "), "{summary}");
}
