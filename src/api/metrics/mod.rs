//! `GET /metrics`: the daemon's counters in the Prometheus text exposition format (0.0.4).
//!
//! What it owns: [`Metrics`] (kept in [`AppState`], lives as long as the daemon), the
//! [`count_requests`] middleware that books every HTTP request under its *route pattern*
//! (`/v1/models/{name:.*}`, never the raw path, so label values stay bounded; unmatched paths
//! share the label `unmatched`), and [`GenerationObserver`], which a running generation carries
//! to book its tokens, time to first token, finish reason and constraint mask counters.
//! Gauges (queue depth, loaded models, sequences in use) and the supervisor's load/eviction
//! counters are read from one status of the models (the service's `model_status`) per scrape.
//!
//! Names follow Prometheus conventions: `llamay_` prefix, `_total` counters, `_seconds` and
//! `_bytes` units. Costs: one uncontended mutex per request and per generation event that
//! counts; a scrape renders a few kilobytes.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web::{self, Bytes};
use actix_web::HttpResponse;

mod text_format;

use self::text_format::{family, render_histogram, sample, Histogram};
use super::AppState;
use crate::service::models::{DeviceStatus, SupervisorStatus};
use crate::core::{Completion, FinishReason};

/// The route label of a request no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Buckets of `llamay_http_request_duration_seconds`: a health check to a long generation.
const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];
/// Buckets of `llamay_time_to_first_token_seconds`: a warm prompt to a cold load.
const TTFT_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Constraint kinds as the model worker labels them; anything else is booked as `other`.
const CONSTRAINT_KINDS: [&str; 4] = ["json", "grammar", "tool", "lexicon"];

/// Mask counters of one constraint kind, summed over the generations that used it.
#[derive(Debug, Clone, Default)]
struct MaskTotals {
    steps: u64,
    cached_steps: u64,
    masks_computed: u64,
    mask_time_ns: u64,
    overflows: u64,
}

