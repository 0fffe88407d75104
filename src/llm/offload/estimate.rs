//! The memory a model will take, estimated from its GGUF header before it is loaded: the
//! weights of each layer (from the tensor table), the KV cache of each layer (cells × KV heads ×
//! head size × the cache type's size), the compute buffer llama.cpp reserves for one
//! micro-batch, and the host output buffer. Layers are numbered as llama.cpp offloads them:
//! repeating layers `0..n_layer`, then the output layer as layer `n_layer`; with `L` layers on
//! a device, the output layer goes first, then repeating layers from the last one down.
//!
//! Ollama's `llm/memory.go` makes the same kind of estimate; the compute-buffer terms here are
//! fitted to the buffers llama.cpp reports on this build (tests in `tests.rs` hold them to it).
//! Key types: [`ModelShape`], [`EstimateParams`], [`MemoryEstimate`]. Cost: one header parse.

use std::path::Path;

use super::blocks::BlockBytes;
use crate::gguf::{read_gguf_header, GgufHeader};
use crate::llm::KvType;

/// Architectures that encode without a KV cache (bidirectional attention over one input).
const ENCODER_ARCHITECTURES: &[&str] =
    &["bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "neo-bert", "eurobert", "t5encoder"];

/// llama.cpp rounds each KV stream up to a multiple of this many cells.
const KV_CELL_PADDING: u64 = 256;

/// The hyperparameters an estimate needs, read from a GGUF header.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelShape {
    pub architecture: String,
    pub n_layer: u32,
    pub n_embd: u64,
    /// Feed-forward width (the widest layer's, when it varies).
    pub n_ff: u64,
    pub n_head: u64,
    /// KV heads of each repeating layer.
    pub n_head_kv: Vec<u64>,
    pub key_length: u64,
    pub value_length: u64,
    pub n_vocab: u64,
    /// A gated feed-forward (gate and up projections) keeps three activations per token.
    pub gated_ffn: bool,
    /// An encoder (BERT and kin) keeps no KV cache and has no language-model head.
    pub encoder: bool,
    /// Made for embeddings (a pooling type, or bidirectional attention): loaded with an
    /// embedding context rather than a chat one.
    pub embedding: bool,
    /// The context it was trained on (`context_length`; 0 when absent).
    pub context_train: u64,
    /// A model whose output layer reuses the token embeddings (no `output.weight`): llama.cpp
    /// copies them to the device the output layer goes to; on the host they are shared.
    pub tied_output: u64,
    pub blocks: BlockBytes,
}

impl ModelShape {
    /// Reads the shape of the GGUF at `path`.
    pub fn read(path: &Path) -> Result<Self, String> {
        let header = read_gguf_header(path).map_err(|error| error.kind.to_string())?;
        Self::from_header(&header)
    }

