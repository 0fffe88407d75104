//! `llamay eval`: forked-context batch evaluation (issue 11). One long shared prefix is prefilled
//! once into a context; every item forks it (no new prefill) and continues it, `-parallel`
//! items at a time on one model (continuous batching); each answer becomes one JSON line of the
//! results file, which a rerun resumes from.
//!
//! The items file (JSON Lines, one object a line, blank lines ignored), all lines of one kind:
//! - `{"id": "q1", "prompt": "text"}`: raw text; the item's prompt continues the prefix's
//!   tokens (so end the prefix where a token ends, e.g. with a newline);
//! - `{"id": 7, "messages": [{"role": "user", "content": "..."}]}`: a conversation; the prefix
//!   is its system message and the chat template is applied.
//!
//! `id` is a string or an integer, unique in the file. Each result line is
//! `{"id", "output", "tokens", "prompt_tokens", "cached_tokens", "finish_reason", "ms"}`.
//!
//! `-score` scores each item's `choices` as continuations of prefix + prompt instead
//! (`score.rs`): log-likelihoods per choice, the argmax and, with `answer`, correctness; the
//! summary gives the accuracy over the whole results file.
//!
//! Like the other commands, eval uses a running daemon when one answers (its contexts API:
//! create, `fork?n=1` per item, the Ollama routes with `llamay_context`) and otherwise loads the
//! model in this process. This module runs the items; `settings.rs` checks the flags,
//! `items.rs` reads the items file, `backend.rs` runs one item here or on a daemon and
//! `results.rs` appends the answers. Key items: [`EvalArgs`], [`eval`].
//! Cost: one prefill of the prefix; per item, its own tokens and answer (under `-score`, its
//! prompt once and each choice's tokens).

mod backend;
mod items;
mod results;
mod score;
mod settings;

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::cli::CliError;
use backend::{Backend, ItemAnswer, WireConstraint};
use items::{pending, read_items, Item, ItemInput};
use results::ResultsFile;
use score::{score_item, score_line, Accuracy};
use settings::EvalSettings;
pub use settings::EvalArgs;

/// What the run did, for the summary.
#[derive(Debug, Default)]
struct Tally {
    done: usize,
    generated: u64,
    /// Prompt tokens of every request, and how many of them were reused rather than decoded.
    prompt: u64,
    reused: u64,
}

pub fn eval(args: EvalArgs) -> Result<ExitCode, CliError> {
    let settings = EvalSettings::from_args(&args)?;
    let constraint = crate::cli::constraint::constraint_from_flags(
        args.grammar_file.as_ref(),
        args.json,
        args.schema.as_ref(),
        args.formats,
        None,
    )?;
    let prefix = std::fs::read_to_string(&args.prefix).map_err(|source| CliError::Io {
        path: args.prefix.display().to_string(),
        source,
    })?;
    if prefix.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: the prefix is empty",
            args.prefix.display()
        )));
    }
    let items = read_items(&args.items, args.score)?;
    let (mut results, done) = ResultsFile::open(&args.output)?;
    let pending = pending(&items, &done);
    let skipped = items.len() - pending.len();
    if skipped > 0 {
        eprintln!(
            "{skipped} of {} items already in {}; running the other {}",
            items.len(),
            args.output.display(),
            pending.len()
        );
    }
    if pending.is_empty() {
        eprintln!("nothing to do");
        if args.score {
            println!("eval -score: {}", Accuracy::of_file(&args.output)?.describe());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let chat = matches!(items[0].input, ItemInput::Messages(_));
    let wire = WireConstraint::from_flags(&args)?;
    let mut backend = Backend::start(&args.model, &settings, constraint, wire)?;
    if args.score {
        let prefix_tokens = backend.tokenize(&prefix, true)?;
        // Scoring the prefix alone leaves its scored positions for every item to reuse.
        backend.score(prefix_tokens.clone())?;
        eprintln!(
            "prefix: {} tokens scored once ({})",
            prefix_tokens.len(),
            backend.describe()
        );
        let run = run_items(&pending, settings.parallel, &mut results, true, |item| {
            let scores = score_item(&backend, &prefix_tokens, item)?;
            Ok(Finished {
                line: score_line(item, &scores),
                generated: 0,
                prompt: scores.prompt_tokens,
                reused: scores.cached_tokens,
            })
        });
        backend.finish();
        let accuracy = Accuracy::of_file(&args.output)?;
        println!(
            "{}",
            score_summary(&run, prefix_tokens.len(), &accuracy, skipped, &args.output)
        );
        return run.outcome();
    }
    let prefix_tokens = backend.prefill(&prefix, chat)?;
    eprintln!(
        "prefix: {prefix_tokens} tokens prefilled once ({})",
        backend.describe()
    );
    let run = run_items(&pending, settings.parallel, &mut results, false, |item| {
        let answer = backend.run_item(item)?;
        Ok(Finished {
            line: result_line(item, &answer),
            generated: u64::from(answer.tokens),
            prompt: u64::from(answer.prompt_tokens),
            reused: u64::from(answer.cached_tokens.unwrap_or(0)),
        })
    });
    let reused = backend.reused_tokens(run.tally.reused)?;
    backend.finish();
    println!(
        "{}",
        summary(
            &run.tally,
            run.elapsed,
            prefix_tokens,
            reused,
            skipped,
            &args.output
        )
    );
    run.outcome()
}

/// One item done: its result line and what it adds to the tally.
struct Finished {
    line: String,
    generated: u64,
    prompt: u64,
    reused: u64,
}

/// What [`run_items`] did, and the first failure, which stopped it.
struct Run {
    tally: Tally,
    elapsed: Duration,
    error: Option<CliError>,
}

impl Run {
    fn outcome(self) -> Result<ExitCode, CliError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(ExitCode::SUCCESS),
        }
    }
}

