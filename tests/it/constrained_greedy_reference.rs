//! Constrained greedy decoding through the model worker (the daemon's path, with whatever
//! shortcuts its sampler takes) against a reference loop written from the definition: decode
//! with llama.cpp, compute the full token mask at every step, take the highest allowed logit.
//! Both must produce the same tokens on the real SmolLM2 and Gemma 3, and the schema's
//! document must validate.

use std::path::Path;
use std::sync::Arc;

use llamay::actors::messages::Generate;
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{
    Completion, Constraint, ConstraintSource, FinishReason, PromptInput, SamplingParams,
    UncheckedGenerateRequest,
};
use llamay::service::validate_local;
use llamay::grammar::schema::FormatMode;
use llamay::grammar::{CompiledGrammar, Limits, Matcher, TokenTrie};
use llamay::llm::template::TemplateMessage;
use llamay::llm::{BatchEntry, ContextParams, KvType, Model};
use llamay::store::Store;
use llamay_test_support::decimal_validation;

const PROMPT: &str = "Order 7 from Acme: 3 widgets at 4.50 EUR each, ship to Lyon, postcode 69001.";
/// JSON mode's prompt: one both models answer with a whole object within the budget (on the
/// order prompt, greedy without a repeat penalty, SmolLM2 writes one key after another).
const JSON_PROMPT: &str = "What is 2+2?";
const MAX_TOKENS: u32 = 400;

/// The same context settings on both sides, so llama.cpp computes the same logits.
fn params() -> ContextParams {
    ContextParams { n_ctx: 1024, threads: 1, batch: 512, sequences: 1, kv_type: KvType::F16, flash_attention: true }
}

fn order_schema() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/schemas/order.json");
    serde_json::from_slice(&std::fs::read(path).expect("testdata/schemas/order.json")).expect("JSON")
}

/// Through a fresh worker (no earlier request whose prefix it could reuse).
fn through_worker(model: &Arc<Model>, name: &str, prompt: &str, constraint: Constraint) -> (String, Completion) {
    let store = Store::open(&Store::default_home()).expect("store");
    let (_, info) = locate_model(name, Some(&store)).expect("model in the store (scripts/setup)");
    let handle =
        LlamaModelHandle::start(Arc::clone(model), info, &WorkerSettings { context: params(), ..WorkerSettings::default() }).expect("worker");
    let input = PromptInput::Raw { prompt: prompt.into(), system: None, template: true };
    let sampling =
        SamplingParams { temperature: 0.0, repeat_penalty: 1.0, max_tokens: Some(MAX_TOKENS), ..Default::default() };
    let request = UncheckedGenerateRequest::new(name, input).with_sampling(sampling);
    let request = validate_local(request, Some(constraint), None).expect("a valid request");
    crate::in_process::collect(handle.submit(request).expect("submit"))
}

/// The definition: every step the full mask, then the highest allowed logit (lowest id of
/// equals, NaN never); stops as the worker does (end of generation, a complete document that
/// admits nothing more, or the budget).
fn by_definition(model: &Model, prompt: &str, grammar: Arc<CompiledGrammar>) -> (String, u32) {
    let vocabulary = model.vocabulary();
    let trie = Arc::new(TokenTrie::new(vocabulary.pieces(), vocabulary.end_of_generation()));
    let mut matcher = Matcher::new(grammar, trie);
    let prompt = model.tokenize_chat(&[TemplateMessage::new("user", prompt)], None).expect("prompt");
    let mut context = model.new_context(&params()).expect("context");
    let seq = context.seq(0).expect("one sequence");
    let mut position = 0u32;
    let mut tokens = prompt;
    let mut text = Vec::new();
    let mut generated = 0u32;
    while generated < MAX_TOKENS {
        let entry = BatchEntry { seq, tokens: &tokens, first_pos: position, logits: 1 };
        let row = *context.decode(&[entry]).expect("decode")[0].last().expect("logits row");
        position += tokens.len() as u32;
        let logits = context.logits(row).expect("logits of the row just decoded");
        let mask = matcher.compute_mask();
        let mut best: Option<(u32, f32)> = None;
        for token in mask.iter_set().filter(|t| (*t as usize) < logits.len()) {
            let logit = logits[token as usize];
            if !logit.is_nan() && best.is_none_or(|(_, b)| logit > b) {
                best = Some((token, logit));
            }
        }
        let (token, _) = best.expect("some token is allowed");
        if vocabulary.is_end_of_generation(token) {
            break;
        }
        matcher.commit(token).expect("an allowed token commits");
        text.extend_from_slice(vocabulary.piece(token));
        generated += 1;
        if matcher.is_accepting() && !matcher.can_continue() {
            break;
        }
        tokens = vec![token];
    }
    (String::from_utf8_lossy(&text).into_owned(), generated)
}

#[test]
fn constrained_greedy_output_is_the_masked_argmax_at_every_step_and_validates() {
    let schema = order_schema();
    let validator = jsonschema::validator_for(&schema).expect("the order schema is valid JSON Schema");
    let store = Store::open(&Store::default_home()).expect("store");
    for name in ["smollm2:135m", "gemma3:270m"] {
        let (path, _) = locate_model(name, Some(&store)).expect("model in the store (scripts/setup)");
        let model = Arc::new(Model::load(&path).expect("model loads"));
        let sources = [
            ("order", PROMPT, ConstraintSource::schema(schema.clone(), FormatMode::Ignore)),
            ("json", JSON_PROMPT, ConstraintSource::AnyJson),
        ];
        for (label, prompt, source) in sources {
            let constraint = Constraint::from_source(source, &Limits::default()).expect("compiles");
            // Each side gets its own compiled grammar, so neither sees the other's caches.
            let reference =
                Arc::new(constraint.source.as_ref().expect("source").compile(&Limits::default(), None).expect("compiles"));
            let (text, done) = through_worker(&model, name, prompt, constraint);
            let (expected, expected_tokens) = by_definition(&model, prompt, reference);
            assert_eq!(text, expected, "{name} {label}: the worker's greedy output differs from the definition's");
            assert_eq!(done.usage.completion_tokens, expected_tokens, "{name} {label}");
            let document: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} {label}: {e}: {text}"));
            assert_eq!(done.finish_reason, FinishReason::Stop, "{name} {label}: {text}");
            if label == "json" {
                assert!(document.is_object(), "{name}: JSON mode answers an object, not {text}");
            }
            if label == "order" {
                let errors = decimal_validation::errors_in_decimal(&validator, &document);
                assert!(errors.is_empty(), "{name}: {errors:?} in {text}");
            }
        }
    }
}