    fn from_header(header: &GgufHeader) -> Result<Self, String> {
        let architecture = architecture(header)?;
        let key = |name: &str| format!("{architecture}.{name}");
        let n_layer = header.uint(&key("block_count")).ok_or("no block_count key")?;
        let n_layer = u32::try_from(n_layer).map_err(|_| format!("block_count {n_layer} is out of range"))?;
        let n_embd = header.uint(&key("embedding_length")).ok_or("no embedding_length key")?;
        let widest = |name: &str| header.uints(&key(name)).and_then(|v| v.into_iter().max());
        let n_head = widest("attention.head_count").unwrap_or(1).max(1);
        let head_dim = n_embd / n_head;
        let mut n_head_kv = header
            .uints(&key("attention.head_count_kv"))
            .unwrap_or_else(|| vec![n_head]);
        if n_head_kv.len() != n_layer as usize {
            n_head_kv = vec![n_head_kv.first().copied().unwrap_or(n_head); n_layer as usize];
        }
        let tensors = header.tensors();
        let gated_ffn = tensors.iter().any(|(name, _)| name.starts_with("blk.") && name.contains(".ffn_gate"));
        let n_vocab = header
            .array_len("tokenizer.ggml.tokens")
            .or_else(|| header.uint(&key("vocab_size")))
            .unwrap_or(0);
        let causal = header.flag(&key("attention.causal")).unwrap_or(true);
        let encoder = !causal || ENCODER_ARCHITECTURES.contains(&architecture.as_str());
        let mut blocks = BlockBytes::from_tensors(n_layer, tensors.iter().map(|(n, b)| (n.as_str(), *b)));
        // BlockBytes counts tied embeddings in the output layer, as a device would hold them;
        // here they are kept apart, since the host holds them once. An encoder has no head.
        let tied = if tensors.iter().any(|(name, _)| name == "output.weight") {
            0
        } else {
            tensors.iter().find(|(name, _)| name == "token_embd.weight").map_or(0, |(_, bytes)| *bytes)
        };
        if let Some(output) = blocks.per_block.last_mut() {
            *output = output.saturating_sub(tied);
        }
        Ok(ModelShape {
            encoder,
            tied_output: if encoder { 0 } else { tied },
            embedding: !causal || header.has(&key("pooling_type")),
            context_train: header.uint(&key("context_length")).unwrap_or(0),
            n_layer,
            n_embd,
            n_ff: widest("feed_forward_length").unwrap_or(4 * n_embd),
            n_head,
            n_head_kv,
            key_length: header.uint(&key("attention.key_length")).unwrap_or(head_dim),
            value_length: header.uint(&key("attention.value_length")).unwrap_or(head_dim),
            n_vocab,
            gated_ffn,
            blocks,
            architecture,
        })
    }
}

fn architecture(header: &GgufHeader) -> Result<String, String> {
    header
        .string("general.architecture")
        .map(str::to_string)
        .ok_or_else(|| "no general.architecture key".to_string())
}

/// The context a model will get, as far as memory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EstimateParams {
    /// Total context cells over all sequences.
    pub n_ctx: u32,
    pub sequences: u32,
    /// Tokens computed in one pass (the compute buffer is sized for a full one).
    pub ubatch: u32,
    pub kv_type: KvType,
    pub flash_attention: bool,
}

impl EstimateParams {
    /// The parameters of a chat context made with `params`.
    pub fn for_context(params: &crate::llm::ContextParams) -> Self {
        EstimateParams {
            n_ctx: params.n_ctx,
            sequences: params.sequences,
            ubatch: params.batch,
            kv_type: params.kv_type,
            flash_attention: params.flash_attention,
        }
    }
}

/// A model's memory by part, in bytes. See the module comment for the layer numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Token embeddings: llama.cpp keeps them on the host whatever is offloaded.
    pub input_weights: u64,
    /// Weights of each layer, the output layer last (`n_layer + 1` entries).
    pub layer_weights: Vec<u64>,
    /// Tied embeddings the output layer copies when it goes to a device ([`ModelShape::tied_output`]).
    pub output_copy: u64,
    /// KV cache of each layer (the output layer has none).
    pub layer_kv: Vec<u64>,
    /// The compute buffer for one full micro-batch, logits included.
    pub graph: u64,
    /// The part of `graph` that is the logits of a micro-batch (computed with the output layer).
    pub graph_logits: u64,
    /// Host buffer the outputs (logits, embeddings) are read from.
    pub output_buffer: u64,
}

/// What a model takes with `layers` of them on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Split {
    pub layers: u32,
    pub device_bytes: u64,
    pub host_bytes: u64,
}

