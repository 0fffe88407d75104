//! The composition root: what `llamay serve`, tests and benches start. A [`Daemon`] is a
//! config, a model loader and a catalog, with the store-backed parts when there is a writable
//! store (model administration, the snapshot shelf, stored responses; a daemon without one
//! keeps its responses in a temporary database); [`Daemon::run`] starts the supervisor,
//! preloads `-m`, `-embed` and `-rerank`, builds the generation service under the config's
//! policy and the app state, prints the spec's banner (the structured `llamay serving` log line
//! and the route table), serves until SIGINT or SIGTERM, then stops accepting, fails waiting
//! requests, lets running ones finish (up to a grace period), and unloads. [`serve_store`]
//! (`store.rs`) is `llamay serve` over the model store. The settings the rooms own (queues,
//! compile pool, contexts) are filled from the config in `settings.rs`.
//!
//! Key items: [`Daemon`], [`serve_store`], [`store::StoreCatalog`]. Costs: what it starts (one
//! supervisor, the HTTP workers, the models preloaded).

pub mod banner;
pub mod settings;
pub mod store;

use std::io;
use std::sync::Arc;

use actix::Actor;
use actix_web::web;

use crate::actors::memory::{LlamaMemory, MemoryProbe, NoProbe};
use crate::actors::messages::ModelLoader;
use crate::actors::supervisor::{acquire, Shutdown, GetStatus, Supervisor, SupervisorConfig};
use crate::api::auth::ApiKey;
use crate::api::limits::HttpLimits;
use crate::api::server::{start_http, ACCEPT_HEADROOM, SHUTDOWN_GRACE_SECONDS};
use crate::api::{AppState, RouteSettings};
use crate::config::Config;
use crate::contexts::snapshots::SnapshotShelf;
use crate::contexts::ContextRegistry;
use crate::core::{Constraint, ConstraintSource, ModelAdmin, ModelCatalog, ModelInfo, ResponseStore, TokenLimits};
use crate::service::{GenerationPolicy, GenerationService};
use crate::store::responses::{ResponseLimits, ResponseTree};
use banner::{device_lines, print_banner, print_placement, warn_if_exposed};
use settings::{compile_limits, context_limits, queue_limits};
pub use store::serve_store;

/// Largest `-grammar-file` read.
const MAX_GRAMMAR_FILE_BYTES: u64 = 1024 * 1024;

/// A daemon to run: what it serves models from, and the store-backed parts it has.
pub struct Daemon {
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
    admin: Option<Arc<dyn ModelAdmin>>,
    snapshots: Option<Arc<SnapshotShelf>>,
    responses: Option<Arc<dyn ResponseStore>>,
}

impl Daemon {
    pub fn new(config: Config, loader: Arc<dyn ModelLoader>, catalog: Arc<dyn ModelCatalog>) -> Self {
        Daemon { config, loader, catalog, admin: None, snapshots: None, responses: None }
    }

    /// With `/v1/responses` answers stored in `store` (the model store's tree).
    pub fn with_responses(mut self, store: Arc<dyn ResponseStore>) -> Self {
        self.responses = Some(store);
        self
    }

    /// With the routes that pull, copy, delete and create models.
    pub fn with_admin(mut self, admin: Arc<dyn ModelAdmin>) -> Self {
        self.admin = Some(admin);
        self
    }

    /// With context snapshots kept on `shelf` (the model store).
    pub fn with_snapshots(mut self, shelf: Arc<SnapshotShelf>) -> Self {
        self.snapshots = Some(shelf);
        self
    }

    /// [`Daemon::run`] in a fresh actix system (what `main` calls).
    pub fn run_blocking(self) -> io::Result<()> {
        crate::platform::limit_heap_retention(crate::environment::environment());
        actix_web::rt::System::new().block_on(self.run())
    }

