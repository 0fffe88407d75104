//! Ollama's model routes that change the store: `POST /api/pull`, `POST /api/create` (NDJSON
//! progress, or one object with `"stream": false`), `POST /api/copy` and `DELETE /api/delete`.
//! They reach the store through [`crate::core::ModelAdmin`], never directly. A delete removes
//! the store entry first and then retires the model's loaded copy (through the service,
//! [`crate::service::GenerationService::retire`]), so nothing can load it again meanwhile.
//!
//! Pulls and creates run on their own thread and send progress through a channel; when the
//! client goes away the channel closes, the next progress report sees it and the pull stops
//! (its partial download stays for a resume). Key items: the four handlers and [`ProgressLine`].

use std::sync::Arc;

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::handlers::render_error;
use crate::api::body::read_json;
use crate::api::AppState;
use crate::core::{CreateModel, ModelAdmin, ModelName, PullProgress};
use crate::error::{CoreError, ErrorCode};

/// Progress objects buffered before a slow client makes the pull wait.
const PROGRESS_BUFFER: usize = 64;

/// Ollama's clients also send `"insecure"`: it is accepted and changes nothing, since only the
/// operator allows plain http (`insecure_registries`).
#[derive(Debug, Deserialize)]
pub struct PullRequest {
    pub model: Option<String>,
    /// The field's older name, still sent by some clients.
    pub name: Option<String>,
    pub stream: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct CopyRequest {
    pub source: String,
    pub destination: String,
}

#[derive(Debug, Deserialize)]
pub struct DeleteRequest {
    pub model: Option<String>,
    pub name: Option<String>,
}

/// A license is one text or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum License {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    pub model: Option<String>,
    pub name: Option<String>,
    pub from: Option<String>,
    /// `file name -> sha256:<hex>`: a GGUF blob already in the store.
    #[serde(default)]
    pub files: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
    pub system: Option<String>,
    pub template: Option<String>,
    pub license: Option<License>,
    pub stream: Option<bool>,
    pub quantize: Option<String>,
    pub adapters: Option<serde_json::Value>,
    pub messages: Option<serde_json::Value>,
}

/// One NDJSON line of progress, Ollama's `ProgressResponse`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ProgressLine {
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

impl From<PullProgress> for ProgressLine {
    fn from(progress: PullProgress) -> Self {
        ProgressLine {
            status: progress.status,
            digest: progress.digest,
            total: progress.total,
            completed: progress.completed,
        }
    }
}

fn admin(state: &AppState) -> Result<Arc<dyn ModelAdmin>, CoreError> {
    state.admin.clone().ok_or_else(|| {
        CoreError::new(
            ErrorCode::NotOffered,
            "this daemon cannot change the model store: another llamay process holds it, or it runs without one",
        )
    })
}

fn required(value: Option<String>, field: &str) -> Result<String, CoreError> {
    value
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| CoreError::invalid(format!("{field} is required")).with_param(field))
}

enum Event {
    Progress(PullProgress),
    Failed(CoreError),
}

/// Runs `work` on its own thread, reporting through a channel; answers NDJSON when `stream`,
/// else one object once it is done.
async fn run_with_progress(
    stream: bool,
    work: impl FnOnce(&mut (dyn FnMut(PullProgress) -> bool + Send)) -> Result<(), CoreError>
        + Send
        + 'static,
) -> HttpResponse {
    let (sender, mut receiver) = mpsc::channel::<Event>(PROGRESS_BUFFER);
    let spawned = std::thread::Builder::new()
        .name("llamay-pull".into())
        .spawn(move || {
            let progress_sender = sender.clone();
            let mut report = move |progress: PullProgress| {
                !progress_sender.is_closed()
                    && progress_sender
                        .blocking_send(Event::Progress(progress))
                        .is_ok()
            };
            if let Err(error) = work(&mut report) {
                let _ = sender.blocking_send(Event::Failed(error));
            }
        });
    if let Err(error) = spawned {
        return render_error(&CoreError::internal(format!(
            "could not start the pull: {error}"
        )));
    }
    if stream {
        let body = async_stream_lines(receiver);
        return HttpResponse::Ok()
            .content_type("application/x-ndjson")
            .streaming(body);
    }
    let mut last = None;
    while let Some(event) = receiver.recv().await {
        match event {
            Event::Progress(progress) => last = Some(progress),
            Event::Failed(error) => return render_error(&error),
        }
    }
    let last = last.unwrap_or_else(|| PullProgress::status("success"));
    HttpResponse::Ok().json(ProgressLine::from(last))
}

