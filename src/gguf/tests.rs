//! Tests of the GGUF header reader on synthetic files: facts, the whole header, and refusal of
//! non-GGUF, truncated and hostile files.

use super::testing::{put_str, GgufBuilder, TestValue, GGML_F32, GGML_Q4_1, GGML_Q4_K, TEMPLATE};
use super::*;

fn facts_of(bytes: &[u8]) -> Result<GgufFacts, GgufError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, bytes).expect("write");
    read_gguf_facts(&path)
}

fn kind_of(bytes: &[u8]) -> GgufErrorKind {
    match facts_of(bytes) {
        Ok(facts) => panic!("expected an error, got {facts:?}"),
        Err(error) => error.kind,
    }
}

/// A header with the given counts, then `rest` verbatim.
fn header(tensor_count: u64, kv_count: u64, rest: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&tensor_count.to_le_bytes());
    out.extend_from_slice(&kv_count.to_le_bytes());
    out.extend_from_slice(rest);
    out
}

#[test]
fn reads_the_facts_of_a_llama_like_file() {
    let facts = facts_of(&GgufBuilder::llama_like().build()).expect("valid file");
    assert_eq!(facts.architecture, "llama");
    assert_eq!(facts.parameter_count, 64 * 8 + 64);
    assert_eq!(facts.quantization, "Q4_1");
    assert_eq!(facts.context_length, Some(2048));
    assert!(facts.has_chat_template);
    assert_eq!(facts.chat_template.as_deref(), Some(TEMPLATE));
    assert_eq!(facts.name.as_deref(), Some("Tiny Test"));
}

fn header_of(builder: &GgufBuilder) -> Result<GgufHeader, GgufError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.gguf");
    builder.write_to(&path);
    read_gguf_header(&path)
}

#[test]
fn the_whole_header_keeps_every_key_and_the_tensor_table() {
    let builder = GgufBuilder::llama_like()
        .kv("llama.block_count", TestValue::I32(2))
        .kv("llama.attention.head_count_kv", TestValue::U32Array(vec![4, 0]))
        .kv("llama.attention.causal", TestValue::Bool(false))
        .tensor("blk.0.attn_q.weight", &[32, 2], GGML_Q4_1);
    let header = header_of(&builder).expect("valid file");
    assert_eq!(header.string("general.architecture"), Some("llama"));
    assert_eq!(header.string("tokenizer.chat_template"), Some(TEMPLATE));
    assert_eq!(header.uint("llama.context_length"), Some(2048));
    assert_eq!(header.uint("llama.block_count"), Some(2), "a signed count reads as a count");
    assert_eq!(header.uints("llama.attention.head_count_kv"), Some(vec![4, 0]));
    assert_eq!(header.uints("llama.context_length"), Some(vec![2048]), "one value is an array of one");
    assert_eq!(header.array_len("tokenizer.ggml.tokens"), Some(3));
    assert_eq!(header.uints("tokenizer.ggml.tokens"), None, "strings are not integers");
    assert_eq!(header.flag("llama.attention.causal"), Some(false));
    assert_eq!(header.uint("llama.attention.causal"), None, "a flag is not a number");
    assert!(header.has("llama.rope.freq_base") && header.uint("llama.rope.freq_base").is_none());
    assert!(!header.has("llama.vocab_size"));
    // Q4_1 64 × 8: 2 blocks of 20 bytes a row; F32 64: 4 bytes each; Q4_1 32 × 2: 1 block a row.
    let tensors: Vec<(&str, u64)> = header.tensors().iter().map(|(n, b)| (n.as_str(), *b)).collect();
    assert_eq!(
        tensors,
        [("token_embd.weight", 2 * 20 * 8), ("output_norm.weight", 64 * 4), ("blk.0.attn_q.weight", 20 * 2)]
    );
}

#[test]
fn a_long_integer_array_keeps_only_its_length() {
    let count = header::MAX_KEPT_ARRAY as u32 + 1;
    let builder = GgufBuilder::llama_like()
        .kv("tokenizer.ggml.token_type", TestValue::U32Array((0..count).collect()))
        .kv("llama.attention.head_count_kv", TestValue::U32Array((0..count - 1).collect()));
    let header = header_of(&builder).expect("valid file");
    assert_eq!(header.array_len("tokenizer.ggml.token_type"), Some(u64::from(count)));
    assert_eq!(header.uints("tokenizer.ggml.token_type"), None);
    assert_eq!(header.uints("llama.attention.head_count_kv").map(|v| v.len()), Some(count as usize - 1));
}

