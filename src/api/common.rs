//! Shape-neutral plumbing every API route shares: reading a bounded JSON body, the HTTP status
//! and `Retry-After` of an error, and running a generation (lease a model, submit, then either
//! collect the whole answer or stream it through a shape's translator).
//!
//! Key items: [`read_json`], [`error_response`], [`start_generation`], [`collect`],
//! [`event_stream`], [`StreamTranslator`]. Costs: a body is buffered once, up to the limit.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder};
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;

use super::AppState;
use crate::actors::messages::Generation;
use crate::actors::supervisor::{acquire, ModelLease};
use crate::actors::contexts::{tools_in_effect, ContextUse};
use crate::api::constraint::{resolve_constraint, ConstraintSources, ToolSources};
use crate::api::lexicon::ChosenLexicon;
use crate::api::metrics::GenerationObserver;
use crate::core::{Completion, Constraint, FinishReason, StreamEvent, ValidGenerateRequest};
use crate::error::{CoreError, ErrorCode};

/// Reads the body (up to `limit` bytes) and parses it as `T`. Any content type is accepted, as
/// `curl -d` sends form-encoded headers with a JSON body.
pub async fn read_json<T: DeserializeOwned>(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<T, CoreError> {
    let too_large = || {
        CoreError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            CoreError::new(
                ErrorCode::MalformedJson,
                format!("could not read the request body: {e}"),
            )
        })?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    parse_json(&body)
}

/// Parses a JSON body, naming what is wrong and where.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, CoreError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(CoreError::new(
            ErrorCode::MalformedJson,
            "the request body is empty; send a JSON object",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "the request body does not match the API",
            _ => "the request body is not valid JSON",
        };
        CoreError::new(ErrorCode::MalformedJson, format!("{what}: {e}"))
    })
}

/// The status of an error and its `Retry-After` header where the code invites a retry.
pub fn error_response(error: &CoreError) -> HttpResponseBuilder {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = HttpResponse::build(status);
    if let Some(seconds) = error.code.retry_after_seconds() {
        builder.insert_header((header::RETRY_AFTER, HeaderValue::from(seconds)));
    }
    builder
}

/// A generation under way, holding its model's lease so the model is not unloaded under it.
pub struct Started {
    pub generation: Generation,
    pub lease: ModelLease,
    /// Books tokens, time to first token and the finish in `/metrics`.
    pub observer: GenerationObserver,
}

impl Started {
    pub fn model_name(&self) -> &str {
        &self.lease.model().info().name
    }
}

/// Compiles the request's constraint (or takes the daemon's `-grammar-file`) under its lexicon
/// (or the daemon's `-lexicon`), with `format` enforced as the request or else the config says, applies the
/// daemon's token budget rules (the one place for all three APIs), leases the model (loading
/// it if needed) and submits the request.
pub async fn start_generation(
    state: &AppState,
    mut request: ValidGenerateRequest,
    mut constraint: ConstraintSources,
) -> Result<Started, CoreError> {
    let arrived = Instant::now();
    // The request's `llamay_formats` wins over the daemon's `formats`.
    constraint.formats = constraint.formats.or(Some(state.formats));
    request.sampling.limit_tokens(state.token_limits);
    // One name per model from here on: its context and its loaded copy are found by it.
    request.model = crate::core::ModelName::parse(&request.model)?.to_string();
    // The request's `llamay_lexicon` wins over the daemon's `-lexicon`.
    let lexicon = state.lexicons.choose(constraint.lexicon.take()).await?;
    // An unknown context is refused before any model loads or anything compiles.
    let context = match request.context.as_ref() {
        Some(asked) => Some(crate::api::contexts::context_use(state, asked, &request)?),
        None => None,
    };
    let tools = ToolSources {
        tools: tools_in_effect(&request, context.as_ref()),
        choice: request.tool_choice.clone(),
        parallel: request.parallel_tool_calls,
    };
    request.constraint = compile_constraint(state, constraint, Some(tools), lexicon.as_ref()).await?;
    request.lexicon = lexicon.map(|chosen| chosen.lexicon);
    let lease = acquire(&state.supervisor, &request.model, request.keep_alive).await?;
    let generation = submit_off_worker(&lease, request, context).await?;
    let observer = state.metrics.observe_generation(&lease.model().info().name, arrived);
    Ok(Started { generation, lease, observer })
}

/// The constraint a request runs under: from the cache on the HTTP worker when every part of
/// it is there, else compiled on the compile pool (503 when its queue is full).
pub async fn compile_constraint(
    state: &AppState,
    sources: ConstraintSources,
    tools: Option<ToolSources>,
    lexicon: Option<&ChosenLexicon>,
) -> Result<Option<Constraint>, CoreError> {
    let work = resolve_constraint(sources, tools, &state.constraints, state.default_grammar.as_ref(), lexicon)?;
    if !work.needs_compile() {
        return work.finish(&state.constraints);
    }
    let cache = Arc::clone(&state.constraints);
    state.compile_pool.run(move || work.finish(&cache)).await
}

/// Submits a request to its leased model. Submitting renders the template and tokenizes the
/// prompt: CPU time that grows with the body (seconds for a few megabytes). On an HTTP worker
/// it would stall every connection the worker serves, whose head and keep-alive timers then
/// fire, so it runs on a blocking thread.
pub async fn submit_off_worker(
    lease: &ModelLease,
    request: ValidGenerateRequest,
    context: Option<ContextUse>,
) -> Result<Generation, CoreError> {
    let model = Arc::clone(lease.model());
    web::block(move || match context {
        Some(context) => model.submit_in_context(request, context),
        None => model.submit(request),
    })
    .await
    .map_err(|e| CoreError::internal(format!("preparing the prompt stopped: {e}")))?
}

