//! GGUF files without llama.cpp: the header reader, the writer (`write.rs`), and conversion of
//! Hugging Face safetensors directories to GGUF (`convert/`, what `llamay import DIR` runs).
//! The reader gives the facts the model store records about a model file
//! ([`read_gguf_facts`]), or, for a memory estimate or a layer split, the whole header: every
//! key and the tensor table ([`read_gguf_header`], `header.rs`). It is the one GGUF reader of
//! llamay; llama.cpp reads the file again only to load it.
//!
//! Key types: [`GgufFacts`] (architecture, parameter count, quantization, context length, chat
//! template, name), [`GgufHeader`] and [`GgufError`].
//!
//! Cost: one pass over the header and tensor-info table through a buffered reader. Arrays we do
//! not need (the tokenizer's vocabulary, tens of thousands of strings) are skipped by seeking,
//! never loaded, so reading a 250 MB model touches well under a megabyte. Every length and count
//! in the file is checked against the bytes that remain before anything is read or allocated, so
//! a truncated or hostile file yields a [`GgufError`], never a large allocation or a panic. The
//! tensor table is also checked against the file size, which catches a file cut short in its
//! tensor data (the usual shape of an interrupted download).

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod header;

use header::Value;
pub use header::GgufHeader;

/// What the store records about a GGUF model, read from its header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GgufFacts {
    /// `general.architecture`, e.g. `llama`, `gemma3`.
    pub architecture: String,
    /// Sum of the element counts of every tensor in the file.
    pub parameter_count: u64,
    /// Quantization name from `general.file_type` (e.g. `Q4_1`, `Q4_K_M`, `F16`); when that key
    /// is absent, the ggml type holding most weight elements.
    pub quantization: String,
    /// `<architecture>.context_length`: the context the model was trained for.
    pub context_length: Option<u64>,
    pub has_chat_template: bool,
    /// `tokenizer.chat_template`, the Jinja template text.
    pub chat_template: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Whether the model is an embedding encoder: a `<architecture>.pooling_type`, or
    /// `<architecture>.attention.causal` false (what the loader serves as an embedding model).
    /// `None` in facts recorded before this was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<bool>,
}

/// Why a file could not be read as GGUF; displays as `<path>: <reason>`.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct GgufError {
    pub path: PathBuf,
    pub kind: GgufErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum GgufErrorKind {
    #[error("{0}")]
    Io(#[source] io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("not a GGUF file (it starts with {found}, not \"GGUF\")")]
    BadMagic { found: String },
    #[error("GGUF version {version} is not supported (this reader handles versions 2 and 3)")]
    UnsupportedVersion { version: u32 },
    #[error(
        "big-endian GGUF files are not supported (convert the model on a little-endian machine)"
    )]
    BigEndian,
    #[error(
        "truncated: {what} needs {needed} bytes at offset {offset}, \
         but the file ends at {file_size}"
    )]
    Truncated { what: String, offset: u64, needed: u64, file_size: u64 },
    #[error("malformed: {0}")]
    Malformed(String),
}

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Longest string value we keep in memory (chat templates are a few KiB; 1 MiB is generous).
const MAX_KEPT_STRING: u64 = 1 << 20;
/// Longest metadata key or tensor name we accept; real ones are well under 100 bytes.
const MAX_KEY_LEN: u64 = 64 * 1024;
/// ggml tensors have at most four dimensions.
const MAX_TENSOR_DIMS: u32 = 4;
/// How many `*.context_length` (and `*.pooling_type`, `*.attention.causal`) keys we remember
/// while we wait to learn the architecture.
const MAX_CONTEXT_CANDIDATES: usize = 16;
const DEFAULT_ALIGNMENT: u64 = 32;

/// GGUF metadata value types (gguf.h `gguf_type`).
mod value_type {
    pub const UINT8: u32 = 0;
    pub const INT8: u32 = 1;
    pub const UINT16: u32 = 2;
    pub const INT16: u32 = 3;
    pub const UINT32: u32 = 4;
    pub const INT32: u32 = 5;
    pub const FLOAT32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const UINT64: u32 = 10;
    pub const INT64: u32 = 11;
    pub const FLOAT64: u32 = 12;
}

