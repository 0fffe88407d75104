//! `GET /metrics`: the daemon's counters in the Prometheus text exposition format (0.0.4), kept
//! in and written by the official `prometheus-client` crate.
//!
//! What it owns: [`Metrics`] (kept in [`AppState`], lives as long as the daemon), the typed
//! counter and histogram families the daemon books into, registered once; the
//! [`count_requests`] middleware that books every HTTP request under its *route pattern*
//! (`/v1/models/{name:.*}`, never the raw path, so label values stay bounded; unmatched paths
//! share the label `unmatched`); and [`GenerationObserver`], which a running generation carries
//! to book its tokens, time to first token, finish reason and constraint mask counters.
//! What is read rather than counted here (the supervisor's gauges and load/eviction counters,
//! from one status of the models per scrape, the service's `model_status`; the compile cache
//! and pool; uptime; resident memory) is a [`Collector`] built for each scrape,
//! [`ScrapeReadings`].
//!
//! Names follow Prometheus conventions: `llamay_` prefix, `_total` counters (the encoder adds
//! that suffix to a counter's name), `_seconds` and `_bytes` units. A family with no series yet
//! is left out of the exposition. Costs: a read lock and an atomic add per counted event (a
//! write lock the first time a label set is seen); a scrape writes a few kilobytes.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web::{self, Bytes};
use actix_web::HttpResponse;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text::{encode, CONTENT_TYPE};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::{Metric, Registry};