#[derive(Debug, Default)]
struct Counters {
    /// (route pattern, status) -> requests.
    requests: BTreeMap<(String, u16), u64>,
    durations: BTreeMap<String, Histogram>,
    prompt_tokens: BTreeMap<String, u64>,
    generated_tokens: BTreeMap<String, u64>,
    /// Generations whose constraint closed its document early within the token budget.
    budget_closings: BTreeMap<String, u64>,
    /// (model, finish reason) -> generations.
    generations: BTreeMap<(String, &'static str), u64>,
    time_to_first_token: BTreeMap<String, Histogram>,
    masks: BTreeMap<&'static str, MaskTotals>,
}

/// Everything `/metrics` counts that the supervisor does not. Shared by all HTTP workers.
#[derive(Debug)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            counters: Mutex::new(Counters::default()),
        }
    }

    fn with(&self, update: impl FnOnce(&mut Counters)) {
        // A poisoned lock only means a panic elsewhere mid-update; counting goes on.
        let mut counters = self
            .counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        update(&mut counters);
    }

    /// Books one answered request (its status is known once the head is ready).
    pub fn count_request(&self, route: &str, status: u16) {
        self.with(|c| *c.requests.entry((route.to_string(), status)).or_default() += 1);
    }

    /// Books how long a request took, from arrival to its body's last byte (or the client leaving).
    pub fn observe_duration(&self, route: &str, took: Duration) {
        self.with(|c| {
            c.durations
                .entry(route.to_string())
                .or_insert_with(|| Histogram::new(&DURATION_BUCKETS))
                .observe(took.as_secs_f64())
        });
    }

    /// Starts observing one generation of `model`, timed from now.
    pub fn observe_generation(
        self: &Arc<Self>,
        model: &str,
        started: Instant,
    ) -> GenerationObserver {
        GenerationObserver {
            metrics: self.clone(),
            model: model.to_string(),
            started,
            first_token: None,
            finished: false,
        }
    }

    fn book_generation(
        &self,
        model: &str,
        reason: &'static str,
        ttft: Option<Duration>,
        completion: Option<&Completion>,
    ) {
        self.with(|c| {
            *c.generations
                .entry((model.to_string(), reason))
                .or_default() += 1;
            if let Some(ttft) = ttft {
                c.time_to_first_token
                    .entry(model.to_string())
                    .or_insert_with(|| Histogram::new(&TTFT_BUCKETS))
                    .observe(ttft.as_secs_f64());
            }
            let Some(completion) = completion else { return };
            *c.prompt_tokens.entry(model.to_string()).or_default() +=
                u64::from(completion.usage.prompt_tokens);
            *c.generated_tokens.entry(model.to_string()).or_default() +=
                u64::from(completion.usage.completion_tokens);
            if completion.closed_on_budget {
                *c.budget_closings.entry(model.to_string()).or_default() += 1;
            }
            if let Some((kind, stats)) = mask_stats(completion) {
                let totals = c.masks.entry(kind).or_default();
                totals.steps += stats.steps;
                totals.cached_steps += stats.cached_steps;
                totals.masks_computed += stats.masks_computed;
                totals.mask_time_ns += stats.mask_time_ns;
                totals.overflows += stats.overflows;
            }
        });
    }

    /// The exposition text: these counters plus the gauges and counters of `status`.
    pub fn render(&self, status: Option<&SupervisorStatus>, state: &AppState) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let counters = self
            .counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());

        family(
            &mut out,
            "llamay_http_requests_total",
            "counter",
            "HTTP requests answered, by route pattern and status.",
        );
        for ((route, status), count) in &counters.requests {
            sample(
                &mut out,
                "llamay_http_requests_total",
                &[("route", route), ("status", &status.to_string())],
                *count as f64,
            );
        }
        family(
            &mut out,
            "llamay_http_request_duration_seconds",
            "histogram",
            "Time from a request's arrival to its response's last byte (or the client leaving), by route pattern.",
        );
        for (route, histogram) in &counters.durations {
            render_histogram(
                &mut out,
                "llamay_http_request_duration_seconds",
                &[("route", route)],
                histogram,
            );
        }

        family(
            &mut out,
            "llamay_prompt_tokens_total",
            "counter",
            "Prompt tokens evaluated, by model.",
        );
        for (model, count) in &counters.prompt_tokens {
            sample(
                &mut out,
                "llamay_prompt_tokens_total",
                &[("model", model)],
                *count as f64,
            );
        }
        family(
            &mut out,
            "llamay_generated_tokens_total",
            "counter",
            "Tokens generated, by model.",
        );
        for (model, count) in &counters.generated_tokens {
            sample(
                &mut out,
                "llamay_generated_tokens_total",
                &[("model", model)],
                *count as f64,
            );
        }
        family(
            &mut out,
            "llamay_budget_closings_total",
            "counter",
            "Generations whose constraint closed its document early to end valid within the token budget, by model.",
        );
        for (model, count) in &counters.budget_closings {
            sample(&mut out, "llamay_budget_closings_total", &[("model", model)], *count as f64);
        }
        family(
            &mut out,
            "llamay_generations_total",
            "counter",
            "Generations ended, by model and finish reason (cancelled: the client left first).",
        );
        for ((model, reason), count) in &counters.generations {
            sample(
                &mut out,
                "llamay_generations_total",
                &[("model", model), ("finish_reason", reason)],
                *count as f64,
            );
        }
        family(
            &mut out,
            "llamay_time_to_first_token_seconds",
            "histogram",
            "Time from a generation's start (constraint compile, model load and queue included) to its first token, by model.",
        );
        for (model, histogram) in &counters.time_to_first_token {
            render_histogram(
                &mut out,
                "llamay_time_to_first_token_seconds",
                &[("model", model)],
                histogram,
            );
        }

        render_masks(&mut out, &counters.masks);
        drop(counters);

        let compiled = state.generation.constraint_stats();
        family(
            &mut out,
            "llamay_constraint_compile_cache_hits_total",
            "counter",
            "Schemas, grammars and tool lists found compiled in the cache.",
        );
        sample(
            &mut out,
            "llamay_constraint_compile_cache_hits_total",
            &[],
            compiled.hits as f64,
        );
        family(
            &mut out,
            "llamay_constraint_compile_cache_misses_total",
            "counter",
            "Schemas, grammars and tool lists compiled (cache misses).",
        );
        sample(
            &mut out,
            "llamay_constraint_compile_cache_misses_total",
            &[],
            compiled.misses as f64,
        );
        family(
            &mut out,
            "llamay_constraint_compile_cache_entries",
            "gauge",
            "Compiled constraints kept for reuse.",
        );
        sample(
            &mut out,
            "llamay_constraint_compile_cache_entries",
            &[],
            compiled.entries as f64,
        );

        let pool = state.generation.compile_pool_stats();
        let gauges = [
            ("llamay_compile_running", "gauge", "Schema and grammar compiles running on the compile pool.", pool.running as f64),
            ("llamay_compile_waiting", "gauge", "Compiles waiting for a compile thread.", pool.waiting as f64),
            (
                "llamay_compile_refused_total",
                "counter",
                "Compiles refused with 503 because compile_queue were already waiting.",
                pool.refused as f64,
            ),
        ];
        for (name, kind, help, value) in gauges {
            family(&mut out, name, kind, help);
            sample(&mut out, name, &[], value);
        }

        if let Some(status) = status {
            render_supervisor(&mut out, status);
        }
        family(
            &mut out,
            "llamay_uptime_seconds",
            "gauge",
            "Seconds since the daemon started serving.",
        );
        sample(
            &mut out,
            "llamay_uptime_seconds",
            &[],
            state.started_at.elapsed().as_secs_f64(),
        );
        if let Some(bytes) = resident_memory_bytes() {
            family(
                &mut out,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory of the daemon.",
            );
            sample(&mut out, "process_resident_memory_bytes", &[], bytes as f64);
        }
        out
    }
}

