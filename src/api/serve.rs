//! `llamay serve`: starts the supervisor, preloads `-m`, prints the spec's banner (the structured
//! `llamay serving` log line and the route table), serves until SIGINT or SIGTERM, then stops
//! accepting, fails waiting requests, lets running ones finish (up to a grace period), and unloads.
//! The HTTP server gets the connection limits ([`HttpLimits`]; the open-file limit is raised to
//! cover them) and the app its API key, allowed origins and `Host` check; binding beyond
//! loopback without a key is warned about at start-up.
//!
//! Key items: [`serve`] (async, inside an actix system), [`serve_blocking`] (makes the system),
//! [`start_http`] (the configured server on given addresses, also started by tests).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::Actor;
use actix_service::{fn_service, map_config, IntoServiceFactory as _, ServiceFactoryExt as _};
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use actix_web::web;

use super::auth::ApiKey;
use super::head_deadline::{ConnectionLoad, HeadDeadlineIo};
use super::host_check::Listener;
use super::limits::HttpLimits;
use super::{build_app, AppState};
use crate::actors::messages::ModelLoader;
use crate::actors::memory::{human_binary, LlamaMemory, MemoryProbe, NoProbe};
use crate::actors::supervisor::{acquire, Shutdown, Snapshot, Supervisor, SupervisorConfig, SupervisorStatus};
use crate::config::Config;
use crate::service::GenerationPolicy;
use crate::core::{Constraint, ConstraintSource, ModelAdmin, ModelCatalog, ModelInfo, TokenLimits};

/// Seconds running requests get to finish after a stop signal.
pub const SHUTDOWN_GRACE_SECONDS: u64 = 10;
/// Largest `-grammar-file` read.
const MAX_GRAMMAR_FILE_BYTES: u64 = 1024 * 1024;

/// Runs [`serve`] in a fresh actix system (what `main` calls).
pub fn serve_blocking(
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
) -> io::Result<()> {
    crate::platform::limit_heap_retention(crate::config::environment());
    actix_web::rt::System::new().block_on(serve(config, loader, catalog))
}

/// Runs [`serve_with_admin`] in a fresh actix system.
pub fn serve_blocking_with_admin(
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
    admin: Arc<dyn ModelAdmin>,
    snapshots: Option<Arc<crate::contexts::snapshots::SnapshotShelf>>,
) -> io::Result<()> {
    crate::platform::limit_heap_retention(crate::config::environment());
    actix_web::rt::System::new().block_on(async move {
        serve_with_stores(config, loader, catalog, Some(admin), snapshots).await
    })
}

/// Serves until a stop signal. Must run inside an actix system.
pub async fn serve(
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
) -> io::Result<()> {
    serve_with_admin(config, loader, catalog, None).await
}

/// [`serve`], with the routes that pull, copy, delete and create models when `admin` is given.
pub async fn serve_with_admin(
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
    admin: Option<Arc<dyn ModelAdmin>>,
) -> io::Result<()> {
    serve_with_stores(config, loader, catalog, admin, None).await
}

