//! The HTTP API: OpenAI, Anthropic and Ollama shapes over one generation service, plus
//! contexts, stats and health. The routes only translate wire shapes: every operation is the
//! service's (`crate::service`), and they never reach the supervisor, the context registry,
//! `llm`, llama.cpp or the store. The shapes never import each other; they meet in `crate::core`.
//!
//! Key items: [`AppState`], [`configure`] / [`build_app`] (the real app, also mounted by tests),
//! [`server::start_http`] (the HTTP server; `crate::daemon` starts it). Costs: one `AppState` shared by all workers.

pub mod anthropic;
pub mod auth;
pub mod body;
pub mod common;
pub mod limits;
pub mod contexts;
pub mod embeddings;
pub mod extensions;
pub mod fields;
pub mod metrics;
pub mod ollama;
pub mod openai;
pub mod rerank;
pub mod server;
pub mod snapshots;
pub mod stats;
pub mod tokenize;
pub mod tool_wire;
pub mod head_deadline;
pub mod host_check;

#[cfg(test)]
pub(crate) mod tests;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpRequest, HttpResponse};

use crate::core::{ModelAdmin, ModelCatalog};
use crate::error::{CoreError, ErrorCode};
use crate::service::GenerationService;

/// What the routes take from the daemon's configuration, given once when the state is built.
#[derive(Debug, Clone)]
pub struct RouteSettings {
    pub max_body_bytes: usize,
    /// When set, every route but `/health` requires this key (see [`auth`]).
    pub api_key: Option<auth::ApiKey>,
    /// Browser origins allowed to call (CORS); none by default.
    pub origins: Vec<String>,
    /// The `Host` names answered on a loopback listener (see [`host_check`]).
    pub host_check: host_check::HostCheck,
    /// Time a request's body may take to arrive (see [`limits`]).
    pub request_body_timeout: Duration,
    /// RPC workers the models are split over (`serve -rpc`), shown by `/v1/stats`.
    pub rpc_workers: Vec<String>,
    /// The model embedding routes use when a request names none (`serve -embed`).
    pub embed_model: Option<String>,
    /// The model rerank routes use when a request names none (`serve -rerank`).
    pub rerank_model: Option<String>,
}

impl RouteSettings {
    /// No key, no origins, loopback host names, no RPC workers, no default encoder or reranker.
    pub fn new(max_body_bytes: usize) -> Self {
        Self {
            max_body_bytes,
            api_key: None,
            origins: Vec::new(),
            host_check: host_check::HostCheck::default(),
            request_body_timeout: limits::HttpLimits::default().request_body_timeout,
            rpc_workers: Vec::new(),
            embed_model: None,
            rerank_model: None,
        }
    }
}

/// What every handler shares. Built once (fields are the routes' own); the daemon reaches it
/// only through the methods below.
pub struct AppState {
    catalog: Arc<dyn ModelCatalog>,
    /// Validates and runs every generation the routes ask for, and every other operation.
    generation: GenerationService,
    max_body_bytes: usize,
    started_at: Instant,
    shutting_down: AtomicBool,
    api_key: Option<auth::ApiKey>,
    origins: Vec<String>,
    host_check: host_check::HostCheck,
    request_body_timeout: Duration,
    /// Pull, copy, delete and create; `None` when the daemon has no writable store.
    admin: Option<Arc<dyn ModelAdmin>>,
    /// What `/metrics` counts beyond the supervisor's snapshot.
    metrics: Arc<metrics::Metrics>,
    rpc_workers: Vec<String>,
    embed_model: Option<String>,
    rerank_model: Option<String>,
    /// Stored `/v1/responses` answers; `None`: nothing is stored (`store` is answered false).
    responses: Option<Arc<dyn crate::core::ResponseStore>>,
}

impl AppState {
    /// The state of an app whose operations `generation` runs (its generations booked in
    /// `/metrics`) and whose routes follow `settings`.
    pub fn new(generation: GenerationService, catalog: Arc<dyn ModelCatalog>, settings: RouteSettings) -> Self {
        let metrics = Arc::new(metrics::Metrics::new());
        let RouteSettings {
            max_body_bytes,
            api_key,
            origins,
            host_check,
            request_body_timeout,
            rpc_workers,
            embed_model,
            rerank_model,
        } = settings;
        AppState {
            generation: generation.with_book(metrics.clone()),
            catalog,
            max_body_bytes,
            started_at: Instant::now(),
            shutting_down: AtomicBool::new(false),
            api_key,
            origins,
            host_check,
            request_body_timeout,
            admin: None,
            metrics,
            rpc_workers,
            embed_model,
            rerank_model,
            responses: None,
        }
    }

