//! The Anthropic-compatible API: `POST /v1/messages`, streaming with Anthropic's event sequence.
//!
//! types.rs is serde only, convert.rs turns a request into core types, stream.rs is the pure SSE
//! state machine, handlers.rs ties them to the supervisor.

pub mod convert;
pub mod handlers;
pub mod stream;
pub mod types;
