//! llama.cpp's C API for models, contexts and batches, owned here: every pointer this module
//! hands to llama.cpp it created itself, so nothing above it guesses where llama.cpp keeps one.
//!
//! `llama-cpp-2` keeps its model and context pointers crate-private, and llamay needs them for
//! what that crate does not wrap: attaching a ggml threadpool and tuning its thread count per
//! step, and a tensor split by ratios for RPC workers. So models and contexts are created and
//! freed through `llama-cpp-sys-2` (the bindings `llama-cpp-2` itself builds on, one llama.cpp
//! build for both); `llama-cpp-2` still initialises the backend and routes its log.
//!
//! Key types: [`RawModel`] (weights, vocabulary and metadata queries), [`RawContext`] (decode,
//! logits, KV memory and sequence state), [`RawBatch`] (a reusable `llama_batch`).
//! Cost: the wrappers add no work to llama.cpp's calls; a batch is allocated once per context.

mod batch;
mod context;
mod model;

pub use batch::RawBatch;
pub use context::{ContextSettings, RawContext};
pub use model::{ModelSettings, RawModel};