use super::AppState;
use crate::service::models::{DeviceStatus, SupervisorStatus};
use crate::core::{Completion, FinishReason};
use crate::service::compile_pool::CompilePoolStats;
use crate::service::constraint::ConstraintCacheStats;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelFinish {
    model: String,
    finish_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;
type SecondsCounter = Counter<f64, AtomicU64>;

/// The matcher counters of one generation (see `actors::model`).
#[derive(Debug, Clone, Copy, Default)]
struct MaskTotals {
    steps: u64,
    cached_steps: u64,
    masks_computed: u64,
    mask_time_ns: u64,
    overflows: u64,
}

/// Mask counters by constraint kind, summed over the generations that used it.
#[derive(Debug, Clone, Default)]
struct MaskFamilies {
    steps: Family<KindLabel, Counter>,
    cached_steps: Family<KindLabel, Counter>,
    masks_computed: Family<KindLabel, Counter>,
    seconds: Family<KindLabel, SecondsCounter>,
    overflows: Family<KindLabel, Counter>,
}

/// Everything `/metrics` counts that the supervisor does not. Shared by all HTTP workers.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    durations: Histograms<RouteLabel>,
    prompt_tokens: Family<ModelLabel, Counter>,
    generated_tokens: Family<ModelLabel, Counter>,
    /// Generations whose constraint closed its document early within the token budget.
    budget_closings: Family<ModelLabel, Counter>,
    generations: Family<ModelFinish, Counter>,
    time_to_first_token: Histograms<ModelLabel>,
    masks: MaskFamilies,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `metric` registered under `name` and `help` (without its last full stop, which the
/// registry adds), and handed back to be counted into.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let requests = registered(r, "llamay_http_requests", "HTTP requests answered, by route pattern and status", Family::default());
        let durations = registered(
            r,
            "llamay_http_request_duration_seconds",
            "Time from a request's arrival to its response's last byte (or the client leaving), by route pattern",
            Family::new_with_constructor((|| Histogram::new(DURATION_BUCKETS)) as fn() -> Histogram),
        );
        let prompt_tokens = registered(r, "llamay_prompt_tokens", "Prompt tokens evaluated, by model", Family::default());
        let generated_tokens = registered(r, "llamay_generated_tokens", "Tokens generated, by model", Family::default());
        let budget_closings = registered(
            r,
            "llamay_budget_closings",
            "Generations whose constraint closed its document early to end valid within the token budget, by model",
            Family::default(),
        );
        let generations = registered(
            r,
            "llamay_generations",
            "Generations ended, by model and finish reason (cancelled: the client left first)",
            Family::default(),
        );
        let time_to_first_token = registered(
            r,
            "llamay_time_to_first_token_seconds",
            "Time from a generation's start (constraint compile, model load and queue included) to its first token, by model",
            Family::new_with_constructor((|| Histogram::new(TTFT_BUCKETS)) as fn() -> Histogram),
        );
        let masks = MaskFamilies {
            steps: registered(r, "llamay_constraint_mask_steps", "Constrained token decisions, by constraint kind", Family::default()),
            cached_steps: registered(
                r,
                "llamay_constraint_mask_cache_hits",
                "Constrained token decisions answered without computing a new mask (fast path or mask cache)",
                Family::default(),
            ),
            masks_computed: registered(
                r,
                "llamay_constraint_masks_computed",
                "Token masks computed by walking the vocabulary trie",
                Family::default(),
            ),
            seconds: registered(
                r,
                "llamay_constraint_mask_seconds",
                "Time spent in the constraint matcher (checks, masks, commits)",
                Family::default(),
            ),
            overflows: registered(
                r,
                "llamay_constraint_overflows",
                "Automaton transitions treated as dead because they passed a limit (stack depth, ambiguity)",
                Family::default(),
            ),
        };
        Metrics {
            registry,
            requests,
            durations,
            prompt_tokens,
            generated_tokens,
            budget_closings,
            generations,
            time_to_first_token,
            masks,
        }
    }

    /// Books one answered request (its status is known once the head is ready).
    pub fn count_request(&self, route: &str, status: u16) {
        self.requests.get_or_create(&RouteStatus { route: route.to_string(), status: status.to_string() }).inc();
    }

    /// Books how long a request took, from arrival to its body's last byte (or the client leaving).
    pub fn observe_duration(&self, route: &str, took: Duration) {
        self.durations.get_or_create(&RouteLabel { route: route.to_string() }).observe(took.as_secs_f64());
    }

    /// Starts observing one generation of `model`, timed from now.
    pub fn observe_generation(self: &Arc<Self>, model: &str, started: Instant) -> GenerationObserver {
        GenerationObserver {
            metrics: self.clone(),
            model: model.to_string(),
            started,
            first_token: None,
            finished: false,
        }
    }

    fn book_generation(&self, model: &str, reason: &'static str, ttft: Option<Duration>, completion: Option<&Completion>) {
        self.generations.get_or_create(&ModelFinish { model: model.to_string(), finish_reason: reason }).inc();
        let model = ModelLabel { model: model.to_string() };
        if let Some(ttft) = ttft {
            self.time_to_first_token.get_or_create(&model).observe(ttft.as_secs_f64());
        }
        let Some(completion) = completion else { return };
        self.prompt_tokens.get_or_create(&model).inc_by(u64::from(completion.usage.prompt_tokens));
        self.generated_tokens.get_or_create(&model).inc_by(u64::from(completion.usage.completion_tokens));
        if completion.closed_on_budget {
            self.budget_closings.get_or_create(&model).inc();
        }
        if let Some((kind, stats)) = mask_stats(completion) {
            let kind = KindLabel { kind };
            self.masks.steps.get_or_create(&kind).inc_by(stats.steps);
            self.masks.cached_steps.get_or_create(&kind).inc_by(stats.cached_steps);
            self.masks.masks_computed.get_or_create(&kind).inc_by(stats.masks_computed);
            self.masks.seconds.get_or_create(&kind).inc_by(stats.mask_time_ns as f64 / 1e9);
            self.masks.overflows.get_or_create(&kind).inc_by(stats.overflows);
        }
    }

    /// Share of each constraint kind's token decisions that needed no new mask.
    fn mask_hit_ratios(&self) -> Vec<(&'static str, f64)> {
        CONSTRAINT_KINDS
            .iter()
            .chain(&["other"])
            .filter_map(|kind| {
                let label = KindLabel { kind };
                let steps = self.masks.steps.get(&label)?.get();
                let cached = self.masks.cached_steps.get(&label).map_or(0, |c| c.get());
                (steps > 0).then(|| (*kind, cached as f64 / steps as f64))
            })
            .collect()
    }

    /// The exposition text: these counters, then what `state` and `status` read now.
    pub fn render(&self, status: Option<&SupervisorStatus>, state: &AppState) -> Result<String, fmt::Error> {
        let readings = ScrapeReadings {
            mask_hit_ratios: self.mask_hit_ratios(),
            compiled: state.generation.constraint_stats(),
            pool: state.generation.compile_pool_stats(),
            status: status.cloned(),
            uptime: state.started_at.elapsed().as_secs_f64(),
            resident_memory: resident_memory_bytes(),
        };
        let mut scrape = Registry::default();
        scrape.register_collector(Box::new(readings));
        let mut out = String::with_capacity(8 * 1024);
        encode(&mut out, &self.registry)?;
        encode(&mut out, &scrape)?;
        Ok(out)
    }
}

