//! Anthropic Messages wire types (serde only). `max_tokens` is required, as Anthropic requires it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u32,
    pub messages: Vec<InputMessage>,
    pub system: Option<SystemField>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i32>,
    #[serde(default)]
    pub stream: bool,
    pub tools: Option<Vec<ToolDefinition>>,
    pub tool_choice: Option<ToolChoiceField>,
    pub grammar: Option<String>,
    /// Not part of the Anthropic API: read only to refuse it by name.
    pub logprobs: Option<serde_json::Value>,
    pub top_logprobs: Option<serde_json::Value>,
    /// The `llamay_*` extensions, shared by every route.
    #[serde(flatten)]
    pub llamay: crate::api::extensions::LlamayFields,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SystemField {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

#[derive(Debug, Deserialize)]
pub struct InputMessage {
    pub role: String,
    pub content: InputContent,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum InputContent {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

/// Any content block; which fields are present depends on `type`.
#[derive(Debug, Deserialize)]
pub struct ContentBlock {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub input: Option<Value>,
    pub tool_use_id: Option<String>,
    pub content: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ToolDefinition {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Absent is refused by the tool checks with the tool's index, not by the parser.
    #[serde(default)]
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ToolChoiceField {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: Option<String>,
    pub disable_parallel_tool_use: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct MessageResponse {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<Value>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: UsageBody,
}

#[derive(Debug, Serialize, Clone, Copy)]
pub struct UsageBody {
    /// Prompt tokens that were prefilled; those reused from the KV cache are
    /// `cache_read_input_tokens`, as Anthropic counts them.
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub cache_read_input_tokens: u32,
}

#[derive(Debug, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}