    /// Serves until a stop signal. Must run inside an actix system.
    pub async fn run(self) -> io::Result<()> {
        let Daemon { config, loader, catalog, admin, snapshots, responses } = self;
        let default_grammar = match &config.grammar_file {
            Some(path) => Some(load_grammar_file(path)?),
            None => None,
        };
        // With RPC workers, models load in runner processes that split their layers over this CPU
        // and the workers: no local GPU is planned for.
        let memory_probe: Arc<dyn MemoryProbe> =
            if config.rpc.is_empty() { Arc::new(LlamaMemory) } else { Arc::new(NoProbe) };
        let lexicons = crate::service::lexicons::DaemonLexicons::load(&config.lexicon_files, config.lexicon_match).map_err(io::Error::other)?;
        let supervisor = Supervisor::new(
            loader,
            SupervisorConfig {
                max_loaded: config.max_loaded,
                default_keep_alive: config.keep_alive,
                max_queue: queue_limits(&config).max_queue,
            },
        )
        .with_memory(memory_probe, config.gpu_layers)
        .start();

        let mut placement = Vec::new();
        let preloaded: Option<ModelInfo> = match &config.model {
            Some(name) => {
                let lease = acquire(&supervisor, name, None)
                    .await
                    .map_err(|e| io::Error::other(format!("cannot load {name}: {e}")))?;
                placement = lease.model().placement();
                Some(lease.model().info().clone())
            }
            None => None,
        };
        let extra_models = preload_embed_and_rerank(&config, &supervisor).await?;

        let policy = GenerationPolicy {
            default_grammar,
            lexicons,
            formats: config.formats,
            token_limits: TokenLimits { default_max_tokens: config.default_max_tokens, max_tokens_limit: config.max_tokens_limit },
            compile: compile_limits(&config),
            accelerate: config.accelerate,
            close_on_budget: config.close_on_budget,
        };
        let settings = RouteSettings {
            max_body_bytes: config.max_body_bytes,
            api_key: config.api_key.as_ref().map(|key| ApiKey::new(&key.0)),
            origins: config.origins.clone(),
            host_check: crate::api::host_check::HostCheck::new(&config.addr, &config.allowed_hosts),
            request_body_timeout: config.request_body_timeout,
            rpc_workers: config.rpc.clone(),
            embed_model: config.embed.clone(),
            rerank_model: config.rerank.clone(),
        };
        let contexts = Arc::new(ContextRegistry::new());
        if let Some(shelf) = &snapshots {
            if let Err(error) = contexts.set_spill_dir(shelf.parked_dir()) {
                tracing::warn!(%error, "parked contexts past -context-memory are dropped, not stored: the store's parked/ directory is not usable");
            }
        }
        if let Some(id) = &config.daemon_id {
            contexts.set_daemon_id(id);
        }
        contexts.set_limits(context_limits(&config));
        contexts.start_sweeper()?;
        let mut generation = GenerationService::new(supervisor.clone(), contexts, policy);
        if let Some(shelf) = snapshots {
            generation = generation.with_snapshots(shelf);
        }
        let mut app_state = AppState::new(generation, catalog, settings);
        if let Some(admin) = admin {
            app_state = app_state.with_admin(admin);
        }
        let responses = match responses {
            Some(store) => Some(store),
            None => match ResponseTree::temporary(response_limits(&config)) {
                Ok(tree) => {
                    tracing::info!("stored responses are kept until the daemon stops: it has no writable model store");
                    Some(Arc::new(tree) as Arc<dyn ResponseStore>)
                }
                Err(error) => {
                    tracing::warn!(%error, "responses are not stored: no temporary database could be opened");
                    None
                }
            },
        };
        if let Some(store) = responses {
            app_state = app_state.with_responses(store);
        }
        let state = web::Data::new(app_state);
        let limits = HttpLimits {
            client_request_timeout: config.client_request_timeout,
            request_body_timeout: config.request_body_timeout,
            keep_alive: config.http_keep_alive,
            max_connections: config.max_connections,
        };
        crate::platform::raise_open_file_limit(limits.max_connections.saturating_mul(ACCEPT_HEADROOM));
        let (server, bound) = start_http(state.clone(), &limits, &config.socket_addrs()?)?;
        warn_if_exposed(&bound, state.requires_api_key());
        let bound: Vec<String> = bound.iter().map(ToString::to_string).collect();
        print_banner(&config, preloaded.as_ref(), &bound, state.generation().lexicon_count());
        if config.rpc.is_empty() {
            if let Ok(status) = supervisor.send(GetStatus).await {
                for line in device_lines(&status) {
                    println!("{line}");
                }
            }
        }
        print_placement(preloaded.as_ref(), &placement);
        for line in &extra_models {
            println!("{line}");
        }
        let handle = server.handle();
        let mut running = actix_web::rt::spawn(server);

        tokio::select! {
            finished = &mut running => {
                return finished.map_err(|e| io::Error::other(e.to_string()))?;
            }
            signal = stop_signal() => {
                tracing::info!(signal, "stopping: no new connections, waiting requests fail, running ones finish");
            }
        }
        state.begin_shutdown();
        let busy = supervisor.send(Shutdown).await.unwrap_or(0);
        if busy > 0 {
            tracing::info!(
                models = busy,
                grace_seconds = SHUTDOWN_GRACE_SECONDS,
                "waiting for running requests"
            );
        }
        handle.stop(true).await;
        let _ = running.await;
        let still_loaded = supervisor.send(Shutdown).await.unwrap_or(0);
        tracing::info!(still_loaded, "llamay stopped");
        Ok(())
    }
}

