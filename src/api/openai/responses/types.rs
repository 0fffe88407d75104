//! Responses API wire types (serde only). Input items and tools stay JSON values here, read by
//! `convert.rs` one by one so a refusal names the item (`input[2].type`). Unknown request
//! fields are ignored, as the official clients send fields this daemon has no use for; a
//! misspelt `llamay_*` one is not (see `api::extensions`).

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    pub model: String,
    pub input: Option<InputField>,
    pub instructions: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextField>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default)]
    pub stream: bool,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub metadata: Option<Value>,
    pub truncation: Option<String>,
    pub user: Option<String>,
    pub reasoning: Option<Value>,
    /// OpenAI-hosted state llamay does not keep: refused by name when sent.
    pub conversation: Option<Value>,
    pub background: Option<bool>,
    pub prompt: Option<Value>,
    // llama.cpp's names, as chat completions take them.
    pub top_k: Option<i32>,
    pub min_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub grammar: Option<String>,
    /// The `llamay_*` extensions, shared by every route.
    #[serde(flatten)]
    pub llamay: crate::api::extensions::LlamayFields,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum InputField {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
pub struct TextField {
    pub format: Option<TextFormat>,
}

/// `text.format`: `{"type": "text"}`, `{"type": "json_object"}` or
/// `{"type": "json_schema", "name", "schema", "strict"}`.
#[derive(Debug, Deserialize)]
pub struct TextFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: Option<String>,
    pub schema: Option<Value>,
    pub strict: Option<bool>,
}

/// `GET /v1/responses/{id}/input_items` query.
#[derive(Debug, Deserialize)]
pub struct InputItemsQuery {
    pub limit: Option<usize>,
    pub after: Option<String>,
    pub order: Option<String>,
}
