//! The daemon's settings: one [`Config`] built from defaults, then a TOML file, then `LLAMAY_*`
//! environment variables, then `llamay serve` flags ([`ServeArgs`]), each overriding the last,
//! and validated before anything starts. `configs/llamay.toml` documents every key.
//!
//! Key types: [`Config`], [`ServeArgs`] (clap), [`LogFormat`], [`ConfigError`].
//! Costs: read once at start-up.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::core::KeepAlive;
use crate::llm::KvType;

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
    /// A GBNF grammar applied to every request.
    #[arg(long = "grammar-file")]
    pub grammar_file: Option<PathBuf>,
    /// A TOML config file (default: $LLAMAY_CONFIG).
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
    /// Require this key on every route but /health (prefer LLAMAY_API_KEY: flags show in `ps`).
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// Browser origins allowed to call the API (CORS), comma-separated; `*` allows any.
    #[arg(long = "origins")]
    pub origins: Option<String>,
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
    /// A model (store name or GGUF path) for /rerank: a chat model judges, an encoder compares.
    #[arg(long = "rerank")]
    pub rerank: Option<String>,
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
    "config",
    "model",
    "flash-attn",
    // run
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
    // serve: embeddings and rerank
    "embed",
    "rerank",
];

/// `1, 1,2` -> `[1.0, 1.0, 2.0]`; empty means by free memory.
fn parse_split(text: &str) -> Result<Vec<f64>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            r.parse::<f64>().map_err(|_| ConfigError::Invalid {
                key: "split",
                value: r.to_string(),
                expected: "comma-separated ratios, the local CPU first, then each rpc worker (1,1,2)",
            })
        })
        .collect()
}

/// `a:1, b:2` -> `["a:1", "b:2"]`; empty pieces dropped, so `-rpc ""` means none.
fn split_workers(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|w| !w.is_empty()).map(str::to_string).collect()
}

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

/// `-kv` and its file and environment spellings, with the config's error.
/// `formats`: `enforce` makes a schema's `format` constrain strings; `ignore` (the default)
/// leaves it an annotation.
pub fn parse_formats(text: &str) -> Result<crate::grammar::schema::FormatMode, ConfigError> {
    use crate::grammar::schema::FormatMode;
    match text.trim() {
        "enforce" => Ok(FormatMode::Enforce),
        "ignore" => Ok(FormatMode::Ignore),
        _ => Err(ConfigError::Invalid {
            key: "formats",
            value: text.to_string(),
            expected: "enforce or ignore",
        }),
    }
}

fn parse_kv(text: &str) -> Result<KvType, ConfigError> {
    text.trim().parse().map_err(|_| ConfigError::Invalid {
        key: "kv",
        value: text.to_string(),
        expected: "f32, f16, q8_0 or q4_0",
    })
}

/// `-context-memory` and its spellings: bytes, or a number with KiB/MiB/GiB (or K/M/G).
fn parse_memory(key: &'static str, text: &str) -> Result<u64, ConfigError> {
    let invalid = || ConfigError::Invalid {
        key,
        value: text.to_string(),
        expected: "a size such as 2GiB, 512MiB or a number of bytes",
    };
    let trimmed = text.trim();
    let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(invalid()),
    };
    number.checked_mul(scale).ok_or_else(invalid)
}

/// `-flash-attn` and its file and environment spellings.
fn parse_on_off(key: &'static str, text: &str) -> Result<bool, ConfigError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(ConfigError::Invalid { key, value: text.to_string(), expected: "on or off" }),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl FromStr for LogFormat {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(ConfigError::Invalid {
                key: "log_format",
                value: other.to_string(),
                expected: "text or json",
            }),
        }
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{key} = {value:?} is not valid: expected {expected}")]
    Invalid {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// The validated settings of `llamay serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub addr: String,
    pub model: Option<String>,
    pub max_loaded: usize,
    pub keep_alive: KeepAlive,
    pub context: u32,
    pub threads: usize,
    pub kv: KvType,
    pub parallel: u32,
    pub grammar_file: Option<PathBuf>,
    pub max_queue: usize,
    pub max_body_bytes: usize,
    pub log_format: LogFormat,
    /// `max_tokens` of a request that names none.
    pub default_max_tokens: u32,
    /// The largest `max_tokens` a request gets (larger ones are clamped).
    pub max_tokens_limit: u32,
    /// Required on every route but `/health` when set.
    pub api_key: Option<Secret>,
    /// Browser origins allowed to call (CORS); `*` allows any. None by default.
    pub origins: Vec<String>,
    /// Time a client has to send a request head: a new connection's first, and each later one on a
    /// kept-alive connection from its first byte.
    pub client_request_timeout: Duration,
    /// Time a request has to send its whole body.
    pub request_body_timeout: Duration,
    /// How long an idle keep-alive connection stays open.
    pub http_keep_alive: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// llama.cpp's flash attention (with the f16 KV cache, the faster default measured on CPU).
    pub flash_attention: bool,
    /// Whether a schema's `format` constrains strings (a request's `llamay_formats` wins).
    pub formats: crate::grammar::schema::FormatMode,
    /// RPC workers, host:port, that every model's layers are split over (none: this CPU only).
    pub rpc: Vec<String>,
    /// Split ratios over the local CPU then each RPC worker; empty: by free memory.
    pub split: Vec<f64>,
    /// Bytes of parked context state kept in memory (contexts, issue 11).
    pub context_memory: u64,
    /// Put in context ids so a proxy can route a context to its daemon; `None`: the id the
    /// store drew once (stable across restarts).
    pub daemon_id: Option<String>,
    /// The model `/v1/embeddings` and `/api/embed` use when a request names none.
    pub embed: Option<String>,
    /// The model `/rerank` uses when a request names none.
    pub rerank: Option<String>,
}

