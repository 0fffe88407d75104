//! Models split across machines on llama.cpp's RPC backend (ggml-rpc): the worker side
//! ([`serve_worker`], this machine's CPU served to a coordinator) and the coordinator side
//! ([`connect`] once per process, then every [`super::Model`] load spreads its layers between
//! the local CPU and the workers by free memory, see [`RpcPlan::layer_split`]).
//!
//! ggml reaches its RPC entry points by name (`ggml_backend_reg_get_proc_address`), so they are
//! looked up at run time, as llama.cpp's own tools do. ggml aborts the process when it cannot
//! connect to a worker, so every worker is first checked here with a plain TCP connect.
//! ggml's RPC client also aborts when a worker is lost in the middle of a computation; that is
//! not recoverable from outside ggml (see [`install_abort_report`]).
//!
//! A coordinator weighs its workers by the free memory each reports, or by `serve -split`
//! ratios, and hands llama.cpp those weights as the model's `tensor_split` over the workers'
//! devices ([`RpcPlan::tensor_split`]): llama.cpp's own placement, nothing of ggml patched.
//!
//! Cost: one TCP probe and one handshake per worker at start-up; at decode time every
//! split layer boundary is a network round trip (measured in `benches/rpc_split.rs`).

use std::ffi::{c_char, c_void, CStr, CString};
use std::net::{Ipv4Addr, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use llama_cpp_sys_2 as sys;

use super::backend;
use super::offload::BlockBytes;
use crate::gguf::read_gguf_header;

/// ggml's limit on RPC servers in one process (`GGML_RPC_MAX_SERVERS`).
pub const MAX_WORKERS: usize = 16;

/// How long a worker has to accept the reachability probe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("this build of llama.cpp has no RPC backend (it must be built with GGML_RPC=ON)")]
    NotCompiled,
    #[error("RPC address {addr:?} is not valid: expected {expected}")]
    BadAddress {
        addr: String,
        expected: &'static str,
    },
    #[error(
        "{addr} is not a loopback address: the RPC protocol has no authentication, so a worker \
         listens beyond this machine only with -allow-remote, on a trusted network"
    )]
    NotLoopback { addr: String },
    #[error("RPC worker {worker} is unreachable: {reason}")]
    Unreachable { worker: String, reason: String },
    #[error("RPC worker {worker} offers no device")]
    NoDevice { worker: String },
    #[error("RPC worker could not listen on {addr}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("at most {MAX_WORKERS} RPC workers, got {count}")]
    TooMany { count: usize },
    #[error("RPC workers are already connected as {current:?}; a process has one set")]
    AlreadyConnected { current: Vec<String> },
    #[error("{path}: cannot read the layer count for an RPC split: {reason}")]
    LayerCount { path: String, reason: String },
    #[error("split {given:?} is not valid: {reason}")]
    BadSplit { given: Vec<f64>, reason: String },
}

/// Whether llama.cpp was compiled with the RPC backend.
pub fn supported() -> bool {
    // SAFETY: a pure query of compile-time facts.
    unsafe { sys::llama_supports_rpc() }
}

/// The RPC backend's registry entry and one of its entry points by name.
fn rpc_proc(name: &CStr) -> Result<*mut c_void, RpcError> {
    if !supported() {
        return Err(RpcError::NotCompiled);
    }
    backend::get();
    // SAFETY: both take NUL-terminated names and return null when absent.
    let reg = unsafe { sys::ggml_backend_reg_by_name(c"RPC".as_ptr()) };
    if reg.is_null() {
        return Err(RpcError::NotCompiled);
    }
    // SAFETY: `reg` is the live RPC registry just found; `name` is NUL-terminated.
    let address = unsafe { sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr()) };
    if address.is_null() {
        return Err(RpcError::NotCompiled);
    }
    Ok(address)
}