/// The whole answer of a non-streaming request.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub text: String,
    pub completion: Completion,
}

/// Waits for the whole answer. An error part way is returned as an error, since nothing has
/// been sent yet.
pub async fn collect(mut started: Started) -> Result<Collected, CoreError> {
    let mut text = String::new();
    while let Some(event) = started.generation.events.recv().await {
        match event {
            StreamEvent::Delta { text: delta } => {
                started.observer.token();
                text.push_str(&delta);
            }
            StreamEvent::Done(mut completion) => {
                started.observer.finished(&completion);
                if let FinishReason::Error(message) = &completion.finish_reason {
                    return Err(crate::core::generation_failed(message));
                }
                completion.timings.load =
                    completion.timings.load.max(started.lease.load_duration());
                return Ok(Collected { text, completion });
            }
        }
    }
    Err(CoreError::internal(
        "the model stopped before finishing the request",
    ))
}

/// Turns core events into one API's wire frames. Pure: unit-tested without a server.
pub trait StreamTranslator: Send + 'static {
    /// Frames sent before the first event.
    fn start(&mut self) -> Vec<Bytes>;
    /// Frames for one event; `Done` produces the closing frames.
    fn event(&mut self, event: StreamEvent) -> Vec<Bytes>;
    /// The model went away without a `Done`.
    fn abandoned(&mut self) -> Vec<Bytes> {
        self.event(StreamEvent::Done(Completion {
            finish_reason: FinishReason::Error(
                "the model stopped before finishing the request".into(),
            ),
            ..Completion::default()
        }))
    }
}

struct StreamState<T> {
    started: Option<Started>,
    translator: T,
    pending: VecDeque<Bytes>,
}

/// The response body of a streaming request. Dropping it (the client disconnected) drops the
/// generation, which cancels the request at the model's next step, and then the lease.
pub fn event_stream<T: StreamTranslator>(
    started: Started,
    mut translator: T,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let pending: VecDeque<Bytes> = translator.start().into();
    let state = StreamState { started: Some(started), translator, pending };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(frame) = state.pending.pop_front() {
                return Some((Ok(frame), state));
            }
            let started = state.started.as_mut()?;
            let frames = match started.generation.events.recv().await {
                Some(StreamEvent::Done(mut completion)) => {
                    started.observer.finished(&completion);
                    completion.timings.load =
                        completion.timings.load.max(started.lease.load_duration());
                    // Release the model before the last frames go out.
                    state.started = None;
                    state.translator.event(StreamEvent::Done(completion))
                }
                Some(event) => {
                    started.observer.token();
                    state.translator.event(event)
                }
                None => {
                    state.started = None;
                    state.translator.abandoned()
                }
            };
            state.pending.extend(frames);
        }
    })
}

/// One server-sent event, with an optional event name.
pub fn sse_frame(event: Option<&str>, data: &serde_json::Value) -> Bytes {
    match event {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

/// A streaming response with the headers SSE clients and proxies expect.
pub fn sse_response<S>(body: S) -> HttpResponse
where
    S: Stream<Item = Result<Bytes, Infallible>> + 'static,
{
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// Seconds since the epoch, for `created` fields.
pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A random hex id suffix (`chatcmpl-…`, `msg_…`).
pub fn random_id(length: usize) -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..length)
        .map(|_| char::from(b"0123456789abcdef"[rng.gen_range(0..16)]))
        .collect()
}

/// Nanoseconds, as Ollama reports durations.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Checks a sampling number is finite and in range, naming the parameter otherwise.
pub fn check_range(
    name: &str,
    value: Option<f64>,
    low: f64,
    high: f64,
) -> Result<Option<f32>, CoreError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= low && v <= high => Ok(Some(v as f32)),
        Some(v) => Err(CoreError::invalid(format!(
            "{name} is {v}; it must be between {low} and {high}"
        ))
        .with_param(name)),
    }
}

/// Most stop strings a request may carry, and the longest one; the sampler rescans held text
/// against each, so both are bounded.
pub const MAX_STOP_SEQUENCES: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

pub fn check_stops(name: &str, stops: Vec<String>) -> Result<Vec<String>, CoreError> {
    if stops.len() > MAX_STOP_SEQUENCES {
        return Err(CoreError::invalid(format!(
            "{name} has {} strings; at most {MAX_STOP_SEQUENCES}",
            stops.len()
        ))
        .with_param(name));
    }
    if stops.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(CoreError::invalid(format!(
            "a {name} string is longer than {MAX_STOP_BYTES} bytes"
        ))
        .with_param(name));
    }
    Ok(stops.into_iter().filter(|s| !s.is_empty()).collect())
}

/// `llamay_context` / `llamay_context_commit` as every chat route reads them (issue 11).
pub fn context_request(
    id: Option<String>,
    commit: bool,
) -> Result<Option<crate::core::ContextRequest>, CoreError> {
    match id {
        Some(id) if id.trim().is_empty() => Err(CoreError::invalid(
            "llamay_context is empty; send a context id (ctx_...) or leave it out",
        )
        .with_param("llamay_context")),
        Some(id) => Ok(Some(crate::core::ContextRequest::Named { id, commit })),
        None if commit => Err(CoreError::invalid(
            "llamay_context_commit needs llamay_context: the id of the context to append to",
        )
        .with_param("llamay_context_commit")),
        None => Ok(None),
    }
}
