//! MaskBench-format schemas through llamay's schema compiler, automaton and token masks, with
//! llguidance on the same files and vocabulary in the same run.
//!
//! Usage: `cargo bench --bench maskbench -- [--limit N] [--per-schema] [DIR...]`, each DIR a MaskBench
//! directory (one `{"schema", "tests"}` file per schema, such as MaskBench's dev split, which
//! the repository does not carry). With no DIR it says so and runs on the JSON-Schema-Test-
//! Suite cases in `testdata/` (files holding lists of such cases). Vocabularies: `LLAMAY_VOCAB_JSON=a[,b]`, each a store
//! model name or GGUF path, or a `.json` file `{"tokens": [[bytes...], ...], "eog": [ids]}`;
//! default `smollm2:135m,gemma3:270m`.
//!
//! Prints: schemas compiled / refused (by keyword) / failed, valid instances accepted, invalid
//! instances rejected, false accepts (an invalid instance accepted although the validator
//! names an enforced keyword among its errors; must be 0), compile time, and the time per
//! mask at every token of every valid instance, for llamay and llguidance, with ratios. The
//! ratios compare the masks both engines computed: an instance whose schema llguidance cannot
//! compile counts in llamay's every-instance row but not in them.
//! Times are the bench thread's CPU time, for both engines (the machine is shared; wall time
//! would also count other processes' turns). Instances are tokenized greedily (longest match over the vocabulary's bytes), not with
//! the model's own tokenizer, so token boundaries approximate a real run's. One thread.
//! `--per-schema` also prints, per schema and vocabulary, the slowest llamay and llguidance
//! mask and the matcher's counters (states, clears, overflows), to find what makes a mask slow,
//! and each llamay mask slower than `--slow-us N` microseconds (default 5000) with the text
//! written before it.
//! `testdata/maskbench-shapes` holds one schema per shape that made single masks slow
//! (bounded strings in a closed object of many optional properties, an anyOf of objects, a
//! `$ref` cycle, open objects with extra keys, `patternProperties` keys): run it with
//! `--per-schema` to see each one's slowest mask next to llguidance's.
//! `--warm` compiles each schema once per vocabulary and runs all its instances on that
//! grammar, as a server serving a schema again does: later instances start on the caches
//! (states, masks) earlier ones left, so this measures what those caches keep. llguidance
//! still compiles per instance there: its ratio is then not a like-for-like comparison.
//! `--budget` also replays every instance twice more through a `Constraint` (each on a freshly
//! compiled grammar), timing per token the sampler's constraint work (the token's check and
//! the mask): once without a token budget, once told the tokens left (the instance's tokens
//! plus its bytes, so the budget never binds and what is measured is its cost far from the
//! end: the sampled token's distance check); and prints both with their ratio (goal: within
//! 5% on average). It also times, at every token, the mask narrowed to a budget that just
//! binds (one token fewer than the fewest that complete the document from there): what a step
//! costs once the budget refused the sampled token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use llamay::grammar::schema::compile_schema;
use llamay::grammar::{check_input, CheckOutcome, CompiledGrammar, Constraint, Limits, Matcher, TokenTrie};
use llamay_test_support::cpu_timing::{row, CpuInstant};
use llamay_test_support::vocabularies;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::ParserFactory;
use serde_json::Value;

/// Keywords llamay parses but does not enforce; a validator error from one of these is not
/// a false accept.
const NOT_ENFORCED: &[&str] = &[
    "format", "uniqueItems", "prefixItems", "contains", "minContains", "maxContains", "minProperties",
    "maxProperties", "propertyNames", "dependentRequired", "dependencies", "oneOf", "additionalItems",
];

struct Case {
    name: String,
    schema: Value,
    tests: Vec<(Value, bool)>,
}

struct Compiled {
    case: usize,
    grammar: Arc<CompiledGrammar>,
    /// Valid instances the automaton accepts (the ones masks are timed on).
    accepted: Vec<String>,
}

