//! One llama.cpp context: the KV cache of up to `sequences` parallel sequences and batched decode.
//!
//! A context borrows its model and is not `Sync`: it lives on the one thread that decodes.
//! Sequence ids are checked here, before llama.cpp sees them, because an out-of-range id aborts
//! the process inside llama.cpp rather than returning an error.
//! Key types: [`ContextParams`], [`Context`], [`SeqId`], [`BatchEntry`], [`LogitsRow`].
//! Cost: the KV cache is allocated once at creation (n_ctx × layers × width × kv type size).

use std::str::FromStr;

use llama_cpp_sys_2 as sys;

use super::ffi::{ContextSettings, RawBatch, RawContext};
use super::threadpool::{CpuThreadpool, ThreadTuner};
use super::{LlmError, Model};

/// The KV cache's element type (`-kv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    F32,
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            "q4_0" => Ok(KvType::Q4_0),
            other => Err(format!("unknown kv cache type {other:?}; use f32, f16, q8_0 or q4_0")),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        })
    }
}

impl KvType {
    fn to_ggml(self) -> sys::ggml_type {
        match self {
            KvType::F32 => sys::GGML_TYPE_F32,
            KvType::F16 => sys::GGML_TYPE_F16,
            KvType::Q8_0 => sys::GGML_TYPE_Q8_0,
            KvType::Q4_0 => sys::GGML_TYPE_Q4_0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContextParams {
    /// Total context, shared by all sequences (each gets `n_ctx / sequences`).
    pub n_ctx: u32,
    pub threads: i32,
    /// Most tokens in one decode call.
    pub batch: u32,
    pub sequences: u32,
    pub kv_type: KvType,
    /// llama.cpp's fused attention kernel (`-flash-attn`), used for prompt and generation.
    pub flash_attention: bool,
}

impl Default for ContextParams {
    fn default() -> Self {
        Self { n_ctx: 4096, threads: 2, batch: 512, sequences: 1, kv_type: KvType::F16, flash_attention: true }
    }
}

/// A sequence slot in a context, known to be in range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqId(u32);

impl SeqId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Tokens of one sequence to decode in a batch, starting at position `first_pos`.
#[derive(Debug, Clone, Copy)]
pub struct BatchEntry<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    pub first_pos: u32,
    /// How many of the last tokens want their logits: 1 when a token is sampled next, more
    /// when drafted tokens are verified, 0 for a prompt chunk that does not end the prompt.
    pub logits: usize,
}

/// Where a decoded entry's logits are; only handed out for rows that asked for logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogitsRow(i32);

pub struct Context<'m> {
    inner: RawContext<'m>,
    batch: RawBatch,
    params: ContextParams,
    n_vocab: usize,
    /// Declared after `inner` so they are freed after the context that computes on them.
    threads: ThreadTuner,
    _threadpool: CpuThreadpool,
}

impl<'m> Context<'m> {
    pub(super) fn new(model: &'m Model, params: &ContextParams) -> Result<Self, LlmError> {
        if params.sequences == 0 || params.sequences > 64 {
            return Err(LlmError::Config(format!(
                "parallel sequences must be between 1 and 64, got {}",
                params.sequences
            )));
        }
        if params.n_ctx < 16 || params.batch == 0 || params.threads <= 0 {
            return Err(LlmError::Config(format!(
                "context {} / batch {} / threads {} out of range",
                params.n_ctx, params.batch, params.threads
            )));
        }
        let settings = ContextSettings {
            n_ctx: params.n_ctx,
            batch: params.batch,
            sequences: params.sequences,
            threads: params.threads,
            kv_type: Some(params.kv_type.to_ggml()),
            flash_attention: Some(params.flash_attention),
            // One KV stream per sequence, as llama-server runs its slots: a sequence's attention
            // then spans only its own cells. With one shared stream, every step attended over
            // the cells of all sequences, including the prefixes idle ones keep for reuse: one
            // client decoded 15% slower after four had run.
            kv_unified: Some(false),
            embeddings: false,
        };
        let mut inner = RawContext::new(model.raw(), &settings)?;
        let threadpool = CpuThreadpool::new(params.threads)?;
        let threads = threadpool.attach(&mut inner);
        Ok(Self {
            inner,
            batch: RawBatch::new(params.batch as usize),
            params: params.clone(),
            n_vocab: model.vocabulary().len(),
            threads,
            _threadpool: threadpool,
        })
    }

    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// Context length each sequence may use.
    pub fn per_sequence_ctx(&self) -> u32 {
        self.inner.n_ctx() / self.params.sequences
    }

