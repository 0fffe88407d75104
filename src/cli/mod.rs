//! Command-line parsing and dispatch. Each subcommand lives in its own file; this one owns the
//! clap definitions, the single-dash flag convention and logging set-up.
//!
//! Key types: [`Cli`], [`Command`], [`CliError`].

mod check;
mod constraint;
mod lexicon;
mod client;
mod models;
mod pull;
mod run;
mod doctor;
mod rpc_worker;
mod eval;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Store(#[from] llamay::store::StoreError),
    #[error("{0}")]
    Model(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Constraint(String),
}

#[derive(Debug, Parser)]
#[command(name = "llamay", version, about = "A local LLM daemon whose structured output is enforced by the sampler")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a prompt with a local model.
    Run(run::RunArgs),
    /// Serve the OpenAI, Anthropic and Ollama APIs.
    Serve(llamay::config::ServeArgs),
    /// Copy a GGUF file into the model store under NAME[:TAG]; a Hugging Face BERT directory
    /// (config.json, model.safetensors, tokenizer.json) is converted to GGUF first.
    Import { file: std::path::PathBuf, name: String },
    /// List the models in the store.
    #[command(alias = "ls")]
    List,
    /// Show what the store knows about a model.
    Show { name: String },
    /// Remove a model from the store.
    Rm { name: String },
    /// Copy a model to a new name (the file is shared).
    Cp { from: String, to: String },
    /// Load a GBNF grammar and, given an input, check the input against it.
    Grammar {
        #[command(subcommand)]
        command: check::GrammarCommand,
    },
    /// Review a JSON Schema keyword by keyword and, given a document, check it.
    Schema {
        #[command(subcommand)]
        command: check::SchemaCommand,
    },
    /// Check a text against a lexicon file (words allowed or banned): where it fails and why.
    Lexicon {
        #[command(subcommand)]
        command: lexicon::LexiconCommand,
    },
    /// Check the model store: every model's blob present with its sha256, no orphans or
    /// leftovers of interrupted work. Exit status 1 when something is wrong.
    Doctor {
        /// Remove what no model references (orphan blobs, temporary files) and rewrite the
        /// snapshot; models whose blob is missing or damaged are reported, never removed.
        #[arg(long)]
        repair: bool,
    },
    /// Download a model from a registry (NAME[:TAG], HOST/NAMESPACE/NAME[:TAG]) or a GGUF URL.
    Pull {
        model: String,
        /// Allow plain http to a registry named in MODEL.
        #[arg(long)]
        insecure: bool,
    },
    /// Make a model from a Modelfile (FROM, PARAMETER, SYSTEM, TEMPLATE, LICENSE).
    Create {
        name: String,
        #[arg(short = 'f', long = "file", default_value = "Modelfile")]
        file: std::path::PathBuf,
    },
    /// Delete partial downloads older than a day.
    Prune,
    /// List the models a running daemon has loaded.
    Ps,
    /// Unload a model from a running daemon.
    Stop { model: String },
    /// Serve this machine's CPU to a `serve -rpc` coordinator (llama.cpp's RPC protocol).
    RpcWorker(rpc_worker::RpcWorkerArgs),
    /// One model split over RPC workers, for the daemon that starts it (internal).
    #[command(hide = true)]
    RpcRunner,
    /// Run many items over one shared prefix: prefilled once, forked per item, results to a
    /// JSON Lines file that a rerun resumes.
    Eval(eval::EvalArgs),
}

/// Log lines to stderr: text, coloured only when stderr is a terminal (a service manager's
/// log file or journal gets no escape codes), or one JSON object a line.
pub fn init_logging(json: bool) {
    use std::io::IsTerminal;
    // RUST_LOG=llama.cpp=info shows llama.cpp's own log.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("info,{}", llamay::llm::QUIET_LLAMA_LOGS))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!json && std::io::stderr().is_terminal());
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}

pub fn main(args: Vec<String>) -> Result<ExitCode, CliError> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version are successes; everything else is a usage error, exit 1.
            let code = if error.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
            let _ = error.print();
            return Ok(code);
        }
    };
    match cli.command {
        Command::Run(args) => {
            init_logging(false);
            run::run(args)
        }
        Command::Serve(args) => models::serve(args),
        Command::Import { file, name } => models::import(&file, &name),
        // With a daemon running, the store is its: these go through its API.
        Command::List => match client::Daemon::find() {
            Some(daemon) => daemon.list(),
            None => models::list(),
        },
        Command::Show { name } => match client::Daemon::find() {
            Some(daemon) => daemon.show(&name),
            None => models::show(&name),
        },
        Command::Rm { name } => match client::Daemon::find() {
            Some(daemon) => daemon.remove(&name),
            None => models::remove(&name),
        },
        Command::Cp { from, to } => match client::Daemon::find() {
            Some(daemon) => daemon.copy(&from, &to),
            None => models::copy(&from, &to),
        },
        // Logging on: without a daemon, a failed pull's details are logged here, not there.
        Command::Pull { model, insecure } => {
            init_logging(false);
            pull::pull(&model, insecure)
        }
        Command::Create { name, file } => {
            init_logging(false);
            pull::create(&name, &file)
        }
        Command::Prune => pull::prune(),
        Command::Ps => match client::Daemon::find() {
            Some(daemon) => daemon.ps(),
            None => client::no_daemon("ps"),
        },
        Command::Stop { model } => match client::Daemon::find() {
            Some(daemon) => daemon.stop(&model),
            None => client::no_daemon("stop"),
        },
        Command::Grammar { command } => check::grammar(command),
        Command::Schema { command } => check::schema(command),
        Command::Lexicon { command } => lexicon::lexicon(command),
        Command::Doctor { repair } => doctor::doctor(repair),
        Command::RpcWorker(args) => {
            init_logging(false);
            rpc_worker::rpc_worker(args)
        }
        Command::RpcRunner => {
            init_logging(false);
            llamay::service::runner_child::run().map_err(CliError::Model)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval(args) => {
            init_logging(false);
            eval::eval(args)
        }
    }
}