#[test]
fn the_whole_header_refuses_a_repeated_key_or_tensor_name() {
    let mut repeated_key = GgufBuilder::llama_like();
    repeated_key.kvs.push(("general.name".into(), TestValue::Str("again".into())));
    let error = header_of(&repeated_key).expect_err("refused").to_string();
    assert!(error.contains("key 'general.name' appears twice"), "{error}");
    let repeated_tensor = GgufBuilder::llama_like().tensor("output_norm.weight", &[64], GGML_F32);
    let error = header_of(&repeated_tensor).expect_err("refused").to_string();
    assert!(error.contains("tensor name 'output_norm.weight' appears twice"), "{error}");
    // The facts alone are read as before: the store records what it was given.
    assert!(facts_of(&repeated_key.build()).is_ok());
}

#[test]
fn version_2_files_are_read_too() {
    let mut builder = GgufBuilder::llama_like();
    builder.version = 2;
    assert_eq!(facts_of(&builder.build()).expect("v2").architecture, "llama");
}

#[test]
fn context_length_follows_the_architecture_key_not_another_one() {
    let bytes = GgufBuilder::llama_like()
        .kv("general.architecture", TestValue::Str("gemma3".into()))
        .kv("gemma3.context_length", TestValue::U64(32768))
        .build();
    let facts = facts_of(&bytes).expect("valid");
    assert_eq!(facts.architecture, "gemma3");
    assert_eq!(facts.context_length, Some(32768));
}

#[test]
fn an_embedding_model_is_told_by_its_pooling_type_or_non_causal_attention() {
    assert_eq!(facts_of(&GgufBuilder::llama_like().build()).expect("valid").embedding, Some(false));
    let bert = |extra: (&str, TestValue)| {
        GgufBuilder::llama_like()
            .kv("general.architecture", TestValue::Str("bert".into()))
            .kv(extra.0, extra.1)
            .build()
    };
    let pooled = facts_of(&bert(("bert.pooling_type", TestValue::U32(1)))).expect("valid");
    assert_eq!(pooled.embedding, Some(true));
    let bidirectional = facts_of(&bert(("bert.attention.causal", TestValue::Bool(false)))).expect("valid");
    assert_eq!(bidirectional.embedding, Some(true));
    // Another architecture's keys, and causal attention, say nothing.
    assert_eq!(facts_of(&bert(("llama.pooling_type", TestValue::U32(1)))).expect("valid").embedding, Some(false));
    assert_eq!(facts_of(&bert(("bert.attention.causal", TestValue::Bool(true)))).expect("valid").embedding, Some(false));
}

#[test]
fn missing_optional_keys_give_none_and_quantization_falls_back_to_the_dominant_type() {
    let bytes = GgufBuilder::empty()
        .kv("general.architecture", TestValue::Str("gemma3".into()))
        .tensor("blk.0.ffn_up.weight", &[256, 4], GGML_Q4_K)
        .tensor("blk.0.norm.weight", &[256], GGML_F32)
        .build();
    let facts = facts_of(&bytes).expect("valid");
    assert_eq!(facts.quantization, "Q4_K");
    assert_eq!(facts.parameter_count, 256 * 4 + 256);
    assert_eq!(facts.context_length, None);
    assert!(!facts.has_chat_template);
    assert_eq!(facts.chat_template, None);
    assert_eq!(facts.name, None);
}

#[test]
fn file_type_names_follow_llama_ftype() {
    for (file_type, name) in [(0, "F32"), (1, "F16"), (7, "Q8_0"), (15, "Q4_K_M"), (32, "BF16")] {
        let bytes =
            GgufBuilder::llama_like().kv("general.file_type", TestValue::U32(file_type)).build();
        assert_eq!(facts_of(&bytes).expect("valid").quantization, name);
    }
    let bytes = GgufBuilder::llama_like().kv("general.file_type", TestValue::U32(999)).build();
    assert_eq!(facts_of(&bytes).expect("valid").quantization, "file type 999");
}

#[test]
fn a_file_without_an_architecture_is_malformed() {
    let bytes = GgufBuilder::llama_like().without("general.architecture").build();
    assert!(matches!(kind_of(&bytes), GgufErrorKind::Malformed(m) if m.contains("architecture")));
}

#[test]
fn non_gguf_files_are_refused_by_their_magic() {
    let error = facts_of(b"PK\x03\x04 this is a zip file, not a model").expect_err("not gguf");
    assert!(matches!(&error.kind, GgufErrorKind::BadMagic { found } if found.contains("PK")));
    assert!(error.to_string().contains("not a GGUF file"), "{error}");
    assert!(matches!(kind_of(b""), GgufErrorKind::BadMagic { found } if found.contains("empty")));
    assert!(matches!(kind_of(b"GG"), GgufErrorKind::BadMagic { .. }));
}

