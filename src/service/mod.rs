//! The generation service: the one path from a request a route (or the command line, or the
//! runner child) has read to a generation running on a model. Routes translate wire shapes to
//! an [`UncheckedGenerateRequest`] and [`ConstraintSources`] and hand them here; nothing below
//! the service sees a wire shape, and nothing above it builds a [`ValidGenerateRequest`].
//!
//! The path of a request: [`GenerationService::validate`] applies the daemon's policy (token
//! budget, one spelling of the model's name, the lexicon, the context, the constraint compiled
//! from the cache or on the compile pool) and builds the [`ValidGenerateRequest`];
//! [`GenerationService::start`] leases the model (loading it if needed), submits the request
//! off the HTTP workers and opens the generation's tally in the daemon's book ([`GenerationBook`],
//! `/metrics`); [`collect`] waits for a whole answer, or a route streams the [`Started`]
//! generation's events through its translator. Every other operation a route offers goes
//! through the service as well, so routes only translate wire shapes: contexts (creating one is
//! a generation, a prefill), their snapshots, and the loaded models' administration.
//!
//! Rooms: `constraint.rs` (resolution and the one compiled-constraint cache), `compile_pool.rs`
//! (where compiles run), `lexicons.rs` (the daemon's `-lexicon` files and a request's list),
//! `contexts.rs` (a request's use of a context; creating, forking, listing, showing and deleting
//! contexts), `snapshots.rs` (saving a context's state to the store and restoring it),
//! `models.rs` (the supervisor's status, loading a model without generating, retiring a deleted
//! one), `encode.rs` (embeddings and reranking), `tokenize.rs` (a model's tokenizer).
//!
//! Key types: [`GenerationService`], [`GenerationPolicy`], [`Started`], [`Collected`],
//! [`validate_local`] (the same validation for callers that hold a model themselves: `llamay
//! run`, `llamay eval`, the runner child, tests and benches). Costs: validation is cheap on the
//! HTTP worker when the constraint is cached, else a compile on the pool (milliseconds to
//! seconds); submitting renders and tokenizes the prompt on a blocking thread.

pub mod compile_pool;
pub mod constraint;
pub mod contexts;
pub mod encode;
pub mod models;
pub mod snapshots;
pub mod runner_child;
pub mod tokenize;
pub mod lexicons;

use std::sync::Arc;
use std::time::Instant;

use actix::Addr;

use crate::contexts::snapshots::SnapshotShelf;
use crate::contexts::{tools_in_effect, ContextRecord, ContextRegistry, ContextUse};
use crate::actors::messages::{Generate, Generation, HoldContexts, LoadedModel};
use crate::actors::supervisor::{acquire_with, ModelLease, Supervisor};
use crate::core::{
    Completion, Constraint, ContextRequest, FinishReason, ModelName, StreamEvent, TokenLimits, TokenLogprob, UncheckedGenerateRequest,
    ValidGenerateRequest,
};
use crate::error::CoreError;
use crate::grammar::schema::FormatMode;
use crate::grammar::Lexicon;
pub use compile_pool::CompileLimits;
use compile_pool::{CompilePool, CompilePoolStats};
use constraint::{resolve_constraint, ConstraintCache, ConstraintCacheStats, ConstraintSources, ToolSources};
use lexicons::{ChosenLexicon, DaemonLexicons};

/// Compiled constraints kept for reuse (schemas and grammars sent again and again).
pub const CONSTRAINT_CACHE_ENTRIES: usize = 64;

/// Where the daemon books what each generation did (its `/metrics`); the service opens one
/// tally per generation and reports tokens and the finish to it.
pub trait GenerationBook: Send + Sync {
    fn open(self: Arc<Self>, model: &str, arrived: Instant) -> Box<dyn GenerationTally>;
}

