//! llama.cpp's C API for models, contexts and batches, owned here: every pointer this module
//! hands to llama.cpp it created itself, so nothing above it guesses where llama.cpp keeps one.
//!
//! Everything goes through `llama-cpp-sys-2`, the bindings `llama-cpp-2` is built on, and not
//! through `llama-cpp-2` itself: llamay needs what that wrapper keeps private or leaves out
//! (attaching a ggml threadpool and tuning its thread count per step, a tensor split by ratios
//! for RPC workers), and the wrapper turns on llama.cpp's `common` library, nearly half of
//! llama.cpp's compile, which llamay never calls.
//!
//! Key types: [`RawModel`] (weights, vocabulary and metadata queries), [`RawContext`] (decode,
//! logits, KV memory and sequence state), [`RawBatch`] (a reusable `llama_batch`), and the
//! process-wide backend: [`init_backend`], its log routed into tracing, and [`devices`].
//! Cost: the wrappers add no work to llama.cpp's calls; a batch is allocated once per context.

mod backend;
mod batch;
mod context;
mod model;

pub use backend::{devices, init as init_backend, system_info, DeviceKind, LOG_TARGET};
pub use batch::RawBatch;
pub use context::{ContextSettings, RawContext};
pub use model::{ModelSettings, RawModel};
