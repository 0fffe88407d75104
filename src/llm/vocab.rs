//! The model's vocabulary as raw bytes per token, built once per model and shared.
//!
//! The constraint engine needs to know exactly which bytes each token contributes; the
//! detokenizer needs the same bytes. Control tokens contribute no bytes; end-of-generation
//! tokens are listed separately because they end the output rather than extend it.
//! Key type: [`Vocabulary`]. Cost: one `token_to_piece` call per token at load
//! (~4 ms for 49k tokens, ~28 ms for 262k), then free lookups.

use super::ffi::RawModel;

#[derive(Debug, Clone, PartialEq)]
pub struct Vocabulary {
    pieces: Vec<Vec<u8>>,
    end_of_generation: Vec<u32>,
    bos: Option<u32>,
    add_bos: bool,
}

impl Vocabulary {
    pub(super) fn from_model(model: &RawModel) -> Self {
        let count = model.n_tokens();
        let mut pieces = Vec::with_capacity(count as usize);
        let mut end_of_generation = Vec::new();
        for token in 0..count {
            if model.is_end_of_generation(token) {
                end_of_generation.push(token);
            }
            // Control tokens render as nothing without `special`: exactly what a constraint
            // should see, since they never add text to the output.
            let piece = if model.is_control(token) { Vec::new() } else { model.token_bytes(token, false) };
            pieces.push(piece);
        }
        Self { pieces, end_of_generation, bos: model.bos(), add_bos: model.adds_bos() }
    }

    /// For tests and tools that build a vocabulary without a model.
    pub fn from_parts(pieces: Vec<Vec<u8>>, end_of_generation: Vec<u32>) -> Self {
        Self { pieces, end_of_generation, bos: None, add_bos: false }
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The bytes `token` adds to the output; empty for control tokens and unknown ids.
    pub fn piece(&self, token: u32) -> &[u8] {
        self.pieces.get(token as usize).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn pieces(&self) -> &[Vec<u8>] {
        &self.pieces
    }

    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    pub fn is_end_of_generation(&self, token: u32) -> bool {
        self.end_of_generation.contains(&token)
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// `{"tokens": [[bytes...], ...], "eog": [ids]}`: the shape benches and tools read.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "tokens": self.pieces, "eog": self.end_of_generation })
    }

    /// Reads what [`Vocabulary::to_json`] wrote.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        let pieces = value.get("tokens")?.as_array()?.iter().map(|t| {
            t.as_array()?.iter().map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok())).collect()
        });
        let pieces: Option<Vec<Vec<u8>>> = pieces.collect();
        let eog: Option<Vec<u32>> = value.get("eog")?.as_array()?.iter().map(|t| t.as_u64().map(|t| t as u32)).collect();
        Some(Self::from_parts(pieces?, eog?))
    }
}
