//! The supervisor's memory side: placing a model's layers before it loads (evicting idle
//! models on the device it needs, or anywhere when the host lacks room), loading it so, and
//! what each device holds for the status. The planning itself is [`super::super::memory`].
//! Costs: a probe of the devices per planning round; O(loaded) per eviction considered.

use std::collections::HashMap;
use std::time::Instant;

use actix::prelude::*;

use super::{DeviceStatus, Slot, Supervisor, UnloadReason};
use crate::actors::memory::{self, ModelMemory, Placed, Plan};
use crate::error::{CoreError, ErrorCode};

impl Slot {
    /// Whether this copy serves a request asking `gpu_layers`: any does when it asks none;
    /// otherwise the copy must have the layers that request would get (on a machine without
    /// a GPU, or for a model loaded without an estimate, every copy has them).
    pub(super) fn serves(&self, gpu_layers: Option<u32>) -> bool {
        match (gpu_layers, &self.placed) {
            (None, _) | (_, None) => true,
            (Some(asked), Some(placed)) => {
                let has = placed.placement.device_layers();
                let would_get = if matches!(placed.placement, crate::llm::offload::LayerPlacement::LlamaDefault) {
                    0
                } else {
                    asked.min(placed.offloadable)
                };
                has == would_get
            }
        }
    }
}

impl Supervisor {
    /// Where the model's layers go: evicts idle models on the device it needs until the whole
    /// model fits there or none is left, and idle models anywhere while the host lacks room for
    /// its part.
    pub(super) fn place(
        &mut self,
        name: &str,
        estimate: Option<&crate::llm::offload::MemoryEstimate>,
        gpu_layers: Option<u32>,
        ctx: &mut Context<Self>,
    ) -> Result<Option<Placed>, CoreError> {
        let Some(estimate) = estimate else {
            return Ok(None);
        };
        // Memory freed by this round's evictions, which a driver may report late.
        let mut released_device: HashMap<usize, u64> = HashMap::new();
        let mut released_host = 0u64;
        let placed = loop {
            self.devices = self.probe.devices();
            let devices: Vec<_> = self
                .devices
                .iter()
                .cloned()
                .map(|mut device| {
                    device.free = (device.free + released_device.get(&device.index).copied().unwrap_or(0)).min(device.total);
                    device
                })
                .collect();
            let held = self.held();
            match memory::place(estimate, &devices, &held, gpu_layers) {
                Plan::Load(placed) => break placed,
                Plan::Evict { index, fallback } => match self.idle_candidate(|m| m.device.as_ref().is_some_and(|d| d.index == index)) {
                    Some(victim) => {
                        let freed = self.held_by(&victim);
                        *released_device.entry(index).or_default() += freed.device_bytes();
                        released_host += freed.host_bytes;
                        tracing::info!(model = %name, evicted = %victim, "unloading an idle model to make room on the GPU");
                        self.unload(&victim, ctx, UnloadReason::Evicted);
                    }
                    None => {
                        break fallback.map_err(|too_big| {
                            // Models still answering hold the memory: a capacity limit, retried
                            // like a full queue. Otherwise no wait would make the layers fit.
                            let code = if too_big.fits_when_idle() {
                                ErrorCode::DeviceMemoryBusy
                            } else {
                                ErrorCode::ModelLoadFailed
                            };
                            CoreError::new(code, format!("cannot load {name}: {too_big}"))
                        })?
                    }
                },
            }
        };
        if let Some(host) = self.probe.host_memory() {
            while placed.memory.host_bytes > memory::host_room(host, &self.held(), released_host) {
                let Some(victim) = self.idle_candidate(|m| m.host_bytes > 0) else {
                    tracing::warn!(
                        model = %name,
                        needs = %memory::human_binary(placed.memory.host_bytes),
                        room = %memory::human_binary(memory::host_room(host, &self.held(), released_host)),
                        "loading with less host memory free than the model is estimated to need"
                    );
                    break;
                };
                released_host += self.held_by(&victim).host_bytes;
                tracing::info!(model = %name, evicted = %victim, "unloading an idle model to make room in host memory");
                self.unload(&victim, ctx, UnloadReason::Evicted);
            }
        }
        if let Some(share) = &placed.memory.device {
            tracing::info!(
                model = %name,
                device = %share.name,
                layers = format!("{}/{}", share.layers, share.of_layers),
                device_memory = %memory::human_binary(share.bytes),
                host_memory = %memory::human_binary(placed.memory.host_bytes),
                "layers offloaded"
            );
        }
        Ok(Some(placed))
    }

    /// What every model in memory holds, by its estimate: the loaded ones and the deleted ones
    /// still answering requests.
    fn held(&self) -> Vec<ModelMemory> {
        self.in_memory().filter_map(|slot| slot.placed.as_ref().map(|p| p.memory.clone())).collect()
    }

    fn in_memory(&self) -> impl Iterator<Item = &Slot> {
        self.loaded.values().chain(&self.retiring)
    }

    /// What a loaded model holds, by its estimate.
    fn held_by(&self, name: &str) -> ModelMemory {
        self.loaded.get(name).and_then(|slot| slot.placed.as_ref()).map(|p| p.memory.clone()).unwrap_or_default()
    }

    /// The idle model holding memory where `holds` says that would expire soonest.
    fn idle_candidate(&self, holds: impl Fn(&ModelMemory) -> bool) -> Option<String> {
        self.loaded
            .iter()
            .filter(|(_, slot)| slot.refcount == 0 && slot.placed.as_ref().is_some_and(|p| holds(&p.memory)))
            .min_by_key(|(_, slot)| (slot.expires_at.is_none(), slot.expires_at))
            .map(|(name, _)| name.clone())
    }

    pub(super) fn load_placed(&mut self, name: String, placed: Option<Placed>, started: Instant, ctx: &mut Context<Self>) {
        let loader = self.loader.clone();
        let placement = placed.as_ref().map(|p| p.placement);
        let load = async move {
            let load_name = name.clone();
            let result = tokio::task::spawn_blocking(move || match placement {
                Some(placement) => loader.load_placed(&load_name, placement),
                None => loader.load(&load_name),
            })
            .await
            .unwrap_or_else(|join_error| {
                Err(CoreError::new(
                    ErrorCode::ModelLoadFailed,
                    format!("loading panicked: {join_error}"),
                ))
            });
            (name, result)
        };
        ctx.spawn(
            actix::fut::wrap_future(load).map(move |(name, result), act: &mut Self, ctx| {
                act.finish_load(name, result, placed, started.elapsed(), ctx)
            }),
        );
    }

    /// Each GPU as last probed, with what the loaded models hold there.
    pub(super) fn device_status(&self) -> Vec<DeviceStatus> {
        self.devices
            .iter()
            .map(|device| {
                let shares: Vec<u64> = self
                    .in_memory()
                    .filter_map(|slot| slot.placed.as_ref()?.memory.device.as_ref())
                    .filter(|share| share.index == device.index)
                    .map(|share| share.bytes)
                    .collect();
                DeviceStatus { device: device.clone(), used_by_models: shares.iter().sum(), models: shares.len() }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
