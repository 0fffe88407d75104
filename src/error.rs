//! The one error table: every failure a request can meet has an [`ErrorCode`], and the code
//! alone decides the HTTP status, the status text, and the type strings each API shape prints.
//! The API modules render [`CoreError`] in their own shape (OpenAI, Anthropic, Ollama); nothing
//! else chooses a status.
//!
//! Key types: [`ErrorCode`], [`CoreError`]. 429 and 503 carry `Retry-After`.

use thiserror::Error;

/// Every kind of failure a request can meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorCode {
    /// The body is not JSON, or a field has the wrong type.
    MalformedJson,
    /// A field is missing or out of range, or the request asks for something we refuse.
    InvalidRequest,
    /// The JSON Schema uses a keyword the constraint cannot honour.
    SchemaRefused,
    /// The GBNF grammar does not parse or is refused.
    GrammarRefused,
    /// A lexicon (`llamay_lexicon`) is malformed, over a budget, or leaves no output.
    LexiconRefused,
    /// A grammar and a schema on one request.
    ConstraintConflict,
    /// The prompt does not fit the context.
    PromptTooLong,
    /// No installed model by that name.
    ModelNotFound,
    /// No such route.
    RouteNotFound,
    /// A route or feature this version does not offer.
    NotOffered,
    /// The body is over the size limit.
    PayloadTooLarge,
    /// The queue of waiting requests is full.
    Overloaded,
    /// The daemon is stopping.
    ShuttingDown,
    /// The model file exists but would not load.
    ModelLoadFailed,
    /// A bug or an unexpected failure inside the daemon.
    Internal,
    /// A model given as something other than a store name (a path, `..`, a NUL...).
    InvalidModelName,
    /// The daemon has an API key and the request did not bring it.
    Unauthorized,
    /// The client took too long to send its request.
    RequestTimeout,
    /// No context or snapshot by that id (issue 11).
    ContextNotFound,
    /// No stored response by that id visible to the caller (`/v1/responses`, issue 61).
    ResponseNotFound,
    /// The context is changing (a commit runs) or a snapshot belongs to another model.
    Conflict,
    /// An RPC worker a model is split over is lost or unreachable; retry when it is back.
    RpcWorkerLost,
    /// The request's `Host` is not one a loopback-bound daemon answers (DNS rebinding).
    HostNotAllowed,
    /// A snapshot's stored state or record is damaged: nothing can be restored from it.
    SnapshotDamaged,
    /// The daemon holds as many contexts as it may (`max_contexts`); retry once some are
    /// deleted or expire. A capacity limit, answered like a full queue (503, `Retry-After`).
    ContextLimit,
    /// The device memory a model needs is held by models still answering requests; retry when
    /// they are idle and can be unloaded. A capacity limit, like [`ErrorCode::ContextLimit`].
    DeviceMemoryBusy,
    /// The disk holding the model store is full (a pull or an import).
    InsufficientStorage,
}

impl ErrorCode {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::MalformedJson
            | ErrorCode::InvalidRequest
            | ErrorCode::SchemaRefused
            | ErrorCode::GrammarRefused
            | ErrorCode::LexiconRefused
            | ErrorCode::ConstraintConflict
            | ErrorCode::PromptTooLong
            | ErrorCode::InvalidModelName => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::HostNotAllowed => 403,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::ModelNotFound | ErrorCode::RouteNotFound | ErrorCode::NotOffered => 404,
            ErrorCode::ContextNotFound | ErrorCode::ResponseNotFound => 404,
            ErrorCode::Conflict | ErrorCode::SnapshotDamaged => 409,
            ErrorCode::PayloadTooLarge => 413,
            // Capacity limits a request meets (a queue, a count, memory) are 503: clients retry
            // on it after `Retry-After`. 507 is kept for a full disk, which a retry won't fix.
            ErrorCode::Overloaded | ErrorCode::ShuttingDown => 503,
            ErrorCode::ContextLimit | ErrorCode::DeviceMemoryBusy => 503,
            ErrorCode::RpcWorkerLost => 503,
            ErrorCode::ModelLoadFailed | ErrorCode::Internal => 500,
            ErrorCode::InsufficientStorage => 507,
        }
    }

    /// The status text, which the spec prints as the OpenAI-shape `type` (`"Bad Request"`).
    pub fn status_text(self) -> &'static str {
        match self.status() {
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            408 => "Request Timeout",
            404 => "Not Found",
            409 => "Conflict",
            413 => "Payload Too Large",
            429 => "Too Many Requests",
            503 => "Service Unavailable",
            507 => "Insufficient Storage",
            _ => "Internal Server Error",
        }
    }

    /// A stable machine-readable name (OpenAI's `code`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedJson => "malformed_json",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::SchemaRefused => "schema_refused",
            ErrorCode::GrammarRefused => "grammar_refused",
            ErrorCode::LexiconRefused => "lexicon_refused",
            ErrorCode::ConstraintConflict => "constraint_conflict",
            ErrorCode::PromptTooLong => "prompt_too_long",
            ErrorCode::ModelNotFound => "model_not_found",
            ErrorCode::RouteNotFound => "route_not_found",
            ErrorCode::NotOffered => "not_offered",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::ModelLoadFailed => "model_load_failed",
            ErrorCode::Internal => "internal_error",
            ErrorCode::InvalidModelName => "invalid_model_name",
            ErrorCode::Unauthorized => "invalid_api_key",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::ContextNotFound => "context_not_found",
            ErrorCode::ResponseNotFound => "response_not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::RpcWorkerLost => "rpc_worker_lost",
            ErrorCode::HostNotAllowed => "host_not_allowed",
            ErrorCode::SnapshotDamaged => "snapshot_damaged",
            ErrorCode::ContextLimit => "context_limit_reached",
            ErrorCode::DeviceMemoryBusy => "device_memory_busy",
            ErrorCode::InsufficientStorage => "insufficient_storage",
        }
    }

    /// Anthropic's `error.type`.
    pub fn anthropic_type(self) -> &'static str {
        match self.status() {
            400 | 408 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            409 => "invalid_request_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        }
    }

    /// Seconds a client should wait before retrying, for the statuses that invite a retry.
    pub fn retry_after_seconds(self) -> Option<u32> {
        match self {
            ErrorCode::Overloaded => Some(1),
            ErrorCode::ShuttingDown => Some(5),
            ErrorCode::RpcWorkerLost => Some(5),
            // A context frees when one is deleted or its keepalive runs out; models go idle
            // when their requests end.
            ErrorCode::ContextLimit => Some(5),
            ErrorCode::DeviceMemoryBusy => Some(5),
            _ => None,
        }
    }
}

