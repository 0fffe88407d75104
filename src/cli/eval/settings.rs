//! The flags of `llamay eval` ([`EvalArgs`], with the items file's format as their help) and
//! their checked form ([`EvalSettings`]), as the backends use them.
//!
//! Key types: [`EvalArgs`], [`EvalSettings`]. Cost: none beyond parsing the flags.

use std::path::PathBuf;

use clap::Args;

use llamay::grammar::schema::FormatMode;
use llamay::llm::KvType;

use crate::cli::CliError;

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
the daemon's prefix reuse over the run.

With -score, each item is {\"id\", \"prompt\", \"choices\": [\" Paris\", \" Rome\"], \"answer\": 0}
(answer optional): every choice is scored as a continuation of prefix + prompt, nothing is
generated, and a result line is
  {\"id\", \"choices\": [{\"logprob_sum\", \"logprob_per_token\", \"tokens\", \"is_greedy\"}],
   \"argmax\", \"argmax_per_token\", \"answer\", \"correct\", \"correct_per_token\",
   \"prompt_tokens\", \"cached_tokens\", \"ms\"}
A choice's tokens are those of prompt + choice after the prompt's own, as
lm-evaluation-harness counts them.
On a daemon, -score uses /tokenize and /v1/completions (echo), which report cached_tokens.";

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
    /// Score each item's choices as continuations (log-likelihoods, argmax, accuracy) instead
    /// of generating answers.
    #[arg(
        long = "score",
        conflicts_with_all = ["schema", "grammar_file", "json", "formats", "n_predict", "temperature", "seed"]
    )]
    pub score: bool,
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
    #[arg(long = "formats", default_value = "ignore", value_parser = crate::cli::constraint::parse_format_mode)]
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
    pub kv: KvType,
}

impl EvalSettings {
    /// The flags checked: counts positive, `-parallel` at most 64, `-temp` not negative.
    pub fn from_args(args: &EvalArgs) -> Result<EvalSettings, CliError> {
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
            kv: kv_type(&args.kv)?,
        })
    }
}

/// `-kv` as the worker takes it.
fn kv_type(text: &str) -> Result<KvType, CliError> {
    text.parse().map_err(CliError::Usage)
}
