//! Every context, by id, bounded in number: one listing under one lock, holding a map by id for
//! the per-request lookups and an ordered index by creation for paging, which change together
//! (a record is in both or in neither, and a fork's children are listed at once); and counts
//! per residence kept as records change.
//!
//! Expired contexts are dropped when met (a lookup of one answers 404) and by a sweep: every
//! [`SWEEP_EVERY`] on a thread of its own ([`ContextRegistry::start_sweeper`]), and at most
//! once per [`SWEEP_EVERY_WHEN_FULL`] when a create finds the registry full.
//!
//! Key types: [`ContextRegistry`], [`ContextPage`], [`ResidenceCounts`]. Cost: get, insert
//! and remove are O(log n) under the listing's lock, held for a few map operations; a fork
//! of `n` lists its children under it at once; a page is O(log n + its length); a sweep is
//! O(n), off request paths, and checks expiry outside the lock.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::{
    random_hex, Census, ContextBody, ContextContent, ContextLimits, ContextRecord, ParkingLot, Residence,
    Standing, DEFAULT_CONTEXT_KEEP_ALIVE, DEFAULT_CONTEXT_MEMORY, DEFAULT_MAX_CONTEXTS, MAX_FORK,
};
use crate::core::KeepAlive;
use crate::error::{CoreError, ErrorCode};

/// How often the sweeper drops expired contexts.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The least time between two sweeps that a full registry asks for.
const SWEEP_EVERY_WHEN_FULL: Duration = Duration::from_secs(1);
/// Most contexts one page lists.
pub const MAX_PAGE: usize = 1000;

/// Contexts per residence and in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidenceCounts {
    pub hot: usize,
    pub parked: usize,
    pub stored: usize,
    pub cold: usize,
    pub total: usize,
}

/// One page of the listing, oldest first.
#[derive(Debug)]
pub struct ContextPage {
    pub contexts: Vec<Arc<ContextRecord>>,
    /// Whether contexts follow the last one of this page.
    pub has_more: bool,
}

/// The listed records, by id and by creation key; changed only through its methods, which
/// keep the two maps and each record's listed standing together.
#[derive(Debug, Default)]
struct Listing {
    by_id: HashMap<String, Arc<ContextRecord>>,
    /// The same records by creation key, for paging in creation order.
    by_key: BTreeMap<u64, Arc<ContextRecord>>,
}

impl Listing {
    /// Lists a record whose room is reserved.
    fn insert(&mut self, record: Arc<ContextRecord>) {
        record.list();
        self.by_key.insert(record.key, Arc::clone(&record));
        self.by_id.insert(record.id.clone(), record);
    }

    /// Takes `record` out, if it is listed (a key is never given twice, so finding its key
    /// finds this record).
    fn remove(&mut self, record: &ContextRecord) {
        if self.by_key.remove(&record.key).is_some() {
            self.by_id.remove(&record.id);
            record.unlist();
        }
    }
}

/// Every context, by id.
#[derive(Debug)]
pub struct ContextRegistry {
    listing: Mutex<Listing>,
    next_key: AtomicU64,
    max_contexts: AtomicUsize,
    lot: Arc<ParkingLot>,
    census: Arc<Census>,
    last_sweep: Mutex<Instant>,
    /// Put in every context id (`ctx_<daemon>_<hex>`), so a proxy in front of several daemons
    /// can send a context's requests to the daemon that holds it.
    daemon_id: Mutex<String>,
}

impl Default for ContextRegistry {
    fn default() -> Self {
        ContextRegistry {
            listing: Mutex::new(Listing::default()),
            next_key: AtomicU64::new(0),
            max_contexts: AtomicUsize::new(DEFAULT_MAX_CONTEXTS),
            lot: Arc::new(ParkingLot::new(DEFAULT_CONTEXT_MEMORY)),
            census: Arc::new(Census::default()),
            last_sweep: Mutex::new(Instant::now()),
            daemon_id: Mutex::new(random_hex(12)),
        }
    }
}