fn render_masks(out: &mut String, masks: &BTreeMap<&'static str, MaskTotals>) {
    type Field = fn(&MaskTotals) -> f64;
    let families: [(&str, &str, Field); 5] = [
        ("llamay_constraint_mask_steps_total", "Constrained token decisions, by constraint kind.", |t| t.steps as f64),
        (
            "llamay_constraint_mask_cache_hits_total",
            "Constrained token decisions answered without computing a new mask (fast path or mask cache).",
            |t| t.cached_steps as f64,
        ),
        ("llamay_constraint_masks_computed_total", "Token masks computed by walking the vocabulary trie.", |t| t.masks_computed as f64),
        ("llamay_constraint_mask_seconds_total", "Time spent in the constraint matcher (checks, masks, commits).", |t| {
            t.mask_time_ns as f64 / 1e9
        }),
        (
            "llamay_constraint_overflows_total",
            "Automaton transitions treated as dead because they passed a limit (stack depth, ambiguity).",
            |t| t.overflows as f64,
        ),
    ];
    for (name, help, field) in families {
        family(out, name, "counter", help);
        for (kind, totals) in masks {
            sample(out, name, &[("kind", kind)], field(totals));
        }
    }
    family(
        out,
        "llamay_constraint_mask_cache_hit_ratio",
        "gauge",
        "Share of constrained token decisions that needed no new mask, since start.",
    );
    for (kind, totals) in masks {
        if totals.steps > 0 {
            sample(
                out,
                "llamay_constraint_mask_cache_hit_ratio",
                &[("kind", kind)],
                totals.cached_steps as f64 / totals.steps as f64,
            );
        }
    }
}

