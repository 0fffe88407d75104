//! A small, bounded pool of threads for compiling schemas and grammars off the HTTP workers. A
//! compile costs from microseconds to seconds and hundreds of MB (a multi-megabyte `const`);
//! on an HTTP worker it would stall every connection that worker serves (`/health` included),
//! so each request hands its compile here and awaits the answer, delaying only itself.
//!
//! `threads` compile at once (config `compile_threads`); up to `queue` more wait (config
//! `compile_queue`); past that a request is refused at once with 503 and `Retry-After`, as other
//! overload is. A request that goes away while its compile waits is skipped; one that goes away
//! while it runs lets it finish (a compile cannot be interrupted), and its result is dropped.
//! Threads get a large stack, so a deep but legal schema has room to recurse.
//!
//! Key types: [`CompilePool`], [`CompileLimits`] (its size, with the service's defaults). Cost: `threads` parked threads; one channel send and one oneshot
//! per compile.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::error::{CoreError, ErrorCode};

/// How large the compile pool is: the service's own defaults, which the daemon overrides with
/// the operator's `compile_threads` and `compile_queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Threads that compile schemas and grammars off the HTTP workers.
    pub threads: usize,
    /// Compiles that may wait for one of those threads; more are refused with 503.
    pub queue: usize,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits { threads: default_compile_threads(), queue: 64 }
    }
}

/// Half the logical CPUs, between 2 and 8: a costly schema then holds one thread while
/// another compiles the next request's, and compiles never take every core from decoding.
fn default_compile_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get() / 2)
        .clamp(2, 8)
}

/// Stack of each compile thread: schema and grammar compiles recurse on nesting.
const COMPILE_STACK_BYTES: usize = 64 * 1024 * 1024;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool. Its threads start with the first compile; dropping it lets them finish what is
/// queued and exit.
pub struct CompilePool {
    jobs: mpsc::SyncSender<Job>,
    inbox: Arc<Mutex<mpsc::Receiver<Job>>>,
    started: OnceLock<Result<(), String>>,
    threads: usize,
    queue: usize,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    /// Compiles accepted and not yet finished (waiting or running).
    pending: AtomicUsize,
    running: AtomicUsize,
    completed: AtomicU64,
    refused: AtomicU64,
}

/// The pool's state, for `/v1/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct CompilePoolStats {
    pub threads: usize,
    pub queue_capacity: usize,
    pub running: usize,
    pub waiting: usize,
    pub completed: u64,
    /// Compiles refused because the queue was full.
    pub refused: u64,
}

impl CompilePool {
    /// A pool of `threads` compile threads with room for `queue` waiting compiles.
    pub fn new(threads: usize, queue: usize) -> Self {
        let (jobs, inbox) = mpsc::sync_channel::<Job>(queue);
        CompilePool {
            jobs,
            inbox: Arc::new(Mutex::new(inbox)),
            started: OnceLock::new(),
            threads: threads.max(1),
            queue,
            counters: Arc::new(Counters::default()),
        }
    }

    fn start_threads(&self) -> Result<(), String> {
        for index in 0..self.threads {
            let inbox = Arc::clone(&self.inbox);
            let counters = Arc::clone(&self.counters);
            std::thread::Builder::new()
                .name(format!("compile-{index}"))
                .stack_size(COMPILE_STACK_BYTES)
                .spawn(move || loop {
                    // The lock is held only while waiting for the next job.
                    let job = match inbox.lock() {
                        Ok(inbox) => inbox.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    counters.running.fetch_add(1, Ordering::AcqRel);
                    job();
                    counters.running.fetch_sub(1, Ordering::AcqRel);
                    counters.pending.fetch_sub(1, Ordering::AcqRel);
                    counters.completed.fetch_add(1, Ordering::Relaxed);
                })
                .map_err(|e| format!("could not start a compile thread: {e}"))?;
        }
        Ok(())
    }

    /// Runs `compile` on a pool thread and returns its result; 503 when `queue` compiles are
    /// already waiting. A compile that panics answers 500 and leaves the thread serving.
    pub async fn run<T, F>(&self, compile: F) -> Result<T, CoreError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, CoreError> + Send + 'static,
    {
        self.started
            .get_or_init(|| self.start_threads())
            .clone()
            .map_err(CoreError::internal)?;
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            // The request went away while this waited: nothing to compile for.
            if reply.is_closed() {
                return;
            }
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(compile))
                .unwrap_or_else(|_| Err(CoreError::internal("compiling the constraint failed unexpectedly")));
            let _ = reply.send(result);
        });
        self.counters.pending.fetch_add(1, Ordering::AcqRel);
        if let Err(error) = self.jobs.try_send(job) {
            self.counters.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(match error {
                mpsc::TrySendError::Full(_) => {
                    self.counters.refused.fetch_add(1, Ordering::Relaxed);
                    CoreError::new(
                        ErrorCode::Overloaded,
                        format!(
                            "the compile queue is full: as many schemas and grammars wait for the \
                             {} compile threads as compile_queue {} allows; retry shortly",
                            self.threads, self.queue
                        ),
                    )
                }
                mpsc::TrySendError::Disconnected(_) => {
                    CoreError::new(ErrorCode::ShuttingDown, "llamay is shutting down")
                }
            });
        }
        answer
            .await
            .unwrap_or_else(|_| Err(CoreError::internal("the compile thread stopped before answering")))
    }

    pub fn stats(&self) -> CompilePoolStats {
        let pending = self.counters.pending.load(Ordering::Acquire);
        let running = self.counters.running.load(Ordering::Acquire);
        CompilePoolStats {
            threads: self.threads,
            queue_capacity: self.queue,
            running,
            waiting: pending.saturating_sub(running),
            completed: self.counters.completed.load(Ordering::Relaxed),
            refused: self.counters.refused.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn results_come_back_and_a_full_queue_refuses_with_503() {
        let runtime = runtime();
        let pool = Arc::new(CompilePool::new(1, 1));
        assert_eq!(runtime.block_on(pool.run(|| Ok(41 + 1))).unwrap(), 42);

        // Hold the one thread, fill the one queue place, and the next compile is refused.
        let (release, held) = std_mpsc::channel::<()>();
        let (started, running) = std_mpsc::channel::<()>();
        let blocker = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                runtime.block_on(pool.run(move || {
                    started.send(()).unwrap();
                    held.recv().unwrap();
                    Ok(1)
                }))
            })
        };
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        let waiting = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || self::runtime().block_on(pool.run(|| Ok(2))))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.stats().waiting < 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let refused = self::runtime().block_on(pool.run(|| Ok(3))).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Overloaded);
        assert_eq!(refused.code.retry_after_seconds(), Some(1));
        assert!(refused.message.contains("compile_queue 1"), "{}", refused.message);
        release.send(()).unwrap();
        assert_eq!(blocker.join().unwrap().unwrap(), 1);
        assert_eq!(waiting.join().unwrap().unwrap(), 2);
        let stats = pool.stats();
        assert_eq!((stats.refused, stats.completed, stats.waiting, stats.running), (1, 3, 0, 0));
    }

    #[test]
    fn a_panicking_compile_answers_500_and_the_thread_keeps_serving() {
        let runtime = runtime();
        let pool = CompilePool::new(1, 4);
        let error = runtime
            .block_on(pool.run(|| -> Result<u8, CoreError> { panic!("boom") }))
            .unwrap_err();
        assert_eq!(error.status(), 500);
        assert_eq!(runtime.block_on(pool.run(|| Ok(7))).unwrap(), 7);
    }
}
