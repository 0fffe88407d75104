//! The tokenizer routes in vLLM's shape, which lm-evaluation-harness's remote tokenizer reads:
//! `POST /tokenize` (`{"prompt", "add_special_tokens"}` or `{"messages"}` -> `{"tokens",
//! "count", "max_model_len"}`), `POST /detokenize` (`{"tokens"}` -> `{"prompt"}`) and `GET
//! /tokenizer_info` (`eos_token`, `bos_token`, `pad_token`, `chat_template`,
//! `model_max_length`). Each takes `model` (a field, or a query parameter on the GET); without
//! it the chat model loaded now answers. The work is the generation service's; errors are in
//! the OpenAI shape.
//!
//! Key items: [`configure`], [`TokenizeRequest`]. Costs: the body read and one answer.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::read_json;
use super::AppState;
use crate::core::{ChatMessage, Role};
use crate::error::CoreError;
use crate::service::tokenize::TokenizeInput;

pub fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/tokenize", web::post().to(tokenize))
        .route("/detokenize", web::post().to(detokenize))
        .route("/tokenizer_info", web::get().to(tokenizer_info));
}

#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub add_special_tokens: Option<bool>,
    pub messages: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
pub struct InfoQuery {
    pub model: Option<String>,
}

/// What a `/tokenize` body asks for: a prompt or messages, not both.
pub fn tokenize_input(body: TokenizeRequest) -> Result<TokenizeInput, CoreError> {
    match (body.prompt, body.messages) {
        (Some(_), Some(_)) => Err(CoreError::invalid("send prompt or messages, not both").with_param("messages")),
        (Some(text), None) => Ok(TokenizeInput::Text { text, add_special: body.add_special_tokens.unwrap_or(true) }),
        (None, Some(messages)) => Ok(TokenizeInput::Chat(chat_messages(&messages)?)),
        (None, None) => Err(CoreError::invalid("send prompt (a string) or messages (a conversation)").with_param("prompt")),
    }
}

/// `messages` as a conversation: each `{"role", "content"}`, the content a string or a list of
/// text parts.
fn chat_messages(messages: &[Value]) -> Result<Vec<ChatMessage>, CoreError> {
    if messages.is_empty() {
        return Err(CoreError::invalid("messages is empty; send at least one message").with_param("messages"));
    }
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let bad = |what: String| CoreError::invalid(format!("messages[{index}]: {what}")).with_param("messages");
            let role = match message.get("role").and_then(Value::as_str) {
                Some("system" | "developer") => Role::System,
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some("tool") => Role::Tool,
                Some(other) => return Err(bad(format!("role {other:?} is not system, user, assistant or tool"))),
                None => return Err(bad("role is required".into())),
            };
            let content = match message.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(text)) => Ok(text),
                        _ => Err(bad("content parts must be {\"type\": \"text\", \"text\": ...}".into())),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .concat(),
                Some(_) => return Err(bad("content must be a string or a list of text parts".into())),
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

/// Token ids as the model reads them: each a whole number in u32; a 400 naming the first that
/// is not.
pub fn token_ids(values: &[Value], field: &str) -> Result<Vec<u32>, CoreError> {
    values
        .iter()
        .enumerate()
        .map(|(at, value)| {
            value.as_u64().and_then(|id| u32::try_from(id).ok()).ok_or_else(|| {
                CoreError::invalid(format!("{field}[{at}] is {value}, which is not a token id")).with_param(field)
            })
        })
        .collect()
}

async fn tokenize(state: web::Data<AppState>, request: HttpRequest, payload: web::Payload) -> HttpResponse {
    let result = async {
        let body: TokenizeRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let model = body.model.clone();
        let tokenized = state.generation.tokenize(model.as_deref(), tokenize_input(body)?).await?;
        Ok::<_, CoreError>(json!({
            "count": tokenized.tokens.len(),
            "max_model_len": tokenized.max_model_len,
            "tokens": tokenized.tokens,
        }))
    }
    .await;
    answer(result)
}

async fn detokenize(state: web::Data<AppState>, request: HttpRequest, payload: web::Payload) -> HttpResponse {
    let result = async {
        let body: DetokenizeRequest = read_json(&request, payload, state.max_body_bytes).await?;
        let Some(values) = body.tokens else {
            return Err(CoreError::invalid("tokens is required: an array of token ids").with_param("tokens"));
        };
        let tokens = token_ids(&values, "tokens")?;
        let prompt = state.generation.detokenize(body.model.as_deref(), tokens).await?;
        Ok(json!({ "prompt": prompt }))
    }
    .await;
    answer(result)
}

async fn tokenizer_info(state: web::Data<AppState>, query: web::Query<InfoQuery>) -> HttpResponse {
    let result = state.generation.tokenizer_info(query.model.as_deref()).await.map(|info| {
        json!({
            "bos_token": info.bos_token,
            "eos_token": info.eos_token,
            "pad_token": info.pad_token,
            "chat_template": info.chat_template,
            "model_max_length": info.model_max_length,
            "vocab_size": info.vocabulary_size,
            "add_bos_token": info.adds_bos,
            "tokenizer_class": "llama.cpp",
        })
    });
    answer(result)
}

fn answer(result: Result<Value, CoreError>) -> HttpResponse {
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(error) => super::openai::handlers::render_error(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> TokenizeRequest {
        serde_json::from_value(body).expect("reads")
    }

    #[test]
    fn a_prompt_or_messages_is_tokenized_and_neither_or_both_is_refused() {
        let text = tokenize_input(request(json!({"prompt": "hi", "add_special_tokens": false}))).unwrap();
        assert!(matches!(text, TokenizeInput::Text { add_special: false, .. }));
        let chat = tokenize_input(request(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})));
        match chat.unwrap() {
            TokenizeInput::Chat(messages) => assert_eq!((messages[0].role, messages[0].content.as_str()), (Role::User, "ab")),
            other => panic!("chat expected, got {other:?}"),
        }
        assert_eq!(tokenize_input(request(json!({}))).unwrap_err().param.as_deref(), Some("prompt"));
        let both = tokenize_input(request(json!({"prompt": "x", "messages": [{"role": "user", "content": "y"}]})));
        assert_eq!(both.unwrap_err().status(), 400);
        let bad_role = tokenize_input(request(json!({"messages": [{"role": "robot", "content": "y"}]}))).unwrap_err();
        assert!(bad_role.message.contains("messages[0]"), "{}", bad_role.message);
    }

    #[test]
    fn token_ids_name_the_first_that_is_not_one() {
        assert_eq!(token_ids(&[json!(1), json!(2)], "tokens").unwrap(), [1, 2]);
        let error = token_ids(&[json!(1), json!(-3)], "tokens").unwrap_err();
        assert_eq!((error.param.as_deref(), error.message.as_str()), (Some("tokens"), "tokens[1] is -3, which is not a token id"));
        assert!(token_ids(&[json!("a")], "tokens").is_err());
        assert!(token_ids(&[json!(1u64 << 40)], "tokens").is_err());
    }
}
