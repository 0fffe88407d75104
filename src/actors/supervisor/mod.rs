//! The supervisor: which models are loaded. Loads on demand by name (through a [`ModelLoader`]),
//! at most `max_loaded` at once, one load at a time; keeps a refcount per model and starts its
//! idle timer only at refcount 0 (Ollama's `keep_alive`: 0 unloads now, negative never); when full,
//! evicts the idle model that expires soonest and never one with requests in flight; requests that
//! must wait sit in a bounded queue (full -> [`ErrorCode::Overloaded`], a 503 with `Retry-After`).
//! Loaded models are keyed by their normalised [`ModelName`], so every spelling of a model (`m`,
//! `M:LATEST`) shares one copy. A request for a model the loader says is not installed is a 404
//! before anything is evicted for it. A deleted model is retired ([`Retire`]): never granted
//! again, freed now if idle, else when its running requests end.
//!
//! Memory (issue 47): a load is planned before it starts from the loader's estimate and the
//! devices' room ([`super::memory`]): idle models on the device it needs are evicted first,
//! and a request asking other GPU layers (`num_gpu`) than the loaded copy has loads it again
//! once that copy is idle, as Ollama does.
//!
//! Key types: [`Supervisor`] (an actix actor), [`Acquire`] -> [`ModelLease`] (dropping the lease
//! releases the model), [`GetStatus`] -> [`SupervisorStatus`] for `/api/ps` and `/v1/stats`,
//! [`Retire`], [`Shutdown`]. Costs: O(loaded + queued) per event; both are small and bounded;
//! planning a load asks the devices for their free memory (driver calls).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use super::memory::{self, MemoryProbe, ModelMemory, Placed};
use super::messages::{LoadedModel, ModelLoader};
use crate::core::{KeepAlive, ModelInfo, ModelName, ModelTotals};
use crate::error::{CoreError, ErrorCode};

/// Supervisor settings, from the daemon's config.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    pub max_loaded: usize,
    pub default_keep_alive: KeepAlive,
    /// Requests that may wait for a model at once; more are refused with 503.
    pub max_queue: usize,
}

/// Ask for a model by name. Answers at once with a ticket that resolves when the model is loaded
/// and the request holds a lease on it; dropping the ticket leaves the queue. [`acquire`] does both.
#[derive(Message)]
#[rtype(result = "AcquireTicket")]
pub struct Acquire {
    pub model: String,
    /// This request's `keep_alive`; it becomes the model's keepalive, as in Ollama (`None`: the
    /// daemon's default).
    pub keep_alive: Option<KeepAlive>,
    /// Layers this request wants on a GPU (Ollama's `num_gpu`); `None`: whatever the loaded
    /// copy has, or the daemon's default for a new load.
    pub gpu_layers: Option<u32>,
}

/// The answer to [`Acquire`].
pub type AcquireTicket = oneshot::Receiver<Result<ModelLease, CoreError>>;

/// Waits for a lease on `model`. Dropping this future (the client went away) gives up its place
/// in the queue.
pub async fn acquire(
    supervisor: &Addr<Supervisor>,
    model: &str,
    keep_alive: Option<KeepAlive>,
) -> Result<ModelLease, CoreError> {
    acquire_with(supervisor, model, keep_alive, None).await
}

/// [`acquire`], asking for `gpu_layers` on a GPU: a loaded copy with other layers is loaded
/// again once idle.
pub async fn acquire_with(
    supervisor: &Addr<Supervisor>,
    model: &str,
    keep_alive: Option<KeepAlive>,
    gpu_layers: Option<u32>,
) -> Result<ModelLease, CoreError> {
    let ticket = supervisor
        .send(Acquire {
            model: model.to_string(),
            keep_alive,
            gpu_layers,
        })
        .await
        .map_err(|_| CoreError::new(ErrorCode::ShuttingDown, "llamay is shutting down"))?;
    ticket.await.unwrap_or_else(|_| {
        Err(CoreError::new(
            ErrorCode::ShuttingDown,
            "llamay is shutting down",
        ))
    })
}

