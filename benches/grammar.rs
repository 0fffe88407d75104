//! Grammar mask benchmark: for every GBNF grammar of the corpus and every vocabulary given, drive the automaton through deterministic sample texts, compute a mask at every
//! token, and print avg / p50 / p99 / max time per mask and compile time — next to
//! llguidance on the same grammar (translated to its Lark dialect), vocabulary and tokens,
//! in the same run, with the ratio.
//!
//! Vocabularies: `LLAMAY_VOCAB_JSON=a[,b]`, each a store model name or GGUF path, or a
//! `.json` file `{"tokens": [[byte, ...], ...], "eog": [ids]}` as
//! `llamay::llm::Vocabulary::to_json` writes it; default `smollm2:135m,gemma3:270m`. Sample texts are seeded
//! random walks through our automaton (a uniformly chosen allowed token per step), so every
//! run uses the same tokens. Options: `LLAMAY_BENCH_TEXTS` (texts per grammar, default 4),
//! `LLAMAY_BENCH_TOKENS` (tokens per text, default 64), `LLAMAY_BENCH_REPEAT` (runs of each
//! text per engine, default 3: a step's time is its fastest run, which keeps a busy
//! machine's preemptions out of both sides' figures). Run: `cargo bench --bench grammar --
//! [DIR...]`: the `.gbnf` files of each directory, by default llama.cpp's samples in
//! `testdata/grammars`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llamay::grammar::{compile_gbnf, Limits, Matcher, TokenTrie};
use llamay::llm::Vocabulary;
use llamay_test_support::vocabularies;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;

const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/grammars");

fn main() {
    let paths = vocabularies::names();
    let texts = env_number("LLAMAY_BENCH_TEXTS", 4);
    let tokens_per_text = env_number("LLAMAY_BENCH_TOKENS", 64);
    // `cargo bench` passes `--bench` itself; every other argument is a directory.
    let mut directories: Vec<PathBuf> =
        std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).map(PathBuf::from).collect();
    if directories.is_empty() {
        directories.push(PathBuf::from(DEFAULT_CORPUS));
    }
    let mut grammars: Vec<(String, String)> = Vec::new();
    for directory in &directories {
        match std::fs::read_dir(directory) {
            Ok(entries) => grammars.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "gbnf"))
                    .filter_map(|p| {
                        let name = p.file_stem()?.to_string_lossy().into_owned();
                        Some((name, std::fs::read_to_string(&p).ok()?))
                    }),
            ),
            Err(error) => eprintln!("skipping {}: {error}", directory.display()),
        }
    }
    grammars.sort();
    println!("grammar: {} grammars from {:?}", grammars.len(), directories);

    for path in &paths {
        let path = path.as_str();
        let vocabulary = match llamay::actors::model::load_vocabulary(path) {
            Ok(v) => v,
            Err(error) => {
                eprintln!("{path}: {error}");
                continue;
            }
        };
        let started = Instant::now();
        let trie = Arc::new(TokenTrie::new(
            vocabulary.pieces(),
            vocabulary.end_of_generation(),
        ));
        let our_trie_time = started.elapsed();
        let started = Instant::now();
        let tok_env = llguidance_env(&vocabulary);
        let their_trie_time = started.elapsed();
        let mut factory = match ParserFactory::new_simple(&tok_env) {
            Ok(f) => f,
            Err(error) => {
                eprintln!("llguidance factory: {error}");
                continue;
            }
        };
        factory.quiet();
        println!(
            "\nvocabulary {path}: {} tokens · trie build: ours {:.1} ms ({} nodes), llguidance {:.1} ms",
            vocabulary.len(),
            ms(our_trie_time),
            trie.node_count(),
            ms(their_trie_time)
        );
        println!(
            "{:<11} {:>6} | {:>9} {:>8} {:>8} {:>8} {:>8} | {:>9} {:>8} {:>8} {:>8} {:>8} | {:>6} {:>6} | notes",
            "grammar", "masks", "compile", "avg", "p50", "p99", "max", "llg comp", "avg", "p50", "p99", "max", "avg x", "p99 x"
        );
        let mut all_ours = Vec::new();
        let mut all_theirs = Vec::new();
        for (name, source) in &grammars {
            let row = bench_grammar(source, &vocabulary, &trie, &factory, texts, tokens_per_text);
            all_ours.extend_from_slice(&row.ours);
            all_theirs.extend_from_slice(&row.theirs);
            print_row(name, &row);
        }
        let total = Row {
            ours: all_ours,
            theirs: all_theirs,
            ..Row::default()
        };
        print_row("ALL", &total);
        let (avg, ..) = summary(&total.ours);
        println!(
            "mask share of decode at 8 ms/token: {:.2}% (avg {:.1} us per mask computed at every token)",
            100.0 * avg / 8000.0,
            avg
        );
    }
}

