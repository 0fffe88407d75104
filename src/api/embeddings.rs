//! The embedding routes: `POST /v1/embeddings` (OpenAI: `input` a string, strings or token
//! arrays; `encoding_format` float or base64; `dimensions`), `POST /api/embed` (Ollama: `input`,
//! `truncate`, `keep_alive`, `options`) and the legacy `POST /api/embeddings` (`prompt`).
//! Each leases its model from the supervisor (loaded on demand, as a chat model is) and sends
//! the inputs to the model's embedding thread; errors come back in each API's own shape.
//!
//! Key items: [`configure`], [`EmbeddingInputs`], [`MAX_INPUTS`]. Costs: the vectors are
//! serialized once; base64 is 4/3 of the raw floats.

use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::read_json;
use super::AppState;
use crate::embed::EmbedInput;
use crate::service::encode::Embedding;
use crate::core::{KeepAlive, ModelInfo};
use crate::error::{CoreError, ErrorCode};

/// Inputs one request may carry (documents, for rerank); more is a 413.
pub const MAX_INPUTS: usize = 2048;

pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/embeddings", web::post().to(openai_embeddings))
        .route("/api/embed", web::post().to(ollama_embed))
        .route("/api/embeddings", web::post().to(ollama_embeddings));
}

/// The inputs of a request, checked for emptiness and count.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingInputs(pub Vec<EmbedInput>);

impl EmbeddingInputs {
    /// Reads `input`: a string, an array of strings, one token array, or an array of token
    /// arrays (the forms OpenAI accepts; Ollama sends the first two).
    pub fn parse(input: Option<&Value>, field: &str) -> Result<Self, CoreError> {
        let bad = |message: String| CoreError::bad_request(message).with_param(field);
        let inputs = match input {
            None | Some(Value::Null) => {
                return Err(bad(format!(
                    "{field} is required: a string or an array of strings"
                )))
            }
            Some(Value::String(text)) => vec![EmbedInput::Text(text.clone())],
            Some(Value::Array(items)) if items.is_empty() => {
                return Err(bad(format!(
                    "{field} is an empty array; send at least one input"
                )))
            }
            Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
                vec![EmbedInput::Tokens(token_ids(items, field, None)?)]
            }
            Some(Value::Array(items)) => {
                check_count(items.len(), field)?;
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| match item {
                        Value::String(text) => Ok(EmbedInput::Text(text.clone())),
                        Value::Array(tokens) => {
                            Ok(EmbedInput::Tokens(token_ids(tokens, field, Some(index))?))
                        }
                        _ => Err(bad(format!(
                            "{field}[{index}] must be a string or an array of token ids"
                        ))),
                    })
                    .collect::<Result<_, _>>()?
            }
            Some(_) => {
                return Err(bad(format!(
                    "{field} must be a string or an array of strings"
                )))
            }
        };
        Ok(Self(inputs))
    }
}

/// Over [`MAX_INPUTS`] is a 413 naming the count.
pub fn check_count(count: usize, field: &str) -> Result<(), CoreError> {
    if count > MAX_INPUTS {
        return Err(CoreError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "{field} has {count} items, over the limit of {MAX_INPUTS} per request; split it"
            ),
        )
        .with_param(field));
    }
    Ok(())
}

fn token_ids(items: &[Value], field: &str, index: Option<usize>) -> Result<Vec<u32>, CoreError> {
    let place = index.map_or(field.to_string(), |i| format!("{field}[{i}]"));
    items
        .iter()
        .enumerate()
        .map(|(position, item)| {
            item.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    CoreError::bad_request(format!("{place}[{position}] is {item}, not a token id"))
                        .with_param(field)
                })
        })
        .collect()
}

/// The model a request names, else the daemon's `-embed`.
fn embedding_model(state: &AppState, requested: Option<String>) -> Result<String, CoreError> {
    requested.filter(|name| !name.is_empty()).or_else(|| state.embed_model.clone()).ok_or_else(|| {
        CoreError::bad_request("name an embedding model in \"model\" (such as all-minilm:l6-v2), or start llamay with -embed")
            .with_param("model")
    })
}

