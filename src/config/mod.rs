//! The daemon's settings: one [`Config`] built from defaults, then a TOML file, then `LLAMAY_*`
//! environment variables, then `llamay serve` flags ([`ServeArgs`]), each overriding the last,
//! and validated before anything starts. `configs/llamay.toml` documents every key.
//! The flags are in `args.rs`, the text form of each kind of value in `values.rs`.
//!
//! A setting that a room of the daemon owns (the queues' bound, the compile pool's size, the
//! contexts' limits) is an `Option` here: `None` when the operator left it unset, and the daemon
//! (the composition root) fills it from the room's own default. So `config` reaches no room above
//! it: it imports only `core`, `llm`, `grammar` and `environment`.
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
use crate::environment::DEFAULT_ADDR;
use crate::llm::KvType;

mod args;
#[cfg(test)]
mod tests;
mod values;

pub use args::{normalize_single_dash_flags, ServeArgs, SINGLE_DASH_LONG_FLAGS};
pub use values::{parse_formats, parse_gpu_layers, parse_on_off};
use values::{
    env_number, parse_env, parse_keepalive, parse_kv, parse_lexicon_match, parse_memory, parse_split, parse_timeout,
    split_origins, split_workers, valid_api_key, valid_host_and_port, valid_origin,
};

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
    /// `-lexicon` files (word lists allowed or banned), applied to requests that bring none.
    pub lexicon_files: Vec<PathBuf>,
    /// How the `-lexicon` files' entries match where a file sets no `#!match` (`None`: the
    /// kind's default, prefix for a deny list).
    pub lexicon_match: Option<crate::grammar::MatchMode>,
    /// Requests that may wait at once: for a model to load, and, per loaded model, for one of
    /// its sequences; more are refused with 503. `None`: the actors' `QueueLimits` default.
    pub max_queue: Option<usize>,
    /// Threads that compile schemas and grammars off the HTTP workers. `None`: the service's
    /// `CompileLimits` default.
    pub compile_threads: Option<usize>,
    /// Compiles that may wait for one of those threads; more are refused with 503. `None`: the
    /// service's `CompileLimits` default.
    pub compile_queue: Option<usize>,
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
    /// Requests that do not say (`llamay_accelerate`) decode drafts with each sampled token:
    /// forced bytes and copies from the prompt, verified, so the output is the same.
    pub accelerate: bool,
    /// Requests that do not say (`llamay_close_on_budget`) close a constrained document within
    /// their token budget (`max_tokens` or the context's room), so it ends valid.
    pub close_on_budget: bool,
    /// Whether a schema's `format` constrains strings (a request's `llamay_formats` wins).
    pub formats: crate::grammar::schema::FormatMode,
    /// RPC workers, host:port, that every model's layers are split over (none: this CPU only).
    pub rpc: Vec<String>,
    /// Split ratios over the local CPU then each RPC worker; empty: by free memory.
    pub split: Vec<f64>,
    /// Bytes of parked context state kept in memory (contexts, issue 11). `None`: the contexts'
    /// `ContextLimits` default.
    pub context_memory: Option<u64>,
    /// Named contexts held at once; creating more is refused with 503. `None`: the contexts'
    /// `ContextLimits` default.
    pub max_contexts: Option<usize>,
    /// Stored `/v1/responses` answers kept at most; the oldest go first.
    pub max_stored_responses: usize,
    /// How long a stored response is kept.
    pub stored_responses_max_age: Duration,
    /// `Host` names a loopback-bound daemon answers besides its loopback ones (`*`: any).
    pub allowed_hosts: Vec<String>,
    /// Put in context ids so a proxy can route a context to its daemon; `None`: the id the
    /// store drew once (stable across restarts).
    pub daemon_id: Option<String>,
    /// The model `/v1/embeddings` and `/api/embed` use when a request names none.
    pub embed: Option<String>,
    /// The model `/rerank` uses when a request names none.
    pub rerank: Option<String>,
    /// Layers each model puts on a GPU (`-ngl`); `None`: as many as fit its free memory.
    /// A request's `num_gpu` (Ollama) overrides it for the model it loads.
    pub gpu_layers: Option<u32>,
    /// Registries pulls may reach over plain http, `host` (any port) or `host:port`; no request
    /// can add to them.
    pub insecure_registries: Vec<String>,
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
            addr: DEFAULT_ADDR.into(),
            model: None,
            max_loaded: 2,
            keep_alive: KeepAlive::For(Duration::from_secs(300)),
            context: 4096,
            threads: default_threads(),
            kv: KvType::F16,
            parallel: 4,
            grammar_file: None,
            lexicon_files: Vec::new(),
            lexicon_match: None,
            max_queue: None,
            compile_threads: None,
            compile_queue: None,
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
            accelerate: true,
            close_on_budget: true,
            formats: crate::grammar::schema::FormatMode::Ignore,
            rpc: Vec::new(),
            split: Vec::new(),
            context_memory: None,
            max_contexts: None,
            max_stored_responses: 10_000,
            // OpenAI keeps a stored response for 30 days.
            stored_responses_max_age: Duration::from_secs(30 * 24 * 3600),
            allowed_hosts: Vec::new(),
            daemon_id: None,
            embed: None,
            rerank: None,
            gpu_layers: None,
            insecure_registries: Vec::new(),
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
    lexicon_files: Option<Vec<PathBuf>>,
    lexicon_match: Option<String>,
    max_queue: Option<usize>,
    compile_threads: Option<usize>,
    compile_queue: Option<usize>,
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
    accelerate: Option<bool>,
    close_on_budget: Option<bool>,
    formats: Option<String>,
    rpc: Option<Vec<String>>,
    split: Option<Vec<f64>>,
    context_memory: Option<toml::Value>,
    max_contexts: Option<usize>,
    max_stored_responses: Option<usize>,
    stored_responses_max_age: Option<toml::Value>,
    allowed_hosts: Option<Vec<String>>,
    daemon_id: Option<String>,
    embed: Option<String>,
    rerank: Option<String>,
    gpu_layers: Option<toml::Value>,
    insecure_registries: Option<Vec<String>>,
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
        set(&mut self.lexicon_files, file.lexicon_files);
        if let Some(mode) = file.lexicon_match {
            self.lexicon_match = Some(parse_lexicon_match(&mode)?);
        }
        self.max_queue = file.max_queue.or(self.max_queue);
        self.compile_threads = file.compile_threads.or(self.compile_threads);
        self.compile_queue = file.compile_queue.or(self.compile_queue);
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
        set(&mut self.accelerate, file.accelerate);
        set(&mut self.close_on_budget, file.close_on_budget);
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
            self.context_memory = Some(parse_memory("context_memory", &text)?);
        }
        self.max_contexts = file.max_contexts.or(self.max_contexts);
        set(&mut self.max_stored_responses, file.max_stored_responses);
        if let Some(value) = file.stored_responses_max_age {
            let text = match value {
                toml::Value::String(text) => text,
                other => other.to_string(),
            };
            self.stored_responses_max_age = parse_timeout("stored_responses_max_age", &text)?;
        }
        set(&mut self.allowed_hosts, file.allowed_hosts);
        if file.daemon_id.is_some() {
            self.daemon_id = file.daemon_id;
        }
        if file.embed.is_some() {
            self.embed = file.embed;
        }
        if file.rerank.is_some() {
            self.rerank = file.rerank;
        }
        if let Some(value) = file.gpu_layers {
            self.gpu_layers = match value {
                toml::Value::String(text) => parse_gpu_layers(&text)?,
                other => parse_gpu_layers(&other.to_string())?,
            };
        }
        set(&mut self.insecure_registries, file.insecure_registries);
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
        if let Some(paths) = env("LLAMAY_LEXICON") {
            self.lexicon_files = std::env::split_paths(&paths).filter(|path| !path.as_os_str().is_empty()).collect();
        }
        if let Some(mode) = env("LLAMAY_LEXICON_MATCH") {
            self.lexicon_match = Some(parse_lexicon_match(&mode)?);
        }
        self.max_queue = env_number(env, "LLAMAY_MAX_QUEUE", "max_queue")?.or(self.max_queue);
        self.compile_threads = env_number(env, "LLAMAY_COMPILE_THREADS", "compile_threads")?.or(self.compile_threads);
        self.compile_queue = env_number(env, "LLAMAY_COMPILE_QUEUE", "compile_queue")?.or(self.compile_queue);
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
        if let Some(text) = env("LLAMAY_ACCELERATE") {
            self.accelerate = parse_on_off("accelerate", &text)?;
        }
        if let Some(text) = env("LLAMAY_CLOSE_ON_BUDGET") {
            self.close_on_budget = parse_on_off("close_on_budget", &text)?;
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
            self.context_memory = Some(parse_memory("context_memory", &text)?);
        }
        self.max_contexts = env_number(env, "LLAMAY_MAX_CONTEXTS", "max_contexts")?.or(self.max_contexts);
        parse_env(env, "LLAMAY_MAX_STORED_RESPONSES", "max_stored_responses", &mut self.max_stored_responses)?;
        if let Some(text) = env("LLAMAY_STORED_RESPONSES_MAX_AGE") {
            self.stored_responses_max_age = parse_timeout("stored_responses_max_age", &text)?;
        }
        if let Some(hosts) = env("LLAMAY_ALLOWED_HOSTS") {
            self.allowed_hosts = split_origins(&hosts);
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
        if let Some(text) = env("LLAMAY_GPU_LAYERS") {
            self.gpu_layers = parse_gpu_layers(&text)?;
        }
        if let Some(hosts) = env("LLAMAY_INSECURE_REGISTRIES") {
            self.insecure_registries = split_workers(&hosts);
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
        if !args.lexicon.is_empty() {
            self.lexicon_files = args.lexicon.clone();
        }
        if let Some(mode) = &args.lexicon_match {
            self.lexicon_match = Some(parse_lexicon_match(mode)?);
        }
        if let Some(key) = &args.api_key {
            self.api_key = Some(Secret(key.clone()));
        }
        if let Some(origins) = &args.origins {
            self.origins = split_origins(origins);
        }
        if let Some(hosts) = &args.allowed_hosts {
            self.allowed_hosts = split_origins(hosts);
        }
        if let Some(format) = &args.log_format {
            self.log_format = format.parse()?;
        }
        if let Some(text) = &args.flash_attn {
            self.flash_attention = parse_on_off("flash_attention", text)?;
        }
        if let Some(text) = &args.accelerate {
            self.accelerate = parse_on_off("accelerate", text)?;
        }
        if let Some(text) = &args.close_on_budget {
            self.close_on_budget = parse_on_off("close_on_budget", text)?;
        }
        if let Some(workers) = &args.rpc {
            self.rpc = split_workers(workers);
        }
        if let Some(ratios) = &args.split {
            self.split = parse_split(ratios)?;
        }
        if let Some(text) = &args.context_memory {
            self.context_memory = Some(parse_memory("context_memory", text)?);
        }
        if args.embed.is_some() {
            self.embed = args.embed.clone();
        }
        if args.rerank.is_some() {
            self.rerank = args.rerank.clone();
        }
        if let Some(text) = &args.gpu_layers {
            self.gpu_layers = parse_gpu_layers(text)?;
        }
        if !args.insecure_registry.is_empty() {
            self.insecure_registries = args
                .insecure_registry
                .iter()
                .flat_map(|hosts| split_workers(hosts))
                .collect();
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
        // Unset, these take their rooms' defaults, which are in range.
        if let Some(max_queue) = self.max_queue.filter(|n| !(1..=1_000_000).contains(n)) {
            return invalid("max_queue", max_queue.to_string(), "1 to 1000000");
        }
        if let Some(threads) = self.compile_threads.filter(|n| !(1..=64).contains(n)) {
            return invalid("compile_threads", threads.to_string(), "1 to 64");
        }
        if let Some(queue) = self.compile_queue.filter(|n| !(1..=100_000).contains(n)) {
            return invalid("compile_queue", queue.to_string(), "1 to 100000");
        }
        if let Some(max_contexts) = self.max_contexts.filter(|n| !(1..=1_000_000).contains(n)) {
            return invalid("max_contexts", max_contexts.to_string(), "1 to 1000000");
        }
        if !(1..=10_000_000).contains(&self.max_stored_responses) {
            return invalid("max_stored_responses", self.max_stored_responses.to_string(), "1 to 10000000");
        }
        let refused_host = |host: &&String| host.as_str() != "*" && !valid_host_and_port(host);
        if let Some(host) = self.allowed_hosts.iter().find(refused_host) {
            return invalid(
                "allowed_hosts",
                host.clone(),
                "host names or IP addresses (a port is ignored; no scheme or path), or *",
            );
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
        if let Some(layers) = self.gpu_layers.filter(|layers| *layers > 0) {
            if !self.rpc.is_empty() {
                return invalid(
                    "gpu_layers",
                    layers.to_string(),
                    "0 or unset with rpc workers: a model's layers are split over this CPU and the workers, not a local GPU",
                );
            }
        }
        if let Some(host) = self.insecure_registries.iter().find(|h| !valid_host_and_port(h)) {
            return invalid(
                "insecure_registries",
                host.clone(),
                "registry hosts such as 127.0.0.1:5000 or registry.lan (host[:port], no scheme or path)",
            );
        }
        if let Some(id) = &self.daemon_id {
            if !(1..=32).contains(&id.len()) || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return invalid("daemon_id", id.clone(), "1 to 32 letters and digits");
            }
        }
        if let Some(path) = self.lexicon_files.iter().find(|path| !path.is_file()) {
            return invalid("lexicon_files", path.display().to_string(), "a readable lexicon file (one entry per line)");
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

