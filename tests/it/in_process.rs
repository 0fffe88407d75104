//! The app's state over the real store and llama.cpp, for tests that drive the routes in this
//! process (actix's test service or `start_http` on a loopback port) rather than a `llamay serve`
//! child. It reads the store through llamay's library, which the test-support crate does not
//! depend on.
//!
//! Also [`collect`], which waits a generation submitted to a worker out, as every in-process
//! test of the model worker does.
//!
//! Key items: [`store_backed_state`], [`collect`]. Cost: opening the shared store; models load
//! on first use.

use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use llamay::actors::messages::Generation;
use llamay::actors::model::{StoreLoader, WorkerSettings};
use llamay::actors::supervisor::{Supervisor, SupervisorConfig};
use llamay::api::{AppState, RouteSettings};
use llamay::contexts::ContextRegistry;
use llamay::service::{GenerationPolicy, GenerationService};
use llamay::core::{Completion, KeepAlive, StreamEvent};
use llamay::llm::ContextParams;
use llamay::daemon::store::StoreCatalog;
use llamay::store::Store;

/// State of a daemon over the default store (where scripts/setup imports the test models):
/// one llama.cpp thread and two sequences per model of `n_ctx` tokens, at most `max_loaded`
/// models, a queue of 8, routes as `routes` say. Must be called inside an actix system.
pub fn store_backed_state(n_ctx: u32, max_loaded: usize, routes: RouteSettings) -> AppState {
    let store = Arc::new(Store::open(&Store::default_home()).expect("the model store (scripts/setup fills it)"));
    let settings = WorkerSettings {
        context: ContextParams { n_ctx, threads: 1, sequences: 2, ..ContextParams::default() },
        ..WorkerSettings::default()
    };
    let loader = Arc::new(StoreLoader::new(Arc::clone(&store), settings));
    let config = SupervisorConfig {
        max_loaded,
        default_keep_alive: KeepAlive::For(Duration::from_secs(300)),
        max_queue: 8,
    };
    let supervisor = Supervisor::new(loader, config).start();
    let generation = GenerationService::new(supervisor, Arc::new(ContextRegistry::new()), GenerationPolicy::default());
    AppState::new(generation, Arc::new(StoreCatalog::new(store)), routes)
}

/// The text and completion of `generation`, received on this thread until it ends.
pub fn collect(mut generation: Generation) -> (String, Completion) {
    let mut text = String::new();
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            StreamEvent::Delta { text: delta } => text.push_str(&delta),
            StreamEvent::Done(done) => return (text, done),
            StreamEvent::Logprobs { .. } => {}
        }
    }
    panic!("the generation ended without a completion");
}
