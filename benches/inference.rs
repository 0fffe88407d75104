//! Inference throughput: llamay's whole path (model worker, sampler, detokenizer, stats)
//! against a plain llama.cpp decode loop with none of those layers, same model, same threads,
//! same context settings, in the same run. Prints prompt and generation tok/s and the ratio.
//!
//! The plain loop runs on the same llama.cpp build as llamay, so it cannot show a slow build;
//! when a `llama-server` binary is available (`LLAMA_SERVER`, or the one
//! `benches/peer/build-llama-server.sh` caches) the same prompt also goes to its `/completion`
//! endpoint, and its own timings (llama.cpp built by llama.cpp's CMake, with OpenMP) are printed
//! as a third row with llamay's ratio against them.
//!
//! `cargo bench --bench inference` (models from the store: run scripts/setup first).
//! Env: LLAMAY_BENCH_THREADS (default 1: this 2-vCPU machine is shared), LLAMAY_BENCH_TOKENS (default 64), LLAMAY_BENCH_ROUNDS (3),
//! LLAMA_SERVER (path of a llama-server binary).

use std::sync::Arc;
use std::time::{Duration, Instant};

use llamay::actors::messages::{Generate, LoadedModel};
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{PromptInput, SamplingParams, StreamEvent, UncheckedGenerateRequest};
use llamay::service::validate_local;
use llamay::llm::{BatchEntry, ContextParams, KvType, Model};
use llamay::store::Store;
use llamay_test_support::process;

const PROMPT: &str = "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable metal type, oil-based inks and a wooden press adapted from wine making. Within fifty years";

/// The prompt of round `round`: new text from its first token, so no path (llamay keeps the
/// KV of prompts it has seen) times a prefill it did not do.
fn prompt_of(round: usize) -> String {
    format!("Round {round}. {PROMPT}")
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Default, Clone, Copy)]
struct Measure {
    prompt_tokens: u32,
    prompt_time: Duration,
    generated: u32,
    generation_time: Duration,
}

impl Measure {
    fn prompt_rate(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64()
    }
    fn generation_rate(&self) -> f64 {
        self.generated as f64 / self.generation_time.as_secs_f64()
    }
    /// The faster of two rounds, phase by phase (`Measure::default()` is "no round yet").
    fn best(self, other: Measure) -> Measure {
        if other.generated == 0 {
            return self;
        }
        Measure {
            prompt_tokens: self.prompt_tokens,
            prompt_time: self.prompt_time.min(other.prompt_time),
            generated: self.generated,
            generation_time: self.generation_time.min(other.generation_time),
        }
    }
}

/// llama.cpp alone, through llamay's thin context (the same threadpool, no worker, sampler or
/// detokenizer): decode the prompt in one batch, then greedy argmax token by token. The model is
/// loaded once by the caller, and the prompt is decoded once before the timed decode: like
/// llamay's loaded model and warm worker, the timed part then finds the weights paged in and
/// the compute buffers allocated.
fn plain_loop(model: &Model, context_params: &ContextParams, prompt: &str, tokens: u32) -> Measure {
    let mut context = model.new_context(context_params).expect("context");
    let seq = context.seq(0).expect("one sequence");
    let prompt = model.tokenize(prompt, true, false).expect("tokenize");
    let prompt_entry = BatchEntry { seq, tokens: &prompt, first_pos: 0, logits: 1 };
    context.decode(&[prompt_entry]).expect("warm-up decode");
    context.clear(seq);
    let start = Instant::now();
    let mut row = *context.decode(&[prompt_entry]).expect("decode prompt")[0].last().expect("logits row");
    let prompt_time = start.elapsed();
    let mut position = prompt.len() as u32;
    let start = Instant::now();
    let mut generated = 0;
    while generated < tokens {
        let logits = context.logits(row).expect("logits");
        let next = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .unwrap_or(0);
        let entry = BatchEntry { seq, tokens: &[next], first_pos: position, logits: 1 };
        row = *context.decode(&[entry]).expect("decode")[0].last().expect("logits row");
        position += 1;
        generated += 1;
    }
    Measure { prompt_tokens: prompt.len() as u32, prompt_time, generated, generation_time: start.elapsed() }
}

/// llamay: the same prompt through the model worker, greedy, budget `tokens`.
fn through_llamay(handle: &LlamaModelHandle, prompt: &str, tokens: u32) -> Measure {
    let input = PromptInput::Raw { prompt: prompt.into(), system: None, template: false };
    let sampling = SamplingParams { temperature: 0.0, repeat_penalty: 1.0, max_tokens: Some(tokens), ..Default::default() };
    let request = UncheckedGenerateRequest::new(handle.info().name.clone(), input).with_sampling(sampling);
    let request = validate_local(request, None, None).expect("a valid request");
    let mut generation = handle.submit(request).expect("submit");
    while let Some(event) = generation.events.blocking_recv() {
        if let StreamEvent::Done(done) = event {
            return Measure {
                prompt_tokens: done.usage.prompt_tokens,
                prompt_time: done.timings.prompt_eval,
                generated: done.usage.completion_tokens,
                generation_time: done.timings.eval,
            };
        }
    }
    panic!("generation ended without a completion");
}

