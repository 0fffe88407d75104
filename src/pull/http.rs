//! The HTTP side of pulls: one blocking reqwest client per pull (rustls, no system TLS library)
//! that follows only the redirects `policy.rs` allows, and the retry policy every request
//! shares: 5xx answers and failed connections are retried with exponential backoff; 404, 401
//! and 403 are answered at once with an error naming the model.
//!
//! What a failed request says never comes from the far side: reqwest's errors can carry a
//! redirect's location or what a server sent, so they go to the log, and the caller's error
//! is in llamay's words, the same for a closed port as for an open one that is not a registry.
//!
//! Key types: [`Http`], [`Backoff`], [`StatusVerdict`]. Cost: one connection pool per pull.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use reqwest::blocking::{Client, Response};
use reqwest::{StatusCode, Url};

use super::policy::{origin_is_public, redirect_policy, InsecureRegistries, PublicOnlyResolver};
use super::PullError;

/// Attempts per request before a transient failure becomes the pull's error.
pub const MAX_ATTEMPTS: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait for a manifest, a small layer or a HEAD: a host that accepts the connection
/// and never answers must not hold a pull forever.
pub const SMALL_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A shared blocking client.
#[derive(Clone)]
pub struct Http {
    client: Client,
}

impl Http {
    /// The client for a pull that starts at `origin`, following redirects only where
    /// [`super::policy::judge_redirect`] allows (plain http only to `http_allowed`); when the
    /// origin is public, every name it meets resolves to public addresses only.
    pub fn new(origin: &Url, http_allowed: InsecureRegistries) -> Result<Http, PullError> {
        let public = origin_is_public(origin);
        let mut builder = Client::builder()
            .connect_timeout(Duration::from_secs(15))
            // A whole blob may take hours: no overall deadline.
            .timeout(None)
            .user_agent(concat!("llamay/", env!("CARGO_PKG_VERSION")))
            .redirect(redirect_policy(public, http_allowed));
        if public {
            builder = builder.dns_resolver(Arc::new(PublicOnlyResolver));
        }
        let client = builder.build().map_err(|error| {
            tracing::warn!(%error, "could not start the pull's HTTP client");
            PullError::Network {
                url: origin.to_string(),
                reason: "the HTTP client could not start (the log has the details)".to_string(),
            }
        })?;
        Ok(Http { client })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads a small body whole, refusing one over `limit` bytes.
    pub fn read_limited(
        &self,
        response: Response,
        limit: usize,
        url: &str,
    ) -> Result<Vec<u8>, PullError> {
        let mut body = Vec::new();
        response
            .take(limit as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|error| {
                tracing::debug!(%url, %error, "reading an answer failed");
                PullError::Network {
                    url: url.to_string(),
                    reason: "the connection was cut while reading the answer".to_string(),
                }
            })?;
        if body.len() > limit {
            return Err(PullError::Network {
                url: url.to_string(),
                reason: format!("the answer is over {limit} bytes"),
            });
        }
        Ok(body)
    }
}

/// Exponential backoff between attempts.
pub struct Backoff {
    pub attempt: u32,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { attempt: 0 }
    }

    /// Sleeps before the next attempt; false when the attempts are used up.
    pub fn wait(&mut self) -> bool {
        self.attempt += 1;
        if self.attempt >= MAX_ATTEMPTS {
            return false;
        }
        let delay = FIRST_BACKOFF
            .saturating_mul(1 << (self.attempt - 1).min(5))
            .min(MAX_BACKOFF);
        std::thread::sleep(delay);
        true
    }

    /// Progress was made: the next failure starts the count again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// What an answer's status means for the request.
pub enum StatusVerdict {
    Ok,
    /// Worth another attempt (429, 5xx); the status, for the log.
    Retry(StatusCode),
    Fail(PullError),
    /// A status a registry does not answer here (a redirect not followed, 400, 405...).
    Unexpected(StatusCode),
}

/// Classifies `status`; `not_found` builds the error for a 404.
pub fn judge(status: StatusCode, url: &str, not_found: &dyn Fn() -> PullError) -> StatusVerdict {
    if status.is_success() {
        return StatusVerdict::Ok;
    }
    match status.as_u16() {
        404 => StatusVerdict::Fail(not_found()),
        401 | 403 => StatusVerdict::Fail(PullError::Unauthorized {
            url: url.to_string(),
            status: status.as_u16(),
        }),
        429 | 500..=599 => StatusVerdict::Retry(status),
        _ => StatusVerdict::Unexpected(status),
    }
}

/// The error for a request that failed before any answer: a refused redirect says so (without
/// where it pointed), anything else is `otherwise()`. The details go to the log.
pub fn transport_error(
    url: &str,
    error: &reqwest::Error,
    otherwise: impl FnOnce() -> PullError,
) -> PullError {
    if error.is_redirect() {
        return redirect_refused(url, error);
    }
    tracing::warn!(%url, error = %error_chain(error), "a pull request failed");
    otherwise()
}

/// A redirect the policy refused, said without where it pointed (the server's text).
pub fn redirect_refused(url: &str, error: &reqwest::Error) -> PullError {
    tracing::warn!(%url, error = %error_chain(error), "a redirect was not followed");
    PullError::RedirectRefused {
        url: url.to_string(),
    }
}

/// `error` with its causes, for the log.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// GET `url` with `headers` (waiting at most [`SMALL_REQUEST_TIMEOUT`]), retrying 5xx answers
/// and failed connections. `not_found` builds the error for a 404; `unreachable` the one for
/// a host that never gave a usable answer (no connection, not HTTP, an unexpected status, 5xx
/// to the last attempt), one error whichever it was.
pub fn get_with_retries(
    http: &Http,
    url: &str,
    headers: &[(&str, &str)],
    not_found: impl Fn() -> PullError,
    unreachable: impl Fn() -> PullError,
) -> Result<Response, PullError> {
    let mut backoff = Backoff::new();
    loop {
        let mut request = http.client.get(url).timeout(SMALL_REQUEST_TIMEOUT);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let failure = match request.send() {
            Ok(response) => match judge(response.status(), url, &not_found) {
                StatusVerdict::Ok => return Ok(response),
                StatusVerdict::Fail(error) => return Err(error),
                StatusVerdict::Retry(status) => format!("answered {status}"),
                StatusVerdict::Unexpected(status) => {
                    tracing::warn!(%url, %status, "a pull request got an unexpected answer");
                    return Err(unreachable());
                }
            },
            Err(error) if error.is_redirect() => return Err(redirect_refused(url, &error)),
            Err(error) => error_chain(&error),
        };
        tracing::debug!(%url, %failure, "retrying");
        if !backoff.wait() {
            tracing::warn!(%url, %failure, attempts = MAX_ATTEMPTS, "a pull request gave up");
            return Err(unreachable());
        }
    }
}
