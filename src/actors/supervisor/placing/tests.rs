//! The supervisor's memory accounting with injected device facts (a fake 4 GiB GPU, no real
//! one): where layers go, eviction of idle models on the device a model needs, never a busy
//! one, fewer layers when room stays short, a clear error for layers asked that cannot fit,
//! and `num_gpu` loading a model again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;

use super::super::{acquire, acquire_with, Retire, GetStatus, Supervisor, SupervisorConfig};
use crate::actors::memory::testing::{estimate, FakeGpu, GIB, MIB};
use crate::actors::memory::{MemoryProbe, DEVICE_HEADROOM};
use crate::actors::messages::{LoadedModel, ModelLoader};
use crate::core::{KeepAlive, ModelInfo, ModelTotals};
use crate::error::CoreError;
use crate::llm::offload::{LayerPlacement, MemoryEstimate};

struct Model {
    info: ModelInfo,
    journal: Arc<Mutex<Vec<String>>>,
}

impl LoadedModel for Model {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn sequences_in_use(&self) -> usize {
        0
    }
    fn totals(&self) -> ModelTotals {
        ModelTotals::default()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.journal.lock().unwrap().push(format!("unload {}", self.info.name));
    }
}

/// Loads any name; models it has an estimate for are placed by it.
struct Loader {
    estimates: HashMap<&'static str, MemoryEstimate>,
    journal: Arc<Mutex<Vec<String>>>,
}

impl Loader {
    fn model(&self, name: &str, placement: Option<LayerPlacement>) -> Arc<dyn LoadedModel> {
        let name = short(name);
        let described = match placement {
            Some(LayerPlacement::Device { layers, .. }) => format!("load {name} gpu {layers}"),
            Some(LayerPlacement::Cpu) => format!("load {name} cpu"),
            Some(LayerPlacement::LlamaDefault) => format!("load {name} default"),
            None => format!("load {name}"),
        };
        self.journal.lock().unwrap().push(described);
        let info = ModelInfo {
            name: name.into(),
            architecture: "fake".into(),
            parameter_count: 1,
            quantization: "F16".into(),
            context_length: 64,
            trained_context_length: 64,
            size_bytes: 7,
            digest: "sha256:00".into(),
            parallel: 1,
        };
        Arc::new(Model { info, journal: self.journal.clone() })
    }
}

impl ModelLoader for Loader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        Ok(self.model(name, None))
    }
    fn estimate(&self, name: &str) -> Result<Option<MemoryEstimate>, CoreError> {
        Ok(self.estimates.get(short(name)).cloned())
    }
    fn load_placed(&self, name: &str, placement: LayerPlacement) -> Result<Arc<dyn LoadedModel>, CoreError> {
        Ok(self.model(name, Some(placement)))
    }
}

/// The supervisor hands loaders normalised names (`a:latest`); the journal, the estimates and
/// the assertions use the names the requests gave.
fn short(name: &str) -> &str {
    name.strip_suffix(":latest").unwrap_or(name)
}

struct Harness {
    addr: Addr<Supervisor>,
    journal: Arc<Mutex<Vec<String>>>,
}

impl Harness {
    fn start(probe: impl MemoryProbe + 'static, default_layers: Option<u32>) -> Self {
        let journal = Arc::new(Mutex::new(Vec::new()));
        let estimates = HashMap::from([
            // 9 layers of 150 MiB: 1.4 GiB on the device with its compute buffer; two fit the
            // fake GPU's 3.5 GiB of room, three do not.
            ("a", estimate(8, LAYER_MIB)),
            ("b", estimate(8, LAYER_MIB)),
            ("c", estimate(8, LAYER_MIB)),
            // 4.7 GiB on a device whole: more than the fake one holds.
            ("huge", estimate(23, 200)),
        ]);
        let loader = Arc::new(Loader { estimates, journal: journal.clone() });
        let config =
            SupervisorConfig { max_loaded: 8, default_keep_alive: KeepAlive::For(Duration::from_secs(600)), max_queue: 8 };
        let addr = Supervisor::new(loader, config).with_memory(Arc::new(probe), default_layers).start();
        Harness { addr, journal }
    }

    fn events(&self) -> Vec<String> {
        self.journal.lock().unwrap().clone()
    }