/// Reads the header of the GGUF file at `path` and returns its facts.
pub fn read_gguf_facts(path: &Path) -> Result<GgufFacts, GgufError> {
    read(path, None)
}

/// Reads the header of the GGUF file at `path` whole: every key and the tensor table, checked
/// as [`read_gguf_facts`] checks them, and refused when a key or a tensor name repeats (as
/// llama.cpp refuses to load such a file).
pub fn read_gguf_header(path: &Path) -> Result<GgufHeader, GgufError> {
    let mut header = GgufHeader::default();
    read(path, Some(&mut header))?;
    Ok(header)
}

/// Parses the file at `path`, keeping its keys and tensors in `header` when one is given.
fn read(path: &Path, header: Option<&mut GgufHeader>) -> Result<GgufFacts, GgufError> {
    let fail = |kind| GgufError { path: path.to_path_buf(), kind };
    let file = File::open(path).map_err(|e| fail(GgufErrorKind::Io(e)))?;
    let metadata = file.metadata().map_err(|e| fail(GgufErrorKind::Io(e)))?;
    if !metadata.is_file() {
        return Err(fail(GgufErrorKind::NotAFile));
    }
    let mut reader =
        Bounded { inner: BufReader::with_capacity(64 * 1024, file), pos: 0, len: metadata.len() };
    parse(&mut reader, header).map_err(fail)
}

/// A reader that knows the file size and refuses any read or skip that would pass it.
struct Bounded<R> {
    inner: R,
    pos: u64,
    len: u64,
}

type Parsed<T> = Result<T, GgufErrorKind>;

impl<R: Read + Seek> Bounded<R> {
    fn ensure(&self, needed: u64, what: &dyn fmt::Display) -> Parsed<()> {
        if needed > self.len.saturating_sub(self.pos) {
            return Err(GgufErrorKind::Truncated {
                what: what.to_string(),
                offset: self.pos,
                needed,
                file_size: self.len,
            });
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &dyn fmt::Display) -> Parsed<[u8; N]> {
        self.ensure(N as u64, what)?;
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf).map_err(GgufErrorKind::Io)?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &dyn fmt::Display) -> Parsed<u32> {
        self.bytes::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn fmt::Display) -> Parsed<u64> {
        self.bytes::<8>(what).map(u64::from_le_bytes)
    }

    fn skip(&mut self, count: u64, what: &dyn fmt::Display) -> Parsed<()> {
        self.ensure(count, what)?;
        let offset = i64::try_from(count)
            .map_err(|_| GgufErrorKind::Malformed(format!("{what} is {count} bytes long")))?;
        self.inner.seek_relative(offset).map_err(GgufErrorKind::Io)?;
        self.pos += count;
        Ok(())
    }

    /// Reads `len` bytes (checked against the file first).
    fn raw(&mut self, len: u64, what: &dyn fmt::Display) -> Parsed<Vec<u8>> {
        self.ensure(len, what)?;
        let mut buf = vec![0u8; len as usize];
        self.inner.read_exact(&mut buf).map_err(GgufErrorKind::Io)?;
        self.pos += len;
        Ok(buf)
    }

    /// Reads a length-prefixed string of at most `max` bytes.
    fn string(&mut self, max: u64, what: &dyn fmt::Display) -> Parsed<String> {
        let len = self.u64(what)?;
        self.ensure(len, what)?;
        if len > max {
            return Err(GgufErrorKind::Malformed(format!(
                "{what} is {len} bytes long, over the {max}-byte limit"
            )));
        }
        self.text(len, what)
    }

    /// Reads `len` bytes of UTF-8 text.
    fn text(&mut self, len: u64, what: &dyn fmt::Display) -> Parsed<String> {
        String::from_utf8(self.raw(len, what)?)
            .map_err(|_| GgufErrorKind::Malformed(format!("{what} is not valid UTF-8")))
    }

    fn skip_string(&mut self, what: &dyn fmt::Display) -> Parsed<()> {
        let len = self.u64(what)?;
        self.skip(len, what)
    }
}

