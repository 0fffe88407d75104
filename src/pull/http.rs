//! The HTTP side of pulls: one blocking reqwest client (rustls, no system TLS library) and the
//! retry policy every request shares: 5xx answers and failed connections are retried with
//! exponential backoff; 404, 401 and 403 are answered at once with an error naming the model.
//!
//! Key types: [`Http`], [`Backoff`]. Cost: one connection pool per pull.

use std::io::Read;
use std::time::Duration;

use reqwest::blocking::{Client, Response};
use reqwest::StatusCode;

use super::PullError;

/// Attempts per request before a transient failure becomes the pull's error.
pub const MAX_ATTEMPTS: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A shared blocking client.
#[derive(Clone)]
pub struct Http {
    client: Client,
}

impl Http {
    pub fn new() -> Result<Http, PullError> {
        let client = Client::builder()
            .connect_timeout(Duration::from_secs(15))
            // A whole blob may take hours: no overall deadline.
            .timeout(None)
            .user_agent(concat!("llamay/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PullError::Network {
                url: String::new(),
                reason: e.to_string(),
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
            .map_err(|e| PullError::Network {
                url: url.to_string(),
                reason: e.to_string(),
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
    Retry(String),
    Fail(PullError),
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
        429 | 500..=599 => StatusVerdict::Retry(format!("the registry answered {status}")),
        _ => StatusVerdict::Fail(PullError::Network {
            url: url.to_string(),
            reason: format!("the registry answered {status}"),
        }),
    }
}

/// GET `url` with `headers`, retrying 5xx and failed connections.
pub fn get_with_retries(
    http: &Http,
    url: &str,
    headers: &[(&str, &str)],
    not_found: impl Fn() -> PullError,
) -> Result<Response, PullError> {
    let mut backoff = Backoff::new();
    loop {
        let mut request = http.client.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let reason = match request.send() {
            Ok(response) => match judge(response.status(), url, &not_found) {
                StatusVerdict::Ok => return Ok(response),
                StatusVerdict::Fail(error) => return Err(error),
                StatusVerdict::Retry(reason) => reason,
            },
            Err(error) => error.to_string(),
        };
        if !backoff.wait() {
            return Err(PullError::Network {
                url: url.to_string(),
                reason: format!("{reason} (gave up after {MAX_ATTEMPTS} attempts)"),
            });
        }
    }
}
