//! Compile time alone (JSON Schema -> automaton), llamay next to llguidance on the same
//! schemas in the same run, with the ratio; no masks, so a whole MaskBench split takes
//! seconds, not the tens of minutes `maskbench` needs.
//!
//! Usage: `cargo bench --bench schema_compile -- [--limit N] [--slow US] DIR...`, each DIR a
//! MaskBench directory (one `{"schema", "tests"}` file per schema); with no DIR, the shapes in
//! `testdata/maskbench-shapes`. llamay's time is what `maskbench` times as compile:
//! `compile_schema` plus `CompiledGrammar::new`, split here into those two phases.
//! llguidance's is `create_parser` plus its `Matcher`, on the first vocabulary of
//! `LLAMAY_VOCAB_JSON` (a store model name, a GGUF path or a `.json` vocabulary; default
//! `smollm2:135m`). Times are the bench thread's CPU time (the machine is shared).
//!
//! Prints: schemas compiled / refused by keyword / failed, one row per engine (avg, p50,
//! p99, max), the ratios, and every llamay compile slower than `--slow` (default 5,000 us),
//! slowest first, with its rule and symbol counts, the kinds of rule holding most symbols, and
//! the time of each phase.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use llamay::grammar::ir::Grammar;
use llamay::grammar::schema::compile_schema;
use llamay::grammar::{CompiledGrammar, Limits};
use llamay_test_support::cpu_timing::{row, CpuInstant};
use llamay_test_support::vocabularies;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::ParserFactory;
use serde_json::Value;

struct Case {
    name: String,
    schema: Value,
}

fn load_cases(directories: &[PathBuf], limit: usize) -> Vec<Case> {
    let mut files: Vec<PathBuf> = Vec::new();
    for directory in directories {
        match std::fs::read_dir(directory) {
            Ok(entries) => files.extend(
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json")),
            ),
            Err(error) => eprintln!("skipping {}: {error}", directory.display()),
        }
    }
    files.sort();
    files.truncate(limit);
    files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let value: Value = serde_json::from_str(&text).ok()?;
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("?")
                .to_string();
            Some(Case {
                name,
                schema: value.get("schema")?.clone(),
            })
        })
        .collect()
}

/// One slow llamay compile: total, schema phase, automaton phase, rules, where its symbols
/// are, name.
struct Slow {
    total: f64,
    schema: f64,
    automaton: f64,
    rules: usize,
    heaviest: String,
    name: String,
}

