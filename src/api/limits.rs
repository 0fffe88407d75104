//! Connection and request limits, so a slow or idle client cannot hold the daemon's connections:
//! how long a client may take to send its headers and its body, how long an idle keep-alive
//! connection stays open, and how many connections are open at once.
//!
//! actix drops a client whose headers are late (`client_request_timeout`, answering 408) and
//! closes idle keep-alive connections (`keep_alive`); it bounds neither the body nor its time.
//! [`read_body_in_time`] does: it reads the whole body before the handler runs, within the
//! deadline and at most one byte over the size limit, and answers 408 in the route's API shape
//! when the deadline passes.
//!
//! actix's head timer covers only a connection's first request; the heads of later requests on
//! a kept-alive connection are timed by [`super::head_deadline::HeadDeadlineIo`] under the same
//! limit, so no client can hold a connection by trickling a second request's headers.
//!
//! Key items: [`HttpLimits`], [`read_body_in_time`] (actix middleware, mounted by `build_app`).
//! Cost: the body is buffered once here (up to `max_body_bytes` + 1), and handed on as is.

use std::time::Duration;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::{self, BytesMut};
use actix_web::HttpMessage;
use futures_util::StreamExt;

use super::auth::Shape;
use super::AppState;
use crate::error::{CoreError, ErrorCode};

/// The limits `llamay serve` applies to its HTTP connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time for each request head, from its first byte (a new connection's first head: from
    /// the connection); later, 408 and the connection closes.
    pub client_request_timeout: Duration,
    /// Time for a request's whole body, from its head; later, 408 and the connection closes.
    pub request_body_timeout: Duration,
    /// How long an idle keep-alive connection stays open.
    pub keep_alive: Duration,
    /// Connections kept open at once, over all workers: from three quarters of it on, idle
    /// connections are shed, and up to twice as many are accepted meanwhile (see
    /// `head_deadline`), so a new client never waits behind idle ones.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            client_request_timeout: Duration::from_secs(5),
            request_body_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
            max_connections: 1024,
        }
    }
}

/// Middleware: reads the request body within `request_body_timeout` and hands it to the
/// handler from memory. A body declared larger than the limit is left unread, so the handler
/// answers 413 without waiting for it.
pub async fn read_body_in_time(
    mut request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let Some((timeout, limit)) = request
        .app_data::<web::Data<AppState>>()
        .map(|state| (state.request_body_timeout, state.max_body_bytes))
    else {
        return Ok(next.call(request).await?.map_into_left_body());
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Ok(next.call(request).await?.map_into_left_body());
    }
    let mut payload = request.take_payload();
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    let read = async {
        while let Some(chunk) = payload.next().await {
            let chunk = chunk?;
            // One byte past the limit is enough for the handler to answer 413.
            let room = (limit + 1).saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() > limit {
                break;
            }
        }
        Ok::<_, actix_web::error::PayloadError>(())
    };
    let failure = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(CoreError::new(
            ErrorCode::MalformedJson,
            format!("could not read the request body: {error}"),
        )),
        Err(_) => Some(CoreError::new(
            ErrorCode::RequestTimeout,
            format!(
                "the request body did not arrive within {} seconds",
                timeout.as_secs_f64()
            ),
        )),
    };
    if let Some(error) = failure {
        let mut response = Shape::of_path(request.path()).render(&error);
        // The rest of a slow body is not worth waiting for: close instead of draining it.
        response
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
        return Ok(request.into_response(response).map_into_right_body());
    }
    request.set_payload(Payload::from(body.freeze()));
    Ok(next.call(request).await?.map_into_left_body())
}