#[derive(Default)]
struct Row {
    ours: Vec<f64>,
    theirs: Vec<f64>,
    our_compile: Duration,
    their_compile: Duration,
    notes: Vec<String>,
}

fn bench_grammar(
    source: &str,
    vocabulary: &Vocabulary,
    trie: &Arc<TokenTrie>,
    factory: &ParserFactory,
    texts: usize,
    tokens_per_text: usize,
) -> Row {
    let mut row = Row::default();
    let limits = Limits::default();
    let started = Instant::now();
    let grammar = match compile_gbnf(source.as_bytes(), &limits) {
        Ok(g) => Arc::new(g),
        Err(error) => {
            row.notes.push(format!("ours refused: {error}"));
            return row;
        }
    };
    row.our_compile = started.elapsed();
    for _ in 1..env_number("LLAMAY_BENCH_REPEAT", 3) {
        let started = Instant::now();
        if compile_gbnf(source.as_bytes(), &limits).is_ok() {
            row.our_compile = row.our_compile.min(started.elapsed());
        }
    }
    let lark = gbnf_to_lark(source);
    let mut mask_differences = 0usize;
    // llguidance ends generation with one EOS token; we allow every EOG token.
    let extra_eog = vocabulary.end_of_generation().get(1..).unwrap_or_default();
    let (mut row_peak, mut row_clears, mut row_masks) = (0, 0, 0);
    let mut llguidance_failed = None;
    let repeats = env_number("LLAMAY_BENCH_REPEAT", 3).max(1);
    for text in 0..texts {
        let tokens = sample_tokens(&grammar, trie, vocabulary, text as u64 + 1, tokens_per_text);
        // Each side runs the text `repeats` times from scratch; a step's time is its fastest
        // run, which keeps a busy machine's preemptions out of the figures for both alike.
        let mut our_masks = Vec::new();
        let mut our_times: Vec<f64> = Vec::new();
        for repeat in 0..repeats {
            // A freshly compiled grammar and matcher per run, as a new request with a new
            // grammar would have: a compiled grammar shares its transition and mask caches
            // among its matchers, and the one that sampled the text has seen every state.
            let fresh = match compile_gbnf(source.as_bytes(), &limits) {
                Ok(g) => Arc::new(g),
                Err(error) => {
                    row.notes.push(format!("recompiling failed: {error}"));
                    break;
                }
            };
            let mut matcher = Matcher::new(fresh, trie.clone());
            for (step, &token) in tokens.iter().enumerate() {
                let started = Instant::now();
                let mask = matcher.compute_mask();
                keep_fastest(&mut our_times, step, started.elapsed().as_secs_f64() * 1e6);
                if repeat == 0 {
                    our_masks.push(mask.clone());
                }
                if matcher.commit(token).is_err() {
                    row.notes
                        .push(format!("ours refused its own sample token {token}"));
                    break;
                }
            }
            if repeat == 0 {
                let stats = matcher.stats();
                row_peak = row_peak.max(stats.states_peak);
                row_clears += stats.table_clears;
                row_masks += stats.masks_computed;
            }
        }
        row.ours.extend_from_slice(&our_times);
        // llguidance on the same tokens.
        let mut their_times: Vec<f64> = Vec::new();
        'repeats: for repeat in 0..repeats {
            let started = Instant::now();
            let parser = factory.create_parser(TopLevelGrammar::from_lark(lark.clone()));
            let elapsed = started.elapsed();
            if text == 0 && (repeat == 0 || elapsed < row.their_compile) {
                row.their_compile = elapsed;
            }
            let parser = match parser {
                Ok(p) => p,
                Err(error) => {
                    llguidance_failed = Some(format!(
                        "llguidance refused: {}",
                        first_line(&error.to_string())
                    ));
                    break;
                }
            };
            let mut theirs = llguidance::Matcher::new(Ok(parser));
            for (step, &token) in tokens.iter().enumerate() {
                let started = Instant::now();
                let mask = theirs.compute_mask();
                let elapsed = started.elapsed().as_secs_f64() * 1e6;
                let Ok(mask) = mask else {
                    if !theirs.is_stopped() {
                        llguidance_failed = Some(format!(
                            "llguidance error: {}",
                            first_line(&theirs.get_error().unwrap_or_default())
                        ));
                    }
                    continue 'repeats;
                };
                keep_fastest(&mut their_times, step, elapsed);
                if let (0, Some(ours)) = (repeat, our_masks.get(step)) {
                    let differing: Vec<u32> = (0..vocabulary.len() as u32)
                        .filter(|t| {
                            ours.is_set(*t) != mask.is_allowed(*t as TokenId)
                                && !extra_eog.contains(t)
                        })
                        .collect();
                    if !differing.is_empty()
                        && mask_differences == 0
                        && std::env::var_os("LLAMAY_BENCH_VERBOSE").is_some()
                    {
                        let text: Vec<u8> = tokens[..step]
                            .iter()
                            .flat_map(|t| vocabulary.pieces()[*t as usize].clone())
                            .collect();
                        let shown: Vec<String> = differing
                            .iter()
                            .take(8)
                            .map(|t| {
                                let side = if ours.is_set(*t) { "ours" } else { "theirs" };
                                format!(
                                    "{:?}:{side}",
                                    String::from_utf8_lossy(&vocabulary.pieces()[*t as usize])
                                )
                            })
                            .collect();
                        eprintln!(
                            "after {:?}: {} differ, e.g. {}",
                            String::from_utf8_lossy(&text),
                            differing.len(),
                            shown.join(" ")
                        );
                    }
                    mask_differences += !differing.is_empty() as usize;
                }
                if theirs.consume_token(token as TokenId).is_err() {
                    llguidance_failed =
                        Some(format!("llguidance rejected token {token} at step {step}"));
                    continue 'repeats;
                }
            }
        }
        row.theirs.extend_from_slice(&their_times);
    }
    row.notes.push(format!(
        "ours: peak {} states, {} clears, {} masks computed",
        row_peak, row_clears, row_masks
    ));
    row.notes
        .push(format!("{mask_differences} masks differ from llguidance's"));
    row.notes.extend(llguidance_failed);
    row
}

