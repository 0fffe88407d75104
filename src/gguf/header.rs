//! A GGUF header as a memory estimate or a layer split reads it ([`super::read_gguf_header`]):
//! every key with its value (a number, a flag, a string of at most 1 MiB), the length of every
//! array, the elements of short integer arrays (per-layer values such as
//! `attention.head_count_kv`), and every tensor's name and size in bytes, in file order.
//!
//! Key type: [`GgufHeader`]. Cost: memory in proportion to the header's keys and tensors (a few
//! hundred of each in a real model); the tokenizer's long arrays are counted, never kept.

use std::collections::HashMap;

/// Most elements of an integer array kept; longer ones (token types, one per token) keep only
/// their length. Per-layer arrays are far shorter.
pub const MAX_KEPT_ARRAY: u64 = 65_536;

/// A metadata value as the reader met it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Unsigned(u64),
    Signed(i64),
    Bool(bool),
    Text(String),
    /// An array's length and, for a short array of integers, its elements (negative ones as 0).
    Array {
        len: u64,
        integers: Option<Vec<u64>>,
    },
    /// A float, or a string too long to keep.
    Ignored,
}

/// The keys and tensor table of one GGUF file.
#[derive(Debug, Default)]
pub struct GgufHeader {
    pub(super) values: HashMap<String, Value>,
    pub(super) tensors: Vec<(String, u64)>,
}

impl GgufHeader {
    /// An integer key of any width; `None` when absent, negative or of another type.
    pub fn uint(&self, key: &str) -> Option<u64> {
        match self.values.get(key)? {
            Value::Unsigned(value) => Some(*value),
            Value::Signed(value) => u64::try_from(*value).ok(),
            _ => None,
        }
    }

    /// A key that is one integer or an array of them (one per layer, as
    /// `attention.head_count_kv` is in some models); `None` when absent or of another type.
    pub fn uints(&self, key: &str) -> Option<Vec<u64>> {
        match self.values.get(key)? {
            Value::Array { integers, .. } => integers.clone(),
            _ => self.uint(key).map(|value| vec![value]),
        }
    }

    /// The element count of an array key (`tokenizer.ggml.tokens`: the vocabulary size).
    pub fn array_len(&self, key: &str) -> Option<u64> {
        match self.values.get(key)? {
            Value::Array { len, .. } => Some(*len),
            _ => None,
        }
    }

    /// A string key; `None` when absent, of another type, or longer than 1 MiB.
    pub fn string(&self, key: &str) -> Option<&str> {
        match self.values.get(key)? {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// A boolean key; `None` when absent or of another type.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.values.get(key)? {
            Value::Bool(value) => Some(*value),
            _ => None,
        }
    }

    /// Whether the header has `key`, whatever its type.
    pub fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Every tensor's name and size in bytes, in file order.
    pub fn tensors(&self) -> &[(String, u64)] {
        &self.tensors
    }
}
