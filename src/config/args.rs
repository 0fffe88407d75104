//! The flags of `llamay serve` ([`ServeArgs`], parsed by clap) and the single-dash spelling of
//! long flags the spec uses (`-addr`), rewritten to clap's `--addr` before parsing.
//! Key items: [`ServeArgs`], [`SINGLE_DASH_LONG_FLAGS`], [`normalize_single_dash_flags`].
//! Costs: parsed once at start-up.

use std::path::PathBuf;

/// Flags of `llamay serve`. The spec writes long flags with one dash (`-addr`); main.rs passes
/// argv through [`normalize_single_dash_flags`] first so clap sees `--addr`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// A model to load at start-up; others load on demand.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Listen address, host:port.
    #[arg(long = "addr")]
    pub addr: Option<String>,
    /// Models loaded at once; when full, the idle one that expires soonest is unloaded.
    #[arg(long = "max-loaded")]
    pub max_loaded: Option<usize>,
    /// How long an idle model stays loaded: "5m", "1h", seconds, 0 (unload at once), -1 (forever).
    #[arg(long = "keepalive", allow_hyphen_values = true)]
    pub keepalive: Option<String>,
    /// Context tokens per sequence.
    #[arg(short = 'c', long = "context")]
    pub context: Option<u32>,
    /// CPU threads for decoding.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// KV cache type: f32, f16, q8_0 or q4_0.
    #[arg(long = "kv")]
    pub kv: Option<String>,
    /// Sequences decoded together per model (continuous batching).
    #[arg(long = "parallel")]
    pub parallel: Option<u32>,
    /// llama.cpp's flash attention: on or off.
    #[arg(long = "flash-attn")]
    pub flash_attn: Option<String>,
    /// Drafts (forced bytes, copies from the prompt) verified in one decode: on or off.
    #[arg(long = "accelerate")]
    pub accelerate: Option<String>,
    /// A constrained document closes within its token budget, so it ends valid: on or off.
    #[arg(long = "close-on-budget")]
    pub close_on_budget: Option<String>,
    /// A GBNF grammar applied to every request.
    #[arg(long = "grammar-file")]
    pub grammar_file: Option<PathBuf>,
    /// A lexicon file (words allowed or banned, one per line) applied to every request that
    /// brings none; repeatable.
    #[arg(long = "lexicon")]
    pub lexicon: Vec<PathBuf>,
    /// How the -lexicon files' entries match where a file sets no `#!match`: word, prefix (the
    /// default for a deny list: `Paris` also bans `Parisian`) or substring.
    #[arg(long = "lexicon-match")]
    pub lexicon_match: Option<String>,
    /// A TOML config file (default: $LLAMAY_CONFIG).
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
    /// Require this key on every route but /health (prefer LLAMAY_API_KEY: flags show in `ps`).
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// Browser origins allowed to call the API (CORS), comma-separated; `*` allows any.
    #[arg(long = "origins")]
    pub origins: Option<String>,
    /// `Host` names answered on a loopback address besides localhost, 127.0.0.1 and [::1]
    /// (comma-separated; `*`: any): the names a reverse proxy or /etc/hosts alias uses.
    #[arg(long = "allowed-hosts")]
    pub allowed_hosts: Option<String>,
    /// Log lines as `text` (colours only on a terminal) or `json` (one object a line).
    #[arg(long = "log-format")]
    pub log_format: Option<String>,
    /// RPC workers (`llamay rpc-worker`) to split every model's layers over, host:port,...
    #[arg(long = "rpc")]
    pub rpc: Option<String>,
    /// Layer split ratios with -rpc: the local CPU first, then each worker in -rpc order
    /// (`1,1,2`); default: by free memory.
    #[arg(long = "split")]
    pub split: Option<String>,
    /// Memory parked contexts may take ("2GiB", "512MiB", bytes); past it the least recently
    /// used ones drop their state and prefill again on use.
    #[arg(long = "context-memory")]
    pub context_memory: Option<String>,
    /// An embedding model (store name or GGUF path) for /v1/embeddings and /api/embed.
    #[arg(long = "embed")]
    pub embed: Option<String>,
    /// A model (store name or GGUF path) for /rerank: a chat model scores query likelihood, an encoder compares.
    #[arg(long = "rerank")]
    pub rerank: Option<String>,
    /// Layers each model puts on a GPU: a number, all, or auto (-1, the default): as many as fit
    /// its free memory after the KV cache and compute buffers. 0 keeps models on the CPU.
    #[arg(long = "gpu-layers", visible_alias = "ngl", alias = "n-gpu-layers", allow_hyphen_values = true)]
    pub gpu_layers: Option<String>,
    /// A registry pulls may reach over plain http, host or host:port (repeat it, or
    /// comma-separate); a request's `insecure` never adds one.
    #[arg(long = "insecure-registry")]
    pub insecure_registry: Vec<String>,
}

/// Long flags that llamay, like llama.cpp, accepts with a single dash (`-addr`, `-chat`,
/// `-grammar-file`), for every subcommand; [`normalize_single_dash_flags`] rewrites them.
/// A list rather than a pattern, so a value such as `-p "-hello"` is never mistaken for a flag.
pub const SINGLE_DASH_LONG_FLAGS: &[&str] = &[
    // serve
    "addr",
    "max-loaded",
    "keepalive",
    "context",
    "threads",
    "kv",
    "parallel",
    "grammar-file",
    "lexicon",
    "lexicon-match",
    "config",
    "model",
    "flash-attn",
    "accelerate",
    "close-on-budget",
    // run
    "deny",
    "prompt",
    "chat",
    "system",
    "n-predict",
    "ctx-size",
    "temp",
    "top-k",
    "top-p",
    "min-p",
    "repeat-penalty",
    "seed",
    "stats",
    "json",
    "schema",
    // serve: security
    "api-key",
    "origins",
    "allowed-hosts",
    // serve: logs
    "log-format",
    // doctor
    "repair",
    // pull
    "insecure",
    // run, schema check
    "formats",
    // serve and rpc-worker: several machines
    "rpc",
    "allow-remote",
    "split",
    "mem",
    // serve: contexts
    "context-memory",
    // eval
    "prefix",
    "items",
    "output",
    "score",
    // serve: embeddings and rerank
    "embed",
    "rerank",
    // serve and run: GPU offload (llama.cpp spells it -ngl)
    "ngl",
    "gpu-layers",
    "n-gpu-layers",
    // serve: pulls
    "insecure-registry",
];

pub fn normalize_single_dash_flags(
    args: impl IntoIterator<Item = String>,
    long_flags: &[&str],
) -> Vec<String> {
    args.into_iter()
        .map(|arg| {
            let Some(rest) = arg.strip_prefix('-') else {
                return arg;
            };
            if rest.starts_with('-') {
                return arg;
            }
            let name = rest.split('=').next().unwrap_or(rest);
            if long_flags.contains(&name) {
                format!("-{arg}")
            } else {
                arg
            }
        })
        .collect()
}
