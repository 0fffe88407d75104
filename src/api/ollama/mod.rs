//! The Ollama-compatible API: `/api/chat` and `/api/generate` (NDJSON streaming, on by default),
//! `/api/tags`, `/api/ps`, `/api/show`, `/api/version`.
//!
//! types.rs is serde only, convert.rs turns a request into core types, stream.rs is the pure
//! NDJSON state machine, handlers.rs ties them to the supervisor and the catalog.

pub mod convert;
pub mod handlers;
pub mod models;
pub mod stream;
pub mod types;
