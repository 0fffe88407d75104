//! Where `llamay eval` runs its items: in this process (the model loaded here, its contexts in
//! a [`ContextRegistry`] of our own, as `llamay run` loads one) or on a running daemon through
//! its contexts API, as the store commands go through a daemon when one answers.
//!
//! Either way the prefix becomes one context, prefilled once, and each item runs in a fork of
//! it (`Read` mode: the item's tokens and answer never change the prefix), so its prompt
//! starts from the prefix's KV state instead of prefilling it again.
//!
//! Scoring (`-score`) goes through the path the daemon's `/v1/completions` takes for `echo`
//! with `logprobs` and `max_tokens: 0`: a request of token ids whose prompt log-probabilities
//! come back. Such a request does not run in a context (echo scores a whole prompt), so the
//! shared prefix is shared by prefix reuse instead of a fork: the prefix is scored once, and
//! every later request reuses its scored positions (see `actors::prefix`). In-process that is
//! the model worker directly; on a daemon, `POST /tokenize` and `POST /v1/completions`.
//!
//! Key types: [`Backend`], [`ItemAnswer`], [`WireConstraint`], [`ScoredPrompt`]. Cost
//! in-process: the model load, `-parallel` + 1 KV sequences (the prefix keeps one); on a
//! daemon, four HTTP calls per item (fork, generate, delete, and the summary's stats), or under
//! `-score` one tokenisation per choice and one scoring call per choice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use llamay::contexts::{
    ContextContent, ContextMode, ContextRecord, ContextRegistry, ContextUse,
};
use llamay::actors::messages::{Generate, HoldContexts, Tokenize};
use llamay::actors::model::{locate_model, LlamaModelHandle, WorkerSettings};
use llamay::service::validate_local;
use llamay::core::{
    ChatMessage, Completion, Constraint, FinishReason, KeepAlive, LogprobMode, LogprobsRequest,
    PromptInput, Role, SamplingParams, StreamEvent, UncheckedGenerateRequest,
    ValidGenerateRequest,
};
use llamay::grammar::schema::FormatMode;
use llamay::llm::{ContextParams, Model};

use super::items::{Item, ItemInput};
use super::settings::{EvalArgs, EvalSettings};
use crate::cli::client::Daemon;
use crate::cli::CliError;

/// One item's answer.
#[derive(Debug, Clone)]
pub struct ItemAnswer {
    pub output: String,
    pub tokens: u32,
    pub prompt_tokens: u32,
    /// Prompt tokens not prefilled for this item; `None` where the daemon's route does not say.
    pub cached_tokens: Option<u32>,
    pub finish_reason: &'static str,
    pub elapsed: Duration,
}

