//! The process-wide side of llama.cpp: its one-time initialisation, its log routed into
//! tracing, and ggml's registry of backend devices.
//!
//! llama.cpp and ggml write their log through one callback, a line at a time or in pieces
//! (a `CONT` record continues the line before it). The pieces are joined here and each whole
//! line becomes one tracing event under [`LOG_TARGET`], at the level llama.cpp gave it.
//!
//! Key items: [`init`], [`devices`], [`RawDevice`], [`system_info`]. Cost: a mutex per log record; a registry
//! walk per [`devices`] call (a CUDA device answers its free memory from the driver).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use llama_cpp_sys_2 as sys;

/// The tracing target of llama.cpp's and ggml's own log lines.
pub const LOG_TARGET: &str = "llama.cpp";

/// A log line still being written: its level and text so far.
static PENDING_LINE: Mutex<(sys::ggml_log_level, String)> = Mutex::new((sys::GGML_LOG_LEVEL_INFO, String::new()));

/// Initialises llama.cpp's backends and routes its log into tracing. Call once per process
/// (the caller keeps it behind a `OnceLock`).
pub fn init() {
    // SAFETY: `route_log` is a plain function that lives for the whole process and reads the
    // text only during the call; it ignores the user-data pointer, so null is fine.
    // `llama_log_set` also sets ggml's callback. `llama_backend_init` takes no arguments and
    // is called once, before any model or context exists.
    unsafe {
        sys::llama_log_set(Some(route_log), std::ptr::null_mut());
        sys::llama_backend_init();
    }
}

unsafe extern "C" fn route_log(level: sys::ggml_log_level, text: *const c_char, _user_data: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string that lives for the duration of the call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    // A poisoned lock only means another log call panicked mid-line: keep logging.
    let mut pending = PENDING_LINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if level != sys::GGML_LOG_LEVEL_CONT {
        if !pending.1.is_empty() {
            let line = std::mem::take(&mut pending.1);
            emit(pending.0, &line);
        }
        pending.0 = level;
    }
    pending.1.push_str(&text);
    if pending.1.ends_with('\n') {
        let line = std::mem::take(&mut pending.1);
        emit(pending.0, line.trim_end_matches('\n'));
    }
}

fn emit(level: sys::ggml_log_level, line: &str) {
    match level {
        sys::GGML_LOG_LEVEL_ERROR => tracing::error!(target: LOG_TARGET, "{line}"),
        sys::GGML_LOG_LEVEL_WARN => tracing::warn!(target: LOG_TARGET, "{line}"),
        sys::GGML_LOG_LEVEL_DEBUG => tracing::debug!(target: LOG_TARGET, "{line}"),
        _ => tracing::info!(target: LOG_TARGET, "{line}"),
    }
}

/// llama.cpp's build and CPU features as it reports them (`CPU : AVX2 = 1 | ... | LLAMAFILE =
/// 1 | ...`), to say in a bench which kernels this build can take.
pub fn system_info() -> String {
    // SAFETY: returns a pointer to a static buffer, NUL-terminated, which is copied at once.
    let info = unsafe { CStr::from_ptr(sys::llama_print_system_info()) };
    info.to_string_lossy().trim().to_string()
}

/// What kind of device ggml says a registry entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    IntegratedGpu,
    Accelerator,
    Other,
}

/// One entry of ggml's backend device registry.
#[derive(Debug, Clone)]
pub struct RawDevice {
    pub index: usize,
    pub name: String,
    pub description: String,
    /// The backend that drives it (`CPU`, `CUDA`, `Vulkan`, `RPC`).
    pub backend: String,
    pub kind: DeviceKind,
    pub free: u64,
    pub total: u64,
}

/// Every device in ggml's registry, in its order. [`init`] must have run.
pub fn devices() -> Vec<RawDevice> {
    // SAFETY: the registry is built by `llama_backend_init` and only grows (loading a dynamic
    // backend); indices below the count it reports are valid.
    let count = unsafe { sys::ggml_backend_dev_count() };
    (0..count)
        .map(|index| {
            // SAFETY: `index` is below the count; `props` is filled by ggml before it is read,
            // and its strings are owned by the device, which lives for the process.
            unsafe {
                let device = sys::ggml_backend_dev_get(index);
                let mut props: sys::ggml_backend_dev_props = std::mem::zeroed();
                sys::ggml_backend_dev_get_props(device, &mut props);
                let registry = sys::ggml_backend_dev_backend_reg(device);
                RawDevice {
                    index,
                    name: owned(props.name),
                    description: owned(props.description),
                    backend: owned(sys::ggml_backend_reg_name(registry)),
                    kind: match props.type_ {
                        sys::GGML_BACKEND_DEVICE_TYPE_CPU => DeviceKind::Cpu,
                        sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceKind::Gpu,
                        sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceKind::IntegratedGpu,
                        sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceKind::Accelerator,
                        _ => DeviceKind::Other,
                    },
                    free: props.memory_free as u64,
                    total: props.memory_total as u64,
                }
            }
        })
        .collect()
}

/// A C string ggml owns, copied; empty for null.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string alive during the call.
unsafe fn owned(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}
