//! A model's tokenizer as the service offers it (`/tokenize`, `/detokenize`, `/tokenizer_info`):
//! the model leased (loaded on demand, kept alive as a chat model is), its tokenizer asked on a
//! blocking thread. A request that names no model gets the chat model loaded now.
//!
//! Key types: [`TokenizeInput`], [`Tokenized`]. Costs: one tokenisation (or a template render
//! and one) per request, off the HTTP workers; a model load when the model is not loaded.

use std::sync::Arc;

use super::GenerationService;
use crate::actors::messages::{model_kind, LoadedModel, ModelKind, Tokenize};
use crate::actors::supervisor::{acquire, GetStatus, ModelLease};
use crate::core::{ChatMessage, TokenizerInfo};
use crate::error::{CoreError, ErrorCode};

/// What to tokenize.
#[derive(Debug, Clone)]
pub enum TokenizeInput {
    /// Text, with the begin-of-sequence token where the model puts one when `add_special`.
    Text { text: String, add_special: bool },
    /// A conversation, rendered through the model's chat template.
    Chat(Vec<ChatMessage>),
}

/// Token ids and the facts the answer reports with them.
#[derive(Debug, Clone)]
pub struct Tokenized {
    pub tokens: Vec<u32>,
    /// Tokens one sequence of the model holds at most.
    pub max_model_len: u32,
    pub model: String,
}

impl GenerationService {
    /// `input` as `model`'s token ids (`None`: the chat model loaded now).
    pub async fn tokenize(&self, model: Option<&str>, input: TokenizeInput) -> Result<Tokenized, CoreError> {
        let lease = self.lease_tokenizer(model).await?;
        let name = lease.model().info().name.clone();
        let max_model_len = lease.model().info().context_length;
        let tokens = with_tokenizer(&lease, move |tokenizer| match &input {
            TokenizeInput::Text { text, add_special } => tokenizer.tokenize(text, *add_special),
            TokenizeInput::Chat(messages) => tokenizer.tokenize_chat(messages),
        })
        .await?;
        Ok(Tokenized { tokens, max_model_len, model: name })
    }

    /// The text of `tokens` in `model`'s vocabulary; an unknown id is a 400 naming it.
    pub async fn detokenize(&self, model: Option<&str>, tokens: Vec<u32>) -> Result<String, CoreError> {
        let lease = self.lease_tokenizer(model).await?;
        with_tokenizer(&lease, move |tokenizer| tokenizer.detokenize(&tokens)).await
    }

    /// What `model`'s tokenizer is: its special tokens, chat template and length.
    pub async fn tokenizer_info(&self, model: Option<&str>) -> Result<TokenizerInfo, CoreError> {
        let lease = self.lease_tokenizer(model).await?;
        with_tokenizer(&lease, |tokenizer| Ok(tokenizer.tokenizer_info())).await
    }

    /// The lease of `model`, or of the chat model loaded now when no model is named.
    async fn lease_tokenizer(&self, model: Option<&str>) -> Result<ModelLease, CoreError> {
        let name = match model.map(str::trim).filter(|name| !name.is_empty()) {
            Some(name) => crate::core::ModelName::parse(name)?.to_string(),
            None => self.loaded_chat_model().await?,
        };
        acquire(&self.supervisor, &name, None).await
    }

    /// The first chat model the supervisor has loaded; a 400 asking for `model` when none is.
    async fn loaded_chat_model(&self) -> Result<String, CoreError> {
        let status = self
            .supervisor
            .send(GetStatus)
            .await
            .map_err(|_| CoreError::new(ErrorCode::ShuttingDown, "llamay is shutting down"))?;
        status
            .models
            .into_iter()
            .find(|model| model.kind == ModelKind::Chat)
            .map(|model| model.info.name)
            .ok_or_else(|| {
                CoreError::invalid("no chat model is loaded; name one in \"model\"").with_param("model")
            })
    }
}

/// Runs `work` with the leased model's tokenizer on a blocking thread (a long text or a
/// template render would stall an HTTP worker); a model without one gets a 400 naming it.
async fn with_tokenizer<T: Send + 'static>(
    lease: &ModelLease,
    work: impl FnOnce(&dyn Tokenize) -> Result<T, CoreError> + Send + 'static,
) -> Result<T, CoreError> {
    let model: Arc<dyn LoadedModel> = Arc::clone(lease.model());
    tokio::task::spawn_blocking(move || {
        let model = model.as_ref();
        match model.tokenizer() {
            Some(tokenizer) => work(tokenizer),
            None => Err(no_tokenizer(model)),
        }
    })
    .await
    .map_err(|e| CoreError::internal(format!("tokenizing stopped: {e}")))?
}

fn no_tokenizer(model: &dyn LoadedModel) -> CoreError {
    let info = model.info();
    let what = match model_kind(model) {
        ModelKind::Embedding => "an embedding model",
        ModelKind::Chat => "a model split over RPC workers",
    };
    CoreError::bad_request(format!("model {} is {what}; its tokenizer is not offered here", info.name)).with_param("model")
}
