//! A persistent ggml CPU threadpool attached to one context, so decoding reuses the same worker
//! threads for every graph.
//!
//! Without OpenMP (llama-cpp-2 is built with `default-features = false`) and without an attached
//! pool, ggml creates and frees a threadpool for every graph it computes: every decoded token
//! starts and joins `threads - 1` OS threads, and the caller spins in `ggml_barrier` until the new
//! threads are scheduled (73% of decode time under perf on a 2-core machine). llama.cpp's own
//! tools create one pool per context and attach it; this does the same through the sys bindings.
//!
//! Key type: [`CpuThreadpool`]. Cost: `threads - 1` OS threads per context for its lifetime; they
//! poll briefly after each graph (ggml's default poll level) and then sleep on a condition.
//!
//! `llama-cpp-2` 0.1.160 keeps the raw `llama_context` pointer crate-private; its `Debug` output is
//! the one place it shows it. [`context_pointer`] reads it there and checks it against the
//! context's own answers (n_ctx, n_batch, n_seq_max) before anything is attached, so a changed
//! `Debug` format turns into a clear error, never into a call on a wrong pointer.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_sys_2 as sys;

use super::LlmError;

/// A ggml threadpool, freed on drop. The context it is attached to must be freed or detached
/// first: [`super::Context`] declares it after the llama.cpp context so it drops after it.
pub struct CpuThreadpool {
    pool: std::ptr::NonNull<sys::ggml_threadpool>,
    threads: i32,
}

// SAFETY: the pool is only handed to llama.cpp (which drives it from the thread that decodes)
// and freed once; nothing here touches it concurrently.
unsafe impl Send for CpuThreadpool {}

impl std::fmt::Debug for CpuThreadpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuThreadpool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl CpuThreadpool {
    /// Starts a pool of `threads` (the calling thread counts as one of them while it decodes).
    pub fn new(threads: i32) -> Result<Self, LlmError> {
        if threads <= 0 {
            return Err(LlmError::Config(format!(
                "a threadpool needs at least one thread, got {threads}"
            )));
        }
        // SAFETY: plain C calls; the params struct is passed by pointer and only read.
        let pool = unsafe {
            let mut params = sys::ggml_threadpool_params_default(threads);
            sys::ggml_threadpool_new(&mut params)
        };
        let pool = std::ptr::NonNull::new(pool).ok_or_else(|| {
            LlmError::Context(format!(
                "ggml could not start a threadpool of {threads} threads"
            ))
        })?;
        Ok(Self { pool, threads })
    }

    pub fn threads(&self) -> i32 {
        self.threads
    }

    /// Makes `context` compute its graphs (single tokens and prompt batches) on this pool.
    pub fn attach(&self, context: &mut LlamaContext<'_>) -> Result<(), LlmError> {
        let raw = context_pointer(context)?;
        // SAFETY: `raw` is the live context's pointer (checked in `context_pointer`); the pool
        // outlives the context's use of it (see the type's documentation).
        unsafe { sys::llama_attach_threadpool(raw, self.pool.as_ptr(), std::ptr::null_mut()) };
        Ok(())
    }
}

impl Drop for CpuThreadpool {
    fn drop(&mut self) {
        // SAFETY: created by ggml_threadpool_new and freed exactly once.
        unsafe { sys::ggml_threadpool_free(self.pool.as_ptr()) };
    }
}

/// The raw `llama_context` behind `context`, read from its `Debug` output and verified.
fn context_pointer(context: &LlamaContext<'_>) -> Result<*mut sys::llama_context, LlmError> {
    let shown = format!("{context:?}");
    let unexpected = || {
        LlmError::Context(format!(
            "cannot find the llama.cpp context pointer in {shown:?}"
        ))
    };
    let hex = shown.split("0x").nth(1).ok_or_else(unexpected)?;
    let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
    let address = usize::from_str_radix(&digits, 16).map_err(|_| unexpected())?;
    if address == 0 || address % std::mem::align_of::<usize>() != 0 {
        return Err(unexpected());
    }
    let raw = address as *mut sys::llama_context;
    // SAFETY: the address is the one the wrapper printed for its own non-null context pointer.
    let (n_ctx, n_batch, n_ubatch) = unsafe {
        (
            sys::llama_n_ctx(raw),
            sys::llama_n_batch(raw),
            sys::llama_n_ubatch(raw),
        )
    };
    if (n_ctx, n_batch, n_ubatch) != (context.n_ctx(), context.n_batch(), context.n_ubatch()) {
        return Err(unexpected());
    }
    Ok(raw)
}