/// What one scrape reads rather than counts, written after [`Metrics`]' own families.
#[derive(Debug)]
struct ScrapeReadings {
    mask_hit_ratios: Vec<(&'static str, f64)>,
    compiled: ConstraintCacheStats,
    pool: CompilePoolStats,
    /// `None` while the supervisor is stopping: its families are left out.
    status: Option<SupervisorStatus>,
    uptime: f64,
    resident_memory: Option<u64>,
}

/// One family of values read at scrape time: `series` are its label sets with their values.
/// `help` is without its last full stop, as [`registered`] takes it.
fn read_family<L: EncodeLabelSet, M: EncodeMetric + TypedMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, &format!("{help}."), None, M::TYPE)?;
    for (labels, value) in series {
        value.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family of one unlabelled value read at scrape time.
fn read_value<M: EncodeMetric + TypedMetric>(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: M) -> fmt::Result {
    value.encode(encoder.encode_descriptor(name, &format!("{help}."), None, M::TYPE)?)
}

impl Collector for ScrapeReadings {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = &mut encoder;
        read_family(
            e,
            "llamay_constraint_mask_cache_hit_ratio",
            "Share of constrained token decisions that needed no new mask, since start",
            self.mask_hit_ratios.iter().map(|(kind, ratio)| ([("kind", *kind)], ConstGauge::new(*ratio))),
        )?;
        let compiled = &self.compiled;
        read_value(
            e,
            "llamay_constraint_compile_cache_hits",
            "Schemas, grammars and tool lists found compiled in the cache",
            ConstCounter::new(compiled.hits),
        )?;
        read_value(
            e,
            "llamay_constraint_compile_cache_misses",
            "Schemas, grammars and tool lists compiled (cache misses)",
            ConstCounter::new(compiled.misses),
        )?;
        read_value(e, "llamay_constraint_compile_cache_entries", "Compiled constraints kept for reuse", ConstGauge::new(compiled.entries))?;
        let pool = &self.pool;
        read_value(e, "llamay_compile_running", "Schema and grammar compiles running on the compile pool", ConstGauge::new(pool.running))?;
        read_value(e, "llamay_compile_waiting", "Compiles waiting for a compile thread", ConstGauge::new(pool.waiting))?;
        read_value(
            e,
            "llamay_compile_refused",
            "Compiles refused with 503 because compile_queue were already waiting",
            ConstCounter::new(pool.refused),
        )?;
        if let Some(status) = &self.status {
            encode_supervisor(e, status)?;
        }
        read_value(e, "llamay_uptime_seconds", "Seconds since the daemon started serving", ConstGauge::new(self.uptime))?;
        if let Some(bytes) = self.resident_memory {
            read_value(e, "process_resident_memory_bytes", "Resident memory of the daemon", ConstGauge::new(bytes))?;
        }
        Ok(())
    }
}