/// `ggml_backend_rpc_start_server(endpoint, cache_dir, n_threads, n_devices, devices)`.
type StartServerFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, usize, *mut sys::ggml_backend_dev_t);
/// `ggml_backend_rpc_add_server(endpoint) -> ggml_backend_reg_t`.
type AddServerFn = unsafe extern "C" fn(*const c_char) -> sys::ggml_backend_reg_t;

/// The address a worker listens on: ggml binds IPv4 literals only, so `localhost` becomes
/// 127.0.0.1. A non-loopback address needs `allow_remote`.
pub fn worker_listen_address(addr: &str, allow_remote: bool) -> Result<String, RpcError> {
    let bad = || RpcError::BadAddress {
        addr: addr.to_string(),
        expected: "IPV4:PORT, such as 127.0.0.1:50052",
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let ip: Ipv4Addr = if host == "localhost" {
        Ipv4Addr::LOCALHOST
    } else {
        host.parse().map_err(|_| bad())?
    };
    if !ip.is_loopback() && !allow_remote {
        return Err(RpcError::NotLoopback {
            addr: addr.to_string(),
        });
    }
    Ok(format!("{ip}:{port}"))
}

/// Serves this machine's CPU backend to coordinators until the process ends (ggml's server
/// loop never returns once it listens). `threads` is the CPU backend's thread count.
/// Coordinators are told this machine's free memory, as ggml's server reports it.
pub fn serve_worker(listen: &str, threads: usize) -> Result<(), RpcError> {
    let start: StartServerFn = {
        let address = rpc_proc(c"ggml_backend_rpc_start_server")?;
        // SAFETY: ggml registers this name for exactly this signature (ggml-rpc.h).
        unsafe { std::mem::transmute::<*mut c_void, StartServerFn>(address) }
    };
    // ggml only prints when it cannot bind and then returns; a bind here first names the reason.
    std::net::TcpListener::bind(listen).map_err(|e| RpcError::Listen {
        addr: listen.to_string(),
        reason: e.to_string(),
    })?;
    // SAFETY: a query of the registered devices.
    let mut cpu = unsafe { sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU) };
    if cpu.is_null() {
        return Err(RpcError::Listen {
            addr: listen.to_string(),
            reason: "no CPU backend".into(),
        });
    }
    let endpoint = CString::new(listen).map_err(|_| RpcError::BadAddress {
        addr: listen.to_string(),
        expected: "no NUL byte",
    })?;
    // SAFETY: `endpoint` and `cpu` outlive the call, which blocks while serving.
    unsafe {
        start(
            endpoint.as_ptr(),
            std::ptr::null(),
            threads.max(1),
            1,
            &mut cpu,
        )
    };
    Err(RpcError::Listen {
        addr: listen.to_string(),
        reason: "ggml's RPC server stopped".into(),
    })
}

/// One connected worker: its endpoint and the ggml device index that stands for it.
#[derive(Debug, Clone)]
pub struct RpcWorker {
    pub endpoint: String,
    device_index: usize,
    /// What the worker reported when it connected (its machine's memory).
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// This worker's weight among the workers: its free memory, or its `-split` ratio.
    weight: f64,
}

/// The workers this process splits models over.
#[derive(Debug)]
pub struct RpcPlan {
    pub workers: Vec<RpcWorker>,
    /// `-split`: local CPU first, then one ratio per worker. `None`: by free memory.
    pub ratios: Option<Vec<f64>>,
}

/// Where a model's layers are: the local CPU's range and each worker's (blocks numbered from 0;
/// the output layer counts as block `n_layer`).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSplit {
    pub local: Range<u32>,
    pub workers: Vec<(String, Range<u32>)>,
    /// Weight bytes each holds, local CPU first (the input embeddings always stay local), as
    /// the GGUF's tensor sizes add up; empty until [`LayerSplit::with_bytes`].
    pub bytes: Vec<u64>,
}

