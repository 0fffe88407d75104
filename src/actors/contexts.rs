//! Named contexts (issue 11): conversations whose KV state outlives requests. The registry
//! holds each context's facts and its tokens (the truth: the KV state in a model's sequence is
//! a cache of them, rebuilt from them when it is gone); the model worker holds the KV state and
//! updates a record when a commit ends.
//!
//! When a model needs a context's sequence for other work, the worker parks the context: its
//! sequence state is copied into the record (memory), and the next use writes it back instead
//! of prefilling. Parked state lives in the record, not the worker, so it survives the model
//! being evicted and reloaded. [`ParkingLot`] bounds the memory all parked states take
//! (`-context-memory`); past it, the least recently used parked states move to files in the
//! store's `parked/` directory (`stored`), or, without a writable store, are dropped (`cold`:
//! the tokens remain, so the context still works, at the price of a prefill). Contexts live as
//! long as their keep_alive says, wherever their state is.
//!
//! Key types: [`ContextRegistry`] (every context, by id), [`ContextRecord`] (one context),
//! [`ContextUse`] (what a job carries into the worker), [`ContextMode`], [`ParkingLot`].
//! Cost: one record per context (its token ids and messages, plus its parked state when
//! parked: a few hundred KB to MBs per thousand tokens); lookups are a map access under one
//! mutex, never held across a model call.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::core::{ChatMessage, KeepAlive, ToolSpec};
use crate::error::{CoreError, ErrorCode};

/// How long an unused context lives when its creator names no `keep_alive`.
pub const DEFAULT_CONTEXT_KEEP_ALIVE: Duration = Duration::from_secs(30 * 60);

/// Memory parked contexts may take when the operator names no `-context-memory`.
pub const DEFAULT_CONTEXT_MEMORY: u64 = 2 << 30;

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

/// A parked context's sequence state: the KV of its first `covers` tokens.
#[derive(Debug, Clone)]
pub struct ParkedState {
    pub bytes: Arc<Vec<u8>>,
    pub covers: usize,
}

/// Where parked state is kept.
#[derive(Debug)]
enum Held {
    Memory(Arc<Vec<u8>>),
    /// Spilled to a file under the store's `parked/` directory.
    Disk(PathBuf),
}

#[derive(Debug)]
struct Parked {
    held: Held,
    covers: usize,
}

/// The memory parked states take, bounded: parking past the bound moves the state of the least
/// recently used parked contexts to disk (the store's `parked/` directory; they are then
/// `stored`), or, without a writable store, drops it (they go cold).
#[derive(Debug)]
pub struct ParkingLot {
    limit: AtomicU64,
    used: AtomicU64,
    parked: Mutex<Vec<std::sync::Weak<ContextRecord>>>,
    spill: Mutex<Option<PathBuf>>,
    spilled: AtomicU64,
}

impl ParkingLot {
    fn new(limit: u64) -> Self {
        ParkingLot {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(0),
            parked: Mutex::new(Vec::new()),
            spill: Mutex::new(None),
            spilled: AtomicU64::new(0),
        }
    }

    /// Bytes of parked state held in memory now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Parked states moved to disk so far.
    pub fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::Acquire)
    }

    fn spill_dir(&self) -> Option<PathBuf> {
        self.spill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Registers `record` as parked in memory and, while over the bound, moves the least
    /// recently used memory states out.
    fn admit(&self, record: &Arc<ContextRecord>) {
        let mut parked = self
            .parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        parked.retain(|weak| weak.upgrade().is_some_and(|r| r.parked_in_memory()));
        parked.push(Arc::downgrade(record));
        while self.used() > self.limit() {
            let oldest = parked
                .iter()
                .enumerate()
                .filter_map(|(i, weak)| weak.upgrade().map(|r| (i, r)))
                .min_by_key(|(_, r)| r.last_used());
            let Some((index, record)) = oldest else { break };
            parked.swap_remove(index);
            let spilled = self
                .spill_dir()
                .is_some_and(|dir| record.spill_to(&dir));
            if spilled {
                self.spilled.fetch_add(1, Ordering::AcqRel);
            } else {
                record.drop_parked();
                record.set_residence(Residence::Cold);
            }
        }
    }
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
    parked: Mutex<Option<Parked>>,
    lot: Arc<ParkingLot>,
}