fn render_supervisor(out: &mut String, status: &SupervisorStatus) {
    family(
        out,
        "llamay_queue_depth",
        "gauge",
        "Requests waiting: for a model to load, or for a free sequence of a loaded one.",
    );
    sample(out, "llamay_queue_depth", &[], status.queue_depth as f64);
    family(
        out,
        "llamay_model_queue_depth",
        "gauge",
        "Requests waiting for a loaded model, by model.",
    );
    for model in &status.models {
        sample(
            out,
            "llamay_model_queue_depth",
            &[("model", &model.info.name)],
            model.queue_depth as f64,
        );
    }
    family(
        out,
        "llamay_queue_capacity",
        "gauge",
        "Requests that may wait at once (for a load, and for each loaded model) before 503s.",
    );
    sample(out, "llamay_queue_capacity", &[], status.max_queue as f64);
    family(out, "llamay_models_loaded", "gauge", "Models loaded now.");
    sample(out, "llamay_models_loaded", &[], status.models.len() as f64);
    family(
        out,
        "llamay_models_max_loaded",
        "gauge",
        "Models that may be loaded at once.",
    );
    sample(
        out,
        "llamay_models_max_loaded",
        &[],
        status.max_loaded as f64,
    );
    family(
        out,
        "llamay_model_loading",
        "gauge",
        "1 while a model is loading.",
    );
    sample(
        out,
        "llamay_model_loading",
        &[],
        if status.loading.is_some() { 1.0 } else { 0.0 },
    );
    family(
        out,
        "llamay_sequences_in_use",
        "gauge",
        "Sequences decoding now, by loaded model.",
    );
    for model in &status.models {
        sample(
            out,
            "llamay_sequences_in_use",
            &[("model", &model.info.name)],
            model.sequences_in_use as f64,
        );
    }
    family(
        out,
        "llamay_sequences_capacity",
        "gauge",
        "Sequences a loaded model decodes together (-parallel).",
    );
    for model in &status.models {
        sample(
            out,
            "llamay_sequences_capacity",
            &[("model", &model.info.name)],
            f64::from(model.info.parallel),
        );
    }
    family(
        out,
        "llamay_draft_tokens_total",
        "counter",
        "Tokens proposed as drafts with a sampled token, by model and source (forced by the grammar, copied from the prompt).",
    );
    for model in &status.models {
        let drafts = &model.totals.drafts;
        for (source, count) in [("forced", drafts.forced), ("copied", drafts.copied)] {
            sample(out, "llamay_draft_tokens_total", &[("model", &model.info.name), ("source", source)], count as f64);
        }
    }
    family(
        out,
        "llamay_draft_tokens_accepted_total",
        "counter",
        "Draft tokens the model's own choice confirmed, by model: each is a decode step saved.",
    );
    for model in &status.models {
        sample(out, "llamay_draft_tokens_accepted_total", &[("model", &model.info.name)], model.totals.drafts.accepted as f64);
    }
    family(
        out,
        "llamay_requests_in_flight",
        "gauge",
        "Requests holding a loaded model, by model.",
    );
    for model in &status.models {
        sample(
            out,
            "llamay_requests_in_flight",
            &[("model", &model.info.name)],
            model.requests_in_flight as f64,
        );
    }
    family(
        out,
        "llamay_decode_step_seconds_total",
        "counter",
        "Decode-step wall time of a loaded model since it loaded, by phase (steps: the whole).",
    );
    for model in &status.models {
        for (phase, spent) in model.totals.step_split.phases() {
            sample(
                out,
                "llamay_decode_step_seconds_total",
                &[("model", &model.info.name), ("phase", phase)],
                spent.as_secs_f64(),
            );
        }
    }
    render_devices(out, status);
    let lifetime = &status.lifetime;
    family(out, "llamay_model_loads_total", "counter", "Models loaded.");
    sample(out, "llamay_model_loads_total", &[], lifetime.loads as f64);
    family(
        out,
        "llamay_model_load_failures_total",
        "counter",
        "Model loads that failed.",
    );
    sample(
        out,
        "llamay_model_load_failures_total",
        &[],
        lifetime.load_failures as f64,
    );
    family(
        out,
        "llamay_model_evictions_total",
        "counter",
        "Idle models unloaded to make room for another.",
    );
    sample(
        out,
        "llamay_model_evictions_total",
        &[],
        lifetime.evictions as f64,
    );
    family(
        out,
        "llamay_model_unloads_total",
        "counter",
        "Models unloaded, by reason.",
    );
    for (reason, count) in [
        ("evicted", lifetime.evictions),
        ("expired", lifetime.expirations),
        ("keep_alive_0", lifetime.immediate_unloads),
        ("stopping", lifetime.shutdown_unloads),
        ("deleted", lifetime.deletions),
    ] {
        sample(
            out,
            "llamay_model_unloads_total",
            &[("reason", reason)],
            count as f64,
        );
    }
}

