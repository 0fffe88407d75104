//! Automatic prefix reuse with the real SmolLM2 (issue 11): a request whose prompt starts with
//! tokens a sequence already holds reuses them, reports them as cached, and answers exactly
//! what a worker that prefills everything answers (greedy).
//!
//! Greedy tokens can change with the batch layout (which tokens one decode call holds), so the
//! cold reference keeps the warm run's layout: a fresh worker, nothing cached, whose batch size
//! cuts the prompt where the reused prefix ends (the warm run decoded the prefix in one call
//! and the rest in another).

use std::sync::Arc;

use llamay::actors::messages::{Generate, HoldContexts, LoadedModel};
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{
    ChatMessage, Completion, PromptInput, Role, SamplingParams, StreamEvent, UncheckedGenerateRequest,
    ValidGenerateRequest,
};
use llamay::service::validate_local;
use llamay::llm::{ContextParams, KvType, Model};
use llamay::store::Store;

fn worker(sequences: u32, batch: u32) -> LlamaModelHandle {
    let store = Store::open(&Store::default_home()).expect("store");
    let (path, info) =
        locate_model("smollm2:135m", Some(&store)).expect("smollm2:135m (scripts/setup)");
    let model = Arc::new(Model::load(&path).expect("model loads"));
    let settings = WorkerSettings {
        context: ContextParams {
            n_ctx: 2048 * sequences,
            threads: 1,
            batch,
            sequences,
            kv_type: KvType::F32,
            flash_attention: false,
        },
        ..WorkerSettings::default()
    };
    LlamaModelHandle::start(model, info, &settings).expect("worker")
}

fn request(messages: Vec<ChatMessage>, max_tokens: u32) -> ValidGenerateRequest {
    let input = PromptInput::Chat { messages, tools: Vec::new() };
    let sampling = SamplingParams { temperature: 0.0, max_tokens: Some(max_tokens), ..Default::default() };
    validate_local(UncheckedGenerateRequest::new("smollm2:135m", input).with_sampling(sampling), None, None)
        .expect("a valid request")
}

fn run(
    model: &LlamaModelHandle,
    messages: Vec<ChatMessage>,
    max_tokens: u32,
) -> (String, Completion) {
    crate::in_process::collect(model.submit(request(messages, max_tokens)).expect("submit"))
}

const SYSTEM: &str =
    "You are a patient geography teacher. You answer in two or three short sentences, \
                      name the country each place belongs to, and never use lists.";

fn first_turn() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new(Role::System, SYSTEM),
        ChatMessage::new(Role::User, "Where is the river Loire?"),
    ]
}

#[test]
fn a_resent_history_prefills_only_the_new_turn_and_answers_as_a_cold_run() {
    let warm = worker(1, 512);
    let (answer, first) = run(&warm, first_turn(), 24);
    assert_eq!(
        first.usage.cached_tokens, 0,
        "nothing was cached before the first request"
    );
    let mut second = first_turn();
    second.push(ChatMessage::new(Role::Assistant, answer.clone()));
    second.push(ChatMessage::new(Role::User, "And the Danube?"));
    let (reused_text, reused) = run(&warm, second.clone(), 24);
    assert!(
        reused.usage.cached_tokens as usize > 30,
        "the system prompt and first turn are reused, got {:?}",
        reused.usage
    );
    assert!(reused.usage.cached_tokens < reused.usage.prompt_tokens);
    let totals = warm.totals();
    assert_eq!(totals.prefix_reuse_hits, 1);
    assert_eq!(
        totals.prefix_tokens_saved,
        u64::from(reused.usage.cached_tokens)
    );

    let suffix = reused.usage.prompt_tokens - reused.usage.cached_tokens;
    assert!(
        suffix <= reused.usage.cached_tokens,
        "the reference decodes the rest in one call too"
    );
    let cold = worker(1, reused.usage.cached_tokens);
    let (cold_text, cold_done) = run(&cold, second, 24);
    assert_eq!(cold_done.usage.cached_tokens, 0);
    assert_eq!(cold_done.usage.prompt_tokens, reused.usage.prompt_tokens);
    assert_eq!(
        reused_text, cold_text,
        "greedy output with a reused prefix equals a cold run"
    );
}

