//! Ollama routes: chat and generate (NDJSON streaming by default, or one JSON object), the model
//! list, the loaded models, a model's details and the version. Errors are `{"error": "..."}`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::convert::{convert_chat, convert_generate, Converted};
use super::stream::{answer_object, Endpoint, NdjsonStream};
use super::types::{
    ChatRequest, ErrorBody, GenerateRequest, ModelDetails, PsEntry, PsResponse, ShowRequest,
    TagEntry, TagsResponse,
};
use crate::api::body::read_json;
use crate::api::common::{error_response, event_stream, logprob_entries};
use crate::api::AppState;
use crate::core::{CatalogEntry, KeepAlive};
use crate::error::CoreError;

/// An error in Ollama's shape.
pub fn render_error(error: &CoreError) -> HttpResponse {
    error_response(error).json(ErrorBody {
        error: error.message.clone(),
    })
}

pub async fn chat(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: ChatRequest = read_json(&request, payload, state.max_body_bytes).await?;
        answer(&state, convert_chat(body)?, Endpoint::Chat).await
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

pub async fn generate(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: GenerateRequest = read_json(&request, payload, state.max_body_bytes).await?;
        answer(&state, convert_generate(body)?, Endpoint::Generate).await
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

async fn answer(
    state: &AppState,
    converted: Converted,
    endpoint: Endpoint,
) -> Result<HttpResponse, CoreError> {
    let request = converted.request;
    let model = request.model.clone();
    let logprobs = request.logprobs.is_some();
    if converted.load_only {
        state.generation.load(&model, request.keep_alive, converted.gpu_layers).await?;
        let reason = if request.keep_alive == Some(KeepAlive::UnloadNow) {
            "unload"
        } else {
            "load"
        };
        let mut object = answer_object(endpoint, &model, "", None);
        object["done"] = json!(true);
        object["done_reason"] = json!(reason);
        return Ok(HttpResponse::Ok().json(object));
    }
    // `num_gpu` decides how the model loads.
    let validated = state.generation.validate(request, converted.constraint).await?;
    let started = state.generation.start(validated, converted.gpu_layers).await?;
    if converted.stream {
        return Ok(HttpResponse::Ok()
            .content_type("application/x-ndjson")
            .streaming(event_stream(started, NdjsonStream::new(endpoint, model))));
    }
    let collected = crate::service::collect(started).await?;
    let mut object = answer_object(endpoint, &model, &collected.text, Some(&collected.completion));
    if logprobs {
        object["logprobs"] = json!(logprob_entries(&collected.logprobs));
    }
    Ok(HttpResponse::Ok().json(object))
}

/// `134.52M`, `1.6B`: Ollama's parameter_size.
pub fn human_parameters(count: u64) -> String {
    let count = count as f64;
    if count >= 1e9 {
        format!("{:.1}B", count / 1e9)
    } else if count >= 1e6 {
        format!("{:.2}M", count / 1e6)
    } else if count >= 1e3 {
        format!("{:.2}K", count / 1e3)
    } else {
        format!("{count}")
    }
}

/// Default options as Ollama's `/api/show` writes them: `name value` lines, one per stop.
fn parameters_text(
    parameters: &std::collections::BTreeMap<String, serde_json::Value>,
) -> String {
    let mut lines = Vec::new();
    for (name, value) in parameters {
        let values = match value {
            serde_json::Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        };
        for value in values {
            let text = match value {
                serde_json::Value::String(text) => format!("\"{text}\""),
                other => other.to_string(),
            };
            lines.push(format!("{name:<30} {text}"));
        }
    }
    lines.join("\n")
}

fn details(entry: &CatalogEntry) -> ModelDetails {
    ModelDetails {
        parent_model: String::new(),
        format: "gguf",
        family: entry.family.clone(),
        families: vec![entry.family.clone()],
        parameter_size: entry.parameter_size.clone(),
        quantization_level: entry.quantization_level.clone(),
    }
}

fn timestamp(time: Option<chrono::DateTime<chrono::Utc>>) -> String {
    time.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into())
}

pub async fn tags(state: web::Data<AppState>) -> HttpResponse {
    match state.catalog.list() {
        Ok(entries) => HttpResponse::Ok().json(TagsResponse {
            models: entries
                .into_iter()
                .map(|entry| TagEntry {
                    name: entry.name.clone(),
                    model: entry.name.clone(),
                    modified_at: timestamp(entry.modified_at),
                    size: entry.size_bytes,
                    digest: entry.digest.trim_start_matches("sha256:").to_string(),
                    details: details(&entry),
                    capabilities: entry.capabilities.clone(),
                })
                .collect(),
        }),
        Err(error) => render_error(&error),
    }
}

pub async fn ps(state: web::Data<AppState>) -> HttpResponse {
    let status = match state.generation.model_status().await {
        Ok(status) => status,
        Err(error) => return render_error(&error),
    };
    let models = status
        .models
        .into_iter()
        .map(|model| {
            let info = model.info;
            // As Ollama: `size` is all the model takes, `size_vram` its part on a GPU (by the
            // estimate it loaded with; a model loaded without one counts its file).
            let (size, size_vram) =
                model.memory.as_ref().map_or((info.size_bytes, 0), |memory| (memory.total(), memory.device_bytes()));
            PsEntry {
                name: info.name.clone(),
                model: info.name.clone(),
                size,
                digest: info.digest.trim_start_matches("sha256:").to_string(),
                details: ModelDetails {
                    parent_model: String::new(),
                    format: "gguf",
                    family: info.architecture.clone(),
                    families: vec![info.architecture.clone()],
                    parameter_size: human_parameters(info.parameter_count),
                    quantization_level: info.quantization.clone(),
                },
                // Kept forever: a date no one reaches, as Ollama prints.
                expires_at: model
                    .expires_at
                    .map_or_else(|| "2318-08-06T23:59:59Z".into(), |t| timestamp(Some(t))),
                size_vram,
                context_length: info.context_length,
            }
        })
        .collect();
    HttpResponse::Ok().json(PsResponse { models })
}

pub async fn show(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: ShowRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let name = body
            .model
            .or(body.name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| CoreError::invalid("model is required"))?;
        let description = state.catalog.describe(&name)?;
        let defaults = &description.defaults;
        Ok::<_, CoreError>(HttpResponse::Ok().json(json!({
            "license": defaults.license.join("\n"),
            "modelfile": "",
            "parameters": parameters_text(&defaults.parameters),
            "system": defaults.system.clone().unwrap_or_default(),
            // A pulled model's Ollama template when it has one, as Ollama shows; else the GGUF's.
            "template": defaults.template.clone().or(description.template).unwrap_or_default(),
            "details": details(&description.entry),
            "model_info": description.metadata,
            "capabilities": description.entry.capabilities,
            "modified_at": timestamp(description.entry.modified_at),
        })))
    };
    result.await.unwrap_or_else(|error| render_error(&error))
}

pub async fn version() -> HttpResponse {
    HttpResponse::Ok().json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sizes_read_like_ollama() {
        assert_eq!(human_parameters(134_515_008), "134.52M");
        assert_eq!(human_parameters(1_600_000_000), "1.6B");
        assert_eq!(human_parameters(999), "999");
    }
}