/// A value kept out of logs and `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "localhost:11435".into(),
            model: None,
            max_loaded: 2,
            keep_alive: KeepAlive::For(Duration::from_secs(300)),
            context: 4096,
            threads: default_threads(),
            kv: KvType::F16,
            parallel: 4,
            grammar_file: None,
            max_queue: 512,
            max_body_bytes: 8 * 1024 * 1024,
            log_format: LogFormat::Text,
            default_max_tokens: crate::core::TokenLimits::default().default_max_tokens,
            max_tokens_limit: crate::core::TokenLimits::default().max_tokens_limit,
            api_key: None,
            origins: Vec::new(),
            client_request_timeout: Duration::from_secs(5),
            request_body_timeout: Duration::from_secs(30),
            http_keep_alive: Duration::from_secs(5),
            max_connections: 1024,
            flash_attention: true,
            formats: crate::grammar::schema::FormatMode::Ignore,
            rpc: Vec::new(),
            split: Vec::new(),
            context_memory: crate::actors::contexts::DEFAULT_CONTEXT_MEMORY,
            daemon_id: None,
            embed: None,
            rerank: None,
        }
    }
}

/// Half the logical CPUs, at least one: llama.cpp's threads spin at every barrier, so one more
/// thread than the cores that are actually free slows decoding by an order of magnitude (0.9
/// against 26 tok/s measured on a busy two-core machine); half is llama.cpp's own
/// physical-core guess.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get() / 2)
        .max(1)
}

/// The TOML file's keys; all optional, unknown keys refused so a typo is not silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    addr: Option<String>,
    model: Option<String>,
    max_loaded: Option<usize>,
    keepalive: Option<toml::Value>,
    context: Option<u32>,
    threads: Option<usize>,
    kv: Option<String>,
    parallel: Option<u32>,
    grammar_file: Option<PathBuf>,
    max_queue: Option<usize>,
    max_body_bytes: Option<usize>,
    log_format: Option<String>,
    default_max_tokens: Option<u32>,
    max_tokens_limit: Option<u32>,
    api_key: Option<String>,
    origins: Option<Vec<String>>,
    client_request_timeout: Option<toml::Value>,
    request_body_timeout: Option<toml::Value>,
    http_keep_alive: Option<toml::Value>,
    max_connections: Option<usize>,
    flash_attention: Option<bool>,
    formats: Option<String>,
    rpc: Option<Vec<String>>,
    split: Option<Vec<f64>>,
    context_memory: Option<toml::Value>,
    daemon_id: Option<String>,
    embed: Option<String>,
    rerank: Option<String>,
}

/// Longest config file read; a config is a few hundred bytes.
const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

impl Config {
    /// Defaults, then the file (`-config` or `LLAMAY_CONFIG`), then the environment, then flags.
    pub fn load(args: impl std::borrow::Borrow<ServeArgs>) -> Result<Config, ConfigError> {
        Self::load_with_env(args.borrow(), |key| std::env::var(key).ok())
    }

    /// [`Config::load`] with the environment supplied (tests).
    pub fn load_with_env(
        args: &ServeArgs,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let file = args
            .config
            .clone()
            .or_else(|| env("LLAMAY_CONFIG").map(PathBuf::from));
        if let Some(path) = file {
            config.apply_file(&path)?;
        }
        config.apply_env(&env)?;
        config.apply_args(args)?;
        config.validate()?;
        Ok(config)
    }

