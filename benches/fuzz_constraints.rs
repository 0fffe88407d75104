//! Fuzzes the constraint engine's two front ends, the GBNF parser and the JSON Schema compiler,
//! with random and mutated inputs for a given time, and prints a table: inputs tried, compiled,
//! refused, panics, and compile and mask times against their budgets. Not in CI (it runs for
//! minutes); run it as
//!
//! `cargo bench --bench fuzz_constraints -- [--minutes N] [--seed S] [DIR ...]`, or
//! `-- --replay FILE ...` to run kept inputs again, unmutated, and print their times.
//!
//! Seeds: every `*.gbnf` and `*.json` under the directories given (default `testdata/`; pass
//! more corpora, such as llama.cpp's grammars or the JSON-Schema-Test-Suite, as arguments).
//! A `.json` file is one schema, `{"schema": ...}`, or a list of `{"schema": ...}` (the test
//! suite's shape). Each input is either a seed mutated (bytes spliced, duplicated, dropped,
//! replaced; schema subtrees swapped, dropped, given extreme numbers) or one built from
//! scratch. A compiled input is then driven through `LLAMAY_FUZZ_STEPS` (default 32) random
//! allowed tokens of a real vocabulary (`LLAMAY_VOCAB_JSON`, first entry; default
//! smollm2:135m), computing a mask at every step.
//!
//! Budgets: the limits in `grammar::limits` bound what an input may cost structurally; in time
//! they promise compiles in milliseconds and masks far under a decode step. This runner counts
//! compiles over [`COMPILE_BUDGET`] and masks over [`MASK_BUDGET`], panics, and inputs that ran
//! past the watchdog (the process stops there). Inputs that panicked or went over a budget are
//! written under `target/fuzz-constraints/` to replay. Times are the thread's CPU time, so a
//! busy machine's preemptions do not count against the engine. 0 panics and 0 over budget is
//! the goal.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut spec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut spec) };
    Duration::new(spec.tv_sec as u64, spec.tv_nsec as u32)
}

/// Inputs kept per kind of finding, so a bad run does not fill the disk.
const KEEP_PER_FINDING: u32 = 20;

use indicatif::{ProgressBar, ProgressStyle};
use llamay::grammar::schema::compile_schema;
use llamay::grammar::{compile_gbnf, CompiledGrammar, Limits, Matcher, TokenTrie};
use llamay_test_support::json_pointers::{all_pointers, remove_at};
use llamay_test_support::vocabularies;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// A compile slower than this is reported (limits.rs: loading is linear, "milliseconds").
const COMPILE_BUDGET: Duration = Duration::from_millis(250);
/// A mask slower than this is reported: a decode step of the small models takes ~10-30 ms.
const MASK_BUDGET: Duration = Duration::from_millis(20);
/// One input running longer than this (compile plus its walk) stops the run.
const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Clone)]
enum Input {
    Gbnf(Vec<u8>),
    Schema(Value),
}

impl Input {
    fn kind(&self) -> &'static str {
        match self {
            Input::Gbnf(_) => "gbnf",
            Input::Schema(_) => "schema",
        }
    }

    fn text(&self) -> Vec<u8> {
        match self {
            Input::Gbnf(bytes) => bytes.clone(),
            Input::Schema(value) => serde_json::to_vec_pretty(value).unwrap_or_default(),
        }
    }
}

/// Figures for one front end.
#[derive(Default)]
struct Tally {
    inputs: u64,
    compiled: u64,
    refused: u64,
    panics: u64,
    compile_times: Vec<Duration>,
    compiles_over: u64,
    masks: u64,
    mask_times: Vec<Duration>,
    masks_over: u64,
    overflows: u64,
    refusals: BTreeMap<String, u64>,
    /// This input went over a budget (set by `run_one`, read by the loop).
    slow_compile: bool,
    slow_mask: bool,
}

