//! Memory the supervisor accounts for: what each loaded model holds on the host and on a GPU
//! ([`ModelMemory`]), the devices and their room now ([`MemoryProbe`], a trait so tests inject
//! a fake 4 GiB device without a GPU), and where the next model's layers go ([`place`]).
//!
//! A device's room is the smaller of what its driver reports free and its total less what
//! loaded models hold (a fake device reports its total as free; a real one already counts
//! them), less [`DEVICE_HEADROOM`]; the host's is counted the same way ([`host_room`]), and
//! a model still short of it after idle ones are evicted loads with a warning (mapped weights
//! need not all be resident). With no `gpu_layers` asked for, a model gets as many
//! layers as fit the roomiest device: when the whole model does not fit, the supervisor
//! evicts idle models on that device, soonest to expire first, until it does or none is
//! left, then loads with the layers that fit (as Ollama does). Layers asked for explicitly (`-ngl`, `num_gpu`) that do not fit even after
//! eviction are refused with an error naming the device and both sizes.
//!
//! Key items: [`MemoryProbe`], [`LlamaMemory`], [`ModelMemory`], [`DeviceShare`], [`Placed`],
//! [`place`], [`place_alone`]. Costs: a probe is a few driver calls; planning is O(devices × layers).

use crate::llm::devices::{Device, HostMemory};
use crate::llm::offload::{LayerPlacement, MemoryEstimate, Split};

/// Kept free on every device for the driver's own allocations and other programs (Ollama
/// keeps a minimum of about this much per GPU).
pub const DEVICE_HEADROOM: u64 = 512 * 1024 * 1024;

/// The devices and host memory, as they are now.
pub trait MemoryProbe: Send + Sync {
    /// GPUs layers can go to; empty for a CPU-only build or machine.
    fn devices(&self) -> Vec<Device>;
    /// Host memory now (`None`: not known, not checked).
    fn host_memory(&self) -> Option<HostMemory>;
}

/// No devices and no host figure: the supervisor counts models only (tests, RPC).
#[derive(Debug, Default)]
pub struct NoProbe;

impl MemoryProbe for NoProbe {
    fn devices(&self) -> Vec<Device> {
        Vec::new()
    }
    fn host_memory(&self) -> Option<HostMemory> {
        None
    }
}

/// The real machine: llama.cpp's device registry and the kernel's available memory.
#[derive(Debug, Default)]
pub struct LlamaMemory;

impl MemoryProbe for LlamaMemory {
    fn devices(&self) -> Vec<Device> {
        crate::llm::devices::accelerators().unwrap_or_else(|error| {
            tracing::warn!(%error, "no GPU list from llama.cpp; loading on the CPU");
            Vec::new()
        })
    }
    fn host_memory(&self) -> Option<HostMemory> {
        crate::llm::devices::host_memory()
    }
}

/// A model's part on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceShare {
    pub index: usize,
    /// ggml's device name (`CUDA0`).
    pub name: String,
    pub bytes: u64,
    pub layers: u32,
    /// Layers the model has that could go to a device (repeating layers and the output layer).
    pub of_layers: u32,
}

/// What a loaded model holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelMemory {
    pub host_bytes: u64,
    pub device: Option<DeviceShare>,
}

impl ModelMemory {
    pub fn device_bytes(&self) -> u64 {
        self.device.as_ref().map_or(0, |share| share.bytes)
    }

    pub fn total(&self) -> u64 {
        self.host_bytes + self.device_bytes()
    }

    fn on_device(&self, index: usize) -> u64 {
        self.device.as_ref().filter(|share| share.index == index).map_or(0, |share| share.bytes)
    }
}

/// A decided placement and what it will hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub placement: LayerPlacement,
    pub memory: ModelMemory,
    /// Layers the model would have on a device if it went there whole; compared with what a
    /// later request asks (`num_gpu`) to decide whether it must be loaded again.
    pub offloadable: u32,
}

/// Why a placement cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoesNotFit {
    pub device: String,
    pub layers: u32,
    pub need: u64,
    pub room: u64,
    /// The room once every model holding memory on the device is unloaded: when `need` fits
    /// it, the refusal is for now only (models still answering hold the memory).
    pub room_when_idle: u64,
}

impl DoesNotFit {
    /// Whether the placement fits once the models now holding the device are idle and
    /// unloaded, so that a retry later may succeed.
    pub fn fits_when_idle(&self) -> bool {
        self.need <= self.room_when_idle
    }
}