fn relock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ContextRegistry {
    /// A registry whose ids carry a daemon id drawn now (see [`ContextRegistry::set_daemon_id`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids made from now on carry `id` (the store's, so it is stable across restarts).
    pub fn set_daemon_id(&self, id: &str) {
        *relock(&self.daemon_id) = id.to_string();
    }

    pub fn daemon_id(&self) -> String {
        relock(&self.daemon_id).clone()
    }

    /// Bounds the parked memory and the contexts held at once.
    pub fn set_limits(&self, limits: ContextLimits) {
        self.set_memory_limit(limits.memory);
        self.set_max_contexts(limits.max_contexts);
    }

    /// Bounds the memory parked contexts take (`-context-memory`).
    pub fn set_memory_limit(&self, bytes: u64) {
        self.lot.set_limit(bytes);
    }

    /// Bounds how many contexts are held at once (`max_contexts`).
    pub fn set_max_contexts(&self, max: usize) {
        self.max_contexts.store(max.max(1), Ordering::Release);
    }

    pub fn max_contexts(&self) -> usize {
        self.max_contexts.load(Ordering::Acquire)
    }

    /// Parked states past the memory bound go to files in `dir` (the store's `parked/`,
    /// emptied here: parked state does not outlive the daemon; snapshots do).
    pub fn set_spill_dir(&self, dir: PathBuf) -> std::io::Result<()> {
        if dir.is_dir() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        self.lot.set_spill_dir(dir);
        Ok(())
    }

    pub fn parking(&self) -> &ParkingLot {
        &self.lot
    }

    /// Drops expired contexts every [`SWEEP_EVERY`] on a thread of its own, for as long as the
    /// registry lives.
    pub fn start_sweeper(self: &Arc<Self>) -> std::io::Result<()> {
        let registry: Weak<Self> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("context-sweeper".into())
            .spawn(move || loop {
                std::thread::sleep(SWEEP_EVERY);
                match registry.upgrade() {
                    Some(registry) => registry.expire(),
                    None => return,
                }
            })
            .map(drop)
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
            committing: std::sync::atomic::AtomicBool::new(false),
            standing: Mutex::new(Standing { residence: Residence::Cold, listed: false }),
            parked: Mutex::new(None),
            lot: Arc::clone(&self.lot),
            census: Arc::clone(&self.census),
        })
    }

    /// 503 unless `n` more contexts fit (a sweep of expired ones runs first when it is due).
    fn reserve(&self, n: usize) -> Result<(), CoreError> {
        let max = self.max_contexts();
        if self.census.reserve(n, max) {
            return Ok(());
        }
        let due = {
            let mut last = relock(&self.last_sweep);
            let due = last.elapsed() >= SWEEP_EVERY_WHEN_FULL;
            if due {
                *last = Instant::now();
            }
            due
        };
        if due {
            self.expire();
            if self.census.reserve(n, max) {
                return Ok(());
            }
        }
        let held = self.census.listed.load(Ordering::Acquire);
        let asked = if n == 1 { "another context".to_string() } else { format!("{n} more contexts") };
        Err(CoreError::new(
            ErrorCode::ContextLimit,
            format!(
                "this llamay holds {held} contexts, its limit (max_contexts {max}), and has no room \
                 for {asked}; delete contexts you no longer need (DELETE /v1/contexts/{{id}}) or \
                 wait for idle ones to expire"
            ),
        ))
    }

    /// Whether `n` more contexts would fit now, so a create refuses before it prefills.
    pub fn check_room(&self, n: usize) -> Result<(), CoreError> {
        self.reserve(n)?;
        self.census.release(n);
        Ok(())
    }

    /// Lists `record` (room for it is reserved); 503 when the registry is full.
    pub fn insert(&self, record: Arc<ContextRecord>) -> Result<(), CoreError> {
        self.reserve(1)?;
        self.listing().insert(record);
        Ok(())
    }

    fn listing(&self) -> MutexGuard<'_, Listing> {
        relock(&self.listing)
    }

    fn not_found(id: &str) -> CoreError {
        CoreError::new(
            ErrorCode::ContextNotFound,
            format!("no context {id:?}; POST /v1/contexts makes one"),
        )
    }

    /// The context `id`, 404 when there is none (or it expired: it is dropped then).
    pub fn get(&self, id: &str) -> Result<Arc<ContextRecord>, CoreError> {
        let mut listing = self.listing();
        let record = listing.by_id.get(id).cloned().ok_or_else(|| Self::not_found(id))?;
        if record.expired() {
            listing.remove(&record);
            return Err(Self::not_found(id));
        }
        Ok(record)
    }

    pub fn remove(&self, id: &str) -> Result<Arc<ContextRecord>, CoreError> {
        let mut listing = self.listing();
        let record = listing
            .by_id
            .get(id)
            .cloned()
            .ok_or_else(|| CoreError::new(ErrorCode::ContextNotFound, format!("no context {id:?}")))?;
        listing.remove(&record);
        Ok(record)
    }

    /// Up to `limit` live contexts created after the context `after` (from the first when
    /// `None`), oldest first; 404 naming `after` when that context is gone.
    pub fn page(&self, after: Option<&str>, limit: usize) -> Result<ContextPage, CoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let listing = self.listing();
        let start = match after {
            None => Bound::Unbounded,
            Some(id) => {
                let key = listing.by_id.get(id).map(|found| found.key).ok_or_else(|| {
                    CoreError::new(
                        ErrorCode::ContextNotFound,
                        format!(
                            "after is {id:?}, which is no longer a context (deleted or expired); \
                             list again from the start"
                        ),
                    )
                    .with_param("after")
                })?;
                Bound::Excluded(key)
            }
        };
        let mut live = listing
            .by_key
            .range((start, Bound::Unbounded))
            .map(|(_, record)| record)
            .filter(|record| !record.expired());
        let contexts: Vec<_> = live.by_ref().take(limit).cloned().collect();
        let has_more = live.next().is_some();
        Ok(ContextPage { contexts, has_more })
    }

    /// `n` children of `parent`: the same tokens and conversation, no prefill (a child's
    /// first request copies the parent's KV sequence). 503 when they do not all fit.
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
        self.reserve(n)?;
        let body = parent.body();
        let keep_alive = parent.keep_alive.map_or(KeepAlive::Forever, KeepAlive::For);
        let parked = parent.parked_state();
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
                match &parked {
                    Some(state) => child.park(Arc::clone(&state.bytes), state.covers),
                    None => child.set_residence(match parent.residence() {
                        Residence::Parked => Residence::Cold,
                        other => other,
                    }),
                }
                child
            })
            .collect();
        let mut listing = self.listing();
        for child in &children {
            listing.insert(Arc::clone(child));
        }
        Ok(children)
    }

    /// Drops contexts unused for longer than their keep_alive. O(contexts): the sweeper's
    /// work, never a request's but for a full registry's (see the module comment).
    pub fn expire(&self) {
        // Expiry is checked outside the lock, so requests wait for a copy of the list only.
        let listed: Vec<Arc<ContextRecord>> = self.listing().by_key.values().cloned().collect();
        let expired: Vec<_> = listed.into_iter().filter(|record| record.expired()).collect();
        if expired.is_empty() {
            return;
        }
        let mut listing = self.listing();
        for record in &expired {
            listing.remove(record);
        }
    }

    /// Contexts per residence, for `/v1/stats`; kept as they change, never counted.
    pub fn counts(&self) -> ResidenceCounts {
        let count = |residence| self.census.slot(residence).load(Ordering::Acquire);
        ResidenceCounts {
            hot: count(Residence::Hot),
            parked: count(Residence::Parked),
            stored: count(Residence::Stored),
            cold: count(Residence::Cold),
            total: Residence::ALL.iter().map(|r| count(*r)).sum(),
        }
    }

    /// Contexts held now.
    pub fn len(&self) -> usize {
        self.listing().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.listing().by_id.is_empty()
    }
}