fn main() {
    let mut minutes = 1.0f64;
    let mut seed: u64 = 1;
    let mut directories = Vec::new();
    let mut replay = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--minutes" => minutes = args.next().and_then(|n| n.parse().ok()).unwrap_or(minutes),
            "--seed" => seed = args.next().and_then(|n| n.parse().ok()).unwrap_or(seed),
            "--bench" => {}
            "--replay" => replay.extend(args.by_ref().map(PathBuf::from)),
            other if !other.starts_with("--") => directories.push(PathBuf::from(other)),
            _ => {}
        }
    }
    if directories.is_empty() {
        directories.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata"));
    }
    if !replay.is_empty() {
        replay_inputs(&replay);
        return;
    }
    let (grammars, schemas) = load_seeds(&directories);
    println!(
        "fuzz_constraints: {} grammars and {} schemas from {:?}, {minutes} min, seed {seed}",
        grammars.len(),
        schemas.len(),
        directories
    );
    let trie = load_trie();
    let steps: usize = std::env::var("LLAMAY_FUZZ_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-constraints");

    // Panics are counted and their inputs kept; the default hook's message would flood the table.
    let last_panic: Arc<Mutex<String>> = Arc::default();
    {
        let last_panic = last_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut slot) = last_panic.lock() {
                *slot = info.to_string();
            }
        }));
    }
    // The watchdog: an input that never finishes is a bug the table cannot show.
    let current_started = Arc::new(AtomicU64::new(0));
    let current_input: Arc<Mutex<Option<Input>>> = Arc::default();
    let epoch = Instant::now();
    {
        let current_started = current_started.clone();
        let current_input = current_input.clone();
        let out_dir = out_dir.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let started = current_started.load(Ordering::Acquire);
            let now = epoch.elapsed().as_millis() as u64;
            if started > 0 && now.saturating_sub(started) > WATCHDOG.as_millis() as u64 {
                let input = current_input.lock().ok().and_then(|slot| slot.clone());
                if let Some(input) = input {
                    let path = keep(&out_dir, "hang", &input);
                    eprintln!(
                        "an input ran past {WATCHDOG:?}; written to {}",
                        path.display()
                    );
                }
                std::process::exit(2);
            }
        });
    }

    let mut rng = StdRng::seed_from_u64(seed);
    let deadline = Duration::from_secs_f64(minutes * 60.0);
    let progress = ProgressBar::new(deadline.as_secs());
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let limits = Limits::default();
    let started = Instant::now();
    let mut kept: BTreeMap<&'static str, u32> = BTreeMap::new();
    while started.elapsed() < deadline {
        let input = if rng.gen_bool(0.5) {
            Input::Gbnf(next_grammar(&mut rng, &grammars))
        } else {
            Input::Schema(next_schema(&mut rng, &schemas))
        };
        if let Ok(mut slot) = current_input.lock() {
            *slot = Some(input.clone());
        }
        current_started.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Release);
        let tally = tallies.entry(input.kind()).or_default();
        tally.inputs += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run_one(&input, &limits, &trie, steps, &mut rng, tally)
        }));
        current_started.store(0, Ordering::Release);
        let mut findings = Vec::new();
        if outcome.is_err() {
            tally.panics += 1;
            findings.push("panic");
        }
        if std::mem::take(&mut tally.slow_compile) {
            findings.push("slow-compile");
        }
        if std::mem::take(&mut tally.slow_mask) {
            findings.push("slow-mask");
        }
        for finding in findings {
            let count = kept.entry(finding).or_default();
            if *count < KEEP_PER_FINDING {
                *count += 1;
                let path = keep(&out_dir, finding, &input);
                let message = match finding {
                    "panic" => last_panic.lock().map(|m| m.clone()).unwrap_or_default(),
                    _ => String::new(),
                };
                progress.println(format!("{finding} ({}) {message}", path.display()));
            }
        }
        progress.set_position(started.elapsed().as_secs());
        let (inputs, panics): (u64, u64) = tallies
            .values()
            .fold((0, 0), |(i, p), t| (i + t.inputs, p + t.panics));
        if inputs % 64 == 0 {
            progress.set_message(format!("{inputs} inputs, {panics} panics"));
        }
    }
    progress.finish_and_clear();
    print_table(&mut tallies, started.elapsed());
}

/// Runs each file (a `.gbnf` grammar or a `.json` schema) as the fuzzer would, with the same
/// walk seed, and prints its compile time and its slowest masks.
fn replay_inputs(files: &[PathBuf]) {
    let trie = load_trie();
    let steps: usize = std::env::var("LLAMAY_FUZZ_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    for file in files {
        let Ok(bytes) = std::fs::read(file) else {
            println!("{}: unreadable", file.display());
            continue;
        };
        let input = match file.extension().and_then(|e| e.to_str()) {
            Some("json") => match serde_json::from_slice(&bytes) {
                Ok(schema) => Input::Schema(schema),
                Err(error) => {
                    println!("{}: {error}", file.display());
                    continue;
                }
            },
            _ => Input::Gbnf(bytes),
        };
        let mut tally = Tally::default();
        let mut rng = StdRng::seed_from_u64(1);
        run_one(
            &input,
            &Limits::default(),
            &trie,
            steps,
            &mut rng,
            &mut tally,
        );
        tally.mask_times.sort();
        let slowest: Vec<String> = tally
            .mask_times
            .iter()
            .rev()
            .take(5)
            .map(|d| ms(*d))
            .collect();
        println!(
            "{}: compiled {} in {} ms; {} masks, slowest {} ms; {} over {} ms; {} overflows",
            file.display(),
            tally.compiled == 1,
            ms(tally.compile_times.first().copied().unwrap_or_default()),
            tally.masks,
            slowest.join(", "),
            tally.masks_over,
            MASK_BUDGET.as_millis(),
            tally.overflows,
        );
    }
}

