//! The estimate's arithmetic on synthetic GGUF headers: which layers move first, what a layer
//! costs with each KV type, and how many layers fit a given room. (The estimate against the
//! buffers llama.cpp really allocates is `tests/it/offload_estimate.rs`.)

use super::*;
use crate::gguf::testing::{GgufBuilder, TestValue, GGML_F32};
use crate::llm::KvType;

const N_LAYER: u32 = 4;

/// A llama-shaped header: 4 layers of 64-wide f32 weights, 2 KV heads of 16, vocab 3, an
/// output layer of its own.
fn shape(extra: impl FnOnce(GgufBuilder) -> GgufBuilder) -> ModelShape {
    shape_with_output(true, extra)
}

fn shape_with_output(output: bool, extra: impl FnOnce(GgufBuilder) -> GgufBuilder) -> ModelShape {
    let mut builder = GgufBuilder::llama_like()
        .kv("llama.block_count", TestValue::U32(N_LAYER))
        .kv("llama.embedding_length", TestValue::U32(64))
        .kv("llama.feed_forward_length", TestValue::U32(128))
        .kv("llama.attention.head_count", TestValue::U32(4))
        .kv("llama.attention.head_count_kv", TestValue::U32(2));
    for layer in 0..N_LAYER {
        builder = builder
            .tensor(&format!("blk.{layer}.attn_q.weight"), &[64, 64], GGML_F32)
            .tensor(&format!("blk.{layer}.ffn_gate.weight"), &[64, 128], GGML_F32);
    }
    if output {
        builder = builder.tensor("output.weight", &[64, 3], GGML_F32);
    }
    let builder = extra(builder);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.gguf");
    builder.write_to(&path);
    ModelShape::read(&path).expect("the header parses")
}

fn params(kv_type: KvType, flash_attention: bool) -> EstimateParams {
    EstimateParams { n_ctx: 512, sequences: 2, ubatch: 32, kv_type, flash_attention }
}

#[test]
fn the_header_gives_the_shape() {
    let shape = shape(|b| b);
    assert_eq!((shape.architecture.as_str(), shape.n_layer, shape.n_embd, shape.n_ff), ("llama", 4, 64, 128));
    assert_eq!((shape.n_head, shape.key_length, shape.value_length, shape.n_vocab), (4, 16, 16, 3));
    assert_eq!(shape.n_head_kv, vec![2; 4]);
    assert!(shape.gated_ffn && !shape.encoder);
    let layer = (64 * 64 + 64 * 128) * 4;
    assert_eq!(shape.blocks.per_block, vec![layer, layer, layer, layer, 64 * 4 + 64 * 3 * 4]);
}

#[test]
fn per_layer_kv_heads_and_encoders_are_read() {
    let varied = shape(|b| b.kv("llama.attention.head_count_kv", TestValue::U32Array(vec![1, 2, 0, 4])));
    assert_eq!(varied.n_head_kv, vec![1, 2, 0, 4]);
    let estimate = MemoryEstimate::new(&varied, &params(KvType::F16, true));
    // 512 cells, K and V of 16 each, 2 bytes an element, per KV head.
    let per_head = 512 * 32 * 2;
    assert_eq!(estimate.layer_kv, vec![per_head, 2 * per_head, 0, 4 * per_head, 0]);
    let encoder = shape(|b| b.kv("llama.attention.causal", TestValue::Bool(false)));
    assert!(encoder.encoder);
    let estimate = MemoryEstimate::new(&encoder, &params(KvType::F16, true));
    assert_eq!(estimate.kv(), 0, "an encoder keeps no KV cache");
    assert_eq!(estimate.graph_logits, 0, "an encoder has no language-model head");
}