    /// (name, gpu layers, device bytes, host bytes) of each loaded model.
    async fn placed(&self) -> Vec<(String, u32, u64, u64)> {
        let status = self.addr.send(GetStatus).await.unwrap();
        status
            .models
            .into_iter()
            .map(|m| {
                let memory = m.memory.expect("placed by its estimate");
                let layers = memory.device.as_ref().map_or(0, |d| d.layers);
                (m.info.name, layers, memory.device_bytes(), memory.host_bytes)
            })
            .collect()
    }
}

const LAYER_MIB: u64 = 150;

fn gpu(total: u64) -> FakeGpu {
    FakeGpu { total, host: None }
}

#[actix::test]
async fn a_model_that_fits_goes_to_the_device_whole() {
    let h = Harness::start(gpu(4 * GIB), None);
    let lease = acquire(&h.addr, "a", None).await.unwrap();
    assert_eq!(h.events(), vec!["load a gpu 9"]);
    let whole = estimate(8, LAYER_MIB).split(9);
    assert_eq!(h.placed().await, vec![("a".to_string(), 9, whole.device_bytes, whole.host_bytes)]);
    let status = h.addr.send(GetStatus).await.unwrap();
    assert_eq!(status.devices.len(), 1);
    assert_eq!((status.devices[0].used_by_models, status.devices[0].models), (whole.device_bytes, 1));
    drop(lease);
}

#[actix::test]
async fn an_idle_model_on_the_device_is_evicted_to_make_room() {
    let h = Harness::start(gpu(4 * GIB), None);
    drop(acquire(&h.addr, "a", None).await.unwrap());
    drop(acquire(&h.addr, "b", None).await.unwrap());
    // a and b hold 2.8 GiB of the 3.5 GiB room; c needs 1.4 GiB: a (expiring first) goes.
    drop(acquire(&h.addr, "c", None).await.unwrap());
    assert_eq!(h.events(), vec!["load a gpu 9", "load b gpu 9", "unload a", "load c gpu 9"]);
    let status = h.addr.send(GetStatus).await.unwrap();
    assert_eq!(status.lifetime.evictions, 1);
    let held: u64 = h.placed().await.iter().map(|(_, _, device, _)| device).sum();
    assert!(held <= 4 * GIB - DEVICE_HEADROOM, "{held} bytes held on a 4 GiB device");
}

#[actix::test]
async fn a_busy_model_is_never_evicted_the_next_gets_fewer_layers() {
    let h = Harness::start(gpu(4 * GIB), None);
    let _a = acquire(&h.addr, "a", None).await.unwrap();
    let _b = acquire(&h.addr, "b", None).await.unwrap();
    let _c = acquire(&h.addr, "c", None).await.unwrap();
    let events = h.events();
    assert_eq!(events[0], "load a gpu 9");
    assert!(!events.iter().any(|e| e.starts_with("unload")), "{events:?}");
    let placed = h.placed().await;
    let held: u64 = placed.iter().map(|(_, _, device, _)| device).sum();
    assert!(held <= 4 * GIB - DEVICE_HEADROOM, "{placed:?}");
    let c = placed.iter().find(|(name, ..)| name == "c").unwrap();
    assert!(c.1 < 9, "c gets fewer layers while a and b are busy: {placed:?}");
}

#[actix::test]
async fn a_deleted_model_still_answering_holds_its_device_memory() {
    let h = Harness::start(gpu(4 * GIB), None);
    let a = acquire(&h.addr, "a", None).await.unwrap();
    let _b = acquire(&h.addr, "b", None).await.unwrap();
    let name = crate::core::ModelName::parse("a").unwrap();
    assert!(h.addr.send(Retire { model: name }).await.unwrap());
    // a is retired but still answering: its 1.4 GiB stay counted, so c does not fit whole.
    let c = acquire(&h.addr, "c", None).await.unwrap();
    let events = h.events();
    let loaded_c = events.iter().find(|e| e.starts_with("load c")).expect("c loads");
    assert!(loaded_c != "load c gpu 9", "c placed as if a had gone: {events:?}");
    let status = h.addr.send(GetStatus).await.unwrap();
    let whole = estimate(8, LAYER_MIB).split(9).device_bytes;
    assert_eq!(status.devices[0].models, 3, "a, b and c are on the device");
    assert!(status.devices[0].used_by_models <= 4 * GIB - DEVICE_HEADROOM && status.devices[0].used_by_models > 2 * whole);
    drop((a, c));
}

