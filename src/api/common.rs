//! The response side every API route shares: the HTTP status and `Retry-After` of an error,
//! streaming a started generation through a shape's translator (starting one is the
//! generation service's, `crate::service`), SSE framing, ids and timestamps. Reading a body is
//! `body.rs`; checking shared fields, `fields.rs`.
//!
//! Key items: [`error_response`], [`event_stream`], [`StreamTranslator`], [`sse_response`].
//! Costs: a frame per event; nothing is buffered beyond the frames of one event.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, HttpResponseBuilder};
use futures_util::Stream;

use crate::core::{Completion, FinishReason, StreamEvent, TokenLogprob};
use crate::error::CoreError;
use crate::service::Started;

/// The status of an error and its `Retry-After` header where the code invites a retry.
pub fn error_response(error: &CoreError) -> HttpResponseBuilder {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = HttpResponse::build(status);
    if let Some(seconds) = error.code.retry_after_seconds() {
        builder.insert_header((header::RETRY_AFTER, HeaderValue::from(seconds)));
    }
    builder
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
                    started.tally.finished(&completion);
                    completion.timings.load =
                        completion.timings.load.max(started.lease.load_duration());
                    // Release the model before the last frames go out.
                    state.started = None;
                    state.translator.event(StreamEvent::Done(completion))
                }
                Some(event) => {
                    if matches!(event, StreamEvent::Delta { .. }) {
                        started.tally.token();
                    }
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

/// Tokens' log-probabilities as OpenAI's chat and Ollama both list them: `[{"token", "logprob",
/// "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]`.
pub fn logprob_entries(tokens: &[TokenLogprob]) -> Vec<serde_json::Value> {
    tokens
        .iter()
        .map(|scored| {
            let top: Vec<serde_json::Value> = scored
                .top
                .iter()
                .map(|alt| serde_json::json!({"token": alt.text(), "logprob": alt.logprob, "bytes": alt.bytes}))
                .collect();
            serde_json::json!({
                "token": scored.text(),
                "logprob": scored.logprob.unwrap_or(f32::NEG_INFINITY),
                "bytes": scored.bytes,
                "top_logprobs": top,
            })
        })
        .collect()
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