/// Byte width of a fixed-size metadata value type; `None` for strings and arrays.
fn fixed_width(value_type: u32) -> Option<u64> {
    use value_type::*;
    match value_type {
        UINT8 | INT8 | BOOL => Some(1),
        UINT16 | INT16 => Some(2),
        UINT32 | INT32 | FLOAT32 => Some(4),
        UINT64 | INT64 | FLOAT64 => Some(8),
        _ => None,
    }
}

/// Reads one value. Strings are kept when `wanted` (refused past [`MAX_KEPT_STRING`]) or, up to
/// that length, when `keep_all`; with `keep_all` short integer arrays keep their elements too.
fn read_value<R: Read + Seek>(
    reader: &mut Bounded<R>,
    value_type: u32,
    key: &str,
    wanted: bool,
    keep_all: bool,
) -> Parsed<Value> {
    use value_type::*;
    let what = format_args!("value of '{key}'");
    Ok(match value_type {
        UINT8 => Value::Unsigned(u64::from(reader.bytes::<1>(&what)?[0])),
        UINT16 => Value::Unsigned(u64::from(u16::from_le_bytes(reader.bytes::<2>(&what)?))),
        UINT32 => Value::Unsigned(u64::from(reader.u32(&what)?)),
        UINT64 => Value::Unsigned(reader.u64(&what)?),
        INT8 => Value::Signed(i64::from(i8::from_le_bytes(reader.bytes::<1>(&what)?))),
        INT16 => Value::Signed(i64::from(i16::from_le_bytes(reader.bytes::<2>(&what)?))),
        INT32 => Value::Signed(i64::from(i32::from_le_bytes(reader.bytes::<4>(&what)?))),
        INT64 => Value::Signed(i64::from_le_bytes(reader.bytes::<8>(&what)?)),
        BOOL => Value::Bool(reader.bytes::<1>(&what)?[0] != 0),
        FLOAT32 | FLOAT64 => {
            reader.skip(fixed_width(value_type).unwrap_or(1), &what)?;
            Value::Ignored
        }
        STRING if wanted => Value::Text(reader.string(MAX_KEPT_STRING, &what)?),
        STRING if keep_all => {
            let len = reader.u64(&what)?;
            if len <= MAX_KEPT_STRING {
                Value::Text(reader.text(len, &what)?)
            } else {
                reader.skip(len, &what)?;
                Value::Ignored
            }
        }
        STRING => {
            reader.skip_string(&what)?;
            Value::Ignored
        }
        ARRAY => read_array(reader, key, keep_all)?,
        other => {
            return Err(GgufErrorKind::Malformed(format!("'{key}' has unknown value type {other}")))
        }
    })
}

/// An array's length, and with `keep_integers` the elements of a short integer array; the rest
/// is skipped.
fn read_array<R: Read + Seek>(
    reader: &mut Bounded<R>,
    key: &str,
    keep_integers: bool,
) -> Parsed<Value> {
    let what = format_args!("array '{key}'");
    let element_type = reader.u32(&what)?;
    let count = reader.u64(&what)?;
    let integer = !matches!(element_type, value_type::BOOL | value_type::FLOAT32 | value_type::FLOAT64);
    if let Some(width) = fixed_width(element_type) {
        let total = count.checked_mul(width).ok_or_else(|| {
            GgufErrorKind::Malformed(format!("array '{key}' claims {count} elements"))
        })?;
        if keep_integers && integer && count <= header::MAX_KEPT_ARRAY {
            reader.ensure(total, &what)?;
            let mut integers = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let element = read_value(reader, element_type, key, false, false)?;
                integers.push(match element {
                    Value::Unsigned(value) => value,
                    Value::Signed(value) => value.max(0) as u64,
                    _ => 0,
                });
            }
            return Ok(Value::Array { len: count, integers: Some(integers) });
        }
        reader.skip(total, &what)?;
        return Ok(Value::Array { len: count, integers: None });
    }
    match element_type {
        value_type::STRING => {
            // Each string has at least its 8-byte length, so a count the file cannot hold is
            // refused before the loop, not after billions of iterations.
            reader.ensure(
                count.saturating_mul(8),
                &format_args!("array '{key}' of {count} strings"),
            )?;
            for _ in 0..count {
                reader.skip_string(&what)?;
            }
            Ok(Value::Array { len: count, integers: None })
        }
        value_type::ARRAY => Err(GgufErrorKind::Malformed(format!(
            "array '{key}' nests arrays, which GGUF does not allow"
        ))),
        other => {
            Err(GgufErrorKind::Malformed(format!("array '{key}' has unknown element type {other}")))
        }
    }
}

