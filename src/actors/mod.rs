//! The actors: the supervisor (which models are loaded, keepalive, eviction, the waiting queue),
//! the model actor (a thread owning one llama.cpp context, batching all live sequences) and the
//! per-request sampler. `messages` is the contract between them and the API.
//!
//! `actors` never imports `api`.

pub mod embed;
pub mod memory;
pub mod messages;
pub mod model;
pub mod prefix;
pub mod runner;
pub mod rerank;
pub mod sampler;
pub mod supervisor;