    fn apply_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let read_error = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read_error)?.len();
        if size > MAX_CONFIG_FILE_BYTES {
            return Err(ConfigError::Parse {
                path: path.into(),
                message: format!("{size} bytes is too large for a config"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        set(&mut self.addr, file.addr);
        if file.model.is_some() {
            self.model = file.model;
        }
        set(&mut self.max_loaded, file.max_loaded);
        if let Some(value) = file.keepalive {
            self.keep_alive = match value {
                toml::Value::Integer(seconds) => KeepAlive::from_seconds(seconds as f64),
                toml::Value::Float(seconds) => KeepAlive::from_seconds(seconds),
                toml::Value::String(text) => text.parse(),
                other => Err(crate::core::keepalive::KeepAliveParseError {
                    input: other.to_string(),
                }),
            }
            .map_err(|e| ConfigError::Invalid {
                key: "keepalive",
                value: e.input,
                expected: "a duration such as \"5m\"",
            })?;
        }
        set(&mut self.context, file.context);
        set(&mut self.threads, file.threads);
        if let Some(kv) = file.kv {
            self.kv = parse_kv(&kv)?;
        }
        set(&mut self.parallel, file.parallel);
        if file.grammar_file.is_some() {
            self.grammar_file = file.grammar_file;
        }
        set(&mut self.max_queue, file.max_queue);
        set(&mut self.max_body_bytes, file.max_body_bytes);
        if let Some(format) = file.log_format {
            self.log_format = format.parse()?;
        }
        set(&mut self.default_max_tokens, file.default_max_tokens);
        set(&mut self.max_tokens_limit, file.max_tokens_limit);
        if let Some(key) = file.api_key {
            self.api_key = Some(Secret(key));
        }
        if let Some(origins) = file.origins {
            self.origins = origins;
        }
        let timeouts = [
            ("client_request_timeout", file.client_request_timeout, &mut self.client_request_timeout),
            ("request_body_timeout", file.request_body_timeout, &mut self.request_body_timeout),
            ("http_keep_alive", file.http_keep_alive, &mut self.http_keep_alive),
        ];
        for (key, value, slot) in timeouts {
            if let Some(value) = value {
                let text = match value {
                    toml::Value::String(text) => text,
                    other => other.to_string(),
                };
                *slot = parse_timeout(key, &text)?;
            }
        }
        set(&mut self.max_connections, file.max_connections);
        set(&mut self.flash_attention, file.flash_attention);
        if let Some(formats) = file.formats {
            self.formats = parse_formats(&formats)?;
        }
        set(&mut self.rpc, file.rpc);
        set(&mut self.split, file.split);
        if let Some(value) = file.context_memory {
            let text = match value {
                toml::Value::String(text) => text,
                other => other.to_string(),
            };
            self.context_memory = parse_memory("context_memory", &text)?;
        }
        if file.daemon_id.is_some() {
            self.daemon_id = file.daemon_id;
        }
        if file.embed.is_some() {
            self.embed = file.embed;
        }
        if file.rerank.is_some() {
            self.rerank = file.rerank;
        }
        Ok(())
    }

    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(addr) = env("LLAMAY_ADDR") {
            self.addr = addr;
        }
        if let Some(model) = env("LLAMAY_MODEL") {
            self.model = Some(model);
        }
        parse_env(env, "LLAMAY_MAX_LOADED", "max_loaded", &mut self.max_loaded)?;
        if let Some(text) = env("LLAMAY_KEEPALIVE") {
            self.keep_alive = parse_keepalive(&text)?;
        }
        parse_env(env, "LLAMAY_CONTEXT", "context", &mut self.context)?;
        parse_env(env, "LLAMAY_THREADS", "threads", &mut self.threads)?;
        if let Some(kv) = env("LLAMAY_KV") {
            self.kv = parse_kv(&kv)?;
        }
        parse_env(env, "LLAMAY_PARALLEL", "parallel", &mut self.parallel)?;
        if let Some(path) = env("LLAMAY_GRAMMAR_FILE") {
            self.grammar_file = Some(PathBuf::from(path));
        }
        parse_env(env, "LLAMAY_MAX_QUEUE", "max_queue", &mut self.max_queue)?;
        parse_env(
            env,
            "LLAMAY_MAX_BODY_BYTES",
            "max_body_bytes",
            &mut self.max_body_bytes,
        )?;
        if let Some(format) = env("LLAMAY_LOG_FORMAT") {
            self.log_format = format.parse()?;
        }
        parse_env(env, "LLAMAY_DEFAULT_MAX_TOKENS", "default_max_tokens", &mut self.default_max_tokens)?;
        parse_env(env, "LLAMAY_MAX_TOKENS_LIMIT", "max_tokens_limit", &mut self.max_tokens_limit)?;
        if let Some(key) = env("LLAMAY_API_KEY") {
            self.api_key = Some(Secret(key));
        }
        if let Some(origins) = env("LLAMAY_ORIGINS") {
            self.origins = split_origins(&origins);
        }
        let timeouts = [
            ("LLAMAY_CLIENT_REQUEST_TIMEOUT", "client_request_timeout", &mut self.client_request_timeout),
            ("LLAMAY_REQUEST_BODY_TIMEOUT", "request_body_timeout", &mut self.request_body_timeout),
            ("LLAMAY_HTTP_KEEP_ALIVE", "http_keep_alive", &mut self.http_keep_alive),
        ];
        for (variable, key, slot) in timeouts {
            if let Some(text) = env(variable) {
                *slot = parse_timeout(key, &text)?;
            }
        }
        parse_env(env, "LLAMAY_MAX_CONNECTIONS", "max_connections", &mut self.max_connections)?;
        if let Some(text) = env("LLAMAY_FLASH_ATTENTION") {
            self.flash_attention = parse_on_off("flash_attention", &text)?;
        }
        if let Some(formats) = env("LLAMAY_FORMATS") {
            self.formats = parse_formats(&formats)?;
        }
        if let Some(workers) = env("LLAMAY_RPC") {
            self.rpc = split_workers(&workers);
        }
        if let Some(ratios) = env("LLAMAY_SPLIT") {
            self.split = parse_split(&ratios)?;
        }
        if let Some(text) = env("LLAMAY_CONTEXT_MEMORY") {
            self.context_memory = parse_memory("context_memory", &text)?;
        }
        if let Some(id) = env("LLAMAY_DAEMON_ID") {
            self.daemon_id = Some(id);
        }
        if let Some(model) = env("LLAMAY_EMBED") {
            self.embed = Some(model);
        }
        if let Some(model) = env("LLAMAY_RERANK") {
            self.rerank = Some(model);
        }
        Ok(())
    }

    fn apply_args(&mut self, args: &ServeArgs) -> Result<(), ConfigError> {
        set(&mut self.addr, args.addr.clone());
        if args.model.is_some() {
            self.model = args.model.clone();
        }
        set(&mut self.max_loaded, args.max_loaded);
        if let Some(text) = &args.keepalive {
            self.keep_alive = parse_keepalive(text)?;
        }
        set(&mut self.context, args.context);
        set(&mut self.threads, args.threads);
        if let Some(kv) = &args.kv {
            self.kv = parse_kv(&kv)?;
        }
        set(&mut self.parallel, args.parallel);
        if args.grammar_file.is_some() {
            self.grammar_file = args.grammar_file.clone();
        }
        if let Some(key) = &args.api_key {
            self.api_key = Some(Secret(key.clone()));
        }
        if let Some(origins) = &args.origins {
            self.origins = split_origins(origins);
        }
        if let Some(text) = &args.flash_attn {
            self.flash_attention = parse_on_off("flash_attention", text)?;
        }
        if let Some(workers) = &args.rpc {
            self.rpc = split_workers(workers);
        }
        if let Some(ratios) = &args.split {
            self.split = parse_split(ratios)?;
        }
        if let Some(text) = &args.context_memory {
            self.context_memory = parse_memory("context_memory", text)?;
        }
        if args.embed.is_some() {
            self.embed = args.embed.clone();
        }
        if args.rerank.is_some() {
            self.rerank = args.rerank.clone();
        }
        Ok(())
    }

    /// Range checks, with a message naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, value: String, expected| {
            Err(ConfigError::Invalid {
                key,
                value,
                expected,
            })
        };
        if self.socket_addrs().is_err() {
            return invalid(
                "addr",
                self.addr.clone(),
                "host:port, such as localhost:11435",
            );
        }
        if !(1..=64).contains(&self.max_loaded) {
            return invalid("max_loaded", self.max_loaded.to_string(), "1 to 64");
        }
        if !(128..=1 << 20).contains(&self.context) {
            return invalid("context", self.context.to_string(), "128 to 1048576 tokens");
        }
        if !(1..=1024).contains(&self.threads) {
            return invalid("threads", self.threads.to_string(), "1 to 1024");
        }
        if !(1..=256).contains(&self.parallel) {
            return invalid("parallel", self.parallel.to_string(), "1 to 256 sequences");
        }
        if !(1..=1_000_000).contains(&self.max_queue) {
            return invalid("max_queue", self.max_queue.to_string(), "1 to 1000000");
        }
        if !(1024..=1 << 30).contains(&self.max_body_bytes) {
            return invalid(
                "max_body_bytes",
                self.max_body_bytes.to_string(),
                "1 KiB to 1 GiB",
            );
        }
        if !(1..=1 << 20).contains(&self.max_tokens_limit) {
            return invalid("max_tokens_limit", self.max_tokens_limit.to_string(), "1 to 1048576 tokens");
        }
        if !(1..=self.max_tokens_limit).contains(&self.default_max_tokens) {
            return invalid(
                "default_max_tokens",
                self.default_max_tokens.to_string(),
                "1 to max_tokens_limit tokens",
            );
        }
        if self.api_key.as_ref().is_some_and(|key| !valid_api_key(&key.0)) {
            return invalid(
                "api_key",
                "(hidden)".into(),
                "1 to 1024 visible ASCII characters (no spaces), as HTTP headers carry them",
            );
        }
        if let Some(origin) = self.origins.iter().find(|origin| !valid_origin(origin)) {
            return invalid(
                "origins",
                origin.clone(),
                "origins such as http://localhost:3000 (scheme://host[:port], no path), or *",
            );
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return invalid("max_connections", self.max_connections.to_string(), "1 to 1000000");
        }
        let is_endpoint = |w: &String| {
            w.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
        };
        if let Some(worker) = self.rpc.iter().find(|w| !is_endpoint(w)) {
            return invalid("rpc", worker.clone(), "host:port of each RPC worker, comma-separated");
        }
        if self.rpc.len() > 16 {
            return invalid("rpc", self.rpc.join(","), "at most 16 RPC workers");
        }
        if !self.split.is_empty() {
            let shown = self.split.iter().map(f64::to_string).collect::<Vec<_>>().join(",");
            if self.rpc.is_empty() {
                return invalid("split", shown, "split ratios only with rpc workers (-rpc)");
            }
            if self.split.len() != self.rpc.len() + 1 {
                return invalid("split", shown, "one ratio for the local CPU, then one per rpc worker in order");
            }
            if self.split.iter().any(|r| !r.is_finite() || *r < 0.0) || self.split.iter().sum::<f64>() <= 0.0 {
                return invalid("split", shown, "ratios 0 or more, not all 0");
            }
        }
        if let Some(id) = &self.daemon_id {
            if !(1..=32).contains(&id.len()) || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return invalid("daemon_id", id.clone(), "1 to 32 letters and digits");
            }
        }
        if let Some(path) = &self.grammar_file {
            if !path.is_file() {
                return invalid(
                    "grammar_file",
                    path.display().to_string(),
                    "a readable GBNF file",
                );
            }
        }
        Ok(())
    }

    /// The listen address resolved (`localhost` may give both IPv4 and IPv6).
    pub fn socket_addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        let addrs: Vec<SocketAddr> = self.addr.to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "address resolves to nothing",
            ));
        }
        Ok(addrs)
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

