//! `GET /v1/stats` (loaded models with size, expiry, sequences in use and queue depth, the
//! queue counting requests waiting for a load and for a free sequence; per-model totals and
//! tok/s; the constraint caches and the compile pool; each GPU's memory and each model's part
//! on it) and `GET /health` for service managers.

use std::sync::atomic::Ordering;

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::AppState;

pub async fn stats(state: web::Data<AppState>) -> HttpResponse {
    let Ok(status) = state.generation.model_status().await else {
        return HttpResponse::ServiceUnavailable().json(
            json!({"error": {"message": "llamay is shutting down", "type": "Service Unavailable"}}),
        );
    };
    let models: Vec<serde_json::Value> = status
        .models
        .iter()
        .map(|model| {
            let totals = &model.totals;
            json!({
                "name": model.info.name,
                "architecture": model.info.architecture,
                "size_bytes": model.info.size_bytes,
                "parameter_count": model.info.parameter_count,
                "quantization": model.info.quantization,
                "context_length": model.info.context_length,
                "parallel": model.info.parallel,
                "sequences_in_use": model.sequences_in_use,
                "requests_in_flight": model.requests_in_flight,
                "queue_depth": model.queue_depth,
                "keep_alive": model.keep_alive,
                "expires_at": model.expires_at.map(|t| t.to_rfc3339()),
                "loaded_at": model.loaded_at.to_rfc3339(),
                "rpc_placement": model.placement,
                "totals": {
                    "requests": totals.requests,
                    "prompt_tokens": totals.prompt_tokens,
                    "generated_tokens": totals.generated_tokens,
                    "budget_closings": totals.budget_closings,
                    "generation_seconds": totals.generation_time.as_secs_f64(),
                    "prompt_eval_seconds": totals.prompt_eval_time.as_secs_f64(),
                    "tokens_per_second": totals.tokens_per_second(),
                    "prefix_reuse_hits": totals.prefix_reuse_hits,
                    "prefix_tokens_saved": totals.prefix_tokens_saved,
                    "drafts": {
                        "forced": totals.drafts.forced,
                        "copied": totals.drafts.copied,
                        "accepted": totals.drafts.accepted,
                        "steps_saved": totals.drafts.accepted,
                    },
                    "step_seconds": totals
                        .step_split
                        .phases()
                        .iter()
                        .map(|(phase, spent)| (phase.to_string(), json!(spent.as_secs_f64())))
                        .collect::<serde_json::Map<_, _>>(),
                },
                "constraint_caches": totals.constraint_caches,
                "kind": model.kind.as_str(),
                "rerank_scorer": model.rerank_scorer.map(|kind| kind.as_str()),
                "memory": model.memory.as_ref().map(|memory| json!({
                    "host_bytes": memory.host_bytes,
                    "device_bytes": memory.device_bytes(),
                    "device": memory.device.as_ref().map(|share| share.name.clone()),
                    "gpu_layers": memory.device.as_ref().map_or(0, |share| share.layers),
                    "offloadable_layers": memory.device.as_ref().map(|share| share.of_layers),
                })),
            })
        })
        .collect();
    HttpResponse::Ok().json(json!({
        "uptime_seconds": state.started_at.elapsed().as_secs_f64(),
        "max_loaded": status.max_loaded,
        "max_queue": status.max_queue,
        "queue_depth": status.queue_depth,
        "loading": status.loading,
        "models": models,
        "compiled_constraints": state.generation.constraint_stats(),
        "compile_pool": state.generation.compile_pool_stats(),
        "rpc_workers": state.rpc_workers,
        "embed_model": state.embed_model,
        "rerank_model": state.rerank_model,
        "gpu_backends": crate::llm::devices::compiled_backends(),
        "devices": status.devices.iter().map(|device| json!({
            "name": device.device.name,
            "backend": device.device.backend,
            "description": device.device.description,
            "total_bytes": device.device.total,
            "free_bytes": device.device.free,
            "used_by_models_bytes": device.used_by_models,
            "models": device.models,
        })).collect::<Vec<_>>(),
        "contexts": contexts(&state),
        "prefix_reuse": {
            "hits": status.models.iter().map(|m| m.totals.prefix_reuse_hits).sum::<u64>(),
            "tokens_saved": status.models.iter().map(|m| m.totals.prefix_tokens_saved).sum::<u64>(),
        },
    }))
}

/// Context counts per state and the parking lot's use.
fn contexts(state: &AppState) -> serde_json::Value {
    let stats = state.generation.context_stats();
    json!({
        "total": stats.total,
        "max_contexts": stats.max_contexts,
        "hot": stats.hot,
        "parked": stats.parked,
        "stored": stats.stored,
        "cold": stats.cold,
        "parked_bytes": stats.parked_bytes,
        "parked_limit_bytes": stats.parked_limit_bytes,
        "spilled_to_disk": stats.spilled_to_disk,
    })
}

pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    if state.shutting_down.load(Ordering::Acquire) {
        return HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "5"))
            .json(json!({"status": "stopping"}));
    }
    HttpResponse::Ok().json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}

pub async fn root() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body("llamay is running")
}
