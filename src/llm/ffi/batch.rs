//! A `llama_batch` of single-sequence tokens, allocated once and refilled for every decode.

use llama_cpp_sys_2 as sys;

use crate::llm::LlmError;

pub struct RawBatch {
    batch: sys::llama_batch,
    capacity: usize,
}

// SAFETY: the batch's arrays are owned by this value and only touched through `&mut self`.
unsafe impl Send for RawBatch {}

impl Drop for RawBatch {
    fn drop(&mut self) {
        // SAFETY: allocated by `llama_batch_init` and freed exactly once.
        unsafe { sys::llama_batch_free(self.batch) };
    }
}

impl RawBatch {
    /// Room for `capacity` tokens, each in one sequence.
    pub fn new(capacity: usize) -> Self {
        let size = i32::try_from(capacity.max(1)).unwrap_or(i32::MAX);
        // SAFETY: allocates `size` entries of each array, one sequence id each.
        let batch = unsafe { sys::llama_batch_init(size, 0, 1) };
        Self { batch, capacity: size as usize }
    }

    pub fn clear(&mut self) {
        self.batch.n_tokens = 0;
    }

    pub fn len(&self) -> usize {
        self.batch.n_tokens as usize
    }

    pub fn is_empty(&self) -> bool {
        self.batch.n_tokens == 0
    }

    /// Appends `token` at `pos` of sequence `seq`; `logits` asks for its row of logits.
    pub fn push(&mut self, token: u32, pos: i32, seq: i32, logits: bool) -> Result<(), LlmError> {
        let at = self.len();
        if at >= self.capacity {
            return Err(LlmError::Decode(format!("a batch holds at most {} tokens", self.capacity)));
        }
        // SAFETY: `at` is below the capacity `llama_batch_init` allocated for every array, and
        // each entry's sequence-id array holds one id.
        unsafe {
            *self.batch.token.add(at) = token as i32;
            *self.batch.pos.add(at) = pos;
            *self.batch.n_seq_id.add(at) = 1;
            *(*self.batch.seq_id.add(at)) = seq;
            *self.batch.logits.add(at) = i8::from(logits);
        }
        self.batch.n_tokens += 1;
        Ok(())
    }

    pub(super) fn as_llama(&self) -> sys::llama_batch {
        self.batch
    }
}
