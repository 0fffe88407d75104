//! The vocabularies the grammar benches measure masks with: `LLAMAY_VOCAB_JSON`
//! (comma-separated store model names, GGUF paths or `.json` vocabulary files), by default
//! the two models scripts/setup installs. Each bench loads them with
//! `llamay::actors::model::load_vocabulary`.
//! Cost: one environment read.

/// The vocabularies named by `LLAMAY_VOCAB_JSON`, else smollm2:135m and gemma3:270m.
pub fn names() -> Vec<String> {
    std::env::var("LLAMAY_VOCAB_JSON")
        .unwrap_or_else(|_| "smollm2:135m,gemma3:270m".into())
        .split(',')
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}
