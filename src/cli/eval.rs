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
//! Like the other commands, eval uses a running daemon when one answers (its contexts API:
//! create, `fork?n=1` per item, the Ollama routes with `llamay_context`) and otherwise loads the
//! model in this process. Key items: [`EvalArgs`], [`eval`], [`Item`].
//! Cost: one prefill of the prefix; per item, its own tokens and answer.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use llamay::grammar::schema::FormatMode;

use super::eval_backend::{Backend, ItemAnswer};
use super::eval_results::ResultsFile;
use super::CliError;

const ITEMS_HELP: &str = "\
ITEMS.jsonl holds one JSON object a line, all of one kind:
  {\"id\": \"q1\", \"prompt\": \"raw text that continues the prefix\"}
  {\"id\": 7, \"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}
With prompt items the prefix file is raw text and each prompt continues its tokens (end the
prefix where a token ends, e.g. with a newline); with messages items the prefix is the system
message and the chat template is applied. id is a string or an integer, unique in the file.

RESULTS.jsonl gets one line per item, in the order the items finish:
  {\"id\", \"output\", \"tokens\", \"prompt_tokens\", \"cached_tokens\", \"finish_reason\", \"ms\"}
Items whose id is already in RESULTS.jsonl are skipped, so an interrupted run resumes.
With a daemon running (LLAMAY_ADDR), eval uses its contexts API; -t, -c and -kv then are the
daemon's, cached_tokens is null (its Ollama routes do not report it) and the summary counts
the daemon's prefix reuse over the run.";

#[derive(Debug, Args)]
#[command(after_help = ITEMS_HELP)]
pub struct EvalArgs {
    /// Model: a store name (smollm2:135m) or a path to a GGUF file.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// The shared prefix, prefilled once (raw text, or the system message of chat items).
    #[arg(long = "prefix")]
    pub prefix: PathBuf,
    /// The items, JSON Lines (see below).
    #[arg(long = "items")]
    pub items: PathBuf,
    /// Where the results go, one JSON line per item; appended to, and resumed from.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Constrain every answer to a JSON Schema.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Constrain every answer to a GBNF grammar.
    #[arg(long = "grammar-file")]
    pub grammar_file: Option<PathBuf>,
    /// Constrain every answer to any valid JSON.
    #[arg(long)]
    pub json: bool,
    /// With -schema: `enforce` makes `format` constrain strings.
    #[arg(long = "formats", default_value = "ignore", value_parser = super::run::parse_format_mode)]
    pub formats: FormatMode,
    /// Most tokens to generate per item.
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 256,
        allow_hyphen_values = true
    )]
    pub n_predict: i64,
    /// Items decoding at once (continuous batching).
    #[arg(long = "parallel", default_value_t = 4, allow_hyphen_values = true)]
    pub parallel: i64,
    /// Temperature; 0 (the default) is greedy.
    #[arg(long = "temp", default_value_t = 0.0, allow_hyphen_values = true)]
    pub temperature: f32,
    /// Random seed for sampling (default: random).
    #[arg(long = "seed", allow_hyphen_values = true)]
    pub seed: Option<i64>,
    /// Threads for decoding (default: one per physical core).
    #[arg(short = 't', long = "threads", allow_hyphen_values = true)]
    pub threads: Option<i64>,
    /// Context size per item in tokens (default: 4096, or less if the model was trained on less).
    #[arg(short = 'c', long = "ctx-size", allow_hyphen_values = true)]
    pub ctx_size: Option<i64>,
    /// KV cache type: f32, f16 or q8_0.
    #[arg(long = "kv", default_value = "f16")]
    pub kv: String,
}

/// What an item asks.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemInput {
    Prompt(String),
    /// (role, content) pairs, as written.
    Messages(Vec<(String, String)>),
}

/// One line of the items file.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The id as written (a string or an integer), echoed into its result line.
    pub id: Value,
    pub input: ItemInput,
}

/// The key two equal ids share (`"1"` and `1` differ, as in JSON).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

fn bad_line(path: &Path, line: usize, what: impl std::fmt::Display) -> CliError {
    CliError::Usage(format!("{}:{line}: {what}", path.display()))
}

