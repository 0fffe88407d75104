//! The model actor: a dedicated thread that owns one llama.cpp context and, every step, decodes
//! one batch holding all live sequences (continuous batching). A request that arrives while
//! others generate joins at the next step; a finished or cancelled one leaves and frees its slot.
//! Requests beyond the free sequences wait in the worker's queue, at most `max_queue` of them
//! (more are refused at submit with 503); a waiting request whose client left is dropped at
//! the next step.
//!
//! Key types: [`LlamaModelHandle`] (the [`LoadedModel`] the supervisor holds), [`WorkerSettings`],
//! [`QueueLimits`] (the queues' bound), [`StoreLoader`] (the real
//! [`ModelLoader`](super::messages::ModelLoader): store name -> file -> loaded model; in
//! `locate.rs` with the other ways of finding and loading a model).
//! Cost: one thread and one KV cache per loaded model; each step is one `llama_decode` call of
//! (live sequences + their drafts + prompt chunk) tokens, plus one sampling pass per row a
//! generating sequence uses (see `step.rs` and `verify.rs`; drafts are cut to the rows worth their cost, and
//! a lone sequence's to the rows a decode keeps identical to one-row decodes, measured once at
//! start: about `2 × MAX_DRAFT` decodes).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::contexts::{ContextMode, ContextRecord, ContextUse};
use crate::embed::rerank::{RelevanceScorer, Reranker, ScorerKind};
use super::messages::{CancelToken, Generate, Generation, HoldContexts, LoadedModel, Rerank, SavedState, Tokenize};
use super::prefix::SlotCache;
use super::drafts::{DraftTokenizer, Drafter, Habits, RowCosts, MAX_DRAFT};
use super::sampler::SequenceSampler;
use crate::core::{
    Completion, ConstraintKind, ConstraintReport, CoreError, FinishReason, ModelInfo, ModelTotals,
    StreamEvent, Timings, Usage, ValidGenerateRequest, Decoding,
};
use crate::grammar::lexicon::{Constraint as OutputConstraint, LexiconMatcher, Target};
use crate::grammar::matcher::Matcher;
use crate::grammar::toktrie::TokenTrie;
use crate::llm::sampling::SamplingConfig;
use crate::llm::{Context, ContextParams, Model};
use crate::tools::ToolAnswer;

/// How many requests may wait: for a model to load (the supervisor's queue), and, per loaded
/// model, for one of its sequences (the worker's); more are refused with 503. The actors' own
/// default, which the daemon overrides with the operator's `max_queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub max_queue: usize,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits { max_queue: 512 }
    }
}

/// How a model's context is set up when it loads, and how many requests may wait for it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    pub context: ContextParams,
    /// Requests that may wait for a free sequence; more are refused with 503 (`max_queue`).
    pub max_queue: usize,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings { context: ContextParams::default(), max_queue: QueueLimits::default().max_queue }
    }
}

/// A request waiting for, or holding, a sequence slot. Why a shape of its own: it is what the
/// worker's queue holds, the prepared prompt joined with its sampler and the channel its events
/// go back on, built before it has a slot.
struct Job {
    prompt: Vec<u32>,
    sampler: SequenceSampler,
    constraint: Option<ConstraintKind>,
    /// With tools offered: text streams once it can no longer be a call, calls are held back
    /// and read when the answer ends (a partial call is nothing a client can act on).
    tools: Option<crate::tools::ToolOutput>,
    /// A streamed answer of a conversation with calls in it (tools not offered): the model may
    /// imitate the call markup, which is taken out on the way.
    markup: Option<crate::tools::MarkupFilter>,
    events: mpsc::Sender<StreamEvent>,
    cancel: CancelToken,
    submitted: Instant,
    /// The order the worker received it in (set when it joins the queue): a job waits only for
    /// the prefill of one that came before it, so waits end.
    arrival: u64,
    /// The named context this request continues, creates or commits to (issue 11).
    context: Option<ContextUse>,
    /// Creating a context: prefill the prompt, sample nothing.
    prefill_only: bool,
    /// The answer so far, kept only when a commit appends it to its context.
    transcript: Option<String>,
    /// Prompt tokens found in the KV cache at admission rather than prefilled.
    cached: usize,
    /// The prompt and answer as token ids, set when the job leaves its slot.
    context_tokens: Vec<u32>,
    /// Sequence state the job saves or writes back (snapshots).
    state_op: StateOp,
    /// Proposes drafts after each sampled token; `None` when not accelerated.
    drafter: Option<Drafter>,
    /// The prompt's log-probabilities, when the request asked for them (echo).
    prompt_scores: Option<scores::PromptScores>,
    /// `cache_prompt: false`: placed on a cleared slot, it decodes its whole prompt, and it
    /// neither waits for another prefill nor is waited for.
    cold_prompt: bool,
}