    pub fn batch_capacity(&self) -> usize {
        self.params.batch as usize
    }

    /// The slot `index`, if the context has that many sequences.
    pub fn seq(&self, index: usize) -> Option<SeqId> {
        (index < self.params.sequences as usize).then_some(SeqId(index as u32))
    }

    /// Decodes all entries in one llama.cpp call. Returns, per entry, the rows of the logits it
    /// asked for, in token order.
    pub fn decode(&mut self, entries: &[BatchEntry<'_>]) -> Result<Vec<Vec<LogitsRow>>, LlmError> {
        self.decode_rows(entries, |_, entry, token| token + entry.logits >= entry.tokens.len())
    }

    /// Decodes all entries in one llama.cpp call with the logits of every token of entry `i`
    /// from its token `from[i]` on (the logits after token `k` predict token `k + 1`), to score
    /// how likely a text is rather than to sample. Returns, per entry, those rows in order.
    pub fn decode_scoring(&mut self, entries: &[BatchEntry<'_>], from: &[usize]) -> Result<Vec<Vec<LogitsRow>>, LlmError> {
        if from.len() != entries.len() {
            return Err(LlmError::Decode(format!("{} entries but {} scoring offsets", entries.len(), from.len())));
        }
        self.decode_rows(entries, |at, _, token| token >= from[at])
    }

    /// One decode, with logits for token `t` of entry `e` when `wanted(e, &entries[e], t)`;
    /// their rows per entry.
    fn decode_rows(
        &mut self,
        entries: &[BatchEntry<'_>],
        wanted: impl Fn(usize, &BatchEntry<'_>, usize) -> bool,
    ) -> Result<Vec<Vec<LogitsRow>>, LlmError> {
        let total: usize = entries.iter().map(|e| e.tokens.len()).sum();
        if total == 0 {
            return Ok(vec![Vec::new(); entries.len()]);
        }
        if total > self.batch_capacity() {
            return Err(LlmError::Decode(format!(
                "{total} tokens do not fit a batch of {}",
                self.batch_capacity()
            )));
        }
        self.batch.clear();
        let mut rows = Vec::with_capacity(entries.len());
        let mut row = 0i32;
        for (at, entry) in entries.iter().enumerate() {
            if entry.seq.0 >= self.params.sequences {
                return Err(LlmError::Decode(format!("sequence {} out of range", entry.seq.0)));
            }
            let mut entry_rows = Vec::new();
            for (i, token) in entry.tokens.iter().enumerate() {
                if *token as usize >= self.n_vocab {
                    return Err(LlmError::Decode(format!("token {token} is outside the vocabulary")));
                }
                let logits = wanted(at, entry, i);
                let pos = entry.first_pos as i32 + i as i32;
                self.batch.push(*token, pos, entry.seq.0 as i32, logits)?;
                if logits {
                    entry_rows.push(LogitsRow(row));
                }
                row += 1;
            }
            rows.push(entry_rows);
        }
        let threads = self.threads.before_decode(total);
        let started = std::time::Instant::now();
        self.inner.decode(&self.batch)?;
        self.threads.after_decode(total, threads, started.elapsed().as_secs_f64());
        Ok(rows)
    }

    /// The logits of a row returned by the last [`Context::decode`].
    pub fn logits(&self, row: LogitsRow) -> Result<&[f32], LlmError> {
        self.inner.logits(row.0)
    }

    /// The most rows, up to `most`, one decode may hold while each row's logits stay
    /// bit-identical to decoding its token alone; 1 when even two rows differ. On a CPU the
    /// arithmetic of a row depends on its batch's size: llama.cpp switches to other matrix
    /// kernels at some row counts (tiled K-quant kernels at 8 rows, as built here), so a draft
    /// verified in a larger batch can tip a near tie the other way. A kernel whose rounding
    /// differs on some inputs only is not found here (why weights are not repacked, see
    /// `ffi::model`).
    /// Measured on sequence 0, which must be empty and is left empty: `tokens` after the first
    /// four are decoded one by one, then in batches of 2, 3, ... rows from the same start, until
    /// a row differs. Cost: about `2 × most` decodes of the model; call once per context.
    pub fn exact_rows(&mut self, tokens: &[u32], most: usize) -> Result<usize, LlmError> {
        const PREFIX: usize = 4;
        let seq = SeqId(0);
        let rows = &tokens[PREFIX.min(tokens.len())..];
        let most = most.min(rows.len()).min(self.batch_capacity());
        if most < 2 {
            return Ok(1);
        }
        let result = self.measure_exact_rows(seq, &tokens[..PREFIX], &rows[..most]);
        self.clear(seq);
        result
    }

    fn measure_exact_rows(&mut self, seq: SeqId, prefix: &[u32], rows: &[u32]) -> Result<usize, LlmError> {
        self.clear(seq);
        let start = prefix.len() as u32;
        self.decode(&[BatchEntry { seq, tokens: prefix, first_pos: 0, logits: 0 }])?;
        let mut alone = Vec::with_capacity(rows.len());
        for (at, token) in rows.iter().enumerate() {
            let decoded = self.decode(&[BatchEntry { seq, tokens: std::slice::from_ref(token), first_pos: start + at as u32, logits: 1 }])?;
            alone.push(self.logits(decoded[0][0])?.to_vec());
        }
        for count in 2..=rows.len() {
            if !self.truncate(seq, start) {
                // Memory that cannot be cut back (recurrent models) cannot be measured.
                return Ok(1);
            }
            let decoded = self.decode(&[BatchEntry { seq, tokens: &rows[..count], first_pos: start, logits: count }])?;
            for (row, expected) in decoded[0].iter().zip(&alone) {
                let same = self.logits(*row)?.iter().zip(expected).all(|(a, b)| a.to_bits() == b.to_bits());
                if !same {
                    return Ok(count - 1);
                }
            }
        }
        Ok(rows.len())
    }

    /// Forgets everything sequence `seq` holds, so the slot can serve a new request.
    pub fn clear(&mut self, seq: SeqId) {
        // The id was range-checked when the SeqId was made; removing a whole sequence always
        // succeeds, so the result (whether part of one could be cut) says nothing here.
        self.inner.remove(Some(seq.0), None, None);
    }
}

impl Context<'_> {
    /// Keeps the first `length` positions of `seq` and drops the rest. `false` when llama.cpp
    /// cannot cut this model's memory part way (recurrent models); the sequence is then empty.
    pub fn truncate(&mut self, seq: SeqId, length: u32) -> bool {
        let kept = self.inner.remove(Some(seq.0), Some(length), None);
        if !kept {
            self.clear(seq);
        }
        kept
    }

    /// Makes `to` hold the first `length` positions of `from`. `to` is cleared first. Each
    /// sequence has its own KV stream, and llama.cpp's own copy between streams is whole-stream
    /// and deferred to the next decode, so a change to `from` before then would land in `to`;
    /// the cells of `from` are copied now instead, through its saved state, and cut back to
    /// `length`. Cost: a copy of `from`'s cells (tens of KiB per position).
    pub fn copy_prefix(&mut self, from: SeqId, to: SeqId, length: u32) -> Result<(), LlmError> {
        self.clear(to);
        if length == 0 || from == to {
            return Ok(());
        }
        let state = self.save_sequence(from)?;
        self.restore_sequence(to, &state)?;
        if self.truncate(to, length) {
            Ok(())
        } else {
            Err(LlmError::State(format!("could not cut the copied sequence back to {length} positions")))
        }
    }

    /// The state of `seq` (its KV cells) as bytes, to keep in memory or on disk.
    pub fn save_sequence(&mut self, seq: SeqId) -> Result<Vec<u8>, LlmError> {
        self.inner.save_sequence(seq.0)
    }

    /// Replaces what `seq` holds with state saved by [`Context::save_sequence`] on a context of
    /// the same model and settings. On failure the sequence is left empty.
    pub fn restore_sequence(&mut self, seq: SeqId, state: &[u8]) -> Result<(), LlmError> {
        self.clear(seq);
        if !self.inner.restore_sequence(seq.0, state) {
            self.clear(seq);
            return Err(LlmError::State(
                "the saved state does not fit this model's context (another model, KV type or size)".into(),
            ));
        }
        Ok(())
    }
}
