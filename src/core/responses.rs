//! Stored responses (OpenAI's `/v1/responses` with `store: true`, issue 61): what the daemon
//! keeps of an answer so that `previous_response_id` continues its conversation and
//! `GET /v1/responses/{id}` returns it. The model store keeps them behind [`ResponseStore`], so
//! the API reaches them without importing sled, as it reaches the catalog.
//!
//! Key types: [`StoredResponse`], [`ResponseStore`]; [`new_response_id`] makes ids whose order
//! is the order of creation, which is how the store finds its oldest entries. Every store
//! method blocks on sled: a read or an insert takes microseconds, a flush milliseconds.

use serde::{Deserialize, Serialize};

use super::request::ChatMessage;
use crate::error::CoreError;

/// Prefix of every response id.
pub const RESPONSE_ID_PREFIX: &str = "resp_";

/// One stored response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResponse {
    /// `resp_…` (see [`new_response_id`]).
    pub id: String,
    /// Hex SHA-256 of the API key that created it; `None` when the daemon had no key. Only a
    /// request bearing the same key sees it.
    pub owner: Option<String>,
    /// The response object as it was answered.
    pub response: serde_json::Value,
    /// The request's input items, each with its id, as `GET …/input_items` lists them.
    pub input_items: Vec<serde_json::Value>,
    /// The conversation up to and including the answer, without the request's instructions
    /// (a continuation brings its own, as OpenAI's does).
    pub conversation: Vec<ChatMessage>,
}

/// Where stored responses live: the model store's `responses` tree, bounded by count and age.
pub trait ResponseStore: Send + Sync {
    /// Keeps `response`, visible at once, dropping the oldest entries past the store's bounds;
    /// on disk after the next [`flush`](Self::flush).
    fn put(&self, response: &StoredResponse) -> Result<(), CoreError>;
    /// The response `id`, unless it is unknown, deleted or past the age bound.
    fn get(&self, id: &str) -> Result<Option<StoredResponse>, CoreError>;
    /// Removes `id`; whether it was there.
    fn delete(&self, id: &str) -> Result<bool, CoreError>;
    /// Writes what changed to disk (an fsync: milliseconds).
    fn flush(&self) -> Result<(), CoreError>;
}

/// A fresh id: the prefix, the creation time in microseconds as 16 hex digits (so ids sort by
/// age), and 64 random bits (so ids cannot be guessed).
pub fn new_response_id(created_micros: u64) -> String {
    format!("{RESPONSE_ID_PREFIX}{created_micros:016x}{:016x}", rand::random::<u64>())
}

/// The creation time an id carries, in microseconds; `None` for an id not made by
/// [`new_response_id`].
pub fn response_id_micros(id: &[u8]) -> Option<u64> {
    let digits = id.strip_prefix(RESPONSE_ID_PREFIX.as_bytes())?.get(..16)?;
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_time_and_sort_by_it() {
        let older = new_response_id(1_000);
        let newer = new_response_id(2_000);
        assert!(older < newer, "{older} {newer}");
        assert_eq!(response_id_micros(older.as_bytes()), Some(1_000));
        assert_eq!(response_id_micros(b"resp_xyz"), None);
        assert_eq!(response_id_micros(b"msg_0000000000000001"), None);
        assert_ne!(new_response_id(1), new_response_id(1));
    }
}