impl Drop for ContextRecord {
    fn drop(&mut self) {
        self.drop_parked();
    }
}

impl ContextRecord {
    fn lock_parked(&self) -> MutexGuard<'_, Option<Parked>> {
        self.parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The context's parked sequence state, if it has one (read back from disk when stored;
    /// a stored file that cannot be read counts as none).
    pub fn parked_state(&self) -> Option<ParkedState> {
        let parked = self.lock_parked();
        let parked = parked.as_ref()?;
        let bytes = match &parked.held {
            Held::Memory(bytes) => Arc::clone(bytes),
            Held::Disk(path) => Arc::new(std::fs::read(path).ok()?),
        };
        Some(ParkedState {
            bytes,
            covers: parked.covers,
        })
    }

    fn parked_in_memory(&self) -> bool {
        matches!(
            self.lock_parked().as_ref().map(|p| &p.held),
            Some(Held::Memory(_))
        )
    }

    /// Keeps `bytes` (the KV of the first `covers` tokens) in memory as this context's parked
    /// state.
    pub fn park(self: &Arc<Self>, bytes: Arc<Vec<u8>>, covers: usize) {
        let size = bytes.len() as u64;
        let previous = self.lock_parked().replace(Parked {
            held: Held::Memory(bytes),
            covers,
        });
        self.release(previous);
        self.lot.used.fetch_add(size, Ordering::AcqRel);
        self.set_residence(Residence::Parked);
        self.lot.admit(self);
    }

    /// Moves a memory state to a file in `dir`; `false` (and nothing changed) when it cannot.
    fn spill_to(&self, dir: &std::path::Path) -> bool {
        let mut parked = self.lock_parked();
        let Some(Parked {
            held: Held::Memory(bytes),
            covers,
        }) = parked.as_ref()
        else {
            return false;
        };
        let path = dir.join(format!("{}.kv", self.id));
        if std::fs::write(&path, bytes.as_slice()).is_err() {
            let _ = std::fs::remove_file(&path);
            return false;
        }
        let size = bytes.len() as u64;
        let covers = *covers;
        *parked = Some(Parked {
            held: Held::Disk(path),
            covers,
        });
        self.lot.used.fetch_sub(size, Ordering::AcqRel);
        self.set_residence(Residence::Stored);
        true
    }

    /// Gives back what a previous parked state held (memory or its file).
    fn release(&self, previous: Option<Parked>) {
        match previous.map(|p| p.held) {
            Some(Held::Memory(bytes)) => {
                self.lot
                    .used
                    .fetch_sub(bytes.len() as u64, Ordering::AcqRel);
            }
            Some(Held::Disk(path)) => {
                let _ = std::fs::remove_file(path);
            }
            None => {}
        }
    }

    /// Forgets the parked state (the context is back in a sequence, changed, or expired).
    pub fn drop_parked(&self) {
        let previous = self.lock_parked().take();
        self.release(previous);
    }