fn model_label(name: &str) -> [(&'static str, &str); 1] {
    [("model", name)]
}

fn encode_supervisor(e: &mut DescriptorEncoder, status: &SupervisorStatus) -> fmt::Result {
    let models = &status.models;
    read_value(
        e,
        "llamay_queue_depth",
        "Requests waiting: for a model to load, or for a free sequence of a loaded one",
        ConstGauge::new(status.queue_depth),
    )?;
    read_family(
        e,
        "llamay_model_queue_depth",
        "Requests waiting for a loaded model, by model",
        models.iter().map(|m| (model_label(&m.info.name), ConstGauge::new(m.queue_depth))),
    )?;
    read_value(
        e,
        "llamay_queue_capacity",
        "Requests that may wait at once (for a load, and for each loaded model) before 503s",
        ConstGauge::new(status.max_queue),
    )?;
    read_value(e, "llamay_models_loaded", "Models loaded now", ConstGauge::new(models.len()))?;
    read_value(e, "llamay_models_max_loaded", "Models that may be loaded at once", ConstGauge::new(status.max_loaded))?;
    read_value(e, "llamay_model_loading", "1 while a model is loading", ConstGauge::new(u32::from(status.loading.is_some())))?;
    read_family(
        e,
        "llamay_sequences_in_use",
        "Sequences decoding now, by loaded model",
        models.iter().map(|m| (model_label(&m.info.name), ConstGauge::new(m.sequences_in_use))),
    )?;
    read_family(
        e,
        "llamay_sequences_capacity",
        "Sequences a loaded model decodes together (-parallel)",
        models.iter().map(|m| (model_label(&m.info.name), ConstGauge::new(m.info.parallel))),
    )?;
    read_family(
        e,
        "llamay_draft_tokens",
        "Tokens proposed as drafts with a sampled token, by model and source (forced by the grammar, copied from the prompt)",
        models.iter().flat_map(|model| {
            let drafts = &model.totals.drafts;
            [("forced", drafts.forced), ("copied", drafts.copied)]
                .map(|(source, count)| ([("model", model.info.name.as_str()), ("source", source)], ConstCounter::new(count)))
        }),
    )?;
    read_family(
        e,
        "llamay_draft_tokens_accepted",
        "Draft tokens the model's own choice confirmed, by model: each is a decode step saved",
        models.iter().map(|m| (model_label(&m.info.name), ConstCounter::new(m.totals.drafts.accepted))),
    )?;
    read_family(
        e,
        "llamay_requests_in_flight",
        "Requests holding a loaded model, by model",
        models.iter().map(|m| (model_label(&m.info.name), ConstGauge::new(m.requests_in_flight))),
    )?;
    read_family(
        e,
        "llamay_decode_step_seconds",
        "Decode-step wall time of a loaded model since it loaded, by phase (steps: the whole)",
        models.iter().flat_map(|model| {
            model.totals.step_split.phases().into_iter().map(|(phase, spent)| {
                ([("model", model.info.name.as_str()), ("phase", phase)], ConstCounter::new(spent.as_secs_f64()))
            })
        }),
    )?;
    encode_devices(e, status)?;
    let lifetime = &status.lifetime;
    read_value(e, "llamay_model_loads", "Models loaded", ConstCounter::new(lifetime.loads))?;
    read_value(e, "llamay_model_load_failures", "Model loads that failed", ConstCounter::new(lifetime.load_failures))?;
    read_value(e, "llamay_model_evictions", "Idle models unloaded to make room for another", ConstCounter::new(lifetime.evictions))?;
    read_family(
        e,
        "llamay_model_unloads",
        "Models unloaded, by reason",
        [
            ("evicted", lifetime.evictions),
            ("expired", lifetime.expirations),
            ("keep_alive_0", lifetime.immediate_unloads),
            ("stopping", lifetime.shutdown_unloads),
            ("deleted", lifetime.deletions),
        ]
        .map(|(reason, count)| ([("reason", reason)], ConstCounter::new(count))),
    )
}

/// Each GPU's memory and what loaded models hold on it and on the host.
fn encode_devices(e: &mut DescriptorEncoder, status: &SupervisorStatus) -> fmt::Result {
    type Reading = fn(&DeviceStatus) -> u64;
    let devices: [(&str, &str, Reading); 3] = [
        ("llamay_device_memory_total_bytes", "Memory of each GPU", |d| d.device.total),
        ("llamay_device_memory_free_bytes", "Free memory of each GPU, as its driver reports it", |d| d.device.free),
        ("llamay_device_memory_models_bytes", "GPU memory the loaded models hold, by their estimates", |d| d.used_by_models),
    ];
    for (name, help, reading) in devices {
        let series = status.devices.iter().map(|device| {
            let labels = [("device", device.device.name.as_str()), ("backend", device.device.backend.as_str())];
            (labels, ConstGauge::new(reading(device)))
        });
        read_family(e, name, help, series)?;
    }
    let placed: Vec<_> = status.models.iter().filter_map(|m| Some((m.info.name.as_str(), m.memory.as_ref()?))).collect();
    read_family(
        e,
        "llamay_model_memory_bytes",
        "Memory a loaded model holds by its estimate, on the host and on its GPU",
        placed.iter().flat_map(|(model, memory)| {
            [("host", memory.host_bytes), ("device", memory.device_bytes())]
                .map(|(place, bytes)| ([("model", *model), ("where", place)], ConstGauge::new(bytes)))
        }),
    )?;
    read_family(
        e,
        "llamay_model_gpu_layers",
        "Layers of a loaded model on a GPU",
        placed.iter().map(|(model, memory)| {
            let (device, layers) = memory.device.as_ref().map_or(("", 0), |share| (share.name.as_str(), share.layers));
            ([("model", *model), ("device", device)], ConstGauge::new(layers))
        }),
    )
}

/// The matcher counters a completion carries (see `actors::model`), with its kind.
fn mask_stats(completion: &Completion) -> Option<(&'static str, MaskTotals)> {
    let report = completion.constraint_stats.as_ref()?;
    let kind = CONSTRAINT_KINDS.iter().copied().find(|k| *k == report.label).unwrap_or("other");
    let numbers = report.stats.as_ref()?;
    Some((
        kind,
        MaskTotals {
            steps: numbers.steps,
            cached_steps: numbers.cached_steps,
            masks_computed: numbers.masks_computed,
            mask_time_ns: numbers.mask_time_ns,
            overflows: numbers.overflows,
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
    match state.metrics.render(status.as_ref(), &state) {
        Ok(text) => HttpResponse::Ok().content_type(CONTENT_TYPE).body(text),
        // Only a failing writer fails the encoder, and a String does not fail.
        Err(_) => HttpResponse::InternalServerError().body("the metrics exposition could not be written"),
    }
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
    use crate::core::ConstraintReport;
    use crate::grammar::MaskStats;

    #[test]
    fn an_observer_dropped_unfinished_counts_a_cancelled_generation() {
        let metrics = Arc::new(Metrics::new());
        drop(metrics.observe_generation("m", Instant::now()));
        let mut finished = metrics.observe_generation("m", Instant::now());
        finished.token();
        finished.finished(&Completion::default());
        drop(finished);
        let generations = |reason| {
            let labels = ModelFinish { model: "m".into(), finish_reason: reason };
            metrics.generations.get(&labels).map(|count| count.get())
        };
        assert_eq!(generations("cancelled"), Some(1));
        assert_eq!(generations("stop"), Some(1));
    }

    #[test]
    fn families_keep_their_names_help_labels_and_buckets() {
        let metrics = Arc::new(Metrics::new());
        metrics.count_request("/v1/models/{name:.*}", 404);
        for seconds in [0.02, 0.3, 1000.0] {
            metrics.observe_duration("a\"b", Duration::from_secs_f64(seconds));
        }
        let stats = MaskStats { steps: 4, cached_steps: 3, mask_time_ns: 1_500_000_000, ..MaskStats::default() };
        let report = ConstraintReport { label: "json".into(), summary: String::new(), stats: Some(stats), lexicon_stats: None };
        let completion = Completion { constraint_stats: Some(report), ..Completion::default() };
        metrics.observe_generation("m", Instant::now()).finished(&completion);
        let mut out = String::new();
        encode(&mut out, &metrics.registry).unwrap();
        for line in [
            "# HELP llamay_http_requests_total HTTP requests answered, by route pattern and status.",
            "# TYPE llamay_http_requests_total counter",
            "llamay_http_requests_total{route=\"/v1/models/{name:.*}\",status=\"404\"} 1",
            "# TYPE llamay_http_request_duration_seconds histogram",
            "llamay_http_request_duration_seconds_bucket{route=\"a\\\"b\",le=\"0.01\"} 0",
            "llamay_http_request_duration_seconds_bucket{route=\"a\\\"b\",le=\"0.025\"} 1",
            "llamay_http_request_duration_seconds_bucket{route=\"a\\\"b\",le=\"1\"} 2",
            "llamay_http_request_duration_seconds_bucket{route=\"a\\\"b\",le=\"120\"} 2",
            "llamay_http_request_duration_seconds_bucket{route=\"a\\\"b\",le=\"+Inf\"} 3",
            "llamay_http_request_duration_seconds_count{route=\"a\\\"b\"} 3",
            "llamay_generations_total{model=\"m\",finish_reason=\"stop\"} 1",
            "llamay_constraint_mask_steps_total{kind=\"json\"} 4",
            "llamay_constraint_mask_seconds_total{kind=\"json\"} 1.5",
        ] {
            assert!(out.lines().any(|written| written == line), "{line} is missing from:\n{out}");
        }
        // Nothing was generated, so no generation had a first token: the family is left out.
        assert!(!out.contains("llamay_time_to_first_token_seconds"), "{out}");
        assert_eq!(metrics.mask_hit_ratios(), [("json", 0.75)]);
    }
}