/// The state of every loaded model and the queue.
#[derive(Message)]
#[rtype(result = "SupervisorStatus")]
pub struct GetStatus;

/// The model's store entry is gone (`/api/delete`): its loaded copy is never granted again. Idle,
/// it unloads now; busy, its running requests finish on it and it is freed when the last ends
/// (until then it counts against `max_loaded` but `/api/ps` no longer lists it); a load of it
/// under way is thrown away when it finishes. Nothing is loaded or evicted for this. Resolves to
/// whether a loaded or loading copy was found.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Retire {
    pub model: ModelName,
}

/// Stop taking requests, fail the waiting ones, unload idle models now and busy ones when their
/// last request ends. Resolves to the number of models still busy.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Shutdown;

#[derive(Message)]
#[rtype(result = "()")]
struct Release {
    model: String,
    slot_id: u64,
}

/// A request's hold on a loaded model. While any lease on a model lives, the model is never
/// evicted or expired; dropping the last one starts its idle timer.
pub struct ModelLease {
    model: Arc<dyn LoadedModel>,
    name: String,
    slot_id: u64,
    load_duration: Duration,
    supervisor: Addr<Supervisor>,
}

impl ModelLease {
    pub fn model(&self) -> &Arc<dyn LoadedModel> {
        &self.model
    }

    /// Time this request spent waiting for the model to load (zero when it was loaded already).
    pub fn load_duration(&self) -> Duration {
        self.load_duration
    }
}

impl Drop for ModelLease {
    fn drop(&mut self) {
        self.supervisor.do_send(Release {
            model: std::mem::take(&mut self.name),
            slot_id: self.slot_id,
        });
    }
}

impl std::fmt::Debug for ModelLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelLease")
            .field("name", &self.name)
            .field("slot_id", &self.slot_id)
            .finish()
    }
}

/// One loaded model as `/api/ps` and `/v1/stats` show it.
#[derive(Debug, Clone)]
pub struct LoadedModelStatus {
    pub info: ModelInfo,
    pub requests_in_flight: usize,
    pub sequences_in_use: usize,
    /// Requests waiting for this model: to load, or for a free sequence.
    pub queue_depth: usize,
    /// When it unloads if nothing uses it; for a busy model, when it would if its requests ended
    /// now. `None` = kept forever.
    pub expires_at: Option<DateTime<Utc>>,
    pub keep_alive: String,
    pub loaded_at: DateTime<Utc>,
    pub totals: ModelTotals,
    /// What each device holds, for a model split over RPC workers.
    pub placement: Vec<crate::core::DevicePlacement>,
    /// Chat or embedding (issue 14).
    pub kind: super::messages::ModelKind,
    /// How `/rerank` scores with this model, if it can.
    pub rerank_scorer: Option<crate::embed::rerank::ScorerKind>,
    /// What it holds on the host and on a GPU, as estimated when it loaded (`None`: loaded
    /// without an estimate, as over RPC).
    pub memory: Option<ModelMemory>,
}

/// The supervisor's state at one moment.
#[derive(Debug, Clone)]
pub struct SupervisorStatus {
    pub models: Vec<LoadedModelStatus>,
    pub queue_depth: usize,
    pub loading: Option<String>,
    pub max_loaded: usize,
    pub max_queue: usize,
    pub lifetime: SupervisorCounters,
    /// The GPUs, as the supervisor last planned with them, and what loaded models hold there.
    pub devices: Vec<DeviceStatus>,
}

/// One GPU as `/v1/stats` and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    pub device: crate::llm::devices::Device,
    /// Bytes the loaded models hold there, by the estimate they loaded with.
    pub used_by_models: u64,
    pub models: usize,
}