/// A prompt of token ids scored: per token, its log-probability after the tokens before it and
/// the highest log-probability any token had there (`None` for the first token, which nothing
/// predicts).
#[derive(Debug, Clone, Default)]
pub struct ScoredPrompt {
    pub positions: Vec<Option<PositionLogprob>>,
    pub prompt_tokens: u32,
    /// Tokens whose scores were reused from an earlier request rather than decoded.
    pub cached_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PositionLogprob {
    pub logprob: f64,
    /// The most likely token's log-probability there.
    pub best: f64,
}

/// The constraint as a daemon's Ollama routes take it: `format` (a schema or `"json"`),
/// `llamay_grammar`, `llamay_formats`.
#[derive(Debug, Clone, Default)]
pub struct WireConstraint {
    fields: serde_json::Map<String, Value>,
}

impl WireConstraint {
    pub fn from_flags(args: &EvalArgs) -> Result<WireConstraint, CliError> {
        let read = |path: &std::path::PathBuf| {
            std::fs::read_to_string(path).map_err(|source| CliError::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let mut fields = serde_json::Map::new();
        if let Some(path) = &args.schema {
            let schema: Value = serde_json::from_str(&read(path)?)
                .map_err(|e| CliError::Constraint(format!("{}: not JSON: {e}", path.display())))?;
            fields.insert("format".into(), schema);
            if args.formats == FormatMode::Enforce {
                fields.insert("llamay_formats".into(), json!("enforce"));
            }
        } else if args.json {
            fields.insert("format".into(), json!("json"));
        } else if let Some(path) = &args.grammar_file {
            fields.insert("llamay_grammar".into(), json!(read(path)?));
        }
        Ok(WireConstraint { fields })
    }
}

/// Where the items run.
pub enum Backend {
    Local(Box<Local>),
    Remote(Box<Remote>),
}

pub struct Local {
    handle: LlamaModelHandle,
    registry: ContextRegistry,
    parent: Option<Arc<ContextRecord>>,
    model: String,
    settings: EvalSettings,
    constraint: Option<Constraint>,
}

pub struct Remote {
    daemon: Daemon,
    parent: Option<String>,
    model: String,
    settings: EvalSettings,
    wire: WireConstraint,
    saved_before: u64,
}

fn model_error(error: impl std::fmt::Display) -> CliError {
    CliError::Model(error.to_string())
}

fn finish_name(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::StopSequence(_) => "stop",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error(_) => "error",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Stop => "stop",
    }
}

fn role(name: &str) -> Role {
    match name {
        "system" => Role::System,
        "assistant" => Role::Assistant,
        _ => Role::User,
    }
}

impl Backend {
    /// A running daemon's contexts when one answers, else the model loaded here.
    pub fn start(
        model: &str,
        settings: &EvalSettings,
        constraint: Option<Constraint>,
        wire: WireConstraint,
    ) -> Result<Backend, CliError> {
        if let Some(daemon) = Daemon::find() {
            let saved_before = prefix_tokens_saved(&daemon)?;
            return Ok(Backend::Remote(Box::new(Remote {
                daemon,
                parent: None,
                model: model.to_string(),
                settings: settings.clone(),
                wire,
                saved_before,
            })));
        }
        Ok(Backend::Local(Box::new(Local::start(
            model, settings, constraint,
        )?)))
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Backend::Local(_) => "in this process",
            Backend::Remote(_) => "on the running daemon",
        }
    }

    /// Makes the prefix's context; returns its length in tokens.
    pub fn prefill(&mut self, prefix: &str, chat: bool) -> Result<u32, CliError> {
        match self {
            Backend::Local(local) => local.prefill(prefix, chat),
            Backend::Remote(remote) => remote.prefill(prefix, chat),
        }
    }

    pub fn run_item(&self, item: &Item) -> Result<ItemAnswer, CliError> {
        match self {
            Backend::Local(local) => local.run_item(item),
            Backend::Remote(remote) => remote.run_item(item),
        }
    }

    /// `text` as the model's token ids, as `POST /tokenize` gives them (`add_special`: with the
    /// model's BOS where it puts one; control-token text becomes its token).
    pub fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, CliError> {
        if text.is_empty() && !add_special {
            return Ok(Vec::new());
        }
        match self {
            Backend::Local(local) => local.handle.tokenize(text, add_special).map_err(model_error),
            Backend::Remote(remote) => remote.tokenize(text, add_special),
        }
    }

    /// Scores `tokens` (echo with log-probabilities, nothing generated).
    pub fn score(&self, tokens: Vec<u32>) -> Result<ScoredPrompt, CliError> {
        match self {
            Backend::Local(local) => local.score(tokens),
            Backend::Remote(remote) => remote.score(tokens),
        }
    }

    /// Prompt tokens the run did not prefill: the items' own counts in-process, the daemon's
    /// `prefix_reuse.tokens_saved` growth over the run on a daemon (it counts every client's).
    pub fn reused_tokens(&self, counted: u64) -> Result<u64, CliError> {
        match self {
            Backend::Local(_) => Ok(counted),
            Backend::Remote(remote) => {
                Ok(prefix_tokens_saved(&remote.daemon)?.saturating_sub(remote.saved_before))
            }
        }
    }

