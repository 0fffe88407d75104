//! Named contexts (issue 11): conversations whose KV state outlives requests. The registry
//! holds each context's facts and its tokens (the truth: the KV state in a model's sequence is
//! a cache of them, rebuilt from them when it is gone); the model worker holds the KV state and
//! updates a record when a commit ends.
//!
//! Key types: [`ContextRegistry`] (every context, by id), [`ContextRecord`] (one context),
//! [`ContextUse`] (what a job carries into the worker), [`ContextMode`].
//! Cost: one record per context (its token ids and messages); lookups are a map access under
//! one mutex, never held across a model call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::core::{ChatMessage, KeepAlive, ToolSpec};
use crate::error::{CoreError, ErrorCode};

/// How long an unused context lives when its creator names no `keep_alive`.
pub const DEFAULT_CONTEXT_KEEP_ALIVE: Duration = Duration::from_secs(30 * 60);

/// Most children one fork makes.
pub const MAX_FORK: usize = 64;

/// Where a context's KV state is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// In a KV sequence of its loaded model.
    Hot,
    /// Sequence state copied to memory, sequence freed.
    Parked,
    /// Sequence state on disk in the store.
    Stored,
    /// Only its tokens: the next use prefills them (the model was unloaded or its sequence
    /// was needed by others).
    Cold,
}

impl Residence {
    pub fn as_str(self) -> &'static str {
        match self {
            Residence::Hot => "hot",
            Residence::Parked => "parked",
            Residence::Stored => "stored",
            Residence::Cold => "cold",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            0 => Residence::Hot,
            1 => Residence::Parked,
            2 => Residence::Stored,
            _ => Residence::Cold,
        }
    }
}

/// What a context is made of: a conversation (rendered through the chat template) or raw text.
#[derive(Debug, Clone, PartialEq)]
pub enum ContextContent {
    Chat {
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
    },
    Raw,
}

/// The parts of a context that commits change.
#[derive(Debug, Clone)]
pub struct ContextBody {
    pub content: ContextContent,
    /// The tokens whose KV state the context stands for, position 0 first.
    pub tokens: Arc<Vec<u32>>,
}

/// One context.
#[derive(Debug)]
pub struct ContextRecord {
    /// The worker's key for the sequence it holds (ids are strings on the wire).
    pub key: u64,
    pub id: String,
    pub model: String,
    pub parent: Option<String>,
    pub created: DateTime<Utc>,
    /// `None`: until deleted.
    pub keep_alive: Option<Duration>,
    body: Mutex<ContextBody>,
    last_used: Mutex<Instant>,
    committing: AtomicBool,
    residence: AtomicU8,
}

impl ContextRecord {
    pub fn body(&self) -> ContextBody {
        self.lock_body().clone()
    }

    fn lock_body(&self) -> MutexGuard<'_, ContextBody> {
        self.body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn tokens(&self) -> Arc<Vec<u32>> {
        Arc::clone(&self.lock_body().tokens)
    }

    /// A commit ended: the context now stands for `tokens`, and a chat context's conversation
    /// gained `appended` and the answer.
    pub fn commit(&self, tokens: Vec<u32>, appended: &[ChatMessage], answer: Option<&str>) {
        let mut body = self.lock_body();
        body.tokens = Arc::new(tokens);
        if let ContextContent::Chat { messages, .. } = &mut body.content {
            messages.extend_from_slice(appended);
            if let Some(answer) = answer {
                messages.push(ChatMessage::new(crate::core::Role::Assistant, answer));
            }
        }
    }

