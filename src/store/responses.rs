//! Stored `/v1/responses` answers (issue 61) in the sled tree `responses` (migration v0003),
//! keyed by response id, the value a [`StoredResponse`] as JSON. Ids begin with their creation
//! time (`core::new_response_id`), so the tree's first key is its oldest entry: keeping the
//! operator's bounds (a count and an age) drops entries from the front.
//!
//! A daemon whose store another process holds (read-only) keeps its responses in a temporary
//! sled database instead ([`ResponseTree::temporary`]): the same behaviour, gone at exit.
//!
//! Key types: [`ResponseTree`] (implements `core::ResponseStore`), [`ResponseLimits`].
//! Costs: a put is one insert plus removals of what falls past the bounds (the caller flushes,
//! off the HTTP workers); a get is one read.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Store, StoreError};
use crate::core::responses::response_id_micros;
use crate::core::{CoreError, ResponseStore, StoredResponse};
pub use llamay_migrations::RESPONSES_TREE;

/// How many responses are kept, and for how long (config `max_stored_responses`,
/// `stored_responses_max_age`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseLimits {
    pub max_count: usize,
    pub max_age: Duration,
}

pub struct ResponseTree {
    tree: sled::Tree,
    limits: ResponseLimits,
    /// Entries in the tree (sled counts by scanning); the lock also orders puts and pruning.
    count: Mutex<usize>,
    /// Keeps a temporary database open as long as its tree is used.
    _temporary: Option<Arc<sled::Db>>,
}

impl std::fmt::Debug for ResponseTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseTree").field("limits", &self.limits).finish_non_exhaustive()
    }
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn store_failure(what: &str) -> impl Fn(sled::Error) -> CoreError + '_ {
    move |error| CoreError::internal(format!("the response store could not {what}: {error}"))
}

impl ResponseTree {
    /// The `responses` tree of a writable `store`.
    pub fn in_store(store: &Store, limits: ResponseLimits) -> Result<Self, StoreError> {
        let tree = store.writable()?.db.open_tree(RESPONSES_TREE).map_err(StoreError::db("open the responses tree"))?;
        Ok(Self::over(tree, limits, None))
    }

    /// A tree in a temporary database, removed when the daemon exits.
    pub fn temporary(limits: ResponseLimits) -> Result<Self, StoreError> {
        let db = sled::Config::new().temporary(true).open().map_err(StoreError::db("open a temporary database"))?;
        let tree = db.open_tree(RESPONSES_TREE).map_err(StoreError::db("open the responses tree"))?;
        Ok(Self::over(tree, limits, Some(Arc::new(db))))
    }

    fn over(tree: sled::Tree, limits: ResponseLimits, temporary: Option<Arc<sled::Db>>) -> Self {
        let count = tree.len();
        let responses = ResponseTree { tree, limits, count: Mutex::new(count), _temporary: temporary };
        if let Ok(mut count) = responses.count.lock() {
            responses.prune(&mut count, now_micros());
        }
        responses
    }

    fn expired(&self, key: &[u8], now: u64) -> bool {
        let age = u64::try_from(self.limits.max_age.as_micros()).unwrap_or(u64::MAX);
        response_id_micros(key).is_none_or(|created| now.saturating_sub(created) > age)
    }

    /// Drops the oldest entries while there are too many or they are too old.
    fn prune(&self, count: &mut usize, now: u64) {
        while let Ok(Some((key, _))) = self.tree.first() {
            if *count <= self.limits.max_count && !self.expired(&key, now) {
                break;
            }
            match self.tree.remove(&key) {
                Ok(Some(_)) => *count = count.saturating_sub(1),
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, "could not drop an old stored response");
                    break;
                }
            }
        }
    }
}

impl ResponseStore for ResponseTree {
    fn put(&self, response: &StoredResponse) -> Result<(), CoreError> {
        let bytes = serde_json::to_vec(response)
            .map_err(|e| CoreError::internal(format!("a response could not be stored: {e}")))?;
        let mut count = self.count.lock().map_err(|_| CoreError::internal("the response store's lock is poisoned"))?;
        if self.tree.insert(response.id.as_bytes(), bytes).map_err(store_failure("keep a response"))?.is_none() {
            *count += 1;
        }
        self.prune(&mut count, now_micros());
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<StoredResponse>, CoreError> {
        if self.expired(id.as_bytes(), now_micros()) {
            return Ok(None);
        }
        let Some(bytes) = self.tree.get(id.as_bytes()).map_err(store_failure("read a response"))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CoreError::internal(format!("stored response {id} cannot be read: {e}")))
    }

    fn delete(&self, id: &str) -> Result<bool, CoreError> {
        let mut count = self.count.lock().map_err(|_| CoreError::internal("the response store's lock is poisoned"))?;
        let removed = self.tree.remove(id.as_bytes()).map_err(store_failure("delete a response"))?.is_some();
        if removed {
            *count = count.saturating_sub(1);
        }
        Ok(removed)
    }

    fn flush(&self) -> Result<(), CoreError> {
        self.tree.flush().map(drop).map_err(store_failure("write responses to disk"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{new_response_id, ChatMessage, Role};

    fn response(id: String) -> StoredResponse {
        StoredResponse {
            id,
            owner: None,
            response: serde_json::json!({"object": "response"}),
            input_items: Vec::new(),
            conversation: vec![ChatMessage::new(Role::User, "hi")],
        }
    }

    fn limits(max_count: usize, max_age: Duration) -> ResponseLimits {
        ResponseLimits { max_count, max_age }
    }

    #[test]
    fn keeps_at_most_the_count_dropping_the_oldest() {
        let tree = ResponseTree::temporary(limits(2, Duration::from_secs(3600))).expect("tree");
        let now = now_micros();
        let ids: Vec<String> = (0..3).map(|i| new_response_id(now + i)).collect();
        for id in &ids {
            tree.put(&response(id.clone())).expect("put");
        }
        assert_eq!(tree.get(&ids[0]).expect("get"), None);
        assert_eq!(tree.get(&ids[2]).expect("get").map(|r| r.conversation), Some(vec![ChatMessage::new(Role::User, "hi")]));
        assert!(tree.delete(&ids[1]).expect("delete"));
        assert!(!tree.delete(&ids[1]).expect("delete again"));
        assert_eq!(tree.get(&ids[1]).expect("get"), None);
    }

    #[test]
    fn an_entry_past_the_age_is_gone() {
        let tree = ResponseTree::temporary(limits(10, Duration::from_secs(60))).expect("tree");
        let old = new_response_id(now_micros() - 120_000_000);
        tree.put(&response(old.clone())).expect("put");
        assert_eq!(tree.get(&old).expect("get"), None);
        let fresh = new_response_id(now_micros());
        tree.put(&response(fresh.clone())).expect("put");
        assert!(tree.get(&fresh).expect("get").is_some());
        assert_eq!(tree.get("resp_not-an-id").expect("get"), None);
    }

    #[test]
    fn responses_outlive_the_store_being_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = new_response_id(now_micros());
        {
            let store = Store::open(dir.path()).expect("open");
            let tree = ResponseTree::in_store(&store, limits(10, Duration::from_secs(60))).expect("tree");
            tree.put(&response(id.clone())).expect("put");
            tree.flush().expect("flush");
        }
        let store = Store::open(dir.path()).expect("open again");
        let tree = ResponseTree::in_store(&store, limits(10, Duration::from_secs(60))).expect("tree");
        assert_eq!(tree.get(&id).expect("get").map(|r| r.id), Some(id));
    }
}