/// One generation's entry in a [`GenerationBook`]. Dropped before `finished`, the generation
/// counts as cancelled.
pub trait GenerationTally: Send {
    /// Text arrived from the model.
    fn token(&mut self);
    /// The generation ended with `completion`.
    fn finished(&mut self, completion: &Completion);
}

/// A book that keeps nothing, for a service no one reads the metrics of.
struct NoBook;

struct NoTally;

impl GenerationBook for NoBook {
    fn open(self: Arc<Self>, _model: &str, _arrived: Instant) -> Box<dyn GenerationTally> {
        Box::new(NoTally)
    }
}

impl GenerationTally for NoTally {
    fn token(&mut self) {}
    fn finished(&mut self, _completion: &Completion) {}
}

/// The daemon's rules for every request (from the config).
pub struct GenerationPolicy {
    /// `-grammar-file`, applied to requests that bring no constraint of their own.
    pub default_grammar: Option<Constraint>,
    /// `-lexicon` files, applied to requests that bring no lexicon of their own.
    pub lexicons: DaemonLexicons,
    /// Whether a schema's `format` constrains strings when a request does not say.
    pub formats: FormatMode,
    /// The default and the cap of every request's `max_tokens`.
    pub token_limits: TokenLimits,
    /// Threads that compile schemas and grammars, and compiles that may wait for one.
    pub compile: CompileLimits,
    /// Whether requests that do not say (`llamay_accelerate`) decode verified drafts.
    pub accelerate: bool,
    /// Whether requests that do not say (`llamay_close_on_budget`) close their constrained
    /// document within the token budget.
    pub close_on_budget: bool,
}

impl Default for GenerationPolicy {
    fn default() -> Self {
        GenerationPolicy {
            default_grammar: None,
            lexicons: DaemonLexicons::default(),
            formats: FormatMode::Ignore,
            token_limits: TokenLimits::default(),
            compile: CompileLimits::default(),
            accelerate: true,
            close_on_budget: true,
        }
    }
}

/// A request the service has checked, with the context it continues, if any.
pub struct Validated {
    pub request: ValidGenerateRequest,
    pub context: Option<ContextUse>,
}

/// A generation under way, holding its model's lease so the model is not unloaded under it.
pub struct Started {
    pub generation: Generation,
    pub lease: ModelLease,
    /// Books tokens, time to first token and the finish.
    pub tally: Box<dyn GenerationTally>,
}

/// The whole answer of a non-streaming request.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub text: String,
    pub completion: Completion,
    /// One per answer token, when the request asked for log-probabilities.
    pub logprobs: Vec<TokenLogprob>,
    /// One per prompt token, when the request asked for the prompt's (echo).
    pub prompt_logprobs: Vec<TokenLogprob>,
}

/// Validates and runs generations for the daemon, and every other operation its routes offer
/// (contexts, snapshots, model status); one per daemon, shared by every route.
pub struct GenerationService {
    supervisor: Addr<Supervisor>,
    contexts: Arc<ContextRegistry>,
    /// Context snapshots in the model store; `None` when the store is read-only.
    snapshots: Option<Arc<SnapshotShelf>>,
    book: Arc<dyn GenerationBook>,
    constraints: Arc<ConstraintCache>,
    compile_pool: Arc<CompilePool>,
    default_grammar: Option<Constraint>,
    lexicons: DaemonLexicons,
    formats: FormatMode,
    token_limits: TokenLimits,
    accelerate: bool,
    close_on_budget: bool,
}

impl GenerationService {
    pub fn new(supervisor: Addr<Supervisor>, contexts: Arc<ContextRegistry>, policy: GenerationPolicy) -> Self {
        GenerationService {
            supervisor,
            contexts,
            snapshots: None,
            book: Arc::new(NoBook),
            constraints: Arc::new(ConstraintCache::new(CONSTRAINT_CACHE_ENTRIES)),
            compile_pool: Arc::new(CompilePool::new(policy.compile.threads, policy.compile.queue)),
            default_grammar: policy.default_grammar,
            lexicons: policy.lexicons,
            formats: policy.formats,
            token_limits: policy.token_limits,
            accelerate: policy.accelerate,
            close_on_budget: policy.close_on_budget,
        }
    }

