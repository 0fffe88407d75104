//! A `llama_model` loaded from a GGUF file, freed on drop, and the vocabulary and metadata
//! queries llamay makes of it.

use std::ffi::{c_char, CString};
use std::path::Path;
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use crate::llm::LlmError;

/// Where a model's layers go: `devices` are ggml device indices (empty: llama.cpp's choice),
/// `gpu_layers` how many layers leave the CPU (`None`: llama.cpp's default), `tensor_split` the
/// share of those layers each device gets, in the order of `devices` (empty: by free memory).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSettings {
    pub devices: Vec<usize>,
    pub gpu_layers: Option<u32>,
    pub tensor_split: Vec<f32>,
}

pub struct RawModel {
    model: NonNull<sys::llama_model>,
}

// SAFETY: llama.cpp's model is immutable after loading and documented safe to share between
// threads (contexts on different threads use one model); it is freed once, on drop.
unsafe impl Send for RawModel {}
// SAFETY: as above; every method here only reads the model.
unsafe impl Sync for RawModel {}

impl Drop for RawModel {
    fn drop(&mut self) {
        // SAFETY: created by `llama_model_load_from_file` and freed exactly once; contexts
        // borrow the model, so none outlives it.
        unsafe { sys::llama_model_free(self.model.as_ptr()) };
    }
}

impl RawModel {
    /// Loads `path` (already checked to be a GGUF) with its layers where `settings` say. The
    /// backend must be initialised first.
    pub fn load(path: &Path, settings: &ModelSettings) -> Result<Self, LlmError> {
        let not_a_model = |reason: String| LlmError::NotAModel { path: path.to_path_buf(), reason };
        let c_path = path
            .to_str()
            .and_then(|p| CString::new(p).ok())
            .ok_or_else(|| not_a_model("its path is not UTF-8 without NUL bytes".into()))?;
        // SAFETY: a plain C call that returns a struct by value.
        let mut params = unsafe { sys::llama_model_default_params() };
        // SAFETY: plain C calls; llama.cpp's device list is fixed once the backend is loaded.
        let (max_devices, device_count) = unsafe { (sys::llama_max_devices(), sys::ggml_backend_dev_count()) };
        if settings.devices.len() > max_devices || settings.tensor_split.len() > max_devices {
            return Err(LlmError::Config(format!("llama.cpp takes at most {max_devices} devices")));
        }
        // llama.cpp reads the device list up to its null terminator.
        let mut devices = Vec::with_capacity(settings.devices.len() + 1);
        for &index in &settings.devices {
            if index >= device_count {
                return Err(LlmError::Config(format!("there is no ggml device {index} (this build has {device_count})")));
            }
            // SAFETY: the index is below the device count.
            devices.push(unsafe { sys::ggml_backend_dev_get(index) });
        }
        devices.push(std::ptr::null_mut());
        if settings.devices.is_empty() {
            params.devices = std::ptr::null_mut();
        } else {
            params.devices = devices.as_mut_ptr();
        }
        // llama.cpp reads `llama_max_devices()` floats from the split, when there is one.
        let mut tensor_split = vec![0.0f32; max_devices];
        if !settings.tensor_split.is_empty() {
            tensor_split[..settings.tensor_split.len()].copy_from_slice(&settings.tensor_split);
            params.tensor_split = tensor_split.as_ptr();
        }
        // Weights stay in the file's layout. llama.cpp's CPU build can repack some types (Q4_K
        // here) for a kernel that takes rows four at a time, whose rounding differs from the
        // one-row kernel on some inputs only: a draft verified in such a batch could then tip a
        // near tie, and no short measurement finds those inputs. Measured on Gemma 3 270M, two
        // threads: one-row decodes 3.6% slower, accelerated extraction answers equal to plain
        // decoding's on 20 of 20 prompts instead of 10.
        params.use_extra_bufts = false;
        if let Some(layers) = settings.gpu_layers {
            params.n_gpu_layers = i32::try_from(layers).unwrap_or(i32::MAX);
        }
        // SAFETY: `c_path` is NUL-terminated; `devices` and `tensor_split`, which `params` points
        // into, live until the call returns (llama.cpp copies what it keeps).
        let model = unsafe { sys::llama_model_load_from_file(c_path.as_ptr(), params) };
        let model = NonNull::new(model).ok_or_else(|| not_a_model("llama.cpp could not load it (its log says why)".into()))?;
        Ok(Self { model })
    }

    pub(super) fn as_ptr(&self) -> *mut sys::llama_model {
        self.model.as_ptr()
    }

    fn vocab(&self) -> *const sys::llama_vocab {
        // SAFETY: the model is alive; the vocabulary lives as long as the model.
        unsafe { sys::llama_model_get_vocab(self.model.as_ptr()) }
    }

    pub fn n_tokens(&self) -> u32 {
        // SAFETY: the vocabulary is the live model's.
        unsafe { sys::llama_vocab_n_tokens(self.vocab()) }.max(0) as u32
    }

    pub fn is_end_of_generation(&self, token: u32) -> bool {
        // SAFETY: as `n_tokens`; llama.cpp looks ids up in range-checked tables.
        token < self.n_tokens() && unsafe { sys::llama_vocab_is_eog(self.vocab(), token as i32) }
    }