/// What a job does with its sequence's state besides decoding (issue 11 snapshots).
enum StateOp {
    None,
    /// Send the sequence's state once the prompt is in it.
    Save(tokio::sync::oneshot::Sender<Result<Vec<u8>, String>>),
    /// Write this state into the slot instead of prefilling the prompt it was taken from.
    Restore(Arc<Vec<u8>>),
}

/// A job in a slot: how far its prompt has been decoded, and its timings. Why a shape of its
/// own: only a job with a slot has a position in the KV cache and a step to decode in.
struct Live {
    job: Job,
    prompt_done: usize,
    /// The token sampled last step, decoded this step.
    next_token: Option<u32>,
    /// Tokens proposed to follow `next_token`, decoded with it and verified (see `verify`).
    draft: Vec<u32>,
    position: u32,
    prompt_started: Option<Instant>,
    prompt_finished: Option<Instant>,
}

/// Counters shared between the handle (which reads them) and the worker (which writes them).
#[derive(Default)]
struct Shared {
    /// Requests submitted and not yet finished: in a sequence, or waiting for one.
    in_use: AtomicUsize,
    totals: Mutex<ModelTotals>,
    /// The JSON layout of the model's last answer, which the next answer's drafts start from.
    habits: Mutex<Habits>,
}

/// A loaded model with its worker thread. Dropping it stops the thread: live requests end as
/// cancelled and the context is freed.
pub struct LlamaModelHandle {
    info: ModelInfo,
    model: Arc<Model>,
    /// Built in the background right after loading (see [`spawn_trie_build`]).
    trie: Arc<OnceLock<Arc<TokenTrie>>>,
    jobs: Option<std_mpsc::Sender<Job>>,
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    per_sequence_ctx: u32,
    /// Sequences decoded together.
    slots: usize,
    /// Requests that may wait for a sequence beyond those in one.
    max_queue: usize,
    /// The context settings, reused by the reranking context (issue 14).
    context_params: ContextParams,
    /// This model as a reranker, started on the first `/rerank` that names it.
    scorer: OnceLock<Result<RelevanceScorer, CoreError>>,
}

fn build_trie(model: &Model) -> Arc<TokenTrie> {
    let vocabulary = model.vocabulary();
    Arc::new(TokenTrie::new(vocabulary.pieces(), vocabulary.end_of_generation()))
}

/// Builds the token trie on a thread of its own, so the first constrained request does not
/// wait for it: at 262k tokens (Gemma 3) it takes about 0.4 s, once per loaded model.
fn spawn_trie_build(model: &Arc<Model>, trie: &Arc<OnceLock<Arc<TokenTrie>>>, name: &str) {
    let (model, trie) = (Arc::clone(model), Arc::clone(trie));
    let spawned = std::thread::Builder::new().name(format!("trie-{name}")).spawn(move || {
        trie.get_or_init(|| build_trie(&model));
    });
    if let Err(error) = spawned {
        tracing::warn!(model = name, %error, "no token-trie thread; the first constrained request builds the trie");
    }
}