/// [`serve_with_admin`], with context snapshots kept in `snapshots` (the model store).
pub async fn serve_with_stores(
    config: Config,
    loader: Arc<dyn ModelLoader>,
    catalog: Arc<dyn ModelCatalog>,
    admin: Option<Arc<dyn ModelAdmin>>,
    snapshots: Option<Arc<crate::contexts::snapshots::SnapshotShelf>>,
) -> io::Result<()> {
    let default_grammar = match &config.grammar_file {
        Some(path) => Some(load_grammar_file(path)?),
        None => None,
    };
    // With RPC workers, models load in runner processes that split their layers over this CPU
    // and the workers: no local GPU is planned for.
    let memory_probe: Arc<dyn MemoryProbe> =
        if config.rpc.is_empty() { Arc::new(LlamaMemory) } else { Arc::new(NoProbe) };
    let lexicons = crate::service::lexicons::DaemonLexicons::load(&config.lexicon_files).map_err(io::Error::other)?;
    let supervisor = Supervisor::new(
        loader,
        SupervisorConfig {
            max_loaded: config.max_loaded,
            default_keep_alive: config.keep_alive,
            max_queue: config.max_queue,
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
        compile_threads: config.compile_threads,
        compile_queue: config.compile_queue,
    };
    let mut app_state = AppState::new(supervisor.clone(), catalog, None, config.max_body_bytes).with_policy(policy);
    app_state.api_key = config.api_key.as_ref().map(|key| ApiKey::new(&key.0));
    app_state.origins = config.origins.clone();
    app_state.host_check = super::host_check::HostCheck::new(&config.addr, &config.allowed_hosts);
    app_state.request_body_timeout = config.request_body_timeout;
    app_state.rpc_workers = config.rpc.clone();
    app_state.embed_model = config.embed.clone();
    app_state.rerank_model = config.rerank.clone();
    if let Some(admin) = admin {
        app_state = app_state.with_admin(admin);
    }
    if let Some(shelf) = &snapshots {
        if let Err(error) = app_state.contexts.set_spill_dir(shelf.parked_dir()) {
            tracing::warn!(%error, "parked contexts past -context-memory are dropped, not stored: the store's parked/ directory is not usable");
        }
    }
    app_state.snapshots = snapshots;
    if let Some(id) = &config.daemon_id {
        app_state.contexts.set_daemon_id(id);
    }
    app_state.contexts.set_memory_limit(config.context_memory);
    app_state.contexts.set_max_contexts(config.max_contexts);
    app_state.contexts.start_sweeper()?;
    let state = web::Data::new(app_state);
    let limits = HttpLimits {
        client_request_timeout: config.client_request_timeout,
        request_body_timeout: config.request_body_timeout,
        keep_alive: config.http_keep_alive,
        max_connections: config.max_connections,
    };
    crate::platform::raise_open_file_limit(limits.max_connections.saturating_mul(ACCEPT_HEADROOM));
    let (server, bound) = start_http(state.clone(), &limits, &config.socket_addrs()?)?;
    warn_if_exposed(&bound, state.api_key.is_some());
    let bound: Vec<String> = bound.iter().map(ToString::to_string).collect();
    print_banner(&config, preloaded.as_ref(), &bound, state.generation.lexicon_count());
    if config.rpc.is_empty() {
        if let Ok(status) = supervisor.send(Snapshot).await {
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
    state.shutting_down.store(true, Ordering::Release);
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

/// The real app over `state`, bound to `addrs` with `limits`, not yet running until awaited or
/// spawned; with the addresses it bound (port 0 becomes the port chosen). Stop signals are left
/// to the caller.
pub fn start_http(
    state: web::Data<AppState>,
    limits: &HttpLimits,
    addrs: &[SocketAddr],
) -> io::Result<(actix_web::dev::Server, Vec<SocketAddr>)> {
    // actix stops accepting at its cap, and what waits in the listen backlog then waits behind
    // every idle connection ahead of it. So actix may accept up to twice `max_connections`
    // (split over its workers, as it caps each), and from three quarters of `max_connections`
    // on idle connections are shed instead: a new client is accepted at once and answered,
    // while idle ones make room.
    let accepted = limits.max_connections.saturating_mul(ACCEPT_HEADROOM);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, accepted.max(1));
    let per_worker = accepted.div_ceil(workers).max(1);
    // Built from actix's parts rather than `HttpServer` so that each connection's socket can be
    // wrapped in `HeadDeadlineIo`, which times the heads of later requests too.
    let mut builder = actix_server::Server::build()
        .workers(workers)
        .max_concurrent_connections(per_worker)
        .backlog(LISTEN_BACKLOG)
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_GRACE_SECONDS);
    let shutdown = builder.graceful_shutdown_signal();
    let limits = *limits;
    // One count over every listener and worker: idle connections are shed near the cap.
    let load = Arc::new(ConnectionLoad::new(limits.max_connections));
    let mut bound = Vec::new();
    for addr in addrs {
        let listener = bind_listener(*addr)?;
        let local = listener.local_addr()?;
        bound.push(local);
        let (state, shutdown, load) = (state.clone(), shutdown.clone(), Arc::clone(&load));
        builder = builder.listen(format!("llamay-{local}"), listener, move || {
            let load = Arc::clone(&load);
            let shutdown = shutdown.clone();
            let app = build_app(state.clone())
                .into_factory()
                .map_err(|error: actix_web::Error| error.error_response());
            let http = actix_http::HttpService::build()
                .graceful_shutdown_signal(move || {
                    let shutdown = shutdown.clone();
                    async move { shutdown.notified().await }
                })
                .keep_alive(limits.keep_alive)
                .client_request_timeout(limits.client_request_timeout)
                // As `HttpServer` sets them: closing a connection with a body still arriving
                // (a 413) lingers a second so the client reads the answer instead of a reset.
                .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                .h1_allow_half_closed(true)
                .local_addr(local)
                // Requests report to their connection's wrapper while they are answered, and
                // learn which address they came in on (the Host check).
                .on_connect_ext(move |io: &HeadDeadlineIo<TcpStream>, data| {
                    data.insert(io.activity());
                    data.insert(Listener(local));
                })
                .h1(map_config(app, |_| AppConfig::default()));
            fn_service(move |io: TcpStream| {
                let peer = io.peer_addr().ok();
                let io = HeadDeadlineIo::new(io, limits.client_request_timeout, Arc::clone(&load));
                std::future::ready(Ok::<_, actix_http::error::DispatchError>((io, peer)))
            })
            .and_then(http)
        })?;
    }
    Ok((builder.run(), bound))
}

/// Connections actix may hold, as a multiple of `max_connections`, while idle ones are shed.
pub const ACCEPT_HEADROOM: usize = 2;

/// How long a closing connection waits for the client to finish (actix-web's default).
const CLIENT_DISCONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Connections that wait to be accepted once `max_connections` are open (actix's default).
const LISTEN_BACKLOG: u32 = 1024;

/// A listening socket on `addr`, reusable at once after a restart, as actix binds its own.
fn bind_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG as i32)?;
    Ok(socket.into())
}

/// Addresses other machines can reach, served without a key, get a warning at start-up.
fn warn_if_exposed(bound: &[SocketAddr], has_key: bool) {
    if has_key {
        return;
    }
    for addr in bound.iter().filter(|addr| !addr.ip().is_loopback()) {
        tracing::warn!(
            %addr,
            "listening beyond loopback without an API key: anyone who can reach this address can use the models; set LLAMAY_API_KEY (or -api-key)"
        );
    }
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

/// `1.59 GB`, as the banner prints a model's size.
pub fn human_bytes(bytes: u64) -> String {
    let bytes = bytes as f64;
    if bytes >= 1e9 {
        format!("{:.2} GB", bytes / 1e9)
    } else if bytes >= 1e6 {
        format!("{:.0} MB", bytes / 1e6)
    } else {
        format!("{:.0} KB", bytes / 1e3)
    }
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
pub fn route_table(base: &str) -> String {
    route_table_with(base, None, None)
}

/// The route table, naming the models `-embed` and `-rerank` gave (or how to give them).
pub fn route_table_with(base: &str, embed: Option<&str>, rerank: Option<&str>) -> String {
    let embed_note = match embed {
        Some(name) => format!("({name}; and /api/embed)"),
        None => "(start with -embed <encoder.gguf>)".to_string(),
    };
    let rerank_note = match rerank {
        Some(name) => format!("({name}; and /v1/rerank)"),
        None => "(start with -rerank <reranker.gguf>)".to_string(),
    };
    let routes = [
        ("OpenAI", "POST", "/v1/chat/completions", ""),
        ("Anthropic", "POST", "/v1/messages", ""),
        ("Embeddings", "POST", "/v1/embeddings", embed_note.as_str()),
        ("Rerank", "POST", "/rerank", rerank_note.as_str()),
        ("Ollama", "POST", "/api/chat", "(and /api/generate)"),
        ("Contexts", "POST", "/v1/contexts", "(then /{id}/fork?n=8, /{id}/snapshot)"),
        (
            "Models",
            "GET",
            "/api/tags",
            "(and /api/ps, /api/show, /v1/models)",
        ),
        (
            "Models",
            "POST",
            "/api/pull",
            "(and /api/copy, /api/create, DELETE /api/delete)",
        ),
        ("Stats", "GET", "/v1/stats", ""),
        ("Health", "GET", "/health", ""),
        ("Metrics", "GET", "/metrics", "(Prometheus text format)"),
    ];
    let mut table = String::from("\n");
    for (api, method, path, note) in routes {
        let url = format!("{base}{path}");
        let line = format!("  {api:<11} {method:<4} {url:<45} {note}");
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

/// `lexicons`: the lists `-lexicon` loaded (files, not entries).
fn print_banner(config: &Config, model: Option<&ModelInfo>, bound: &[String], lexicons: usize) {
    let (name, arch, params, context) = match model {
        Some(info) => (
            info.name.as_str(),
            info.architecture.as_str(),
            human_bytes(info.size_bytes),
            info.context_length,
        ),
        None => ("", "", String::new(), config.context),
    };
    tracing::info!(
        addr = %config.addr,
        model = name,
        arch,
        "max-loaded" = config.max_loaded,
        keepalive = %config.keep_alive,
        params = %params,
        context,
        threads = config.threads,
        kv = %config.kv,
        lexicon = lexicons,
        flash_attn = if config.flash_attention { "on" } else { "off" },
        parallel = config.parallel,
        listening = %bound.join(","),
        "llamay serving"
    );
    println!(
        "{}",
        route_table_with(&format!("http://{}", config.addr), config.embed.as_deref(), config.rerank.as_deref())
    );
}

/// One line per GPU (backend, name, free and total memory, the layers each loaded model has
/// there), or one saying the daemon runs on the CPU only and why.
pub fn device_lines(status: &SupervisorStatus) -> Vec<String> {
    if status.devices.is_empty() {
        let backends = crate::llm::devices::compiled_backends();
        let why = if backends.is_empty() {
            "this build has no GPU backend; build with --features cuda, metal, vulkan or rocm".to_string()
        } else {
            format!("no {} device found", backends.join("/"))
        };
        return vec![format!("Devices: CPU only ({why})")];
    }
    let mut lines = Vec::new();
    for device in &status.devices {
        let gpu = &device.device;
        lines.push(format!(
            "Device {} ({}): {}, {} free of {}",
            gpu.name,
            gpu.backend,
            gpu.description,
            human_binary(gpu.free),
            human_binary(gpu.total)
        ));
        for model in &status.models {
            let Some(share) = model.memory.as_ref().and_then(|m| m.device.as_ref()).filter(|s| s.index == gpu.index) else {
                continue;
            };
            lines.push(format!(
                "  {}: {}/{} layers offloaded, {} on the device, {} on the host",
                model.info.name,
                share.layers,
                share.of_layers,
                human_binary(share.bytes),
                human_binary(model.memory.as_ref().map_or(0, |m| m.host_bytes))
            ));
        }
    }
    let on_cpu: Vec<&str> = status
        .models
        .iter()
        .filter(|model| model.memory.as_ref().is_some_and(|m| m.device.is_none()))
        .map(|model| model.info.name.as_str())
        .collect();
    if !on_cpu.is_empty() {
        lines.push(format!("  on the CPU only: {}", on_cpu.join(", ")));
    }
    lines
}

/// For a preloaded model split over RPC workers: what each device holds.
fn print_placement(model: Option<&ModelInfo>, placement: &[crate::core::DevicePlacement]) {
    let (Some(model), false) = (model, placement.is_empty()) else {
        return;
    };
    println!("{} is split over the RPC workers:", model.name);
    for part in placement {
        println!(
            "  {:<24} layers {:<8} {} MiB",
            part.device,
            part.layers,
            part.bytes.div_ceil(1024 * 1024)
        );
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_pieces() {
        assert_eq!(human_bytes(1_590_000_000), "1.59 GB");
        assert_eq!(human_bytes(270_000_000), "270 MB");
        let table = route_table("http://localhost:11439");
        assert!(table.contains("  OpenAI      POST http://localhost:11439/v1/chat/completions\n"));
        assert!(table.contains("  Stats       GET  http://localhost:11439/v1/stats\n"));
        assert!(table.contains("  Contexts    POST http://localhost:11439/v1/contexts"));
        assert!(table.contains(
            "  Embeddings  POST http://localhost:11439/v1/embeddings          (start with -embed <encoder.gguf>)\n"
        ));
        let table = route_table_with("http://localhost:11439", Some("all-minilm:l6-v2"), Some("smollm2:135m"));
        assert!(table.contains("  Embeddings  POST http://localhost:11439/v1/embeddings          (all-minilm:l6-v2; and /api/embed)\n"));
        assert!(table.contains("  Rerank      POST http://localhost:11439/rerank                 (smollm2:135m; and /v1/rerank)\n"));
    }
}
