//! The embedding path against the real all-MiniLM-L6-v2 that `scripts/setup` converts from
//! safetensors with `llamay import`: the converted vocabulary tokenizes like BERT's own
//! tokenizer, the vectors match an independent numpy implementation of the model
//! (testdata/embeddings/minilm_reference.py), and retrieval ranks the relevant document first.

use llamay::llm::embed::EmbedderParams;
use llamay::llm::Model;
use llamay::store::{ModelName, Store};
use serde_json::Value;

fn load_minilm() -> Model {
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store
        .resolve(&ModelName::parse("all-minilm:l6-v2").unwrap())
        .expect("all-minilm:l6-v2 imported by scripts/setup");
    Model::load(&store.blob_path(&manifest)).expect("the converted MiniLM loads in llama.cpp")
}

fn testdata(name: &str) -> Value {
    let path = format!("{}/testdata/embeddings/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("testdata")).expect("json")
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn tokenize(model: &Model, text: &str) -> Vec<u32> {
    model.tokenize(text, true, false).expect("tokenize")
}

#[test]
fn minilm_vectors_match_an_independent_implementation() {
    let model = load_minilm();
    assert!(model.is_embedding_model());
    assert!(
        model.normalizes_embeddings(),
        "the Normalize module was recorded at import"
    );
    let reference = testdata("minilm_reference.json");
    let sentences = reference["sentences"].as_array().unwrap();
    assert_eq!(sentences.len(), 20);
    let inputs: Vec<Vec<u32>> = sentences
        .iter()
        .map(|s| tokenize(&model, s["text"].as_str().unwrap()))
        .collect();
    for (sentence, tokens) in sentences.iter().zip(&inputs) {
        let expected: Vec<u32> = serde_json::from_value(sentence["tokens"].clone()).unwrap();
        assert_eq!(
            tokens, &expected,
            "WordPiece tokens of {:?}",
            sentence["text"]
        );
    }
    let mut embedder = model
        .new_embedder(&EmbedderParams::default())
        .expect("embedding context");
    assert_eq!(embedder.dimensions(), 384);
    let vectors = embedder.embed(&inputs).expect("embed");
    let mut worst = f64::MAX;
    for (sentence, vector) in sentences.iter().zip(&vectors) {
        let expected: Vec<f32> = serde_json::from_value(sentence["embedding"].clone()).unwrap();
        let norm = vector
            .iter()
            .map(|x| (*x as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length, got {norm}");
        let similarity = cosine(vector, &expected);
        worst = worst.min(similarity);
        assert!(
            similarity >= 0.999,
            "{:?}: cosine {similarity}",
            sentence["text"]
        );
    }
    println!("worst cosine to the numpy reference over 20 sentences: {worst:.6}");
}

#[test]
fn one_batch_gives_the_same_vectors_as_one_input_at_a_time() {
    let model = load_minilm();
    let mut embedder = model.new_embedder(&EmbedderParams::default()).unwrap();
    let texts = [
        "a short one",
        "a somewhat longer sentence about the weather in spring",
        "third",
    ];
    let inputs: Vec<Vec<u32>> = texts.iter().map(|t| tokenize(&model, t)).collect();
    let batched = embedder.embed(&inputs).unwrap();
    for (input, together) in inputs.iter().zip(&batched) {
        let alone = embedder
            .embed(std::slice::from_ref(input))
            .unwrap()
            .remove(0);
        assert!(
            cosine(&alone, together) > 0.99999,
            "sequences leaked into each other"
        );
    }
}

#[test]
fn an_over_long_input_is_refused_by_index() {
    let model = load_minilm();
    let mut embedder = model.new_embedder(&EmbedderParams::default()).unwrap();
    let long = vec![1000u32; embedder.max_input_tokens() + 1];
    let error = embedder
        .embed(&[vec![101, 102], long])
        .unwrap_err()
        .to_string();
    assert!(error.contains("input 1"), "{error}");
}

#[test]
fn minilm_ranks_the_relevant_document_first_for_most_queries() {
    let model = load_minilm();
    let set = testdata("retrieval.json");
    let text_list =
        |key: &str| -> Vec<String> { serde_json::from_value(set[key].clone()).unwrap() };
    let (documents, queries) = (text_list("documents"), text_list("queries"));
    let relevant: Vec<usize> = serde_json::from_value(set["relevant"].clone()).unwrap();
    let mut embedder = model.new_embedder(&EmbedderParams::default()).unwrap();
    let embed = |embedder: &mut llamay::llm::embed::Embedder<'_>, texts: &[String]| {
        let inputs: Vec<Vec<u32>> = texts.iter().map(|t| tokenize(&model, t)).collect();
        embedder.embed(&inputs).unwrap()
    };
    let document_vectors = embed(&mut embedder, &documents);
    let query_vectors = embed(&mut embedder, &queries);
    let mut first = 0;
    let mut reciprocal_ranks = 0.0;
    for (query, answer) in query_vectors.iter().zip(&relevant) {
        let mut ranked: Vec<usize> = (0..documents.len()).collect();
        ranked.sort_by(|&a, &b| {
            cosine(query, &document_vectors[b]).total_cmp(&cosine(query, &document_vectors[a]))
        });
        let rank = ranked.iter().position(|d| d == answer).unwrap() + 1;
        first += usize::from(rank == 1);
        reciprocal_ranks += 1.0 / rank as f64;
    }
    println!(
        "MiniLM: relevant first for {first}/10, MRR@10 {:.3}",
        reciprocal_ranks / 10.0
    );
    assert!(
        first >= 8,
        "relevant document first for only {first}/10 queries"
    );
}
