//! `BertModel` (sentence-transformers encoders such as all-MiniLM-L6-v2) to GGUF, in the shape
//! llama.cpp's BERT loader reads: `bert.*` hyperparameters, tensors renamed to `token_embd`,
//! `position_embd`, `token_types`, `token_embd_norm` and `blk.N.*`, the WordPiece vocabulary
//! with the phantom-space convention (`▁word` starts a word, a `##piece` loses its `##`), the
//! pooling type from `1_Pooling/config.json` and the `Normalize` module as a flag.
//!
//! Key item: [`convert`]. Cost: reads model.safetensors whole; f16/bf16 weights widen to f32.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use super::{read_json, ConvertError, ConvertSummary, NORMALIZE_KEY};
use crate::gguf::write::{GgufWriter, MetaValue};

/// llama.cpp's token types (llama_token_type).
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;

#[derive(Debug, Deserialize)]
struct BertConfig {
    hidden_size: u32,
    intermediate_size: u32,
    num_hidden_layers: u32,
    num_attention_heads: u32,
    max_position_embeddings: u32,
    #[serde(default = "default_type_vocab_size")]
    type_vocab_size: u32,
    #[serde(default = "default_layer_norm_eps")]
    layer_norm_eps: f32,
    #[serde(default = "default_hidden_act")]
    hidden_act: String,
    #[serde(default = "default_position_embedding_type")]
    position_embedding_type: String,
    #[serde(default)]
    _name_or_path: Option<String>,
}

fn default_type_vocab_size() -> u32 {
    2
}
fn default_layer_norm_eps() -> f32 {
    1e-12
}
fn default_hidden_act() -> String {
    "gelu".into()
}
fn default_position_embedding_type() -> String {
    "absolute".into()
}

