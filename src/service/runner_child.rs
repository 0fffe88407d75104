//! The runner's side of `actors::runner`: the hidden `llamay rpc-runner` reads a [`ToRunner::Load`]
//! on stdin, connects the RPC workers and loads the model split over them (as `serve` would
//! in-process), answers [`FromRunner::Ready`], then serves requests until its input closes.
//! If ggml aborts because a worker is lost, only this process ends; the daemon sees its output
//! close and fails the requests in flight.
//!
//! Each request is validated again in this process, its constraint compiled through the same
//! cache type as the daemon's ([`ConstraintCache`]).
//!
//! Key item: [`run`]. Cost: one thread per request in flight, forwarding its events to stdout.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::{Arc, Mutex};

use super::constraint::{resolve_constraint, ConstraintCache, ConstraintSources};
use super::validate_local;
use crate::actors::messages::{CancelOnDrop, Generate, LoadedModel};
use crate::actors::model::{load_model, LlamaModelHandle};
use crate::actors::runner::{write_line, FromRunner, RunnerSpec, ToRunner, WireError, WireRequest, WireTotals};
use crate::core::{ContextRequest, CoreError, StreamEvent, UncheckedGenerateRequest, ValidGenerateRequest};
use crate::error::ErrorCode;

type Output = Arc<Mutex<std::io::Stdout>>;

fn send(output: &Output, message: &FromRunner) {
    let mut out = output
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if write_line(&mut *out, message).is_err() {
        // The daemon is gone: nobody is left to serve.
        std::process::exit(0);
    }
}

/// Serves one model for the daemon that started this process; returns when its input closes.
pub fn run() -> Result<(), String> {
    let output: Output = Arc::new(Mutex::new(std::io::stdout()));
    let mut lines = std::io::stdin().lock().lines();
    let spec = match lines.next() {
        Some(Ok(line)) => match serde_json::from_str::<ToRunner>(&line) {
            Ok(ToRunner::Load(spec)) => spec,
            _ => return Err("rpc-runner: the first line must be a load request".into()),
        },
        _ => return Err("rpc-runner: no load request on stdin".into()),
    };
    let model = match load(&spec) {
        Ok(model) => Arc::new(model),
        Err(error) => {
            send(&output, &FromRunner::LoadFailed(error.into()));
            return Ok(());
        }
    };
    send(
        &output,
        &FromRunner::Ready {
            info: model.info().clone(),
            placement: model.placement(),
        },
    );
    let cancels: Arc<Mutex<HashMap<u64, CancelOnDrop>>> = Arc::default();
    let constraints = ConstraintCache::new(COMPILED_KEPT);
    for line in lines {
        let Ok(line) = line else { break };
        match serde_json::from_str::<ToRunner>(&line) {
            Ok(ToRunner::Submit { id, request }) => submit(&model, &constraints, id, request, &output, &cancels),
            Ok(ToRunner::Cancel { id }) => {
                // Dropping the guard cancels the request at the model's next step.
                cancels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
            }
            Ok(ToRunner::Load(_)) | Err(_) => {
                tracing::warn!(line = %line, "rpc-runner: unexpected input")
            }
        }
    }
    Ok(())
}

/// Connects the workers and loads the model; an unreachable worker is a 503 naming it.
fn load(spec: &RunnerSpec) -> Result<LlamaModelHandle, CoreError> {
    if !spec.rpc.is_empty() {
        let ratios = (!spec.split.is_empty()).then_some(spec.split.as_slice());
        crate::llm::rpc::connect(&spec.rpc, ratios)
            .map_err(|e| CoreError::new(ErrorCode::RpcWorkerLost, e.to_string()))?;
        crate::llm::rpc::install_abort_report();
    }
    load_model(&spec.path, spec.info.clone(), &spec.settings.to_settings()?)
}

/// Compiled grammars kept for repeated constraints (the daemon keeps its own, in its process).
const COMPILED_KEPT: usize = 32;

/// The request as the daemon validated it, validated again here: its constraint compiled in
/// this process (from `constraints` when it was before).
fn to_request(request: WireRequest, constraints: &ConstraintCache) -> Result<ValidGenerateRequest, CoreError> {
    let constraint = match request.constraint {
        Some(source) => resolve_constraint(ConstraintSources::of(source), None, constraints, None, None)?.finish(constraints)?,
        None => None,
    };
    let request = UncheckedGenerateRequest {
        model: request.model,
        input: request.input,
        sampling: request.sampling,
        stop: request.stop,
        num_ctx: request.num_ctx,
        keep_alive: None,
        tool_choice: request.tool_choice,
        parallel_tool_calls: request.parallel_tool_calls,
        context: request.context_tokens.map(ContextRequest::Tokens),
        accelerate: request.accelerate,
        close_on_budget: request.close_on_budget,
        logprobs: request.logprobs,
        cold_prompt: request.cold_prompt,
    };
    validate_local(request, constraint, None)
}

fn submit(
    model: &Arc<LlamaModelHandle>,
    constraints: &ConstraintCache,
    id: u64,
    request: WireRequest,
    output: &Output,
    cancels: &Arc<Mutex<HashMap<u64, CancelOnDrop>>>,
) {
    let generation = match to_request(request, constraints).and_then(|request| model.submit(request)) {
        Ok(generation) => generation,
        Err(error) => {
            send(
                output,
                &FromRunner::Refused {
                    id,
                    error: WireError::from(error),
                },
            );
            return;
        }
    };
    let mut events = generation.events;
    cancels
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, generation.cancel);
    // Accepted goes out before any event of this request.
    send(output, &FromRunner::Accepted { id });
    let failed_output = Arc::clone(output);
    let (model, output, cancels) = (Arc::clone(model), Arc::clone(output), Arc::clone(cancels));
    let forward = move || {
        while let Some(event) = events.blocking_recv() {
            let done = matches!(event, StreamEvent::Done(_));
            send(&output, &FromRunner::Event { id, event });
            if done {
                break;
            }
        }
        cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        send(
            &output,
            &FromRunner::Counters {
                in_use: model.sequences_in_use() + model.queue_depth(),
                totals: WireTotals::from_totals(model.totals()),
            },
        );
    };
    if let Err(error) = std::thread::Builder::new()
        .name(format!("runner-request-{id}"))
        .spawn(forward)
    {
        let completion = crate::core::Completion {
            finish_reason: crate::core::FinishReason::Error(format!(
                "the runner cannot start a request thread: {error}"
            )),
            ..Default::default()
        };
        send(
            &failed_output,
            &FromRunner::Event {
                id,
                event: StreamEvent::Done(completion),
            },
        );
    }
}
