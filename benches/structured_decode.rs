//! End-to-end constrained decoding speed (issue 12): SmolLM2 (49k tokens) and Gemma 3 (262k)
//! continue the spec's order request through llamay's model worker (the daemon's path: actor,
//! sampler, matcher, llama.cpp), unconstrained, with the spec's `order` JSON Schema and with
//! `-json` (any JSON), greedy, in one run. Prints constrained/unconstrained tok/s per model
//! (goal >= 0.97x) and the spec's stats line `json mask: N steps, X ms each, Y% of decode`.
//!
//! The rate is tokens per second of CPU time of the process doing the work (llamay's worker
//! thread; every thread of llama-server), so that other processes on a shared machine do not
//! decide the ratio; the wall-clock ratio is printed beside it. The prompt is raw text (no chat
//! template) that every configuration continues past the token budget, so each measurement is
//! one request ending at the budget, and all configurations decode the same number of tokens
//! at the same positions after the same (cached) prompt. Should one end early, a measurement
//! makes more requests until the budget is reached (shown in the tok/req column).
//!
//! Each constraint runs twice per round: `cold` compiles the constraint afresh (empty transition
//! table and mask cache, as the first request of a schema or `llamay run -json`), `warm` reuses
//! one compiled constraint (a repeated schema: the daemon caches compiled constraints). Rounds
//! are interleaved, and each round's configurations run in a rotated order, so machine noise
//! hits all alike; a ratio is taken inside one round and the median over rounds is printed.
//!
//! When a `llama-server` binary is available (`LLAMA_SERVER`, or the one
//! `benches/peer/build-llama-server.sh` caches), the same prompts go to its `/completion`
//! (`json_schema` for the order schema, `{}` for any JSON) in the same rounds, and its own
//! constrained/unconstrained ratio is printed beside llamay's as the anchor.
//!
//! `cargo bench --bench structured_decode` (models from the store: run scripts/setup first).
//! Env: LLAMAY_BENCH_THREADS (default 1), LLAMAY_BENCH_TOKENS (tokens per measurement, 96),
//! LLAMAY_BENCH_ROUNDS (default 5), LLAMAY_BENCH_MODELS (default `smollm2:135m,gemma3:270m`),
//! LLAMA_SERVER (path of a llama-server binary; `none` skips it).

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use llamay::actors::messages::{Generate, LoadedModel};
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::core::{
    Completion, Constraint, ConstraintSource, FinishReason, PromptInput, SamplingParams, StreamEvent,
    UncheckedGenerateRequest, ValidGenerateRequest,
};
use llamay::grammar::schema::FormatMode;
use llamay::grammar::Limits;
use llamay::llm::{ContextParams, KvType, Model};
use llamay::store::Store;
use llamay_test_support::process;

/// The spec's order request (structured-output page), as text to continue.
const PROMPT: &str = "Order 7 from Acme: 3 widgets at 4.50 EUR each, ship to Lyon, postcode 69001. \
                      The order as JSON, with every field spelled out:\n";
const ORDER_SCHEMA: &str = include_str!("../testdata/schemas/order.json");

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Plain,
    Order,
    AnyJson,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Config {
    shape: Shape,
    /// Reuse one compiled constraint across rounds (its caches warm) instead of a fresh one.
    warm: bool,
}

impl Config {
    const ALL: [Config; 5] = [
        Config { shape: Shape::Plain, warm: false },
        Config { shape: Shape::Order, warm: false },
        Config { shape: Shape::Order, warm: true },
        Config { shape: Shape::AnyJson, warm: false },
        Config { shape: Shape::AnyJson, warm: true },
    ];

    fn label(self) -> &'static str {
        match (self.shape, self.warm) {
            (Shape::Plain, _) => "unconstrained",
            (Shape::Order, false) => "order cold",
            (Shape::Order, true) => "order warm",
            (Shape::AnyJson, false) => "-json cold",
            (Shape::AnyJson, true) => "-json warm",
        }
    }

    fn source(self) -> Option<ConstraintSource> {
        match self.shape {
            Shape::Plain => None,
            Shape::Order => {
                let schema = serde_json::from_str(ORDER_SCHEMA).expect("testdata/schemas/order.json is JSON");
                Some(ConstraintSource::schema(schema, FormatMode::Ignore))
            }
            Shape::AnyJson => Some(ConstraintSource::AnyJson),
        }
    }

    fn compile(self) -> Option<Constraint> {
        self.source().map(|source| Constraint::from_source(source, &Limits::default()).expect("constraint compiles"))
    }
}

