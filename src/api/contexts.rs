//! `/v1/contexts` (issue 11): named KV state that outlives requests. Create a context from a
//! conversation or raw text (prefilled once), list, inspect, delete and fork it; every chat
//! route continues one with `llamay_context`. Errors come in the OpenAI
//! error shape, as on the other `/v1/` routes.
//!
//! `GET /v1/contexts` lists a page at a time, oldest first, as OpenAI lists: `limit` (1 to
//! 1000, default [`DEFAULT_PAGE`]) and `after` (the last id of the previous page), answered with
//! `has_more`, `first_id` and `last_id`. Past `max_contexts`, creating, forking and restoring
//! answer 503 with `Retry-After`.
//!
//! Key item: [`configure`] (the routes). Every operation is the generation service's
//! (`crate::service::contexts`, and `crate::service::snapshots` for a restore); this module
//! translates the wire shapes. Costs: the service's; creating prefills the prompt once on the
//! model's worker.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::read_json;
use super::openai::handlers::respond;
use super::AppState;
use crate::core::{ChatMessage, KeepAlive, PromptInput, Role, ToolSpec};
use crate::error::CoreError;
use crate::service::contexts::{ContextSummary, MAX_PAGE};

/// Contexts a page lists when the request names no `limit`.
pub const DEFAULT_PAGE: usize = 100;

/// The routes, for `App::configure`.
pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/contexts", web::post().to(create))
        .route("/v1/contexts", web::get().to(list))
        .route("/v1/contexts/{id}", web::get().to(get))
        .route("/v1/contexts/{id}", web::delete().to(delete))
        .route("/v1/contexts/{id}/fork", web::post().to(fork));
}

#[derive(Debug, Deserialize)]
struct CreateBody {
    model: Option<String>,
    messages: Option<Vec<MessageBody>>,
    prompt: Option<String>,
    system: Option<String>,
    tools: Option<Vec<Value>>,
    keep_alive: Option<Value>,
    /// A snapshot to restore instead of a prompt to prefill.
    snapshot: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MessageBody {
    role: String,
    content: Option<Value>,
}

/// How the API shows a context.
fn describe(context: &ContextSummary) -> Value {
    json!({
        "id": context.id,
        "object": "context",
        "model": context.model,
        "tokens": context.tokens,
        "created": context.created.timestamp(),
        "expires_at": context.expires_at.map(|t| t.timestamp()),
        "parent": context.parent,
        "state": context.state,
    })
}

fn message_text(index: usize, content: Option<Value>) -> Result<String, CoreError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    _ => {
                        return Err(CoreError::invalid(format!(
                            "messages[{index}].content: only text parts are accepted"
                        ))
                        .with_param(format!("messages[{index}].content")))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(
            CoreError::invalid(format!("messages[{index}].content must be text"))
                .with_param(format!("messages[{index}].content")),
        ),
    }
}

fn convert_messages(
    system: Option<String>,
    messages: Vec<MessageBody>,
) -> Result<Vec<ChatMessage>, CoreError> {
    let mut converted = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system {
        converted.push(ChatMessage::new(Role::System, system));
    }
    for (index, message) in messages.into_iter().enumerate() {
        let role = match message.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(CoreError::invalid(format!(
                    "messages[{index}].role is {other:?}; use system, user, assistant or tool"
                ))
                .with_param(format!("messages[{index}].role")))
            }
        };
        converted.push(ChatMessage::new(
            role,
            message_text(index, message.content)?,
        ));
    }
    Ok(converted)
}

