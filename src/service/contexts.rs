//! Contexts as the generation service uses them: a request's `llamay_context` (or Ollama's
//! `context` array) checked into a [`ContextUse`], and creating a context, which is a
//! generation of its own (the prompt prefilled once, nothing sampled into it).
//!
//! Snapshots are saved and restored here as well: both are jobs on the model's worker.
//!
//! Key items: [`context_use`], [`GenerationService::create_context`],
//! [`GenerationService::save_context_state`], [`GenerationService::restore_context`]. Costs:
//! checking is a registry lookup; creating prefills the prompt on the model's worker; saving
//! and restoring move the context's KV state (no prefill).

use std::sync::Arc;
use std::time::Instant;

use super::constraint::{ConstraintSources, ToolSources};
use super::{collect, context_holder, validate_local, GenerationService, Started, Validated};
use crate::actors::supervisor::acquire;
use crate::contexts::{ContextContent, ContextMode, ContextRecord, ContextRegistry, ContextUse};
use crate::core::{
    ChatMessage, ContextRequest, KeepAlive, PromptInput, Role, SamplingParams, ToolChoice, UncheckedGenerateRequest,
};
use crate::error::CoreError;

/// A request's `llamay_context`, checked: it exists, belongs to the request's model, and a
/// commit carries the request's messages to append.
pub(super) fn context_use(
    contexts: &ContextRegistry,
    asked: &ContextRequest,
    request: &UncheckedGenerateRequest,
) -> Result<ContextUse, CoreError> {
    let (id, commit) = match asked {
        ContextRequest::Named { id, commit } => (id, *commit),
        ContextRequest::Tokens(tokens) => {
            // Ollama's context array: an unnamed context that lives for this request.
            let record = contexts.new_record(&request.model, ContextContent::Raw, Arc::new(tokens.clone()), None, None);
            return Ok(ContextUse { record, mode: ContextMode::Read, appended: Vec::new() });
        }
    };
    let record = contexts.get(id).map_err(|e| e.with_param("llamay_context"))?;
    if record.model != request.model {
        return Err(CoreError::invalid(format!(
            "context {} belongs to model {:?}, not {:?}; send it to its own model",
            record.id, record.model, request.model
        ))
        .with_param("llamay_context"));
    }
    record.touch();
    let appended = match &request.input {
        PromptInput::Chat { messages, .. } => messages.clone(),
        PromptInput::Raw { prompt, .. } => vec![ChatMessage::new(Role::User, prompt.clone())],
    };
    let mode = if commit { ContextMode::Commit } else { ContextMode::Read };
    Ok(ContextUse { record, mode, appended })
}

impl GenerationService {
    /// Creates a context of `model` holding `input` prefilled (`content` is how the context
    /// remembers it): the tools' schemas checked as a chat request's are, the prompt prefilled
    /// once, and the context registered. Refused with 503 past the daemon's `max_contexts`.
    pub async fn create_context(
        &self,
        model: &str,
        content: ContextContent,
        input: PromptInput,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<ContextRecord>, CoreError> {
        // The context belongs to the model, not to this spelling of its name.
        let model = crate::core::ModelName::parse(model)?.to_string();
        // Refused before the prefill; the insert below checks again, as others may create meanwhile.
        self.contexts.check_room(1)?;
        if let PromptInput::Chat { tools, .. } = &input {
            let offered = ToolSources { tools: tools.clone(), choice: ToolChoice::Auto, parallel: true };
            self.compile_constraint(ConstraintSources::default(), Some(offered), None).await?;
        }
        let record = self.contexts.new_record(&model, content, Arc::new(Vec::new()), keep_alive, None);
        let prefill = UncheckedGenerateRequest {
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            ..UncheckedGenerateRequest::new(model, input)
        }
        .with_sampling(SamplingParams { temperature: 0.0, max_tokens: Some(1), ..SamplingParams::default() });
        let used = ContextUse { record: Arc::clone(&record), mode: ContextMode::Create, appended: Vec::new() };
        let validated = Validated { request: validate_local(prefill, None, None)?, context: Some(used) };
        collect(self.start(validated, None).await?).await?;
        record.touch();
        self.contexts.insert(Arc::clone(&record))?;
        Ok(record)
    }

    /// A context's KV state, saved by its model's worker (no prefill when the context is in a
    /// sequence or parked), with the digest of the model it belongs to.
    pub async fn save_context_state(&self, record: &Arc<ContextRecord>) -> Result<(String, Vec<u8>), CoreError> {
        record.touch();
        let arrived = Instant::now();
        let lease = acquire(&self.supervisor, &record.model, None).await?;
        let digest = lease.model().info().digest.clone();
        let saving = context_holder(lease.model().as_ref(), record)?.save_context(Arc::clone(record))?;
        let tally = Arc::clone(&self.book).open(&lease.model().info().name, arrived);
        collect(Started { generation: saving.generation, lease, tally }).await?;
        let bytes = saving
            .state
            .await
            .map_err(|_| CoreError::internal("the model stopped before sending the context's state"))?
            .map_err(|e| CoreError::internal(format!("could not read the context's state: {e}")))?;
        Ok((digest, bytes))
    }

    /// A new context of `model` holding `tokens` (`content` is how it remembers them), its
    /// sequence written from saved state rather than prefilled. `read_state` gets the loaded
    /// model's digest and reads the state saved for it (off the async threads).
    pub async fn restore_context(
        &self,
        model: &str,
        content: ContextContent,
        tokens: Vec<u32>,
        keep_alive: Option<KeepAlive>,
        read_state: impl FnOnce(&str) -> Result<Vec<u8>, CoreError> + Send + 'static,
    ) -> Result<Arc<ContextRecord>, CoreError> {
        self.contexts.check_room(1)?;
        let arrived = Instant::now();
        let lease = acquire(&self.supervisor, model, None).await?;
        let digest = lease.model().info().digest.clone();
        let state = tokio::task::spawn_blocking(move || read_state(&digest))
            .await
            .map_err(|e| CoreError::internal(format!("the store call did not finish: {e}")))??;
        let record = self.contexts.new_record(model, content, Arc::new(tokens), keep_alive, None);
        let generation = context_holder(lease.model().as_ref(), &record)?.restore_context(Arc::clone(&record), Arc::new(state))?;
        let tally = Arc::clone(&self.book).open(&lease.model().info().name, arrived);
        collect(Started { generation, lease, tally }).await?;
        record.touch();
        self.contexts.insert(Arc::clone(&record))?;
        Ok(record)
    }
}