/// Compiles one input and walks it; panics propagate to the caller's `catch_unwind`.
fn run_one(
    input: &Input,
    limits: &Limits,
    trie: &Arc<TokenTrie>,
    steps: usize,
    rng: &mut StdRng,
    tally: &mut Tally,
) {
    let started = thread_cpu_time();
    let compiled = match input {
        Input::Gbnf(bytes) => compile_gbnf(bytes, limits).map_err(|e| refusal_kind(&e.to_string())),
        Input::Schema(schema) => compile_schema(schema)
            .map_err(|e| format!("schema: {}", e.keyword))
            .and_then(|ir| {
                CompiledGrammar::new(ir, limits).map_err(|e| refusal_kind(&e.to_string()))
            }),
    };
    let took = thread_cpu_time().saturating_sub(started);
    let grammar = match compiled {
        Ok(grammar) => Arc::new(grammar),
        Err(kind) => {
            tally.refused += 1;
            *tally.refusals.entry(kind).or_default() += 1;
            return;
        }
    };
    tally.compiled += 1;
    tally.compile_times.push(took);
    if took > COMPILE_BUDGET {
        tally.compiles_over += 1;
        tally.slow_compile = true;
    }
    let mut matcher = Matcher::new(grammar, trie.clone());
    for _ in 0..steps {
        let started = thread_cpu_time();
        let allowed: Vec<u32> = matcher.compute_mask().iter_set().collect();
        let took = thread_cpu_time().saturating_sub(started);
        tally.masks += 1;
        tally.mask_times.push(took);
        if took > MASK_BUDGET {
            tally.masks_over += 1;
            tally.slow_mask = true;
        }
        let candidates: Vec<u32> = allowed.into_iter().filter(|t| !trie.is_eog(*t)).collect();
        let Some(token) = candidates.choose(rng).copied() else {
            break;
        };
        if matcher.commit(token).is_err() {
            panic!("a token from the mask was refused by commit: {token}");
        }
    }
    tally.overflows += matcher.stats().overflows;
}

/// The first words of a refusal, so the table groups them.
fn refusal_kind(message: &str) -> String {
    let words: Vec<&str> = message
        .split_whitespace()
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
        .take(4)
        .collect();
    words.join(" ")
}

