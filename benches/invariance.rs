//! Batch and cache invariance of llama.cpp's CPU decode (issue 60): under each runtime switch
//! of the vendored llama.cpp, is a row's logits bit-identical to decoding it alone, whatever its
//! batch, however its KV was filled, on 1 or 2 threads, and what does the switch cost?
//!
//! Switches: ggml's tiled K-quant matmul (`GGML_CPU_TILED_MM`, read once per process, so every
//! setting runs in a child process of this bench) and flash attention (a context setting).
//! Whether llamafile's sgemm is compiled in is a build option (`GGML_LLAMAFILE`), printed in
//! the header as llama.cpp reports it.
//!
//! Columns, per model and switch setting:
//! - `batch@4` / `batch@1500`: N sequences hold the same KV (4 or ~1,500 positions), and one
//!   token each is decoded in one call, for N in [`BATCHES`] (every size to 17, and the sizes
//!   either side of each power of two to 64: where kernels change); `64` when every row of
//!   every N equals the same token decoded alone, else the last N before a row differed and how
//!   many rows of all the batches differed;
//! - `beside`: whether a one-token step at ~1,500 positions equals its decode alone when a
//!   100-token prompt chunk of another sequence is in the same decode;
//! - `chunk rows`: of a 600-token prompt decoded in chunks of 512 + 88 with logits for every
//!   token, how many rows equal the one-token-at-a-time decode;
//! - `after chunks`: whether the next token's logits (decoded alone) are identical after the
//!   KV was filled one token at a time, in one chunk of 512 + 88, and in chunks of 37 + 200 + 363;
//! - `threads`: whether 1 and 2 threads give identical logits (a one-row step at 600
//!   positions, a 4-row step, and a 64-token chunk);
//! - `decode t/s`: one sequence, one token per step, 64 steps after the 512-token prompt, median
//!   of the rounds; `pp512 t/s`: a 512-token prompt in one decode, median of the rounds. Flash
//!   attention on and off alternate round by round, so both see the same machine load; the
//!   tiled switch takes another process, run after.
//!
//! `cargo bench --bench invariance` (models from the store). Env: LLAMAY_BENCH_THREADS (2),
//! LLAMAY_BENCH_ROUNDS (5), LLAMAY_BENCH_ONLY (`costs`: the last two columns only, minutes
//! less), LLAMAY_BENCH_MODELS (comma-separated, default both), LLAMAY_BENCH_TILED (the
//! `GGML_CPU_TILED_MM` values to run, default `1,0`).

use std::process::Command;
use std::time::Instant;

use llamay::actors::model::locate_model;
use llamay::llm::{BatchEntry, Context, ContextParams, KvType, Model, SeqId};
use llamay::store::Store;

const MAX_ROWS: usize = 64;
const BATCHES: [usize; 25] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 23, 24, 31, 32, 33, 47, 48, 64];
const LONG: usize = 1500;
const CHUNKED: usize = 600;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// About 2,000 tokens of varied text, so no row repeats another.
fn text() -> String {
    let mut text = String::new();
    for i in 0..120 {
        text.push_str(&format!(
            "Entry {i}: the {} of {} measured {} units on day {}, while {} reported {}.\n",
            ["river", "harbour", "orchard", "library", "quarry", "glacier"][i % 6],
            ["Lisbon", "Vienna", "Cairo", "Warsaw", "Prague", "Bern", "Oslo"][i % 7],
            17 * i + 3,
            i % 31 + 1,
            ["Ada", "Brook", "Chen", "Dara", "Emil"][i % 5],
            ["rain", "a delay", "nothing unusual", "two ships", "a new survey"][i % 5],
        ));
    }
    text
}

struct Bench<'m> {
    context: Context<'m>,
}

impl<'m> Bench<'m> {
    fn new(model: &'m Model, threads: i32, sequences: u32, per_sequence: u32, flash_attention: bool) -> Self {
        let params = ContextParams {
            n_ctx: sequences * per_sequence,
            threads,
            batch: 512,
            sequences,
            kv_type: KvType::F16,
            flash_attention,
        };
        Bench { context: model.new_context(&params).expect("context") }
    }

