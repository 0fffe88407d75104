//! The Anthropic route: `POST /v1/messages` (JSON or SSE). Errors are rendered as
//! `{"type": "error", "error": {"type", "message"}}` with Anthropic's type names.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::convert::convert;
use super::stream::{stop_reason, tool_use_block, with_anthropic_ids, MessageStream};
use super::types::{ErrorBody, ErrorDetail, MessageResponse, MessagesRequest, UsageBody};
use crate::api::body::read_json;
use crate::api::common::{error_response, event_stream, random_id, sse_response};
use crate::api::AppState;
use crate::error::CoreError;

/// An error in Anthropic's shape.
pub fn render_error(error: &CoreError) -> HttpResponse {
    error_response(error).json(ErrorBody {
        kind: "error",
        error: ErrorDetail {
            kind: error.code.anthropic_type(),
            message: error.message.clone(),
        },
    })
}

pub async fn messages(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    create(&state, &request, payload)
        .await
        .unwrap_or_else(|error| render_error(&error))
}

async fn create(
    state: &AppState,
    http: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, CoreError> {
    let body: MessagesRequest = read_json(http, payload, state.max_body_bytes).await?;
    let converted = convert(body)?;
    let request = converted.request;
    let model = request.model.clone();
    let started = state.generation.generate(request, converted.constraint).await?;
    let id = format!("msg_{}", random_id(24));
    if converted.stream {
        return Ok(sse_response(event_stream(
            started,
            MessageStream::new(id, model),
        )));
    }
    let collected = crate::service::collect(started).await?;
    let completion = collected.completion;
    let mut content = Vec::new();
    if !collected.text.is_empty() || completion.tool_calls.is_empty() {
        content.push(json!({"type": "text", "text": collected.text}));
    }
    content.extend(
        with_anthropic_ids(&completion.tool_calls)
            .iter()
            .map(tool_use_block),
    );
    let (reason, sequence) = stop_reason(&completion.finish_reason);
    Ok(HttpResponse::Ok().json(MessageResponse {
        id,
        kind: "message",
        role: "assistant",
        model,
        content,
        stop_reason: reason,
        stop_sequence: sequence,
        usage: UsageBody {
            input_tokens: completion.usage.prompt_tokens.saturating_sub(completion.usage.cached_tokens),
            output_tokens: completion.usage.completion_tokens,
            cache_read_input_tokens: completion.usage.cached_tokens,
        },
    }))
}