#[derive(Debug, Deserialize)]
struct SentenceModule {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Debug, Default, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

/// llama.cpp's pooling type ids (llama_pooling_type) with their names.
fn pooling_type(pooling: &PoolingConfig) -> Result<(u32, &'static str), ConvertError> {
    let unsupported = |mode: &str| ConvertError::Unsupported {
        what: format!("pooling mode {mode}"),
        detail: "llama.cpp pools by mean, cls or last token".into(),
    };
    if pooling.pooling_mode_max_tokens {
        return Err(unsupported("max_tokens"));
    }
    if pooling.pooling_mode_mean_sqrt_len_tokens {
        return Err(unsupported("mean_sqrt_len_tokens"));
    }
    match (
        pooling.pooling_mode_mean_tokens,
        pooling.pooling_mode_cls_token,
        pooling.pooling_mode_lasttoken,
    ) {
        (true, false, false) => Ok((1, "mean")),
        (false, true, false) => Ok((2, "cls")),
        (false, false, true) => Ok((3, "last")),
        _ => Err(unsupported(
            "combination (exactly one of mean, cls, lasttoken must be set)",
        )),
    }
}

#[derive(Debug, Deserialize)]
struct TokenizerFile {
    model: TokenizerModel,
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    #[serde(default)]
    normalizer: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct TokenizerModel {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    vocab: HashMap<String, u32>,
}

#[derive(Debug, Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
}

struct Vocabulary {
    tokens: Vec<String>,
    types: Vec<i32>,
    lowercase: bool,
    special_ids: Vec<(&'static str, u32)>,
}

fn read_vocabulary(dir: &Path) -> Result<Vocabulary, ConvertError> {
    let tokenizer: TokenizerFile = read_json(&dir.join("tokenizer.json"))?;
    if tokenizer.model.kind != "WordPiece" {
        return Err(ConvertError::Tokenizer(format!(
            "model type {} is not supported; BERT import needs a WordPiece tokenizer",
            tokenizer.model.kind
        )));
    }
    let size = tokenizer.model.vocab.len();
    let mut by_id: Vec<Option<&str>> = vec![None; size];
    for (text, &id) in &tokenizer.model.vocab {
        let slot = by_id.get_mut(id as usize).ok_or_else(|| {
            ConvertError::Tokenizer(format!("token id {id} is outside a vocabulary of {size}"))
        })?;
        *slot = Some(text);
    }
    let special: HashMap<&str, u32> = tokenizer
        .added_tokens
        .iter()
        .filter(|t| t.special)
        .map(|t| (t.content.as_str(), t.id))
        .collect();
    let mut tokens = Vec::with_capacity(size);
    let mut types = Vec::with_capacity(size);
    for (id, text) in by_id.iter().enumerate() {
        let text =
            text.ok_or_else(|| ConvertError::Tokenizer(format!("token id {id} has no text")))?;
        let is_special = special.get(text) == Some(&(id as u32));
        types.push(if is_special {
            TOKEN_CONTROL
        } else {
            TOKEN_NORMAL
        });
        tokens.push(phantom_space_form(text, is_special));
    }
    let lowercase = tokenizer
        .normalizer
        .as_ref()
        .and_then(|n| n.get("lowercase"))
        .and_then(|l| l.as_bool())
        .unwrap_or(true);
    let find = |name: &str| tokenizer.model.vocab.get(name).copied();
    let mut special_ids = Vec::new();
    for (key, text) in [
        ("bos_token_id", "[CLS]"),
        ("cls_token_id", "[CLS]"),
        ("seperator_token_id", "[SEP]"),
        ("unknown_token_id", "[UNK]"),
        ("padding_token_id", "[PAD]"),
        ("mask_token_id", "[MASK]"),
    ] {
        let id = find(text).ok_or_else(|| {
            ConvertError::Tokenizer(format!("the vocabulary has no {text} token"))
        })?;
        special_ids.push((key, id));
    }
    Ok(Vocabulary {
        tokens,
        types,
        lowercase,
        special_ids,
    })
}

/// llama.cpp's WordPiece matcher prefixes every word with U+2581 and matches continuations
/// bare, so word-initial pieces gain the marker and `##` continuations lose theirs. Bracketed
/// markers such as `[CLS]` and `[unused0]` stay as they are.
pub(crate) fn phantom_space_form(token: &str, is_special: bool) -> String {
    if is_special || (token.starts_with('[') && token.ends_with(']')) {
        token.to_string()
    } else if let Some(rest) = token.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{token}")
    }
}

/// The llama.cpp name of a BertModel tensor, `None` for the ones it does not use (the pooler
/// head and the position-id buffer); an unknown tensor is an error, never silently dropped.
pub(crate) fn gguf_tensor_name(name: &str) -> Result<Option<String>, ConvertError> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if name == "embeddings.position_ids" || name.starts_with("pooler.") {
        return Ok(None);
    }
    let fixed = match name {
        "embeddings.word_embeddings.weight" => Some("token_embd.weight"),
        "embeddings.position_embeddings.weight" => Some("position_embd.weight"),
        "embeddings.token_type_embeddings.weight" => Some("token_types.weight"),
        "embeddings.LayerNorm.weight" => Some("token_embd_norm.weight"),
        "embeddings.LayerNorm.bias" => Some("token_embd_norm.bias"),
        _ => None,
    };
    if let Some(fixed) = fixed {
        return Ok(Some(fixed.to_string()));
    }
    let unknown = || ConvertError::Tensor {
        name: name.to_string(),
        reason: "not a BertModel tensor import knows".into(),
    };
    let rest = name.strip_prefix("encoder.layer.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: u32 = layer.parse().map_err(|_| unknown())?;
    let (module, param) = rest.rsplit_once('.').ok_or_else(unknown)?;
    if param != "weight" && param != "bias" {
        return Err(unknown());
    }
    let target = match module {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return Err(unknown()),
    };
    Ok(Some(format!("blk.{layer}.{target}.{param}")))
}

fn tensor_values(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>, ConvertError> {
    let words = |width: usize| bytes.chunks_exact(width);
    match dtype {
        Dtype::F32 => Ok(words(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()),
        Dtype::BF16 => Ok(words(2)
            .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
            .collect()),
        Dtype::F16 => Ok(words(2)
            .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect()),
        other => Err(ConvertError::Tensor {
            name: name.into(),
            reason: format!("element type {other:?} is not a float"),
        }),
    }
}

/// IEEE half to single precision, subnormals included.
pub(crate) fn f16_to_f32(half: u16) -> f32 {
    let sign = ((half >> 15) as u32) << 31;
    let exponent = ((half >> 10) & 0x1f) as u32;
    let mantissa = (half & 0x3ff) as u32;
    let bits = match (exponent, mantissa) {
        (0, 0) => sign,
        (0, _) => {
            let value = mantissa as f32 * 2f32.powi(-24);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, _) => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

/// Pooling and normalization from the sentence-transformers modules.json, when there is one;
/// a bare BertModel directory gets mean pooling without normalization.
fn sentence_transformer_head(dir: &Path) -> Result<((u32, &'static str), bool), ConvertError> {
    let modules_path = dir.join("modules.json");
    if !modules_path.exists() {
        return Ok(((1, "mean"), false));
    }
    let modules: Vec<SentenceModule> = read_json(&modules_path)?;
    let mut pooling = (1, "mean");
    let mut normalize = false;
    for module in &modules {
        match module.kind.rsplit('.').next().unwrap_or_default() {
            "Transformer" => {}
            "Pooling" => {
                pooling = pooling_type(&read_json(&dir.join(&module.path).join("config.json"))?)?
            }
            "Normalize" => normalize = true,
            other => {
                return Err(ConvertError::Unsupported {
                    what: format!("sentence-transformers module {other}"),
                    detail: "import handles Transformer, Pooling and Normalize".into(),
                })
            }
        }
    }
    Ok((pooling, normalize))
}

/// Converts the BertModel directory `dir` (its parsed `config`) to the GGUF file `output`.
pub fn convert(
    dir: &Path,
    config: &serde_json::Value,
    output: &Path,
) -> Result<ConvertSummary, ConvertError> {
    let config_path = dir.join("config.json");
    let hyper: BertConfig =
        serde_json::from_value(config.clone()).map_err(|e| ConvertError::Json {
            path: config_path.clone(),
            reason: e.to_string(),
        })?;
    if hyper.hidden_act != "gelu" {
        return Err(ConvertError::Unsupported {
            what: format!("hidden_act {}", hyper.hidden_act),
            detail: "llama.cpp's BERT uses gelu".into(),
        });
    }
    if hyper.position_embedding_type != "absolute" {
        return Err(ConvertError::Unsupported {
            what: format!("position_embedding_type {}", hyper.position_embedding_type),
            detail: "llama.cpp's BERT uses absolute positions".into(),
        });
    }
    let ((pooling_id, pooling_name), normalize) = sentence_transformer_head(dir)?;
    let vocabulary = read_vocabulary(dir)?;

    let weights_path = dir.join("model.safetensors");
    let bytes = std::fs::read(&weights_path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ConvertError::MissingFile {
            path: weights_path.clone(),
        },
        _ => ConvertError::Io {
            path: weights_path.clone(),
            source,
        },
    })?;
    let weights =
        SafeTensors::deserialize(&bytes).map_err(|e| ConvertError::Safetensors(e.to_string()))?;

    let mut writer = GgufWriter::new();
    let arch = "bert";
    writer.set("general.architecture", MetaValue::Str(arch.into()));
    let name = hyper._name_or_path.clone().unwrap_or_else(|| "bert".into());
    writer.set("general.name", MetaValue::Str(name));
    writer.set("general.file_type", MetaValue::U32(0));
    writer.set(
        &format!("{arch}.context_length"),
        MetaValue::U32(hyper.max_position_embeddings),
    );
    writer.set(
        &format!("{arch}.embedding_length"),
        MetaValue::U32(hyper.hidden_size),
    );
    writer.set(
        &format!("{arch}.feed_forward_length"),
        MetaValue::U32(hyper.intermediate_size),
    );
    writer.set(
        &format!("{arch}.block_count"),
        MetaValue::U32(hyper.num_hidden_layers),
    );
    writer.set(
        &format!("{arch}.attention.head_count"),
        MetaValue::U32(hyper.num_attention_heads),
    );
    writer.set(
        &format!("{arch}.attention.layer_norm_epsilon"),
        MetaValue::F32(hyper.layer_norm_eps),
    );
    writer.set(&format!("{arch}.attention.causal"), MetaValue::Bool(false));
    writer.set(&format!("{arch}.pooling_type"), MetaValue::U32(pooling_id));
    writer.set(NORMALIZE_KEY, MetaValue::Bool(normalize));
    writer.set("tokenizer.ggml.model", MetaValue::Str("bert".into()));
    writer.set(
        "tokenizer.ggml.token_type_count",
        MetaValue::U32(hyper.type_vocab_size),
    );
    writer.set(
        "tokenizer.ggml.normalizer.lowercase",
        MetaValue::Bool(vocabulary.lowercase),
    );
    writer.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
    writer.set("tokenizer.ggml.add_sep_token", MetaValue::Bool(true));
    writer.set("tokenizer.ggml.add_eos_token", MetaValue::Bool(false));
    for (key, id) in &vocabulary.special_ids {
        writer.set(&format!("tokenizer.ggml.{key}"), MetaValue::U32(*id));
    }
    let vocabulary_size = vocabulary.tokens.len();
    writer.set(
        "tokenizer.ggml.tokens",
        MetaValue::StrArray(vocabulary.tokens),
    );
    writer.set(
        "tokenizer.ggml.token_type",
        MetaValue::I32Array(vocabulary.types),
    );

    let mut names: Vec<String> = weights.names().into_iter().cloned().collect();
    names.sort();
    for source_name in names {
        let Some(target) = gguf_tensor_name(&source_name)? else {
            continue;
        };
        let view = weights
            .tensor(&source_name)
            .map_err(|e| ConvertError::Tensor {
                name: source_name.clone(),
                reason: e.to_string(),
            })?;
        let values = tensor_values(&source_name, view.dtype(), view.data())?;
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        writer
            .add_f32_tensor(&target, &shape, values)
            .map_err(|reason| ConvertError::Tensor {
                name: source_name.clone(),
                reason,
            })?;
    }
    let expected = 5 + 16 * hyper.num_hidden_layers as usize;
    if writer.tensor_count() != expected {
        return Err(ConvertError::Safetensors(format!(
            "found {} of the {expected} tensors a {}-layer BertModel has",
            writer.tensor_count(),
            hyper.num_hidden_layers
        )));
    }
    let written = writer.write(output).map_err(|source| ConvertError::Io {
        path: output.to_path_buf(),
        source,
    })?;
    Ok(ConvertSummary {
        architecture: arch.into(),
        layers: hyper.num_hidden_layers,
        embedding_length: hyper.hidden_size,
        vocabulary: vocabulary_size,
        pooling: pooling_name,
        normalize,
        tensors: writer.tensor_count(),
        parameters: writer.parameter_count(),
        bytes: written,
    })
}