    /// Deletes the daemon's prefix context (its forks are deleted item by item).
    pub fn finish(&self) {
        if let Backend::Remote(remote) = self {
            if let Some(parent) = &remote.parent {
                let _ = remote.daemon.call(
                    reqwest::Method::DELETE,
                    &format!("/v1/contexts/{parent}"),
                    None,
                );
            }
        }
    }
}

fn prefix_tokens_saved(daemon: &Daemon) -> Result<u64, CliError> {
    let stats = daemon.call(reqwest::Method::GET, "/v1/stats", None)?;
    Ok(stats["prefix_reuse"]["tokens_saved"].as_u64().unwrap_or(0))
}

impl Local {
    fn start(
        model: &str,
        settings: &EvalSettings,
        constraint: Option<Constraint>,
    ) -> Result<Local, CliError> {
        let store = crate::cli::models::open_store_if_needed(model)?;
        let (path, info) = locate_model(model, store.as_deref()).map_err(model_error)?;
        let loaded = Model::load(&path).map_err(model_error)?;
        let per_item = settings
            .ctx_size
            .unwrap_or_else(|| 4096.min(loaded.context_train().max(256)));
        // One more sequence than items at once: the prefix's context keeps its own.
        let sequences = settings.parallel + 1;
        let worker = WorkerSettings {
            context: ContextParams {
                n_ctx: per_item.saturating_mul(sequences),
                threads: settings
                    .threads
                    .unwrap_or(llamay::config::default_threads() as u32)
                    as i32,
                batch: 512,
                sequences,
                kv_type: settings.kv,
                flash_attention: true,
            },
            ..WorkerSettings::default()
        };
        let handle =
            LlamaModelHandle::start(Arc::new(loaded), info, &worker).map_err(model_error)?;
        Ok(Local {
            handle,
            registry: ContextRegistry::new(),
            parent: None,
            model: model.to_string(),
            settings: settings.clone(),
            constraint,
        })
    }

    fn request(
        &self,
        input: PromptInput,
        max_tokens: u32,
        temperature: f32,
        constraint: Option<Constraint>,
    ) -> Result<ValidGenerateRequest, CliError> {
        let sampling = SamplingParams {
            temperature,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: self.settings.seed,
            max_tokens: Some(max_tokens),
        };
        let request = UncheckedGenerateRequest::new(self.model.clone(), input).with_sampling(sampling);
        validate_local(request, constraint, None).map_err(model_error)
    }

    /// Runs a job to its end: its text and completion.
    fn finish_job(
        &self,
        request: ValidGenerateRequest,
        used: ContextUse,
    ) -> Result<(String, Completion), CliError> {
        let mut generation = self
            .handle
            .submit_in_context(request, used)
            .map_err(model_error)?;
        let mut text = String::new();
        while let Some(event) = generation.events.blocking_recv() {
            match event {
                StreamEvent::Delta { text: delta } => text.push_str(&delta),
                StreamEvent::Logprobs { .. } => {}
                StreamEvent::Done(done) => {
                    if let FinishReason::Error(message) = &done.finish_reason {
                        return Err(CliError::Model(format!("generation failed: {message}")));
                    }
                    return Ok((text, done));
                }
            }
        }
        Err(CliError::Model(
            "the model stopped without finishing".into(),
        ))
    }

    fn score(&self, tokens: Vec<u32>) -> Result<ScoredPrompt, CliError> {
        let mut request = UncheckedGenerateRequest::new(self.model.clone(), PromptInput::Tokens(tokens))
            .with_sampling(SamplingParams {
                temperature: 0.0,
                max_tokens: Some(0),
                ..SamplingParams::default()
            });
        request.logprobs = Some(LogprobsRequest {
            answer: false,
            top: 1,
            mode: LogprobMode::Model,
            prompt: true,
        });
        let request = validate_local(request, None, None).map_err(model_error)?;
        let mut generation = self.handle.submit(request).map_err(model_error)?;
        let mut positions = Vec::new();
        while let Some(event) = generation.events.blocking_recv() {
            match event {
                StreamEvent::Logprobs { prompt: true, tokens } => {
                    positions.extend(tokens.iter().map(|scored| {
                        scored.logprob.map(|logprob| PositionLogprob {
                            logprob: f64::from(logprob),
                            best: scored.top.first().map_or(f64::from(logprob), |t| f64::from(t.logprob).max(f64::from(logprob))),
                        })
                    }))
                }
                StreamEvent::Delta { .. } | StreamEvent::Logprobs { .. } => {}
                StreamEvent::Done(done) => {
                    if let FinishReason::Error(message) = &done.finish_reason {
                        return Err(CliError::Model(format!("scoring failed: {message}")));
                    }
                    return Ok(ScoredPrompt {
                        positions,
                        prompt_tokens: done.usage.prompt_tokens,
                        cached_tokens: done.usage.cached_tokens,
                    });
                }
            }
        }
        Err(CliError::Model("the model stopped without finishing".into()))
    }

