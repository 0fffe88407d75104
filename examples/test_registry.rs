//! A local registry speaking Ollama's protocol, for the integration tests, the demo and trying
//! `llamay pull` without the internet. It serves a model from the store (the real GGUF blob)
//! with template, system, params and license layers:
//!
//!   cargo run --release --example test_registry -- [PORT] [STORE_MODEL] [NAMESPACE/NAME:TAG]
//!   (defaults: a free port, smollm2:135m, library/smollm2-local:latest)
//!
//! It prints `registry http://127.0.0.1:PORT` on one line and serves until stdin closes or it
//! is killed. Pull with `LLAMAY_REGISTRY=http://127.0.0.1:PORT llamay pull smollm2-local`.

#[path = "../tests/support/registry.rs"]
mod registry;

use std::io::{BufRead, Write};

use llamay::store::{ModelName, Store};
use registry::{
    Layer, TestRegistry, MEDIA_LICENSE, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_SYSTEM, MEDIA_TEMPLATE,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map(|p| p.parse()).transpose()?.unwrap_or(0);
    let model = args.next().unwrap_or_else(|| "smollm2:135m".to_string());
    let published = args
        .next()
        .unwrap_or_else(|| "library/smollm2-local:latest".to_string());
    let (repository, tag) = published.split_once(':').unwrap_or((&published, "latest"));
    let (namespace, name) = repository
        .split_once('/')
        .unwrap_or(("library", repository));

    let store = Store::open(&Store::default_home())?;
    let manifest = store.resolve(&ModelName::parse(&model)?)?;
    let blob = store.blob_path(&manifest);
    drop(store);
    let registry = TestRegistry::start_on(port)?;
    registry.publish(
        namespace,
        name,
        tag,
        standard_layers(Layer::file(MEDIA_MODEL, blob)?),
    );
    println!("registry {}", registry.url());
    std::io::stdout().flush()?;
    // Serves until stdin closes (the test that started it went away) or a signal.
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line)? > 0 {
        line.clear();
    }
    Ok(())
}

fn standard_layers(model: Layer) -> Vec<Layer> {
    vec![
        model,
        Layer::bytes(MEDIA_TEMPLATE, "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n<|im_start|>assistant\n"),
        Layer::bytes(MEDIA_SYSTEM, "You are a helpful assistant."),
        Layer::bytes(MEDIA_PARAMS, r#"{"stop":["<|im_start|>","<|im_end|>"],"temperature":0.2}"#),
        Layer::bytes(MEDIA_LICENSE, "Apache License 2.0"),
    ]
}