#[test]
fn a_prefix_held_by_a_running_request_is_copied_into_a_free_sequence() {
    let warm = worker(2, 512);
    // The first request runs long; once it has produced text, its prompt is in its sequence.
    let mut running = warm.submit(request(first_turn(), 64)).expect("submit");
    match running.events.blocking_recv() {
        Some(StreamEvent::Delta { .. }) => {}
        other => panic!("expected text first, got {other:?}"),
    }
    let other_question = vec![
        ChatMessage::new(Role::System, SYSTEM),
        ChatMessage::new(Role::User, "Where is Lake Titicaca?"),
    ];
    let (copied_text, copied) = run(&warm, other_question.clone(), 24);
    assert!(
        copied.usage.cached_tokens as usize > 20,
        "the system prompt is copied, got {:?}",
        copied.usage
    );
    while running.events.blocking_recv().is_some() {}

    let suffix = copied.usage.prompt_tokens - copied.usage.cached_tokens;
    assert!(
        suffix <= copied.usage.cached_tokens,
        "the reference decodes the rest in one call too"
    );
    let cold = worker(1, copied.usage.cached_tokens);
    let (cold_text, _) = run(&cold, other_question, 24);
    assert_eq!(
        copied_text, cold_text,
        "greedy output from a copied prefix equals a cold run"
    );
}

fn run_in_context(
    model: &LlamaModelHandle,
    messages: Vec<ChatMessage>,
    used: llamay::contexts::ContextUse,
) -> (String, Completion) {
    crate::in_process::collect(model.submit_in_context(request(messages, 24), used).expect("submit"))
}

#[test]
fn a_forked_context_answers_as_the_full_prompt_and_a_commit_grows_its_parent_only() {
    use llamay::contexts::{ContextContent, ContextMode, ContextRegistry, ContextUse};
    let warm = worker(2, 512);
    let registry = ContextRegistry::new();
    let history = vec![
        ChatMessage::new(Role::System, SYSTEM),
        ChatMessage::new(Role::User, "Where is the river Loire?"),
        ChatMessage::new(Role::Assistant, "The Loire flows through France."),
    ];
    let parent = registry.new_record(
        "smollm2:135m",
        ContextContent::Chat {
            messages: history.clone(),
            tools: Vec::new(),
        },
        Arc::new(Vec::new()),
        None,
        None,
    );
    let create = ContextUse {
        record: Arc::clone(&parent),
        mode: ContextMode::Create,
        appended: Vec::new(),
    };
    let (_, created) = run_in_context(&warm, history.clone(), create);
    let prefilled = parent.tokens().len();
    assert_eq!(prefilled as u32, created.usage.prompt_tokens);
    let children = registry.fork(&parent, 2).unwrap();

    let question = vec![ChatMessage::new(Role::User, "And the river Po?")];
    let read = ContextUse {
        record: Arc::clone(&children[0]),
        mode: ContextMode::Read,
        appended: question.clone(),
    };
    let (forked_text, forked) = run_in_context(&warm, question.clone(), read);
    assert!(
        forked.usage.cached_tokens as usize >= prefilled - 4,
        "{:?} of {prefilled}",
        forked.usage
    );
    assert_eq!(
        children[0].tokens().len(),
        prefilled,
        "reading leaves the context as it was"
    );

    let mut full = history.clone();
    full.extend(question.clone());
    let cold = worker(1, forked.usage.cached_tokens);
    let (cold_text, cold_done) = run(&cold, full, 24);
    assert_eq!(cold_done.usage.prompt_tokens, forked.usage.prompt_tokens);
    assert_eq!(
        forked_text, cold_text,
        "a forked context answers as its full prompt, token for token"
    );

    let commit = ContextUse {
        record: Arc::clone(&parent),
        mode: ContextMode::Commit,
        appended: question.clone(),
    };
    let (answer, _) = run_in_context(&warm, question, commit);
    assert!(
        parent.tokens().len() > prefilled,
        "the committed turn is part of the parent now"
    );
    match parent.body().content {
        ContextContent::Chat { messages, .. } => {
            assert_eq!(messages.len(), history.len() + 2);
            assert_eq!(messages.last().map(|m| m.content.clone()), Some(answer));
        }
        ContextContent::Raw => panic!("a chat context stays a chat"),
    }
    assert_eq!(
        children[1].tokens().len(),
        prefilled,
        "a sibling keeps the tokens it was forked with"
    );
}