/// A tool in OpenAI's shape (`{"type": "function", "function": {...}}`) or flat
/// (`{"name", "description", "parameters" | "input_schema"}`).
fn convert_tool(index: usize, tool: Value) -> Result<ToolSpec, CoreError> {
    let function = tool.get("function").cloned().unwrap_or(tool);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            CoreError::invalid(format!("tools[{index}] needs a name"))
                .with_param(format!("tools[{index}]"))
        })?;
    let parameters = function
        .get("parameters")
        .or_else(|| function.get("input_schema"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    Ok(ToolSpec {
        name: name.to_string(),
        description: function
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        parameters,
    })
}

async fn create(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    respond(create_context(&state, &request, payload).await)
}

async fn create_context(
    state: &AppState,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<(StatusCode, Value), CoreError> {
    let body: CreateBody = read_json(request, payload, state.max_body_bytes).await?;
    if let Some(snapshot) = &body.snapshot {
        if body.messages.is_some() || body.prompt.is_some() {
            return Err(CoreError::invalid(
                "a snapshot brings its own conversation; send snapshot without messages or prompt",
            )
            .with_param("snapshot"));
        }
        let keep_alive = match &body.keep_alive {
            Some(value) => Some(
                KeepAlive::from_json(value)
                    .map_err(|e| CoreError::invalid(e.to_string()).with_param("keep_alive"))?,
            ),
            None => None,
        };
        let model = body.model.as_deref().filter(|m| !m.trim().is_empty());
        let restored = state.generation.restore_context(snapshot, model, keep_alive).await?;
        let mut shown = describe(&restored.context);
        shown["snapshot"] = json!(restored.snapshot);
        return Ok((StatusCode::CREATED, shown));
    }
    let model = body.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
        CoreError::invalid("model is required: the model whose KV state the context holds")
            .with_param("model")
    })?;
    let keep_alive = match &body.keep_alive {
        Some(value) => Some(
            KeepAlive::from_json(value)
                .map_err(|e| CoreError::invalid(e.to_string()).with_param("keep_alive"))?,
        ),
        None => None,
    };
    let tools = body
        .tools
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, tool)| convert_tool(i, tool))
        .collect::<Result<Vec<_>, _>>()?;
    let input = match (body.messages, body.prompt) {
        (Some(_), Some(_)) => {
            return Err(
                CoreError::invalid("send messages or prompt, not both").with_param("prompt")
            );
        }
        (Some(messages), None) => {
            if messages.is_empty() {
                return Err(
                    CoreError::invalid("messages is empty; send at least one message")
                        .with_param("messages"),
                );
            }
            PromptInput::Chat { messages: convert_messages(body.system, messages)?, tools }
        }
        (None, Some(prompt)) => {
            if prompt.is_empty() {
                return Err(CoreError::invalid("prompt is empty").with_param("prompt"));
            }
            if !tools.is_empty() || body.system.is_some() {
                return Err(CoreError::invalid(
                    "tools and system shape a conversation; send them with messages, not with a raw prompt",
                )
                .with_param("prompt"));
            }
            PromptInput::Raw { prompt, system: None, template: false }
        }
        (None, None) => {
            return Err(CoreError::invalid(
                "send messages (a conversation) or prompt (raw text) to prefill",
            )
            .with_param("messages"));
        }
    };
    let context = state.generation.create_context(&model, input, keep_alive).await?;
    Ok((StatusCode::CREATED, describe(&context)))
}

/// `GET /v1/contexts`'s query.
#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<String>,
    after: Option<String>,
}

/// `limit` and `after` from the query string, checked.
fn list_query(query: &str) -> Result<(usize, Option<String>), CoreError> {
    let query = web::Query::<ListQuery>::from_query(query)
        .map_err(|e| CoreError::invalid(format!("the query string is not valid: {e}")))?
        .into_inner();
    let limit = match query.limit.as_deref() {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                CoreError::invalid(format!("limit is {text:?}; send a whole number from 1 to {MAX_PAGE}"))
                    .with_param("limit")
            })?,
    };
    Ok((limit, query.after.filter(|after| !after.is_empty())))
}

async fn list(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    let listed = list_query(request.query_string()).and_then(|(limit, after)| {
        let page = state.generation.list_contexts(after.as_deref(), limit)?;
        let data: Vec<Value> = page.contexts.iter().map(describe).collect();
        Ok((
            StatusCode::OK,
            json!({
                "object": "list",
                "data": data,
                "first_id": page.contexts.first().map(|r| r.id.clone()),
                "last_id": page.contexts.last().map(|r| r.id.clone()),
                "has_more": page.has_more,
            }),
        ))
    });
    respond(listed)
}

async fn get(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    respond(state.generation.context(&id).map(|context| (StatusCode::OK, describe(&context))))
}

async fn delete(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    respond(state.generation.delete_context(&id).map(|context| {
        (
            StatusCode::OK,
            json!({"id": context.id, "object": "context", "deleted": true}),
        )
    }))
}

/// `n` from the query string: 1 when absent.
fn fork_count(query: &str) -> Result<usize, CoreError> {
    let mut n = 1usize;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "n" {
            n = value.parse().map_err(|_| {
                CoreError::invalid(format!("n is {value:?}; send a whole number from 1 to 64"))
                    .with_param("n")
            })?;
        }
    }
    Ok(n)
}

async fn fork(
    state: web::Data<AppState>,
    request: HttpRequest,
    id: web::Path<String>,
) -> HttpResponse {
    let forked = fork_count(request.query_string()).and_then(|n| state.generation.fork_context(&id, n));
    respond(forked.map(|children| {
        let contexts: Vec<Value> = children.iter().map(describe).collect();
        (
            StatusCode::CREATED,
            json!({"object": "list", "contexts": contexts}),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn fork_counts_are_read_from_the_query() {
        assert_eq!(fork_count("n=8").unwrap(), 8);
        assert_eq!(fork_count("").unwrap(), 1);
        assert_eq!(
            fork_count("n=eight").unwrap_err().code,
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn list_queries_take_a_limit_and_an_after() {
        assert_eq!(list_query("").unwrap(), (DEFAULT_PAGE, None));
        assert_eq!(list_query("limit=5&after=ctx_a_b").unwrap(), (5, Some("ctx_a_b".into())));
        for bad in ["limit=0", "limit=1001", "limit=ten"] {
            assert_eq!(list_query(bad).unwrap_err().param.as_deref(), Some("limit"), "{bad}");
        }
    }

    #[test]
    fn tools_come_in_either_shape() {
        let openai = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
        let flat = json!({"name": "g", "input_schema": {"type": "object"}});
        assert_eq!(convert_tool(0, openai).unwrap().name, "f");
        assert_eq!(convert_tool(1, flat).unwrap().name, "g");
        assert!(convert_tool(2, json!({})).is_err());
    }
}