impl MemoryEstimate {
    pub fn new(shape: &ModelShape, params: &EstimateParams) -> Self {
        let sequences = u64::from(params.sequences.max(1));
        let per_sequence = (u64::from(params.n_ctx) / sequences).max(1);
        let cells_per_sequence = per_sequence.div_ceil(KV_CELL_PADDING) * KV_CELL_PADDING;
        let cells = cells_per_sequence * sequences;
        let kv_bytes = |elements: u64| match params.kv_type {
            KvType::F32 => elements * 4,
            KvType::F16 => elements * 2,
            // Blocks of 32: 32 bytes + a f16 scale; 16 bytes + a f16 scale.
            KvType::Q8_0 => elements / 32 * 34,
            KvType::Q4_0 => elements / 32 * 18,
        };
        let mut layer_kv: Vec<u64> = shape
            .n_head_kv
            .iter()
            .map(|&heads| if shape.encoder { 0 } else { kv_bytes(cells * heads * (shape.key_length + shape.value_length)) })
            .collect();
        layer_kv.push(0);
        let ubatch = u64::from(params.ubatch.max(1));
        let float = 4;
        let head = !shape.encoder;
        let graph_logits = if head { ubatch * shape.n_vocab * float } else { 0 };
        let ffn_activations = if shape.gated_ffn { 3 } else { 2 } * shape.n_ff;
        let activations = ubatch * (ffn_activations + 2 * shape.n_embd) * float;
        // Without the fused kernel, the attention scores of a micro-batch are materialised:
        // each token against its sequence's cells (an encoder: against its micro-batch), in
        // f32 per head, beside their f16 mask.
        let scores = if params.flash_attention {
            0
        } else {
            let span = if shape.encoder { ubatch } else { cells_per_sequence };
            ubatch * span * (shape.n_head * float + 2)
        };
        let embeddings = if head { 0 } else { shape.n_embd };
        MemoryEstimate {
            input_weights: shape.blocks.input,
            layer_weights: shape.blocks.per_block.clone(),
            output_copy: shape.tied_output,
            layer_kv,
            // The scores live within a layer, the logits after the last: ggml's allocator reuses
            // one's memory for the other, so the buffer holds the larger.
            graph: activations + graph_logits.max(scores),
            graph_logits,
            output_buffer: sequences * (shape.n_vocab + embeddings) * float,
        }
    }

    /// Layers that can go to a device: the repeating ones and the output layer.
    pub fn offloadable_layers(&self) -> u32 {
        self.layer_weights.len() as u32
    }

    pub fn weights(&self) -> u64 {
        self.input_weights + self.layer_weights.iter().sum::<u64>()
    }

    pub fn kv(&self) -> u64 {
        self.layer_kv.iter().sum()
    }

    /// Everything, on the host alone.
    pub fn total(&self) -> u64 {
        self.weights() + self.kv() + self.graph + self.output_buffer
    }

    /// Where the bytes go with `layers` on a device (clamped to what can go).
    pub fn split(&self, layers: u32) -> Split {
        let layers = layers.min(self.offloadable_layers());
        let first_on_device = (self.offloadable_layers() - layers) as usize;
        let on_device: u64 = (first_on_device..self.layer_weights.len())
            .map(|layer| self.layer_weights[layer] + self.layer_kv[layer])
            .sum();
        let all = self.total();
        if layers == 0 {
            return Split { layers, device_bytes: 0, host_bytes: all };
        }
        // The device computes the micro-batch (logits included: the output layer goes first,
        // with its copy of tied embeddings); the host keeps a compute buffer for the layers it
        // still runs, none when all moved.
        let host_graph = if layers == self.offloadable_layers() { 0 } else { self.graph - self.graph_logits };
        let device_bytes = on_device + self.output_copy + self.graph;
        let host_bytes = all - on_device - self.graph + host_graph;
        Split { layers, device_bytes, host_bytes }
    }

    /// The most layers whose device part fits in `room` bytes (0 when not even one does).
    pub fn most_layers_within(&self, room: u64) -> Split {
        (0..=self.offloadable_layers())
            .rev()
            .map(|layers| self.split(layers))
            .find(|split| split.device_bytes <= room)
            .unwrap_or_else(|| self.split(0))
    }
}