fn async_stream_lines(
    receiver: mpsc::Receiver<Event>,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await?;
        let value = match event {
            Event::Progress(progress) => serde_json::to_value(ProgressLine::from(progress)),
            Event::Failed(error) => Ok(serde_json::json!({ "error": error.message })),
        };
        let mut line = value
            .map(|v| v.to_string())
            .unwrap_or_default()
            .into_bytes();
        line.push(b'\n');
        Some((Ok(Bytes::from(line)), receiver))
    })
}

pub async fn pull(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: PullRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let model = required(body.model.or(body.name), "model")?;
        let admin = admin(&state)?;
        // A name that cannot be pulled is a 400 before any stream starts.
        admin.local_name(&model)?;
        Ok::<_, CoreError>(
            run_with_progress(body.stream.unwrap_or(true), move |progress| {
                admin.pull(&model, progress)
            })
            .await,
        )
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

pub async fn create(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: CreateRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let name = required(body.model.or(body.name), "model")?;
        for (field, set) in [
            ("quantize", body.quantize.is_some()),
            ("adapters", body.adapters.is_some()),
            ("messages", body.messages.is_some()),
        ] {
            if set {
                return Err(CoreError::new(
                    ErrorCode::NotOffered,
                    format!("{field} is not supported by llamay's create"),
                )
                .with_param(field));
            }
        }
        let from = match (body.from, body.files.len()) {
            (Some(from), 0) => from,
            (None, 1) => body.files.into_values().next().unwrap_or_default(),
            (None, 0) => {
                return Err(
                    CoreError::invalid("`from` or one GGUF in `files` is required")
                        .with_param("from"),
                )
            }
            _ => {
                return Err(CoreError::invalid(
                    "give `from` or one GGUF in `files`, not both or several",
                )
                .with_param("files"))
            }
        };
        let create = CreateModel {
            name,
            from,
            parameters: body.parameters.into_iter().collect(),
            system: body.system,
            template: body.template,
            license: match body.license {
                Some(License::One(text)) => vec![text],
                Some(License::Many(texts)) => texts,
                None => Vec::new(),
            },
            allow_paths: false,
        };
        let admin = admin(&state)?;
        Ok::<_, CoreError>(
            run_with_progress(body.stream.unwrap_or(true), move |progress| {
                admin.create(create, progress)
            })
            .await,
        )
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

pub async fn copy(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: CopyRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let admin = admin(&state)?;
        web::block(move || admin.copy(&body.source, &body.destination))
            .await
            .map_err(|e| CoreError::internal(e.to_string()))??;
        Ok::<_, CoreError>(HttpResponse::Ok().finish())
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

pub async fn delete(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: DeleteRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let model = required(body.model.or(body.name), "model")?;
        let name = ModelName::parse(&model).map_err(|e| CoreError::from(e).with_param("model"))?;
        let admin = admin(&state)?;
        web::block(move || admin.delete(&model))
            .await
            .map_err(|e| CoreError::internal(e.to_string()))??;
        // Gone from the store, so no request can load it again; its loaded copy goes too.
        state.generation.retire(name).await;
        Ok::<_, CoreError>(HttpResponse::Ok().finish())
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_leave_out_what_a_step_lacks() {
        let line = ProgressLine::from(PullProgress::status("pulling manifest"));
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"status":"pulling manifest"}"#
        );
        let layer = ProgressLine::from(PullProgress {
            status: "pulling 0123456789ab".into(),
            digest: Some("sha256:0123".into()),
            total: Some(10),
            completed: Some(4),
        });
        assert_eq!(
            serde_json::to_string(&layer).unwrap(),
            r#"{"status":"pulling 0123456789ab","digest":"sha256:0123","total":10,"completed":4}"#
        );
    }
}