    fn seq(&self, index: usize) -> SeqId {
        self.context.seq(index).expect("sequence in range")
    }

    /// Decodes `tokens` on `seq` from `first_pos` in chunks of `chunks` (the last repeats),
    /// returning the logits of every token when `all_logits`, else of the last only.
    fn fill(&mut self, seq: SeqId, tokens: &[u32], first_pos: usize, chunks: &[usize], all_logits: bool) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        let mut at = 0;
        let mut chunk_index = 0;
        while at < tokens.len() {
            let size = chunks[chunk_index.min(chunks.len() - 1)].min(tokens.len() - at);
            chunk_index += 1;
            let part = &tokens[at..at + size];
            let last = at + size == tokens.len();
            let logits = if all_logits { size } else { usize::from(last) };
            let entry = BatchEntry { seq, tokens: part, first_pos: (first_pos + at) as u32, logits };
            let rows = self.context.decode(&[entry]).expect("decode");
            for row in &rows[0] {
                out.push(self.context.logits(*row).expect("logits").to_vec());
            }
            at += size;
        }
        out
    }

    /// One token per sequence `0..tokens.len()` at `pos`, in one decode; each row's logits.
    fn step(&mut self, tokens: &[u32], pos: usize) -> Vec<Vec<f32>> {
        let seqs: Vec<SeqId> = (0..tokens.len()).map(|i| self.seq(i)).collect();
        let entries: Vec<BatchEntry<'_>> = tokens
            .iter()
            .zip(&seqs)
            .map(|(token, seq)| BatchEntry { seq: *seq, tokens: std::slice::from_ref(token), first_pos: pos as u32, logits: 1 })
            .collect();
        let rows = self.context.decode(&entries).expect("decode");
        rows.iter().map(|r| self.context.logits(r[0]).expect("logits").to_vec()).collect()
    }
}

/// `batch@P`: the last N for which every row of batches 1..=N equals its token alone, and how
/// many rows of all batches differed.
fn batch_invariance(model: &Model, threads: i32, flash_attention: bool, tokens: &[u32], prefix: usize) -> String {
    let mut bench = Bench::new(model, threads, MAX_ROWS as u32, (prefix + 64).next_multiple_of(256) as u32, flash_attention);
    let seq0 = bench.seq(0);
    bench.fill(seq0, &tokens[..prefix], 0, &[512], false);
    for i in 1..MAX_ROWS {
        let to = bench.seq(i);
        bench.context.copy_prefix(seq0, to, prefix as u32).expect("copy prefix");
    }
    let rows = &tokens[prefix..prefix + MAX_ROWS];
    let mut alone = Vec::new();
    for token in rows {
        alone.push(bench.step(std::slice::from_ref(token), prefix).remove(0));
        assert!(bench.context.truncate(seq0, prefix as u32));
    }
    let mut exact_up_to = None;
    let mut differing = 0;
    for n in BATCHES {
        let logits = bench.step(&rows[..n], prefix);
        let bad = logits.iter().zip(&alone).filter(|(a, b)| !same(a, b)).count();
        if bad > 0 && exact_up_to.is_none() {
            exact_up_to = Some(BATCHES.iter().copied().take_while(|&m| m < n).last().unwrap_or(0));
        }
        differing += bad;
        for i in 0..n {
            assert!(bench.context.truncate(bench.seq(i), prefix as u32));
        }
    }
    match exact_up_to {
        None => format!("{MAX_ROWS}"),
        Some(n) => format!("{n} ({differing} rows)"),
    }
}