fn keep(out_dir: &Path, what: &str, input: &Input) -> PathBuf {
    let _ = std::fs::create_dir_all(out_dir);
    let extension = match input {
        Input::Gbnf(_) => "gbnf",
        Input::Schema(_) => "json",
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = out_dir.join(format!("{what}-{stamp}.{extension}"));
    let _ = std::fs::write(&path, input.text());
    path
}

fn load_trie() -> Arc<TokenTrie> {
    let reference = vocabularies::names()
        .into_iter()
        .next()
        .unwrap_or_else(|| "smollm2:135m".into());
    match llamay::actors::model::load_vocabulary(&reference) {
        Ok(vocabulary) => Arc::new(TokenTrie::new(
            vocabulary.pieces(),
            vocabulary.end_of_generation(),
        )),
        Err(error) => {
            eprintln!(
                "no vocabulary ({reference}: {error}); run scripts/setup or set LLAMAY_VOCAB_JSON"
            );
            std::process::exit(1);
        }
    }
}

fn load_seeds(directories: &[PathBuf]) -> (Vec<Vec<u8>>, Vec<Value>) {
    let mut grammars = Vec::new();
    let mut schemas = Vec::new();
    let mut pending: Vec<PathBuf> = directories.to_vec();
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        match path.extension().and_then(|e| e.to_str()) {
            Some("gbnf") => grammars.push(bytes),
            Some("json") => {
                let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                match value {
                    Value::Array(items) => {
                        schemas.extend(items.into_iter().filter_map(|i| i.get("schema").cloned()))
                    }
                    Value::Object(ref map) if map.contains_key("schema") => {
                        schemas.extend(map.get("schema").cloned())
                    }
                    other => schemas.push(other),
                }
            }
            _ => {}
        }
    }
    if grammars.is_empty() {
        grammars.push(b"root ::= \"a\" [b-z]* (\"x\" | root)?".to_vec());
    }
    if schemas.is_empty() {
        schemas.push(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
    }
    (grammars, schemas)
}

const GBNF_PIECES: &[&str] = &[
    "root ::= ",
    "a ::= ",
    "b ::= ",
    "a",
    "b",
    "root",
    " | ",
    "(",
    ")",
    "*",
    "+",
    "?",
    "{0,3}",
    "{2,}",
    "{4096}",
    "{99999999999}",
    "\"x\"",
    "\"\\\"\"",
    "\"\\x41\"",
    "\"\\u00e9\"",
    "\"\\U0001F600\"",
    "[a-z]",
    "[^\"\\\\]",
    "[\\x00-\\x7F]",
    "[]",
    "[^]",
    ".",
    "\n",
    "\r\n",
    "# note\n",
    "\"",
    "[",
    "\\",
    "::=",
    "(((",
    ")))",
    "\"\\xff\"",
    "ws",
    " ws ::= [ \\t\\n]*\n",
    "\u{0}",
    "é",
];

fn next_grammar(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_bool(0.2) {
        let count = rng.gen_range(1..40);
        return (0..count)
            .map(|_| *GBNF_PIECES.choose(rng).unwrap_or(&"a"))
            .collect::<String>()
            .into_bytes();
    }
    let mut bytes = seeds.choose(rng).cloned().unwrap_or_default();
    for _ in 0..rng.gen_range(1..6) {
        mutate_bytes(rng, &mut bytes, seeds);
    }
    bytes
}

fn mutate_bytes(rng: &mut StdRng, bytes: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = bytes.len();
    let at = if len == 0 { 0 } else { rng.gen_range(0..=len) };
    match rng.gen_range(0..7) {
        0 if len > 0 => {
            let end = (at + rng.gen_range(1..16)).min(len);
            bytes.drain(at.min(len)..end.max(at.min(len)));
        }
        1 => {
            let piece = GBNF_PIECES.choose(rng).unwrap_or(&"a").as_bytes();
            bytes.splice(at..at, piece.iter().copied());
        }
        2 if len > 0 => {
            let start = rng.gen_range(0..len);
            let end = (start + rng.gen_range(1..64)).min(len);
            let copy: Vec<u8> = bytes[start..end].to_vec();
            bytes.splice(at..at, copy);
        }
        3 if len > 0 => {
            let index = rng.gen_range(0..len);
            bytes[index] = rng.gen();
        }
        4 => {
            // Splice a stretch of another seed (rules of one grammar into another).
            if let Some(other) = seeds.choose(rng) {
                if !other.is_empty() {
                    let start = rng.gen_range(0..other.len());
                    let end = (start + rng.gen_range(1..200)).min(other.len());
                    bytes.splice(at..at, other[start..end].iter().copied());
                }
            }
        }
        5 => {
            let number = *[0u64, 1, 255, 4096, 4097, 65535, u32::MAX as u64, u64::MAX]
                .choose(rng)
                .unwrap_or(&0);
            bytes.splice(at..at, format!("{{{number}}}").into_bytes());
        }
        _ => {
            let depth = rng.gen_range(1..400);
            let mut nested = "(".repeat(depth).into_bytes();
            nested.extend(b"\"n\"");
            nested.extend(")".repeat(depth).into_bytes());
            bytes.splice(at..at, nested);
        }
    }
}

const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "minItems",
    "maxItems",
    "additionalProperties",
    "format",
    "multipleOf",
    "not",
    "if",
    "prefixItems",
    "uniqueItems",
    "patternProperties",
    "$schema",
    "title",
    "description",
    "default",
];

fn extreme_number(rng: &mut StdRng) -> Value {
    let choices = [
        json!(0),
        json!(-1),
        json!(1),
        json!(4096),
        json!(1e300),
        json!(-1e300),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.1),
        json!(1e-300),
        json!(2147483648u64),
        json!(0.5),
    ];
    choices.choose(rng).cloned().unwrap_or(json!(0))
}