impl std::fmt::Display for LayerSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let range = |r: &Range<u32>| {
            if r.is_empty() {
                "none".to_string()
            } else {
                format!("layers {}-{}", r.start, r.end - 1)
            }
        };
        let mib = |index: usize| match self.bytes.get(index) {
            Some(bytes) => format!(" ({} MiB)", bytes.div_ceil(1024 * 1024)),
            None => String::new(),
        };
        write!(f, "local CPU {}{}", range(&self.local), mib(0))?;
        for (index, (endpoint, layers)) in self.workers.iter().enumerate() {
            write!(f, ", {endpoint} {}{}", range(layers), mib(index + 1))?;
        }
        Ok(())
    }
}

impl LayerSplit {
    /// Adds the bytes each part holds, from [`BlockBytes`] of the same model.
    pub fn with_bytes(mut self, blocks: &BlockBytes) -> Self {
        let sum = |range: &Range<u32>| -> u64 {
            range
                .clone()
                .map(|b| blocks.per_block.get(b as usize).copied().unwrap_or(0))
                .sum()
        };
        let mut bytes = vec![blocks.input + sum(&self.local)];
        bytes.extend(self.workers.iter().map(|(_, range)| sum(range)));
        self.bytes = bytes;
        self
    }
}

static PLAN: OnceLock<RpcPlan> = OnceLock::new();

/// The workers [`connect`] set up, if any.
pub fn plan() -> Option<&'static RpcPlan> {
    PLAN.get()
}

/// Checks `-split` ratios against the workers: one for the local CPU, then one per worker, each
/// finite and not negative, not all zero.
pub fn check_split(ratios: &[f64], workers: usize) -> Result<(), RpcError> {
    let bad = |reason: String| RpcError::BadSplit {
        given: ratios.to_vec(),
        reason,
    };
    if ratios.len() != workers + 1 {
        return Err(bad(format!(
            "expected {} ratios (the local CPU first, then each of the {workers} RPC workers in -rpc order), got {}",
            workers + 1,
            ratios.len()
        )));
    }
    if let Some(ratio) = ratios.iter().find(|r| !r.is_finite() || **r < 0.0) {
        return Err(bad(format!("{ratio} is not a ratio (a number 0 or more)")));
    }
    if ratios.iter().sum::<f64>() <= 0.0 {
        return Err(bad(
            "all ratios are zero: no device would hold a layer".into()
        ));
    }
    Ok(())
}

/// Checks that every worker accepts a TCP connection, then hands them to ggml (which aborts
/// the process on a worker it cannot reach, hence the check first). Once per process.
/// `ratios` (`-split`, see [`check_split`]) replaces the split by free memory.
pub fn connect(endpoints: &[String], ratios: Option<&[f64]>) -> Result<&'static RpcPlan, RpcError> {
    if let Some(ratios) = ratios {
        check_split(ratios, endpoints.len())?;
    }
    if let Some(plan) = PLAN.get() {
        let current: Vec<String> = plan.workers.iter().map(|w| w.endpoint.clone()).collect();
        if current == endpoints {
            return Ok(plan);
        }
        return Err(RpcError::AlreadyConnected { current });
    }
    if endpoints.len() > MAX_WORKERS {
        return Err(RpcError::TooMany {
            count: endpoints.len(),
        });
    }
    let add: AddServerFn = {
        let address = rpc_proc(c"ggml_backend_rpc_add_server")?;
        // SAFETY: ggml registers this name for exactly this signature (ggml-rpc.h).
        unsafe { std::mem::transmute::<*mut c_void, AddServerFn>(address) }
    };
    let mut workers = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        probe(endpoint)?;
        let name = CString::new(endpoint.as_str()).map_err(|_| RpcError::BadAddress {
            addr: endpoint.clone(),
            expected: "no NUL byte",
        })?;
        // SAFETY: `name` is NUL-terminated; ggml copies it. The worker answered a connect above.
        let reg = unsafe { add(name.as_ptr()) };
        if reg.is_null() {
            return Err(RpcError::NoDevice {
                worker: endpoint.clone(),
            });
        }
        // The registry makes the worker's device visible to llama.cpp's device list.
        // SAFETY: `reg` is the live registry entry ggml returned; registering it once.
        let device = unsafe {
            sys::ggml_backend_register(reg);
            if sys::ggml_backend_reg_dev_count(reg) == 0 {
                return Err(RpcError::NoDevice {
                    worker: endpoint.clone(),
                });
            }
            sys::ggml_backend_reg_dev_get(reg, 0)
        };
        // SAFETY: queries of ggml's device list, with indices below its count.
        let device_index = (0..unsafe { sys::ggml_backend_dev_count() })
            // SAFETY: as above.
            .find(|&i| unsafe { sys::ggml_backend_dev_get(i) } == device)
            .ok_or_else(|| RpcError::NoDevice {
                worker: endpoint.clone(),
            })?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: `device` is live; the call asks the worker over the connection ggml holds.
        unsafe { sys::ggml_backend_dev_memory(device, &mut free, &mut total) };
        workers.push(RpcWorker {
            endpoint: endpoint.clone(),
            device_index,
            free_bytes: free as u64,
            total_bytes: total as u64,
            // `-split` names the local CPU first, so this worker's ratio is at its index + 1.
            weight: ratios.map_or(free as f64, |ratios| ratios.get(workers.len() + 1).copied().unwrap_or(0.0)),
        });
    }
    Ok(PLAN.get_or_init(|| RpcPlan {
        workers,
        ratios: ratios.map(<[f64]>::to_vec),
    }))
}

