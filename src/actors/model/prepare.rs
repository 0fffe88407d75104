//! A request turned into what the model worker runs: the prompt rendered through the chat
//! template and tokenised, with what tools change (the forced call's grammar, how the answer is
//! read for calls). Runs on the submitting thread, not the worker's.
//!
//! Key type: [`Prepared`]. Cost: one template render and one tokenisation per request; a forced
//! call's grammar compiles here only for requests that did not come through the API (which
//! compiles it on its pool).

use std::sync::Arc;

use super::LlamaModelHandle;
use crate::core::{budget_too_small_message, ConstraintKind, CoreError, PromptInput, Role, ToolSpec, ValidGenerateRequest};
use crate::grammar::automaton::NO_ENDING;
use crate::grammar::lexicon::Constraint as OutputConstraint;
use crate::grammar::{CompiledGrammar, Limits};
use crate::llm::template::TemplateMessage;

impl LlamaModelHandle {
    /// The prompt as tokens (rendered through the chat template where the input asks for it),
    /// with what tools change: a forced call's grammar and the tools calls are read back for.
    pub(super) fn prepare(&self, request: &ValidGenerateRequest) -> Result<Prepared, CoreError> {
        let template_error = |e: crate::llm::LlmError| CoreError::bad_request(e.to_string());
        match request.input() {
            PromptInput::Chat { messages, tools } => {
                let has_tool_history = messages.iter().any(|m| !m.tool_calls.is_empty() || m.role == Role::Tool);
                if tools.is_empty() && !has_tool_history {
                    let messages: Vec<TemplateMessage> = messages.iter().map(template_message).collect();
                    let prompt = self.model.tokenize_chat(&messages, None).map_err(template_error)?;
                    return Ok(Prepared { prompt, forced: None, tools: None, filters_markup: false });
                }
                let plan = crate::tools::plan_tool_use(
                    messages,
                    tools,
                    request.tool_choice(),
                    request.parallel_tool_calls(),
                    self.model.chat_template().handles_tools(),
                );
                let forced = match request.constraint() {
                    _ if !plan.forces_call => None,
                    // The API compiled it on its compile pool.
                    Some(constraint) if constraint.kind == ConstraintKind::Tool => Some(Arc::clone(&constraint.grammar)),
                    // Submitted without the API (a runner process, the CLI): compiled here.
                    _ => forced_call_grammar(tools, request)?,
                };
                let rendered: Vec<TemplateMessage> = plan.messages.iter().map(template_message).collect();
                let prompt = self
                    .model
                    .tokenize_chat(&rendered, plan.template_tools.as_deref())
                    .map_err(template_error)?;
                self.check_room_to_name_a_tool(&plan, request.sampling().max_tokens)?;
                Ok(Prepared { prompt, forced, tools: plan.output(), filters_markup: true })
            }
            PromptInput::Raw { prompt, system, template: true } => {
                let mut messages = Vec::new();
                if let Some(system) = system {
                    messages.push(TemplateMessage::new("system", system.clone()));
                }
                messages.push(TemplateMessage::new("user", prompt.clone()));
                let prompt = self.model.tokenize_chat(&messages, None).map_err(template_error)?;
                Ok(Prepared { prompt, forced: None, tools: None, filters_markup: false })
            }
            PromptInput::Raw { prompt, template: false, .. } => {
                let prompt = self.model.tokenize(prompt, true, false).map_err(template_error)?;
                Ok(Prepared { prompt, forced: None, tools: None, filters_markup: false })
            }
            PromptInput::Tokens(tokens) => {
                let vocabulary = self.model.vocabulary().len();
                if let Some((at, token)) = tokens.iter().enumerate().find(|(_, t)| **t as usize >= vocabulary) {
                    return Err(CoreError::invalid(format!(
                        "prompt token {at} is {token}, which is not a token of {} ({vocabulary} tokens)",
                        self.info.name
                    ))
                    .with_param("prompt"));
                }
                if tokens.is_empty() {
                    return Err(CoreError::invalid("the prompt holds no tokens").with_param("prompt"));
                }
                Ok(Prepared { prompt: tokens.clone(), forced: None, tools: None, filters_markup: false })
            }
        }
    }

