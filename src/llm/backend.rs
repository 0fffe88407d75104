//! The process-wide llama.cpp backend, initialised once, with its log routed into tracing.
//!
//! llama.cpp refuses a second initialisation while the first lives, so the backend is a
//! process global. Its log (thousands of lines a run) goes to tracing under the
//! [`super::LLAMA_LOG_TARGET`] target, which the CLI's default filter keeps quiet.

use std::sync::OnceLock;

use super::ffi;

static BACKEND: OnceLock<()> = OnceLock::new();

/// Starts llama.cpp's backends the first time it is called.
pub(super) fn get() {
    BACKEND.get_or_init(ffi::init_backend);
}
