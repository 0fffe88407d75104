//! The embedding actor on the real models: a request of many inputs answered in order, the
//! bad inputs refused as 400s naming the input, truncation, and a chat model refused.

use llamay::embed::{EmbedInput, EmbeddingService};
use llamay::llm::embed::EmbedderParams;
use llamay::store::{ModelName, Store};

fn start(name: &str) -> Result<EmbeddingService, llamay::error::CoreError> {
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store
        .resolve(&ModelName::parse(name).unwrap())
        .expect("model imported by scripts/setup");
    EmbeddingService::start(name, &store.blob_path(&manifest), EmbedderParams::default())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn text(s: &str) -> EmbedInput {
    EmbedInput::Text(s.to_string())
}

#[test]
fn many_inputs_come_back_in_order_as_unit_vectors() {
    let service = start("all-minilm:l6-v2").expect("starts");
    assert_eq!(service.info().dimensions, 384);
    assert!(service.info().normalizes);
    let runtime = runtime();
    let inputs = vec![
        text("the cat sat"),
        text("stock prices fell"),
        text("the cat sat"),
    ];
    let embedded = runtime.block_on(service.embed(inputs, true)).unwrap();
    assert_eq!(embedded.vectors.len(), 3);
    assert_eq!(embedded.prompt_tokens, 5 + 5 + 5);
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!((dot(&embedded.vectors[0], &embedded.vectors[0]) - 1.0).abs() < 1e-4);
    assert!(
        dot(&embedded.vectors[0], &embedded.vectors[2]) > 0.9999,
        "same text, same vector"
    );
    assert!(
        dot(&embedded.vectors[0], &embedded.vectors[1]) < 0.5,
        "unrelated texts differ"
    );
    // Token ids embed exactly like the text they came from.
    let ids = EmbedInput::Tokens(vec![101, 1996, 4937, 2938, 102]);
    let from_ids = runtime.block_on(service.embed(vec![ids], true)).unwrap();
    assert!(dot(&from_ids.vectors[0], &embedded.vectors[0]) > 0.9999);
}

#[test]
fn bad_inputs_are_400s_naming_the_input() {
    let service = start("all-minilm:l6-v2").expect("starts");
    let runtime = runtime();
    let long = "word ".repeat(2000);
    let error = runtime
        .block_on(service.embed(vec![text("fine"), text(&long)], false))
        .unwrap_err();
    assert_eq!(error.status(), 400);
    assert!(error.message.contains("input 1"), "{}", error.message);
    let truncated = runtime
        .block_on(service.embed(vec![text(&long)], true))
        .unwrap();
    assert_eq!(truncated.prompt_tokens, service.info().max_input_tokens);
    let error = runtime
        .block_on(service.embed(vec![text("ok"), text("")], true))
        .unwrap_err();
    assert_eq!(
        (error.status(), error.message.contains("input 1")),
        (400, true),
        "{}",
        error.message
    );
    let error = runtime
        .block_on(service.embed(vec![EmbedInput::Tokens(vec![99_999_999])], true))
        .unwrap_err();
    assert_eq!(error.status(), 400, "{}", error.message);
}

#[test]
fn a_chat_model_is_refused_for_embeddings() {
    let error = start("smollm2:135m").err().expect("refused");
    assert_eq!(error.status(), 400);
    assert!(error.message.contains("chat model"), "{}", error.message);
}