fn parse_item(path: &Path, line: usize, text: &str) -> Result<Item, CliError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad_line(path, line, format!("not JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(bad_line(
            path,
            line,
            "an item is a JSON object with id and prompt or messages",
        ));
    };
    let id = match object.get("id") {
        Some(id @ Value::String(_)) => id.clone(),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => id.clone(),
        Some(other) => {
            return Err(bad_line(
                path,
                line,
                format!("id is {other}; use a string or an integer"),
            ))
        }
        None => return Err(bad_line(path, line, "no id")),
    };
    let input = match (object.get("prompt"), object.get("messages")) {
        (Some(_), Some(_)) => {
            return Err(bad_line(path, line, "give prompt or messages, not both"))
        }
        (Some(Value::String(prompt)), None) => ItemInput::Prompt(prompt.clone()),
        (Some(_), None) => return Err(bad_line(path, line, "prompt must be a string")),
        (None, Some(Value::Array(messages))) if !messages.is_empty() => {
            let mut pairs = Vec::with_capacity(messages.len());
            for (index, message) in messages.iter().enumerate() {
                let role = message.get("role").and_then(Value::as_str);
                let content = message.get("content").and_then(Value::as_str);
                let (Some(role), Some(content)) = (role, content) else {
                    return Err(bad_line(
                        path,
                        line,
                        format!("messages[{index}] needs a string role and a string content"),
                    ));
                };
                if !["system", "user", "assistant"].contains(&role) {
                    return Err(bad_line(
                        path,
                        line,
                        format!(
                            "messages[{index}].role is {role:?}; use system, user or assistant"
                        ),
                    ));
                }
                pairs.push((role.to_string(), content.to_string()));
            }
            ItemInput::Messages(pairs)
        }
        (None, Some(_)) => return Err(bad_line(path, line, "messages must be a non-empty array")),
        (None, None) => return Err(bad_line(path, line, "no prompt and no messages")),
    };
    Ok(Item { id, input })
}

/// Reads and checks the items file: every line an item, ids unique, all of one kind.
pub fn read_items(path: &Path) -> Result<Vec<Item>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let mut items = Vec::new();
    let mut first_line_of: std::collections::HashMap<String, usize> = Default::default();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let item = parse_item(path, number, line)?;
        if let Some(first) = first_line_of.insert(id_key(&item.id), number) {
            return Err(bad_line(
                path,
                number,
                format!("id {} repeats the id of line {first}", item.id),
            ));
        }
        if let Some(first) = items.first() {
            let same_kind = |a: &Item| matches!(a.input, ItemInput::Prompt(_));
            if same_kind(first) != same_kind(&item) {
                return Err(bad_line(
                    path,
                    number,
                    "mixes prompt and messages items; one file holds one kind",
                ));
            }
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(CliError::Usage(format!("{}: no items", path.display())));
    }
    Ok(items)
}

fn positive(name: &str, value: i64) -> Result<u32, CliError> {
    if value <= 0 || value > u32::MAX as i64 {
        return Err(CliError::Usage(format!(
            "{name} must be a positive number, got {value}"
        )));
    }
    Ok(value as u32)
}

/// Checked flags, as the backends use them.
#[derive(Debug, Clone)]
pub struct EvalSettings {
    pub max_tokens: u32,
    pub parallel: u32,
    pub temperature: f32,
    pub seed: Option<u32>,
    pub threads: Option<u32>,
    pub ctx_size: Option<u32>,
    pub kv: llamay::llm::KvType,
}

fn settings(args: &EvalArgs) -> Result<EvalSettings, CliError> {
    if !(args.temperature >= 0.0) {
        return Err(CliError::Usage(format!(
            "-temp must be 0 or more, got {}",
            args.temperature
        )));
    }
    let parallel = positive("-parallel", args.parallel)?;
    if parallel > 64 {
        return Err(CliError::Usage(format!(
            "-parallel is {parallel}; at most 64 items decode at once"
        )));
    }
    Ok(EvalSettings {
        max_tokens: positive("-n", args.n_predict)?,
        parallel,
        temperature: args.temperature,
        seed: args
            .seed
            .map(|s| {
                u32::try_from(s)
                    .map_err(|_| CliError::Usage(format!("-seed must be 0..{}, got {s}", u32::MAX)))
            })
            .transpose()?,
        threads: args.threads.map(|t| positive("-t", t)).transpose()?,
        ctx_size: args.ctx_size.map(|c| positive("-c", c)).transpose()?,
        kv: super::eval_backend::kv_type(&args.kv)?,
    })
}

/// What the run did, for the summary.
#[derive(Debug, Default)]
struct Tally {
    done: usize,
    generated: u64,
    reused: u64,
}

