//! Sentence embeddings on llama.cpp: a context with embeddings on and the GGUF's own pooling
//! (mean, cls or last), many inputs decoded in one batch (one sequence each), vectors
//! L2-normalized where the model's sentence-transformers head normalizes.
//!
//! Key types: [`Embedder`] (one context; lives on one thread), [`EmbedderParams`].
//! Cost: one forward pass per batch of up to `batch_tokens` tokens / `sequences` inputs; a
//! BERT encoder keeps no KV cache, so the context is small (activations only).

use super::ffi::{ContextSettings, RawBatch, RawContext};
use super::{LlmError, Model};
use crate::gguf::convert::NORMALIZE_KEY;

/// Sizes of an embedding context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderParams {
    /// Tokens one forward pass may carry (all inputs of the pass together).
    pub batch_tokens: u32,
    /// Inputs one forward pass may carry.
    pub sequences: u32,
    pub threads: i32,
}

impl Default for EmbedderParams {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
        Self {
            batch_tokens: 2048,
            sequences: 64,
            threads,
        }
    }
}

/// An embedding context on one model.
pub struct Embedder<'m> {
    inner: RawContext<'m>,
    batch: RawBatch,
    params: EmbedderParams,
    normalize: bool,
    max_input_tokens: usize,
    dimensions: usize,
    n_vocab: usize,
}

impl Model {
    /// Whether the model's sentence-transformers head L2-normalizes its output (recorded by
    /// `llamay import`); false for GGUFs made elsewhere, which say nothing about it.
    pub fn normalizes_embeddings(&self) -> bool {
        self.raw().metadata(NORMALIZE_KEY).is_some_and(|v| v == "true")
    }

    /// Whether the model is an encoder made for embeddings (it has a pooling type and
    /// bidirectional attention) rather than a chat model.
    pub fn is_embedding_model(&self) -> bool {
        let arch = self.architecture();
        self.raw().metadata(&format!("{arch}.pooling_type")).is_some()
            || self.raw().metadata(&format!("{arch}.attention.causal")).is_some_and(|v| v == "false")
    }

    /// An embedding context on this model; create and use it on one thread.
    pub fn new_embedder(&self, params: &EmbedderParams) -> Result<Embedder<'_>, LlmError> {
        Embedder::new(self, params)
    }
}

impl<'m> Embedder<'m> {
    fn new(model: &'m Model, params: &EmbedderParams) -> Result<Self, LlmError> {
        if params.sequences == 0
            || params.sequences > 256
            || params.batch_tokens < 16
            || params.threads <= 0
        {
            return Err(LlmError::Config(format!(
                "embedding batch of {} tokens / {} inputs / {} threads out of range",
                params.batch_tokens, params.sequences, params.threads
            )));
        }
        // A non-causal encoder must see each input whole in one micro-batch, so the
        // micro-batch is the batch.
        let settings = ContextSettings {
            n_ctx: params.batch_tokens,
            batch: params.batch_tokens,
            sequences: params.sequences,
            threads: params.threads,
            kv_type: None,
            flash_attention: None,
            kv_unified: None,
            embeddings: true,
        };
        let inner = RawContext::new(model.raw(), &settings)?;
        let max_input_tokens = (model.context_train() as usize).min(params.batch_tokens as usize);
        Ok(Self {
            inner,
            batch: RawBatch::new(params.batch_tokens as usize),
            params: params.clone(),
            normalize: model.normalizes_embeddings(),
            max_input_tokens,
            dimensions: model.raw().embedding_width(),
            n_vocab: model.vocabulary().len(),
        })
    }

    /// The longest input (in tokens, specials included) one vector can cover.
    pub fn max_input_tokens(&self) -> usize {
        self.max_input_tokens
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    /// One vector per input, in order. Inputs are packed into as few forward passes as the
    /// batch allows. An empty or over-long input is an error naming its index.
    pub fn embed(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, LlmError> {
        for (index, tokens) in inputs.iter().enumerate() {
            if tokens.is_empty() {
                return Err(LlmError::Decode(format!("input {index} has no tokens")));
            }
            if tokens.len() > self.max_input_tokens {
                return Err(LlmError::Decode(format!(
                    "input {index} has {} tokens; the model embeds at most {}",
                    tokens.len(),
                    self.max_input_tokens
                )));
            }
            if let Some(bad) = tokens.iter().find(|&&t| t as usize >= self.n_vocab) {
                return Err(LlmError::Decode(format!(
                    "input {index}: token {bad} is outside the vocabulary"
                )));
            }
        }
        let mut vectors = Vec::with_capacity(inputs.len());
        let mut start = 0;
        while start < inputs.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < inputs.len()
                && end - start < self.params.sequences as usize
                && tokens + inputs[end].len() <= self.params.batch_tokens as usize
            {
                tokens += inputs[end].len();
                end += 1;
            }
            vectors.extend(self.embed_pass(&inputs[start..end])?);
            start = end;
        }
        Ok(vectors)
    }

    fn embed_pass(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, LlmError> {
        // Decoder models used for embeddings keep a KV cache; every pass starts from empty.
        self.inner.clear_all();
        self.batch.clear();
        for (seq, tokens) in inputs.iter().enumerate() {
            for (pos, token) in tokens.iter().enumerate() {
                self.batch.push(*token, pos as i32, seq as i32, true)?;
            }
        }
        self.inner.decode(&self.batch)?;
        (0..inputs.len())
            .map(|seq| {
                let pooled = self.inner.pooled_embedding(seq as i32).ok_or_else(|| {
                    LlmError::Decode(
                        "the model gave no pooled embedding (its pooling type is none)".into(),
                    )
                })?;
                let mut vector = pooled.to_vec();
                if self.normalize {
                    l2_normalize(&mut vector);
                }
                Ok(vector)
            })
            .collect()
    }
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn l2_normalize(vector: &mut [f32]) {
    let norm = vector
        .iter()
        .map(|v| (*v as f64) * (*v as f64))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        vector
            .iter_mut()
            .for_each(|v| *v = (*v as f64 / norm) as f32);
    }
}
