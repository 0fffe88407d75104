//! Small JSON requests over a blocking client, for tests and benches that talk to a running
//! server (llamay or llama-server): the status and the JSON body of an answer, or the body of a
//! success with an error that names the request otherwise.
//!
//! Key items: [`client`], [`call`], [`post`], [`get`], [`delete`], [`post_ok`]. Cost: one
//! request each; a shared [`client`] keeps connections open between requests.

use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::Value;

/// How long a request may take: long enough for a slow generation on a busy machine, and a
/// bound on a test whose server stopped answering.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// A client whose requests give up after [`TIMEOUT`].
pub fn client() -> Client {
    Client::builder()
        .timeout(TIMEOUT)
        .build()
        .expect("an HTTP client")
}

/// The status of `method url` with `body` as JSON, and its body as JSON (`Null` when the body
/// is not JSON). Panics when no answer comes.
pub fn call(client: &Client, method: Method, url: &str, body: Option<&Value>) -> (u16, Value) {
    let mut request = client.request(method.clone(), url);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .unwrap_or_else(|e| panic!("{method} {url}: no answer: {e}"));
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

pub fn post(client: &Client, url: &str, body: &Value) -> (u16, Value) {
    call(client, Method::POST, url, Some(body))
}

pub fn get(client: &Client, url: &str) -> (u16, Value) {
    call(client, Method::GET, url, None)
}

pub fn delete(client: &Client, url: &str) -> (u16, Value) {
    call(client, Method::DELETE, url, None)
}

/// The JSON body of a successful `POST url`, or an error naming the request, its status and
/// what came back.
pub fn post_ok(client: &Client, url: &str, body: &Value) -> Result<Value, String> {
    let response = client
        .post(url)
        .json(body)
        .send()
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = response.status();
    let text = response.text().unwrap_or_default();
    if !status.is_success() {
        return Err(format!("POST {url} answered {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("POST {url}: not JSON ({e}): {text}"))
}
