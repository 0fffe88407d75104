//! Responses routes: `POST /v1/responses` (a whole response, or its typed event stream), and
//! the stored ones: `GET /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` (paged) and
//! `DELETE /v1/responses/{id}`. Errors are in OpenAI's shape.
//!
//! A response is stored (unless the request says `store: false`) once it has finished, before
//! its last event or its body goes out, so a client may continue it at once. A stored response
//! belongs to the API key that created it: another key (a daemon restarted with a new one) is
//! told it does not exist. Nothing is stored for a request that was refused.
//!
//! Costs: the store calls are sled reads, inserts (microseconds) and flushes (an fsync), run
//! off the HTTP workers but for the insert at the end of a stream; continuing a response reads
//! its conversation.

use std::sync::Arc;

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::convert::convert;
use super::object::{new_message_id, output_items, Finished, ResponseHead};
use super::stream::ResponsesStream;
use super::types::{InputItemsQuery, ResponsesRequest};
use crate::api::auth::key_owner;
use crate::api::body::read_json;
use crate::api::common::{event_stream, sse_response, unix_now, StreamTranslator};
use crate::api::openai::handlers::render_error;
use crate::api::AppState;
use crate::core::{new_response_id, ChatMessage, ResponseStore, StoredResponse, StreamEvent};
use crate::error::{CoreError, ErrorCode};
use crate::service::collect;

/// Most input items one page lists, and how many when the request does not say (OpenAI's).
const MAX_PAGE: usize = 100;
const DEFAULT_PAGE: usize = 20;

pub async fn create(state: web::Data<AppState>, request: HttpRequest, payload: web::Payload) -> HttpResponse {
    create_response(&state, &request, payload).await.unwrap_or_else(|error| render_error(&error))
}

pub async fn retrieve(state: web::Data<AppState>, request: HttpRequest, id: web::Path<String>) -> HttpResponse {
    match find(&state, &request, id.into_inner(), None).await {
        Ok(stored) => HttpResponse::Ok().json(stored.response),
        Err(error) => render_error(&error),
    }
}

pub async fn delete(state: web::Data<AppState>, request: HttpRequest, id: web::Path<String>) -> HttpResponse {
    delete_response(&state, &request, id.into_inner()).await.unwrap_or_else(|error| render_error(&error))
}

pub async fn input_items(state: web::Data<AppState>, request: HttpRequest, id: web::Path<String>) -> HttpResponse {
    list_input_items(&state, &request, id.into_inner()).await.unwrap_or_else(|error| render_error(&error))
}

async fn list_input_items(state: &AppState, http: &HttpRequest, id: String) -> Result<HttpResponse, CoreError> {
    // Read here rather than by an extractor, so a bad query is refused in OpenAI's shape.
    let query = web::Query::<InputItemsQuery>::from_query(http.query_string())
        .map_err(|e| CoreError::invalid(format!("the query is not limit, after and order: {e}")))?
        .into_inner();
    let stored = find(state, http, id, None).await?;
    Ok(HttpResponse::Ok().json(page(stored.input_items, query)?))
}

/// What is kept of a response once it has finished.
struct Keep {
    store: Arc<dyn ResponseStore>,
    owner: Option<String>,
    input_items: Vec<Value>,
    /// The conversation before the answer.
    conversation: Vec<ChatMessage>,
}

impl Keep {
    fn record(self, id: &str, finished: &Finished) -> (Arc<dyn ResponseStore>, StoredResponse) {
        let mut conversation = self.conversation;
        conversation.push(finished.assistant.clone());
        let stored = StoredResponse {
            id: id.to_string(),
            owner: self.owner,
            response: finished.object.clone(),
            input_items: self.input_items,
            conversation,
        };
        (self.store, stored)
    }
}

async fn create_response(state: &AppState, http: &HttpRequest, payload: web::Payload) -> Result<HttpResponse, CoreError> {
    let body: ResponsesRequest = read_json(http, payload, state.max_body_bytes).await?;
    let previous = match body.previous_response_id.clone() {
        Some(id) => find(state, http, id, Some("previous_response_id")).await?.conversation,
        None => Vec::new(),
    };
    let converted = convert(body, previous)?;
    let store = state.responses.clone().filter(|_| converted.store);
    let mut echo = converted.echo;
    echo.store = store.is_some();
    let created = chrono::Utc::now();
    let micros = u64::try_from(created.timestamp_micros()).unwrap_or(0);
    let head = ResponseHead { id: new_response_id(micros), created_at: unix_now(), echo };
    let keep = store.map(|store| Keep {
        store,
        owner: key_owner(state, http),
        input_items: converted.input_items,
        conversation: converted.conversation,
    });
    let started = state.generation.generate(converted.request, converted.constraint).await?;
    if converted.stream {
        let stream = StoringStream { id: head.id.clone(), stream: ResponsesStream::new(head), keep };
        return Ok(sse_response(event_stream(started, stream)));
    }
    let collected = collect(started).await?;
    let output = output_items(&new_message_id(), &collected.text, &collected.completion);
    let finished = head.finish(output, &collected.text, &collected.completion);
    if let Some(keep) = keep {
        let (store, stored) = keep.record(&head.id, &finished);
        blocking(move || {
            store.put(&stored)?;
            store.flush()
        })
        .await?;
    }
    Ok(HttpResponse::Ok().json(finished.object))
}