    pub fn is_control(&self, token: u32) -> bool {
        // SAFETY: as `is_end_of_generation`.
        token < self.n_tokens() && unsafe { sys::llama_vocab_is_control(self.vocab(), token as i32) }
    }

    /// The begin-of-sequence token, when the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        // SAFETY: as `n_tokens`.
        let bos = unsafe { sys::llama_vocab_bos(self.vocab()) };
        u32::try_from(bos).ok().filter(|&t| t < self.n_tokens())
    }

    pub fn eos(&self) -> Option<u32> {
        // SAFETY: as `n_tokens`.
        let eos = unsafe { sys::llama_vocab_eos(self.vocab()) };
        u32::try_from(eos).ok().filter(|&t| t < self.n_tokens())
    }

    /// The padding token, when the vocabulary names one.
    pub fn pad(&self) -> Option<u32> {
        // SAFETY: as `n_tokens`.
        let pad = unsafe { sys::llama_vocab_pad(self.vocab()) };
        u32::try_from(pad).ok().filter(|&t| t < self.n_tokens())
    }

    pub fn adds_bos(&self) -> bool {
        // SAFETY: as `n_tokens`.
        unsafe { sys::llama_vocab_get_add_bos(self.vocab()) }
    }

    /// The bytes of `token`; with `special`, control tokens render as their text.
    pub fn token_bytes(&self, token: u32, special: bool) -> Vec<u8> {
        if token >= self.n_tokens() {
            return Vec::new();
        }
        let mut buffer = vec![0u8; 32];
        loop {
            // SAFETY: the buffer is writable for its length; llama.cpp writes at most that many
            // bytes and returns the negated size it needs when they do not fit.
            let written = unsafe {
                sys::llama_token_to_piece(
                    self.vocab(),
                    token as i32,
                    buffer.as_mut_ptr().cast::<c_char>(),
                    buffer.len() as i32,
                    0,
                    special,
                )
            };
            match usize::try_from(written) {
                Ok(length) => {
                    buffer.truncate(length);
                    return buffer;
                }
                Err(_) => buffer.resize(written.unsigned_abs() as usize, 0),
            }
        }
    }

    /// Token ids of `text`. `add_special` adds BOS (and EOS) where the vocabulary asks for
    /// them; `parse_special` turns control-token text into those tokens.
    pub fn tokenize(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<u32>, LlmError> {
        let length = i32::try_from(text.len()).map_err(|_| LlmError::Tokenize(format!("a text of {} bytes is too long", text.len())))?;
        let mut tokens: Vec<i32> = vec![0; text.len() / 2 + 8];
        loop {
            // SAFETY: `text` is readable for `length` bytes (no NUL needed); `tokens` is writable
            // for its length, and llama.cpp returns the negated count it needs when it is short.
            let count = unsafe {
                sys::llama_tokenize(
                    self.vocab(),
                    text.as_ptr().cast::<c_char>(),
                    length,
                    tokens.as_mut_ptr(),
                    tokens.len() as i32,
                    add_special,
                    parse_special,
                )
            };
            match usize::try_from(count) {
                Ok(count) => return Ok(tokens[..count].iter().map(|&t| t as u32).collect()),
                Err(_) if count == i32::MIN => {
                    return Err(LlmError::Tokenize("the text has more tokens than llama.cpp can count".into()))
                }
                Err(_) => tokens.resize(count.unsigned_abs() as usize, 0),
            }
        }
    }

    pub fn parameter_count(&self) -> u64 {
        // SAFETY: a query of the live model.
        unsafe { sys::llama_model_n_params(self.model.as_ptr()) }
    }

    pub fn size_bytes(&self) -> u64 {
        // SAFETY: a query of the live model.
        unsafe { sys::llama_model_size(self.model.as_ptr()) }
    }

    pub fn context_train(&self) -> u32 {
        // SAFETY: a query of the live model.
        unsafe { sys::llama_model_n_ctx_train(self.model.as_ptr()) }.max(0) as u32
    }

    /// The width of the model's output embeddings.
    pub fn embedding_width(&self) -> usize {
        // SAFETY: a query of the live model.
        unsafe { sys::llama_model_n_embd_out(self.model.as_ptr()) }.max(0) as usize
    }

    /// The string value of GGUF metadata key `key`, when the model has it.
    pub fn metadata(&self, key: &str) -> Option<String> {
        let key = CString::new(key).ok()?;
        let mut buffer = vec![0u8; 256];
        loop {
            // SAFETY: `key` is NUL-terminated; llama.cpp writes at most `buffer.len()` bytes,
            // NUL included, and returns the full length (or -1 when the key is absent).
            let length = unsafe {
                sys::llama_model_meta_val_str(self.model.as_ptr(), key.as_ptr(), buffer.as_mut_ptr().cast::<c_char>(), buffer.len())
            };
            let length = usize::try_from(length).ok()?;
            if length < buffer.len() {
                buffer.truncate(length);
                return String::from_utf8(buffer).ok();
            }
            buffer.resize(length + 1, 0);
        }
    }
}