fn load_cases(directories: &[PathBuf], limit: usize) -> Vec<Case> {
    let mut files: Vec<PathBuf> = Vec::new();
    for directory in directories {
        match std::fs::read_dir(directory) {
            Ok(entries) => files.extend(
                entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")),
            ),
            Err(error) => eprintln!("skipping {}: {error}", directory.display()),
        }
    }
    files.sort();
    files.truncate(limit);
    let mut cases = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            eprintln!("skipping {}: not JSON", path.display());
            continue;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        match value {
            // A JSON-Schema-Test-Suite file: a list of cases, each with its description.
            Value::Array(suite_cases) => cases.extend(suite_cases.iter().map(|case| {
                let description = case["description"].as_str().unwrap_or("?");
                read_case(format!("{name}: {description}"), case)
            })),
            case => cases.push(read_case(name, &case)),
        }
    }
    cases
}

fn read_case(name: String, case: &Value) -> Case {
    let tests = case["tests"]
        .as_array()
        .map(|tests| tests.iter().map(|t| (t["data"].clone(), t["valid"].as_bool().unwrap_or(false))).collect())
        .unwrap_or_default();
    Case { name, schema: case["schema"].clone(), tests }
}

/// Whether the validator blames an enforced keyword for `instance` being invalid (the
/// corpus marks instances invalid for `format` too, which validators and llamay ignore).
fn fails_on_enforced_keyword(schema: &Value, instance: &Value) -> bool {
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return true;
    };
    let keywords: Vec<String> = validator.iter_errors(instance).map(|e| e.schema_path.to_string()).collect();
    // No errors at all: the validator itself (format as annotation) finds the instance valid.
    keywords.iter().any(|path| !NOT_ENFORCED.contains(&path.rsplit('/').next().unwrap_or("")))
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let mut directories = Vec::new();
    let mut limit = usize::MAX;
    let mut per_schema = false;
    let mut warm = false;
    let mut budget = false;
    let mut slow_mask_micros = 5_000.0;
    while let Some(arg) = args.next() {
        if arg == "--per-schema" {
            per_schema = true;
        } else if arg == "--warm" {
            warm = true;
        } else if arg == "--budget" {
            budget = true;
        } else if arg == "--slow-us" {
            slow_mask_micros = args.next().and_then(|n| n.parse().ok()).unwrap_or(slow_mask_micros);
        } else if arg == "--limit" {
            limit = args.next().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
        } else if !arg.starts_with("--") {
            directories.push(PathBuf::from(arg));
        }
    }
    if directories.is_empty() {
        let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/json-schema-test-suite/tests/draft2020-12");
        println!(
            "maskbench: no MaskBench directory given (cargo bench --bench maskbench -- DIR); running on the \
             JSON-Schema-Test-Suite cases in {}",
            suite.display()
        );
        directories.push(suite);
    }
    let cases = load_cases(&directories, limit);
    println!("maskbench: {} schemas from {:?}", cases.len(), directories);

    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = Vec::new();
    let mut compiled = Vec::new();
    let mut compile_times = Vec::new();
    let (mut valid_accepted, mut valid_total, mut invalid_rejected, mut invalid_total) = (0, 0, 0, 0);
    let mut false_accepts = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let started = CpuInstant::now();
        let grammar = match compile_schema(&case.schema) {
            Ok(grammar) => grammar,
            Err(error) => {
                *refused.entry(error.keyword.clone()).or_default() += 1;
                continue;
            }
        };
        let grammar = match CompiledGrammar::new(grammar, &Limits::default()) {
            Ok(grammar) => Arc::new(grammar),
            Err(error) => {
                failed.push(format!("{}: {error}", case.name));
                continue;
            }
        };
        compile_times.push(started.elapsed_micros());
        let compile_micros = started.elapsed_micros();
        if per_schema && compile_micros > 5_000.0 {
            println!("  slow compile: {:>9.0} us {} ({} rules)", compile_micros, case.name, grammar.rule_names().len());
        }
        let mut accepted = Vec::new();
        for (data, valid) in &case.tests {
            let text = data.to_string();
            let is_accepted = check_input(&grammar, text.as_bytes()) == CheckOutcome::Match;
            if *valid {
                valid_total += 1;
                if is_accepted {
                    valid_accepted += 1;
                    accepted.push(text);
                }
            } else {
                invalid_total += 1;
                if !is_accepted {
                    invalid_rejected += 1;
                } else if fails_on_enforced_keyword(&case.schema, data) {
                    false_accepts.push(format!("{}: {}", case.name, text.chars().take(160).collect::<String>()));
                }
            }
        }
        compiled.push(Compiled { case: index, grammar, accepted });
    }
    let refused_total: usize = refused.values().sum();
    println!("schemas: {} compiled, {refused_total} refused {refused:?}, {} failed", compiled.len(), failed.len());
    for line in &failed {
        println!("  failed: {line}");
    }
    println!("valid instances accepted:   {valid_accepted} / {valid_total} (the rest: closed objects, declared order, canonical strings)");
    println!("invalid instances rejected: {invalid_rejected} / {invalid_total} (the rest fail only on ignored keywords such as format)");
    println!("FALSE ACCEPTS:              {}", false_accepts.len());
    for line in &false_accepts {
        println!("  false accept: {line}");
    }
    println!("compile (schema -> automaton), llamay:");
    let ours_compile = row("llamay compile", &mut compile_times);

    for path in vocabularies::names() {
        match llamay::actors::model::load_vocabulary(&path) {
            Ok(vocabulary) => {
                let (tokens, eog) = (vocabulary.pieces(), vocabulary.end_of_generation());
                let report = Report { per_schema, warm, budget, slow_mask_micros };
                bench_vocab(&path, tokens, eog, &cases, &compiled, ours_compile, &report);
            }
            Err(error) => eprintln!("{error}"),
        }
    }
}