/// Every worker checked with a TCP connect (no ggml: safe in a process that must not abort);
/// the first that does not answer is the error.
pub fn check_reachable(endpoints: &[String]) -> Result<(), RpcError> {
    endpoints.iter().try_for_each(|endpoint| probe(endpoint))
}

/// A TCP connect to `endpoint` (host:port), so an unreachable worker is an error naming it.
fn probe(endpoint: &str) -> Result<(), RpcError> {
    let unreachable = |reason: String| RpcError::Unreachable {
        worker: endpoint.to_string(),
        reason,
    };
    let addresses: Vec<_> = endpoint
        .to_socket_addrs()
        .map_err(|e| RpcError::BadAddress {
            addr: format!("{endpoint} ({e})"),
            expected: "host:port",
        })?
        .filter(|a| a.is_ipv4())
        .collect();
    let mut last = String::from("no IPv4 address");
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{address}: {e}"),
        }
    }
    Err(unreachable(last))
}

/// Free memory of this machine's CPU device, the local share of a split.
fn local_free_bytes() -> u64 {
    // SAFETY: a query of the registered CPU device.
    unsafe {
        let cpu = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if cpu.is_null() {
            return 0;
        }
        let (mut free, mut total) = (0usize, 0usize);
        sys::ggml_backend_dev_memory(cpu, &mut free, &mut total);
        free as u64
    }
}

impl RpcPlan {
    /// ggml device indices of the workers, in order (for the model params' device list).
    pub fn device_indices(&self) -> Vec<usize> {
        self.workers.iter().map(|w| w.device_index).collect()
    }

    /// Each worker's share of the offloaded layers, in the order of [`RpcPlan::device_indices`]
    /// (llama.cpp's `tensor_split`, which it normalises).
    pub fn tensor_split(&self) -> Vec<f32> {
        self.workers.iter().map(|w| w.weight as f32).collect()
    }

    /// Layers offloaded to the workers (llama.cpp's `n_gpu_layers`): the workers' share of all
    /// free memory (theirs and this machine's) of the `n_layer + 1` blocks (output included).
    /// With `-split` ratios, the workers' share of the ratios instead.
    pub fn offloaded_layers(&self, n_layer: u32) -> u32 {
        let blocks = u64::from(n_layer) + 1;
        if let Some(ratios) = &self.ratios {
            let total: f64 = ratios.iter().sum();
            let remote: f64 = ratios.iter().skip(1).sum();
            if total <= 0.0 {
                return 0;
            }
            return ((blocks as f64 * remote / total).round() as u64).min(blocks) as u32;
        }
        let remote: u64 = self.workers.iter().map(|w| w.free_bytes).sum();
        let total = remote + local_free_bytes();
        if total == 0 {
            return 0;
        }
        ((blocks * remote + total / 2) / total).min(blocks) as u32
    }