#[actix::test]
async fn a_model_larger_than_the_device_loads_with_the_layers_that_fit() {
    let h = Harness::start(gpu(4 * GIB), None);
    drop(acquire(&h.addr, "huge", None).await.unwrap());
    let placed = h.placed().await;
    let (_, layers, device, host) = placed[0].clone();
    assert!(layers > 0 && layers < 24, "{placed:?}");
    assert!(device <= 4 * GIB - DEVICE_HEADROOM);
    assert!(host > estimate(23, 200).split(24).host_bytes, "the rest stays on the host");
}

#[actix::test]
async fn layers_asked_that_cannot_fit_are_refused_by_name() {
    let h = Harness::start(gpu(4 * GIB), None);
    let error = acquire_with(&h.addr, "huge", None, Some(24)).await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("huge") && message.contains("24 layers") && message.contains("FAKE0"), "{message}");
    assert!(message.contains("GiB") && message.contains("free"), "{message}");
    // The daemon is fine: the same model loads with the layers that fit.
    drop(acquire(&h.addr, "huge", None).await.unwrap());
}

#[actix::test]
async fn zero_layers_keeps_a_model_on_the_cpu() {
    let h = Harness::start(gpu(4 * GIB), Some(0));
    drop(acquire(&h.addr, "a", None).await.unwrap());
    assert_eq!(h.events(), vec!["load a cpu"]);
    let whole = estimate(8, LAYER_MIB).total();
    assert_eq!(h.placed().await, vec![("a".to_string(), 0, 0, whole)]);
}

#[actix::test]
async fn num_gpu_loads_a_model_again_once_idle() {
    let h = Harness::start(gpu(4 * GIB), None);
    let first = acquire(&h.addr, "a", None).await.unwrap();
    // Asking what it has, or nothing, shares the loaded copy.
    drop(acquire_with(&h.addr, "a", None, Some(9)).await.unwrap());
    drop(acquire_with(&h.addr, "a", None, Some(99)).await.unwrap());
    assert_eq!(h.events(), vec!["load a gpu 9"]);
    let waiting = actix::spawn({
        let addr = h.addr.clone();
        async move { acquire_with(&addr, "a", None, Some(3)).await.map(drop) }
    });
    actix::clock::sleep(Duration::from_millis(50)).await;
    assert_eq!(h.events(), vec!["load a gpu 9"], "the busy copy is not unloaded under its request");
    drop(first);
    waiting.await.unwrap().unwrap();
    assert_eq!(h.events(), vec!["load a gpu 9", "unload a", "load a gpu 3"]);
    drop(acquire_with(&h.addr, "a", None, Some(0)).await.unwrap());
    assert_eq!(h.events().last().unwrap(), "load a cpu");
}

#[actix::test]
async fn without_a_gpu_models_load_as_before_and_count_host_memory() {
    let h = Harness::start(crate::actors::memory::NoProbe, None);
    drop(acquire_with(&h.addr, "a", None, Some(99)).await.unwrap());
    drop(acquire_with(&h.addr, "a", None, Some(0)).await.unwrap());
    assert_eq!(h.events(), vec!["load a default"], "num_gpu changes nothing without a GPU");
    assert_eq!(h.placed().await, vec![("a".to_string(), 0, 0, estimate(8, LAYER_MIB).total())]);
    // A loader without estimates (RPC runners) is loaded as it always was.
    drop(acquire(&h.addr, "unestimated", None).await.unwrap());
    let status = h.addr.send(GetStatus).await.unwrap();
    let unestimated = status.models.iter().find(|m| m.info.name == "unestimated").unwrap();
    assert!(unestimated.memory.is_none());
}

#[actix::test]
async fn short_host_memory_evicts_idle_models() {
    // Room on the host for one CPU model at a time.
    let one = estimate(8, LAYER_MIB).total();
    let h = Harness::start(FakeGpu { total: 4 * GIB, host: Some(one + MIB) }, Some(0));
    drop(acquire(&h.addr, "a", None).await.unwrap());
    let busy = acquire(&h.addr, "b", None).await.unwrap();
    assert_eq!(h.events(), vec!["load a cpu", "unload a", "load b cpu"]);
    // Nothing idle to evict: c still loads (the host figure is an estimate), b is kept.
    drop(acquire(&h.addr, "c", None).await.unwrap());
    assert_eq!(h.events().last().unwrap(), "load c cpu");
    assert!(h.placed().await.iter().any(|(name, ..)| name == "b"));
    drop(busy);
}