/// What the supervisor has done since it started, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SupervisorCounters {
    pub loads: u64,
    pub load_failures: u64,
    /// Idle models unloaded to make room for another.
    pub evictions: u64,
    /// Idle models unloaded when their keepalive ran out.
    pub expirations: u64,
    /// Models unloaded as their last request ended, by `keep_alive` 0.
    pub immediate_unloads: u64,
    /// Models unloaded because the daemon is stopping.
    pub shutdown_unloads: u64,
    /// Models unloaded because they were deleted.
    pub deletions: u64,
}

/// Why a model is unloaded (logged, and counted in [`SupervisorCounters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnloadReason {
    Evicted,
    Expired,
    KeepAliveZero,
    Stopping,
    Deleted,
    /// A request asked for other GPU layers than the loaded copy has.
    Replaced,
}

impl UnloadReason {
    fn as_str(self) -> &'static str {
        match self {
            UnloadReason::Evicted => "evicted to make room",
            UnloadReason::Expired => "keepalive expired",
            UnloadReason::KeepAliveZero => "keep_alive 0",
            UnloadReason::Stopping => "daemon stopping",
            UnloadReason::Deleted => "deleted",
            UnloadReason::Replaced => "loading again with other GPU layers",
        }
    }
}

struct Slot {
    id: u64,
    model: Arc<dyn LoadedModel>,
    refcount: usize,
    keep_alive: KeepAlive,
    /// Set only while idle with a finite keepalive.
    expires_at: Option<Instant>,
    timer: Option<SpawnHandle>,
    loaded_at: DateTime<Utc>,
    /// Where its layers went and what it holds (`None`: the loader gave no estimate).
    placed: Option<Placed>,
}

struct Waiter {
    model: String,
    keep_alive: Option<KeepAlive>,
    gpu_layers: Option<u32>,
    reply: oneshot::Sender<Result<ModelLease, CoreError>>,
    enqueued_at: Instant,
}

/// The actor. Create with [`Supervisor::new`] and `.start()`.
pub struct Supervisor {
    loader: Arc<dyn ModelLoader>,
    config: SupervisorConfig,
    loaded: HashMap<String, Slot>,
    /// Deleted models whose last requests still run; freed when they end.
    retiring: Vec<Slot>,
    loading: Option<String>,
    /// The model being loaded was deleted meanwhile: the load is thrown away.
    loading_retired: bool,
    queue: VecDeque<Waiter>,
    next_slot_id: u64,
    shutting_down: bool,
    lifetime: SupervisorCounters,
    probe: Arc<dyn MemoryProbe>,
    /// Layers on a GPU for a load no request asks otherwise of (`-ngl`; `None`: as many as fit).
    default_gpu_layers: Option<u32>,
    /// The devices as last probed, for the status.
    devices: Vec<crate::llm::devices::Device>,
}

impl Supervisor {
    pub fn new(loader: Arc<dyn ModelLoader>, config: SupervisorConfig) -> Self {
        let config = SupervisorConfig {
            max_loaded: config.max_loaded.max(1),
            ..config
        };
        Supervisor {
            loader,
            config,
            loaded: HashMap::new(),
            retiring: Vec::new(),
            loading: None,
            loading_retired: false,
            queue: VecDeque::new(),
            next_slot_id: 0,
            shutting_down: false,
            lifetime: SupervisorCounters::default(),
            probe: Arc::new(memory::NoProbe),
            default_gpu_layers: None,
            devices: Vec::new(),
        }
    }

    /// Plans loads with the devices and host memory `probe` reports, `default_gpu_layers` on a
    /// GPU unless a request asks otherwise (`None`: as many as fit).
    pub fn with_memory(mut self, probe: Arc<dyn MemoryProbe>, default_gpu_layers: Option<u32>) -> Self {
        self.devices = probe.devices();
        self.probe = probe;
        self.default_gpu_layers = default_gpu_layers;
        self
    }

