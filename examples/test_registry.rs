//! A local registry speaking Ollama's protocol, for the integration tests, the demo and trying
//! `llamay pull` without the internet. It serves a model from the store (the real GGUF blob)
//! with template, system, params and license layers:
//!
//!   cargo run --release --example test_registry -- [PORT] [STORE_MODEL] [NAMESPACE/NAME:TAG]
//!   (defaults: a free port, smollm2:135m, library/smollm2-local:latest)
//!
//! It prints `registry http://127.0.0.1:PORT` on one line and serves until stdin closes or it
//! is killed. Pull with `LLAMAY_REGISTRY=http://127.0.0.1:PORT llamay pull smollm2-local`.
//! `LLAMAY_TEST_REGISTRY_SLOW_MICROS=N` waits N microseconds after each 256 KiB of a blob (a
//! slow link, for tests that interrupt a pull). `LLAMAY_TEST_REGISTRY_PAD=N` serves a copy of
//! the GGUF with N zero bytes appended: a different digest, so a store that has the model's
//! blob still has to download it.

use std::io::{BufRead, Write};

use llamay::store::{ModelName, Store};
use llamay_test_support::registry::{
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
    let mut blob = store.blob_path(&manifest);
    drop(store);
    let pad: u64 = std::env::var("LLAMAY_TEST_REGISTRY_PAD")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let padded =
        std::env::temp_dir().join(format!("llamay-test-registry-{}.gguf", std::process::id()));
    if pad > 0 {
        std::fs::copy(&blob, &padded)?;
        let file = std::fs::OpenOptions::new().write(true).open(&padded)?;
        file.set_len(file.metadata()?.len() + pad)?;
        blob = padded.clone();
    }
    let registry = TestRegistry::start_on(port)?;
    registry.publish(
        namespace,
        name,
        tag,
        standard_layers(Layer::file(MEDIA_MODEL, blob)?),
    );
    if let Some(micros) = std::env::var("LLAMAY_TEST_REGISTRY_SLOW_MICROS")
        .ok()
        .and_then(|m| m.parse().ok())
    {
        registry
            .faults()
            .slow_chunk_micros
            .store(micros, std::sync::atomic::Ordering::Release);
    }
    println!("registry {}", registry.url());
    std::io::stdout().flush()?;
    // Serves until stdin closes (the test that started it went away) or a signal.
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line)? > 0 {
        line.clear();
    }
    let _ = std::fs::remove_file(&padded);
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