/// Storage layout of a ggml tensor type: (elements per block, bytes per block, name).
/// Mirrors ggml's type traits; types removed from ggml have no entry.
fn ggml_type_layout(ggml_type: u32) -> Option<(u64, u64, &'static str)> {
    Some(match ggml_type {
        0 => (1, 4, "F32"),
        1 => (1, 2, "F16"),
        2 => (32, 18, "Q4_0"),
        3 => (32, 20, "Q4_1"),
        6 => (32, 22, "Q5_0"),
        7 => (32, 24, "Q5_1"),
        8 => (32, 34, "Q8_0"),
        9 => (32, 36, "Q8_1"),
        10 => (256, 84, "Q2_K"),
        11 => (256, 110, "Q3_K"),
        12 => (256, 144, "Q4_K"),
        13 => (256, 176, "Q5_K"),
        14 => (256, 210, "Q6_K"),
        15 => (256, 292, "Q8_K"),
        16 => (256, 66, "IQ2_XXS"),
        17 => (256, 74, "IQ2_XS"),
        18 => (256, 98, "IQ3_XXS"),
        19 => (256, 50, "IQ1_S"),
        20 => (32, 18, "IQ4_NL"),
        21 => (256, 110, "IQ3_S"),
        22 => (256, 82, "IQ2_S"),
        23 => (256, 136, "IQ4_XS"),
        24 => (1, 1, "I8"),
        25 => (1, 2, "I16"),
        26 => (1, 4, "I32"),
        27 => (1, 8, "I64"),
        28 => (1, 8, "F64"),
        29 => (256, 56, "IQ1_M"),
        30 => (1, 2, "BF16"),
        34 => (256, 54, "TQ1_0"),
        35 => (256, 66, "TQ2_0"),
        39 => (32, 17, "MXFP4"),
        40 => (64, 36, "NVFP4"),
        41 => (128, 18, "Q1_0"),
        42 => (64, 18, "Q2_0"),
        _ => return None,
    })
}

/// Highest ggml type id in [`ggml_type_layout`], sizing the per-type tally.
const GGML_TYPE_LIMIT: usize = 43;

/// Name of a `general.file_type` value (llama.h `llama_ftype`).
fn file_type_name(file_type: u64) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

/// The metadata keys we keep, gathered while scanning the key/value section.
#[derive(Default)]
struct Metadata {
    architecture: Option<String>,
    name: Option<String>,
    chat_template: Option<String>,
    file_type: Option<u64>,
    alignment: Option<u64>,
    context_lengths: Vec<(String, u64)>,
    /// `*.pooling_type` keys, and `*.attention.causal` keys that are false.
    embedding_keys: Vec<String>,
}

impl Metadata {
    fn wants_text(key: &str) -> bool {
        matches!(key, "general.architecture" | "general.name" | "tokenizer.chat_template")
    }

