//! `llamay run`: one prompt, one model, the answer streamed to stdout and the stats to stderr.
//! With no `-p` and a terminal on stdin it opens a chat instead (`interactive.rs`); a
//! prompt piped on stdin stays one-shot.
//!
//! It goes through the same model actor and per-request sampler as the daemon, with one
//! sequence, so what `run -stats` reports is what a served request costs. `report.rs` writes
//! the stats lines, for both.

mod interactive;
mod report;

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use llamay::actors::messages::Generate;
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::service::validate_local;
use llamay::core::{
    ChatMessage, Completion, FinishReason, PromptInput, Role, SamplingParams, StreamEvent, UncheckedGenerateRequest,
};
use llamay::grammar::schema::FormatMode;
use llamay::grammar::MatchMode;
use llamay::actors::memory::{human_binary, place_alone, LlamaMemory, MemoryProbe, Placed};
use llamay::llm::offload::{EstimateParams, MemoryEstimate, ModelShape};
use llamay::llm::{ContextParams, KvType, Model};

use crate::cli::constraint::{constraint_from_flags, lexicon_from_flags, parse_format_mode, parse_lexicon_match};
use crate::cli::CliError;
use interactive::{ChatOptions, Settings};
use report::{drafts_line, stats_line};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Model: a store name (smollm2:135m) or a path to a GGUF file.
    #[arg(short = 'm', long = "model")]
    model: String,
    /// The prompt; read from stdin when absent, or a chat when stdin is a terminal.
    #[arg(short = 'p', long = "prompt", allow_hyphen_values = true)]
    prompt: Option<String>,
    /// Apply the model's chat template (the prompt is a user message).
    #[arg(long)]
    chat: bool,
    /// A system message (with -chat).
    #[arg(long, allow_hyphen_values = true)]
    system: Option<String>,
    /// Most tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256, allow_hyphen_values = true)]
    n_predict: i64,
    /// Threads for decoding (default: one per physical core).
    #[arg(short = 't', long = "threads", allow_hyphen_values = true)]
    threads: Option<i64>,
    /// Context size in tokens (default: 4096, or less if the model was trained on less).
    #[arg(short = 'c', long = "ctx-size", allow_hyphen_values = true)]
    ctx_size: Option<i64>,
    /// Temperature; 0 is greedy.
    #[arg(long = "temp", default_value_t = 0.8, allow_hyphen_values = true)]
    temperature: f32,
    #[arg(long = "top-k", default_value_t = 40, allow_hyphen_values = true)]
    top_k: i64,
    #[arg(long = "top-p", default_value_t = 0.95, allow_hyphen_values = true)]
    top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05, allow_hyphen_values = true)]
    min_p: f32,
    #[arg(long = "repeat-penalty", default_value_t = 1.0, allow_hyphen_values = true)]
    repeat_penalty: f32,
    /// Random seed (default: random).
    #[arg(long = "seed", allow_hyphen_values = true)]
    seed: Option<i64>,
    /// Print timing and constraint statistics to stderr.
    #[arg(long)]
    stats: bool,
    /// Drafts (bytes the grammar forces, text copied from the prompt) decoded with each sampled
    /// token and verified: on or off. The output is the same either way.
    #[arg(long = "accelerate", default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    accelerate: bool,
    /// Constrain the output to a GBNF grammar.
    #[arg(long = "grammar-file")]
    grammar_file: Option<PathBuf>,
    /// Constrain the output to any valid JSON.
    #[arg(long)]
    json: bool,
    /// Constrain the output to a JSON Schema.
    #[arg(long)]
    schema: Option<PathBuf>,
    /// With -schema: `enforce` makes `format` (date-time, email, uuid...) constrain strings;
    /// `ignore` leaves it an annotation.
    #[arg(long = "formats", default_value = "ignore", value_parser = parse_format_mode)]
    formats: FormatMode,
    /// A lexicon file (`#!allow` or `#!deny` on its first line, then one entry per line): the
    /// only words the output may use, or words and phrases it never contains.
    #[arg(long = "lexicon")]
    lexicon: Option<PathBuf>,
    /// A file of words and phrases (one per line) the output never contains: `-lexicon` for a
    /// file that does not say its kind.
    #[arg(long = "deny")]
    deny: Option<PathBuf>,
    /// How the -lexicon/-deny file's entries match where it sets no `#!match`: word, prefix
    /// (the default for a deny list: `Paris` also bans `Parisian`) or substring.
    #[arg(long = "lexicon-match", value_parser = parse_lexicon_match)]
    lexicon_match: Option<MatchMode>,
    /// KV cache type: f32, f16 or q8_0.
    #[arg(long = "kv", default_value = "f16")]
    kv: String,
    /// Layers on a GPU: a number, all, or auto (-1, the default): as many as fit its free
    /// memory. 0 runs on the CPU.
    #[arg(long = "gpu-layers", visible_alias = "ngl", alias = "n-gpu-layers", allow_hyphen_values = true)]
    gpu_layers: Option<String>,
}

/// `-accelerate`: on or off.
fn parse_switch(text: &str) -> Result<bool, String> {
    llamay::config::parse_on_off("accelerate", text).map_err(|e| e.to_string())
}

/// Where the layers went, as `-stats` reports it before the model loads.
fn placement_line(placed: &Placed) -> String {
    match &placed.memory.device {
        Some(share) => format!(
            "layers: {}/{} on {} ({} there, {} on the host, estimated)",
            share.layers,
            share.of_layers,
            share.name,
            human_binary(share.bytes),
            human_binary(placed.memory.host_bytes)
        ),
        None => format!("layers: all on the CPU ({} estimated)", human_binary(placed.memory.host_bytes)),
    }
}

