//! A loaded GGUF model: weights (mmapped by llama.cpp), its vocabulary as bytes, its chat template.
//!
//! `Model` is `Send + Sync` and shared in an `Arc` between the request side (tokenizing,
//! rendering templates) and the one thread that owns a [`Context`] for decoding.
//! Key type: [`Model`]. Cost: loading maps the file and reads every tensor header
//! (~0.1-0.5 s for the small models here); the vocabulary walk adds 4-30 ms.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;

use super::template::{ChatTemplate, TemplateMessage};
use super::{backend, Context, ContextParams, LlmError, Vocabulary};

pub struct Model {
    inner: LlamaModel,
    vocabulary: Arc<Vocabulary>,
    template: ChatTemplate,
    architecture: String,
    path: PathBuf,
    bos_text: String,
    eos_text: String,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("path", &self.path).field("architecture", &self.architecture).finish()
    }
}

/// Loads the weights at `path` with every tensor in ggml's plain CPU buffer and none in an
/// "extra" buffer type (AMX tiles, repacked blocks), like llama-server's `--no-repack`.
///
/// Why: llama.cpp is built for the CPU it runs on (`target-cpu=native`), and where the CPU
/// reports AMX but the virtual machine does not let it run, ggml's AMX kernels fault on the
/// first batch of two or more tokens (`ldtilecfg`: invalid opcode or general protection fault),
/// killing the process. A tensor override cannot avoid it (llama.cpp maps an override to the CPU
/// buffer back onto the extra types), and `llama-cpp-2` has no setter for `use_extra_bufts`,
/// so the model is loaded through the C API and wrapped.
pub fn load_weights(path: &Path) -> Result<LlamaModel, LlmError> {
    let not_a_model = |reason: String| LlmError::NotAModel { path: path.to_path_buf(), reason };
    backend::get()?;
    let text = path.to_str().ok_or_else(|| not_a_model("the path is not UTF-8".into()))?;
    let c_path = std::ffi::CString::new(text).map_err(|_| not_a_model("the path contains a NUL byte".into()))?;
    // SAFETY: plain C calls; the path outlives the call, the params are passed by value.
    let raw = unsafe {
        let mut params = llama_cpp_sys_2::llama_model_default_params();
        params.use_extra_bufts = false;
        llama_cpp_sys_2::llama_model_load_from_file(c_path.as_ptr(), params)
    };
    let raw = std::ptr::NonNull::new(raw).ok_or_else(|| not_a_model("llama.cpp could not load it".into()))?;
    // SAFETY: `LlamaModel` is `#[repr(transparent)]` over a `#[repr(transparent)]` wrapper of
    // `NonNull<llama_model>`, and owning a loaded model is its only invariant (it frees the
    // model on drop, as `LlamaModel::load_from_file`'s result does).
    Ok(unsafe { std::mem::transmute::<std::ptr::NonNull<llama_cpp_sys_2::llama_model>, LlamaModel>(raw) })
}

impl Model {
    /// Loads the GGUF at `path`. The header is validated first, so a file that is not GGUF or
    /// is truncated gets a clear error instead of reaching llama.cpp.
    pub fn load(path: &Path) -> Result<Self, LlmError> {
        let facts = crate::gguf::read_gguf_facts(path).map_err(|e| LlmError::NotAModel {
            path: path.to_path_buf(),
            reason: e.kind.to_string(),
        })?;
        let inner = load_weights(path)?;
        let vocabulary = Arc::new(Vocabulary::from_model(&inner));
        let template = ChatTemplate::new(facts.chat_template.as_deref(), &facts.architecture)?;
        let special_text = |token: Option<u32>| {
            token
                .map(|t| {
                    let bytes = inner.vocab().token_to_piece(llama_cpp_2::token::LlamaToken(t as i32), true, None);
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default()
        };
        let bos_text = special_text(vocabulary.bos());
        let eos = inner.vocab().eos().0;
        let eos_text = special_text((eos >= 0).then_some(eos as u32));
        Ok(Self {
            inner,
            vocabulary,
            template,
            architecture: facts.architecture,
            path: path.to_path_buf(),
            bos_text,
            eos_text,
        })
    }

    pub(super) fn llama(&self) -> &LlamaModel {
        &self.inner
    }

    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocabulary
    }

    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn parameter_count(&self) -> u64 {
        self.inner.n_params()
    }

    pub fn size_bytes(&self) -> u64 {
        self.inner.size()
    }

    pub fn context_train(&self) -> u32 {
        self.inner.n_ctx_train()
    }

    pub fn chat_template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Tokenizes prompt text. `parse_special` lets template markers such as `<|im_start|>`
    /// become their control tokens (wanted for rendered templates, not for raw user text).
    pub fn tokenize(&self, text: &str, add_bos: bool, parse_special: bool) -> Result<Vec<u32>, LlmError> {
        // llama.cpp adds BOS only where the vocabulary asks for it.
        let tokens = self.inner.vocab().tokenize(text.as_bytes(), add_bos, parse_special);
        Ok(tokens.into_iter().map(|t| t.0 as u32).collect())
    }

    /// Renders a conversation with the model's template and tokenizes it.
    pub fn tokenize_chat(
        &self,
        messages: &[TemplateMessage],
        tools: Option<&[serde_json::Value]>,
    ) -> Result<Vec<u32>, LlmError> {
        let text = self.render_chat(messages, tools)?;
        // Templates that write the BOS marker themselves must not get a second one.
        let add_bos = self.bos_text.is_empty() || !text.starts_with(&self.bos_text);
        self.tokenize(&text, add_bos, true)
    }

    pub fn render_chat(
        &self,
        messages: &[TemplateMessage],
        tools: Option<&[serde_json::Value]>,
    ) -> Result<String, LlmError> {
        Ok(self.template.render(messages, tools, &self.bos_text, &self.eos_text)?)
    }

    /// A decoding context on this model; create and use it on one thread.
    pub fn new_context(&self, params: &ContextParams) -> Result<Context<'_>, LlmError> {
        Context::new(self, params)
    }
}