/// The event stream, storing the response when it finishes (before its last event goes out).
struct StoringStream {
    id: String,
    stream: ResponsesStream,
    keep: Option<Keep>,
}

impl StreamTranslator for StoringStream {
    fn start(&mut self) -> Vec<Bytes> {
        self.stream.start()
    }

    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        let frames = self.stream.event(event);
        if let Some(finished) = self.stream.take_finished() {
            if let Some(keep) = self.keep.take() {
                let (store, stored) = keep.record(&self.id, &finished);
                // Visible at once (an insert); the fsync runs off the HTTP worker.
                match store.put(&stored) {
                    Ok(()) => drop(tokio::task::spawn_blocking(move || {
                        if let Err(error) = store.flush() {
                            tracing::warn!(%error, "stored responses could not be written to disk");
                        }
                    })),
                    Err(error) => tracing::warn!(id = %self.id, %error, "a streamed response could not be stored"),
                }
            }
        }
        frames
    }
}

/// Runs a store call off the HTTP workers.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> Result<T, CoreError> + Send + 'static) -> Result<T, CoreError> {
    web::block(call).await.map_err(|e| CoreError::internal(format!("the response store call did not finish: {e}")))?
}

/// The stored response `id` if the caller may see it; a 404 naming it otherwise (`param`: the
/// field that named it).
async fn find(state: &AppState, http: &HttpRequest, id: String, param: Option<&str>) -> Result<StoredResponse, CoreError> {
    let mut missing = CoreError::new(
        ErrorCode::ResponseNotFound,
        format!("no stored response {id:?}: it was never stored (store: false), was deleted, or is past the daemon's bounds"),
    );
    if let Some(param) = param {
        missing = missing.with_param(param);
    }
    let Some(store) = state.responses.clone() else {
        return Err(missing);
    };
    let owner = key_owner(state, http);
    let found = blocking(move || store.get(&id)).await?;
    found.filter(|stored| stored.owner == owner).ok_or(missing)
}

async fn delete_response(state: &AppState, http: &HttpRequest, id: String) -> Result<HttpResponse, CoreError> {
    let stored = find(state, http, id, None).await?;
    let Some(store) = state.responses.clone() else {
        return Err(CoreError::internal("the response store went away"));
    };
    let id = stored.id;
    let removed = blocking({
        let id = id.clone();
        move || {
            let removed = store.delete(&id)?;
            store.flush()?;
            Ok(removed)
        }
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({"id": id, "object": "response.deleted", "deleted": removed})))
}

/// One page of `items`, newest first unless `order=asc`, starting after the item `after`.
fn page(mut items: Vec<Value>, query: InputItemsQuery) -> Result<Value, CoreError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(CoreError::invalid(format!("limit is {limit}; it must be between 1 and {MAX_PAGE}")).with_param("limit"));
    }
    match query.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => return Err(CoreError::invalid(format!("order {other:?} is not \"asc\" or \"desc\"")).with_param("order")),
    }
    let start = match query.after {
        None => 0,
        Some(after) => {
            let at = items.iter().position(|item| item["id"].as_str() == Some(after.as_str())).ok_or_else(|| {
                CoreError::invalid(format!("after {after:?} is not an input item of this response")).with_param("after")
            })?;
            at + 1
        }
    };
    let has_more = items.len() > start + limit;
    let data: Vec<Value> = items.into_iter().skip(start).take(limit).collect();
    Ok(json!({
        "object": "list",
        "first_id": data.first().map(|item| item["id"].clone()),
        "last_id": data.last().map(|item| item["id"].clone()),
        "has_more": has_more,
        "data": data,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(count: usize) -> Vec<Value> {
        (0..count).map(|i| json!({"id": format!("msg_{i}")})).collect()
    }

    fn query(limit: Option<usize>, after: Option<&str>, order: Option<&str>) -> InputItemsQuery {
        InputItemsQuery { limit, after: after.map(str::to_string), order: order.map(str::to_string) }
    }

    #[test]
    fn pages_run_newest_first_and_continue_after_an_id() {
        let first = page(items(5), query(Some(2), None, None)).unwrap();
        assert_eq!((first["first_id"].as_str(), first["last_id"].as_str(), first["has_more"].as_bool()), (Some("msg_4"), Some("msg_3"), Some(true)));
        let last = page(items(5), query(Some(2), Some("msg_1"), None)).unwrap();
        assert_eq!((last["data"][0]["id"].as_str(), last["has_more"].as_bool()), (Some("msg_0"), Some(false)));
        let ascending = page(items(5), query(None, Some("msg_2"), Some("asc"))).unwrap();
        assert_eq!(ascending["data"], json!([{"id": "msg_3"}, {"id": "msg_4"}]));
        assert_eq!(page(items(1), query(Some(0), None, None)).unwrap_err().param.as_deref(), Some("limit"));
        assert_eq!(page(items(1), query(None, Some("msg_9"), None)).unwrap_err().param.as_deref(), Some("after"));
        assert_eq!(page(items(1), query(None, None, Some("up"))).unwrap_err().param.as_deref(), Some("order"));
    }
}