/// A llama-server process on a loopback port, killed on drop.
struct PeerServer {
    _process: process::Process,
    url: String,
}

impl PeerServer {
    fn start(binary: &std::path::Path, model: &std::path::Path, threads: i32) -> Result<Self, String> {
        let (process, url) = process::start_llama_server(binary, model, threads)?;
        Ok(PeerServer { _process: process, url })
    }

    /// One greedy `/completion` of `tokens` tokens (EOS ignored), timed by llama-server itself.
    fn complete(&self, prompt: &str, tokens: u32) -> Measure {
        let body = serde_json::json!({
            "prompt": prompt, "n_predict": tokens, "temperature": 0.0, "ignore_eos": true, "cache_prompt": false,
        });
        let reply: serde_json::Value = reqwest::blocking::Client::new()
            .post(format!("{}/completion", self.url))
            .json(&body)
            .timeout(Duration::from_secs(600))
            .send()
            .and_then(|r| r.json())
            .expect("llama-server answers /completion");
        let timings = &reply["timings"];
        let number = |key: &str| timings[key].as_f64().unwrap_or(0.0);
        Measure {
            prompt_tokens: number("prompt_n") as u32,
            prompt_time: Duration::from_secs_f64(number("prompt_ms") / 1000.0),
            generated: number("predicted_n") as u32,
            generation_time: Duration::from_secs_f64(number("predicted_ms") / 1000.0),
        }
    }
}


fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let threads = env_number("LLAMAY_BENCH_THREADS", 1) as i32;
    let tokens = env_number("LLAMAY_BENCH_TOKENS", 64) as u32;
    let rounds = env_number("LLAMAY_BENCH_ROUNDS", 3);
    let store = Store::open(&Store::default_home()).expect("model store (run scripts/setup)");
    println!("inference: {threads} threads, {tokens} generated tokens, best of {rounds} rounds, greedy");
    let peer = process::llama_server_binary();
    match &peer {
        Some(path) => println!("llama-server: {} (its /completion timings, same prompt and threads)", path.display()),
        None => println!(
            "llama-server: NOT AVAILABLE (set LLAMA_SERVER or run benches/peer/build-llama-server.sh); \
             only the plain loop on llamay's own llama.cpp build is compared"
        ),
    }
    println!("{:<14} {:<8} {:>12} {:>12} {:>10} {:>10}", "model", "path", "prompt t/s", "gen t/s", "prompt x", "gen x");
    for name in ["smollm2:135m", "gemma3:270m"] {
        let (path, info) = locate_model(name, Some(&store)).expect("model in the store (run scripts/setup)");
        let model = Arc::new(Model::load(&path).expect("model loads"));
        let context_params =
            ContextParams { n_ctx: 1024, threads, batch: 512, sequences: 1, kv_type: KvType::F16, flash_attention: true };
        let settings = WorkerSettings { context: context_params.clone(), ..WorkerSettings::default() };
        let handle = LlamaModelHandle::start(model.clone(), info, &settings).expect("worker starts");
        let server = peer.as_deref().map(|binary| PeerServer::start(binary, &path, threads));
        if let Some(Err(error)) = &server {
            println!("llama-server did not start: {error}");
        }
        let server = server.and_then(Result::ok);
        let mut plain = Measure::default();
        let mut ours = Measure::default();
        let mut theirs = Measure::default();
        for round in 0..rounds {
            // Interleaved so that all see the same machine load.
            let prompt = prompt_of(round);
            plain = plain_loop(&model, &context_params, &prompt, tokens).best(plain);
            ours = through_llamay(&handle, &prompt, tokens).best(ours);
            if let Some(server) = &server {
                theirs = server.complete(&prompt, tokens).best(theirs);
            }
        }
        drop(server);
        println!(
            "{:<14} {:<8} {:>12.1} {:>12.1}",
            name, "llama", plain.prompt_rate(), plain.generation_rate()
        );
        println!(
            "{:<14} {:<8} {:>12.1} {:>12.1} {:>10.3} {:>10.3}",
            name,
            "llamay",
            ours.prompt_rate(),
            ours.generation_rate(),
            ours.prompt_rate() / plain.prompt_rate(),
            ours.generation_rate() / plain.generation_rate()
        );
        if theirs.generated > 0 {
            println!(
                "{:<14} {:<8} {:>12.1} {:>12.1} {:>10.3} {:>10.3}   (llamay / llama-server)",
                name,
                "server",
                theirs.prompt_rate(),
                theirs.generation_rate(),
                ours.prompt_rate() / theirs.prompt_rate(),
                ours.generation_rate() / theirs.generation_rate()
            );
        }
    }
    println!("goal: llamay/llama >= 0.97 for generation; llamay/llama-server >= 1.0");
}
