//! Tool calls, the pure part (issue 6): validating the tools a request offers and its
//! `tool_choice`, describing the tools to a model in the Hermes `<tool_call>` convention,
//! rendering earlier calls and their results back into prompt text, building the grammar that
//! forces a call whose arguments match the tool's own schema, watching an answer as it is
//! written (text streams once it can no longer be a call; a repeated call ends the answer),
//! and reading calls back out of generated text, a call cut off by the token budget included,
//! with the model's call markup kept out of what a client reads. The API shapes and the model
//! actor call these; nothing here knows HTTP, llama.cpp or any one API's wire format.
//!
//! Key types: [`ToolPlan`] (the `tool_choice` table applied to one request: messages to render,
//! template tools, forced grammar), [`ToolOutput`] (an answer as it is written), [`ToolError`]
//! (every refusal, each a 400), [`ParsedOutput`] (text and calls read from an answer). Costs:
//! validation and parsing are linear in their input; the forced-call grammar costs one compiled
//! JSON Schema per offered tool plus a handful of wrapper rules.

mod answer;
mod forced;
mod markup;
mod output;
mod parse;
mod partial;
mod plan;
mod prompt;
mod validate;

use crate::core::{CoreError, ErrorCode};

pub use answer::{finish_tool_answer, ToolAnswer};
pub use output::{Pushed, ToolOutput};
pub use forced::{compile_arguments_schema, embed_grammar, forced_call_grammar};
pub use markup::{strip_markup, MarkupFilter};
pub use parse::{anthropic_call_id, openai_call_id, parse_calls, parse_calls_with_ids, ParsedOutput};
pub use partial::{close_json_prefix, read_cut_off_call, CutOffCall};
pub use plan::{compile_tool_use, plan_tool_use, ToolPlan};
pub use prompt::{
    calls_as_template_json, hermes_tools_prompt, messages_for_plain_template, render_calls_as_text, render_tool_result,
    tools_as_template_json,
};
pub use validate::{check_hosted_type, validate_choice, validate_tools, MAX_TOOLS};

/// Why a request's tools or `tool_choice` are refused. Every variant is the client's mistake
/// (HTTP 400); the message names the tool and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("tools[{index}] has no name; every tool needs a non-empty \"name\"")]
    MissingName { index: usize },
    #[error("tools[{index}] is named {name:?} like tools[{first}]; tool names must be unique")]
    DuplicateName { name: String, first: usize, index: usize },
    #[error(
        "tool {name:?}: \"parameters\" must be a JSON Schema for an object (\"type\": \"object\"), \
         not {found}; a tool's arguments are always a JSON object"
    )]
    ParametersNotObject { name: String, found: String },
    #[error("{count} tools were offered, above the limit of {max}")]
    TooManyTools { count: usize, max: usize },
    #[error(
        "tool type {type_name:?} is a hosted tool, which llamay does not offer: llamay runs \
         nothing on your behalf; describe a client tool (\"type\": \"function\") and run it yourself"
    )]
    HostedTool { type_name: String },
    #[error("tool type {type_name:?} is not known; llamay accepts client tools (\"type\": \"function\")")]
    UnknownToolType { type_name: String },
    #[error("tool_choice names {name:?}, which is not among the tools offered ({offered})")]
    UnknownChoice { name: String, offered: String },
    #[error("tool_choice {choice:?} forces a tool call, but no tools were offered")]
    NoToolsToChoose { choice: String },
    #[error("tool {tool:?}: the parameters schema is refused: {message}")]
    SchemaRefused {
        tool: String,
        /// The refused keyword as the schema compiler reports it (`not`, `if`...).
        keyword: String,
        /// Where in the tool's `parameters` it is (`properties.a`, `(root)`).
        location: String,
        message: String,
    },
}

impl ToolError {
    /// The row of the error table this refusal belongs to.
    pub fn code(&self) -> ErrorCode {
        match self {
            ToolError::SchemaRefused { .. } => ErrorCode::SchemaRefused,
            _ => ErrorCode::InvalidRequest,
        }
    }

    /// The request field at fault, for OpenAI's `param`.
    pub fn param(&self) -> &'static str {
        match self {
            ToolError::UnknownChoice { .. } | ToolError::NoToolsToChoose { .. } => "tool_choice",
            _ => "tools",
        }
    }
}

impl From<ToolError> for CoreError {
    fn from(error: ToolError) -> Self {
        CoreError::new(error.code(), error.to_string()).with_param(error.param())
    }
}
