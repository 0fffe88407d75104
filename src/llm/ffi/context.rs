//! A `llama_context` on a [`RawModel`], freed on drop: decode, logits, the KV memory of its
//! sequences and their saved state.

use std::marker::PhantomData;
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use super::{RawBatch, RawModel};
use crate::llm::LlmError;

/// The settings llamay chooses for a context; everything else is llama.cpp's default.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSettings {
    pub n_ctx: u32,
    /// Most tokens in one decode call; also the micro-batch.
    pub batch: u32,
    pub sequences: u32,
    pub threads: i32,
    /// A ggml type (`sys::GGML_TYPE_*`) for the K and V caches; `None`: llama.cpp's default.
    pub kv_type: Option<sys::ggml_type>,
    /// `None`: llama.cpp decides per model and device.
    pub flash_attention: Option<bool>,
    /// One KV stream shared by all sequences (`true`) or one per sequence; `None`: llama.cpp's
    /// default.
    pub kv_unified: Option<bool>,
    /// Pooled embeddings instead of logits.
    pub embeddings: bool,
}

pub struct RawContext<'m> {
    context: NonNull<sys::llama_context>,
    n_vocab: usize,
    _model: PhantomData<&'m RawModel>,
}

// SAFETY: a context is used by one thread at a time (it is not `Sync`); llama.cpp allows moving
// it between threads.
unsafe impl Send for RawContext<'_> {}

impl Drop for RawContext<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `llama_init_from_model` and freed exactly once, before its model.
        unsafe { sys::llama_free(self.context.as_ptr()) };
    }
}

impl<'m> RawContext<'m> {
    pub fn new(model: &'m RawModel, settings: &ContextSettings) -> Result<Self, LlmError> {
        // SAFETY: a plain C call that returns a struct by value.
        let mut params = unsafe { sys::llama_context_default_params() };
        params.n_ctx = settings.n_ctx;
        params.n_batch = settings.batch;
        params.n_ubatch = settings.batch;
        params.n_seq_max = settings.sequences;
        params.n_threads = settings.threads;
        params.n_threads_batch = settings.threads;
        if let Some(kv_type) = settings.kv_type {
            params.type_k = kv_type;
            params.type_v = kv_type;
        }
        if let Some(flash_attention) = settings.flash_attention {
            params.flash_attn_type =
                if flash_attention { sys::LLAMA_FLASH_ATTN_TYPE_ENABLED } else { sys::LLAMA_FLASH_ATTN_TYPE_DISABLED };
        }
        if let Some(kv_unified) = settings.kv_unified {
            params.kv_unified = kv_unified;
        }
        params.embeddings = settings.embeddings;
        // SAFETY: the model is alive for 'm, which this context cannot outlive.
        let context = unsafe { sys::llama_init_from_model(model.as_ptr(), params) };
        let context = NonNull::new(context).ok_or_else(|| {
            LlmError::Context(format!(
                "llama.cpp could not create a context of {} tokens for {} sequences (out of memory?)",
                settings.n_ctx, settings.sequences
            ))
        })?;
        Ok(Self { context, n_vocab: model.n_tokens() as usize, _model: PhantomData })
    }

    /// For the threadpool, which llama.cpp attaches to and tunes through the context.
    pub(in crate::llm) fn as_ptr(&mut self) -> *mut sys::llama_context {
        self.context.as_ptr()
    }

    pub fn n_ctx(&self) -> u32 {
        // SAFETY: a query of the live context.
        unsafe { sys::llama_n_ctx(self.context.as_ptr()) }
    }

    /// Decodes `batch`; its tokens, positions and sequence ids must be in range (the callers
    /// check them: llama.cpp aborts on some out-of-range ids instead of returning).
    pub fn decode(&mut self, batch: &RawBatch) -> Result<(), LlmError> {
        // SAFETY: the batch's arrays are owned by `batch` and hold `n_tokens` entries.
        let status = unsafe { sys::llama_decode(self.context.as_ptr(), batch.as_llama()) };
        match status {
            0 => Ok(()),
            1 => Err(LlmError::Decode("no room in the KV cache for this batch".into())),
            2 => Err(LlmError::Decode("the decode was aborted".into())),
            -1 => Err(LlmError::Decode("llama.cpp refused the batch as invalid".into())),
            other => Err(LlmError::Decode(format!("llama.cpp's decode failed with status {other}"))),
        }
    }