/// A deterministic random walk: at each step a uniformly chosen allowed non-EOG token,
/// stopping early (with EOG) once the grammar accepts and a coin says so.
fn sample_tokens(
    grammar: &Arc<llamay::grammar::CompiledGrammar>,
    trie: &Arc<TokenTrie>,
    vocabulary: &Vocabulary,
    seed: u64,
    length: usize,
) -> Vec<u32> {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut matcher = Matcher::new(grammar.clone(), trie.clone());
    let mut tokens = Vec::new();
    while tokens.len() < length {
        let accepting = matcher.is_accepting();
        let choices: Vec<u32> = matcher
            .compute_mask()
            .iter_set()
            .filter(|t| !vocabulary.is_end_of_generation(*t))
            .collect();
        if choices.is_empty() || (accepting && tokens.len() >= 8 && next() % 8 == 0) {
            if let Some(&eog) = vocabulary.end_of_generation().first() {
                if accepting {
                    tokens.push(eog);
                }
            }
            break;
        }
        let token = choices[(next() % choices.len() as u64) as usize];
        if matcher.commit(token).is_err() {
            break;
        }
        tokens.push(token);
    }
    tokens
}

fn print_row(name: &str, row: &Row) {
    let (avg, p50, p99, max) = summary(&row.ours);
    let (their_avg, their_p50, their_p99, their_max) = summary(&row.theirs);
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}", a / b)
        } else {
            "-".to_string()
        }
    };
    println!(
        "{:<11} {:>6} | {:>7.2}ms {:>6.1}us {:>6.1}us {:>6.1}us {:>6.1}us | {:>7.2}ms {:>6.1}us {:>6.1}us {:>6.1}us {:>6.1}us | {:>6} {:>6} | {}",
        name,
        row.ours.len(),
        ms(row.our_compile),
        avg,
        p50,
        p99,
        max,
        ms(row.their_compile),
        their_avg,
        their_p50,
        their_p99,
        their_max,
        ratio(avg, their_avg),
        ratio(p99, their_p99),
        row.notes.join("; ")
    );
}

/// (avg, p50, p99, max) in microseconds.
fn summary(samples: &[f64]) -> (f64, f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| sorted[((sorted.len() as f64 - 1.0) * q).round() as usize];
    (
        samples.iter().sum::<f64>() / samples.len() as f64,
        at(0.5),
        at(0.99),
        at(1.0),
    )
}

