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
//! The registry holds at most `max_contexts` contexts ([`DEFAULT_MAX_CONTEXTS`]); creating or
//! forking past that is refused with 503 (`Retry-After`) until some are deleted or expire. That count bounds
//! the registry's memory too: a record's tokens and conversation fit its model's context.
//!
//! Snapshots (`snapshots.rs`, [`snapshots::SnapshotShelf`]) keep a context's KV state in the
//! model store, to restore it as a new context in this daemon or another.
//!
//! Key types: [`ContextRegistry`] (every context, by id; `registry.rs`), [`ContextLimits`] (how
//! much it holds), [`ContextRecord`] (one context), [`ContextUse`] (what a job carries into the
//! worker), [`ContextMode`], [`ParkingLot`] (`parking.rs`). Cost: one record per context (its token
//! ids and messages, plus its parked state when parked: a few hundred KB to MBs per thousand
//! tokens); every operation on one context is O(1) in the number of contexts (a sharded map, counts
//! kept as they change), listing a page is O(log n + page).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::core::{ChatMessage, PromptInput, ToolSpec};

mod parking;
mod registry;
pub mod snapshots;

pub use parking::ParkingLot;
pub use registry::{ContextPage, ContextRegistry, ResidenceCounts, MAX_PAGE};

/// How long an unused context lives when its creator names no `keep_alive`.
pub const DEFAULT_CONTEXT_KEEP_ALIVE: Duration = Duration::from_secs(30 * 60);

/// Memory parked contexts may take when the operator names no `-context-memory`.
pub const DEFAULT_CONTEXT_MEMORY: u64 = 2 << 30;

/// Contexts held at once when the operator names no `max_contexts`.
pub const DEFAULT_MAX_CONTEXTS: usize = 4096;

/// What the registry may hold: the room's own defaults, which the daemon overrides with the
/// operator's `context_memory` and `max_contexts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimits {
    /// Bytes of parked context state kept in memory; past it, states go to the store or are dropped.
    pub memory: u64,
    /// Named contexts held at once; creating more is refused with 503.
    pub max_contexts: usize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        ContextLimits { memory: DEFAULT_CONTEXT_MEMORY, max_contexts: DEFAULT_MAX_CONTEXTS }
    }
}

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

    const ALL: [Residence; 4] = [Residence::Hot, Residence::Parked, Residence::Stored, Residence::Cold];
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
    standing: Mutex<Standing>,
    parked: Mutex<Option<Parked>>,
    lot: Arc<ParkingLot>,
    census: Arc<Census>,
}

/// A record's residence and whether the registry lists it, changed together so that the
/// registry's counts per residence move with them.
#[derive(Debug, Clone, Copy)]
struct Standing {
    residence: Residence,
    listed: bool,
}

/// How many listed contexts are in each residence, kept as records change (never counted by
/// a scan), and how many are listed at all.
#[derive(Debug, Default)]
struct Census {
    by_residence: [AtomicUsize; 4],
    listed: AtomicUsize,
}

impl Census {
    fn slot(&self, residence: Residence) -> &AtomicUsize {
        &self.by_residence[residence as usize]
    }

    /// Takes room for `n` more contexts below `max`; `false` (nothing taken) when they do not fit.
    fn reserve(&self, n: usize, max: usize) -> bool {
        self.listed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |listed| {
                listed.checked_add(n).filter(|total| *total <= max)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.listed.fetch_sub(n, Ordering::AcqRel);
    }
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
        self.lot.took(size);
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
        self.lot.gave_back(size);
        self.set_residence(Residence::Stored);
        true
    }

    /// Gives back what a previous parked state held (memory or its file).
    fn release(&self, previous: Option<Parked>) {
        match previous.map(|p| p.held) {
            Some(Held::Memory(bytes)) => self.lot.gave_back(bytes.len() as u64),
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

    fn lock_standing(&self) -> MutexGuard<'_, Standing> {
        self.standing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn residence(&self) -> Residence {
        self.lock_standing().residence
    }

    pub fn set_residence(&self, residence: Residence) {
        let mut standing = self.lock_standing();
        if standing.listed && standing.residence != residence {
            self.census.slot(standing.residence).fetch_sub(1, Ordering::AcqRel);
            self.census.slot(residence).fetch_add(1, Ordering::AcqRel);
        }
        standing.residence = residence;
    }

    /// Counts the record as listed (room for it was reserved in the census).
    fn list(&self) {
        let mut standing = self.lock_standing();
        if !standing.listed {
            standing.listed = true;
            self.census.slot(standing.residence).fetch_add(1, Ordering::AcqRel);
        }
    }

    /// No longer listed: its residence count and its room in the census go.
    fn unlist(&self) {
        let mut standing = self.lock_standing();
        if standing.listed {
            standing.listed = false;
            self.census.slot(standing.residence).fetch_sub(1, Ordering::AcqRel);
            self.census.release(1);
        }
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

/// The tools a request runs with: its own, or, when it continues a conversation context and
/// brings none, the context's.
pub fn tools_in_effect(input: &PromptInput, context: Option<&ContextUse>) -> Vec<ToolSpec> {
    let continues_chat = match input {
        PromptInput::Chat { tools, .. } if !tools.is_empty() => return tools.clone(),
        PromptInput::Chat { .. } | PromptInput::Raw { template: true, .. } => true,
        PromptInput::Raw { template: false, .. } | PromptInput::Tokens(_) => false,
    };
    match context {
        Some(used) if continues_chat && used.mode != ContextMode::Create => match &used.record.lock_body().content {
            ContextContent::Chat { tools, .. } => tools.clone(),
            ContextContent::Raw => Vec::new(),
        },
        _ => Vec::new(),
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
mod tests;
