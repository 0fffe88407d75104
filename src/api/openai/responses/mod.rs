//! OpenAI's Responses API (issue 61): `POST /v1/responses` (JSON or typed SSE events), and the
//! stored responses `GET /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` and
//! `DELETE /v1/responses/{id}`.
//!
//! The route translates only: `convert.rs` turns a request (its input items, tools, text
//! format, sampling) into the same `UncheckedGenerateRequest` chat completions make, through the
//! chat conversion's shared pieces, and the generation service validates and runs it.
//! `previous_response_id` continues a stored conversation: its messages are sent again ahead of
//! the new input, so where the model still holds their KV state (prefix reuse,
//! `actors::prefix`) only what follows it is prefilled, and `cached_tokens` shows the rest.
//! `object.rs` builds the response object and its output items, `stream.rs` is the pure event
//! state machine, `handlers.rs` ties them to the service and the response store
//! (`core::ResponseStore`).
//!
//! Costs: a stored response keeps its conversation (the text of every turn) and is read back
//! whole to continue it.

pub mod convert;
pub mod handlers;
pub mod object;
pub mod stream;
pub mod types;
