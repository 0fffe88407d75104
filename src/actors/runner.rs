//! Models split over RPC workers (`serve -rpc`) run in a runner process of their own, the
//! hidden `llamay rpc-runner`, one per loaded model (as Ollama runs every model in a child
//! process): ggml's RPC client aborts its process when a worker is lost mid-computation, and
//! that process must not be the daemon. When a runner ends, the requests it was serving end
//! with a 503 naming the worker found unreachable, the model reports itself lost
//! ([`LoadedModel::is_lost`]), the supervisor forgets it, and the next request loads it again
//! (a 503 naming the worker while that one stays down).
//!
//! Key types: [`RunnerLoader`] (the [`ModelLoader`] that starts runners), [`RunnerModel`] (the
//! [`LoadedModel`] that forwards to one), [`ToRunner`] / [`FromRunner`] (the wire: one JSON
//! object a line over the runner's stdin and stdout; the runner's side is `service::runner_child`).
//! Costs: a process per loaded model; per request one line each way to start it (the caller
//! waits for the runner to accept it) and one line per event back. Constraints travel as their
//! source (a compiled grammar has no wire form) and the runner compiles them again, keeping a
//! few compiled grammars for repeats. Not forwarded: named contexts, refused with a 400.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::messages::{CancelToken, Generate, Generation, LoadedModel, ModelLoader};
use super::model::{StoreLoader, WorkerSettings};
use crate::core::{
    Completion, ConstraintKind, ConstraintSource, ContextRequest, CoreError, DevicePlacement, DraftCounts, FinishReason,
    ModelInfo, ModelTotals, PromptInput, SamplingParams, StepSplit, StreamEvent, ToolChoice,
    ValidGenerateRequest,
};
use crate::error::ErrorCode;

/// Longest a runner may take to connect its workers and load its model.
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest a runner may take to accept or refuse a request (it tokenizes the prompt).
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a runner loads: the file, its facts, the context settings, and the workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunnerSpec {
    pub path: PathBuf,
    pub info: ModelInfo,
    pub settings: WireSettings,
    pub rpc: Vec<String>,
    /// `-split` ratios; empty: by free memory.
    pub split: Vec<f64>,
}

/// [`WorkerSettings`] on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireSettings {
    pub n_ctx: u32,
    pub threads: i32,
    pub batch: u32,
    pub sequences: u32,
    pub kv_type: String,
    pub flash_attention: bool,
    pub max_queue: usize,
}

impl WireSettings {
    pub fn from_settings(settings: &WorkerSettings) -> Self {
        let c = &settings.context;
        WireSettings {
            n_ctx: c.n_ctx,
            threads: c.threads,
            batch: c.batch,
            sequences: c.sequences,
            kv_type: c.kv_type.to_string(),
            flash_attention: c.flash_attention,
            max_queue: settings.max_queue,
        }
    }

    pub fn to_settings(&self) -> Result<WorkerSettings, CoreError> {
        Ok(WorkerSettings {
            context: crate::llm::ContextParams {
                n_ctx: self.n_ctx,
                threads: self.threads,
                batch: self.batch,
                sequences: self.sequences,
                kv_type: self.kv_type.parse().map_err(CoreError::internal)?,
                flash_attention: self.flash_attention,
            },
            max_queue: self.max_queue,
        })
    }
}

/// A [`ValidGenerateRequest`] as a runner takes it (see the module's note on what is not).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRequest {
    pub model: String,
    pub input: PromptInput,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// The constraint's source, compiled again by the runner.
    pub constraint: Option<ConstraintSource>,
    pub num_ctx: Option<u32>,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    /// Ollama's `context` tokens.
    pub context_tokens: Option<Vec<u32>>,
    /// Whether drafts are verified with each sampled token (the daemon resolved its default).
    #[serde(default)]
    pub accelerate: Option<bool>,
    /// Whether the constraint closes its document within the budget (resolved likewise).
    #[serde(default)]
    pub close_on_budget: Option<bool>,
    #[serde(default)]
    pub logprobs: Option<crate::core::LogprobsRequest>,
    /// `cache_prompt: false`: the whole prompt decoded, no prefix reused.
    #[serde(default)]
    pub cold_prompt: bool,
}

