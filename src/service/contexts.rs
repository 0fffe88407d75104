//! Contexts as the generation service keeps them: a request's `llamay_context` (or Ollama's
//! `context` array) checked into a [`ContextUse`]; creating a context, which is a generation of
//! its own (the prompt prefilled once, nothing sampled into it); forking, listing, showing and
//! deleting contexts, and their counts. Routes see a context as a [`ContextSummary`], never its
//! record. Snapshots are `snapshots.rs`.
//!
//! Key items: [`context_use`], [`GenerationService::create_context`], [`ContextSummary`],
//! [`ContextPage`], [`ContextStats`]. Costs: checking, showing and deleting are registry lookups;
//! creating prefills the prompt on the model's worker; forking copies no KV state up front (a
//! child's first request copies its parent's sequence); a page is O(log n + limit).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::constraint::{ConstraintSources, ToolSources};
use super::{collect, validate_local, GenerationService, Validated};
use crate::contexts::{ContextContent, ContextMode, ContextRecord, ContextRegistry, ContextUse};
pub use crate::contexts::MAX_PAGE;
use crate::core::{
    ChatMessage, ContextRequest, KeepAlive, PromptInput, Role, SamplingParams, ToolChoice, UncheckedGenerateRequest,
};
use crate::error::CoreError;

/// A context as callers see it: its facts, not its KV state or conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSummary {
    pub id: String,
    pub model: String,
    /// The context it was forked from.
    pub parent: Option<String>,
    /// Tokens whose KV state it stands for.
    pub tokens: usize,
    pub created: DateTime<Utc>,
    /// `None`: kept until deleted.
    pub expires_at: Option<DateTime<Utc>>,
    /// Where its KV state is now: `hot`, `parked`, `stored` or `cold`.
    pub state: &'static str,
}

impl ContextSummary {
    pub(super) fn of(record: &ContextRecord) -> ContextSummary {
        ContextSummary {
            id: record.id.clone(),
            model: record.model.clone(),
            parent: record.parent.clone(),
            tokens: record.tokens().len(),
            created: record.created,
            expires_at: record.expires_at(),
            state: record.residence().as_str(),
        }
    }
}

/// One page of the contexts, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextPage {
    pub contexts: Vec<ContextSummary>,
    /// Whether contexts follow the last one of this page.
    pub has_more: bool,
}

/// How many contexts there are, where their state is, and what parked state takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextStats {
    pub total: usize,
    pub max_contexts: usize,
    pub hot: usize,
    pub parked: usize,
    pub stored: usize,
    pub cold: usize,
    /// Bytes of parked state held in memory now, and the bound on them.
    pub parked_bytes: u64,
    pub parked_limit_bytes: u64,
    /// Parked states written to the store's `parked/` directory since the daemon started.
    pub spilled_to_disk: u64,
}

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
        PromptInput::Tokens(_) => {
            return Err(CoreError::invalid(format!(
                "context {} continues text, and this prompt is token ids; send the prompt as a string",
                record.id
            ))
            .with_param("llamay_context"))
        }
    };
    let mode = if commit { ContextMode::Commit } else { ContextMode::Read };
    Ok(ContextUse { record, mode, appended })
}

impl GenerationService {
    /// Creates a context of `model` holding `input` prefilled (a conversation, or raw text
    /// without a template): the tools' schemas checked as a chat request's are, the prompt
    /// prefilled once, and the context registered. Refused with 503 past the daemon's
    /// `max_contexts`.
    pub async fn create_context(
        &self,
        model: &str,
        input: PromptInput,
        keep_alive: Option<KeepAlive>,
    ) -> Result<ContextSummary, CoreError> {
        // The context belongs to the model, not to this spelling of its name.
        let model = crate::core::ModelName::parse(model)?.to_string();
        // How the context remembers what it holds, for the requests that continue it.
        let content = match &input {
            PromptInput::Chat { messages, tools } => ContextContent::Chat { messages: messages.clone(), tools: tools.clone() },
            PromptInput::Raw { .. } => ContextContent::Raw,
            PromptInput::Tokens(_) => {
                return Err(CoreError::invalid("a context holds text; send messages or prompt, not token ids")
                    .with_param("prompt"))
            }
        };
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
        Ok(ContextSummary::of(&record))
    }

    /// `n` children of the context `id` (1 to `MAX_FORK`): the same tokens and conversation, no
    /// prefill. 404 for an unknown parent, 503 when the children do not all fit.
    pub fn fork_context(&self, id: &str, n: usize) -> Result<Vec<ContextSummary>, CoreError> {
        let parent = self.contexts.get(id)?;
        parent.touch();
        let children = self.contexts.fork(&parent, n)?;
        Ok(children.iter().map(|child| ContextSummary::of(child)).collect())
    }

    /// Up to `limit` contexts created after the context `after` (from the first when `None`),
    /// oldest first; 404 naming `after` when that context is gone.
    pub fn list_contexts(&self, after: Option<&str>, limit: usize) -> Result<ContextPage, CoreError> {
        let page = self.contexts.page(after, limit)?;
        Ok(ContextPage {
            contexts: page.contexts.iter().map(|record| ContextSummary::of(record)).collect(),
            has_more: page.has_more,
        })
    }

    /// The context `id`; 404 when there is none.
    pub fn context(&self, id: &str) -> Result<ContextSummary, CoreError> {
        self.contexts.get(id).map(|record| ContextSummary::of(&record))
    }

    /// Deletes the context `id` (its KV state goes with it); 404 when there is none.
    pub fn delete_context(&self, id: &str) -> Result<ContextSummary, CoreError> {
        self.contexts.remove(id).map(|record| ContextSummary::of(&record))
    }

    /// The contexts' counts, by where their state is, and the parking lot's use.
    pub fn context_stats(&self) -> ContextStats {
        let counts = self.contexts.counts();
        let parking = self.contexts.parking();
        ContextStats {
            total: counts.total,
            max_contexts: self.contexts.max_contexts(),
            hot: counts.hot,
            parked: counts.parked,
            stored: counts.stored,
            cold: counts.cold,
            parked_bytes: parking.used(),
            parked_limit_bytes: parking.limit(),
            spilled_to_disk: parking.spilled(),
        }
    }
}
