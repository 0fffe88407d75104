//! A loaded GGUF model: weights (mmapped by llama.cpp), its vocabulary as bytes, its chat template.
//!
//! `Model` is `Send + Sync` and shared in an `Arc` between the request side (tokenizing,
//! rendering templates) and the one thread that owns a [`Context`] for decoding.
//! Key type: [`Model`]. Cost: loading maps the file and reads every tensor header
//! (~0.1-0.5 s for the small models here); the vocabulary walk adds 4-30 ms.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ffi::{ModelSettings, RawModel};
use super::offload::LayerPlacement;
use super::template::{ChatTemplate, TemplateMessage};
use super::{backend, Context, ContextParams, LlmError, Vocabulary};

pub struct Model {
    inner: RawModel,
    vocabulary: Arc<Vocabulary>,
    template: ChatTemplate,
    architecture: String,
    path: PathBuf,
    bos_text: String,
    eos_text: String,
    /// The chat template's Jinja source as the GGUF holds it (`None`: a built-in fallback).
    template_source: Option<String>,
    rpc_split: Option<super::rpc::LayerSplit>,
}

/// The text of a model's special tokens.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecialTokens {
    pub bos: Option<String>,
    pub eos: Option<String>,
    pub pad: Option<String>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("path", &self.path).field("architecture", &self.architecture).finish()
    }
}

impl Model {
    /// Loads the GGUF at `path` with llama.cpp's default placement. The header is validated
    /// first, so a file that is not GGUF or is truncated gets a clear error instead of
    /// reaching llama.cpp.
    pub fn load(path: &Path) -> Result<Self, LlmError> {
        Self::load_placed(path, LayerPlacement::LlamaDefault)
    }

    /// Loads the GGUF at `path` with its layers where `placement` says.
    pub fn load_placed(path: &Path, placement: LayerPlacement) -> Result<Self, LlmError> {
        let facts = crate::gguf::read_gguf_facts(path).map_err(|e| LlmError::NotAModel {
            path: path.to_path_buf(),
            reason: e.kind.to_string(),
        })?;
        // With RPC workers connected, every model spreads its layers over them and this CPU.
        let (settings, rpc_split) = match super::rpc::plan() {
            Some(_) if matches!(placement, LayerPlacement::Device { .. }) => {
                return Err(LlmError::Config(
                    "layers on a local GPU cannot be combined with RPC workers (-rpc): a model's layers are split over this CPU and the workers".into(),
                ));
            }
            Some(plan) => {
                let (n_layer, block_bytes) = super::rpc::block_count(path, &facts.architecture)?;
                let offloaded = plan.offloaded_layers(n_layer);
                let settings = ModelSettings {
                    devices: plan.device_indices(),
                    gpu_layers: Some(offloaded),
                    tensor_split: plan.tensor_split(),
                };
                let split = plan.layer_split(n_layer, offloaded).with_bytes(&block_bytes);
                tracing::info!(model = %path.display(), %split, "model split across RPC workers");
                (settings, Some(split))
            }
            None => {
                let settings = match placement {
                    LayerPlacement::LlamaDefault => ModelSettings::default(),
                    LayerPlacement::Cpu => ModelSettings { gpu_layers: Some(0), ..ModelSettings::default() },
                    LayerPlacement::Device { index, layers } => {
                        ModelSettings { devices: vec![index], gpu_layers: Some(layers), ..ModelSettings::default() }
                    }
                };
                (settings, None)
            }
        };
        backend::get();
        let inner = RawModel::load(path, &settings)?;
        let vocabulary = Arc::new(Vocabulary::from_model(&inner));
        let template = ChatTemplate::new(facts.chat_template.as_deref(), &facts.architecture)?;
        let template_source = facts.chat_template.clone().filter(|source| !source.trim().is_empty());
        let special_text = |token: Option<u32>| {
            token
                .map(|t| String::from_utf8_lossy(&inner.token_bytes(t, true)).into_owned())
                .unwrap_or_default()
        };
        let bos_text = special_text(vocabulary.bos());
        let eos_text = special_text(inner.eos());
        Ok(Self {
            inner,
            vocabulary,
            template,
            architecture: facts.architecture,
            path: path.to_path_buf(),
            bos_text,
            eos_text,
            template_source,
            rpc_split,
        })
    }

    pub(super) fn raw(&self) -> &RawModel {
        &self.inner
    }

    /// Where the layers are when the model is split over RPC workers.
    pub fn rpc_split(&self) -> Option<&super::rpc::LayerSplit> {
        self.rpc_split.as_ref()
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
        self.inner.parameter_count()
    }

    pub fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    pub fn context_train(&self) -> u32 {
        self.inner.context_train()
    }

    /// The chat template's source text, when the model file has one.
    pub fn chat_template_source(&self) -> Option<&str> {
        self.template_source.as_deref()
    }

    /// The text of the model's special tokens: begin and end of sequence, and padding (each
    /// `None` when the vocabulary has no such token).
    pub fn special_tokens(&self) -> SpecialTokens {
        let text = |token: Option<u32>| token.map(|t| String::from_utf8_lossy(&self.inner.token_bytes(t, true)).into_owned());
        SpecialTokens { bos: text(self.vocabulary.bos()), eos: text(self.inner.eos()), pad: text(self.inner.pad()) }
    }

    /// The text of `tokens`, control tokens written as their markers (`<|im_end|>`), as a
    /// tokenizer's decode gives it (an id outside the vocabulary adds nothing: check ids first).
    pub fn detokenize(&self, tokens: &[u32]) -> String {
        let bytes: Vec<u8> = tokens.iter().flat_map(|&token| self.inner.token_bytes(token, true)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn chat_template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Tokenizes prompt text. `parse_special` lets template markers such as `<|im_start|>`
    /// become their control tokens (wanted for rendered templates, not for raw user text).
    pub fn tokenize(&self, text: &str, add_bos: bool, parse_special: bool) -> Result<Vec<u32>, LlmError> {
        // llama.cpp adds BOS only where the vocabulary asks for it.
        self.inner.tokenize(text.as_bytes(), add_bos, parse_special)
    }

    /// Tokenizes `bytes` as text inside an answer: no BOS, control-token text left as text.
    /// Bytes that end inside a UTF-8 character are cut back to the last whole one.
    pub fn tokenize_continuation(&self, bytes: &[u8]) -> Result<Vec<u32>, LlmError> {
        let whole = match std::str::from_utf8(bytes) {
            Ok(_) => bytes.len(),
            Err(error) => error.valid_up_to(),
        };
        self.inner.tokenize(&bytes[..whole], false, false)
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
