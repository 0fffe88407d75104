//! The memory parked context states take, bounded (`-context-memory`): parking past the bound
//! moves the state of the least recently used parked contexts to disk (the store's `parked/`
//! directory; they are then `stored`), or, without a writable store, drops it (they go cold).
//!
//! Least recently used without a scan: parked records wait in a queue in the order they were
//! parked, each with the time it was last used then. The front is the first to go, unless it
//! was used since it joined (its last use is later than the one it was queued with): then it
//! moves to the back with its new time (a second chance, as in a clock cache). Entries of
//! records that left memory are dropped when met, and the queue is compacted when they
//! outnumber the records still parked.
//!
//! Key type: [`ParkingLot`]. Cost: parking is amortized O(1) in the number of contexts, plus
//! one state written or dropped for each that has to leave memory.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use super::{ContextRecord, Residence};

/// A parked record as the queue holds it, with its last use when it was queued.
#[derive(Debug)]
struct Waiting {
    record: Weak<ContextRecord>,
    last_used: Instant,
}

/// The bound on parked states in memory, and the order in which they leave it.
#[derive(Debug)]
pub struct ParkingLot {
    limit: AtomicU64,
    used: AtomicU64,
    /// Records whose parked state is in memory now.
    in_memory: AtomicUsize,
    queue: Mutex<VecDeque<Waiting>>,
    spill: Mutex<Option<PathBuf>>,
    spilled: AtomicU64,
}

/// Entries the queue may hold beyond twice the records parked in memory before it is compacted.
const QUEUE_SLACK: usize = 64;

impl ParkingLot {
    pub(super) fn new(limit: u64) -> Self {
        ParkingLot {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(0),
            in_memory: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
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

    pub(super) fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Release);
    }

    pub(super) fn set_spill_dir(&self, dir: PathBuf) {
        *self
            .spill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir);
    }

    fn spill_dir(&self) -> Option<PathBuf> {
        self.spill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A state of `bytes` is now held in memory.
    pub(super) fn took(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        self.in_memory.fetch_add(1, Ordering::AcqRel);
    }

    /// A state of `bytes` left memory (written to disk, dropped, or replaced).
    pub(super) fn gave_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.in_memory.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queues `record` as just parked in memory and, while over the bound, moves the least
    /// recently used memory states out.
    pub(super) fn admit(&self, record: &Arc<ContextRecord>) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queue.push_back(Waiting {
            record: Arc::downgrade(record),
            last_used: record.last_used(),
        });
        if queue.len() > 2 * self.in_memory.load(Ordering::Acquire) + QUEUE_SLACK {
            queue.retain(|waiting| {
                waiting
                    .record
                    .upgrade()
                    .is_some_and(|record| record.parked_in_memory())
            });
        }
        // Each entry is met at most twice (once more after a second chance), so this ends
        // even while other threads keep using records.
        let mut visits = 2 * queue.len();
        while self.used() > self.limit() && visits > 0 {
            visits -= 1;
            let Some(waiting) = queue.pop_front() else {
                break;
            };
            let Some(record) = waiting.record.upgrade() else {
                continue;
            };
            if !record.parked_in_memory() {
                continue;
            }
            let last_used = record.last_used();
            if last_used > waiting.last_used {
                queue.push_back(Waiting {
                    record: waiting.record,
                    last_used,
                });
                continue;
            }
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