/// The outcome of one planning round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Load it so.
    Load(Placed),
    /// It does not fit device `index` whole: evicting an idle model there may let it;
    /// `fallback` is what to load when none is idle.
    Evict { index: usize, fallback: Result<Placed, DoesNotFit> },
}

/// Where a model goes, given the devices, what loaded models hold on each (`held`), and the
/// layers asked for (`None`: as many as fit). With no device, or 0 layers asked, everything
/// is on the host.
pub fn place(
    estimate: &MemoryEstimate,
    devices: &[Device],
    held: &[ModelMemory],
    asked: Option<u32>,
) -> Plan {
    let offloadable = estimate.offloadable_layers();
    let host = |split: Split| Placed {
        placement: if devices.is_empty() { LayerPlacement::LlamaDefault } else { LayerPlacement::Cpu },
        memory: ModelMemory { host_bytes: split.host_bytes, device: None },
        offloadable,
    };
    let held_on = |device: &Device| held.iter().map(|m| m.on_device(device.index)).sum::<u64>();
    let room = |device: &Device| {
        device.free.min(device.total.saturating_sub(held_on(device))).saturating_sub(DEVICE_HEADROOM)
    };
    let Some(device) = devices.iter().max_by_key(|device| room(device)) else {
        return Plan::Load(host(estimate.split(0)));
    };
    if asked == Some(0) {
        return Plan::Load(host(estimate.split(0)));
    }
    let room_now = room(device);
    let on_device = |split: Split| {
        if split.layers == 0 {
            return host(split);
        }
        Placed {
            placement: LayerPlacement::Device { index: device.index, layers: split.layers },
            memory: ModelMemory {
                host_bytes: split.host_bytes,
                device: Some(DeviceShare {
                    index: device.index,
                    name: device.name.clone(),
                    bytes: split.device_bytes,
                    layers: split.layers,
                    of_layers: offloadable,
                }),
            },
            offloadable,
        }
    };
    let wanted = estimate.split(asked.unwrap_or(offloadable));
    if wanted.device_bytes <= room_now {
        return Plan::Load(on_device(wanted));
    }
    let fallback = match asked {
        None => Ok(on_device(estimate.most_layers_within(room_now))),
        Some(_) => Err(DoesNotFit {
            device: format!("{} ({})", device.name, device.description),
            layers: wanted.layers,
            need: wanted.device_bytes,
            room: room_now,
            room_when_idle: (device.free + held_on(device)).min(device.total).saturating_sub(DEVICE_HEADROOM),
        }),
    };
    Plan::Evict { index: device.index, fallback }
}

/// [`place`] for a model loaded alone (`llamay run`): nothing to evict.
pub fn place_alone(estimate: &MemoryEstimate, devices: &[Device], asked: Option<u32>) -> Result<Placed, DoesNotFit> {
    match place(estimate, devices, &[], asked) {
        Plan::Load(placed) => Ok(placed),
        Plan::Evict { fallback, .. } => fallback,
    }
}

/// Host room for a new model: the smaller of what the kernel reports available and its total
/// less what loaded models hold (mapped weights count as available to the kernel), plus what
/// this round's evictions released.
pub fn host_room(host: HostMemory, held: &[ModelMemory], released: u64) -> u64 {
    let held: u64 = held.iter().map(|m| m.host_bytes).sum();
    (host.available + released).min(host.total.saturating_sub(held))
}

/// `1.5 GiB`, `300 MiB`: device memory as the errors and the banner give it.
pub fn human_binary(bytes: u64) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    let bytes = bytes as f64;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes / GIB)
    } else {
        format!("{:.0} MiB", bytes / (1024.0 * 1024.0))
    }
}

impl std::fmt::Display for DoesNotFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} layers on {} need {} of device memory and {} is free after unloading idle models; ask fewer layers (-ngl / num_gpu), or leave them unset to fit what there is room for",
            self.layers,
            self.device,
            human_binary(self.need),
            human_binary(self.room)
        )
    }
}

/// Device facts for tests without a GPU.
#[cfg(test)]
pub mod testing {
    use super::*;

    pub const MIB: u64 = 1024 * 1024;
    pub const GIB: u64 = 1024 * MIB;

    /// A GPU that reports its total as free: only the supervisor's own accounting fills it.
    /// `host`: the host's total (and available) memory, when it is to be checked.
    pub struct FakeGpu {
        pub total: u64,
        pub host: Option<u64>,
    }

    impl MemoryProbe for FakeGpu {
        fn devices(&self) -> Vec<Device> {
            vec![Device {
                index: 1,
                name: "FAKE0".into(),
                description: "Fake GPU".into(),
                backend: "FAKE".into(),
                free: self.total,
                total: self.total,
            }]
        }
        fn host_memory(&self) -> Option<HostMemory> {
            self.host.map(|total| HostMemory { available: total, total })
        }
    }