    fn prefill(&mut self, prefix: &str, chat: bool) -> Result<u32, CliError> {
        let (content, input) = if chat {
            let messages = vec![ChatMessage::new(Role::System, prefix)];
            (
                ContextContent::Chat {
                    messages: messages.clone(),
                    tools: Vec::new(),
                },
                PromptInput::Chat {
                    messages,
                    tools: Vec::new(),
                },
            )
        } else {
            (
                ContextContent::Raw,
                PromptInput::Raw {
                    prompt: prefix.to_string(),
                    system: None,
                    template: false,
                },
            )
        };
        let record = self.registry.new_record(
            &self.model,
            content,
            Arc::new(Vec::new()),
            Some(KeepAlive::Forever),
            None,
        );
        let used = ContextUse {
            record: Arc::clone(&record),
            mode: ContextMode::Create,
            appended: Vec::new(),
        };
        let request = self.request(input, 1, 0.0, None)?;
        self.finish_job(request, used)?;
        self.registry.insert(Arc::clone(&record)).map_err(model_error)?;
        let tokens = record.tokens().len() as u32;
        self.parent = Some(record);
        Ok(tokens)
    }

    fn run_item(&self, item: &Item) -> Result<ItemAnswer, CliError> {
        let parent = self
            .parent
            .as_ref()
            .ok_or_else(|| CliError::Model("the prefix was not prefilled".into()))?;
        let child = self.registry.fork(parent, 1).map_err(model_error)?.pop();
        let child = child.ok_or_else(|| CliError::Model("fork made no context".into()))?;
        let input = match &item.input {
            ItemInput::Prompt(prompt) => PromptInput::Raw {
                prompt: prompt.clone(),
                system: None,
                template: false,
            },
            ItemInput::Messages(pairs) => PromptInput::Chat {
                messages: pairs
                    .iter()
                    .map(|(r, c)| ChatMessage::new(role(r), c.clone()))
                    .collect(),
                tools: Vec::new(),
            },
        };
        let request = self.request(input, self.settings.max_tokens, self.settings.temperature, self.constraint.clone())?;
        let used = ContextUse {
            record: Arc::clone(&child),
            mode: ContextMode::Read,
            appended: Vec::new(),
        };
        let started = Instant::now();
        let answered = self.finish_job(request, used);
        let _ = self.registry.remove(&child.id);
        let (output, done) = answered?;
        Ok(ItemAnswer {
            output,
            tokens: done.usage.completion_tokens,
            prompt_tokens: done.usage.prompt_tokens,
            cached_tokens: Some(done.usage.cached_tokens),
            finish_reason: finish_name(&done.finish_reason),
            elapsed: started.elapsed(),
        })
    }
}

impl Remote {
    fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, CliError> {
        let body = json!({"model": self.model, "prompt": text, "add_special_tokens": add_special});
        let answer = self.daemon.call(reqwest::Method::POST, "/tokenize", Some(&body))?;
        answer["tokens"]
            .as_array()
            .and_then(|tokens| {
                tokens
                    .iter()
                    .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect::<Option<Vec<u32>>>()
            })
            .ok_or_else(|| CliError::Model(format!("the daemon tokenized nothing: {answer}")))
    }

