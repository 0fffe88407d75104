//! The actors: the supervisor (which models are loaded, keepalive, eviction, the waiting queue),
//! the model actor (a thread owning one llama.cpp context, batching all live sequences) and the
//! per-request sampler, the embedding model as the supervisor holds it, and the RPC runner
//! process's stand-in. `messages` is the contract between them and the service.
//!
//! `actors` never imports `service` or `api`.

pub mod drafts;
pub mod embedding_model;
pub mod memory;
pub mod messages;
pub mod model;
pub mod prefix;
pub mod runner;
pub mod sampler;
pub mod supervisor;