/// `beside`: a one-token step of sequence 0 at [`LONG`] positions alone, and beside a 100-token
/// chunk of sequence 1.
fn beside_prompt(model: &Model, threads: i32, flash_attention: bool, tokens: &[u32]) -> &'static str {
    let mut bench = Bench::new(model, threads, 2, (LONG + 128).next_multiple_of(256) as u32, flash_attention);
    let (seq0, seq1) = (bench.seq(0), bench.seq(1));
    bench.fill(seq0, &tokens[..LONG], 0, &[512], false);
    let alone = bench.step(&tokens[LONG..LONG + 1], LONG).remove(0);
    assert!(bench.context.truncate(seq0, LONG as u32));
    let row = [tokens[LONG]];
    let entries = [
        BatchEntry { seq: seq0, tokens: &row, first_pos: LONG as u32, logits: 1 },
        BatchEntry { seq: seq1, tokens: &tokens[..100], first_pos: 0, logits: 0 },
    ];
    let rows = bench.context.decode(&entries).expect("decode");
    if same(bench.context.logits(rows[0][0]).expect("logits"), &alone) {
        "="
    } else {
        "DIFF"
    }
}

/// `chunk rows` and `after chunks`.
fn chunk_invariance(model: &Model, threads: i32, flash_attention: bool, tokens: &[u32]) -> (String, String) {
    let mut bench = Bench::new(model, threads, 1, 1024, flash_attention);
    let seq = bench.seq(0);
    let prompt = &tokens[..CHUNKED];
    let next = tokens[CHUNKED];
    let one_by_one = bench.fill(seq, prompt, 0, &[1], true);
    let after_one = bench.fill(seq, &[next], CHUNKED, &[1], true).remove(0);
    bench.context.clear(seq);
    let chunked = bench.fill(seq, prompt, 0, &[512], true);
    let after_chunk = bench.fill(seq, &[next], CHUNKED, &[1], true).remove(0);
    bench.context.clear(seq);
    bench.fill(seq, prompt, 0, &[37, 200, 363], false);
    let after_other = bench.fill(seq, &[next], CHUNKED, &[1], true).remove(0);
    let rows_same = one_by_one.iter().zip(&chunked).filter(|(a, b)| same(a, b)).count();
    let verdict = |a: &[f32]| if same(a, &after_one) { "=" } else { "DIFF" };
    (
        format!("{rows_same}/{CHUNKED}"),
        format!("{} {}", verdict(&after_chunk), verdict(&after_other)),
    )
}

/// The logits of a fixed script on `threads` threads: a 600-token prefill's last row, a
/// one-row step, a 4-row step on copies, a 64-token chunk's rows.
fn thread_script(model: &Model, threads: i32, flash_attention: bool, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut bench = Bench::new(model, threads, 4, 1024, flash_attention);
    let seq0 = bench.seq(0);
    let mut out = bench.fill(seq0, &tokens[..CHUNKED], 0, &[512], false);
    for i in 1..4 {
        let to = bench.seq(i);
        bench.context.copy_prefix(seq0, to, CHUNKED as u32).expect("copy prefix");
    }
    out.extend(bench.step(&tokens[CHUNKED..CHUNKED + 1], CHUNKED));
    assert!(bench.context.truncate(seq0, CHUNKED as u32));
    out.extend(bench.step(&tokens[CHUNKED..CHUNKED + 4], CHUNKED));
    let seq1 = bench.seq(1);
    assert!(bench.context.truncate(seq1, CHUNKED as u32));
    out.extend(bench.fill(seq1, &tokens[CHUNKED..CHUNKED + 64], CHUNKED, &[64], true));
    out
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Median one-row decode and pp512 rates, with flash attention on and off, rounds alternating.
fn costs(model: &Model, threads: i32, tokens: &[u32], rounds: usize) -> [(f64, f64); 2] {
    let mut benches = [true, false].map(|flash_attention| Bench::new(model, threads, 1, 1024, flash_attention));
    let mut rates = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for bench in &mut benches {
        let seq = bench.seq(0);
        bench.fill(seq, &tokens[..512], 0, &[512], false);
    }
    for round in 0..rounds {
        for (bench, (decode, prefill)) in benches.iter_mut().zip(&mut rates) {
            let seq = bench.seq(0);
            bench.context.clear(seq);
            let start = Instant::now();
            bench.fill(seq, &tokens[round..round + 512], 0, &[512], false);
            prefill.push(512.0 / start.elapsed().as_secs_f64());
            let mut logits = bench.fill(seq, &tokens[round + 512..round + 513], 512, &[1], false).remove(0);
            let start = Instant::now();
            for step in 0..64 {
                let next = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i as u32);
                logits = bench.step(&[next], 513 + step).remove(0);
            }
            decode.push(64.0 / start.elapsed().as_secs_f64());
        }
    }
    rates.map(|(decode, prefill)| (median(decode), median(prefill)))
}

