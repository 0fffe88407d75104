//! Context snapshots over HTTP (issue 11): `POST /v1/contexts/{id}/snapshot` writes a
//! context's KV state to the model store, `GET /v1/snapshots` (and `/{id}`) lists them, and
//! `DELETE /v1/snapshots/{id}` removes one; `POST /v1/contexts {"snapshot": ...}` (in
//! `contexts.rs`) restores one as a new context. Errors come in the OpenAI shape, as on the other
//! `/v1/` routes.
//!
//! Saving, listing, deleting and restoring snapshots are the generation service's
//! (`crate::service::snapshots`); this module translates the wire shapes.
//!
//! Key item: [`configure`]. Costs: the service's: a snapshot runs one job on the model's worker
//! and one blob write.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use super::openai::handlers::respond;
use super::AppState;
use crate::service::snapshots::SnapshotSummary;

/// The routes, for `App::configure`.
pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/contexts/{id}/snapshot", web::post().to(take))
        .route("/v1/snapshots", web::get().to(list))
        .route("/v1/snapshots/{id}", web::get().to(get))
        .route("/v1/snapshots/{id}", web::delete().to(delete));
}

fn show(snapshot: &SnapshotSummary) -> Value {
    json!({
        "snapshot": snapshot.id,
        "object": "snapshot",
        "context": snapshot.context,
        "model": snapshot.model,
        "model_digest": snapshot.model_digest,
        "tokens": snapshot.tokens,
        "bytes": snapshot.bytes,
        "created": snapshot.created,
    })
}

async fn take(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    let taken = state.generation.snapshot_context(&id).await;
    respond(taken.map(|snapshot| (StatusCode::CREATED, show(&snapshot))))
}

async fn list(state: web::Data<AppState>) -> HttpResponse {
    respond(state.generation.list_snapshots().await.map(|all| {
        let data: Vec<Value> = all.iter().map(show).collect();
        (StatusCode::OK, json!({"object": "list", "data": data}))
    }))
}

async fn get(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    respond(state.generation.snapshot(&id).await.map(|snapshot| (StatusCode::OK, show(&snapshot))))
}

async fn delete(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    respond(state.generation.delete_snapshot(&id).await.map(|()| {
        (
            StatusCode::OK,
            json!({"id": id.into_inner(), "object": "snapshot", "deleted": true}),
        )
    }))
}
