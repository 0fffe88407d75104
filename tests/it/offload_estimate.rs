//! The memory estimate made from a GGUF header before loading, held against the buffers
//! llama.cpp reports when it then loads the model and makes its context on this CPU (its own
//! log lines: `model buffer size`, `KV buffer size`, `compute buffer size`, `output buffer
//! size`). Tolerances: weights within 1% of the mapped model buffer, the KV cache within 1%,
//! the compute buffer within 8%, the whole within 10% of every buffer together (the CPU's
//! repacked copies of some quantized weights are the difference).

use std::sync::{Arc, Mutex};

use llamay::llm::embed::EmbedderParams;
use llamay::llm::offload::{estimate, EstimateParams, LayerPlacement, MemoryEstimate};
use llamay::llm::{ContextParams, KvType, Model};
use llamay::store::{ModelName, Store};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

const MIB: f64 = 1024.0 * 1024.0;

/// Collects llama.cpp's log lines (the `llama.cpp` target) on the thread it is set on.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != llamay::llm::LLAMA_LOG_TARGET {
            return;
        }
        struct Message(String);
        impl Visit for Message {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "message" {
                    self.0 = value.to_string();
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && self.0.is_empty() {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if let Ok(mut lines) = self.0.lock() {
            lines.push(message.0);
        }
    }
}

/// What llama.cpp allocated, in MiB, read off its log.
#[derive(Debug, Default)]
struct Reported {
    mapped_weights: f64,
    all_weights: f64,
    kv: f64,
    compute: f64,
    output: f64,
}

impl Reported {
    fn parse(lines: &[String]) -> Self {
        let mib = |line: &str| -> f64 {
            let after = line.rsplit_once('=').map_or("", |(_, after)| after);
            after.trim().trim_end_matches("MiB").trim().parse().unwrap_or(0.0)
        };
        let mut reported = Reported::default();
        for line in lines {
            if line.contains("model buffer size =") {
                reported.all_weights += mib(line);
                if line.contains("CPU_Mapped") {
                    reported.mapped_weights += mib(line);
                }
            } else if line.contains("KV buffer size =") {
                reported.kv += mib(line);
            } else if line.contains("compute buffer size =") {
                reported.compute += mib(line);
            } else if line.contains("output buffer size =") {
                reported.output += mib(line);
            }
        }
        reported
    }

    fn total(&self) -> f64 {
        self.all_weights + self.kv + self.compute + self.output
    }
}

fn model_path(name: &str) -> std::path::PathBuf {
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store.resolve(&ModelName::parse(name).unwrap()).expect("model imported by scripts/setup");
    store.blob_path(&manifest)
}

/// Runs `load` with llama.cpp's log captured, returns what it reported.
fn reported_by(load: impl FnOnce()) -> Reported {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    tracing::subscriber::with_default(subscriber, load);
    let lines = captured.0.lock().expect("log lines").clone();
    let reported = Reported::parse(&lines);
    let buffers: Vec<&String> = lines.iter().filter(|l| l.contains("buffer size")).collect();
    assert!(reported.mapped_weights > 0.0, "llama.cpp's buffer lines were not read: {buffers:?}");
    reported
}

fn within(what: &str, estimated: u64, reported_mib: f64, tolerance: f64) {
    let estimated = estimated as f64 / MIB;
    let off = (estimated - reported_mib).abs() / reported_mib.max(f64::MIN_POSITIVE);
    eprintln!("{what}: estimated {estimated:.2} MiB, llama.cpp {reported_mib:.2} MiB ({:+.1}%)", (estimated / reported_mib - 1.0) * 100.0);
    assert!(
        off <= tolerance,
        "{what}: estimated {estimated:.2} MiB, llama.cpp allocated {reported_mib:.2} MiB ({:.1}% off, {:.0}% allowed)",
        off * 100.0,
        tolerance * 100.0
    );
}

fn check(name: &str, estimate: &MemoryEstimate, reported: &Reported) {
    within(&format!("{name} weights"), estimate.weights(), reported.mapped_weights, 0.01);
    within(&format!("{name} KV cache"), estimate.kv(), reported.kv, 0.01);
    within(&format!("{name} compute buffer"), estimate.graph, reported.compute, 0.08);
    within(&format!("{name} output buffer"), estimate.output_buffer, reported.output, 0.05);
    within(&format!("{name} in all"), estimate.total(), reported.total(), 0.10);
}

fn chat_case(name: &str, context: ContextParams) {
    let path = model_path(name);
    let estimated = estimate(&path, &EstimateParams::for_context(&context)).expect("estimate");
    let reported = reported_by(|| {
        let model = Model::load_placed(&path, LayerPlacement::Cpu).expect("model loads");
        let _context = model.new_context(&context).expect("context");
    });
    check(name, &estimated, &reported);
}

fn context(n_ctx: u32, sequences: u32, kv_type: KvType, flash_attention: bool) -> ContextParams {
    ContextParams { n_ctx, threads: 1, batch: 512, sequences, kv_type, flash_attention }
}

#[test]
fn smollm2_estimate_matches_what_llama_cpp_allocates() {
    chat_case("smollm2:135m", context(2048, 2, KvType::F16, true));
}

#[test]
fn smollm2_estimate_without_flash_attention_counts_the_scores() {
    // 8192 cells: each token's scores (8192 × 9 heads) outweigh its logits (49152).
    chat_case("smollm2:135m", context(8192, 1, KvType::F16, false));
}

#[test]
fn smollm2_estimate_with_a_quantized_cache() {
    chat_case("smollm2:135m", context(2048, 4, KvType::Q8_0, true));
}

#[test]
fn gemma3_estimate_matches_what_llama_cpp_allocates() {
    chat_case("gemma3:270m", context(2048, 2, KvType::F16, true));
}

#[test]
fn encoder_estimate_matches_what_llama_cpp_allocates() {
    let path = model_path("all-minilm:l6-v2");
    let embedder = EmbedderParams { threads: 1, batch_tokens: 512, ..EmbedderParams::default() };
    let params = EstimateParams {
        n_ctx: embedder.batch_tokens,
        sequences: embedder.sequences,
        ubatch: embedder.batch_tokens,
        kv_type: KvType::F16,
        flash_attention: true,
    };
    let estimated = estimate(&path, &params).expect("estimate");
    assert_eq!(estimated.kv(), 0);
    let reported = reported_by(|| {
        let model = Model::load_placed(&path, LayerPlacement::Cpu).expect("model loads");
        let _embedder = model.new_embedder(&embedder).expect("embedder");
    });
    assert_eq!(reported.kv, 0.0, "an encoder has no KV cache");
    within("all-minilm weights", estimated.weights(), reported.mapped_weights, 0.01);
    within("all-minilm compute buffer", estimated.graph, reported.compute, 0.08);
    within("all-minilm output buffer", estimated.output_buffer, reported.output, 0.05);
    within("all-minilm in all", estimated.total(), reported.total(), 0.10);
}