fn parse_env<T: FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    variable: &str,
    key: &'static str,
    slot: &mut T,
) -> Result<(), ConfigError> {
    if let Some(text) = env(variable) {
        *slot = text.trim().parse().map_err(|_| ConfigError::Invalid {
            key,
            value: text,
            expected: "a whole number",
        })?;
    }
    Ok(())
}

/// A positive duration: `"5s"`, `"1m30s"` or seconds.
fn parse_timeout(key: &'static str, text: &str) -> Result<Duration, ConfigError> {
    match text.parse::<KeepAlive>() {
        Ok(KeepAlive::For(duration)) if duration >= Duration::from_millis(100) => Ok(duration),
        _ => Err(ConfigError::Invalid {
            key,
            value: text.to_string(),
            expected: "a duration of at least 100ms, such as \"5s\", \"2m\" or seconds",
        }),
    }
}

/// `a, b,c` as a list, blanks dropped.
fn split_origins(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|origin| !origin.is_empty())
        .map(str::to_string)
        .collect()
}

/// `*`, or `http(s)://host[:port]` as browsers send it in `Origin`.
fn valid_origin(origin: &str) -> bool {
    if origin == "*" {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'))
}

/// A key a header can carry unchanged: visible ASCII, no spaces, bounded.
fn valid_api_key(key: &str) -> bool {
    (1..=1024).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

fn parse_keepalive(text: &str) -> Result<KeepAlive, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid {
        key: "keepalive",
        value: text.to_string(),
        expected: "a duration such as \"5m\", seconds, 0 or -1",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Write;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_match_the_issue() {
        let config = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
        assert_eq!(config.addr, "localhost:11435");
        assert_eq!(config.max_loaded, 2);
        assert_eq!(config.keep_alive.to_string(), "5m0s");
        assert_eq!(config.kv, KvType::F16);
        assert!(config.flash_attention);
        assert_eq!(config.parallel, 4);
    }

    #[test]
    fn flash_attention_is_switched_by_file_env_and_flag() {
        let env = |key: &str| (key == "LLAMAY_FLASH_ATTENTION").then(|| "off".to_string());
        assert!(!Config::load_with_env(&ServeArgs::default(), env).unwrap().flash_attention);
        let args = ServeArgs { flash_attn: Some("on".into()), ..ServeArgs::default() };
        assert!(Config::load_with_env(&args, env).unwrap().flash_attention);
        let args = ServeArgs { flash_attn: Some("sometimes".into()), ..ServeArgs::default() };
        let error = Config::load_with_env(&args, no_env).unwrap_err().to_string();
        assert!(error.contains("flash_attention") && error.contains("on or off"), "{error}");
    }

    #[test]
    fn flags_beat_env_which_beats_the_file() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "addr = \"127.0.0.1:9000\"\nmax_loaded = 3\nkeepalive = \"10m\"\nparallel = 2\nkv = \"f16\"").unwrap();
        let env: HashMap<&str, &str> =
            [("LLAMAY_MAX_LOADED", "5"), ("LLAMAY_KEEPALIVE", "-1")].into();
        let args = ServeArgs {
            config: Some(file.path().into()),
            parallel: Some(8),
            ..Default::default()
        };
        let config = Config::load_with_env(&args, |k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(config.addr, "127.0.0.1:9000");
        assert_eq!(config.max_loaded, 5);
        assert_eq!(config.keep_alive, KeepAlive::Forever);
        assert_eq!(config.parallel, 8);
        assert_eq!(config.kv, KvType::F16);
    }

    #[test]
    fn refuses_bad_values_by_name() {
        let cases: Vec<ServeArgs> = vec![
            ServeArgs {
                max_loaded: Some(0),
                ..Default::default()
            },
            ServeArgs {
                addr: Some("nowhere".into()),
                ..Default::default()
            },
            ServeArgs {
                kv: Some("f8".into()),
                ..Default::default()
            },
            ServeArgs {
                keepalive: Some("soon".into()),
                ..Default::default()
            },
            ServeArgs {
                parallel: Some(0),
                ..Default::default()
            },
            ServeArgs {
                grammar_file: Some("/definitely/not/here.gbnf".into()),
                ..Default::default()
            },
        ];
        for args in cases {
            assert!(
                matches!(
                    Config::load_with_env(&args, no_env),
                    Err(ConfigError::Invalid { .. })
                ),
                "{args:?}"
            );
        }
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "max_loadd = 3").unwrap();
        let args = ServeArgs {
            config: Some(file.path().into()),
            ..Default::default()
        };
        assert!(matches!(
            Config::load_with_env(&args, no_env),
            Err(ConfigError::Parse { .. })
        ));
        let env = |k: &str| (k == "LLAMAY_THREADS").then(|| "many".to_string());
        assert!(Config::load_with_env(&ServeArgs::default(), env).is_err());
    }

    #[test]
    fn context_memory_reads_sizes_and_refuses_other_text() {
        assert_eq!(parse_memory("context_memory", "2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_memory("context_memory", "512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_memory("context_memory", "1000").unwrap(), 1000);
        assert!(parse_memory("context_memory", "lots").is_err());
        let args = ServeArgs { context_memory: Some("64M".into()), ..Default::default() };
        assert_eq!(Config::load_with_env(&args, no_env).unwrap().context_memory, 64 << 20);
    }

    #[test]
    fn the_documented_config_file_loads_and_documents_every_key() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/llamay.toml");
        let args = ServeArgs {
            config: Some(path.into()),
            ..Default::default()
        };
        let config = Config::load_with_env(&args, no_env).unwrap();
        assert_eq!(config.addr, Config::default().addr);
        assert_eq!(config.keep_alive, Config::default().keep_alive);
        let text = std::fs::read_to_string(path).unwrap();
        let keys = [
            "addr",
            "model",
            "max_loaded",
            "keepalive",
            "context",
            "threads",
            "kv",
            "parallel",
            "grammar_file",
            "max_queue",
            "max_body_bytes",
            "log_format",
            "default_max_tokens",
            "max_tokens_limit",
            "api_key",
            "origins",
            "client_request_timeout",
            "request_body_timeout",
            "http_keep_alive",
            "max_connections",
            "flash_attention",
            "formats",
            "rpc",
            "split",
            "context_memory",
            "daemon_id",
            "embed",
            "rerank",
        ];
        for key in keys {
            assert!(
                text.contains(&format!("{key} = ")),
                "configs/llamay.toml does not document {key}"
            );
            let probe = format!("{key} = \"x\"");
            if let Err(error) = toml::from_str::<FileConfig>(&probe) {
                assert!(
                    !error.to_string().contains("unknown field"),
                    "{key} is documented but not a config key"
                );
            }
        }
    }

    #[test]
    fn security_and_connection_limits_load_from_each_source_and_are_checked() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "api_key = \"from-file\"\norigins = [\"http://localhost:3000\"]\nclient_request_timeout = 2\nrequest_body_timeout = \"1m\"\nhttp_keep_alive = \"750ms\"\nmax_connections = 10").unwrap();
        let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
        let config = Config::load_with_env(&args, no_env).unwrap();
        assert_eq!(config.api_key, Some(Secret("from-file".into())));
        assert_eq!(config.origins, ["http://localhost:3000"]);
        assert_eq!(config.client_request_timeout, Duration::from_secs(2));
        assert_eq!(config.request_body_timeout, Duration::from_secs(60));
        assert_eq!(config.http_keep_alive, Duration::from_millis(750));
        assert_eq!(config.max_connections, 10);
        assert!(!format!("{config:?}").contains("from-file"), "the key shows in Debug");

        let env: HashMap<&str, &str> = [
            ("LLAMAY_API_KEY", "from-env"),
            ("LLAMAY_ORIGINS", "https://a.example, http://b.example:8080"),
            ("LLAMAY_REQUEST_BODY_TIMEOUT", "5s"),
        ]
        .into();
        let args = ServeArgs { api_key: Some("from-flag".into()), ..Default::default() };
        let config = Config::load_with_env(&args, |k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(config.api_key, Some(Secret("from-flag".into())));
        assert_eq!(config.origins, ["https://a.example", "http://b.example:8080"]);
        assert_eq!(config.request_body_timeout, Duration::from_secs(5));
        let defaults = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
        assert_eq!((defaults.api_key, defaults.origins.len()), (None, 0));

        let refused: [(&str, &str); 6] = [
            ("LLAMAY_API_KEY", "has space"),
            ("LLAMAY_ORIGINS", "localhost:3000"),
            ("LLAMAY_ORIGINS", "http://a.example/path"),
            ("LLAMAY_HTTP_KEEP_ALIVE", "0"),
            ("LLAMAY_CLIENT_REQUEST_TIMEOUT", "soon"),
            ("LLAMAY_MAX_CONNECTIONS", "0"),
        ];
        for (variable, value) in refused {
            let env = |k: &str| (k == variable).then(|| value.to_string());
            assert!(
                matches!(Config::load_with_env(&ServeArgs::default(), env), Err(ConfigError::Invalid { .. })),
                "{variable}={value}"
            );
        }
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        let argv = [
            "llamay",
            "serve",
            "-m",
            "smollm2:135m",
            "-addr",
            "localhost:1",
            "-keepalive=-1",
            "-max-loaded",
            "1",
            "--kv",
            "f16",
        ];
        let normalized =
            normalize_single_dash_flags(argv.iter().map(|s| s.to_string()), SINGLE_DASH_LONG_FLAGS);
        assert_eq!(
            normalized,
            [
                "llamay",
                "serve",
                "-m",
                "smollm2:135m",
                "--addr",
                "localhost:1",
                "--keepalive=-1",
                "--max-loaded",
                "1",
                "--kv",
                "f16"
            ]
        );
    }

    #[test]
    fn serve_args_parse_with_clap() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let argv = normalize_single_dash_flags(
            [
                "llamay",
                "-m",
                "a",
                "-c",
                "2048",
                "-t",
                "3",
                "-keepalive",
                "-1",
                "-parallel",
                "2",
            ]
            .iter()
            .map(|s| s.to_string()),
            SINGLE_DASH_LONG_FLAGS,
        );
        let cli = Cli::try_parse_from(argv).unwrap();
        assert_eq!(cli.serve.model.as_deref(), Some("a"));
        assert_eq!(cli.serve.context, Some(2048));
        assert_eq!(cli.serve.threads, Some(3));
        assert_eq!(cli.serve.keepalive.as_deref(), Some("-1"));
        assert_eq!(cli.serve.parallel, Some(2));
    }

    #[test]
    fn token_limits_come_from_the_file_and_env_and_are_checked() {
        let defaults = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
        assert_eq!(
            (defaults.default_max_tokens, defaults.max_tokens_limit),
            (2048, 32768)
        );
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "default_max_tokens = 100\nmax_tokens_limit = 500").unwrap();
        let args = ServeArgs {
            config: Some(file.path().into()),
            ..Default::default()
        };
        let config = Config::load_with_env(&args, no_env).unwrap();
        assert_eq!((config.default_max_tokens, config.max_tokens_limit), (100, 500));
        let env = |k: &str| (k == "LLAMAY_MAX_TOKENS_LIMIT").then(|| "50".to_string());
        assert!(matches!(
            Config::load_with_env(&args, env),
            Err(ConfigError::Invalid { key: "default_max_tokens", .. })
        ));
        let env = |k: &str| (k == "LLAMAY_DEFAULT_MAX_TOKENS").then(|| "0".to_string());
        assert!(matches!(
            Config::load_with_env(&ServeArgs::default(), env),
            Err(ConfigError::Invalid { key: "default_max_tokens", .. })
        ));
    }
    #[test]
    fn formats_load_from_the_file_and_the_environment_and_are_checked() {
        use crate::grammar::schema::FormatMode;
        assert_eq!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().formats, FormatMode::Ignore);
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "formats = \"enforce\"").unwrap();
        let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
        assert_eq!(Config::load_with_env(&args, no_env).unwrap().formats, FormatMode::Enforce);
        let ignore = |k: &str| (k == "LLAMAY_FORMATS").then(|| "ignore".to_string());
        assert_eq!(Config::load_with_env(&args, ignore).unwrap().formats, FormatMode::Ignore);
        let typo = |k: &str| (k == "LLAMAY_FORMATS").then(|| "enforced".to_string());
        assert!(matches!(
            Config::load_with_env(&ServeArgs::default(), typo),
            Err(ConfigError::Invalid { key: "formats", .. })
        ));
    }

    #[test]
    fn rpc_workers_come_from_the_file_env_and_flag_and_are_checked() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "rpc = [\"10.0.0.2:50052\"]").unwrap();
        let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
        assert_eq!(Config::load_with_env(&args, no_env).unwrap().rpc, ["10.0.0.2:50052"]);
        let env = |k: &str| (k == "LLAMAY_RPC").then(|| "a:1, b:2".to_string());
        assert_eq!(Config::load_with_env(&args, env).unwrap().rpc, ["a:1", "b:2"]);
        let flag = ServeArgs { rpc: Some(String::new()), ..args };
        assert!(Config::load_with_env(&flag, env).unwrap().rpc.is_empty());
        let bad = ServeArgs { rpc: Some("a:1,nohost".into()), ..Default::default() };
        assert!(matches!(
            Config::load_with_env(&bad, no_env),
            Err(ConfigError::Invalid { key: "rpc", value, .. }) if value == "nohost"
        ));
    }

    #[test]
    fn split_ratios_need_one_per_device_and_rpc_workers() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "rpc = [\"a:1\", \"b:2\"]\nsplit = [1.0, 1.0, 2.0]").unwrap();
        let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
        assert_eq!(Config::load_with_env(&args, no_env).unwrap().split, [1.0, 1.0, 2.0]);
        let env = |k: &str| (k == "LLAMAY_SPLIT").then(|| "2, 1,0".to_string());
        assert_eq!(Config::load_with_env(&args, env).unwrap().split, [2.0, 1.0, 0.0]);
        let refused = |split: &str, rpc: Option<&str>| {
            let args = ServeArgs { split: Some(split.into()), rpc: rpc.map(str::to_string), ..Default::default() };
            match Config::load_with_env(&args, no_env) {
                Err(ConfigError::Invalid { key: "split", expected, .. }) => expected,
                other => panic!("{split} with {rpc:?}: {other:?}"),
            }
        };
        assert!(refused("1,1", None).contains("only with rpc workers"));
        assert!(refused("1,1", Some("a:1,b:2")).contains("one per rpc worker"));
        assert!(refused("1,-1", Some("a:1")).contains("0 or more"));
        assert!(refused("0,0", Some("a:1")).contains("not all 0"));
        assert!(refused("1,x", Some("a:1")).contains("comma-separated ratios"));
    }
}