    fn record(&mut self, key: &str, value: &Value) -> Parsed<()> {
        let unsigned = match *value {
            Value::Unsigned(v) => Some(v),
            Value::Signed(v) => u64::try_from(v).ok(),
            Value::Bool(v) => Some(u64::from(v)),
            _ => None,
        };
        match (key, value) {
            ("general.architecture", Value::Text(text)) => self.architecture = Some(text.clone()),
            ("general.name", Value::Text(text)) => self.name = Some(text.clone()),
            ("tokenizer.chat_template", Value::Text(text)) => self.chat_template = Some(text.clone()),
            ("general.file_type", _) => self.file_type = unsigned,
            ("general.alignment", _) => match unsigned {
                Some(a) if a.is_power_of_two() => self.alignment = Some(a),
                _ => {
                    return Err(GgufErrorKind::Malformed(
                        "general.alignment is not a positive power of two".into(),
                    ))
                }
            },
            _ if key.ends_with(".pooling_type") || (key.ends_with(".attention.causal") && unsigned == Some(0)) => {
                if self.embedding_keys.len() < MAX_CONTEXT_CANDIDATES {
                    self.embedding_keys.push(key.to_string());
                }
            }
            _ if key.ends_with(".context_length") => {
                if let Some(length) = unsigned {
                    if self.context_lengths.len() < MAX_CONTEXT_CANDIDATES {
                        self.context_lengths.push((key.to_string(), length));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Totals over the tensor-info table.
struct TensorTotals {
    parameter_count: u64,
    /// End of the furthest tensor, relative to the start of the data section.
    data_end: u64,
    elements_by_type: [u64; GGML_TYPE_LIMIT],
}

fn parse<R: Read + Seek>(
    reader: &mut Bounded<R>,
    mut header: Option<&mut GgufHeader>,
) -> Parsed<GgufFacts> {
    let magic_len = reader.len.min(4) as usize;
    let mut magic = [0u8; 4];
    reader.inner.read_exact(&mut magic[..magic_len]).map_err(GgufErrorKind::Io)?;
    reader.pos = magic_len as u64;
    if magic[..magic_len] != GGUF_MAGIC {
        let found = if magic_len == 0 {
            "nothing (the file is empty)".to_string()
        } else {
            format!("{:?}", String::from_utf8_lossy(&magic[..magic_len]))
        };
        return Err(GgufErrorKind::BadMagic { found });
    }
    let version = reader.u32(&"the GGUF version")?;
    if !(2..=3).contains(&version) {
        // Big-endian files store the version byte-swapped, so it reads as 0x0300_0000.
        if (2..=3).contains(&version.swap_bytes()) {
            return Err(GgufErrorKind::BigEndian);
        }
        return Err(GgufErrorKind::UnsupportedVersion { version });
    }
    let tensor_count = reader.u64(&"the tensor count")?;
    let kv_count = reader.u64(&"the metadata count")?;
    // Smallest possible entries: a key/value is an 8-byte key length, a 4-byte type and a
    // 1-byte value; a tensor info is a name length, one dimension count, a type and an offset.
    reader.ensure(kv_count.saturating_mul(13), &format_args!("{kv_count} metadata entries"))?;
    reader.ensure(tensor_count.saturating_mul(24), &format_args!("{tensor_count} tensor infos"))?;

    let mut metadata = Metadata::default();
    for index in 0..kv_count {
        let key = reader.string(MAX_KEY_LEN, &format_args!("metadata key #{index}"))?;
        let value_type = reader.u32(&format_args!("type of '{key}'"))?;
        let value =
            read_value(reader, value_type, &key, Metadata::wants_text(&key), header.is_some())?;
        metadata.record(&key, &value)?;
        if let Some(header) = header.as_deref_mut() {
            if header.values.contains_key(&key) {
                return Err(GgufErrorKind::Malformed(format!("key '{key}' appears twice")));
            }
            header.values.insert(key, value);
        }
    }

    let tensors = header.map(|header| &mut header.tensors);
    let totals = read_tensor_infos(reader, tensor_count, tensors)?;
    let alignment = metadata.alignment.unwrap_or(DEFAULT_ALIGNMENT);
    let data_start = reader
        .pos
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| GgufErrorKind::Malformed("header ends past any file size".into()))?;
    if totals.data_end > reader.len.saturating_sub(data_start) {
        return Err(GgufErrorKind::Truncated {
            what: format!("tensor data for {tensor_count} tensors"),
            offset: data_start,
            needed: totals.data_end,
            file_size: reader.len,
        });
    }

    let architecture = metadata
        .architecture
        .ok_or_else(|| GgufErrorKind::Malformed("general.architecture is missing".into()))?;
    let context_key = format!("{architecture}.context_length");
    let context_length =
        metadata.context_lengths.iter().find(|(key, _)| *key == context_key).map(|(_, v)| *v);
    let embedding = [format!("{architecture}.pooling_type"), format!("{architecture}.attention.causal")]
        .iter()
        .any(|key| metadata.embedding_keys.contains(key));
    let quantization = match metadata.file_type {
        Some(file_type) => file_type_name(file_type)
            .map(str::to_string)
            .unwrap_or_else(|| format!("file type {file_type}")),
        None => dominant_type_name(&totals.elements_by_type),
    };
    Ok(GgufFacts {
        architecture,
        parameter_count: totals.parameter_count,
        quantization,
        context_length,
        has_chat_template: metadata.chat_template.is_some(),
        chat_template: metadata.chat_template,
        name: metadata.name,
        embedding: Some(embedding),
    })
}

/// Reads the tensor table; with `kept`, every tensor's name and size in bytes go there.
fn read_tensor_infos<R: Read + Seek>(
    reader: &mut Bounded<R>,
    tensor_count: u64,
    mut kept: Option<&mut Vec<(String, u64)>>,
) -> Parsed<TensorTotals> {
    let mut totals =
        TensorTotals { parameter_count: 0, data_end: 0, elements_by_type: [0; GGML_TYPE_LIMIT] };
    let malformed =
        |index: u64, reason: String| GgufErrorKind::Malformed(format!("tensor #{index}: {reason}"));
    for index in 0..tensor_count {
        let what = format_args!("tensor info #{index}");
        let name_len = reader.u64(&what)?;
        if name_len > MAX_KEY_LEN {
            return Err(malformed(index, format!("name is {name_len} bytes long")));
        }
        let name = match kept {
            Some(_) => Some(String::from_utf8_lossy(&reader.raw(name_len, &what)?).into_owned()),
            None => {
                reader.skip(name_len, &what)?;
                None
            }
        };
        let dims = reader.u32(&what)?;
        if dims == 0 || dims > MAX_TENSOR_DIMS {
            return Err(malformed(index, format!("{dims} dimensions (ggml allows 1 to 4)")));
        }
        let mut shape = [1u64; MAX_TENSOR_DIMS as usize];
        for slot in shape.iter_mut().take(dims as usize) {
            *slot = reader.u64(&what)?;
        }
        let ggml_type = reader.u32(&what)?;
        let offset = reader.u64(&what)?;

        let (block_elements, block_bytes, _) = ggml_type_layout(ggml_type)
            .ok_or_else(|| malformed(index, format!("unknown ggml type {ggml_type}")))?;
        let elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| malformed(index, format!("shape {shape:?} overflows")))?;
        if shape[0] % block_elements != 0 {
            return Err(malformed(
                index,
                format!(
                    "row length {} is not a multiple of the block size {block_elements}",
                    shape[0]
                ),
            ));
        }
        // Bytes = blocks per row * block bytes * number of rows; each step checked.
        let bytes = (shape[0] / block_elements)
            .checked_mul(block_bytes)
            .and_then(|row| shape[1..].iter().try_fold(row, |acc, &d| acc.checked_mul(d)))
            .ok_or_else(|| malformed(index, format!("shape {shape:?} overflows")))?;
        let end = offset
            .checked_add(bytes)
            .ok_or_else(|| malformed(index, format!("offset {offset} overflows")))?;
        totals.data_end = totals.data_end.max(end);
        totals.parameter_count = totals
            .parameter_count
            .checked_add(elements)
            .ok_or_else(|| malformed(index, "parameter count overflows".into()))?;
        if let Some(tally) = totals.elements_by_type.get_mut(ggml_type as usize) {
            *tally = tally.saturating_add(elements);
        }
        if let (Some(kept), Some(name)) = (kept.as_deref_mut(), name) {
            kept.push((name, bytes));
        }
    }
    if let Some(kept) = kept {
        let mut names = std::collections::HashSet::with_capacity(kept.len());
        if let Some((name, _)) = kept.iter().find(|(name, _)| !names.insert(name.as_str())) {
            return Err(GgufErrorKind::Malformed(format!("tensor name '{name}' appears twice")));
        }
    }
    Ok(totals)
}

fn dominant_type_name(elements_by_type: &[u64; GGML_TYPE_LIMIT]) -> String {
    elements_by_type
        .iter()
        .enumerate()
        .filter(|(_, &count)| count > 0)
        .max_by_key(|(_, &count)| count)
        .and_then(|(ggml_type, _)| ggml_type_layout(ggml_type as u32))
        .map(|(_, _, name)| name.to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

pub mod convert;
pub mod write;