#[test]
fn kv_type_and_flash_attention_size_the_cache_and_the_graph() {
    let shape = shape(|b| b);
    let per_layer = |kv| MemoryEstimate::new(&shape, &params(kv, true)).layer_kv[0];
    // 512 cells × 2 heads × (16 + 16) elements.
    let elements = 512 * 2 * 32;
    assert_eq!(per_layer(KvType::F32), elements * 4);
    assert_eq!(per_layer(KvType::F16), elements * 2);
    assert_eq!(per_layer(KvType::Q8_0), elements / 32 * 34);
    assert_eq!(per_layer(KvType::Q4_0), elements / 32 * 18);
    let fused = MemoryEstimate::new(&shape, &params(KvType::F16, true));
    let unfused = MemoryEstimate::new(&shape, &params(KvType::F16, false));
    // Each of 32 tokens scores its sequence's 256 cells in each of 4 heads, as f32, beside an
    // f16 mask; the buffer holds those scores or the logits, whichever is larger.
    let scores = 32 * 256 * (4 * 4 + 2);
    assert_eq!(fused.graph_logits, 32 * 3 * 4);
    assert_eq!(unfused.graph - fused.graph, scores - fused.graph_logits);
}

#[test]
fn the_output_layer_moves_first_then_the_last_layers() {
    let estimate = MemoryEstimate::new(&shape(|b| b), &params(KvType::F16, true));
    let layers = estimate.offloadable_layers();
    assert_eq!(layers, N_LAYER + 1);
    let cpu = estimate.split(0);
    assert_eq!((cpu.device_bytes, cpu.host_bytes), (0, estimate.total()));
    let output_only = estimate.split(1);
    assert_eq!(output_only.device_bytes, estimate.layer_weights[4] + estimate.graph);
    let two = estimate.split(2);
    assert_eq!(two.device_bytes - output_only.device_bytes, estimate.layer_weights[3] + estimate.layer_kv[3]);
    let all = estimate.split(layers);
    assert_eq!(estimate.split(layers + 10), all, "asking more than there are offloads all");
    // On full offload only the token embeddings and the output buffer stay on the host.
    assert_eq!(all.host_bytes, estimate.input_weights + estimate.output_buffer);
    assert_eq!(all.device_bytes + all.host_bytes, estimate.total());
    // Split, both sides keep a compute buffer: the host's without the logits.
    assert_eq!(two.device_bytes + two.host_bytes, estimate.total() + estimate.graph - estimate.graph_logits);
    for n in 1..layers {
        let split = estimate.split(n);
        assert!(split.device_bytes < estimate.split(n + 1).device_bytes);
        assert!(split.host_bytes > estimate.split(n + 1).host_bytes || n + 1 == layers);
    }
}

#[test]
fn tied_embeddings_are_copied_to_the_device_only() {
    let tied = shape_with_output(false, |b| b);
    // llama_like's token embeddings: 64 × 8 in Q4_1 (20 bytes a block of 32).
    let embeddings = 64 * 8 / 32 * 20;
    assert_eq!(tied.tied_output, embeddings);
    assert_eq!(*tied.blocks.per_block.last().unwrap(), 64 * 4, "the output layer keeps its norm only");
    let estimate = MemoryEstimate::new(&tied, &params(KvType::F16, true));
    assert_eq!(estimate.weights(), estimate.input_weights + estimate.layer_weights.iter().sum::<u64>());
    assert_eq!(estimate.input_weights, embeddings, "the host holds them once");
    let output_only = estimate.split(1);
    assert_eq!(output_only.device_bytes, 64 * 4 + embeddings + estimate.graph);
    assert_eq!(shape(|b| b).tied_output, 0);
}

#[test]
fn most_layers_within_a_room() {
    let estimate = MemoryEstimate::new(&shape(|b| b), &params(KvType::F16, true));
    let all = estimate.split(estimate.offloadable_layers());
    assert_eq!(estimate.most_layers_within(u64::MAX), all);
    assert_eq!(estimate.most_layers_within(all.device_bytes), all);
    assert_eq!(estimate.most_layers_within(all.device_bytes - 1).layers, estimate.offloadable_layers() - 1);
    let three = estimate.split(3);
    assert_eq!(estimate.most_layers_within(three.device_bytes + 1), three);
    assert_eq!(estimate.most_layers_within(estimate.split(1).device_bytes - 1).layers, 0);
    assert_eq!(estimate.most_layers_within(0), estimate.split(0));
}

#[test]
fn a_file_that_is_not_gguf_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("not.gguf");
    std::fs::write(&path, b"not a model").expect("write");
    let error = estimate(&path, &params(KvType::F16, true)).expect_err("refused");
    assert!(error.to_string().contains("not.gguf"), "{error}");
}