/// A failure with its code and a message a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct CoreError {
    pub code: ErrorCode,
    pub message: String,
    /// The request field at fault (OpenAI's `param`), when there is one.
    pub param: Option<String>,
}

impl CoreError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CoreError {
            code,
            message: message.into(),
            param: None,
        }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// A request the daemon understood but will not serve as sent (400).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    pub fn prompt_too_long(prompt_tokens: usize, context: usize) -> Self {
        Self::new(
            ErrorCode::PromptTooLong,
            format!(
                "the prompt is {prompt_tokens} tokens, which does not fit the context of {context} tokens; \
                 shorten it or load the model with a larger context (-c)"
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn model_not_found(name: &str) -> Self {
        Self::new(
            ErrorCode::ModelNotFound,
            format!("model {name:?} not found; `llamay list` shows the installed models and `llamay import FILE {name}` adds one"),
        )
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_exactly_on_retryable_statuses() {
        let all = [
            ErrorCode::MalformedJson,
            ErrorCode::InvalidRequest,
            ErrorCode::SchemaRefused,
            ErrorCode::GrammarRefused,
            ErrorCode::LexiconRefused,
            ErrorCode::ConstraintConflict,
            ErrorCode::PromptTooLong,
            ErrorCode::ModelNotFound,
            ErrorCode::RouteNotFound,
            ErrorCode::NotOffered,
            ErrorCode::PayloadTooLarge,
            ErrorCode::Overloaded,
            ErrorCode::ShuttingDown,
            ErrorCode::ModelLoadFailed,
            ErrorCode::Internal,
            ErrorCode::InvalidModelName,
            ErrorCode::Unauthorized,
            ErrorCode::RequestTimeout,
            ErrorCode::ContextNotFound,
            ErrorCode::ResponseNotFound,
            ErrorCode::Conflict,
            ErrorCode::RpcWorkerLost,
            ErrorCode::HostNotAllowed,
            ErrorCode::SnapshotDamaged,
            ErrorCode::ContextLimit,
            ErrorCode::DeviceMemoryBusy,
            ErrorCode::InsufficientStorage,
        ];
        for code in all {
            let retryable = matches!(code.status(), 429 | 503);
            assert_eq!(code.retry_after_seconds().is_some(), retryable, "{code:?}");
        }
        assert_eq!(ErrorCode::SchemaRefused.status_text(), "Bad Request");
        assert_eq!(ErrorCode::PayloadTooLarge.status(), 413);
        assert_eq!(ErrorCode::Unauthorized.status(), 401);
        assert_eq!(ErrorCode::Unauthorized.anthropic_type(), "authentication_error");
        assert_eq!(ErrorCode::RequestTimeout.status_text(), "Request Timeout");
        assert_eq!(ErrorCode::HostNotAllowed.anthropic_type(), "permission_error");
        assert_eq!(ErrorCode::ContextLimit.status_text(), "Service Unavailable");
        assert_eq!(ErrorCode::ContextLimit.anthropic_type(), "overloaded_error");
        assert_eq!(ErrorCode::DeviceMemoryBusy.status(), 503);
        assert_eq!(ErrorCode::InsufficientStorage.status(), 507);
        assert_eq!(ErrorCode::InsufficientStorage.status_text(), "Insufficient Storage");
    }
}
