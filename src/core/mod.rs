//! API-neutral core types: what every API shape converts its requests into and renders its
//! responses from. OpenAI, Anthropic and Ollama never import each other; they meet here.
//!
//! Key types: [`ValidGenerateRequest`] (the only request the actors accept), [`StreamEvent`] and
//! [`Completion`] (what comes back), [`ModelInfo`] / [`ModelTotals`] (what a loaded model reports)
//! and [`ModelCatalog`] (the store as the API sees it, behind a trait so `api` never imports sled).
//! Plain data; nothing here allocates beyond the request it describes.

pub mod admin;
pub mod keepalive;
pub mod model;
pub mod name;
pub mod request;
pub mod response;
pub mod responses;

pub use crate::error::{CoreError, ErrorCode};
pub use admin::{CreateModel, ModelAdmin, ModelDefaults, ProgressSink, PullProgress};
pub use keepalive::KeepAlive;
pub use model::{capabilities_of, CatalogEntry, ModelCatalog, ModelDescription, ModelInfo, ModelTotals, StepSplit};
pub use model::{DevicePlacement, TokenizerInfo};
pub use response::generation_failed;
pub use name::{InvalidModelName, ModelName};
pub use request::{
    ChatMessage, Constraint, ConstraintCompileError, ConstraintKind, ConstraintSource, ContextRequest, PromptInput, Role, SamplingParams, ToolCall,
    ToolChoice, ToolSpec, UncheckedGenerateRequest, ValidGenerateRequest, Decoding, LogprobMode, LogprobsRequest,
};
pub use request::{budget_too_small_message, TokenLimits};
pub use response::{Completion, ConstraintReport, DraftCounts, FinishReason, StreamEvent, Timings, TokenLogprob, TopLogprob, Usage, MAX_TOP_LOGPROBS};
pub use responses::{new_response_id, ResponseStore, StoredResponse};
