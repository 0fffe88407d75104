//! Reading a request body: bounded by the daemon's limit (refused from `Content-Length` before
//! any of it is read, else as soon as it grows past), then parsed as JSON with a message naming
//! what is wrong and where.
//!
//! Key items: [`read_json`], [`parse_json`]. Costs: a body is buffered once, up to the limit.

use actix_web::http::header;
use actix_web::web::{self, BytesMut};
use actix_web::HttpRequest;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::{CoreError, ErrorCode};

/// Reads the body (up to `limit` bytes) and parses it as `T`. Any content type is accepted, as
/// `curl -d` sends form-encoded headers with a JSON body.
pub async fn read_json<T: DeserializeOwned>(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<T, CoreError> {
    let too_large = || {
        CoreError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            CoreError::new(
                ErrorCode::MalformedJson,
                format!("could not read the request body: {e}"),
            )
        })?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    parse_json(&body)
}

/// Parses a JSON body, naming what is wrong and where.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, CoreError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(CoreError::new(
            ErrorCode::MalformedJson,
            "the request body is empty; send a JSON object",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "the request body does not match the API",
            _ => "the request body is not valid JSON",
        };
        CoreError::new(ErrorCode::MalformedJson, format!("{what}: {e}"))
    })
}