/// What `--per-schema` prints: per schema its slowest masks and counters, and every mask
/// slower than `slow_mask_micros` (`--slow-us`, default 5000) with the text before it.
#[derive(Clone, Copy)]
struct Report {
    per_schema: bool,
    /// `--warm`: one grammar per schema and vocabulary for all its instances.
    warm: bool,
    /// `--budget`: the constraint's work per token with a token budget and without.
    budget: bool,
    slow_mask_micros: f64,
}

/// `--budget`: at each token of an instance, the time to narrow the mask to the tokens that
/// complete the document in one token fewer than the fewest found from there.
fn tight_mask_times(schema: &Value, trie: &Arc<TokenTrie>, token_ids: &[u32]) -> Option<Vec<f64>> {
    let grammar = CompiledGrammar::new(compile_schema(schema).ok()?, &Limits::default()).ok()?;
    let mut matcher = Matcher::new(Arc::new(grammar), trie.clone());
    let mut times = Vec::with_capacity(token_ids.len());
    for &token in token_ids {
        let mut mask = matcher.compute_mask().clone();
        let started = CpuInstant::now();
        let most = matcher.closing_tokens().saturating_sub(1);
        matcher.narrow_to_budget(&mut mask, most);
        times.push(started.elapsed_micros());
        if matcher.commit(token).is_err() {
            break;
        }
    }
    Some(times)
}

/// `--budget`: the constraint's work at each token of `text` (its check, then the mask), on a
/// freshly compiled grammar, with the tokens left told when `budgeted`; `None` when the schema
/// does not compile again.
fn constraint_step_times(schema: &Value, trie: &Arc<TokenTrie>, token_ids: &[u32], text: &str, budgeted: bool) -> Option<Vec<f64>> {
    let grammar = CompiledGrammar::new(compile_schema(schema).ok()?, &Limits::default()).ok()?;
    let mut constraint = Constraint::new(Some(Matcher::new(Arc::new(grammar), trie.clone())), None)?;
    // Never binding: every token of the instance plus one per byte.
    let budget = (token_ids.len() + text.len()) as u32;
    let mut times = Vec::with_capacity(token_ids.len());
    for (index, &token) in token_ids.iter().enumerate() {
        let started = CpuInstant::now();
        if budgeted {
            constraint.set_tokens_left(budget - index as u32);
        }
        let allowed = constraint.is_allowed(token) && (!budgeted || constraint.fits_budget(token));
        let in_mask = constraint.compute_mask().is_set(token);
        times.push(started.elapsed_micros());
        if !allowed || !in_mask || constraint.commit(token).is_err() {
            break;
        }
    }
    Some(times)
}