/// The symbol count of `grammar` and the three kinds of rule (a rule's name up to its first
/// space or dot: `pattern-state`, `string-chars-opt`, `property`...) holding the most symbols:
/// the automaton's compile cost is linear in symbols, so this says what to make smaller.
fn heaviest_rule_kinds(grammar: &Grammar) -> String {
    let mut by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut total = 0;
    for rule in &grammar.rules {
        let kind = rule.name.split([' ', '.']).next().unwrap_or("");
        let symbols: usize = rule.alternatives.iter().map(|a| a.len() + 1).sum();
        let entry = by_kind.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += symbols;
        total += symbols;
    }
    let mut kinds: Vec<(&str, (usize, usize))> = by_kind.into_iter().collect();
    kinds.sort_by_key(|(_, (_, symbols))| std::cmp::Reverse(*symbols));
    let listed: Vec<String> = kinds
        .iter()
        .take(3)
        .map(|(kind, (rules, symbols))| format!("{kind} {rules}/{symbols}"))
        .collect();
    format!(
        "{total} symbols; most in (rules/symbols): {}",
        listed.join(", ")
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut directories = Vec::new();
    let mut limit = usize::MAX;
    let mut slow_micros = 5_000.0;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--limit" => {
                limit = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(usize::MAX)
            }
            "--slow" => {
                slow_micros = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(slow_micros)
            }
            other if !other.starts_with("--") => directories.push(PathBuf::from(other)),
            _ => {}
        }
    }
    if directories.is_empty() {
        directories.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/maskbench-shapes"));
    }
    let cases = load_cases(&directories, limit);
    println!(
        "schema_compile: {} schemas from {:?}",
        cases.len(),
        directories
    );

    let progress = ProgressBar::new(cases.len() as u64 * 2);
    progress.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    progress.set_message("llamay");
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = Vec::new();
    let (mut totals, mut schema_phase, mut automaton_phase) = (Vec::new(), Vec::new(), Vec::new());
    let mut slow = Vec::new();
    let mut compiled = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        progress.inc(1);
        let started = CpuInstant::now();
        let grammar = match compile_schema(&case.schema) {
            Ok(grammar) => grammar,
            Err(error) => {
                *refused.entry(error.keyword.clone()).or_default() += 1;
                continue;
            }
        };
        let schema_micros = started.elapsed_micros();
        let rules = grammar.rules.len();
        let heaviest = heaviest_rule_kinds(&grammar);
        let between = CpuInstant::now();
        if let Err(error) = CompiledGrammar::new(grammar, &Limits::default()) {
            failed.push(format!("{}: {error}", case.name));
            continue;
        }
        let automaton_micros = between.elapsed_micros();
        let total = schema_micros + automaton_micros;
        totals.push(total);
        schema_phase.push(schema_micros);
        automaton_phase.push(automaton_micros);
        compiled.push(index);
        if total > slow_micros {
            slow.push(Slow {
                total,
                schema: schema_micros,
                automaton: automaton_micros,
                rules,
                heaviest,
                name: case.name.clone(),
            });
        }
    }

    let vocabulary_reference = vocabularies::names().into_iter().next();
    let mut theirs = Vec::new();
    let mut theirs_failed = 0usize;
    progress.set_message("llguidance");
    match vocabulary_reference
        .as_deref()
        .map(llamay::actors::model::load_vocabulary)
    {
        Some(Ok(vocabulary)) => {
            let (tokens, eog) = (vocabulary.pieces(), vocabulary.end_of_generation());
            let info = TokRxInfo::new(tokens.len() as u32, eog.first().copied().unwrap_or(0));
            let env: llguidance::toktrie::TokEnv =
                Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, tokens)));
            match ParserFactory::new_simple(&env) {
                Ok(mut factory) => {
                    factory.quiet();
                    for &index in &compiled {
                        progress.inc(1);
                        let started = CpuInstant::now();
                        let parser = factory.create_parser(TopLevelGrammar::from_json_schema(
                            cases[index].schema.clone(),
                        ));
                        let matcher = llguidance::Matcher::new(parser);
                        let micros = started.elapsed_micros();
                        if matcher.is_error() {
                            theirs_failed += 1;
                        } else {
                            theirs.push(micros);
                        }
                    }
                }
                Err(error) => eprintln!("llguidance factory failed: {error}"),
            }
        }
        Some(Err(error)) => eprintln!("vocabulary: {error}"),
        None => eprintln!("no vocabulary named in LLAMAY_VOCAB_JSON"),
    }
    progress.finish_and_clear();

    let refused_total: usize = refused.values().sum();
    println!(
        "schemas: {} compiled, {refused_total} refused {refused:?}, {} failed",
        totals.len(),
        failed.len()
    );
    for line in &failed {
        println!("  failed: {line}");
    }
    println!("compile (schema -> automaton):");
    let ours = row("llamay compile", &mut totals);
    row("  of which schema -> rules", &mut schema_phase);
    row("  of which rules -> automaton", &mut automaton_phase);
    let reference = vocabulary_reference.unwrap_or_default();
    let theirs_row = row(&format!("llguidance ({reference})"), &mut theirs);
    println!("  llguidance could not compile {theirs_failed} of the schemas llamay compiled");
    if let (Some(ours), Some(theirs)) = (ours, theirs_row) {
        println!(
            "  ratio llamay/llguidance: avg {:.2}x, p50 {:.2}x, p99 {:.2}x, max {:.2}x (goals: llamay p50 <= 500 us, p99 <= 10,000 us, max <= 50,000 us)",
            ours[0] / theirs[0],
            ours[1] / theirs[1],
            ours[2] / theirs[2],
            ours[3] / theirs[3]
        );
    }
    slow.sort_by(|a, b| b.total.total_cmp(&a.total));
    for entry in &slow {
        println!(
            "  slow compile: {:>9.0} us {} ({} rules, {}; schema {:.0} us, automaton {:.0} us)",
            entry.total, entry.name, entry.rules, entry.heaviest, entry.schema, entry.automaton
        );
    }
}
