//! The HTTP server: the real app bound to the configured addresses, with the connection
//! limits ([`HttpLimits`]; idle connections are shed near the cap) and each connection's head
//! deadline. Starting the daemon around it is `crate::daemon`'s.
//!
//! Key items: [`start_http`] (the configured server on given addresses, also started by tests),
//! [`SHUTDOWN_GRACE_SECONDS`], [`ACCEPT_HEADROOM`]. Costs: actix's workers, one per core.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use actix_service::{fn_service, map_config, IntoServiceFactory as _, ServiceFactoryExt as _};
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use actix_web::web;

use super::head_deadline::{ConnectionLoad, HeadDeadlineIo};
use super::host_check::Listener;
use super::limits::HttpLimits;
use super::{build_app, AppState};

/// Seconds running requests get to finish after a stop signal.
pub const SHUTDOWN_GRACE_SECONDS: u64 = 10;

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