    /// The same service, booking its generations in `book`.
    pub fn with_book(mut self, book: Arc<dyn GenerationBook>) -> Self {
        self.book = book;
        self
    }

    pub fn constraint_stats(&self) -> ConstraintCacheStats {
        self.constraints.stats()
    }

    pub fn compile_pool_stats(&self) -> CompilePoolStats {
        self.compile_pool.stats()
    }

    /// Lexicon files the daemon loaded.
    pub fn lexicon_count(&self) -> usize {
        self.lexicons.count()
    }

    /// Checks `request` against the daemon and compiles its constraint under its lexicon (or
    /// the daemon's `-lexicon`), with `format` enforced as the request or else the config says.
    pub async fn validate(
        &self,
        mut request: UncheckedGenerateRequest,
        mut sources: ConstraintSources,
    ) -> Result<Validated, CoreError> {
        // The request's `llamay_formats` wins over the daemon's `formats`.
        sources.formats = sources.formats.or(Some(self.formats));
        request.sampling.limit_tokens(self.token_limits);
        request.accelerate = Some(request.accelerate.unwrap_or(self.accelerate));
        request.close_on_budget = Some(request.close_on_budget.unwrap_or(self.close_on_budget));
        // One name per model from here on: its context and its loaded copy are found by it.
        request.model = ModelName::parse(&request.model)?.to_string();
        // The request's `llamay_lexicon` wins over the daemon's `-lexicon`.
        let lexicon = self.lexicons.choose(sources.lexicon.take()).await?;
        if request.cold_prompt && matches!(request.context, Some(ContextRequest::Named { .. })) {
            return Err(CoreError::invalid(
                "cache_prompt false decodes the whole prompt, and a context's tokens are already in its sequence; send llamay_context or cache_prompt false, not both",
            )
            .with_param("cache_prompt"));
        }
        // An unknown context is refused before any model loads or anything compiles.
        let context = match request.context.as_ref() {
            Some(asked) => Some(contexts::context_use(&self.contexts, asked, &request)?),
            None => None,
        };
        let tools = ToolSources {
            tools: tools_in_effect(&request.input, context.as_ref()),
            choice: request.tool_choice.clone(),
            parallel: request.parallel_tool_calls,
        };
        let constraint = self.compile_constraint(sources, Some(tools), lexicon.as_ref()).await?;
        let lexicon = lexicon.map(|chosen| chosen.lexicon);
        Ok(Validated { request: ValidGenerateRequest::checked(request, constraint, lexicon), context })
    }

    /// Leases the request's model (loaded with `gpu_layers` on the GPU where it says) and
    /// submits the request.
    pub async fn start(&self, validated: Validated, gpu_layers: Option<u32>) -> Result<Started, CoreError> {
        let arrived = Instant::now();
        let Validated { request, context } = validated;
        let lease = acquire_with(&self.supervisor, request.model(), request.keep_alive(), gpu_layers).await?;
        let generation = submit_off_worker(&lease, request, context).await?;
        let tally = Arc::clone(&self.book).open(&lease.model().info().name, arrived);
        Ok(Started { generation, lease, tally })
    }

    /// [`validate`](Self::validate), then [`start`](Self::start) with the model's own placement.
    pub async fn generate(
        &self,
        request: UncheckedGenerateRequest,
        sources: ConstraintSources,
    ) -> Result<Started, CoreError> {
        let validated = self.validate(request, sources).await?;
        self.start(validated, None).await
    }