#[test]
fn a_directory_and_a_missing_file_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let as_dir = read_gguf_facts(dir.path()).expect_err("a directory");
    assert!(matches!(as_dir.kind, GgufErrorKind::NotAFile | GgufErrorKind::Io(_)), "{as_dir}");
    let missing = read_gguf_facts(&dir.path().join("nope.gguf")).expect_err("missing");
    assert!(matches!(&missing.kind, GgufErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound));
    assert!(missing.to_string().contains("nope.gguf"), "{missing}");
}

#[test]
fn unsupported_versions_are_refused() {
    for version in [0u32, 1, 4, u32::MAX] {
        let mut builder = GgufBuilder::llama_like();
        builder.version = version;
        assert!(matches!(
            kind_of(&builder.build()),
            GgufErrorKind::UnsupportedVersion { version: v } if v == version
        ));
    }
}

#[test]
fn big_endian_files_are_named_as_such() {
    let mut builder = GgufBuilder::llama_like();
    builder.version = 3u32.swap_bytes();
    assert!(matches!(kind_of(&builder.build()), GgufErrorKind::BigEndian));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = GgufBuilder::llama_like().build();
    assert!(facts_of(&full).is_ok());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.gguf");
    for cut in 0..full.len() {
        std::fs::write(&path, &full[..cut]).expect("write");
        let error = read_gguf_facts(&path).expect_err("a truncated file must not parse");
        assert!(
            matches!(error.kind, GgufErrorKind::Truncated { .. } | GgufErrorKind::BadMagic { .. }),
            "cut at {cut}: {error}"
        );
    }
}

#[test]
fn a_file_cut_in_its_tensor_data_is_reported_as_truncated() {
    let mut bytes = GgufBuilder::llama_like().build();
    bytes.truncate(bytes.len() - 10);
    let error = facts_of(&bytes).expect_err("cut");
    assert!(error.to_string().contains("truncated: tensor data"), "{error}");
}

#[test]
fn huge_lengths_and_counts_are_refused_without_allocating() {
    // A key claiming u64::MAX bytes.
    let key = header(0, 1, &u64::MAX.to_le_bytes());
    assert!(matches!(kind_of(&key), GgufErrorKind::Truncated { .. }));
    // Counts the file could never hold.
    assert!(matches!(kind_of(&header(u64::MAX, 0, &[])), GgufErrorKind::Truncated { .. }));
    assert!(matches!(kind_of(&header(0, u64::MAX, &[0; 64])), GgufErrorKind::Truncated { .. }));

    // A string value claiming 1 TiB.
    let mut rest = Vec::new();
    put_str(&mut rest, "general.architecture");
    rest.extend_from_slice(&8u32.to_le_bytes());
    rest.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(kind_of(&header(0, 1, &rest)), GgufErrorKind::Truncated { .. }));

    // A string that fits in the file but is over the kept-string limit.
    let mut rest = Vec::new();
    put_str(&mut rest, "tokenizer.chat_template");
    rest.extend_from_slice(&8u32.to_le_bytes());
    put_str(&mut rest, &"x".repeat(MAX_KEPT_STRING as usize + 1));
    assert!(
        matches!(kind_of(&header(0, 1, &rest)), GgufErrorKind::Malformed(m) if m.contains("limit"))
    );

    // Arrays whose byte size overflows, or whose string count cannot fit.
    for (element_type, count) in
        [(4u32, u64::MAX), (4, u64::MAX / 4 + 1), (8, u64::MAX), (8, 1 << 40)]
    {
        let mut rest = Vec::new();
        put_str(&mut rest, "tokenizer.ggml.tokens");
        rest.extend_from_slice(&9u32.to_le_bytes());
        rest.extend_from_slice(&element_type.to_le_bytes());
        rest.extend_from_slice(&count.to_le_bytes());
        assert!(matches!(
            kind_of(&header(0, 1, &rest)),
            GgufErrorKind::Truncated { .. } | GgufErrorKind::Malformed(_)
        ));
    }
}

#[test]
fn nested_arrays_and_unknown_types_are_malformed() {
    let mut nested = Vec::new();
    put_str(&mut nested, "x");
    nested.extend_from_slice(&9u32.to_le_bytes());
    nested.extend_from_slice(&9u32.to_le_bytes());
    nested.extend_from_slice(&1u64.to_le_bytes());
    nested.extend_from_slice(&[0; 32]);
    assert!(
        matches!(kind_of(&header(0, 1, &nested)), GgufErrorKind::Malformed(m) if m.contains("nests"))
    );

    let mut unknown = Vec::new();
    put_str(&mut unknown, "x");
    unknown.extend_from_slice(&77u32.to_le_bytes());
    unknown.extend_from_slice(&[0; 32]);
    assert!(
        matches!(kind_of(&header(0, 1, &unknown)), GgufErrorKind::Malformed(m) if m.contains("77"))
    );
}