    /// Forgets a model that can no longer serve ([`LoadedModel::is_lost`]); requests still
    /// holding it end on their own, and the next one loads it again.
    fn forget_lost(&mut self, ctx: &mut Context<Self>) {
        let lost: Vec<String> =
            self.loaded.iter().filter(|(_, slot)| slot.model.is_lost()).map(|(name, _)| name.clone()).collect();
        for name in lost {
            if let Some(mut slot) = self.loaded.remove(&name) {
                if let Some(timer) = slot.timer.take() {
                    ctx.cancel_future(timer);
                }
                tracing::warn!(model = %name, "model lost (its runner ended); the next request loads it again");
            }
        }
    }

    /// Serves every waiter that can be served, starts a load if one is needed and allowed.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        self.forget_lost(ctx);
        let mut index = 0;
        while index < self.queue.len() {
            let Some(waiter) = self.queue.get(index) else {
                break;
            };
            if waiter.reply.is_closed() {
                self.queue.remove(index);
                continue;
            }
            let (name, gpu_layers) = (waiter.model.clone(), waiter.gpu_layers);
            if let Some(slot) = self.loaded.get(&name) {
                if slot.serves(gpu_layers) {
                    if let Some(waiter) = self.queue.remove(index) {
                        self.grant(waiter, ctx);
                    }
                    continue;
                }
                // Other GPU layers are asked for: load it again once this copy is idle.
                if slot.refcount > 0 || self.loading.is_some() || self.shutting_down {
                    index += 1;
                    continue;
                }
                self.unload(&name, ctx, UnloadReason::Replaced);
            }
            if self.loading.is_none() && !self.shutting_down {
                if self.loaded.len() + self.retiring.len() >= self.config.max_loaded {
                    match self.eviction_candidate() {
                        Some(victim) => self.unload(&victim, ctx, UnloadReason::Evicted),
                        None => {
                            index += 1;
                            continue;
                        }
                    }
                }
                self.start_load(name, gpu_layers, ctx);
            }
            index += 1;
        }
    }

    fn grant(&mut self, waiter: Waiter, ctx: &mut Context<Self>) {
        let Some(slot) = self.loaded.get_mut(&waiter.model) else {
            return;
        };
        if let Some(timer) = slot.timer.take() {
            ctx.cancel_future(timer);
        }
        slot.expires_at = None;
        self.grant_loaded(waiter, Duration::ZERO, ctx);
    }

    /// The idle model that would expire soonest; one kept forever goes last.
    fn eviction_candidate(&self) -> Option<String> {
        self.loaded
            .iter()
            .filter(|(_, slot)| slot.refcount == 0)
            .min_by_key(|(_, slot)| (slot.expires_at.is_none(), slot.expires_at))
            .map(|(name, _)| name.clone())
    }

    /// Estimates the model's memory (off the actor: it reads the file's header), then places
    /// and loads it.
    fn start_load(&mut self, name: String, gpu_layers: Option<u32>, ctx: &mut Context<Self>) {
        tracing::info!(model = %name, "loading model");
        self.loading = Some(name.clone());
        let loader = self.loader.clone();
        let started = Instant::now();
        let estimate = async move {
            let estimate_name = name.clone();
            let result = tokio::task::spawn_blocking(move || loader.estimate(&estimate_name))
                .await
                .unwrap_or_else(|join_error| {
                    Err(CoreError::new(ErrorCode::ModelLoadFailed, format!("estimating its memory panicked: {join_error}")))
                });
            (name, result)
        };
        ctx.spawn(actix::fut::wrap_future(estimate).map(move |(name, result), act: &mut Self, ctx| {
            match result {
                Ok(estimate) => match act.place(&name, estimate.as_ref(), gpu_layers.or(act.default_gpu_layers), ctx) {
                    Ok(placed) => act.load_placed(name, placed, started, ctx),
                    Err(error) => act.finish_load(name, Err(error), None, started.elapsed(), ctx),
                },
                Err(error) => act.finish_load(name, Err(error), None, started.elapsed(), ctx),
            }
        }));
    }

    fn finish_load(
        &mut self,
        name: String,
        result: Result<Arc<dyn LoadedModel>, CoreError>,
        placed: Option<Placed>,
        took: Duration,
        ctx: &mut Context<Self>,
    ) {
        self.loading = None;
        if std::mem::take(&mut self.loading_retired) {
            // Its waiters stay queued: the next load finds the store entry gone (a 404), or
            // whatever was put under the name since.
            tracing::info!(model = %name, "model deleted while it loaded; not kept");
            self.pump(ctx);
            return;
        }
        match result {
            Ok(model) => {
                self.lifetime.loads += 1;
                tracing::info!(model = %name, seconds = took.as_secs_f64(), "model loaded");
                self.next_slot_id += 1;
                let slot = Slot {
                    id: self.next_slot_id,
                    model,
                    refcount: 0,
                    keep_alive: self.config.default_keep_alive,
                    expires_at: None,
                    timer: None,
                    loaded_at: Utc::now(),
                    placed,
                };
                self.loaded.insert(name.clone(), slot);
                // Waiters for this model are served before anything else can evict it.
                let mut index = 0;
                while index < self.queue.len() {
                    let served = self.queue.get(index).is_some_and(|w| {
                        w.model == name && self.loaded.get(&name).is_some_and(|slot| slot.serves(w.gpu_layers))
                    });
                    if served {
                        if let Some(waiter) = self.queue.remove(index) {
                            let load_duration = waiter.enqueued_at.elapsed().min(took);
                            self.grant_loaded(waiter, load_duration, ctx);
                        }
                    } else {
                        index += 1;
                    }
                }
                self.became_idle_if_unused(&name, ctx);
            }
            Err(error) => {
                self.lifetime.load_failures += 1;
                tracing::warn!(model = %name, %error, "model failed to load");
                let mut kept = VecDeque::with_capacity(self.queue.len());
                for waiter in self.queue.drain(..) {
                    if waiter.model == name {
                        let _ = waiter.reply.send(Err(error.clone()));
                    } else {
                        kept.push_back(waiter);
                    }
                }
                self.queue = kept;
            }
        }
        self.pump(ctx);
    }

    fn grant_loaded(&mut self, waiter: Waiter, load_duration: Duration, ctx: &mut Context<Self>) {
        let Some(slot) = self.loaded.get_mut(&waiter.model) else {
            return;
        };
        // As in Ollama, each request sets the keepalive: its own, or the daemon's default.
        slot.keep_alive = waiter.keep_alive.unwrap_or(self.config.default_keep_alive);
        slot.refcount += 1;
        let lease = ModelLease {
            model: slot.model.clone(),
            name: waiter.model.clone(),
            slot_id: slot.id,
            load_duration,
            supervisor: ctx.address(),
        };
        // A receiver that went away drops the lease, which releases it again.
        let _ = waiter.reply.send(Ok(lease));
    }

    /// At refcount 0: unload now, arm the idle timer, or keep forever, per the keepalive.
    fn became_idle_if_unused(&mut self, name: &str, ctx: &mut Context<Self>) {
        let Some(slot) = self.loaded.get_mut(name) else {
            return;
        };
        if slot.refcount > 0 {
            return;
        }
        if self.shutting_down {
            self.unload(name, ctx, UnloadReason::Stopping);
            return;
        }
        if let Some(timer) = slot.timer.take() {
            ctx.cancel_future(timer);
        }
        match slot.keep_alive {
            KeepAlive::UnloadNow => self.unload(name, ctx, UnloadReason::KeepAliveZero),
            KeepAlive::Forever => slot.expires_at = None,
            KeepAlive::For(idle) => {
                slot.expires_at = Some(Instant::now() + idle);
                let slot_id = slot.id;
                let owned_name = name.to_string();
                slot.timer = Some(
                    ctx.run_later(idle, move |act, ctx| act.expire(&owned_name, slot_id, ctx)),
                );
            }
        }
    }

    fn expire(&mut self, name: &str, slot_id: u64, ctx: &mut Context<Self>) {
        let due = self.loaded.get(name).is_some_and(|slot| {
            slot.id == slot_id
                && slot.refcount == 0
                && slot.expires_at.is_some_and(|at| at <= Instant::now())
        });
        if due {
            self.unload(name, ctx, UnloadReason::Expired);
            self.pump(ctx);
        }
    }

    fn unload(&mut self, name: &str, ctx: &mut Context<Self>, why: UnloadReason) {
        if let Some(mut slot) = self.loaded.remove(name) {
            if let Some(timer) = slot.timer.take() {
                ctx.cancel_future(timer);
            }
            self.count_unload(name, why);
            // The model actor stops when its last Arc goes; no lease holds one at refcount 0.
            drop(slot);
        }
    }

    fn count_unload(&mut self, name: &str, why: UnloadReason) {
        let counter = match why {
            UnloadReason::Evicted | UnloadReason::Replaced => &mut self.lifetime.evictions,
            UnloadReason::Expired => &mut self.lifetime.expirations,
            UnloadReason::KeepAliveZero => &mut self.lifetime.immediate_unloads,
            UnloadReason::Stopping => &mut self.lifetime.shutdown_unloads,
            UnloadReason::Deleted => &mut self.lifetime.deletions,
        };
        *counter += 1;
        tracing::info!(model = %name, reason = why.as_str(), "unloading model");
    }

    fn status(&self) -> SupervisorStatus {
        let now = Instant::now();
        let wall_now = Utc::now();
        let mut models: Vec<LoadedModelStatus> = self
            .loaded
            .iter()
            .map(|(name, slot)| {
                let expires_in = match (slot.expires_at, slot.keep_alive) {
                    (Some(at), _) => Some(at.saturating_duration_since(now)),
                    (None, keep_alive) => keep_alive.idle_duration(),
                };
                LoadedModelStatus {
                    info: slot.model.info().clone(),
                    requests_in_flight: slot.refcount,
                    sequences_in_use: slot.model.sequences_in_use(),
                    queue_depth: self.queue.iter().filter(|w| &w.model == name).count()
                        + slot.model.queue_depth(),
                    expires_at: expires_in
                        .and_then(|d| chrono::Duration::from_std(d).ok())
                        .map(|d| wall_now + d),
                    keep_alive: slot.keep_alive.to_string(),
                    loaded_at: slot.loaded_at,
                    totals: slot.model.totals(),
                    placement: slot.model.placement(),
                    kind: super::messages::model_kind(slot.model.as_ref()),
                    rerank_scorer: slot.model.reranking().map(|rerank| rerank.scorer()),
                    memory: slot.placed.as_ref().map(|p| p.memory.clone()),
                }
            })
            .collect();
        models.sort_by(|a, b| a.info.name.cmp(&b.info.name));
        // Waiting for a model to load, and for a sequence of a loaded one.
        let waiting_in_models: usize = self.loaded.values().map(|slot| slot.model.queue_depth()).sum();
        SupervisorStatus {
            models,
            queue_depth: self.queue.len() + waiting_in_models,
            loading: self.loading.clone(),
            max_loaded: self.config.max_loaded,
            max_queue: self.config.max_queue,
            lifetime: self.lifetime,
            devices: self.device_status(),
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

impl Handler<Acquire> for Supervisor {
    type Result = MessageResult<Acquire>;

    fn handle(&mut self, request: Acquire, ctx: &mut Context<Self>) -> Self::Result {
        let (reply, ticket) = oneshot::channel();
        if self.shutting_down {
            let _ = reply.send(Err(CoreError::new(
                ErrorCode::ShuttingDown,
                "llamay is shutting down",
            )));
            return MessageResult(ticket);
        }
        // A model is a name, never a path: whatever reaches a loader has passed the name rule.
        // The normalised name is the key, so every spelling of a model shares one copy.
        let model = match ModelName::parse(&request.model) {
            Ok(name) => name.to_string(),
            Err(invalid) => {
                let _ = reply.send(Err(invalid.into()));
                return MessageResult(ticket);
            }
        };
        let waiter = Waiter {
            model,
            keep_alive: request.keep_alive,
            gpu_layers: request.gpu_layers,
            reply,
            enqueued_at: Instant::now(),
        };
        self.forget_lost(ctx);
        if self.loaded.get(&waiter.model).is_some_and(|slot| slot.serves(waiter.gpu_layers)) {
            self.grant(waiter, ctx);
            return MessageResult(ticket);
        }
        if let Err(missing) = self.loader.check_installed(&waiter.model) {
            let _ = waiter.reply.send(Err(missing));
            return MessageResult(ticket);
        }
        self.queue.retain(|w| !w.reply.is_closed());
        if self.queue.len() >= self.config.max_queue {
            let message = format!(
                "{} requests are already waiting for a model; retry shortly",
                self.queue.len()
            );
            let _ = waiter
                .reply
                .send(Err(CoreError::new(ErrorCode::Overloaded, message)));
            return MessageResult(ticket);
        }
        self.queue.push_back(waiter);
        self.pump(ctx);
        MessageResult(ticket)
    }
}

impl Handler<Release> for Supervisor {
    type Result = ();

    fn handle(&mut self, release: Release, ctx: &mut Context<Self>) {
        if let Some(slot) = self
            .loaded
            .get_mut(&release.model)
            .filter(|slot| slot.id == release.slot_id)
        {
            slot.refcount = slot.refcount.saturating_sub(1);
            self.became_idle_if_unused(&release.model, ctx);
        } else if let Some(index) = self.retiring.iter().position(|slot| slot.id == release.slot_id) {
            let slot = &mut self.retiring[index];
            slot.refcount = slot.refcount.saturating_sub(1);
            if slot.refcount > 0 {
                return;
            }
            // The last lease just dropped its Arc: the model is freed with this slot.
            self.retiring.swap_remove(index);
            self.count_unload(&release.model, UnloadReason::Deleted);
        } else {
            return;
        }
        self.pump(ctx);
    }
}

impl Handler<Retire> for Supervisor {
    type Result = bool;

    fn handle(&mut self, retire: Retire, ctx: &mut Context<Self>) -> bool {
        let name = retire.model.to_string();
        let loading = self.loading.as_deref() == Some(name.as_str());
        self.loading_retired |= loading;
        let Some(busy) = self.loaded.get(&name).map(|slot| slot.refcount) else {
            return loading;
        };
        if busy == 0 {
            self.unload(&name, ctx, UnloadReason::Deleted);
            self.pump(ctx);
        } else if let Some(slot) = self.loaded.remove(&name) {
            // A busy slot has no idle timer to cancel.
            tracing::info!(model = %name, requests = busy, "model deleted; it unloads when its running requests end");
            self.retiring.push(slot);
        }
        true
    }
}

impl Handler<GetStatus> for Supervisor {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _: GetStatus, _: &mut Context<Self>) -> Self::Result {
        // Free GPU memory changes under other programs too: read it again (a driver call).
        if !self.devices.is_empty() {
            self.devices = self.probe.devices();
        }
        MessageResult(self.status())
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> usize {
        self.shutting_down = true;
        for waiter in self.queue.drain(..) {
            let _ = waiter.reply.send(Err(CoreError::new(
                ErrorCode::ShuttingDown,
                "llamay is shutting down",
            )));
        }
        let idle: Vec<String> = self
            .loaded
            .iter()
            .filter(|(_, s)| s.refcount == 0)
            .map(|(n, _)| n.clone())
            .collect();
        for name in idle {
            self.unload(&name, ctx, UnloadReason::Stopping);
        }
        self.loaded.len() + self.retiring.len()
    }
}

mod placing;

#[cfg(test)]
mod tests;
