//! `POST /rerank` and `POST /v1/rerank`, in the shape llama-server, Jina and Cohere share:
//! `model`, `query`, `documents` (strings or `{"text": ...}`), `top_n`, `return_documents` ->
//! `{"results": [{"index", "relevance_score", "document"?}], "model", "usage"}`, most relevant
//! first. The model's scorer (a chat model's query likelihood, or an encoder's cosine) is the actors'
//! business; errors are in the OpenAI shape.
//!
//! Key items: [`configure`], [`RerankRequest`], [`rank`]. Costs: one sort of the scores.


use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::read_json;
use super::embeddings::check_count;
use super::AppState;
use crate::error::CoreError;

pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/rerank", web::post().to(rerank))
        .route("/v1/rerank", web::post().to(rerank));
}

#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    pub model: Option<String>,
    pub query: Option<Value>,
    pub documents: Option<Value>,
    pub top_n: Option<i64>,
    pub return_documents: Option<bool>,
}

/// The request's documents as text: each a string or an object with a string `text`.
pub fn documents(value: Option<&Value>) -> Result<Vec<String>, CoreError> {
    let bad = |message: String| CoreError::bad_request(message).with_param("documents");
    let items = match value {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(bad("documents is an empty array; send at least one".into()))
        }
        None | Some(Value::Null) => {
            return Err(bad("documents is required: an array of strings".into()))
        }
        Some(_) => {
            return Err(bad(
                "documents must be an array of strings or {\"text\": ...} objects".into(),
            ))
        }
    };
    check_count(items.len(), "documents")?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::String(text) => Ok(text.clone()),
            Value::Object(fields) => match fields.get("text") {
                Some(Value::String(text)) => Ok(text.clone()),
                _ => Err(bad(format!(
                    "documents[{index}] is an object without a string \"text\""
                ))),
            },
            other => Err(bad(format!(
                "documents[{index}] is {}, not a string or {{\"text\": ...}}",
                kind_of(other)
            ))),
        })
        .collect()
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Document indexes by score, highest first (ties keep the documents' order), cut to `top_n`.
pub fn rank(scores: &[f32], top_n: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n.unwrap_or(scores.len()));
    order
}

async fn rerank(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body: RerankRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let query = match body.query {
            Some(Value::String(text)) if !text.is_empty() => text,
            Some(Value::String(_)) => {
                return Err(CoreError::bad_request("query is empty").with_param("query"))
            }
            _ => {
                return Err(
                    CoreError::bad_request("query is required: a string").with_param("query")
                )
            }
        };
        let documents = documents(body.documents.as_ref())?;
        let top_n = match body.top_n {
            None => None,
            Some(n) if n >= 1 => Some(n as usize),
            Some(n) => {
                return Err(
                    CoreError::bad_request(format!("top_n is {n}; it must be at least 1"))
                        .with_param("top_n"),
                )
            }
        };
        let model = body
            .model
            .filter(|m| !m.is_empty())
            .or_else(|| state.rerank_model.clone())
            .ok_or_else(|| {
                CoreError::bad_request("name a model in \"model\", or start llamay with -rerank")
                    .with_param("model")
            })?;
        let ranking = state.generation.rerank(&model, query, documents.clone()).await?;
        let scores = ranking.scores;
        let with_documents = body.return_documents.unwrap_or(false);
        let results: Vec<Value> = rank(&scores.scores, top_n)
            .into_iter()
            .map(|index| {
                let mut result = json!({"index": index, "relevance_score": scores.scores[index]});
                if with_documents {
                    result["document"] = json!({"text": documents[index]});
                }
                result
            })
            .collect();
        Ok(json!({
            "model": ranking.model,
            "results": results,
            "usage": {"prompt_tokens": scores.prompt_tokens, "total_tokens": scores.prompt_tokens},
        }))
    }
    .await;
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(error) => super::openai::handlers::render_error(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_strings_or_text_objects() {
        assert_eq!(
            documents(Some(&json!(["a", {"text": "b"}]))).unwrap(),
            ["a", "b"]
        );
        let error = documents(Some(&json!(["a", 3]))).unwrap_err();
        assert_eq!(
            (error.status(), error.message.as_str()),
            (
                400,
                "documents[1] is a number, not a string or {\"text\": ...}"
            )
        );
        assert_eq!(
            documents(Some(&json!([{"title": "x"}])))
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(documents(Some(&json!([]))).unwrap_err().status(), 400);
        assert_eq!(documents(None).unwrap_err().status(), 400);
        let many = vec!["d"; 2049];
        assert_eq!(documents(Some(&json!(many))).unwrap_err().status(), 413);
    }

    #[test]
    fn ranking_is_by_score_then_order_and_cut_to_top_n() {
        assert_eq!(rank(&[0.1, 0.9, 0.5, 0.9], None), [1, 3, 2, 0]);
        assert_eq!(rank(&[0.1, 0.9, 0.5], Some(2)), [1, 2]);
        assert_eq!(rank(&[0.1], Some(5)), [0]);
    }
}