/// The 400 a chat model gets when asked for vectors.
pub fn not_an_encoder(info: &ModelInfo, route: &str) -> CoreError {
    CoreError::bad_request(format!(
        "model {} ({}) is a chat model; it makes no embeddings. Name an embedding model for {route} (such as all-minilm:l6-v2), or start llamay with -embed",
        info.name, info.architecture
    ))
    .with_param("model")
}

/// Embeds the inputs through the generation service, a chat model refused naming `route`.
async fn run_embedding(
    state: &AppState,
    model: String,
    keep_alive: Option<KeepAlive>,
    inputs: EmbeddingInputs,
    truncate: bool,
    route: &str,
) -> Result<Embedding, CoreError> {
    state.generation.embed(&model, keep_alive, inputs.0, truncate, |info| not_an_encoder(info, route)).await
}

/// The first `dimensions` of `vector`, scaled back to unit length (OpenAI's `dimensions`).
pub fn shorten(vector: &mut Vec<f32>, dimensions: usize) {
    vector.truncate(dimensions);
    let norm = vector
        .iter()
        .map(|v| (*v as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        vector
            .iter_mut()
            .for_each(|v| *v = (*v as f64 / norm) as f32);
    }
}

/// Little-endian f32s in standard base64, as OpenAI's `encoding_format: "base64"`.
pub fn base64_floats(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                text.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[derive(Debug, Deserialize)]
struct OpenAiEmbeddingRequest {
    model: Option<String>,
    input: Option<Value>,
    encoding_format: Option<String>,
    dimensions: Option<i64>,
}

async fn openai_embeddings(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: OpenAiEmbeddingRequest =
            read_json(&request, payload, state.max_body_bytes).await?;
        let base64 = match body.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(CoreError::bad_request(format!(
                    "encoding_format {other:?} is not offered: use \"float\" or \"base64\""
                ))
                .with_param("encoding_format"))
            }
        };
        let inputs = EmbeddingInputs::parse(body.input.as_ref(), "input")?;
        let model = embedding_model(&state, body.model)?;
        // As OpenAI: an input over the model's limit is refused, naming it, not cut silently.
        let outcome = run_embedding(&state, model, None, inputs, false, "/v1/embeddings").await?;
        let dimensions = match body.dimensions {
            None => None,
            Some(d) if d >= 1 && d as usize <= outcome.dimensions => Some(d as usize),
            Some(d) => {
                return Err(CoreError::bad_request(format!(
                    "dimensions {d} is out of range: this model gives 1 to {}",
                    outcome.dimensions
                ))
                .with_param("dimensions"))
            }
        };
        let data: Vec<Value> = outcome
            .embedded
            .vectors
            .into_iter()
            .enumerate()
            .map(|(index, mut vector)| {
                if let Some(d) = dimensions {
                    shorten(&mut vector, d);
                }
                let embedding = if base64 {
                    json!(base64_floats(&vector))
                } else {
                    json!(vector)
                };
                json!({"object": "embedding", "index": index, "embedding": embedding})
            })
            .collect();
        let tokens = outcome.embedded.prompt_tokens;
        Ok(json!({
            "object": "list",
            "data": data,
            "model": outcome.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }))
    }
    .await;
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(error) => super::openai::handlers::render_error(&error),
    }
}

#[derive(Debug, Deserialize)]
struct OllamaEmbedRequest {
    model: Option<String>,
    input: Option<Value>,
    truncate: Option<bool>,
    keep_alive: Option<Value>,
    /// Accepted as Ollama's clients send it; an embedding has no sampling to tune.
    #[serde(default)]
    options: Option<serde_json::Map<String, Value>>,
    dimensions: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct OllamaLegacyRequest {
    model: Option<String>,
    prompt: Option<Value>,
    keep_alive: Option<Value>,
    #[serde(default)]
    options: Option<serde_json::Map<String, Value>>,
}

fn keep_alive(value: Option<Value>) -> Result<Option<KeepAlive>, CoreError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => KeepAlive::from_json(&value).map(Some).map_err(|e| {
            CoreError::bad_request(format!("keep_alive: {e}")).with_param("keep_alive")
        }),
    }
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos().min(u64::MAX as u128) as u64
}