impl WireRequest {
    fn from_request(request: ValidGenerateRequest) -> Result<Self, CoreError> {
        let (request, constraint, lexicon) = request.into_parts();
        let refuse = |what: &str| {
            CoreError::bad_request(format!(
                "model {} is split over RPC workers and runs in a runner process, which does not take {what}",
                request.model
            ))
        };
        if lexicon.is_some() {
            return Err(refuse("lexicons (llamay_lexicon or the daemon's -lexicon)"));
        }
        let constraint = match constraint {
            None => None,
            // A forced call's grammar is made again from the tools by the runner's worker.
            Some(constraint) if constraint.kind == ConstraintKind::Tool => None,
            Some(constraint) => match &constraint.source {
                Some(source) => Some(ConstraintSource::clone(source)),
                None => return Err(refuse("a constraint compiled without its source")),
            },
        };
        let context_tokens = match &request.context {
            None => None,
            Some(ContextRequest::Tokens(tokens)) => Some(tokens.clone()),
            Some(ContextRequest::Named { .. }) => return Err(refuse("named contexts")),
        };
        Ok(WireRequest {
            model: request.model,
            input: request.input,
            sampling: request.sampling,
            stop: request.stop,
            constraint,
            num_ctx: request.num_ctx,
            tool_choice: request.tool_choice,
            parallel_tool_calls: request.parallel_tool_calls,
            context_tokens,
            accelerate: request.accelerate,
            close_on_budget: request.close_on_budget,
            logprobs: request.logprobs,
            cold_prompt: request.cold_prompt,
        })
    }
}

/// A [`CoreError`] on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
    pub param: Option<String>,
}

impl From<CoreError> for WireError {
    fn from(error: CoreError) -> Self {
        WireError {
            code: error.code,
            message: error.message,
            param: error.param,
        }
    }
}

impl From<WireError> for CoreError {
    fn from(error: WireError) -> Self {
        CoreError {
            code: error.code,
            message: error.message,
            param: error.param,
        }
    }
}

/// [`ModelTotals`] on the wire (durations as seconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WireTotals {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    #[serde(default)]
    pub budget_closings: u64,
    pub generation_seconds: f64,
    pub prompt_eval_seconds: f64,
    pub constraint_caches: Option<crate::grammar::MaskStats>,
    pub prefix_reuse_hits: u64,
    pub prefix_tokens_saved: u64,
    /// Durations as serde writes them (seconds and nanoseconds), so the sums cross exactly.
    #[serde(default)]
    pub step_split: StepSplit,
    #[serde(default)]
    pub drafts: DraftCounts,
}

impl WireTotals {
    pub fn from_totals(totals: ModelTotals) -> Self {
        WireTotals {
            requests: totals.requests,
            prompt_tokens: totals.prompt_tokens,
            generated_tokens: totals.generated_tokens,
            budget_closings: totals.budget_closings,
            generation_seconds: totals.generation_time.as_secs_f64(),
            prompt_eval_seconds: totals.prompt_eval_time.as_secs_f64(),
            constraint_caches: totals.constraint_caches,
            prefix_reuse_hits: totals.prefix_reuse_hits,
            prefix_tokens_saved: totals.prefix_tokens_saved,
            step_split: totals.step_split,
            drafts: totals.drafts,
        }
    }

    fn into_totals(self) -> ModelTotals {
        let seconds = |s: f64| Duration::try_from_secs_f64(s).unwrap_or_default();
        ModelTotals {
            requests: self.requests,
            prompt_tokens: self.prompt_tokens,
            generated_tokens: self.generated_tokens,
            budget_closings: self.budget_closings,
            generation_time: seconds(self.generation_seconds),
            prompt_eval_time: seconds(self.prompt_eval_seconds),
            constraint_caches: self.constraint_caches,
            prefix_reuse_hits: self.prefix_reuse_hits,
            prefix_tokens_saved: self.prefix_tokens_saved,
            step_split: self.step_split,
            drafts: self.drafts,
        }
    }
}

/// Daemon to runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToRunner {
    /// The first line: what to load.
    Load(RunnerSpec),
    Submit {
        id: u64,
        request: WireRequest,
    },
    Cancel {
        id: u64,
    },
}

/// Runner to daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FromRunner {
    Ready {
        info: ModelInfo,
        placement: Vec<DevicePlacement>,
    },
    LoadFailed(WireError),
    Accepted {
        id: u64,
    },
    Refused {
        id: u64,
        error: WireError,
    },
    Event {
        id: u64,
        event: StreamEvent,
    },
    /// Sent after each request ends.
    Counters {
        /// Requests in a sequence or waiting for one.
        in_use: usize,
        totals: WireTotals,
    },
}