    pub fn touch(&self) {
        *self
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// When it expires if nobody uses it; `None` = kept until deleted.
    pub fn expires_at(&self) -> Option<DateTime<Utc>> {
        let idle = self
            .last_used
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let left = self.keep_alive?.saturating_sub(idle);
        chrono::Duration::from_std(left)
            .ok()
            .map(|d| Utc::now() + d)
    }

    fn expired(&self) -> bool {
        let idle = self
            .last_used
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        self.keep_alive.is_some_and(|keep| idle > keep) && !self.committing.load(Ordering::Acquire)
    }

    /// Starts a commit; `false` when one already runs.
    pub fn begin_commit(&self) -> bool {
        self.committing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn end_commit(&self) {
        self.committing.store(false, Ordering::Release);
    }

    pub fn residence(&self) -> Residence {
        Residence::from_u8(self.residence.load(Ordering::Acquire))
    }

    pub fn set_residence(&self, residence: Residence) {
        self.residence.store(residence as u8, Ordering::Release);
    }
}

/// What a job does with its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextMode {
    /// Work on a copy; the context stays as it was.
    Read,
    /// Append the request and its answer to the context.
    Commit,
    /// Prefill the context's first tokens (creation); nothing is sampled.
    Create,
}

/// A context as a job carries it into the worker.
#[derive(Debug, Clone)]
pub struct ContextUse {
    pub record: Arc<ContextRecord>,
    pub mode: ContextMode,
    /// The request's own messages, appended on commit.
    pub appended: Vec<ChatMessage>,
}

/// Every context, by id.
#[derive(Debug, Default)]
pub struct ContextRegistry {
    contexts: Mutex<HashMap<String, Arc<ContextRecord>>>,
    next_key: AtomicU64,
}

impl ContextRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<ContextRecord>>> {
        self.contexts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new record (not yet registered: [`ContextRegistry::insert`] does that once its
    /// prefill succeeded).
    pub fn new_record(
        &self,
        model: &str,
        content: ContextContent,
        tokens: Arc<Vec<u32>>,
        keep_alive: Option<KeepAlive>,
        parent: Option<String>,
    ) -> Arc<ContextRecord> {
        let keep_alive = match keep_alive {
            None => Some(DEFAULT_CONTEXT_KEEP_ALIVE),
            Some(KeepAlive::Forever) => None,
            Some(KeepAlive::UnloadNow) => Some(Duration::ZERO),
            Some(KeepAlive::For(duration)) => Some(duration),
        };
        Arc::new(ContextRecord {
            key: self.next_key.fetch_add(1, Ordering::Relaxed) + 1,
            id: format!("ctx_{}", random_hex(24)),
            model: model.to_string(),
            parent,
            created: Utc::now(),
            keep_alive,
            body: Mutex::new(ContextBody { content, tokens }),
            last_used: Mutex::new(Instant::now()),
            committing: AtomicBool::new(false),
            residence: AtomicU8::new(Residence::Cold as u8),
        })
    }

    pub fn insert(&self, record: Arc<ContextRecord>) {
        self.lock().insert(record.id.clone(), record);
    }

    /// The context `id`, 404 when there is none (or it expired).
    pub fn get(&self, id: &str) -> Result<Arc<ContextRecord>, CoreError> {
        self.expire();
        self.lock().get(id).cloned().ok_or_else(|| {
            CoreError::new(
                ErrorCode::ContextNotFound,
                format!("no context {id:?}; POST /v1/contexts makes one"),
            )
        })
    }

    pub fn remove(&self, id: &str) -> Result<Arc<ContextRecord>, CoreError> {
        self.lock()
            .remove(id)
            .ok_or_else(|| CoreError::new(ErrorCode::ContextNotFound, format!("no context {id:?}")))
    }

    /// Every live context, oldest first.
    pub fn list(&self) -> Vec<Arc<ContextRecord>> {
        self.expire();
        let mut all: Vec<_> = self.lock().values().cloned().collect();
        all.sort_by_key(|r| (r.created, r.key));
        all
    }

    /// `n` children of `parent`: the same tokens and conversation, no prefill (a child's
    /// first request copies the parent's KV sequence).
    pub fn fork(
        &self,
        parent: &ContextRecord,
        n: usize,
    ) -> Result<Vec<Arc<ContextRecord>>, CoreError> {
        if n == 0 || n > MAX_FORK {
            return Err(CoreError::invalid(format!(
                "n is {n}; fork makes between 1 and {MAX_FORK} children"
            ))
            .with_param("n"));
        }
        let body = parent.body();
        let keep_alive = parent.keep_alive.map_or(KeepAlive::Forever, KeepAlive::For);
        let children: Vec<_> = (0..n)
            .map(|_| {
                let child = self.new_record(
                    &parent.model,
                    body.content.clone(),
                    Arc::clone(&body.tokens),
                    Some(keep_alive),
                    Some(parent.id.clone()),
                );
                child.set_residence(parent.residence());
                child
            })
            .collect();
        let mut map = self.lock();
        for child in &children {
            map.insert(child.id.clone(), Arc::clone(child));
        }
        Ok(children)
    }

    /// Drops contexts unused for longer than their keep_alive.
    pub fn expire(&self) {
        self.lock().retain(|_, record| !record.expired());
    }

    /// Contexts per residence, for `/v1/stats`.
    pub fn counts(&self) -> HashMap<&'static str, usize> {
        let mut counts = HashMap::new();
        for record in self.list() {
            *counts.entry(record.residence().as_str()).or_insert(0) += 1;
        }
        counts
    }
}

fn random_hex(length: usize) -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..length)
        .map(|_| char::from(b"0123456789abcdef"[rng.gen_range(0..16)]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_share_tokens_and_outlive_their_parent() {
        let registry = ContextRegistry::new();
        let parent = registry.new_record(
            "m",
            ContextContent::Raw,
            Arc::new(vec![1, 2, 3]),
            None,
            None,
        );
        registry.insert(Arc::clone(&parent));
        let children = registry.fork(&parent, 3).unwrap();
        assert_eq!(children.len(), 3);
        registry.remove(&parent.id).unwrap();
        for child in &children {
            let found = registry.get(&child.id).unwrap();
            assert_eq!(*found.tokens(), vec![1, 2, 3]);
            assert_eq!(found.parent.as_deref(), Some(parent.id.as_str()));
        }
        assert_eq!(
            registry.get(&parent.id).unwrap_err().code,
            ErrorCode::ContextNotFound
        );
    }

    #[test]
    fn fork_counts_outside_one_to_sixty_four_are_refused() {
        let registry = ContextRegistry::new();
        let parent = registry.new_record("m", ContextContent::Raw, Arc::new(vec![1]), None, None);
        assert_eq!(registry.fork(&parent, 0).unwrap_err().status(), 400);
        assert_eq!(registry.fork(&parent, 65).unwrap_err().status(), 400);
        assert_eq!(registry.fork(&parent, 64).unwrap().len(), 64);
    }

    #[test]
    fn one_commit_at_a_time_and_zero_keep_alive_expires() {
        let registry = ContextRegistry::new();
        let record = registry.new_record(
            "m",
            ContextContent::Raw,
            Arc::new(vec![]),
            Some(KeepAlive::UnloadNow),
            None,
        );
        registry.insert(Arc::clone(&record));
        assert!(record.begin_commit());
        assert!(!record.begin_commit());
        // A committing context is never expired under its request.
        std::thread::sleep(Duration::from_millis(2));
        assert!(registry.get(&record.id).is_ok());
        record.end_commit();
        assert!(registry.get(&record.id).is_err());
    }
}