/// Each GPU's memory and what loaded models hold on it and on the host.
fn render_devices(out: &mut String, status: &SupervisorStatus) {
    type Reading = fn(&DeviceStatus) -> u64;
    let devices: [(&str, &str, Reading); 3] = [
        ("llamay_device_memory_total_bytes", "Memory of each GPU.", |d| d.device.total),
        ("llamay_device_memory_free_bytes", "Free memory of each GPU, as its driver reports it.", |d| d.device.free),
        ("llamay_device_memory_models_bytes", "GPU memory the loaded models hold, by their estimates.", |d| d.used_by_models),
    ];
    for (name, help, reading) in devices {
        family(out, name, "gauge", help);
        for device in &status.devices {
            let labels = [("device", device.device.name.as_str()), ("backend", device.device.backend.as_str())];
            sample(out, name, &labels, reading(device) as f64);
        }
    }
    let placed: Vec<_> = status.models.iter().filter_map(|m| Some((m.info.name.as_str(), m.memory.as_ref()?))).collect();
    family(out, "llamay_model_memory_bytes", "gauge", "Memory a loaded model holds by its estimate, on the host and on its GPU.");
    for (model, memory) in &placed {
        sample(out, "llamay_model_memory_bytes", &[("model", model), ("where", "host")], memory.host_bytes as f64);
        sample(out, "llamay_model_memory_bytes", &[("model", model), ("where", "device")], memory.device_bytes() as f64);
    }
    family(out, "llamay_model_gpu_layers", "gauge", "Layers of a loaded model on a GPU.");
    for (model, memory) in &placed {
        let (device, layers) = memory.device.as_ref().map_or(("", 0), |share| (share.name.as_str(), share.layers));
        sample(out, "llamay_model_gpu_layers", &[("model", model), ("device", device)], f64::from(layers));
    }
}

/// The matcher counters a completion carries (see `actors::model`), with its kind.
fn mask_stats(completion: &Completion) -> Option<(&'static str, MaskTotals)> {
    let stats = completion.constraint_stats.as_ref()?;
    let label = stats.get("label").and_then(|l| l.as_str()).unwrap_or("");
    let kind = CONSTRAINT_KINDS
        .iter()
        .copied()
        .find(|k| *k == label)
        .unwrap_or("other");
    let numbers = stats.get("stats")?;
    let field = |name: &str| numbers.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    Some((
        kind,
        MaskTotals {
            steps: field("steps"),
            cached_steps: field("cached_steps"),
            masks_computed: field("masks_computed"),
            mask_time_ns: field("mask_time_ns"),
            overflows: field("overflows"),
        },
    ))
}

fn finish_label(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::StopSequence(_) => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error(_) => "error",
    }
}

/// What one generation reports to [`Metrics`]. Dropped before [`finished`](Self::finished)
/// (the client left, the stream was dropped), it books the generation as cancelled.
pub struct GenerationObserver {
    metrics: Arc<Metrics>,
    model: String,
    started: Instant,
    first_token: Option<Instant>,
    finished: bool,
}