/// The metadata of `llama_like` followed by one hand-written tensor info.
fn with_raw_tensor(dims: &[u64], ggml_type: u32, offset: u64) -> Vec<u8> {
    let base = GgufBuilder::llama_like();
    let mut builder = base.clone();
    builder.tensors.clear();
    let mut bytes = builder.build();
    // Patch the tensor count (bytes 8..16) and append the raw tensor info.
    bytes[8..16].copy_from_slice(&1u64.to_le_bytes());
    put_str(&mut bytes, "t");
    bytes.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        bytes.extend_from_slice(&d.to_le_bytes());
    }
    bytes.extend_from_slice(&ggml_type.to_le_bytes());
    bytes.extend_from_slice(&offset.to_le_bytes());
    bytes.resize(bytes.len().next_multiple_of(32) + 4096, 0);
    bytes
}

#[test]
fn hostile_tensor_infos_are_refused() {
    assert!(facts_of(&with_raw_tensor(&[32, 4], GGML_F32, 0)).is_ok());
    let cases: [(&[u64], u32, u64, &str); 6] = [
        (&[1, 1, 1, 1, 1], GGML_F32, 0, "dimensions"),
        (&[], GGML_F32, 0, "dimensions"),
        (&[u64::MAX, u64::MAX], GGML_F32, 0, "overflows"),
        (&[33], GGML_Q4_K, 0, "block size"),
        (&[32], 4, 0, "unknown ggml type"),
        (&[32], 9999, 0, "unknown ggml type"),
    ];
    for (dims, ggml_type, offset, needle) in cases {
        let kind = kind_of(&with_raw_tensor(dims, ggml_type, offset));
        assert!(
            matches!(&kind, GgufErrorKind::Malformed(m) if m.contains(needle)),
            "{dims:?}: {kind}"
        );
    }
    // Data placed far beyond the end of the file, or at an offset that overflows.
    assert!(matches!(
        kind_of(&with_raw_tensor(&[32], GGML_F32, 1 << 40)),
        GgufErrorKind::Truncated { .. }
    ));
    assert!(matches!(
        kind_of(&with_raw_tensor(&[32], GGML_F32, u64::MAX)),
        GgufErrorKind::Malformed(_)
    ));
}

#[test]
fn a_bad_alignment_is_malformed() {
    for alignment in [0u32, 3, 48] {
        let bytes =
            GgufBuilder::llama_like().kv("general.alignment", TestValue::U32(alignment)).build();
        assert!(matches!(kind_of(&bytes), GgufErrorKind::Malformed(m) if m.contains("alignment")));
    }
}

#[test]
fn signed_and_wide_integer_values_are_accepted() {
    let bytes = GgufBuilder::llama_like()
        .kv("llama.context_length", TestValue::I32(4096))
        .kv("general.file_type", TestValue::U64(15))
        .build();
    let facts = facts_of(&bytes).expect("valid");
    assert_eq!(facts.context_length, Some(4096));
    assert_eq!(facts.quantization, "Q4_K_M");
}

#[test]
fn no_single_byte_corruption_panics_or_overallocates() {
    let valid = GgufBuilder::llama_like().build();
    let mut outcomes = [0usize; 2];
    for index in 0..valid.len() {
        for replace in [|_| 0x00, |_| 0xFF, |_| 0x7F, |b: u8| b ^ 0x80] {
            let mut bytes = valid.clone();
            bytes[index] = replace(bytes[index]);
            let len = bytes.len() as u64;
            // A panic or an allocation failure here fails the test; either outcome is fine,
            // and reading the whole header refuses what reading the facts refuses.
            let mut reader = Bounded { inner: io::Cursor::new(bytes.clone()), pos: 0, len };
            let facts = parse(&mut reader, None).is_ok();
            let mut reader = Bounded { inner: io::Cursor::new(bytes), pos: 0, len };
            let whole = parse(&mut reader, Some(&mut GgufHeader::default())).is_ok();
            assert!(facts || !whole, "byte {index}: the header reads where the facts do not");
            outcomes[usize::from(facts)] += 1;
        }
    }
    // Corrupting the header must be caught somewhere; tensor data bytes are opaque.
    assert!(outcomes[0] > valid.len(), "{outcomes:?}");
}