/// Runs `pending` through `run`, `parallel` at a time, appending each result line as it comes,
/// under a progress bar; the first failure stops the run (the lines written stay).
fn run_items(
    pending: &[&Item],
    parallel: u32,
    results: &mut ResultsFile,
    scoring: bool,
    run: impl Fn(&Item) -> Result<Finished, CliError> + Sync,
) -> Run {
    let bar = progress_bar(pending.len());
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<CliError>> = Mutex::new(None);
    let tally = Mutex::new(Tally::default());
    let results = Mutex::new(results);
    let workers = (parallel as usize).min(pending.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if failed.load(Ordering::Acquire) {
                    return;
                }
                let Some(item) = pending.get(next.fetch_add(1, Ordering::AcqRel)) else {
                    return;
                };
                let outcome = run(item).and_then(|finished| {
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .append(&finished.line)?;
                    Ok(finished)
                });
                match outcome {
                    Ok(finished) => {
                        let mut tally = tally
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        tally.done += 1;
                        tally.generated += finished.generated;
                        tally.prompt += finished.prompt;
                        tally.reused += finished.reused;
                        let seconds = started.elapsed().as_secs_f64().max(1e-9);
                        bar.set_message(if scoring {
                            format!(
                                "{} prompt tokens decoded, {} reused",
                                tally.prompt.saturating_sub(tally.reused),
                                tally.reused
                            )
                        } else {
                            format!("{:.1} tok/s", tally.generated as f64 / seconds)
                        });
                        bar.inc(1);
                    }
                    Err(error) => {
                        failed.store(true, Ordering::Release);
                        let mut slot = first_error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        slot.get_or_insert(match error {
                            usage @ CliError::Usage(_) => usage,
                            other => CliError::Model(format!("item {}: {other}", item.id)),
                        });
                        return;
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    Run {
        tally: tally
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        elapsed: started.elapsed(),
        error: first_error
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

fn progress_bar(total: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{bar:30} {pos}/{len} items · {per_sec} · {msg} · ETA {eta}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn result_line(item: &Item, answer: &ItemAnswer) -> String {
    json!({
        "id": item.id,
        "output": answer.output,
        "tokens": answer.tokens,
        "prompt_tokens": answer.prompt_tokens,
        "cached_tokens": answer.cached_tokens,
        "finish_reason": answer.finish_reason,
        "ms": answer.elapsed.as_millis() as u64,
    })
    .to_string()
}

/// `eval: 25 items in 8.1s (3.1 items/s) · 412 tokens generated (50.9 tok/s) · prefix 160
/// tokens prefilled once, 4000 prompt tokens reused · 25 skipped (already in out.jsonl)`
fn summary(
    tally: &Tally,
    elapsed: Duration,
    prefix_tokens: u32,
    reused: u64,
    skipped: usize,
    output: &Path,
) -> String {
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let mut line = format!(
        "eval: {} items in {:.1}s ({:.1} items/s) · {} tokens generated ({:.1} tok/s) · prefix {} tokens prefilled once, {} prompt tokens reused",
        tally.done,
        seconds,
        tally.done as f64 / seconds,
        tally.generated,
        tally.generated as f64 / seconds,
        prefix_tokens,
        reused,
    );
    if skipped > 0 {
        line.push_str(&format!(
            " · {skipped} skipped (already in {})",
            output.display()
        ));
    }
    line
}

/// `eval -score: 25 items (100 choices) in 3.1s (8.1 items/s) · prefix 160 tokens scored once
/// · 900 of 4900 prompt tokens decoded, 4000 reused · accuracy 20/25 = 0.800 (...) · 25 skipped`
fn score_summary(
    run: &Run,
    prefix_tokens: usize,
    accuracy: &Accuracy,
    skipped: usize,
    output: &Path,
) -> String {
    let tally = &run.tally;
    let seconds = run.elapsed.as_secs_f64().max(1e-9);
    let mut line = format!(
        "eval -score: {} items in {:.1}s ({:.1} items/s) · prefix {} tokens scored once · {} of {} prompt tokens decoded, {} reused · {}",
        tally.done,
        seconds,
        tally.done as f64 / seconds,
        prefix_tokens,
        tally.prompt.saturating_sub(tally.reused),
        tally.prompt,
        tally.reused,
        accuracy.describe(),
    );
    if skipped > 0 {
        line.push_str(&format!(
            " · {skipped} skipped (already in {})",
            output.display()
        ));
    }
    line
}