fn child(name: &str) {
    let threads = env_number("LLAMAY_BENCH_THREADS", 2) as i32;
    let rounds = env_number("LLAMAY_BENCH_ROUNDS", 5);
    let store = Store::open(&Store::default_home()).expect("model store (run scripts/setup)");
    let (path, _) = locate_model(name, Some(&store)).expect("model in the store (run scripts/setup)");
    let model = Model::load(&path).expect("model loads");
    let tokens = model.tokenize(&text(), true, false).expect("tokenize");
    assert!(tokens.len() > LONG + MAX_ROWS, "the bench text is too short: {} tokens", tokens.len());
    let costs = costs(&model, threads, &tokens, rounds);
    let costs_only = std::env::var("LLAMAY_BENCH_ONLY").is_ok_and(|only| only == "costs");
    for (flash_attention, (decode, prefill)) in [true, false].into_iter().zip(costs) {
        if costs_only {
            println!("ROW\t{}\t-\t-\t-\t-\t-\t-\t{decode:.1}\t{prefill:.1}", if flash_attention { "on" } else { "off" });
            continue;
        }
        let short = batch_invariance(&model, threads, flash_attention, &tokens, 4);
        let long = batch_invariance(&model, threads, flash_attention, &tokens, LONG);
        let (rows, after) = chunk_invariance(&model, threads, flash_attention, &tokens);
        let one = thread_script(&model, 1, flash_attention, &tokens);
        let two = thread_script(&model, 2, flash_attention, &tokens);
        let threads_same = one.iter().zip(&two).all(|(a, b)| same(a, b));
        let beside = beside_prompt(&model, threads, flash_attention, &tokens);
        println!(
            "ROW\t{}\t{short}\t{long}\t{beside}\t{rows}\t{after}\t{}\t{decode:.1}\t{prefill:.1}",
            if flash_attention { "on" } else { "off" },
            if threads_same { "=" } else { "DIFF" },
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--child") {
        child(&args[at + 1]);
        return;
    }
    let models = std::env::var("LLAMAY_BENCH_MODELS").unwrap_or_else(|_| "smollm2:135m,gemma3:270m".into());
    let tiled_settings = std::env::var("LLAMAY_BENCH_TILED").unwrap_or_else(|_| "1,0".into());
    let exe = std::env::current_exe().expect("own path");
    println!(
        "invariance: {} threads, median of {} rounds; llama.cpp: {}",
        env_number("LLAMAY_BENCH_THREADS", 2),
        env_number("LLAMAY_BENCH_ROUNDS", 5),
        llamay::llm::system_info()
    );
    let header = ["model", "tiled", "fa", "batch@4", "batch@1500", "beside", "chunk rows", "after chunks", "threads", "decode t/s", "pp512 t/s"];
    print_row(&header);
    for name in models.split(',') {
        for tiled in tiled_settings.split(',') {
            let output = Command::new(&exe)
                .args(["--child", name])
                .env("GGML_CPU_TILED_MM", tiled)
                .output()
                .expect("run the bench's child");
            if !output.status.success() {
                panic!("{name} with GGML_CPU_TILED_MM={tiled} failed:\n{}", String::from_utf8_lossy(&output.stderr));
            }
            for line in String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| l.strip_prefix("ROW\t")) {
                let mut cells = vec![name, if tiled == "1" { "on" } else { "off" }];
                cells.extend(line.split('\t'));
                print_row(&cells);
            }
        }
    }
}

fn print_row(cells: &[&str]) {
    let widths = [13, 5, 3, 12, 12, 6, 10, 12, 7, 10, 10];
    let line: Vec<String> = cells
        .iter()
        .zip(widths)
        .enumerate()
        .map(|(i, (cell, width))| if i < 3 { format!("{cell:<width$}") } else { format!("{cell:>width$}") })
        .collect();
    println!("{}", line.join(" "));
}
