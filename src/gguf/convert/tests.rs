use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::json;

use super::bert::{f16_to_f32, gguf_tensor_name, phantom_space_form};
use super::{convert_directory, ConvertError};
use crate::gguf::read_gguf_facts;

const HIDDEN: usize = 8;
const FF: usize = 16;
const VOCAB: [&str; 8] = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "##lo", "world",
];

fn bert_config(architecture: &str, layers: usize) -> serde_json::Value {
    json!({
        "architectures": [architecture], "model_type": "bert", "hidden_size": HIDDEN,
        "intermediate_size": FF, "num_hidden_layers": layers, "num_attention_heads": 2,
        "max_position_embeddings": 32, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "hidden_act": "gelu", "position_embedding_type": "absolute"
    })
}

fn tensor_shapes(layers: usize) -> Vec<(String, Vec<usize>)> {
    let mut shapes = vec![
        (
            "embeddings.word_embeddings.weight".to_string(),
            vec![VOCAB.len(), HIDDEN],
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![32, HIDDEN],
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, HIDDEN],
        ),
        ("embeddings.LayerNorm.weight".into(), vec![HIDDEN]),
        ("embeddings.LayerNorm.bias".into(), vec![HIDDEN]),
        ("pooler.dense.weight".into(), vec![HIDDEN, HIDDEN]),
    ];
    for layer in 0..layers {
        for (module, out, inp) in [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", FF, HIDDEN),
            ("output.dense", HIDDEN, FF),
        ] {
            shapes.push((
                format!("encoder.layer.{layer}.{module}.weight"),
                vec![out, inp],
            ));
            shapes.push((format!("encoder.layer.{layer}.{module}.bias"), vec![out]));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("encoder.layer.{layer}.{norm}.weight"), vec![HIDDEN]));
            shapes.push((format!("encoder.layer.{layer}.{norm}.bias"), vec![HIDDEN]));
        }
    }
    shapes
}

/// A two-layer BertModel sentence-transformers directory with `extra` tensors added.
fn write_model_dir(dir: &Path, architecture: &str, extra: &[(&str, Vec<usize>)]) {
    let layers = 2;
    std::fs::write(
        dir.join("config.json"),
        bert_config(architecture, layers).to_string(),
    )
    .unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), json!(i)))
        .collect();
    let added: Vec<_> = VOCAB[..5]
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": i, "content": t, "special": true}))
        .collect();
    let tokenizer = json!({
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "lowercase": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        json!({"pooling_mode_cls_token": true}).to_string(),
    )
    .unwrap();

    let mut shapes = tensor_shapes(layers);
    shapes.extend(extra.iter().map(|(n, s)| (n.to_string(), s.clone())));
    let buffers: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let count: usize = shape.iter().product();
            let bytes = (0..count)
                .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
                .collect();
            (name, shape, bytes)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = buffers
        .iter()
        .map(|(name, shape, bytes)| {
            (
                name.clone(),
                TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    let serialized = safetensors::tensor::serialize(views, &None).unwrap();
    std::fs::write(dir.join("model.safetensors"), serialized).unwrap();
}

#[test]
fn a_bert_directory_becomes_a_gguf_the_header_reader_accepts() {
    let dir = tempfile::tempdir().unwrap();
    write_model_dir(dir.path(), "BertModel", &[]);
    let output = dir.path().join("out.gguf");
    let summary = convert_directory(dir.path(), &output).unwrap();
    assert_eq!(summary.architecture, "bert");
    assert_eq!(summary.layers, 2);
    assert_eq!(summary.pooling, "cls");
    assert!(summary.normalize);
    assert_eq!(summary.vocabulary, VOCAB.len());
    // 5 embedding tensors + 16 per layer; the pooler head is dropped.
    assert_eq!(summary.tensors, 5 + 16 * 2);
    let facts = read_gguf_facts(&output).unwrap();
    assert_eq!(facts.architecture, "bert");
    assert_eq!(facts.context_length, Some(32));
    assert_eq!(facts.parameter_count, summary.parameters);
    assert_eq!(std::fs::metadata(&output).unwrap().len(), summary.bytes);
}

#[test]
fn an_unsupported_architecture_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_model_dir(dir.path(), "XLMRobertaModel", &[]);
    let error = convert_directory(dir.path(), &dir.path().join("out.gguf")).unwrap_err();
    assert!(
        matches!(&error, ConvertError::UnsupportedArchitecture { architecture } if architecture == "XLMRobertaModel")
    );
    assert!(error.to_string().contains("XLMRobertaModel"), "{error}");
    assert!(!dir.path().join("out.gguf").exists());
}

#[test]
fn an_unknown_tensor_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write_model_dir(
        dir.path(),
        "BertModel",
        &[("encoder.layer.0.attention.self.rotary.weight", vec![HIDDEN])],
    );
    let error = convert_directory(dir.path(), &dir.path().join("out.gguf")).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("encoder.layer.0.attention.self.rotary.weight"),
        "{error}"
    );
}

#[test]
fn a_directory_without_weights_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    write_model_dir(dir.path(), "BertModel", &[]);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let error = convert_directory(dir.path(), &dir.path().join("out.gguf")).unwrap_err();
    assert!(
        matches!(error, ConvertError::MissingFile { ref path } if path.ends_with("model.safetensors")),
        "{error}"
    );
}

#[test]
fn tensor_names_follow_llama_cpp() {
    let cases = [
        (
            "embeddings.word_embeddings.weight",
            Some("token_embd.weight"),
        ),
        (
            "bert.embeddings.LayerNorm.bias",
            Some("token_embd_norm.bias"),
        ),
        (
            "encoder.layer.3.attention.self.key.bias",
            Some("blk.3.attn_k.bias"),
        ),
        (
            "encoder.layer.0.attention.output.LayerNorm.weight",
            Some("blk.0.attn_output_norm.weight"),
        ),
        (
            "encoder.layer.5.output.dense.weight",
            Some("blk.5.ffn_down.weight"),
        ),
        (
            "encoder.layer.5.output.LayerNorm.bias",
            Some("blk.5.layer_output_norm.bias"),
        ),
        ("pooler.dense.weight", None),
        ("embeddings.position_ids", None),
    ];
    for (source, expected) in cases {
        assert_eq!(
            gguf_tensor_name(source).unwrap().as_deref(),
            expected,
            "{source}"
        );
    }
}

#[test]
fn wordpiece_tokens_take_the_phantom_space_form() {
    assert_eq!(phantom_space_form("hello", false), "\u{2581}hello");
    assert_eq!(phantom_space_form("##lo", false), "lo");
    assert_eq!(phantom_space_form("[CLS]", true), "[CLS]");
    assert_eq!(phantom_space_form("[unused7]", false), "[unused7]");
}

#[test]
fn half_floats_widen_exactly() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    assert_eq!(f16_to_f32(0x7bff), 65504.0);
    assert!(f16_to_f32(0x7c00).is_infinite());
}
