//! Synthetic GGUF files for tests: a small writer of the GGUF v3 layout (header, typed
//! metadata, tensor infos, aligned data) so header parsing and the store are tested without
//! real model files. Test-only; files are a few KiB.

use std::path::Path;

use super::ggml_type_layout;

pub(crate) const GGML_F32: u32 = 0;
pub(crate) const GGML_Q4_1: u32 = 3;
pub(crate) const GGML_Q4_K: u32 = 12;

/// A metadata value as written to the file.
#[derive(Clone, Debug)]
pub(crate) enum TestValue {
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    U32Array(Vec<u32>),
}

#[derive(Clone, Debug)]
pub(crate) struct TestTensor {
    pub name: String,
    pub shape: Vec<u64>,
    pub ggml_type: u32,
}

/// Builds a GGUF file in memory.
#[derive(Clone, Debug)]
pub(crate) struct GgufBuilder {
    pub version: u32,
    pub kvs: Vec<(String, TestValue)>,
    pub tensors: Vec<TestTensor>,
    /// Byte written into every tensor-data byte, so two builders can differ in content only.
    pub fill: u8,
}

pub(crate) const TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

impl GgufBuilder {
    pub fn empty() -> Self {
        GgufBuilder { version: 3, kvs: Vec::new(), tensors: Vec::new(), fill: 0x11 }
    }

    /// A tiny llama-shaped model: Q4_1, 2048 context, a chat template, 576 parameters.
    pub fn llama_like() -> Self {
        Self::empty()
            .kv("general.architecture", TestValue::Str("llama".into()))
            .kv("general.name", TestValue::Str("Tiny Test".into()))
            .kv("general.file_type", TestValue::U32(3))
            .kv("llama.context_length", TestValue::U32(2048))
            .kv("llama.rope.freq_base", TestValue::F32(10000.0))
            .kv("tokenizer.ggml.add_bos_token", TestValue::Bool(true))
            .kv(
                "tokenizer.ggml.tokens",
                TestValue::StrArray(vec!["<s>".into(), "a".into(), "é".into()]),
            )
            .kv("tokenizer.ggml.token_type", TestValue::U32Array(vec![3, 1, 1]))
            .kv("tokenizer.chat_template", TestValue::Str(TEMPLATE.into()))
            .tensor("token_embd.weight", &[64, 8], GGML_Q4_1)
            .tensor("output_norm.weight", &[64], GGML_F32)
    }

    pub fn kv(mut self, key: &str, value: TestValue) -> Self {
        self.kvs.retain(|(k, _)| k != key);
        self.kvs.push((key.to_string(), value));
        self
    }

    pub fn without(mut self, key: &str) -> Self {
        self.kvs.retain(|(k, _)| k != key);
        self
    }

    pub fn tensor(mut self, name: &str, shape: &[u64], ggml_type: u32) -> Self {
        self.tensors.push(TestTensor { name: name.into(), shape: shape.to_vec(), ggml_type });
        self
    }

    pub fn fill(mut self, fill: u8) -> Self {
        self.fill = fill;
        self
    }

    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            put_value(&mut out, value);
        }
        let sizes: Vec<u64> = self.tensors.iter().map(tensor_bytes).collect();
        let mut offset = 0u64;
        for (tensor, size) in self.tensors.iter().zip(&sizes) {
            put_str(&mut out, &tensor.name);
            out.extend_from_slice(&(tensor.shape.len() as u32).to_le_bytes());
            for dim in &tensor.shape {
                out.extend_from_slice(&dim.to_le_bytes());
            }
            out.extend_from_slice(&tensor.ggml_type.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + size).next_multiple_of(32);
        }
        if !self.tensors.is_empty() {
            out.resize(out.len().next_multiple_of(32), 0);
        }
        for size in &sizes {
            out.resize(out.len().next_multiple_of(32), 0);
            out.extend(std::iter::repeat_n(self.fill, *size as usize));
        }
        out
    }

    pub fn write_to(&self, path: &Path) {
        std::fs::write(path, self.build()).expect("write synthetic gguf");
    }
}

fn tensor_bytes(tensor: &TestTensor) -> u64 {
    let (block_elements, block_bytes, _) =
        ggml_type_layout(tensor.ggml_type).expect("test tensors use known types");
    let rows: u64 = tensor.shape.iter().skip(1).product();
    tensor.shape[0] / block_elements * block_bytes * rows
}

pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &TestValue) {
    let type_id: u32 = match value {
        TestValue::U32(_) => 4,
        TestValue::I32(_) => 5,
        TestValue::U64(_) => 10,
        TestValue::F32(_) => 6,
        TestValue::Bool(_) => 7,
        TestValue::Str(_) => 8,
        TestValue::StrArray(_) | TestValue::U32Array(_) => 9,
    };
    out.extend_from_slice(&type_id.to_le_bytes());
    match value {
        TestValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        TestValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        TestValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        TestValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        TestValue::Bool(v) => out.push(u8::from(*v)),
        TestValue::Str(v) => put_str(out, v),
        TestValue::StrArray(items) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_str(out, item);
            }
        }
        TestValue::U32Array(items) => {
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                out.extend_from_slice(&item.to_le_bytes());
            }
        }
    }
}
