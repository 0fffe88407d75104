//! Converting Hugging Face model directories (config.json + model.safetensors +
//! tokenizer.json, optionally a sentence-transformers layout) into GGUF files llama.cpp loads,
//! as `ollama create` converts safetensors. `llamay import DIR NAME` uses it.
//!
//! Key items: [`convert_directory`], [`ConvertSummary`], [`ConvertError`]. Supported: the
//! BERT family's `BertModel` ([`bert`]); any other architecture is refused by name.
//! Cost: the weights are read whole and written as f32 (MiniLM-L6: 90 MB, about a second).

pub mod bert;

use std::path::{Path, PathBuf};

/// The GGUF key carrying a sentence-transformers `Normalize` module: llama.cpp has none, and
/// the embedding path L2-normalizes when it is true.
pub const NORMALIZE_KEY: &str = "llamay.embedding.normalize";

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON of the expected shape: {reason}")]
    Json { path: PathBuf, reason: String },
    #[error("{path} is missing; a Hugging Face model directory has config.json, model.safetensors and tokenizer.json")]
    MissingFile { path: PathBuf },
    #[error("architecture {architecture} is not supported by import; it converts BertModel (BERT sentence encoders such as all-MiniLM-L6-v2)")]
    UnsupportedArchitecture { architecture: String },
    #[error("{what} is not supported by import: {detail}")]
    Unsupported { what: String, detail: String },
    #[error("model.safetensors: {0}")]
    Safetensors(String),
    #[error("tokenizer.json: {0}")]
    Tokenizer(String),
    #[error("tensor {name}: {reason}")]
    Tensor { name: String, reason: String },
}

/// What a conversion produced, for the person who ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertSummary {
    pub architecture: String,
    pub layers: u32,
    pub embedding_length: u32,
    pub vocabulary: usize,
    /// llama.cpp's pooling type name: "mean", "cls" or "last".
    pub pooling: &'static str,
    pub normalize: bool,
    pub tensors: usize,
    pub parameters: u64,
    pub bytes: u64,
}

/// Converts the model directory `dir` into the GGUF file `output`.
pub fn convert_directory(dir: &Path, output: &Path) -> Result<ConvertSummary, ConvertError> {
    let config: serde_json::Value = read_json(&dir.join("config.json"))?;
    let architecture = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
        .or_else(|| config.get("model_type").and_then(|m| m.as_str()))
        .unwrap_or("unknown (config.json names none)")
        .to_string();
    match architecture.as_str() {
        "BertModel" => bert::convert(dir, &config, output),
        _ => Err(ConvertError::UnsupportedArchitecture { architecture }),
    }
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConvertError> {
    let text = std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ConvertError::MissingFile {
            path: path.to_path_buf(),
        },
        _ => ConvertError::Io {
            path: path.to_path_buf(),
            source,
        },
    })?;
    serde_json::from_str(&text).map_err(|e| ConvertError::Json {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