    /// A model of `layers` equal repeating layers of `layer_mib` (weights and KV), an output
    /// layer of the same size, a 100 MiB compute buffer of which 20 MiB logits.
    pub fn estimate(layers: usize, layer_mib: u64) -> MemoryEstimate {
        MemoryEstimate {
            input_weights: 10 * MIB,
            layer_weights: vec![layer_mib * MIB / 2; layers + 1],
            output_copy: 0,
            layer_kv: std::iter::repeat_n(layer_mib * MIB / 2, layers).chain([0]).collect(),
            graph: 100 * MIB,
            graph_logits: 20 * MIB,
            output_buffer: MIB,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{estimate, FakeGpu, GIB, MIB};
    use super::*;

    fn fake_devices(total: u64) -> Vec<Device> {
        FakeGpu { total, host: None }.devices()
    }

    #[test]
    fn a_model_alone_gets_the_layers_that_fit() {
        let devices = fake_devices(2 * GIB);
        // 24 layers of 100 MiB and a 100 MiB compute buffer: 2.4 GiB whole, 1.5 GiB of room.
        let model = estimate(23, 100);
        let auto = place_alone(&model, &devices, None).expect("auto always places");
        let share = auto.memory.device.clone().expect("some layers on the device");
        assert!(share.layers > 0 && share.layers < 24 && share.bytes <= 2 * GIB - DEVICE_HEADROOM, "{share:?}");
        assert_eq!(auto.placement, LayerPlacement::Device { index: 1, layers: share.layers });
        assert!(model.split(share.layers + 1).device_bytes > 2 * GIB - DEVICE_HEADROOM, "one more would not fit");
        let cpu = place_alone(&model, &devices, Some(0)).unwrap();
        assert_eq!((cpu.placement, cpu.memory.device_bytes(), cpu.memory.host_bytes), (LayerPlacement::Cpu, 0, model.total()));
        let refused = place_alone(&model, &devices, Some(24)).unwrap_err();
        assert_eq!((refused.layers, refused.need), (24, model.split(24).device_bytes));
        let message = refused.to_string();
        assert!(message.contains("24 layers on FAKE0 (Fake GPU) need 2.4 GiB") && message.contains("1.5 GiB is free"), "{message}");
        assert_eq!(place_alone(&model, &devices, Some(5)).unwrap().memory.device.unwrap().layers, 5);
    }

    #[test]
    fn without_a_device_llama_cpp_keeps_its_default() {
        let model = estimate(3, 10);
        let placed = place_alone(&model, &[], Some(99)).unwrap();
        assert_eq!(placed.placement, LayerPlacement::LlamaDefault, "nothing changes on a CPU-only machine");
        assert_eq!(placed.memory, ModelMemory { host_bytes: model.total(), device: None });
    }

    #[test]
    fn room_counts_what_loaded_models_hold() {
        let devices = fake_devices(4 * GIB);
        let held = ModelMemory {
            host_bytes: 0,
            device: Some(DeviceShare { index: 1, name: "FAKE0".into(), bytes: 3 * GIB, layers: 9, of_layers: 9 }),
        };
        let model = estimate(8, 100);
        match place(&model, &devices, &[held.clone()], None) {
            Plan::Evict { index, fallback } => {
                assert_eq!(index, 1);
                let placed = fallback.unwrap();
                assert!(placed.memory.device_bytes() <= GIB - DEVICE_HEADROOM, "{placed:?}");
            }
            other => panic!("expected eviction first: {other:?}"),
        }
        // Asked for every layer while the busy model holds 3 GiB: it fits once that one is
        // idle and unloaded, so the refusal is for now only.
        match place(&model, &devices, &[held.clone()], Some(9)) {
            Plan::Evict { fallback: Err(busy), .. } => assert!(busy.fits_when_idle(), "{busy:?}"),
            other => panic!("expected a refusal: {other:?}"),
        }
        // Forty layers never fit 4 GiB, whatever is unloaded.
        let refused = place_alone(&estimate(40, 100), &devices, Some(41)).unwrap_err();
        assert!(!refused.fits_when_idle(), "{refused:?}");
        let host = HostMemory { available: 10 * GIB, total: 2 * GIB };
        assert_eq!(host_room(host, &[ModelMemory { host_bytes: GIB, device: None }], 0), GIB);
        assert_eq!(host_room(HostMemory { available: MIB, total: 8 * GIB }, &[], 3 * MIB), 4 * MIB);
    }
}