/// One JSON line.
pub fn write_line<T: Serialize>(out: &mut impl Write, message: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// Starts a runner per model load. Names resolve as [`StoreLoader`] resolves them.
pub struct RunnerLoader {
    locator: StoreLoader,
    rpc: Vec<String>,
    split: Vec<f64>,
    program: PathBuf,
}

impl RunnerLoader {
    /// `program` is this llamay executable (it has the hidden `rpc-runner` subcommand).
    pub fn new(locator: StoreLoader, rpc: Vec<String>, split: Vec<f64>, program: PathBuf) -> Self {
        RunnerLoader {
            locator,
            rpc,
            split,
            program,
        }
    }
}

impl ModelLoader for RunnerLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        let (path, info) = self.locator.locate(name)?;
        let spec = RunnerSpec {
            path,
            info,
            settings: WireSettings::from_settings(self.locator.settings()),
            rpc: self.rpc.clone(),
            split: self.split.clone(),
        };
        Ok(Arc::new(RunnerModel::start(&self.program, spec)?))
    }

    fn check_installed(&self, name: &str) -> Result<(), CoreError> {
        self.locator.check_installed(name)
    }
}

/// A request the runner is serving.
struct InFlight {
    events: mpsc::Sender<StreamEvent>,
    cancel: CancelToken,
}

