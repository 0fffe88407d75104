//! The OpenAI-compatible API: `POST /v1/chat/completions` (SSE streaming and not), `POST
//! /v1/completions` (completions.rs, with echo and prompt log-probabilities), `GET /v1/models`,
//! and the Responses API (`responses/`: `/v1/responses`, stateless and stored).
//!
//! types.rs is serde only, convert.rs turns a request into core types, stream.rs is the pure SSE
//! state machine, handlers.rs ties them to the supervisor.

pub mod completions;
pub mod convert;
pub mod handlers;
pub mod responses;
pub mod stream;
pub mod types;