fn positive(name: &str, value: i64) -> Result<u32, CliError> {
    if value <= 0 || value > u32::MAX as i64 {
        return Err(CliError::Usage(format!("{name} must be a positive number, got {value}")));
    }
    Ok(value as u32)
}

pub fn run(args: RunArgs) -> Result<ExitCode, CliError> {
    let max_tokens = positive("-n", args.n_predict)?;
    let threads = match args.threads {
        Some(t) => positive("-t", t)?,
        None => llamay::config::default_threads() as u32,
    };
    let ctx_size = args.ctx_size.map(|c| positive("-c", c)).transpose()?;
    let top_k = u32::try_from(args.top_k).map_err(|_| CliError::Usage("-top-k must not be negative".into()))?;
    let seed = args
        .seed
        .map(|s| u32::try_from(s).map_err(|_| CliError::Usage(format!("-seed must be 0..{}, got {s}", u32::MAX))))
        .transpose()?;
    if !(args.temperature >= 0.0) {
        return Err(CliError::Usage(format!("-temp must be 0 or more, got {}", args.temperature)));
    }
    let kv: KvType = args.kv.parse().map_err(CliError::Usage)?;
    let gpu_layers = match args.gpu_layers.as_deref() {
        Some(text) => llamay::config::parse_gpu_layers(text).map_err(|e| CliError::Usage(format!("-ngl: {e}")))?,
        None => None,
    };
    let lexicon = lexicon_from_flags(args.lexicon.as_ref(), args.deny.as_ref(), args.lexicon_match)?;
    let constraint = constraint_from_flags(
        args.grammar_file.as_ref(),
        args.json,
        args.schema.as_ref(),
        args.formats,
        lexicon.as_ref(),
    )?;
    let prompt = match args.prompt {
        Some(prompt) => Some(prompt),
        None if std::io::stdin().is_terminal() => None,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| CliError::Io { path: "stdin".into(), source })?;
            Some(text)
        }
    };

    let store = crate::cli::models::open_store_if_needed(&args.model)?;
    let (path, info) = locate_model(&args.model, store.as_deref()).map_err(|e| CliError::Model(e.to_string()))?;
    // The context is known before loading, so the layers can be placed by the estimate.
    let shape = ModelShape::read(&path).map_err(|reason| CliError::Model(format!("{}: {reason}", path.display())))?;
    let context_train = u32::try_from(shape.context_train).unwrap_or(u32::MAX);
    let n_ctx = ctx_size.unwrap_or_else(|| 4096.min(context_train.max(256)));
    let settings = WorkerSettings {
        context: ContextParams { n_ctx, threads: threads as i32, batch: 512, sequences: 1, kv_type: kv, flash_attention: true },
        ..WorkerSettings::default()
    };
    let estimate = MemoryEstimate::new(&shape, &EstimateParams::for_context(&settings.context));
    let placed = place_alone(&estimate, &LlamaMemory.devices(), gpu_layers)
        .map_err(|too_big| CliError::Model(format!("cannot load {}: {too_big}", args.model)))?;
    if args.stats {
        eprintln!("{}", placement_line(&placed));
    }
    let model = Model::load_placed(&path, placed.placement).map_err(|e| CliError::Model(e.to_string()))?;
    let handle = LlamaModelHandle::start(Arc::new(model), info, &settings).map_err(|e| CliError::Model(e.to_string()))?;

    let Some(prompt) = prompt else {
        let settings = Settings {
            temperature: args.temperature,
            top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repeat_penalty: args.repeat_penalty,
            seed,
            num_predict: max_tokens,
            system: args.system,
        };
        return interactive::chat(&handle, ChatOptions { settings, constraint, lexicon, stats: args.stats });
    };

    let input = if args.chat {
        let mut messages = Vec::new();
        if let Some(system) = args.system {
            messages.push(ChatMessage::new(Role::System, system));
        }
        messages.push(ChatMessage::new(Role::User, prompt));
        PromptInput::Chat { messages, tools: Vec::new() }
    } else {
        PromptInput::Raw { prompt, system: None, template: false }
    };
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: top_k.min(i32::MAX as u32) as i32,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: 64,
        seed,
        max_tokens: Some(max_tokens),
    };
    let mut request = UncheckedGenerateRequest::new(args.model.clone(), input).with_sampling(sampling);
    request.accelerate = Some(args.accelerate);
    let request = validate_local(request, constraint, lexicon).map_err(|e| CliError::Model(e.to_string()))?;
    let mut generation = handle.submit(request).map_err(|e| CliError::Model(e.to_string()))?;
    let mut stdout = std::io::stdout().lock();
    let mut ends_with_newline = true;
    let mut completion: Option<Completion> = None;
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            StreamEvent::Delta { text } => {
                ends_with_newline = text.ends_with('\n');
                // A closed pipe (`| head`) just ends the output.
                if stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()).is_err() {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            StreamEvent::Done(done) => completion = Some(done),
            StreamEvent::Logprobs { .. } => {}
        }
    }
    if !ends_with_newline {
        let _ = stdout.write_all(b"\n");
    }
    let _ = stdout.flush();
    let completion = completion.ok_or_else(|| CliError::Model("the model stopped without finishing".into()))?;
    if let FinishReason::Error(message) = &completion.finish_reason {
        return Err(CliError::Model(format!("generation failed: {message}")));
    }
    if args.stats {
        eprintln!("\n{}", stats_line(&completion));
        if let Some(line) = drafts_line(&completion) {
            eprintln!("{line}");
        }
        if let Some(report) = &completion.constraint_stats {
            eprintln!("{}", report.summary);
        }
    }
    Ok(ExitCode::SUCCESS)
}