async fn ollama_embed(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let started = Instant::now();
    let result = async {
        let body: OllamaEmbedRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let _ = body.options;
        let keep_alive = keep_alive(body.keep_alive)?;
        let inputs = EmbeddingInputs::parse(body.input.as_ref(), "input")?;
        if inputs.0.iter().any(|i| matches!(i, EmbedInput::Tokens(_))) {
            return Err(
                CoreError::bad_request("input must be a string or an array of strings")
                    .with_param("input"),
            );
        }
        let model = embedding_model(&state, body.model)?;
        let outcome = run_embedding(
            &state,
            model,
            keep_alive,
            inputs,
            body.truncate.unwrap_or(true),
            "/api/embed",
        )
        .await?;
        let mut vectors = outcome.embedded.vectors;
        if let Some(d) = body.dimensions {
            if d < 1 || d as usize > outcome.dimensions {
                return Err(CoreError::bad_request(format!(
                    "dimensions {d} is out of range: this model gives 1 to {}",
                    outcome.dimensions
                )));
            }
            vectors.iter_mut().for_each(|v| shorten(v, d as usize));
        }
        Ok(json!({
            "model": outcome.model,
            "embeddings": vectors,
            "total_duration": nanos(started.elapsed()),
            "load_duration": nanos(outcome.load_duration),
            "prompt_eval_count": outcome.embedded.prompt_tokens,
        }))
    }
    .await;
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(error) => super::ollama::handlers::render_error(&error),
    }
}

async fn ollama_embeddings(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: OllamaLegacyRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let _ = body.options;
        let keep_alive = keep_alive(body.keep_alive)?;
        let prompt = match body.prompt {
            Some(Value::String(text)) => text,
            _ => {
                return Err(
                    CoreError::bad_request("prompt is required: a string").with_param("prompt")
                )
            }
        };
        if prompt.is_empty() {
            return Err(CoreError::bad_request("prompt is empty").with_param("prompt"));
        }
        let model = embedding_model(&state, body.model)?;
        let inputs = EmbeddingInputs(vec![EmbedInput::Text(prompt)]);
        let mut outcome =
            run_embedding(&state, model, keep_alive, inputs, true, "/api/embeddings").await?;
        let vector = outcome.embedded.vectors.pop().unwrap_or_default();
        Ok(json!({"embedding": vector}))
    }
    .await;
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(error) => super::ollama::handlers::render_error(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_take_every_openai_form_and_refuse_the_rest() {
        let parse = |v: Value| EmbeddingInputs::parse(Some(&v), "input");
        assert_eq!(parse(json!("a")).unwrap().0, [EmbedInput::Text("a".into())]);
        assert_eq!(parse(json!(["a", "b"])).unwrap().0.len(), 2);
        assert_eq!(
            parse(json!([1, 2, 3])).unwrap().0,
            [EmbedInput::Tokens(vec![1, 2, 3])]
        );
        assert_eq!(
            parse(json!([[1], [2, 3]])).unwrap().0[1],
            EmbedInput::Tokens(vec![2, 3])
        );
        assert_eq!(parse(json!([])).unwrap_err().status(), 400);
        assert_eq!(
            parse(json!(["a", 3])).unwrap_err().message,
            "input[1] must be a string or an array of token ids"
        );
        assert_eq!(parse(json!([-1])).unwrap_err().status(), 400);
        assert_eq!(parse(json!({"a": 1})).unwrap_err().status(), 400);
        assert_eq!(
            EmbeddingInputs::parse(None, "input").unwrap_err().status(),
            400
        );
        let many: Vec<String> = (0..=MAX_INPUTS).map(|i| i.to_string()).collect();
        assert_eq!(parse(json!(many)).unwrap_err().status(), 413);
    }

    #[test]
    fn base64_is_little_endian_floats() {
        // 1.0f32 = 00 00 80 3f
        assert_eq!(base64_floats(&[1.0]), "AACAPw==");
        assert_eq!(base64_floats(&[1.0, 0.0]), "AACAPwAAAAA=");
        assert_eq!(base64_floats(&[]), "");
    }

    #[test]
    fn shortened_vectors_are_unit_length() {
        let mut v = vec![3.0, 4.0, 12.0];
        shorten(&mut v, 2);
        assert_eq!(v, [0.6, 0.8]);
    }
}