    fn score(&self, tokens: Vec<u32>) -> Result<ScoredPrompt, CliError> {
        let count = tokens.len();
        let body = json!({
            "model": self.model, "prompt": tokens, "echo": true, "max_tokens": 0,
            "logprobs": 1, "temperature": 0,
        });
        let answer = self.daemon.call(reqwest::Method::POST, "/v1/completions", Some(&body))?;
        let logprobs = &answer["choices"][0]["logprobs"];
        let unreadable = || CliError::Model(format!("the daemon's scores are not one per prompt token: {answer}"));
        let (Some(values), Some(tops)) = (logprobs["token_logprobs"].as_array(), logprobs["top_logprobs"].as_array()) else {
            return Err(unreadable());
        };
        if values.len() != count || tops.len() != count {
            return Err(unreadable());
        }
        let positions = values
            .iter()
            .zip(tops)
            .map(|(value, top)| {
                value.as_f64().map(|logprob| PositionLogprob {
                    logprob,
                    best: top
                        .as_object()
                        .into_iter()
                        .flat_map(|alternatives| alternatives.values().filter_map(Value::as_f64))
                        .fold(logprob, f64::max),
                })
            })
            .collect();
        let usage = &answer["usage"];
        Ok(ScoredPrompt {
            positions,
            prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(count as u64) as u32,
            cached_tokens: usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0) as u32,
        })
    }

    fn prefill(&mut self, prefix: &str, chat: bool) -> Result<u32, CliError> {
        let mut body = json!({"model": self.model, "keep_alive": -1});
        if chat {
            body["messages"] = json!([{"role": "system", "content": prefix}]);
        } else {
            body["prompt"] = json!(prefix);
        }
        let created = self
            .daemon
            .call(reqwest::Method::POST, "/v1/contexts", Some(&body))?;
        let id = created["id"]
            .as_str()
            .ok_or_else(|| CliError::Model(format!("the daemon made no context: {created}")))?;
        self.parent = Some(id.to_string());
        Ok(created["tokens"].as_u64().unwrap_or(0) as u32)
    }

    fn run_item(&self, item: &Item) -> Result<ItemAnswer, CliError> {
        let parent = self
            .parent
            .as_ref()
            .ok_or_else(|| CliError::Model("the prefix was not prefilled".into()))?;
        let forked = self.daemon.call(
            reqwest::Method::POST,
            &format!("/v1/contexts/{parent}/fork?n=1"),
            Some(&json!({})),
        )?;
        let child = forked["contexts"][0]["id"]
            .as_str()
            .ok_or_else(|| CliError::Model(format!("the daemon forked nothing: {forked}")))?
            .to_string();
        let mut options = json!({
            "temperature": self.settings.temperature,
            "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0,
            "num_predict": self.settings.max_tokens,
        });
        if let Some(seed) = self.settings.seed {
            options["seed"] = json!(seed);
        }
        let mut body = json!({"model": self.model, "stream": false, "options": options, "llamay_context": child});
        let path = match &item.input {
            ItemInput::Prompt(prompt) => {
                body["prompt"] = json!(prompt);
                body["raw"] = json!(true);
                "/api/generate"
            }
            ItemInput::Messages(pairs) => {
                let messages: Vec<Value> = pairs
                    .iter()
                    .map(|(r, c)| json!({"role": r, "content": c}))
                    .collect();
                body["messages"] = json!(messages);
                "/api/chat"
            }
        };
        for (key, value) in &self.wire.fields {
            body[key.as_str()] = value.clone();
        }
        let started = Instant::now();
        let answered = self.daemon.call(reqwest::Method::POST, path, Some(&body));
        let _ = self.daemon.call(
            reqwest::Method::DELETE,
            &format!("/v1/contexts/{child}"),
            None,
        );
        let answer = answered?;
        let output = answer
            .get("response")
            .or_else(|| answer.get("message").and_then(|m| m.get("content")))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let finish_reason = match answer["done_reason"].as_str() {
            Some("length") => "length",
            _ => "stop",
        };
        Ok(ItemAnswer {
            output,
            tokens: answer["eval_count"].as_u64().unwrap_or(0) as u32,
            prompt_tokens: answer["prompt_eval_count"].as_u64().unwrap_or(0) as u32,
            cached_tokens: None,
            finish_reason,
            elapsed: started.elapsed(),
        })
    }
}