    fn last_used(&self) -> Instant {
        *self
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
        // Parked state stands for the old tokens.
        self.drop_parked();
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
#[derive(Debug)]
pub struct ContextRegistry {
    contexts: Mutex<HashMap<String, Arc<ContextRecord>>>,
    next_key: AtomicU64,
    lot: Arc<ParkingLot>,
    /// Put in every context id (`ctx_<daemon>_<hex>`), so a proxy in front of several daemons
    /// can send a context's requests to the daemon that holds it.
    daemon_id: Mutex<String>,
}

impl Default for ContextRegistry {
    fn default() -> Self {
        ContextRegistry {
            contexts: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(0),
            lot: Arc::new(ParkingLot::new(DEFAULT_CONTEXT_MEMORY)),
            daemon_id: Mutex::new(random_hex(12)),
        }
    }
}

impl ContextRegistry {
    /// A registry whose ids carry a daemon id drawn now (see [`ContextRegistry::set_daemon_id`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids made from now on carry `id` (the store's, so it is stable across restarts).
    pub fn set_daemon_id(&self, id: &str) {
        *self
            .daemon_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = id.to_string();
    }

    pub fn daemon_id(&self) -> String {
        self.daemon_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Bounds the memory parked contexts take (`-context-memory`).
    pub fn set_memory_limit(&self, bytes: u64) {
        self.lot.limit.store(bytes, Ordering::Release);
    }

    /// Parked states past the memory bound go to files in `dir` (the store's `parked/`,
    /// emptied here: parked state does not outlive the daemon; snapshots do).
    pub fn set_spill_dir(&self, dir: PathBuf) -> std::io::Result<()> {
        if dir.is_dir() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        *self
            .lot
            .spill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir);
        Ok(())
    }

    pub fn parking(&self) -> &ParkingLot {
        &self.lot
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
            id: format!("ctx_{}_{}", self.daemon_id(), random_hex(24)),
            model: model.to_string(),
            parent,
            created: Utc::now(),
            keep_alive,
            body: Mutex::new(ContextBody { content, tokens }),
            last_used: Mutex::new(Instant::now()),
            committing: AtomicBool::new(false),
            residence: AtomicU8::new(Residence::Cold as u8),
            parked: Mutex::new(None),
            lot: Arc::clone(&self.lot),
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
                // A parked parent's state is shared, but counted once per child: the bound
                // errs on the side of parking less.
                match parent.parked_state() {
                    Some(state) => child.park(state.bytes, state.covers),
                    None => child.set_residence(match parent.residence() {
                        Residence::Parked => Residence::Cold,
                        other => other,
                    }),
                }
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

/// `length` random lowercase hex digits, for context and snapshot ids.
pub(crate) fn random_hex(length: usize) -> String {
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
    fn parked_state_past_the_memory_bound_goes_to_disk_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let registry = ContextRegistry::new();
        registry.set_memory_limit(2500);
        let records: Vec<_> = (0..3)
            .map(|i| {
                let record =
                    registry.new_record("m", ContextContent::Raw, Arc::new(vec![i]), None, None);
                registry.insert(Arc::clone(&record));
                std::thread::sleep(Duration::from_millis(2));
                record
            })
            .collect();
        // Without a spill directory the oldest state is dropped.
        records[0].park(Arc::new(vec![0; 1000]), 1);
        records[1].park(Arc::new(vec![1; 1000]), 1);
        records[0].touch();
        records[2].park(Arc::new(vec![2; 1000]), 1);
        assert_eq!(records[1].residence(), Residence::Cold, "least recently used");
        assert!(records[1].parked_state().is_none());
        assert_eq!(registry.parking().used(), 2000);

        registry.set_spill_dir(dir.path().join("parked")).unwrap();
        records[1].touch();
        records[1].park(Arc::new(vec![1; 1000]), 1);
        assert_eq!(records[2].residence(), Residence::Stored);
        assert_eq!(registry.parking().used(), 2000);
        assert_eq!(*records[2].parked_state().unwrap().bytes, vec![2; 1000]);
        let file = dir.path().join("parked").join(format!("{}.kv", records[2].id));
        assert!(file.exists());
        for record in &records {
            registry.remove(&record.id).unwrap();
        }
        drop(records);
        assert!(!file.exists(), "a deleted context's file goes with it");
        assert_eq!(registry.parking().used(), 0);
    }

    #[test]
    fn ids_carry_the_daemon_id() {
        let registry = ContextRegistry::new();
        registry.set_daemon_id("replica7");
        let record = registry.new_record("m", ContextContent::Raw, Arc::new(vec![]), None, None);
        assert!(record.id.starts_with("ctx_replica7_"), "{}", record.id);
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