fn bench_vocab(
    path: &str,
    tokens: &[Vec<u8>],
    eog: &[u32],
    cases: &[Case],
    compiled: &[Compiled],
    ours_compile: Option<[f64; 4]>,
    report: &Report,
) {
    let Report { per_schema, warm, budget, slow_mask_micros } = *report;
    let start = if warm {
        "llamay runs a schema's instances on one grammar (--warm), llguidance compiles per instance"
    } else {
        "each instance starts from a freshly compiled grammar"
    };
    println!("\nvocabulary {path}: {} tokens (instances tokenized greedily, longest match; {start})", tokens.len());
    let trie = Arc::new(TokenTrie::new(tokens, eog));
    let info = TokRxInfo::new(tokens.len() as u32, eog.first().copied().unwrap_or(0));
    let llg_trie = TokTrie::from(&info, tokens);
    let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(llg_trie));
    let mut factory = match ParserFactory::new_simple(&env) {
        Ok(factory) => factory,
        Err(error) => {
            println!("llguidance factory failed: {error}");
            return;
        }
    };
    factory.quiet();
    let (mut ours_masks, mut llg_masks, mut llg_compile) = (Vec::new(), Vec::new(), Vec::new());
    // The masks both engines computed, token for token: the ratios compare these, so that the
    // instances of a schema llguidance cannot compile do not weigh on llamay's side alone.
    let (mut ours_paired, mut llg_paired): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let (mut not_in_mask, mut llg_failed, mut llg_rejected) = (0usize, 0usize, 0usize);
    // `--budget`: the constraint's work per token without a budget and with one, paired.
    let (mut unbudgeted, mut budgeted): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let mut tight = Vec::new();
    // Schemas by their slowest llamay mask, to point at what to optimise.
    let mut slowest: Vec<(f64, &str)> = Vec::new();
    for entry in compiled {
        let case = &cases[entry.case];
        let (ours_before, theirs_before) = (ours_masks.len(), llg_masks.len());
        let mut counters = String::new();
        let mut shared: Option<Arc<CompiledGrammar>> = None;
        for (instance_index, text) in entry.accepted.iter().enumerate() {
            let token_ids = env.tok_trie().greedy_tokenize(text.as_bytes());
            // A fresh grammar per instance: matchers of one compiled grammar share their
            // transition and mask caches, which would let later instances ride on earlier ones
            // (with `--warm`, what is measured).
            let fresh = match shared.as_ref().filter(|_| warm) {
                Some(grammar) => grammar.clone(),
                None => compile_schema(&case.schema)
                    .ok()
                    .and_then(|ir| CompiledGrammar::new(ir, &Limits::default()).ok())
                    .map_or_else(|| entry.grammar.clone(), Arc::new),
            };
            shared = Some(fresh.clone());
            let mut matcher = Matcher::new(fresh, trie.clone());
            let (ours_instance, theirs_instance) = (ours_masks.len(), llg_masks.len());
            let mut written = Vec::new();
            for &token in &token_ids {
                let (states_before, clears_before) = (matcher.stats().states, matcher.stats().table_clears);
                let started = CpuInstant::now();
                let allowed = matcher.compute_mask().is_set(token);
                ours_masks.push(started.elapsed_micros());
                let micros = started.elapsed_micros();
                if per_schema && micros > slow_mask_micros {
                    let tail = String::from_utf8_lossy(&written[written.len().saturating_sub(40)..]).into_owned();
                    println!(
                        "    slow mask {micros:>9.0} us: {} new states, {} clears, after ...{tail:?}",
                        matcher.stats().states as i64 - states_before as i64,
                        matcher.stats().table_clears - clears_before
                    );
                }
                written.extend_from_slice(trie.token_bytes(token).unwrap_or_default());
                if micros > 10_000.0 {
                    match slowest.iter_mut().find(|(_, name)| *name == case.name) {
                        Some(worst) => worst.0 = worst.0.max(micros),
                        None => slowest.push((micros, &case.name)),
                    }
                }
                if !allowed || matcher.commit(token).is_err() {
                    not_in_mask += 1;
                    break;
                }
            }
            if budget {
                // In turns, first one then the other: the vocabulary's own tables (loop sets,
                // shared by every grammar) warm up in whichever runs first.
                let run = |budgeted| constraint_step_times(&case.schema, &trie, &token_ids, text, budgeted);
                let (off, on) = match instance_index % 2 {
                    0 => {
                        let off = run(false);
                        (off, run(true))
                    }
                    _ => {
                        let on = run(true);
                        (run(false), on)
                    }
                };
                tight.extend(tight_mask_times(&case.schema, &trie, &token_ids).unwrap_or_default());
                if let (Some(off), Some(on)) = (off, on) {
                    let common = off.len().min(on.len());
                    unbudgeted.extend_from_slice(&off[..common]);
                    budgeted.extend_from_slice(&on[..common]);
                }
            }
            let stats = matcher.stats();
            counters = format!(
                "states peak {} · {} masks computed · {} clears · {} overflows",
                stats.states_peak, stats.masks_computed, stats.table_clears, stats.overflows
            );
            let started = CpuInstant::now();
            let parser = factory.create_parser(TopLevelGrammar::from_json_schema(case.schema.clone()));
            let mut llg = llguidance::Matcher::new(parser);
            if instance_index == 0 {
                llg_compile.push(started.elapsed_micros());
            }
            if llg.is_error() {
                llg_failed += 1;
                continue;
            }
            for &token in &token_ids {
                let started = CpuInstant::now();
                let mask = llg.compute_mask();
                llg_masks.push(started.elapsed_micros());
                match mask {
                    Ok(mask) if mask.is_allowed(token) => {}
                    _ => {
                        llg_rejected += 1;
                        break;
                    }
                }
                if llg.consume_token(token).is_err() {
                    llg_rejected += 1;
                    break;
                }
            }
            let (ours, theirs) = (&ours_masks[ours_instance..], &llg_masks[theirs_instance..]);
            let common = ours.len().min(theirs.len());
            ours_paired.extend_from_slice(&ours[..common]);
            llg_paired.extend_from_slice(&theirs[..common]);
        }
        if per_schema {
            let worst = |times: &[f64]| times.iter().copied().fold(0.0f64, f64::max);
            let total = |times: &[f64]| times.iter().sum::<f64>();
            println!(
                "  schema {:<48} max llamay {:>9.0} us, llguidance {:>9.0} us · total {:>9.0} us, {:>9.0} us · {counters}",
                case.name,
                worst(&ours_masks[ours_before..]),
                worst(&llg_masks[theirs_before..]),
                total(&ours_masks[ours_before..]),
                total(&llg_masks[theirs_before..])
            );
        }
    }
    println!("  llamay: {not_in_mask} instances stopped on a token outside the mask (must be 0)");
    println!("  llguidance: {llg_failed} instances whose schema it could not compile, {llg_rejected} stopped on a token it masked out");
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (micros, name) in slowest.iter().take(5) {
        println!("  slowest llamay mask: {:>10.0} us in {name}", micros);
    }
    row("llamay mask, every instance", &mut ours_masks);
    if budget {
        println!("  the constraint's work per token (check and mask), without a token budget and with one far from binding:");
        let off = row("budget off", &mut unbudgeted);
        let on = row("budget on", &mut budgeted);
        if let (Some(off), Some(on)) = (off, on) {
            println!(
                "  budget on/off: avg {:.3}x (goal <= 1.05x), p50 {:.3}x, p99 {:.3}x, max {:.3}x",
                on[0] / off[0],
                on[1] / off[1],
                on[2] / off[2],
                on[3] / off[3]
            );
        }
        row("mask narrowed, budget binding", &mut tight);
    }
    row("llguidance mask", &mut llg_masks);
    println!("  the same masks, where both engines ran (the ratios):");
    let ours = row("llamay mask", &mut ours_paired);
    let theirs = row("llguidance mask", &mut llg_paired);
    let theirs_compile = row("llguidance compile", &mut llg_compile);
    if let (Some(ours), Some(theirs)) = (ours, theirs) {
        println!(
            "  mask ratio llamay/llguidance: avg {:.2}x (goal <= 0.5x), p50 {:.2}x, p99 {:.2}x (goal <= 1x), max {:.2}x",
            ours[0] / theirs[0],
            ours[1] / theirs[1],
            ours[2] / theirs[2],
            ours[3] / theirs[3]
        );
    }
    if let (Some(ours), Some(theirs)) = (ours_compile, theirs_compile) {
        println!(
            "  compile ratio llamay/llguidance: avg {:.2}x, p50 {:.2}x (goal: llamay p50 <= 500 us; it is {:.0} us)",
            ours[0] / theirs[0],
            ours[1] / theirs[1],
            ours[1]
        );
    }
}