/// The operator's bounds on stored responses.
pub fn response_limits(config: &Config) -> ResponseLimits {
    ResponseLimits { max_count: config.max_stored_responses, max_age: config.stored_responses_max_age }
}

fn load_grammar_file(path: &std::path::Path) -> io::Result<Constraint> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_GRAMMAR_FILE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: {size} bytes is too large for a grammar",
                path.display()
            ),
        ));
    }
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", path.display()));
    let text = String::from_utf8(std::fs::read(path)?).map_err(|e| invalid(e.to_string()))?;
    Constraint::from_source(ConstraintSource::Gbnf { text }, &crate::grammar::limits::Limits::default())
        .map_err(|e| invalid(e.to_string()))
}

/// Loads `-embed` and `-rerank` at start-up (as `-m` is), refusing a chat model for `-embed`,
/// and starts the reranker so a model that cannot score fails now rather than at the first
/// request. Returns the lines that say which model serves which route and how it scores.
async fn preload_embed_and_rerank(
    config: &Config,
    supervisor: &actix::Addr<Supervisor>,
) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    if let Some(name) = &config.embed {
        let lease = acquire(supervisor, name, None)
            .await
            .map_err(|e| io::Error::other(format!("cannot load -embed {name}: {e}")))?;
        let Some(service) = lease.model().embeddings() else {
            let info = lease.model().info();
            return Err(io::Error::other(format!(
                "-embed {name}: {} is a chat model, not an embedding model; give -embed a sentence encoder such as all-minilm:l6-v2",
                info.architecture
            )));
        };
        let info = service.info();
        lines.push(format!(
            "Embeddings: {name} ({} dimensions, up to {} tokens per input{})",
            info.dimensions,
            info.max_input_tokens,
            if info.normalizes { ", unit vectors" } else { "" }
        ));
    }
    if let Some(name) = &config.rerank {
        let lease = acquire(supervisor, name, None)
            .await
            .map_err(|e| io::Error::other(format!("cannot load -rerank {name}: {e}")))?;
        let model = std::sync::Arc::clone(lease.model());
        let reranker = web::block(move || crate::actors::messages::reranker_of(model.as_ref()))
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
            .map_err(|e| io::Error::other(format!("-rerank {name}: {e}")))?;
        let scorer = reranker.kind().as_str();
        tracing::info!(model = %name, scorer, "reranker ready");
        lines.push(format!("Rerank: {name}, scorer {scorer}"));
    }
    Ok(lines)
}

/// The route table printed under the `llamay serving` line.

/// Resolves on SIGINT or SIGTERM, naming which.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}