    /// The same state with `/v1/responses` answers stored in `store`.
    pub fn with_responses(mut self, store: Arc<dyn crate::core::ResponseStore>) -> Self {
        self.responses = Some(store);
        self
    }

    /// The same state with the model routes that change the store enabled.
    pub fn with_admin(mut self, admin: Arc<dyn ModelAdmin>) -> Self {
        self.admin = Some(admin);
        self
    }

    pub fn generation(&self) -> &GenerationService {
        &self.generation
    }

    pub fn requires_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// From now on requests get 503 (a stopping daemon); running ones finish.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Every route, for `App::configure`.
pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route(
            "/v1/chat/completions",
            web::post().to(openai::handlers::chat_completions),
        )
        .route(
            "/v1/completions",
            web::post().to(openai::completions::completions),
        )
        .route("/v1/models", web::get().to(openai::handlers::list_models))
        .route(
            "/v1/models/{name:.*}",
            web::get().to(openai::handlers::get_model),
        )
        .route("/v1/responses", web::post().to(openai::responses::handlers::create))
        .route("/v1/responses/{id}", web::get().to(openai::responses::handlers::retrieve))
        .route("/v1/responses/{id}", web::delete().to(openai::responses::handlers::delete))
        .route("/v1/responses/{id}/input_items", web::get().to(openai::responses::handlers::input_items))
        .route(
            "/v1/messages",
            web::post().to(anthropic::handlers::messages),
        )
        .route("/v1/stats", web::get().to(stats::stats))
        .configure(contexts::configure)
        .configure(snapshots::configure)
        .route("/api/chat", web::post().to(ollama::handlers::chat))
        .route("/api/generate", web::post().to(ollama::handlers::generate))
        .route("/api/tags", web::get().to(ollama::handlers::tags))
        .route("/api/ps", web::get().to(ollama::handlers::ps))
        .route("/api/show", web::post().to(ollama::handlers::show))
        .route("/api/version", web::get().to(ollama::handlers::version))
        .route("/api/pull", web::post().to(ollama::models::pull))
        .route("/api/create", web::post().to(ollama::models::create))
        .route("/api/copy", web::post().to(ollama::models::copy))
        .route("/api/delete", web::delete().to(ollama::models::delete))
        .route("/health", web::get().to(stats::health))
        .route("/metrics", web::get().to(metrics::metrics))
        .configure(embeddings::configure)
        .configure(rerank::configure)
        .configure(tokenize::configure)
        .route("/", web::get().to(stats::root))
        .route("/", web::head().to(stats::root));
}

/// The whole application over `state`: what `serve` runs and what route tests mount.
pub fn build_app(
    state: web::Data<AppState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let cors = auth::cors(&state.origins);
    // The last wrap runs first: the Host check, CORS, then the key, then the body is read (so a
    // client without the key cannot make the daemon wait for or buffer a body).
    App::new()
        .app_data(state)
        .configure(configure)
        .default_service(web::to(not_found))
        .wrap(actix_web::middleware::from_fn(limits::read_body_in_time))
        .wrap(actix_web::middleware::from_fn(auth::require_api_key))
        .wrap(cors)
        .wrap(actix_web::middleware::from_fn(host_check::check_host))
        // Outermost, so requests refused by auth, CORS or the body timeout are counted too.
        .wrap(actix_web::middleware::from_fn(metrics::count_requests))
        // A connection whose response is still going out is not idle (see `head_deadline`).
        .wrap(actix_web::middleware::from_fn(head_deadline::track_answers))
}

/// Unknown routes answer in the shape of the API their path belongs to.
async fn not_found(request: HttpRequest) -> HttpResponse {
    let path = request.path().to_string();
    let error = CoreError::new(
        ErrorCode::RouteNotFound,
        format!("{} {path} is not a llamay route", request.method()),
    );
    if path.starts_with("/api/") {
        ollama::handlers::render_error(&error)
    } else if path.starts_with("/v1/messages") {
        anthropic::handlers::render_error(&error)
    } else {
        openai::handlers::render_error(&error)
    }
}