/// One measurement's outcome (one or more generations).
#[derive(Clone, Debug, Default)]
struct Run {
    generated: u32,
    /// Wall-clock generation time, as the engine reports it.
    eval: Duration,
    /// CPU time of the process doing the work, over the whole requests.
    cpu: Duration,
    requests: u32,
    /// The first line of the matcher's stats (`json mask: ...`), when constrained.
    mask_line: Option<String>,
    finish: String,
}

impl Run {
    /// Tokens per second of CPU time.
    fn rate(&self) -> f64 {
        self.generated as f64 / self.cpu.as_secs_f64().max(1e-9)
    }

    fn wall_rate(&self) -> f64 {
        self.generated as f64 / self.eval.as_secs_f64().max(1e-9)
    }
}

/// CPU time this process has used, all threads (the bench's own thread only waits meanwhile).
fn own_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// CPU time process `pid` has used: the sum of its threads' run times (`schedstat`, in ns).
fn process_cpu_time(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Duration::ZERO };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()))
        .sum();
    Duration::from_nanos(nanos)
}

fn request(model: &str, tokens: u32, constraint: Option<Constraint>) -> ValidGenerateRequest {
    let input = PromptInput::Raw { prompt: PROMPT.into(), system: None, template: false };
    let sampling =
        SamplingParams { temperature: 0.0, repeat_penalty: 1.0, max_tokens: Some(tokens), ..Default::default() };
    let request = UncheckedGenerateRequest::new(model, input).with_sampling(sampling);
    llamay::service::validate_local(request, constraint, None).expect("a valid request")
}

fn through_llamay(handle: &LlamaModelHandle, tokens: u32, constraint: Option<Constraint>) -> Run {
    let cpu_before = own_cpu_time();
    let mut generation = handle.submit(request(&handle.info().name, tokens, constraint)).expect("submit");
    let mut done: Option<Completion> = None;
    while let Some(event) = generation.events.blocking_recv() {
        if let StreamEvent::Done(completion) = event {
            done = Some(completion);
        }
    }
    let cpu = own_cpu_time().saturating_sub(cpu_before);
    let done = done.expect("the generation completes");
    if let FinishReason::Error(message) = &done.finish_reason {
        panic!("generation failed: {message}");
    }
    let mask_line = done
        .constraint_stats
        .as_ref()
        .and_then(|report| report.summary.lines().next())
        .map(str::to_string);
    Run {
        generated: done.usage.completion_tokens,
        eval: done.timings.eval,
        cpu,
        requests: 1,
        mask_line,
        finish: format!("{:?}", done.finish_reason).to_lowercase(),
    }
}

/// Most requests one measurement makes, should a configuration keep answering with nothing.
const MAX_REQUESTS: u32 = 64;

/// Requests made by `once` until `budget` tokens are generated; the last one's stats line and
/// finish are kept.
fn until_budget(budget: u32, mut once: impl FnMut() -> Result<Run, String>) -> Result<Run, String> {
    let mut total = Run::default();
    while total.generated < budget && total.requests < MAX_REQUESTS {
        let run = once()?;
        total.generated += run.generated;
        total.eval += run.eval;
        total.cpu += run.cpu;
        total.requests += 1;
        total.mask_line = run.mask_line;
        total.finish = run.finish;
    }
    Ok(total)
}

/// A llama-server process on a loopback port, killed on drop.
struct PeerServer {
    process: process::Process,
    url: String,
}

impl PeerServer {
    fn start(binary: &std::path::Path, model: &std::path::Path, threads: i32) -> Result<Self, String> {
        let (process, url) = process::start_llama_server(binary, model, threads)?;
        Ok(PeerServer { process, url })
    }