/// What the reader thread and the request side share.
struct RunnerState {
    name: String,
    workers: Vec<String>,
    input: Mutex<Option<ChildStdin>>,
    requests: Mutex<HashMap<u64, InFlight>>,
    acks: Mutex<HashMap<u64, std_mpsc::Sender<Result<(), CoreError>>>>,
    ready: Mutex<Option<std_mpsc::Sender<FromRunner>>>,
    /// Why the runner is gone, once it is.
    lost: Mutex<Option<String>>,
    /// Set when the daemon unloads the model: the runner's end is then expected.
    closing: AtomicBool,
    in_use: AtomicUsize,
    totals: Mutex<ModelTotals>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl RunnerState {
    fn send(&self, message: &ToRunner) -> std::io::Result<()> {
        match lock(&self.input).as_mut() {
            Some(input) => write_line(input, message),
            None => Err(std::io::Error::other("the runner's input is closed")),
        }
    }

    fn lost_error(&self) -> Option<CoreError> {
        lock(&self.lost)
            .clone()
            .map(|message| CoreError::new(ErrorCode::RpcWorkerLost, message))
    }

    /// Hands one runner line to whoever waits for it.
    fn dispatch(&self, message: FromRunner) {
        match message {
            ready @ (FromRunner::Ready { .. } | FromRunner::LoadFailed(_)) => {
                if let Some(sender) = lock(&self.ready).take() {
                    let _ = sender.send(ready);
                }
            }
            FromRunner::Accepted { id } => {
                if let Some(ack) = lock(&self.acks).remove(&id) {
                    let _ = ack.send(Ok(()));
                }
            }
            FromRunner::Refused { id, error } => {
                lock(&self.requests).remove(&id);
                if let Some(ack) = lock(&self.acks).remove(&id) {
                    let _ = ack.send(Err(error.into()));
                }
            }
            FromRunner::Event { id, event } => self.deliver(id, event),
            FromRunner::Counters { in_use, totals } => {
                self.in_use.store(in_use, Ordering::Release);
                *lock(&self.totals) = totals.into_totals();
            }
        }
    }

    fn deliver(&self, id: u64, event: StreamEvent) {
        let done = matches!(event, StreamEvent::Done(_));
        let target = lock(&self.requests)
            .get(&id)
            .map(|r| (r.events.clone(), r.cancel.clone()));
        let Some((events, cancel)) = target else {
            return;
        };
        // The client went away: the runner stops the request at its next step.
        if cancel.is_cancelled() || events.blocking_send(event).is_err() {
            lock(&self.requests).remove(&id);
            let _ = self.send(&ToRunner::Cancel { id });
            return;
        }
        if done {
            lock(&self.requests).remove(&id);
        }
    }

    /// The runner ended without being asked: find the worker that is gone, fail what was in
    /// flight with it, and mark the model lost.
    fn runner_ended(&self, status: Option<std::process::ExitStatus>) {
        let cause = match crate::llm::rpc::check_reachable(&self.workers) {
            Err(unreachable) => unreachable.to_string(),
            Ok(()) => format!(
                "the runner of model {} ended ({}) while every RPC worker ({}) still answers",
                self.name,
                status.map_or("status unknown".to_string(), |s| s.to_string()),
                self.workers.join(", ")
            ),
        };
        let message = format!(
            "{cause}; model {} is loaded again by the next request",
            self.name
        );
        tracing::warn!(model = %self.name, %message, "model runner lost");
        *lock(&self.lost) = Some(message.clone());
        lock(&self.acks).clear();
        if let Some(ready) = lock(&self.ready).take() {
            let _ = ready.send(FromRunner::LoadFailed(WireError {
                code: ErrorCode::RpcWorkerLost,
                message: message.clone(),
                param: None,
            }));
        }
        let requests: Vec<InFlight> = lock(&self.requests).drain().map(|(_, r)| r).collect();
        for request in requests {
            let completion = Completion {
                finish_reason: FinishReason::rpc_worker_lost(&message),
                ..Completion::default()
            };
            let _ = request.events.blocking_send(StreamEvent::Done(completion));
        }
        self.in_use.store(0, Ordering::Release);
    }
}

/// A model loaded in a runner process. Dropping it ends the runner.
pub struct RunnerModel {
    info: ModelInfo,
    placement: Vec<DevicePlacement>,
    state: Arc<RunnerState>,
    child: Mutex<Child>,
    reader: Mutex<Option<JoinHandle<()>>>,
    next_id: AtomicU64,
}

impl RunnerModel {
    /// Starts `program rpc-runner`, sends it `spec` and waits until the model is loaded.
    pub fn start(program: &Path, spec: RunnerSpec) -> Result<Self, CoreError> {
        let name = spec.info.name.clone();
        let mut child = Command::new(program)
            .arg("rpc-runner")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| CoreError::internal(format!("cannot start the runner for {name}: {e}")))?;
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let state = Arc::new(RunnerState {
            name: name.clone(),
            workers: spec.rpc.clone(),
            input: Mutex::new(child.stdin.take()),
            requests: Mutex::new(HashMap::new()),
            acks: Mutex::new(HashMap::new()),
            ready: Mutex::new(Some(ready_tx)),
            lost: Mutex::new(None),
            closing: AtomicBool::new(false),
            in_use: AtomicUsize::new(0),
            totals: Mutex::new(ModelTotals::default()),
        });
        let output = child.stdout.take();
        let mut model = RunnerModel {
            info: spec.info.clone(),
            placement: Vec::new(),
            state: Arc::clone(&state),
            child: Mutex::new(child),
            reader: Mutex::new(None),
            next_id: AtomicU64::new(0),
        };
        let Some(output) = output else {
            return Err(CoreError::internal("the runner has no output pipe"));
        };
        let reader = {
            let state = Arc::clone(&state);
            std::thread::Builder::new()
                .name(format!("runner-{name}"))
                .spawn(move || read_runner(output, &state))
                .map_err(|e| CoreError::internal(format!("cannot start the runner reader: {e}")))?
        };
        *lock(&model.reader) = Some(reader);
        state
            .send(&ToRunner::Load(spec))
            .map_err(|e| CoreError::internal(format!("cannot reach the runner for {name}: {e}")))?;
        match ready_rx.recv_timeout(LOAD_TIMEOUT) {
            Ok(FromRunner::Ready { info, placement }) => {
                model.info = info;
                model.placement = placement;
                Ok(model)
            }
            Ok(FromRunner::LoadFailed(error)) => Err(error.into()),
            Ok(_) | Err(_) => Err(CoreError::new(
                ErrorCode::ModelLoadFailed,
                format!(
                    "the runner for {name} did not load it within {} s",
                    LOAD_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    fn submit_wire(&self, request: WireRequest) -> Result<Generation, CoreError> {
        if let Some(lost) = self.state.lost_error() {
            return Err(lost);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (generation, events, cancel) = Generation::channel();
        let (ack_tx, ack_rx) = std_mpsc::channel();
        lock(&self.state.acks).insert(id, ack_tx);
        lock(&self.state.requests).insert(id, InFlight { events, cancel });
        let forget = || {
            lock(&self.state.acks).remove(&id);
            lock(&self.state.requests).remove(&id);
        };
        if self.state.send(&ToRunner::Submit { id, request }).is_err() {
            forget();
            return Err(self.state.lost_error().unwrap_or_else(|| self.gone()));
        }
        match ack_rx.recv_timeout(SUBMIT_TIMEOUT) {
            Ok(Ok(())) => Ok(generation),
            Ok(Err(refused)) => {
                forget();
                Err(refused)
            }
            Err(_) => {
                forget();
                let _ = self.state.send(&ToRunner::Cancel { id });
                Err(self.state.lost_error().unwrap_or_else(|| self.gone()))
            }
        }
    }

    fn gone(&self) -> CoreError {
        CoreError::new(
            ErrorCode::RpcWorkerLost,
            format!("the runner of model {} does not answer", self.info.name),
        )
    }
}

/// The reader thread: every runner line to its receiver; at the end, [`RunnerState::runner_ended`].
fn read_runner(output: ChildStdout, state: &RunnerState) {
    for line in BufReader::new(output).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<FromRunner>(&line) {
            Ok(message) => state.dispatch(message),
            // Anything else a library printed to stdout is passed on to the log.
            Err(_) => tracing::info!(model = %state.name, runner = %line, "runner output"),
        }
    }
    if !state.closing.load(Ordering::Acquire) {
        state.runner_ended(None);
    }
}

impl LoadedModel for RunnerModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn generator(&self) -> Option<&dyn Generate> {
        Some(self)
    }

    fn sequences_in_use(&self) -> usize {
        self.state.in_use.load(Ordering::Acquire).min(self.info.parallel as usize)
    }

    fn queue_depth(&self) -> usize {
        self.state.in_use.load(Ordering::Acquire).saturating_sub(self.info.parallel as usize)
    }

    fn totals(&self) -> ModelTotals {
        lock(&self.state.totals).clone()
    }

    fn placement(&self) -> Vec<DevicePlacement> {
        self.placement.clone()
    }

    fn is_lost(&self) -> bool {
        lock(&self.state.lost).is_some()
    }
}

/// The runner process takes whole requests; named contexts stay with in-process models.
impl Generate for RunnerModel {
    fn submit(&self, request: ValidGenerateRequest) -> Result<Generation, CoreError> {
        self.submit_wire(WireRequest::from_request(request)?)
    }
}

impl Drop for RunnerModel {
    fn drop(&mut self) {
        self.state.closing.store(true, Ordering::Release);
        // Closing its input asks the runner to stop; the kill makes sure of it.
        lock(&self.state.input).take();
        {
            let mut child = lock(&self.child);
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(reader) = lock(&self.reader).take() {
            let _ = reader.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_split_crosses_the_wire_exactly() {
        let totals = ModelTotals {
            generated_tokens: 3,
            step_split: StepSplit {
                decode: Duration::new(1, 234_567_891),
                deliver: Duration::from_nanos(17),
                steps: Duration::new(2, 1),
                ..StepSplit::default()
            },
            ..ModelTotals::default()
        };
        let line = serde_json::to_vec(&WireTotals::from_totals(totals.clone())).unwrap();
        let back = serde_json::from_slice::<WireTotals>(&line).unwrap().into_totals();
        assert_eq!(back.step_split, totals.step_split);
    }

    #[test]
    fn wire_messages_round_trip() {
        let event = FromRunner::Event {
            id: 7,
            event: StreamEvent::Done(Completion {
                finish_reason: FinishReason::rpc_worker_lost(
                    "RPC worker 127.0.0.1:9 is unreachable",
                ),
                ..Completion::default()
            }),
        };
        let mut line = Vec::new();
        write_line(&mut line, &event).unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        match serde_json::from_slice::<FromRunner>(&line).unwrap() {
            FromRunner::Event {
                id: 7,
                event: StreamEvent::Done(completion),
            } => {
                let FinishReason::Error(message) = &completion.finish_reason else {
                    panic!("{completion:?}")
                };
                let error = crate::core::generation_failed(message);
                assert_eq!(error.status(), 503);
                assert!(error.message.contains("127.0.0.1:9"), "{}", error.message);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            crate::core::generation_failed("decode failed").status(),
            500
        );
    }
}