impl GenerationObserver {
    /// Text arrived from the model.
    pub fn token(&mut self) {
        self.first_token.get_or_insert_with(Instant::now);
    }

    /// The generation ended with `completion`.
    pub fn finished(&mut self, completion: &Completion) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let now = Instant::now();
        // Held output (tool calls) reaches the API only at the end; the model's first token
        // came when its decoding began, `eval` before the end.
        let first_decoded = now.checked_sub(completion.timings.eval).unwrap_or(now);
        let first = self
            .first_token
            .map_or(first_decoded, |seen| seen.min(first_decoded));
        let ttft = (completion.usage.completion_tokens > 0)
            .then(|| first.saturating_duration_since(self.started));
        self.metrics.book_generation(
            &self.model,
            finish_label(&completion.finish_reason),
            ttft,
            Some(completion),
        );
    }
}

impl crate::service::GenerationBook for Metrics {
    fn open(self: Arc<Self>, model: &str, arrived: Instant) -> Box<dyn crate::service::GenerationTally> {
        Box::new(self.observe_generation(model, arrived))
    }
}

impl crate::service::GenerationTally for GenerationObserver {
    fn token(&mut self) {
        GenerationObserver::token(self);
    }

    fn finished(&mut self, completion: &Completion) {
        GenerationObserver::finished(self, completion);
    }
}

impl Drop for GenerationObserver {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics
                .book_generation(&self.model, "cancelled", None, None);
        }
    }
}

/// `GET /metrics`.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    // Without the supervisor (stopping) the daemon's own counters still answer.
    let status = state.generation.model_status().await.ok();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render(status.as_ref(), &state))
}

/// Middleware: books each request's route pattern and status when its head is ready, and its
/// duration when its body is dropped (sent, or abandoned by the client).
pub async fn count_requests(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<TimedBody>, actix_web::Error> {
    let started = Instant::now();
    let metrics = request
        .app_data::<web::Data<AppState>>()
        .map(|state| state.metrics.clone());
    let route = request
        .match_pattern()
        .unwrap_or_else(|| UNMATCHED_ROUTE.to_string());
    let result = next.call(request).await;
    let status = match &result {
        Ok(response) => response.status().as_u16(),
        Err(error) => error.as_response_error().status_code().as_u16(),
    };
    let guard = metrics.map(|metrics| {
        metrics.count_request(&route, status);
        DurationGuard {
            metrics,
            route,
            started,
        }
    });
    result.map(|response| {
        response.map_body(|_, body| TimedBody {
            inner: BoxBody::new(body),
            _guard: guard,
        })
    })
}

struct DurationGuard {
    metrics: Arc<Metrics>,
    route: String,
    started: Instant,
}

impl Drop for DurationGuard {
    fn drop(&mut self) {
        self.metrics
            .observe_duration(&self.route, self.started.elapsed());
    }
}

/// A response body that books its request's duration when dropped.
pub struct TimedBody {
    inner: BoxBody,
    _guard: Option<DurationGuard>,
}

impl MessageBody for TimedBody {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }
}

/// Resident set size from `/proc/self/statm` (Linux); `None` elsewhere.
fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observer_dropped_unfinished_counts_a_cancelled_generation() {
        let metrics = Arc::new(Metrics::new());
        drop(metrics.observe_generation("m", Instant::now()));
        let mut finished = metrics.observe_generation("m", Instant::now());
        finished.token();
        finished.finished(&Completion::default());
        drop(finished);
        let counters = metrics.counters.lock().unwrap();
        assert_eq!(
            counters.generations.get(&("m".to_string(), "cancelled")),
            Some(&1)
        );
        assert_eq!(
            counters.generations.get(&("m".to_string(), "stop")),
            Some(&1)
        );
    }
}
