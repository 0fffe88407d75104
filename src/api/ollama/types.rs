//! Ollama wire types (serde only). Unknown fields and options are ignored, as Ollama does,
//! but a misspelt `llamay_*` field (see `api::extensions`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<Message>,
    pub tools: Option<Vec<Tool>>,
    /// llamay's extension, as OpenAI's `tool_choice` (`"required"`, a named function...);
    /// absent means `"auto"`, Ollama's only behaviour.
    pub tool_choice: Option<Value>,
    pub format: Option<Value>,
    pub options: Option<Options>,
    pub stream: Option<bool>,
    pub keep_alive: Option<Value>,
    pub grammar: Option<String>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    /// The `llamay_*` extensions, shared by every route.
    #[serde(flatten)]
    pub llamay: crate::api::extensions::LlamayFields,
}

#[derive(Debug, Deserialize)]
pub struct GenerateRequest {
    pub model: String,
    pub prompt: Option<String>,
    pub system: Option<String>,
    pub template: Option<String>,
    pub raw: Option<bool>,
    pub suffix: Option<String>,
    pub images: Option<Vec<Value>>,
    pub context: Option<Vec<i64>>,
    pub format: Option<Value>,
    pub options: Option<Options>,
    pub stream: Option<bool>,
    pub keep_alive: Option<Value>,
    pub grammar: Option<String>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    /// The `llamay_*` extensions, shared by every route.
    #[serde(flatten)]
    pub llamay: crate::api::extensions::LlamayFields,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    pub images: Option<Vec<Value>>,
    pub tool_calls: Option<Vec<MessageToolCall>>,
    pub tool_name: Option<String>,
    /// What older clients (and the tutorial) send instead of `tool_name`.
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct MessageToolCall {
    pub function: MessageFunction,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct MessageFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Deserialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: Option<ToolFunction>,
}

#[derive(Debug, Deserialize)]
pub struct ToolFunction {
    /// Absent is refused by the tool checks with the tool's index, not by the parser.
    #[serde(default)]
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Value>,
}

/// The model options Ollama takes per request; the ones llamay uses.
#[derive(Debug, Default, Deserialize)]
pub struct Options {
    pub temperature: Option<f64>,
    pub top_k: Option<i32>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    /// -1 = no limit, -2 = fill the context.
    pub num_predict: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Vec<String>>,
    pub num_ctx: Option<u32>,
    /// Layers on a GPU (-1: as many as fit); it decides how the model loads.
    pub num_gpu: Option<i64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<i32>,
}

#[derive(Debug, Deserialize)]
pub struct ShowRequest {
    pub model: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: String,
}

#[derive(Debug, Serialize, Clone)]
pub struct ModelDetails {
    pub parent_model: String,
    pub format: &'static str,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

#[derive(Debug, Serialize)]
pub struct TagsResponse {
    pub models: Vec<TagEntry>,
}

#[derive(Debug, Serialize)]
pub struct TagEntry {
    pub name: String,
    pub model: String,
    pub modified_at: String,
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
    /// What the model can be asked for (Ollama lists them beside `details`).
    pub capabilities: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct PsResponse {
    pub models: Vec<PsEntry>,
}

#[derive(Debug, Serialize)]
pub struct PsEntry {
    pub name: String,
    pub model: String,
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
    pub expires_at: String,
    pub size_vram: u64,
    pub context_length: u32,
}