/// Records `micros` as step `step`'s time, or keeps the faster of it and an earlier run's.
fn keep_fastest(times: &mut Vec<f64>, step: usize, micros: f64) {
    match times.get_mut(step) {
        Some(best) => *best = best.min(micros),
        None => times.push(micros),
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(100)
        .collect()
}

struct BenchTokEnv {
    trie: TokTrie,
}

impl TokenizerEnv for BenchTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

fn llguidance_env(vocabulary: &Vocabulary) -> TokEnv {
    let eos = vocabulary.end_of_generation().first().copied().unwrap_or(0);
    let mut info = TokRxInfo::new(vocabulary.len() as u32, eos as TokenId);
    info.tok_end_of_turn = vocabulary.end_of_generation().get(1).map(|t| *t as TokenId);
    // llguidance marks special tokens with a 0xFF prefix; ours have no bytes at all.
    let tokens: Vec<Vec<u8>> = vocabulary
        .pieces()
        .iter()
        .enumerate()
        .map(|(id, piece)| {
            if piece.is_empty() || vocabulary.is_end_of_generation(id as u32) {
                let mut marked = vec![0xFF];
                marked.extend(format!("<special_{id}>").bytes());
                marked
            } else {
                piece.clone()
            }
        })
        .collect();
    Arc::new(BenchTokEnv {
        trie: TokTrie::from(&info, &tokens),
    })
}

/// Translates llama.cpp GBNF into llguidance's Lark dialect: rules become lowercase rules,
/// literals JSON strings, character classes and `.` regexes; one rule per line.
fn gbnf_to_lark(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut names: Vec<String> = Vec::new();
    let lark_name = |name: &str, names: &mut Vec<String>| {
        let index = names.iter().position(|n| n == name).unwrap_or_else(|| {
            names.push(name.to_string());
            names.len() - 1
        });
        format!("r{index}_{}", name.to_ascii_lowercase().replace('-', "_"))
    };
    let mut out = String::new();
    let mut i = 0;
    let escape = |c: char| -> String { format!("\\x{{{:X}}}", c as u32) };
    let read_char = |i: &mut usize| -> char {
        let c = chars[*i];
        *i += 1;
        if c != '\\' || *i >= chars.len() {
            return c;
        }
        let e = chars[*i];
        *i += 1;
        let digits = match e {
            'n' => return '\n',
            't' => return '\t',
            'r' => return '\r',
            'x' => 2,
            'u' => 4,
            'U' => 8,
            other => return other,
        };
        let hex: String = chars[*i..(*i + digits).min(chars.len())].iter().collect();
        *i += digits;
        u32::from_str_radix(&hex, 16)
            .ok()
            .and_then(char::from_u32)
            .unwrap_or('?')
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                i += 1;
                let mut literal = String::new();
                while i < chars.len() && chars[i] != '"' {
                    literal.push(read_char(&mut i));
                }
                i += 1;
                out.push_str(&serde_json::to_string(&literal).unwrap_or_default());
                out.push(' ');
            }
            '[' => {
                i += 1;
                let mut class = String::from("/[");
                if chars.get(i) == Some(&'^') {
                    class.push('^');
                    i += 1;
                }
                while i < chars.len() && chars[i] != ']' {
                    let low = read_char(&mut i);
                    class.push_str(&escape(low));
                    if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|c| *c != ']') {
                        i += 1;
                        class.push('-');
                        let high = read_char(&mut i);
                        class.push_str(&escape(high));
                    }
                }
                i += 1;
                class.push_str("]/ ");
                out.push_str(&class);
            }
            '.' => {
                out.push_str("/(?s:.)/ ");
                i += 1;
            }
            c if is_name(c) => {
                let start = i;
                while i < chars.len() && is_name(chars[i]) {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let mut look = i;
                while look < chars.len() && (chars[look] == ' ' || chars[look] == '\t') {
                    look += 1;
                }
                let defines = chars
                    .get(look..look + 3)
                    .is_some_and(|s| s == [':', ':', '=']);
                if defines {
                    out.push('\n');
                    out.push_str(&lark_name(&name, &mut names));
                    out.push_str(": ");
                    i = look + 3;
                } else {
                    out.push_str(&lark_name(&name, &mut names));
                    out.push(' ');
                }
            }
            c if c.is_whitespace() => i += 1,
            '{' => {
                while i < chars.len() && chars[i] != '}' {
                    if !chars[i].is_whitespace() {
                        out.push(chars[i]);
                    }
                    i += 1;
                }
                out.push_str("} ");
                i += 1;
            }
            other => {
                out.push(other);
                out.push(' ');
                i += 1;
            }
        }
    }
    format!("start: {}\n{out}\n", lark_name("root", &mut names))
}
