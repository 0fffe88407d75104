//! Who may call the API. An API key: when the daemon has one (`-api-key`, `LLAMAY_API_KEY`,
//! config `api_key`), every route but `/health` requires it, and a request without it, or with
//! another, gets 401 in the shape of the API its path belongs to. And browser origins: only the
//! origins given (`-origins`, `LLAMAY_ORIGINS`, config `origins`; none by default) may call from
//! a web page; a request or preflight from any other origin is refused with 400.
//!
//! OpenAI and Ollama clients send the key as `Authorization: Bearer KEY`; Anthropic clients send
//! `x-api-key: KEY`, on `/v1/messages` and on the routes they share with OpenAI (`/v1/models`),
//! so both headers are taken on every route. The comparison runs in constant time over SHA-256
//! digests, so neither the key's bytes nor its length leak through timing.
//!
//! Key items: [`ApiKey`], [`require_api_key`] and [`cors`] (actix middleware, mounted by
//! `build_app`), [`Shape`]. Cost: one SHA-256 of a header value per request when a key is set;
//! a set lookup of the `Origin` header per request.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{web, HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};

use super::AppState;
use crate::error::{CoreError, ErrorCode};

/// Routes open without a key: liveness probes must work for supervisors that hold no secret.
const OPEN_ROUTES: [&str; 1] = ["/health"];

/// The daemon's key, kept only as its digest so it is compared in constant time.
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

impl ApiKey {
    pub fn new(key: &str) -> Self {
        ApiKey {
            digest: Sha256::digest(key.as_bytes()).into(),
        }
    }

    /// Whether `offered` is the key. Both sides are hashed first, so the time taken depends on
    /// neither the key's length nor how many leading bytes match.
    pub fn matches(&self, offered: &[u8]) -> bool {
        let offered: [u8; 32] = Sha256::digest(offered).into();
        constant_time_eq(&self.digest, &offered)
    }
}

/// Equal-length comparison whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Which API a path belongs to, for the header it reads the key from and the error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    Anthropic,
    Ollama,
}

impl Shape {
    pub fn of_path(path: &str) -> Shape {
        if path.starts_with("/api/") {
            Shape::Ollama
        } else if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Shape::Anthropic
        } else {
            Shape::OpenAi
        }
    }

    /// `error` rendered as this API renders its errors.
    pub fn render(self, error: &CoreError) -> HttpResponse {
        match self {
            Shape::OpenAi => super::openai::handlers::render_error(error),
            Shape::Anthropic => super::anthropic::handlers::render_error(error),
            Shape::Ollama => super::ollama::handlers::render_error(error),
        }
    }
}

/// The key a request offers: `x-api-key`, else a Bearer token.
fn offered_key(headers: &header::HeaderMap) -> Option<Vec<u8>> {
    if let Some(value) = headers.get("x-api-key") {
        return Some(value.as_bytes().to_vec());
    }
    let authorization = headers.get(header::AUTHORIZATION)?.as_bytes();
    let scheme = authorization.get(..7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(authorization[7..].trim_ascii().to_vec())
}

fn refusal(shape: Shape, offered: bool) -> CoreError {
    let how = match shape {
        Shape::Anthropic => "`x-api-key: KEY` or `Authorization: Bearer KEY`",
        Shape::OpenAi | Shape::Ollama => "`Authorization: Bearer KEY`",
    };
    let message = if offered {
        format!(
            "the API key is not valid for this llamay; send the key it was started with as {how}"
        )
    } else {
        format!("this llamay requires an API key; send it as {how}")
    };
    CoreError::new(ErrorCode::Unauthorized, message)
}

/// Whose a stored thing (a response, issue 61) is: the hex SHA-256 of the key the request
/// bears when the daemon has a key (the middleware has let only that key through), `None`
/// when it has none and every caller is the same.
pub fn key_owner(state: &AppState, request: &HttpRequest) -> Option<String> {
    state.api_key.as_ref()?;
    offered_key(request.headers()).map(|key| hex::encode(Sha256::digest(&key)))
}

/// Middleware: lets a request through when no key is set, when its route is open, or when it
/// carries the key; answers 401 otherwise.
pub async fn require_api_key(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let key = request
        .app_data::<web::Data<AppState>>()
        .and_then(|state| state.api_key.clone());
    let path = request.path();
    let Some(key) = key else {
        return Ok(next.call(request).await?.map_into_left_body());
    };
    if OPEN_ROUTES.contains(&path) {
        return Ok(next.call(request).await?.map_into_left_body());
    }
    let shape = Shape::of_path(path);
    let offered = offered_key(request.headers());
    if offered
        .as_deref()
        .is_some_and(|offered| key.matches(offered))
    {
        return Ok(next.call(request).await?.map_into_left_body());
    }
    let mut response = shape.render(&refusal(shape, offered.is_some()));
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Ok(request.into_response(response).map_into_right_body())
}

/// The CORS policy for `origins` (`*` allows any). Requests without an `Origin` header (every
/// non-browser client) pass untouched; a browser request from an origin not listed is refused
/// outright rather than answered without CORS headers, since the routes accept any content type
/// and a page could otherwise make the daemon generate with a "simple" cross-site POST.
pub fn cors(origins: &[String]) -> actix_cors::Cors {
    let mut policy = actix_cors::Cors::default()
        .allowed_methods(["GET", "POST", "DELETE", "HEAD", "OPTIONS"])
        .allow_any_header()
        .expose_any_header()
        .max_age(3600)
        .block_on_origin_mismatch(true);
    for origin in origins {
        policy = if origin == "*" {
            policy.allow_any_origin()
        } else {
            policy.allowed_origin(origin)
        };
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_only_exactly() {
        let key = ApiKey::new("s3cret");
        assert!(key.matches(b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret ", b"S3cret", b"s3cret\0", b"x"] {
            assert!(!key.matches(other), "{other:?}");
        }
        assert_eq!(format!("{key:?}"), "ApiKey(..)");
    }

    #[test]
    fn paths_belong_to_their_api() {
        assert_eq!(Shape::of_path("/api/chat"), Shape::Ollama);
        assert_eq!(Shape::of_path("/v1/messages"), Shape::Anthropic);
        assert_eq!(
            Shape::of_path("/v1/messages/count_tokens"),
            Shape::Anthropic
        );
        assert_eq!(Shape::of_path("/v1/messagesx"), Shape::OpenAi);
        assert_eq!(Shape::of_path("/v1/chat/completions"), Shape::OpenAi);
        assert_eq!(Shape::of_path("/"), Shape::OpenAi);
    }
}
