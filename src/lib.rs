//! llamay: a local LLM daemon whose structured output is enforced by the sampler.
//!
//! Layers, bottom up: `grammar` (pure constraint engine), `gguf` and `store` (model files),
//! `llm` (llama.cpp, the only module touching it), `core` (API-neutral types), `contexts` and
//! `embed` (features the workers serve), `actors` (supervisor, model worker, per-request
//! sampler), `service` (validation and the one path to a worker), `api` (HTTP routes only),
//! `daemon` (the composition root). ARCHITECTURE.md has the rooms and import rules.

pub mod actors;
pub mod config;
pub mod contexts;
pub mod core;
pub mod daemon;
pub mod embed;
pub mod environment;
pub mod error;
pub mod gguf;
/// The constraint engine, a crate of its own (`src/grammar`): pure, with no dependency on the rest.
pub use llamay_grammar as grammar;
pub mod llm;
pub mod platform;
pub mod pull;
pub mod store;
pub mod api;
pub mod service;
pub mod tools;