    /// Where llama.cpp puts each block for `offloaded` layers on these workers: the first
    /// blocks stay local, the rest go to the workers in proportion to their free memory
    /// (llama.cpp's own rule in `load_tensors`).
    pub fn layer_split(&self, n_layer: u32, offloaded: u32) -> LayerSplit {
        let blocks = n_layer + 1;
        let first_remote = blocks.saturating_sub(offloaded);
        // As llama.cpp: running sums of f32 weights, divided by the total.
        let mut bounds = Vec::with_capacity(self.workers.len());
        let mut running = 0.0f32;
        for worker in &self.workers {
            running += worker.weight as f32;
            bounds.push(running);
        }
        if running > 0.0 {
            bounds.iter_mut().for_each(|b| *b /= running);
        } else {
            let count = self.workers.len() as f32;
            bounds
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i + 1) as f32 / count);
        }
        let mut ranges: Vec<Range<u32>> = vec![blocks..blocks; self.workers.len()];
        for block in first_remote..blocks {
            let position = (block - first_remote) as f32 / offloaded.max(1) as f32;
            let index = bounds
                .iter()
                .position(|&b| b > position)
                .unwrap_or(self.workers.len().saturating_sub(1));
            if let Some(range) = ranges.get_mut(index) {
                if range.start == range.end {
                    *range = block..block + 1;
                } else {
                    range.end = block + 1;
                }
            }
        }
        LayerSplit {
            local: 0..first_remote,
            workers: self
                .workers
                .iter()
                .map(|w| w.endpoint.clone())
                .zip(ranges)
                .collect(),
            bytes: Vec::new(),
        }
    }
}

/// `<architecture>.block_count` of the GGUF at `path` and the bytes of each part, from its
/// header.
pub fn block_count(path: &Path, architecture: &str) -> Result<(u32, BlockBytes), RpcError> {
    let fail = |reason: &str| RpcError::LayerCount {
        path: path.display().to_string(),
        reason: reason.to_string(),
    };
    let header = read_gguf_header(path).map_err(|error| fail(&error.kind.to_string()))?;
    let count = header
        .uint(&format!("{architecture}.block_count"))
        .and_then(|count| u32::try_from(count).ok())
        .ok_or_else(|| fail("no u32 block_count key"))?;
    let tensors = header.tensors();
    let bytes = BlockBytes::from_tensors(count, tensors.iter().map(|(n, b)| (n.as_str(), *b)));
    Ok((count, bytes))
}

/// ggml's RPC client aborts the process when a worker is lost mid-computation (its
/// `RPC_STATUS_ASSERT`); ggml gives no way to fail just that call. This routes the abort's
/// message into the log, naming the workers, before the process ends, so a service manager's
/// log says why the daemon stopped.
pub fn install_abort_report() {
    /// # Safety
    /// Called by ggml only, with `message` null or a NUL-terminated string; it never unwinds
    /// (nothing in it panics across the boundary: lossy text, a poisoned-free read, eprintln).
    unsafe extern "C" fn report(message: *const c_char) {
        let text = if message.is_null() {
            String::new()
        } else {
            // SAFETY: ggml passes a NUL-terminated buffer that lives for this call.
            unsafe { CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        };
        let workers: Vec<&str> = PLAN
            .get()
            .map(|p| p.workers.iter().map(|w| w.endpoint.as_str()).collect())
            .unwrap_or_default();
        eprintln!("llamay: llama.cpp aborted: {text} (RPC workers: {}); a lost RPC worker ends the process computing with it", workers.join(", "));
    }
    // SAFETY: `report` matches ggml_abort_callback_t and never unwinds.
    unsafe {
        sys::ggml_set_abort_callback(Some(report));
    }
}

#[cfg(test)]
mod tests;
