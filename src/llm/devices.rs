//! The accelerators this build of llama.cpp can offload layers to, as ggml's backend device
//! registry lists them (CUDA, Metal, Vulkan, ROCm), with their free and total memory now.
//!
//! Key items: [`Device`], [`accelerators`], [`compiled_backends`], [`host_memory`]. Cost:
//! one registry walk;
//! asking a CUDA device for its free memory is a driver call (microseconds), so callers may
//! ask before every load.

use super::ffi::{self, DeviceKind};
use super::{backend, LlmError};

/// One device layers can go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// ggml's index of the device in its registry (what `LlamaModelParams::with_devices` takes).
    pub index: usize,
    /// ggml's name, unique in the process: `CUDA0`, `Metal`, `Vulkan0`.
    pub name: String,
    /// What the driver calls it: `NVIDIA H100 80GB HBM3`, `Apple M2 Max`.
    pub description: String,
    /// The backend that drives it: `CUDA`, `Metal`, `Vulkan`, `ROCm`.
    pub backend: String,
    pub free: u64,
    pub total: u64,
}

/// The GPU backends compiled into this build (empty: CPU only).
pub fn compiled_backends() -> Vec<&'static str> {
    let mut backends = Vec::new();
    if cfg!(feature = "cuda") {
        backends.push("cuda");
    }
    if cfg!(feature = "metal") || cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        // llama-cpp-sys-2 always builds Metal on Apple silicon.
        backends.push("metal");
    }
    if cfg!(feature = "vulkan") {
        backends.push("vulkan");
    }
    if cfg!(feature = "rocm") {
        backends.push("rocm");
    }
    backends
}

/// The GPUs (discrete or integrated) llama.cpp can use now. RPC workers are not listed: they
/// belong to `serve -rpc`'s split, not to local offload. A build whose llama.cpp libraries
/// were built with a GPU backend (a shared-library build run against them) lists that GPU
/// whatever [`compiled_backends`] says.
pub fn accelerators() -> Result<Vec<Device>, LlmError> {
    backend::get();
    Ok(ffi::devices()
        .into_iter()
        .filter(|device| matches!(device.kind, DeviceKind::Gpu | DeviceKind::IntegratedGpu))
        .filter(|device| !device.backend.eq_ignore_ascii_case("RPC"))
        .map(|device| Device {
            index: device.index,
            name: device.name,
            description: device.description,
            backend: device.backend,
            free: device.free,
            total: device.total,
        })
        .collect())
}

/// The host's memory: what the kernel says a new program could use now without swapping
/// (Linux's `MemAvailable`) and its total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    pub available: u64,
    pub total: u64,
}

/// The host's memory now; `None` where it is not known (not Linux).
pub fn host_memory() -> Option<HostMemory> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = text.lines().find(|line| line.starts_with(name))?;
            let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib * 1024)
        };
        Some(HostMemory { available: field("MemAvailable:")?, total: field("MemTotal:")? })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_never_listed_as_an_accelerator() {
        let accelerators = accelerators().expect("the backend starts");
        let all = ffi::devices();
        assert!(all.iter().any(|device| device.backend == "CPU"), "ggml lists its CPU device: {all:?}");
        assert!(accelerators.iter().all(|device| device.backend != "CPU" && device.total > 0), "{accelerators:?}");
    }

    #[test]
    fn host_memory_is_known_on_linux() {
        if cfg!(target_os = "linux") {
            let host = host_memory().expect("/proc/meminfo is read");
            assert!(host.available > 64 * 1024 * 1024 && host.available <= host.total, "{host:?}");
        }
    }
}