pub fn eval(args: EvalArgs) -> Result<ExitCode, CliError> {
    let settings = settings(&args)?;
    let constraint = super::run::constraint_from_flags(
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
    let items = read_items(&args.items)?;
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
        return Ok(ExitCode::SUCCESS);
    }
    let chat = matches!(items[0].input, ItemInput::Messages(_));
    let wire = super::eval_backend::WireConstraint::from_flags(&args)?;
    let mut backend = Backend::start(&args.model, &settings, constraint, wire)?;
    let prefix_tokens = backend.prefill(&prefix, chat)?;
    eprintln!(
        "prefix: {prefix_tokens} tokens prefilled once ({})",
        backend.describe()
    );

    let bar = progress_bar(pending.len());
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<CliError>> = Mutex::new(None);
    let tally = Mutex::new(Tally::default());
    let results = Mutex::new(&mut results);
    let backend = &backend;
    let workers = (settings.parallel as usize).min(pending.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if failed.load(Ordering::Acquire) {
                    return;
                }
                let Some(item) = pending.get(next.fetch_add(1, Ordering::AcqRel)) else {
                    return;
                };
                let outcome = backend.run_item(item).and_then(|answer| {
                    let line = result_line(item, &answer);
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .append(&line)?;
                    Ok(answer)
                });
                match outcome {
                    Ok(answer) => {
                        let mut tally = tally
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        tally.done += 1;
                        tally.generated += u64::from(answer.tokens);
                        tally.reused += u64::from(answer.cached_tokens.unwrap_or(0));
                        let seconds = started.elapsed().as_secs_f64().max(1e-9);
                        bar.set_message(format!("{:.1} tok/s", tally.generated as f64 / seconds));
                        bar.inc(1);
                    }
                    Err(error) => {
                        failed.store(true, Ordering::Release);
                        let mut slot = first_error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        slot.get_or_insert(CliError::Model(format!("item {}: {error}", item.id)));
                        return;
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let tally = tally
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reused = backend.reused_tokens(tally.reused)?;
    backend.finish();
    println!(
        "{}",
        summary(
            &tally,
            elapsed,
            prefix_tokens,
            reused,
            skipped,
            &args.output
        )
    );
    match first_error
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(error) => Err(error),
        None => Ok(ExitCode::SUCCESS),
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

/// The items whose id no result line holds yet, in file order.
fn pending<'a>(items: &'a [Item], done: &HashSet<String>) -> Vec<&'a Item> {
    items
        .iter()
        .filter(|item| !done.contains(&id_key(&item.id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items_from(text: &str) -> Result<Vec<Item>, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("items.jsonl");
        std::fs::write(&path, text).unwrap();
        read_items(&path)
    }

    #[test]
    fn both_kinds_of_item_parse_and_blank_lines_are_skipped() {
        let items =
            items_from("{\"id\": \"a\", \"prompt\": \"x\"}\n\n{\"id\": 2, \"prompt\": \"y\"}\n")
                .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].id, json!(2));
        let chat =
            items_from("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
                .unwrap();
        assert_eq!(
            chat[0].input,
            ItemInput::Messages(vec![("user".into(), "hi".into())])
        );
    }

    #[test]
    fn bad_lines_are_named_by_number() {
        let error = items_from("{\"id\": 1, \"prompt\": \"x\"}\n{not json\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("items.jsonl:2: not JSON"), "{error}");
        let error =
            items_from("{\"id\": 1, \"prompt\": \"x\"}\n\n{\"id\": 1, \"prompt\": \"y\"}\n")
                .unwrap_err()
                .to_string();
        assert!(
            error.contains(":3: id 1 repeats the id of line 1"),
            "{error}"
        );
        let error = items_from("{\"prompt\": \"x\"}").unwrap_err().to_string();
        assert!(error.contains(":1: no id"), "{error}");
        let error = items_from("{\"id\": 1.5, \"prompt\": \"x\"}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("use a string or an integer"), "{error}");
        let mixed = "{\"id\": 1, \"prompt\": \"x\"}\n{\"id\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"y\"}]}";
        assert!(items_from(mixed)
            .unwrap_err()
            .to_string()
            .contains(":2: mixes prompt and messages"));
        assert!(items_from("\n\n")
            .unwrap_err()
            .to_string()
            .contains("no items"));
    }

    #[test]
    fn string_and_number_ids_differ_and_answered_ones_are_skipped() {
        let items =
            items_from("{\"id\": \"1\", \"prompt\": \"x\"}\n{\"id\": 1, \"prompt\": \"y\"}\n")
                .unwrap();
        let done: HashSet<String> = [id_key(&json!("1"))].into_iter().collect();
        let left: Vec<&Value> = pending(&items, &done).iter().map(|i| &i.id).collect();
        assert_eq!(left, vec![&json!(1)]);
    }
}