    /// The constraint a request runs under: from the cache on the calling thread when every
    /// part of it is there, else compiled on the compile pool (503 when its queue is full).
    async fn compile_constraint(
        &self,
        sources: ConstraintSources,
        tools: Option<ToolSources>,
        lexicon: Option<&ChosenLexicon>,
    ) -> Result<Option<Constraint>, CoreError> {
        let work = resolve_constraint(sources, tools, &self.constraints, self.default_grammar.as_ref(), lexicon)?;
        if !work.needs_compile() {
            return work.finish(&self.constraints);
        }
        let cache = Arc::clone(&self.constraints);
        self.compile_pool.run(move || work.finish(&cache)).await
    }
}

/// Validation for a caller that runs a model itself rather than through a daemon (`llamay
/// run`, `llamay eval`, the runner child, tests and benches): the model's name checked, the
/// constraint already compiled (under `lexicon`).
pub fn validate_local(
    mut request: UncheckedGenerateRequest,
    constraint: Option<Constraint>,
    lexicon: Option<Arc<Lexicon>>,
) -> Result<ValidGenerateRequest, CoreError> {
    request.model = ModelName::parse(&request.model)?.to_string();
    Ok(ValidGenerateRequest::checked(request, constraint, lexicon))
}

/// Submits a request to its leased model. Submitting renders the template and tokenizes the
/// prompt: CPU time that grows with the body (seconds for a few megabytes). On an HTTP worker
/// it would stall every connection the worker serves, whose head and keep-alive timers then
/// fire, so it runs on a blocking thread.
async fn submit_off_worker(
    lease: &ModelLease,
    request: ValidGenerateRequest,
    context: Option<ContextUse>,
) -> Result<Generation, CoreError> {
    let model = Arc::clone(lease.model());
    tokio::task::spawn_blocking(move || match context {
        Some(context) => context_holder(model.as_ref(), &context.record)?.submit_in_context(request, context),
        None => generator(model.as_ref())?.submit(request),
    })
    .await
    .map_err(|e| CoreError::internal(format!("preparing the prompt stopped: {e}")))?
}

/// The model's generation, or a 400 saying it has none (an embedding model) and what to use.
fn generator(model: &dyn LoadedModel) -> Result<&dyn Generate, CoreError> {
    model.generator().ok_or_else(|| {
        let info = model.info();
        CoreError::bad_request(format!(
            "model {} ({}) is an embedding model; it cannot chat or generate. Use POST /v1/embeddings or /api/embed with it, or name a chat model",
            info.name, info.architecture
        ))
        .with_param("model")
    })
}

/// The model's contexts, or a 400 saying it keeps none (a model split over RPC workers).
fn context_holder<'m>(model: &'m dyn LoadedModel, record: &ContextRecord) -> Result<&'m dyn HoldContexts, CoreError> {
    model
        .context_states()
        .ok_or_else(|| CoreError::bad_request(format!("model {} cannot hold context {}", model.info().name, record.id)))
}

/// Waits for the whole answer. An error part way is returned as an error, since nothing has
/// been sent yet.
pub async fn collect(mut started: Started) -> Result<Collected, CoreError> {
    let mut text = String::new();
    let (mut logprobs, mut prompt_logprobs) = (Vec::new(), Vec::new());
    while let Some(event) = started.generation.events.recv().await {
        match event {
            StreamEvent::Delta { text: delta } => {
                started.tally.token();
                text.push_str(&delta);
            }
            StreamEvent::Logprobs { prompt: true, tokens } => prompt_logprobs.extend(tokens),
            StreamEvent::Logprobs { prompt: false, tokens } => logprobs.extend(tokens),
            StreamEvent::Done(mut completion) => {
                started.tally.finished(&completion);
                if let FinishReason::Error(message) = &completion.finish_reason {
                    return Err(crate::core::generation_failed(message));
                }
                completion.timings.load = completion.timings.load.max(started.lease.load_duration());
                return Ok(Collected { text, completion, logprobs, prompt_logprobs });
            }
        }
    }
    Err(CoreError::internal("the model stopped before finishing the request"))
}