impl LlamaModelHandle {
    /// Starts the worker thread for `model`; fails if the context cannot be created.
    pub fn start(model: Arc<Model>, mut info: ModelInfo, settings: &WorkerSettings) -> Result<Self, CoreError> {
        let (jobs, inbox) = std_mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<u32, String>>();
        let shared = Arc::new(Shared::default());
        let worker = {
            let model = Arc::clone(&model);
            let shared = Arc::clone(&shared);
            let params = settings.context.clone();
            let name = info.name.clone();
            std::thread::Builder::new()
                .name(format!("model-{}", info.name))
                .spawn(move || match model.new_context(&params) {
                    Ok(mut context) => {
                        let _ = ready_tx.send(Ok(context.per_sequence_ctx()));
                        let exact_rows = measure_exact_rows(&model, &mut context, &name);
                        run_worker(context, inbox, &shared, exact_rows);
                    }
                    Err(error) => {
                        let _ = ready_tx.send(Err(error.to_string()));
                    }
                })
                .map_err(|e| CoreError::internal(format!("could not start the model thread: {e}")))?
        };
        let per_sequence_ctx = match ready_rx.recv() {
            Ok(Ok(ctx)) => ctx,
            Ok(Err(message)) => return Err(CoreError::internal(message)),
            Err(_) => return Err(CoreError::internal("the model thread stopped while starting")),
        };
        info.context_length = per_sequence_ctx;
        info.parallel = settings.context.sequences;
        let trie = Arc::new(OnceLock::new());
        spawn_trie_build(&model, &trie, &info.name);
        Ok(Self {
            info,
            model,
            trie,
            jobs: Some(jobs),
            shared,
            worker: Some(worker),
            per_sequence_ctx,
            slots: settings.context.sequences.max(1) as usize,
            max_queue: settings.max_queue,
            context_params: settings.context.clone(),
            scorer: OnceLock::new(),
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Whether the token trie is built, so a constrained request would not wait for it.
    pub fn token_trie_ready(&self) -> bool {
        self.trie.get().is_some()
    }

    /// The token trie for masks, shared by every constrained request; a request that comes
    /// before the background build is done waits for it (or builds it, if that thread failed).
    fn trie(&self) -> Arc<TokenTrie> {
        Arc::clone(self.trie.get_or_init(|| build_trie(&self.model)))
    }
}

/// A split as the API shows it: each device, its layers and bytes.
fn placement_of(split: &crate::llm::rpc::LayerSplit) -> Vec<crate::core::DevicePlacement> {
    let layers = |range: &std::ops::Range<u32>| {
        if range.is_empty() {
            "none".to_string()
        } else {
            format!("{}-{}", range.start, range.end - 1)
        }
    };
    let devices = std::iter::once(("local CPU".to_string(), &split.local))
        .chain(split.workers.iter().map(|(endpoint, range)| (endpoint.clone(), range)));
    devices
        .enumerate()
        .map(|(index, (device, range))| crate::core::DevicePlacement {
            device,
            layers: layers(range),
            bytes: split.bytes.get(index).copied().unwrap_or(0),
        })
        .collect()
}

impl LoadedModel for LlamaModelHandle {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn sequences_in_use(&self) -> usize {
        self.shared.in_use.load(Ordering::Acquire).min(self.slots)
    }

    fn queue_depth(&self) -> usize {
        self.shared.in_use.load(Ordering::Acquire).saturating_sub(self.slots)
    }

    fn placement(&self) -> Vec<crate::core::DevicePlacement> {
        self.model.rpc_split().map(placement_of).unwrap_or_default()
    }

    fn totals(&self) -> ModelTotals {
        self.shared.totals.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn generator(&self) -> Option<&dyn Generate> {
        Some(self)
    }

    fn context_states(&self) -> Option<&dyn HoldContexts> {
        Some(self)
    }

    fn reranking(&self) -> Option<&dyn Rerank> {
        Some(self)
    }

    fn tokenizer(&self) -> Option<&dyn Tokenize> {
        Some(self)
    }
}

impl Tokenize for LlamaModelHandle {
    fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, CoreError> {
        self.model.tokenize(text, add_special, true).map_err(|e| CoreError::bad_request(e.to_string()))
    }

    fn tokenize_chat(&self, messages: &[crate::core::ChatMessage]) -> Result<Vec<u32>, CoreError> {
        let messages: Vec<_> = messages.iter().map(prepare::template_message).collect();
        self.model.tokenize_chat(&messages, None).map_err(|e| CoreError::bad_request(e.to_string()))
    }

    fn detokenize(&self, tokens: &[u32]) -> Result<String, CoreError> {
        let count = self.model.vocabulary().len();
        if let Some((at, token)) = tokens.iter().enumerate().find(|(_, t)| **t as usize >= count) {
            return Err(CoreError::invalid(format!(
                "tokens[{at}] is {token}, which is not a token id of {} ({count} tokens)",
                self.info.name
            ))
            .with_param("tokens"));
        }
        Ok(self.model.detokenize(tokens))
    }

    fn tokenizer_info(&self) -> crate::core::TokenizerInfo {
        let special = self.model.special_tokens();
        let vocabulary = self.model.vocabulary();
        crate::core::TokenizerInfo {
            bos_token: special.bos,
            eos_token: special.eos,
            pad_token: special.pad,
            chat_template: self.model.chat_template_source().map(str::to_string),
            model_max_length: self.per_sequence_ctx,
            vocabulary_size: vocabulary.len(),
            adds_bos: vocabulary.add_bos(),
        }
    }
}

impl Generate for LlamaModelHandle {
    fn submit(&self, request: ValidGenerateRequest) -> Result<Generation, CoreError> {
        self.submit_job(request, None)
    }
}

impl HoldContexts for LlamaModelHandle {
    fn submit_in_context(&self, request: ValidGenerateRequest, context: ContextUse) -> Result<Generation, CoreError> {
        if context.mode == ContextMode::Commit && !context.record.begin_commit() {
            return Err(CoreError::new(
                crate::error::ErrorCode::Conflict,
                format!("context {} is committing another request; retry when it ends", context.record.id),
            ));
        }
        let committing = context.mode == ContextMode::Commit;
        let record = Arc::clone(&context.record);
        let submitted = self.submit_job(request, Some(context));
        if submitted.is_err() && committing {
            record.end_commit();
        }
        submitted
    }

    fn save_context(&self, record: Arc<ContextRecord>) -> Result<SavedState, CoreError> {
        let (sender, state) = tokio::sync::oneshot::channel();
        let generation = self.submit_state_job(record, StateOp::Save(sender))?;
        Ok(SavedState { generation, state })
    }

    fn restore_context(&self, record: Arc<ContextRecord>, state: Arc<Vec<u8>>) -> Result<Generation, CoreError> {
        self.submit_state_job(record, StateOp::Restore(state))
    }
}

/// A chat model reranks by query likelihood, on a scorer thread of its own started on first use.
impl Rerank for LlamaModelHandle {
    fn scorer(&self) -> ScorerKind {
        ScorerKind::Relevance
    }

    fn reranker(&self) -> Result<Reranker, CoreError> {
        let scorer = self
            .scorer
            .get_or_init(|| RelevanceScorer::start(&self.info.name, Arc::clone(&self.model), &self.context_params));
        scorer.clone().map(Reranker::Relevance)
    }
}

impl LlamaModelHandle {
    fn submit_job(&self, request: ValidGenerateRequest, named: Option<ContextUse>) -> Result<Generation, CoreError> {
        let prepared = match &named {
            Some(named) => self.prepare_in_context(&request, named)?,
            None => self.prepare(&request)?,
        };
        self.submit_prepared(request.into_decoding(), named, prepared, StateOp::None)
    }

    /// A job that puts the context's own tokens into a slot (restoring `Restore` state rather
    /// than prefilling) and gives the slot to the context; `Save` then sends the slot's state.
    fn submit_state_job(&self, record: Arc<ContextRecord>, op: StateOp) -> Result<Generation, CoreError> {
        let prompt = record.tokens().as_ref().clone();
        if prompt.is_empty() {
            return Err(CoreError::bad_request(format!("context {} holds no tokens", record.id)));
        }
        let vocabulary = self.model.vocabulary().len();
        if let Some(token) = prompt.iter().find(|t| **t as usize >= vocabulary) {
            return Err(CoreError::bad_request(format!(
                "context {} holds token {token}, which is not a token of {} ({vocabulary} tokens)",
                record.id, self.info.name
            )));
        }
        // Nothing is sampled: the job ends once the context's tokens are in the slot.
        let decoding = Decoding {
            sampling: crate::core::SamplingParams { temperature: 0.0, max_tokens: Some(1), ..Default::default() },
            ..Decoding::default()
        };
        let used = ContextUse { record, mode: ContextMode::Create, appended: Vec::new() };
        let prepared = Prepared { prompt, forced: None, tools: None, filters_markup: false };
        self.submit_prepared(decoding, Some(used), prepared, op)
    }

    fn submit_prepared(
        &self,
        decoding: Decoding,
        named: Option<ContextUse>,
        prepared: Prepared,
        state_op: StateOp,
    ) -> Result<Generation, CoreError> {
        let Prepared { prompt, forced, tools, filters_markup } = prepared;
        let context = decoding.num_ctx.map_or(self.per_sequence_ctx, |n| n.min(self.per_sequence_ctx));
        if prompt.len() as u32 >= context {
            return Err(CoreError::prompt_too_long(prompt.len(), context as usize));
        }
        let scoring = decoding.logprobs.filter(|asked| asked.prompt);
        if scoring.is_some() && prompt.len() > scores::MAX_SCORED_PROMPT {
            return Err(CoreError::invalid(format!(
                "echo with logprobs scores at most {} prompt tokens, and this prompt has {}",
                scores::MAX_SCORED_PROMPT,
                prompt.len()
            ))
            .with_param("echo"));
        }
        let prompt_scores = scoring.map(|asked| scores::PromptScores::new(asked.top, Arc::clone(self.model.vocabulary())));
        let room = context - prompt.len() as u32;
        let max_tokens = decoding.sampling.max_tokens.map_or(room, |n| n.min(room));
        let sampling = &decoding.sampling;
        let config = SamplingConfig {
            temperature: sampling.temperature,
            top_k: sampling.top_k.max(0) as usize,
            top_p: sampling.top_p,
            min_p: sampling.min_p,
            repeat_penalty: sampling.repeat_penalty,
            repeat_last_n: sampling.repeat_last_n.max(0) as usize,
            seed: sampling.seed.map_or_else(rand::random::<u64>, u64::from),
        };
        let (constraint_kind, grammar) = match (forced, &decoding.constraint) {
            (Some(forced), _) => (Some(ConstraintKind::Tool), Some(forced)),
            (None, Some(constraint)) => (Some(constraint.kind), Some(Arc::clone(&constraint.grammar))),
            (None, None) => (None, None),
        };
        let matcher = grammar.map(|grammar| Matcher::new(grammar, self.trie()));
        // A forced tool call sets the lexicon aside, as it does the request's own constraint.
        let target = match constraint_kind {
            Some(ConstraintKind::Json | ConstraintKind::Schema) => Target::Json,
            Some(ConstraintKind::Grammar) => Target::Grammar,
            Some(ConstraintKind::Tool) | None => Target::Text,
        };
        let lexicon = decoding
            .lexicon
            .filter(|_| constraint_kind != Some(ConstraintKind::Tool))
            .and_then(|lexicon| LexiconMatcher::new(lexicon, self.trie(), target));
        let mut constraint = OutputConstraint::new(matcher, lexicon);
        if let Some(constraint) = constraint.as_mut().filter(|_| decoding.close_on_budget) {
            self.check_budget_holds_a_document(constraint, max_tokens, decoding.sampling.max_tokens)?;
        }
        let mut sampler =
            SequenceSampler::new(config, constraint, Arc::clone(self.model.vocabulary()), decoding.stop, max_tokens)
                .closing_on_budget(decoding.close_on_budget)
                .with_logprobs(decoding.logprobs);
        sampler.remember_prompt(&prompt);
        let (generation, events, cancel) = Generation::channel();
        let prefill_only = named.as_ref().is_some_and(|c| c.mode == ContextMode::Create);
        let drafter = (decoding.accelerate && !prefill_only).then(|| {
            let model = Arc::clone(&self.model);
            let tokenizer: DraftTokenizer = Arc::new(move |bytes: &[u8], most: usize| {
                let mut tokens = model.tokenize_continuation(bytes).unwrap_or_default();
                tokens.truncate(most);
                tokens
            });
            let habits = self.shared.habits.lock().map(|habits| habits.clone()).unwrap_or_default();
            Drafter::new(tokenizer, Arc::clone(self.model.vocabulary()), &prompt).with_habits(habits)
        });
        let transcript = named.as_ref().is_some_and(|c| c.mode == ContextMode::Commit).then(String::new);
        let job = Job {
            prompt,
            sampler,
            constraint: constraint_kind,
            markup: (filters_markup && tools.is_none()).then(crate::tools::MarkupFilter::default),
            tools,
            events,
            cancel,
            submitted: Instant::now(),
            arrival: 0,
            context: named,
            prefill_only,
            transcript,
            cached: 0,
            context_tokens: Vec::new(),
            state_op,
            drafter,
            prompt_scores,
            cold_prompt: decoding.cold_prompt,
        };
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| CoreError::new(crate::error::ErrorCode::ShuttingDown, "the model is unloading"))?;
        self.reserve_place()?;
        if jobs.send(job).is_err() {
            self.shared.in_use.fetch_sub(1, Ordering::AcqRel);
            return Err(CoreError::internal("the model thread has stopped"));
        }
        Ok(generation)
    }

    /// Counts one more request in (a sequence or the queue), or refuses it with 503 when
    /// `max_queue` requests already wait for a sequence.
    fn reserve_place(&self) -> Result<(), CoreError> {
        let capacity = self.slots + self.max_queue;
        self.shared
            .in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < capacity).then_some(n + 1))
            .map(drop)
            .map_err(|in_use| {
                CoreError::new(
                    crate::error::ErrorCode::Overloaded,
                    format!(
                        "{} has as many requests waiting for a free sequence as max_queue {} allows \
                         ({} waiting, {} sequences busy); retry shortly",
                        self.info.name,
                        self.max_queue,
                        in_use.saturating_sub(self.slots),
                        self.slots
                    ),
                )
            })
    }
}

impl Drop for LlamaModelHandle {
    fn drop(&mut self) {
        // Closing the channel is the stop signal; the worker cancels what is live and exits.
        self.jobs = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The worker loop: take new jobs into free slots, decode one batch, sample, repeat.
/// Text whose tokens measure [`Context::exact_rows`]: JSON, as drafts mostly are.
const EXACT_ROWS_PROBE: &str = "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"city\": \"London\", \"field\": \"mathematics\"}";

/// How many rows a decode of this context keeps bit-identical to one-row decodes (1 when
/// unknown): the most a lone sequence's draft batch is given.
fn measure_exact_rows(model: &Model, context: &mut Context<'_>, name: &str) -> usize {
    let measured = model
        .tokenize(EXACT_ROWS_PROBE, true, false)
        .and_then(|tokens| context.exact_rows(&tokens, MAX_DRAFT + 1));
    match measured {
        Ok(rows) => {
            tracing::debug!(model = name, rows, "rows a decode computes as one-row decodes do");
            rows
        }
        Err(error) => {
            tracing::warn!(model = name, %error, "could not measure which batches decode exactly; drafts are costed only");
            1
        }
    }
}

fn run_worker(mut context: Context<'_>, inbox: std_mpsc::Receiver<Job>, shared: &Shared, exact_rows: usize) {
    let slots = context.params().sequences as usize;
    let mut live: Vec<Option<Live>> = (0..slots).map(|_| None).collect();
    let mut cache = kv::SlotKeeper::new(SlotCache::new(slots));
    let mut costs = RowCosts::default();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut arrivals = 0u64;
    let mut arrive = |mut job: Job, waiting: &mut VecDeque<Job>| {
        arrivals += 1;
        job.arrival = arrivals;
        waiting.push_back(job);
    };
    let mut open = true;
    loop {
        let idle = live.iter().all(Option::is_none) && waiting.is_empty();
        if idle {
            if !open {
                cache.park_all(&mut context);
                return;
            }
            match inbox.recv() {
                Ok(job) => arrive(job, &mut waiting),
                Err(_) => {
                    cache.park_all(&mut context);
                    return;
                }
            }
        }
        loop {
            match inbox.try_recv() {
                Ok(job) => arrive(job, &mut waiting),
                Err(std_mpsc::TryRecvError::Empty) => break,
                Err(std_mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if !open {
            // Shutting down: everything live or waiting ends as cancelled.
            for job in waiting.drain(..) {
                finish(job, FinishReason::Cancelled, String::new(), Timings::default(), 0, shared);
            }
            for (index, slot) in live.iter_mut().enumerate() {
                if let Some(entry) = slot.take() {
                    cache.retire(index, entry, FinishReason::Cancelled, String::new(), &mut context, shared);
                }
            }
            cache.park_all(&mut context);
            return;
        }
        drop_abandoned(&mut waiting, shared);
        for (index, slot) in live.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|l| l.job.cancel.is_cancelled() || l.job.events.is_closed()) {
                if let Some(entry) = slot.take() {
                    cache.retire(index, entry, FinishReason::Cancelled, String::new(), &mut context, shared);
                }
            }
        }
        cache.admit(&mut context, &mut live, &mut waiting, shared);
        step::WorkerState { context: &mut context, live: &mut live, cache: &mut cache, costs: &mut costs, exact_rows, shared }
            .step();
    }
}

/// Ends waiting jobs whose client went away, so they stop counting against `max_queue` while
/// every sequence is busy. O(waiting), itself at most `max_queue`.
fn drop_abandoned(waiting: &mut VecDeque<Job>, shared: &Shared) {
    let abandoned = |job: &Job| job.cancel.is_cancelled() || job.events.is_closed();
    if !waiting.iter().any(abandoned) {
        return;
    }
    let (gone, kept): (VecDeque<Job>, VecDeque<Job>) = waiting.drain(..).partition(abandoned);
    *waiting = kept;
    for job in gone {
        finish(job, FinishReason::Cancelled, String::new(), Timings::default(), 0, shared);
    }
}

/// The next waiting job that is still wanted; cancelled ones are dropped on the way.
fn next_waiting(waiting: &mut VecDeque<Job>, shared: &Shared) -> Option<Job> {
    while let Some(job) = waiting.pop_front() {
        if job.cancel.is_cancelled() || job.events.is_closed() {
            finish(job, FinishReason::Cancelled, String::new(), Timings::default(), 0, shared);
            continue;
        }
        return Some(job);
    }
    None
}

/// Sends the last text and the completion of a live job, and books its totals.
fn end_live(entry: Live, reason: FinishReason, text: String, shared: &Shared) {
    let end = Instant::now();
    let prompt_eval = match (entry.prompt_started, entry.prompt_finished) {
        (Some(start), Some(finish)) => finish - start,
        (Some(start), None) => end - start,
        _ => Duration::ZERO,
    };
    let eval = entry.prompt_finished.map_or(Duration::ZERO, |finish| end - finish);
    let timings = Timings { load: Duration::ZERO, prompt_eval, eval, total: entry.job.submitted.elapsed() };
    let prompt_tokens = entry.prompt_done;
    finish(entry.job, reason, text, timings, prompt_tokens, shared);
}

fn finish(mut job: Job, reason: FinishReason, text: String, timings: Timings, prompt_tokens: usize, shared: &Shared) {
    let completion_tokens = job.sampler.generated();
    let closed_on_budget = job.sampler.closed_on_budget();
    let constraint_stats = job.sampler.constraint().map(|constraint| {
        let label = match job.constraint {
            Some(ConstraintKind::Grammar) => "grammar",
            Some(ConstraintKind::Tool) => "tool",
            Some(ConstraintKind::Json | ConstraintKind::Schema) => "json",
            None => "lexicon",
        };
        // One line per part: the grammar's (under its label), then the lexicon's.
        let mut summary: Vec<String> = Vec::new();
        if let Some(stats) = constraint.grammar_stats() {
            summary.push(stats.render(label, timings.eval));
        }
        if let Some(stats) = constraint.lexicon_stats() {
            summary.push(stats.render("lexicon", timings.eval));
        }
        let (stats, lexicon_stats) = match (constraint.grammar_stats(), constraint.lexicon_stats()) {
            (Some(grammar), lexicon) => (Some(grammar.clone()), lexicon.cloned()),
            (None, lexicon) => (lexicon.cloned(), None),
        };
        ConstraintReport { label: label.to_string(), summary: summary.join("\n"), stats, lexicon_stats }
    });
    let drafts = job.drafter.as_ref().map(Drafter::counts).unwrap_or_default();
    if let Ok(mut totals) = shared.totals.lock() {
        totals.requests += 1;
        totals.drafts.add(&drafts);
        totals.prompt_tokens += prompt_tokens as u64;
        if job.cached > 0 {
            totals.prefix_reuse_hits += 1;
            totals.prefix_tokens_saved += job.cached as u64;
        }
        totals.generated_tokens += completion_tokens as u64;
        totals.budget_closings += u64::from(closed_on_budget);
        if let Some(stats) = &constraint_stats {
            totals.constraint_caches = stats.stats.clone();
        }
    }
    shared.in_use.fetch_sub(1, Ordering::AcqRel);
    if let Some(context) = &job.context {
        if context.mode == ContextMode::Commit {
            context.record.end_commit();
        }
    }
    let answer = match job.tools.take() {
        Some(tools) => tools.finish(&text, reason),
        None => {
            let content = match job.markup.as_mut() {
                Some(filter) => filter.push(&text) + &filter.finish(),
                None => text,
            };
            ToolAnswer { content, calls: Vec::new(), cut_off_arguments: None, reason }
        }
    };
    let ToolAnswer { content: text, calls: tool_calls, cut_off_arguments, reason } = answer;
    // A call the budget closed early is whole, but the budget still ended it.
    let reason = match reason {
        FinishReason::ToolCalls if closed_on_budget => FinishReason::Length,
        reason => reason,
    };
    if !text.is_empty() {
        let _ = job.events.blocking_send(StreamEvent::Delta { text });
    }
    let completion = Completion {
        finish_reason: reason,
        usage: Usage { prompt_tokens: prompt_tokens as u32, completion_tokens, cached_tokens: job.cached as u32 },
        timings,
        tool_calls,
        cut_off_arguments,
        constraint_stats,
        closed_on_budget,
        context_tokens: job.context_tokens,
        drafts,
    };
    let _ = job.events.blocking_send(StreamEvent::Done(completion));
}

mod kv;

mod prepare;
mod scores;
mod step;
mod verify;
use prepare::Prepared;

mod locate;
pub use locate::{load_any_model, load_model, load_vocabulary, locate_model, StoreLoader};
