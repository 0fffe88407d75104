//! GPU memory on the wire, with a fake 4 GiB GPU injected into the supervisor: `size` and
//! `size_vram` in `/api/ps`, `devices` and each model's `memory` in `/v1/stats`, the per-device
//! gauges of `/metrics`, the banner's device lines, and `options.num_gpu` loading a model
//! again with other layers.

use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::{test, web, Error};
use serde_json::{json, Value};

use crate::daemon::banner::device_lines;
use super::support::{app_state, ScriptedLoader};
use crate::api::{build_app, AppState, RouteSettings};
use crate::service::GenerationPolicy;
use crate::actors::memory::testing::{estimate, FakeGpu, GIB};
use crate::actors::memory::{MemoryProbe, NoProbe};
use crate::actors::messages::{LoadedModel, ModelLoader};
use crate::actors::supervisor::{Supervisor, SupervisorConfig};
use crate::core::KeepAlive;
use crate::error::CoreError;
use crate::llm::offload::{LayerPlacement, MemoryEstimate};

/// The scripted models, placed by a fixed estimate: 9 layers, 1.9 GiB on a device whole.
struct PlacedLoader(ScriptedLoader);

impl ModelLoader for PlacedLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        self.0.load(name)
    }
    fn estimate(&self, _: &str) -> Result<Option<MemoryEstimate>, CoreError> {
        Ok(Some(estimate(8, 200)))
    }
    fn load_placed(&self, name: &str, _: LayerPlacement) -> Result<Arc<dyn LoadedModel>, CoreError> {
        self.0.load(name)
    }
}

fn state(probe: impl MemoryProbe + 'static) -> web::Data<AppState> {
    let config = SupervisorConfig { max_loaded: 2, default_keep_alive: KeepAlive::For(Duration::from_secs(300)), max_queue: 8 };
    let supervisor = Supervisor::new(Arc::new(PlacedLoader(ScriptedLoader::new())), config)
        .with_memory(Arc::new(probe), None)
        .start();
    web::Data::new(app_state(supervisor, GenerationPolicy::default(), RouteSettings::new(64 * 1024)))
}

type Request = actix_http::Request;

async fn get<B: MessageBody>(app: &impl Service<Request, Response = ServiceResponse<B>, Error = Error>, path: &str) -> String {
    let response = test::call_service(app, test::TestRequest::get().uri(path).to_request()).await;
    assert!(response.status().is_success(), "{path}: {}", response.status());
    String::from_utf8_lossy(&test::read_body(response).await).into_owned()
}

async fn generate<B: MessageBody>(app: &impl Service<Request, Response = ServiceResponse<B>, Error = Error>, options: Value) {
    let body = json!({"model": "tiny:1m", "prompt": "hi", "stream": false, "options": options});
    let request = test::TestRequest::post().uri("/api/generate").set_json(body).to_request();
    let response = test::call_service(app, request).await;
    assert!(response.status().is_success(), "{}", response.status());
}

fn model_memory(stats: &Value) -> Value {
    stats["models"][0]["memory"].clone()
}

#[actix_web::test]
async fn a_model_on_the_gpu_shows_its_vram_everywhere() {
    let state = state(FakeGpu { total: 4 * GIB, host: None });
    let app = test::init_service(build_app(state.clone())).await;
    generate(&app, json!({})).await;
    let whole = estimate(8, 200).split(9);

    let ps: Value = serde_json::from_str(&get(&app, "/api/ps").await).unwrap();
    let entry = &ps["models"][0];
    assert_eq!(entry["size_vram"], json!(whole.device_bytes));
    assert_eq!(entry["size"], json!(whole.device_bytes + whole.host_bytes));

    let stats: Value = serde_json::from_str(&get(&app, "/v1/stats").await).unwrap();
    assert_eq!(stats["devices"][0]["name"], "FAKE0");
    assert_eq!(stats["devices"][0]["total_bytes"], json!(4 * GIB));
    assert_eq!(stats["devices"][0]["used_by_models_bytes"], json!(whole.device_bytes));
    assert_eq!(stats["devices"][0]["models"], 1);
    let memory = model_memory(&stats);
    assert_eq!((memory["gpu_layers"].clone(), memory["offloadable_layers"].clone()), (json!(9), json!(9)));
    assert_eq!(memory["device"], "FAKE0");

    let metrics = get(&app, "/metrics").await;
    let families = prometheus_parse::Scrape::parse(metrics.lines().map(|l| Ok(l.to_string()))).expect("valid exposition");
    let value = |name: &str| {
        families.samples.iter().find(|s| s.metric == name).map(|s| match s.value {
            prometheus_parse::Value::Gauge(v) => v,
            _ => f64::NAN,
        })
    };
    assert_eq!(value("llamay_device_memory_total_bytes"), Some((4 * GIB) as f64));
    assert_eq!(value("llamay_device_memory_models_bytes"), Some(whole.device_bytes as f64));
    assert_eq!(value("llamay_model_gpu_layers"), Some(9.0));

    let status = state.generation().model_status().await.unwrap();
    let lines = device_lines(&status);
    assert_eq!(lines[0], "Device FAKE0 (FAKE): Fake GPU, 4.0 GiB free of 4.0 GiB");
    assert!(lines[1].starts_with("  tiny:1m: 9/9 layers offloaded, 1."), "{lines:?}");
}

#[actix_web::test]
async fn num_gpu_reloads_with_the_layers_asked() {
    let state = state(FakeGpu { total: 4 * GIB, host: None });
    let app = test::init_service(build_app(state.clone())).await;
    generate(&app, json!({"num_gpu": 4})).await;
    let stats: Value = serde_json::from_str(&get(&app, "/v1/stats").await).unwrap();
    assert_eq!(model_memory(&stats)["gpu_layers"], 4);
    let smaller = estimate(8, 200).split(4).device_bytes;
    let ps: Value = serde_json::from_str(&get(&app, "/api/ps").await).unwrap();
    assert_eq!(ps["models"][0]["size_vram"], json!(smaller));
    generate(&app, json!({})).await;
    let stats: Value = serde_json::from_str(&get(&app, "/v1/stats").await).unwrap();
    assert_eq!(model_memory(&stats)["gpu_layers"], 4, "a request without num_gpu shares the loaded copy");
    generate(&app, json!({"num_gpu": -1})).await;
    generate(&app, json!({"num_gpu": 0})).await;
    let stats: Value = serde_json::from_str(&get(&app, "/v1/stats").await).unwrap();
    assert_eq!(model_memory(&stats)["gpu_layers"], 0);
    assert_eq!(model_memory(&stats)["device"], Value::Null);
    let ps: Value = serde_json::from_str(&get(&app, "/api/ps").await).unwrap();
    assert_eq!(ps["models"][0]["size_vram"], 0);
}

#[actix_web::test]
async fn without_a_gpu_the_banner_says_cpu_only() {
    let state = state(NoProbe);
    let app = test::init_service(build_app(state.clone())).await;
    generate(&app, json!({"num_gpu": 99})).await;
    let status = state.generation().model_status().await.unwrap();
    let lines = device_lines(&status);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("Devices: CPU only ("), "{lines:?}");
    let ps: Value = serde_json::from_str(&get(&app, "/api/ps").await).unwrap();
    assert_eq!(ps["models"][0]["size_vram"], 0);
    assert_eq!(ps["models"][0]["size"], json!(estimate(8, 200).total()));
}
