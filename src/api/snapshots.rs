//! Context snapshots over HTTP (issue 11): `POST /v1/contexts/{id}/snapshot` writes a
//! context's KV state to the model store, `GET /v1/snapshots` (and `/{id}`) lists them,
//! `DELETE /v1/snapshots/{id}` removes one, and `POST /v1/contexts {"snapshot": ...}` restores
//! one as a new context ([`restore`], called from `contexts.rs`). Errors come in the OpenAI
//! shape, as on the other `/v1/` routes.
//!
//! Saving and restoring a context's state are the generation service's; this module stores
//! and lists what they move.
//!
//! Key items: [`configure`], [`restore`]. Costs: a snapshot runs one job on the model's worker
//! (no prefill when the context is in a sequence or parked) and one blob write; a restore
//! reads and hashes the blob and writes it into a sequence, with no prefill.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use super::contexts::{describe, respond};
use super::AppState;
use crate::contexts::snapshots::SnapshotManifest;
use crate::contexts::snapshots::{snapshot_content, SnapshotShelf};
use crate::core::KeepAlive;
use crate::error::CoreError;

/// The routes, for `App::configure`.
pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/contexts/{id}/snapshot", web::post().to(take))
        .route("/v1/snapshots", web::get().to(list))
        .route("/v1/snapshots/{id}", web::get().to(get))
        .route("/v1/snapshots/{id}", web::delete().to(delete));
}

fn shelf(state: &AppState) -> Result<Arc<SnapshotShelf>, CoreError> {
    state.snapshots.clone().ok_or_else(|| {
        CoreError::internal(
            "snapshots need the model store, and this daemon has it read-only (another llamay \
             process holds it)",
        )
    })
}

fn show(manifest: &SnapshotManifest) -> Value {
    json!({
        "snapshot": manifest.id,
        "object": "snapshot",
        "context": manifest.context,
        "model": manifest.model,
        "model_digest": manifest.model_digest,
        "tokens": manifest.tokens.len(),
        "bytes": manifest.bytes,
        "created": manifest.created,
    })
}

/// Runs a blocking store call off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoreError> + Send + 'static,
) -> Result<T, CoreError> {
    web::block(work)
        .await
        .map_err(|e| CoreError::internal(format!("the store call did not finish: {e}")))?
}

async fn take(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    respond(take_snapshot(&state, &id).await)
}

async fn take_snapshot(state: &AppState, id: &str) -> Result<(StatusCode, Value), CoreError> {
    let shelf = shelf(state)?;
    let record = state.contexts.get(id)?;
    let (digest, bytes) = state.generation.save_context_state(&record).await?;
    let tokens = record.tokens().as_ref().clone();
    let manifest = blocking(move || shelf.put(&record, tokens, &digest, &bytes)).await?;
    Ok((StatusCode::CREATED, show(&manifest)))
}

async fn list(state: web::Data<AppState>) -> HttpResponse {
    let listed = match shelf(&state) {
        Ok(shelf) => blocking(move || shelf.list()).await,
        Err(error) => Err(error),
    };
    respond(listed.map(|all| {
        let data: Vec<Value> = all.iter().map(show).collect();
        (StatusCode::OK, json!({"object": "list", "data": data}))
    }))
}

async fn get(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    let found = match shelf(&state) {
        Ok(shelf) => blocking(move || shelf.get(&id)).await,
        Err(error) => Err(error),
    };
    respond(found.map(|manifest| (StatusCode::OK, show(&manifest))))
}

async fn delete(state: web::Data<AppState>, id: web::Path<String>) -> HttpResponse {
    let id = id.into_inner();
    let shown = id.clone();
    let removed = match shelf(&state) {
        Ok(shelf) => blocking(move || shelf.remove(&id)).await,
        Err(error) => Err(error),
    };
    respond(removed.map(|()| {
        (
            StatusCode::OK,
            json!({"id": shown, "object": "snapshot", "deleted": true}),
        )
    }))
}

/// `POST /v1/contexts {"snapshot": id}`: a new context holding the snapshot's tokens, its
/// sequence written from the saved state (no prefill). `model`, when sent, must be the
/// snapshot's.
pub async fn restore(
    state: &AppState,
    id: &str,
    model: Option<&str>,
    keep_alive: Option<KeepAlive>,
) -> Result<(StatusCode, Value), CoreError> {
    let shelf = shelf(state)?;
    let manifest = {
        let shelf = Arc::clone(&shelf);
        let id = id.to_string();
        blocking(move || shelf.get(&id)).await?
    };
    // Spellings of one model are the same model (a snapshot taken before names were
    // normalised may hold any of them).
    let same_model = |asked: &str| {
        let parsed = crate::core::ModelName::parse;
        parsed(asked).ok().is_some_and(|asked| parsed(&manifest.model).ok() == Some(asked))
    };
    if let Some(model) = model.filter(|m| !same_model(m)) {
        return Err(CoreError::invalid(format!(
            "snapshot {} holds the state of model {:?}, not {model:?}; leave model out or send {:?}",
            manifest.id, manifest.model, manifest.model
        ))
        .with_param("model"));
    }
    let content = snapshot_content(&manifest)?;
    let (model, tokens, snapshot) = (manifest.model.clone(), manifest.tokens.clone(), manifest.id.clone());
    let read_state = move |digest: &str| shelf.state_for(&manifest, digest);
    let record = state.generation.restore_context(&model, content, tokens, keep_alive, read_state).await?;
    let mut shown = describe(&record);
    shown["snapshot"] = json!(snapshot);
    Ok((StatusCode::CREATED, shown))
}