fn random_leaf(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..8) {
        0 => {
            json!(
                ["string", "integer", "number", "boolean", "null", "object", "array", "nonsense"]
                    .choose(rng)
            )
        }
        1 => extreme_number(rng),
        2 => json!([
            "^[a-z]+$",
            "(a|b)*",
            "[",
            "\\d{2,4}",
            "a{0,4096}",
            "(?=x)",
            "^$",
            ".*",
            "\\p{L}+",
            "(((((a)))))"
        ]
        .choose(rng)),
        3 => json!([
            "#",
            "#/$defs/a",
            "#/definitions/x",
            "#/properties/a",
            "http://x/y",
            "#/$defs/%25"
        ]
        .choose(rng)),
        4 => json!(rng.gen::<bool>()),
        5 => Value::Null,
        6 => json!(["date-time", "email", "uuid", "uri"].choose(rng)),
        _ => json!("x".repeat(rng.gen_range(0..64))),
    }
}

fn random_schema(rng: &mut StdRng, depth: u32) -> Value {
    if depth == 0 || rng.gen_bool(0.3) {
        return random_leaf(rng);
    }
    match rng.gen_range(0..4) {
        0 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| random_schema(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..rng.gen_range(0..6) {
                let key = SCHEMA_KEYWORDS.choose(rng).unwrap_or(&"type").to_string();
                map.insert(key, random_schema(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

fn next_schema(rng: &mut StdRng, seeds: &[Value]) -> Value {
    if rng.gen_bool(0.2) {
        return random_schema(rng, 5);
    }
    let mut schema = seeds.choose(rng).cloned().unwrap_or(Value::Null);
    for _ in 0..rng.gen_range(1..5) {
        mutate_schema(rng, &mut schema, seeds);
    }
    schema
}

fn mutate_schema(rng: &mut StdRng, schema: &mut Value, seeds: &[Value]) {
    let all = all_pointers(schema);
    let Some(pointer) = all.choose(rng).cloned() else {
        return;
    };
    let donor = |rng: &mut StdRng| -> Value {
        let Some(seed) = seeds.choose(rng) else {
            return Value::Null;
        };
        let inside = all_pointers(seed);
        inside
            .choose(rng)
            .and_then(|p| seed.pointer(p))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let replacement = match rng.gen_range(0..7) {
        0 => donor(rng),
        1 => extreme_number(rng),
        2 => random_schema(rng, 3),
        3 => {
            let node = schema.pointer(&pointer).cloned().unwrap_or(Value::Null);
            json!({["anyOf", "oneOf", "allOf"].choose(rng).copied().unwrap_or("anyOf"): [node.clone(), donor(rng)]})
        }
        4 => {
            let node = schema.pointer(&pointer).cloned().unwrap_or(Value::Null);
            json!({"type": "array", "items": node, "minItems": extreme_number(rng)})
        }
        5 => {
            // Add a keyword to an object node.
            if let Some(Value::Object(map)) = schema.pointer_mut(&pointer) {
                let key = SCHEMA_KEYWORDS.choose(rng).unwrap_or(&"type").to_string();
                map.insert(key, random_leaf(rng));
            }
            return;
        }
        _ => {
            // Drop a node.
            remove_at(schema, &pointer);
            return;
        }
    };
    if let Some(node) = schema.pointer_mut(&pointer) {
        *node = replacement;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn print_table(tallies: &mut BTreeMap<&'static str, Tally>, took: Duration) {
    println!(
        "\nran {:.1} min (times are thread CPU time)",
        took.as_secs_f64() / 60.0
    );
    println!(
        "| front end | inputs | compiled | refused | PANICS | compile p50 / p99 / max ms | compiles > {} ms | masks | mask p50 / p99 / max ms | masks > {} ms | overflows |",
        COMPILE_BUDGET.as_millis(),
        MASK_BUDGET.as_millis()
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (kind, tally) in tallies.iter_mut() {
        tally.compile_times.sort();
        tally.mask_times.sort();
        let c = &tally.compile_times;
        let m = &tally.mask_times;
        println!(
            "| {kind} | {} | {} | {} | {} | {} / {} / {} | {} | {} | {} / {} / {} | {} | {} |",
            tally.inputs,
            tally.compiled,
            tally.refused,
            tally.panics,
            ms(percentile(c, 0.5)),
            ms(percentile(c, 0.99)),
            ms(c.last().copied().unwrap_or_default()),
            tally.compiles_over,
            tally.masks,
            ms(percentile(m, 0.5)),
            ms(percentile(m, 0.99)),
            ms(m.last().copied().unwrap_or_default()),
            tally.masks_over,
            tally.overflows,
        );
    }
    for (kind, tally) in tallies.iter() {
        let mut refusals: Vec<(&String, &u64)> = tally.refusals.iter().collect();
        refusals.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = refusals
            .iter()
            .take(6)
            .map(|(k, v)| format!("{k} ({v})"))
            .collect();
        println!("{kind} refusals, most common: {}", top.join("; "));
    }
}