    /// The same request, greedy, timed by llama-server itself (wall) and by its CPU time.
    fn complete(&self, tokens: u32, shape: Shape) -> Result<Run, String> {
        let mut body = serde_json::json!({
            "prompt": PROMPT, "n_predict": tokens, "temperature": 0.0, "cache_prompt": true,
        });
        match shape {
            Shape::Plain => {}
            Shape::Order => {
                body["json_schema"] = serde_json::from_str(ORDER_SCHEMA).map_err(|e| e.to_string())?;
            }
            Shape::AnyJson => body["json_schema"] = serde_json::json!({}),
        }
        let cpu_before = process_cpu_time(self.process.0.id());
        let reply: serde_json::Value = reqwest::blocking::Client::new()
            .post(format!("{}/completion", self.url))
            .json(&body)
            .timeout(Duration::from_secs(600))
            .send()
            .and_then(|r| r.json())
            .map_err(|e| e.to_string())?;
        let cpu = process_cpu_time(self.process.0.id()).saturating_sub(cpu_before);
        let timings = &reply["timings"];
        let generated = timings["predicted_n"].as_f64().ok_or_else(|| format!("no timings in {reply}"))?;
        let millis = timings["predicted_ms"].as_f64().unwrap_or(0.0);
        let finish = if reply["stop_type"].as_str() == Some("limit") { "length" } else { "stop" };
        Ok(Run {
            generated: generated as u32,
            eval: Duration::from_secs_f64(millis / 1000.0),
            cpu,
            requests: 1,
            mask_line: None,
            finish: finish.to_string(),
        })
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// Every round of one configuration, for one engine.
#[derive(Default)]
struct Series {
    runs: Vec<Run>,
}

impl Series {
    fn median_rate(&self) -> f64 {
        median(&mut self.runs.iter().map(Run::rate).collect::<Vec<_>>())
    }

    /// Per round, this configuration's rate (`rate`: CPU or wall) over `plain`'s.
    fn ratios(&self, plain: &Series, rate: fn(&Run) -> f64) -> Vec<f64> {
        self.runs.iter().zip(&plain.runs).map(|(run, base)| rate(run) / rate(base)).collect()
    }

    /// The best round's rate (`rate`: CPU or wall).
    fn best_rate(&self, rate: fn(&Run) -> f64) -> f64 {
        self.runs.iter().map(rate).fold(f64::NAN, f64::max)
    }

    /// The ratio of the best CPU-time rates (load from other processes only ever slows a
    /// round, so the best is the least disturbed), the median and range of the per-round
    /// CPU-time ratios, and the median wall-clock ratio.
    fn ratio_cells(&self, plain: &Series) -> String {
        let best = self.best_rate(Run::rate) / plain.best_rate(Run::rate);
        let mut cpu = self.ratios(plain, Run::rate);
        let (low, high) = cpu.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), r| (l.min(*r), h.max(*r)));
        let mut wall = self.ratios(plain, Run::wall_rate);
        format!("{best:>6.3}x {:>6.3}x [{low:.3}-{high:.3}] {:>6.3}x", median(&mut cpu), median(&mut wall))
    }