    /// Refuses a forced call among several tools whose token budget cannot hold the text that
    /// names even the shortest of them: the answer could be no call at all.
    fn check_room_to_name_a_tool(&self, plan: &crate::tools::ToolPlan, budget: Option<u32>) -> Result<(), CoreError> {
        let (Some(naming), Some(budget)) = (plan.shortest_naming(), budget) else { return Ok(()) };
        let needed = self.model.tokenize(&naming, false, false).map_err(|e| CoreError::internal(e.to_string()))?.len();
        if (budget as usize) < needed {
            return Err(CoreError::invalid(format!(
                "max_tokens is {budget}, too few for a forced tool call: naming one of the {} tools it may \
                 call takes {needed} tokens with this model; raise max_tokens (num_predict on Ollama's routes)",
                plan.forced_tools.len()
            ))
            .with_param("max_tokens"));
        }
        Ok(())
    }

    /// Refuses a generation whose token budget cannot hold its constraint's shortest document
    /// in this model's tokens (the fewest the constraint finds to spell it, which is what it
    /// closes by): the answer could only be cut off. `budget` is the request's `max_tokens`
    /// (`asked`) or the context's room after the prompt, the smaller.
    pub(super) fn check_budget_holds_a_document(
        &self,
        constraint: &mut OutputConstraint,
        budget: u32,
        asked: Option<u32>,
    ) -> Result<(), CoreError> {
        if !constraint.can_close_on_budget() {
            return Ok(());
        }
        let needed = constraint.closing_tokens();
        if needed == NO_ENDING || budget >= needed {
            return Ok(());
        }
        let document = constraint.grammar().and_then(|matcher| matcher.grammar().shortest_document()).unwrap_or_default();
        let limit = match asked {
            Some(asked) if asked <= budget => format!("max_tokens is {budget}"),
            _ => format!("the context has room for {budget} tokens after the prompt"),
        };
        let document = String::from_utf8_lossy(document);
        Err(CoreError::invalid(budget_too_small_message(&limit, needed as usize, &document)).with_param("max_tokens"))
    }
}

/// The grammar of a forced call compiled here, for requests that did not come through the API.
fn forced_call_grammar(tools: &[ToolSpec], request: &ValidGenerateRequest) -> Result<Option<Arc<CompiledGrammar>>, CoreError> {
    let Some(grammar) = crate::tools::compile_tool_use(tools, request.tool_choice(), request.parallel_tool_calls())? else {
        return Ok(None);
    };
    let compiled = CompiledGrammar::new(grammar, &Limits::default()).map_err(|e| CoreError::bad_request(e.to_string()))?;
    Ok(Some(Arc::new(compiled)))
}

/// A request turned into what the worker runs: the rendered and tokenised prompt and what the
/// tools plan adds. Why a shape of its own: it is made on the submitting thread, where a bad
/// template or tool list is still the caller's 4xx, before anything reaches the worker's queue.
pub(super) struct Prepared {
    pub(super) prompt: Vec<u32>,
    /// A forced tool call's grammar; it replaces the request's own constraint.
    pub(super) forced: Option<Arc<CompiledGrammar>>,
    /// How the answer is watched for calls, when the request offers tools.
    pub(super) tools: Option<crate::tools::ToolOutput>,
    /// Whether the prompt described tools or earlier calls, so the answer may carry markup.
    pub(super) filters_markup: bool,
}

pub(super) fn template_message(message: &crate::core::ChatMessage) -> TemplateMessage {
    TemplateMessage {
        role: message.role.as_str().to_string(),
        content: message.content.clone(),
        tool_calls: (!message.tool_calls.is_empty()).then(|| crate::tools::calls_as_template_json(&message.tool_calls)),
        name: message.name.clone(),
        tool_call_id: message.tool_call_id.clone(),
    }
}

