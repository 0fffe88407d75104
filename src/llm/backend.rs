//! The process-wide llama.cpp backend, initialised once, with its log routed into tracing.
//!
//! llama.cpp refuses a second initialisation while the first lives, so the backend is a
//! process global. Its log (thousands of lines a run) goes to tracing under the
//! `llama_cpp_2` target, which the CLI's default filter keeps quiet.

use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;

use super::LlmError;

static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();

pub(super) fn get() -> Result<&'static LlamaBackend, LlmError> {
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LlmError::Backend(e.clone()))
}