    /// Tokens and requests of the first round (`tokens/requests`).
    fn tokens(&self) -> String {
        self.runs.first().map_or_else(String::new, |run| format!("{}/{}", run.generated, run.requests))
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let threads = env_number("LLAMAY_BENCH_THREADS", 1) as i32;
    let tokens = env_number("LLAMAY_BENCH_TOKENS", 96) as u32;
    let rounds = env_number("LLAMAY_BENCH_ROUNDS", 5).max(1);
    let models = std::env::var("LLAMAY_BENCH_MODELS").unwrap_or_else(|_| "smollm2:135m,gemma3:270m".into());
    let store = Store::open(&Store::default_home()).expect("model store (run scripts/setup)");
    let peer = process::llama_server_binary();
    println!(
        "structured decode: {threads} thread(s), greedy, {tokens} tokens per measurement, {rounds} interleaved rounds; \
         tok/s in CPU time of the engine's process; ratio = constrained / unconstrained tok/s: best = of the best \
         rounds, median [min-max] = of the rates in the same round, wall = median in wall-clock time"
    );
    match &peer {
        Some(path) => println!("anchor: llama-server {} (its own timings, same requests)", path.display()),
        None => {
            println!("anchor: llama-server NOT AVAILABLE (set LLAMA_SERVER or run benches/peer/build-llama-server.sh)")
        }
    }
    let model_names: Vec<&str> = models.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
    let progress = ProgressBar::new((model_names.len() * rounds * Config::ALL.len()) as u64);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} generations {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut report = Vec::new();
    for name in &model_names {
        let (path, info) = locate_model(name, Some(&store)).expect("model in the store (run scripts/setup)");
        let model = Arc::new(Model::load(&path).expect("model loads"));
        let settings = WorkerSettings {
            context: ContextParams {
                n_ctx: 1024,
                threads,
                batch: 512,
                sequences: 1,
                kv_type: KvType::F16,
                flash_attention: true,
            },
            ..WorkerSettings::default()
        };
        let handle = LlamaModelHandle::start(model, info, &settings).expect("worker starts");
        let server = peer.as_deref().map(|binary| PeerServer::start(binary, &path, threads));
        if let Some(Err(error)) = &server {
            progress.println(format!("llama-server did not start for {name}: {error}"));
        }
        let server = server.and_then(Result::ok);
        // The warm constraints, compiled once and warmed by one generation each before timing.
        let warm: Vec<Option<Constraint>> =
            Config::ALL.iter().map(|config| if config.warm { config.compile() } else { None }).collect();
        for constraint in warm.iter().flatten() {
            through_llamay(&handle, tokens, Some(constraint.clone()));
        }
        through_llamay(&handle, tokens, None);
        let mut ours: Vec<Series> = Config::ALL.iter().map(|_| Series::default()).collect();
        let mut theirs: Vec<Series> = Config::ALL.iter().map(|_| Series::default()).collect();
        for round in 0..rounds {
            for offset in 0..Config::ALL.len() {
                let index = (round + offset) % Config::ALL.len();
                let config = Config::ALL[index];
                progress.set_message(format!("{name} {}", config.label()));
                let run = until_budget(tokens, || {
                    let constraint = if config.warm { warm[index].clone() } else { config.compile() };
                    Ok(through_llamay(&handle, tokens, constraint))
                });
                ours[index].runs.push(run.expect("llamay generates"));
                // llama-server has no cold/warm distinction to measure: once per shape.
                if let Some(server) = &server {
                    if !config.warm {
                        match until_budget(tokens, || server.complete(tokens, config.shape)) {
                            Ok(run) => theirs[index].runs.push(run),
                            Err(error) => progress.println(format!("llama-server {}: {error}", config.label())),
                        }
                    }
                }
                progress.inc(1);
            }
        }
        report.push((name.to_string(), ours, theirs));
    }
    progress.finish_and_clear();
    println!(
        "{:<13} {:<14} {:>7} {:>7} {:>38}   {:>7} {:>7} {:>38}",
        "model",
        "config",
        "tok/req",
        "tok/s",
        "llamay ratio        wall",
        "tok/req",
        "tok/s",
        "llama-server ratio  wall"
    );
    for (name, ours, theirs) in &report {
        for (index, config) in Config::ALL.iter().enumerate() {
            let mut line = format!(
                "{:<13} {:<14} {:>7} {:>7.1} {:>38}",
                name,
                config.label(),
                ours[index].tokens(),
                ours[index].median_rate(),
                ours[index].ratio_cells(&ours[0])
            );
            let peer = &theirs[index];
            if !peer.runs.is_empty() && peer.runs.len() == theirs[0].runs.len() {
                line.push_str(&format!(
                    "   {:>7} {:>7.1} {:>38}",
                    peer.tokens(),
                    peer.median_rate(),
                    peer.ratio_cells(&theirs[0])
                ));
            }
            println!("{line}");
        }
    }
    println!("tok/req: tokens generated and requests made in the first round");
    println!("stats of the last request of each constrained configuration (llamay run -stats prints the same line):");
    for (name, ours, _) in &report {
        for (index, config) in Config::ALL.iter().enumerate() {
            if let Some(last) = ours[index].runs.last() {
                if let Some(line) = &last.mask_line {
                    println!("  {name} {:<11} {line} · stop: {}", config.label(), last.finish);
                }
            }
        }
    }
    println!("tok/s: median over rounds, CPU time");
    println!("goal: llamay ratio >= 0.97x (issue 12; llama-server measured 0.70-0.84x)");
}
