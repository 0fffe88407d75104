//! A GGUF header read with ggml's own parser (the one llama.cpp loads with), for the facts a
//! memory estimate or a layer split needs: integer hyperparameters, array lengths, and each
//! tensor's name and size in bytes.
//!
//! Key type: [`GgufHeader`]. Cost: ggml reads every key and the tensor table (the tokenizer's
//! strings included: a few milliseconds for a 262k vocabulary), never the tensor data.

use std::ffi::{CStr, CString};
use std::path::Path;

use llama_cpp_sys_2 as sys;

/// A parsed header; freed on drop.
pub struct GgufHeader {
    context: *mut sys::gguf_context,
}

// SAFETY: the context is only read after construction, and ggml's gguf getters keep no state
// between calls; moving it to another thread is sound.
unsafe impl Send for GgufHeader {}

impl GgufHeader {
    /// Parses the header of the file at `path` (no tensor data is read or allocated).
    pub fn open(path: &Path) -> Result<Self, String> {
        // ggml reports a bad file through its log, which the backend routes to tracing.
        let _ = super::super::backend::get();
        let file = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| "path has a NUL byte".to_string())?;
        let params = sys::gguf_init_params { no_alloc: true, ctx: std::ptr::null_mut() };
        // SAFETY: `file` is a NUL-terminated path that outlives the call; with `no_alloc` and no
        // ggml context requested, ggml only reads the header.
        let context = unsafe { sys::gguf_init_from_file(file.as_ptr(), params) };
        if context.is_null() {
            return Err("ggml could not parse its header".into());
        }
        Ok(Self { context })
    }

    fn find(&self, key: &str) -> Option<i64> {
        let key = CString::new(key).ok()?;
        // SAFETY: the context is live; `key` is NUL-terminated.
        let id = unsafe { sys::gguf_find_key(self.context, key.as_ptr()) };
        (id >= 0).then_some(id)
    }

    /// An unsigned integer key (any integer width); `None` when absent or of another type.
    pub fn uint(&self, key: &str) -> Option<u64> {
        let id = self.find(key)?;
        // SAFETY: `id` was found in this context, and each getter is called only for the type
        // the header says the value has (ggml aborts on a mismatch).
        unsafe {
            match sys::gguf_get_kv_type(self.context, id) {
                sys::GGUF_TYPE_UINT8 => Some(u64::from(sys::gguf_get_val_u8(self.context, id))),
                sys::GGUF_TYPE_UINT16 => Some(u64::from(sys::gguf_get_val_u16(self.context, id))),
                sys::GGUF_TYPE_UINT32 => Some(u64::from(sys::gguf_get_val_u32(self.context, id))),
                sys::GGUF_TYPE_UINT64 => Some(sys::gguf_get_val_u64(self.context, id)),
                sys::GGUF_TYPE_INT32 => u64::try_from(sys::gguf_get_val_i32(self.context, id)).ok(),
                sys::GGUF_TYPE_INT64 => u64::try_from(sys::gguf_get_val_i64(self.context, id)).ok(),
                _ => None,
            }
        }
    }

    /// A key that is either one unsigned integer or an array of them (one per layer, as
    /// `attention.head_count_kv` is in some models); `None` when absent or of another type.
    pub fn uints(&self, key: &str) -> Option<Vec<u64>> {
        let id = self.find(key)?;
        // SAFETY: as in `uint`; the array's element type and length come from the header, and
        // the data pointer is read only within that length.
        unsafe {
            if sys::gguf_get_kv_type(self.context, id) != sys::GGUF_TYPE_ARRAY {
                return self.uint(key).map(|value| vec![value]);
            }
            let n = sys::gguf_get_arr_n(self.context, id);
            let data = sys::gguf_get_arr_data(self.context, id);
            if data.is_null() {
                return None;
            }
            match sys::gguf_get_arr_type(self.context, id) {
                sys::GGUF_TYPE_UINT32 => {
                    Some(std::slice::from_raw_parts(data.cast::<u32>(), n).iter().map(|&v| u64::from(v)).collect())
                }
                sys::GGUF_TYPE_INT32 => Some(
                    std::slice::from_raw_parts(data.cast::<i32>(), n).iter().map(|&v| v.max(0) as u64).collect(),
                ),
                _ => None,
            }
        }
    }

    /// The element count of an array key (`tokenizer.ggml.tokens`: the vocabulary size).
    pub fn array_len(&self, key: &str) -> Option<u64> {
        let id = self.find(key)?;
        // SAFETY: `id` was found in this context; the length is asked only of an array.
        unsafe {
            (sys::gguf_get_kv_type(self.context, id) == sys::GGUF_TYPE_ARRAY)
                .then(|| sys::gguf_get_arr_n(self.context, id) as u64)
        }
    }

    /// A string key; `None` when absent or of another type.
    pub fn string(&self, key: &str) -> Option<String> {
        let id = self.find(key)?;
        // SAFETY: the getter is called only for a value the header types as a string; the
        // NUL-terminated text is owned by the context and copied here.
        unsafe {
            if sys::gguf_get_kv_type(self.context, id) != sys::GGUF_TYPE_STRING {
                return None;
            }
            let text = sys::gguf_get_val_str(self.context, id);
            (!text.is_null()).then(|| CStr::from_ptr(text).to_string_lossy().into_owned())
        }
    }

    /// Whether the header has `key`, whatever its type.
    pub fn has(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    /// A boolean key; `None` when absent or of another type.
    pub fn flag(&self, key: &str) -> Option<bool> {
        let id = self.find(key)?;
        // SAFETY: the getter is called only for a value the header types as bool.
        unsafe {
            (sys::gguf_get_kv_type(self.context, id) == sys::GGUF_TYPE_BOOL)
                .then(|| sys::gguf_get_val_bool(self.context, id))
        }
    }

    /// Every tensor's name and size in bytes, in file order.
    pub fn tensors(&self) -> Vec<(String, u64)> {
        // SAFETY: indices are below the count the context reports; names are NUL-terminated
        // strings owned by the context, copied before it is freed.
        unsafe {
            (0..sys::gguf_get_n_tensors(self.context))
                .filter_map(|index| {
                    let name = sys::gguf_get_tensor_name(self.context, index);
                    (!name.is_null()).then(|| {
                        let name = CStr::from_ptr(name).to_string_lossy().into_owned();
                        (name, sys::gguf_get_tensor_size(self.context, index) as u64)
                    })
                })
                .collect()
        }
    }
}

impl Drop for GgufHeader {
    fn drop(&mut self) {
        // SAFETY: the context came from gguf_init_from_file and is freed once, here.
        unsafe { sys::gguf_free(self.context) }
    }
}