    /// The logits at row `row` of the last decode (a row that asked for logits).
    pub fn logits(&self, row: i32) -> Result<&[f32], LlmError> {
        // SAFETY: llama.cpp checks the row and returns null for one without logits.
        let logits = unsafe { sys::llama_get_logits_ith(self.context.as_ptr(), row) };
        if logits.is_null() {
            return Err(LlmError::Decode(format!("no logits at row {row} of the last batch")));
        }
        // SAFETY: a non-null row holds `n_vocab` floats, valid until the next decode, which
        // needs `&mut self` while this borrow of `self` lives.
        Ok(unsafe { std::slice::from_raw_parts(logits, self.n_vocab) })
    }

    /// The pooled embedding of sequence `seq` from the last decode (an embeddings context).
    pub fn pooled_embedding(&self, seq: i32) -> Option<&[f32]> {
        // SAFETY: queries of the live context and its model.
        let width = unsafe {
            let model = sys::llama_get_model(self.context.as_ptr());
            if sys::llama_pooling_type(self.context.as_ptr()) == sys::LLAMA_POOLING_TYPE_RANK {
                sys::llama_model_n_cls_out(model) as usize
            } else {
                sys::llama_model_n_embd_out(model).max(0) as usize
            }
        };
        // SAFETY: llama.cpp returns null when the sequence has no pooled embedding.
        let vector = unsafe { sys::llama_get_embeddings_seq(self.context.as_ptr(), seq) };
        // SAFETY: a non-null pooled embedding holds the output width's floats (classifier
        // outputs for rank pooling, `n_embd_out` otherwise) until the next decode.
        (!vector.is_null()).then(|| unsafe { std::slice::from_raw_parts(vector, width) })
    }

    /// Removes positions `from..to` (`None`: unbounded) of `seq` (`None`: every sequence) from
    /// the KV memory. `false` when the memory cannot drop part of a sequence (recurrent models).
    pub fn remove(&mut self, seq: Option<u32>, from: Option<u32>, to: Option<u32>) -> bool {
        let id = |v: Option<u32>| v.map_or(-1, |v| i32::try_from(v).unwrap_or(i32::MAX));
        // SAFETY: the memory belongs to the live context; llama.cpp checks the sequence id.
        unsafe {
            let memory = sys::llama_get_memory(self.context.as_ptr());
            sys::llama_memory_seq_rm(memory, id(seq), id(from), id(to))
        }
    }

    /// Empties the KV memory of every sequence.
    pub fn clear_all(&mut self) {
        // SAFETY: the memory belongs to the live context.
        unsafe { sys::llama_memory_clear(sys::llama_get_memory(self.context.as_ptr()), true) };
    }

    /// The KV cells of `seq` as bytes.
    pub fn save_sequence(&mut self, seq: u32) -> Result<Vec<u8>, LlmError> {
        let seq = seq as i32;
        // SAFETY: a size query of the live context.
        let size = unsafe { sys::llama_state_seq_get_size_ext(self.context.as_ptr(), seq, 0) };
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` is writable for the size llama.cpp asked for.
        let written = unsafe { sys::llama_state_seq_get_data_ext(self.context.as_ptr(), bytes.as_mut_ptr(), size, seq, 0) };
        if written != size {
            return Err(LlmError::State(format!("llama.cpp wrote {written} of {size} state bytes")));
        }
        Ok(bytes)
    }

    /// Loads `state` (from [`RawContext::save_sequence`]) into `seq`; `false` when it does not
    /// fit this context (another model, KV type or size).
    pub fn restore_sequence(&mut self, seq: u32, state: &[u8]) -> bool {
        // SAFETY: llama.cpp reads at most `state.len()` bytes and checks the layout it reads
        // (sizes, layer count, cell count) before using it; it returns 0 on any mismatch.
        unsafe { sys::llama_state_seq_set_data_ext(self.context.as_ptr(), state.as_ptr(), state.len(), seq as i32, 0) != 0 }
    }
}
