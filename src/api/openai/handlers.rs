//! OpenAI routes: chat completions (JSON or SSE) and the model list (Responses: `responses/`).
//! Every error is rendered as `{"error": {"message", "type", "param", "code"}}` with `type` the
//! status text, as the spec's example shows.

use actix_web::{web, HttpRequest, HttpResponse};

use super::convert::convert;
use super::stream::{chat_logprobs, finish_reason, response_tool_calls, usage_body, ChatStream};
use super::types::{
    ChatCompletionRequest, ChatCompletionResponse, Choice, ErrorBody, ErrorDetail, ModelList,
    ModelObject, ResponseMessage,
};
use crate::api::body::read_json;
use crate::api::common::{error_response, event_stream, random_id, sse_response, unix_now};
use crate::api::AppState;
use crate::error::CoreError;

/// An error in OpenAI's shape.
pub fn render_error(error: &CoreError) -> HttpResponse {
    error_response(error).json(ErrorBody {
        error: ErrorDetail {
            message: error.message.clone(),
            kind: error.code.status_text(),
            param: error.param.clone(),
            code: error.code.as_str(),
        },
    })
}

/// A JSON answer with its status, or the error in OpenAI's shape: how llamay's own `/v1/`
/// routes (contexts, snapshots) answer.
pub fn respond(result: Result<(actix_web::http::StatusCode, serde_json::Value), CoreError>) -> HttpResponse {
    match result {
        Ok((status, body)) => HttpResponse::build(status).json(body),
        Err(error) => render_error(&error),
    }
}

pub async fn chat_completions(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    chat(&state, &request, payload)
        .await
        .unwrap_or_else(|error| render_error(&error))
}

async fn chat(
    state: &AppState,
    http: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, CoreError> {
    let body: ChatCompletionRequest = read_json(http, payload, state.max_body_bytes).await?;
    let converted = convert(body)?;
    let request = converted.request;
    let requested_model = request.model.clone();
    let logprobs = request.logprobs.is_some();
    let started = state.generation.generate(request, converted.constraint).await?;
    let id = format!("chatcmpl-{}", random_id(24));
    let created = unix_now();
    if converted.stream {
        let translator = ChatStream::new(id, created, requested_model, converted.include_usage).with_logprobs(logprobs);
        return Ok(sse_response(event_stream(started, translator)));
    }
    let collected = crate::service::collect(started).await?;
    let completion = collected.completion;
    let tool_calls = response_tool_calls(&completion.tool_calls, completion.cut_off_arguments.as_deref());
    let content = if tool_calls.is_empty() || !collected.text.is_empty() {
        Some(collected.text)
    } else {
        None
    };
    let response = ChatCompletionResponse {
        id,
        object: "chat.completion",
        created,
        model: requested_model,
        system_fingerprint: "llamay",
        choices: vec![Choice {
            index: 0,
            message: ResponseMessage {
                role: "assistant",
                content,
                tool_calls,
            },
            finish_reason: finish_reason(&completion.finish_reason).unwrap_or("stop"),
            logprobs: logprobs.then(|| chat_logprobs(&collected.logprobs)),
        }],
        usage: usage_body(completion.usage),
    };
    Ok(HttpResponse::Ok().json(response))
}

pub async fn list_models(state: web::Data<AppState>) -> HttpResponse {
    match state.catalog.list() {
        Ok(entries) => HttpResponse::Ok().json(ModelList {
            object: "list",
            data: entries
                .into_iter()
                .map(|entry| model_object(entry.name, entry.modified_at))
                .collect(),
        }),
        Err(error) => render_error(&error),
    }
}

pub async fn get_model(state: web::Data<AppState>, name: web::Path<String>) -> HttpResponse {
    match state.catalog.describe(&name) {
        Ok(description) => HttpResponse::Ok().json(model_object(
            description.entry.name,
            description.entry.modified_at,
        )),
        Err(error) => render_error(&error),
    }
}

fn model_object(id: String, modified_at: Option<chrono::DateTime<chrono::Utc>>) -> ModelObject {
    ModelObject {
        id,
        object: "model",
        created: modified_at.map_or(0, |t| t.timestamp()),
        owned_by: "llamay",
    }
}
