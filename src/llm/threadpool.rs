//! The ggml CPU threadpool attached to each context, and the tuner that picks its thread count
//! for every generation step.
//!
//! llama.cpp is built with OpenMP (llama-cpp-sys-2's `openmp` feature, as llama-server is built):
//! ggml then computes every graph on the calling thread's OpenMP team, which libgomp keeps alive
//! between graphs, and the attached pool carries only the thread count. Without OpenMP and
//! without an attached pool, ggml started and joined its worker threads for every graph (73% of
//! decode time in `ggml_barrier` on a 2-core machine); with a persistent non-OpenMP pool
//! attached, that cost was gone, but on a free machine its workers' polling and barriers
//! still lost to OpenMP's spin-wait. Measured with SmolLM2 on a 2-core AVX2 machine, each
//! build paired with llama-server in the same run (ratios: llamay / llama-server):
//!
//! | load on the machine | scenario | OpenMP | persistent pool |
//! |---|---|---|---|
//! | none | one sequence's decode step (two runs) | 1.09x, 0.97x | 0.99x, 0.94x |
//! | none | one client, streaming chat | 1.03x | 0.92x |
//! | none | four clients, streaming chat | 1.00x | 0.91x |
//! | a process using half a core | four clients | 1.00x | 1.15x |
//! | a process using half a core | one client | 0.98x | 0.99x |
//!
//! OpenMP stays within one run's round-to-round spread of llama-server in every row, as the same
//! threading model should; the pool wins only with four clients on a contended machine. On a
//! machine loaded far beyond its cores, [`ThreadTuner`] moves generation steps to one thread,
//! whichever threading model runs them. Cost: libgomp at run time (part of GCC's runtime, there
//! wherever llamay is compiled).
//!
//! Key type: [`CpuThreadpool`]. Cost: OpenMP's `threads - 1` worker threads per decoding thread
//! (shared by the contexts that thread decodes); after each graph they spin briefly
//! (libgomp's default) and then sleep.
//!
//! The pool is attached to, and tuned through, a context that [`super::ffi`] created itself, so
//! the pointer handed to llama.cpp is the one llama.cpp returned.

use llama_cpp_sys_2 as sys;

use super::ffi::RawContext;
use super::LlmError;

/// A ggml threadpool, freed on drop. The context it is attached to must be freed or detached
/// first: [`super::Context`] declares it after the llama.cpp context so it drops after it.
pub struct CpuThreadpool {
    pool: std::ptr::NonNull<sys::ggml_threadpool>,
    threads: i32,
}

// SAFETY: the pool is only handed to llama.cpp (which drives it from the thread that decodes)
// and freed once; nothing here touches it concurrently.
unsafe impl Send for CpuThreadpool {}

impl std::fmt::Debug for CpuThreadpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuThreadpool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl CpuThreadpool {
    /// Starts a pool of `threads` (the calling thread counts as one of them while it decodes).
    pub fn new(threads: i32) -> Result<Self, LlmError> {
        if threads <= 0 {
            return Err(LlmError::Config(format!(
                "a threadpool needs at least one thread, got {threads}"
            )));
        }
        // SAFETY: plain C calls; the params struct is passed by pointer and only read.
        let pool = unsafe {
            let mut params = sys::ggml_threadpool_params_default(threads);
            sys::ggml_threadpool_new(&mut params)
        };
        let pool = std::ptr::NonNull::new(pool).ok_or_else(|| {
            LlmError::Context(format!(
                "ggml could not start a threadpool of {threads} threads"
            ))
        })?;
        Ok(Self { pool, threads })
    }

    pub fn threads(&self) -> i32 {
        self.threads
    }

    /// Makes `context` compute its graphs (single tokens and prompt batches) on this pool, and
    /// returns the handle through which its thread count is tuned.
    pub fn attach(&self, context: &mut RawContext<'_>) -> ThreadTuner {
        let raw = context.as_ptr();
        // SAFETY: `raw` is the live context's own pointer; the pool outlives the context's use
        // of it (see the type's documentation).
        unsafe { sys::llama_attach_threadpool(raw, self.pool.as_ptr(), std::ptr::null_mut()) };
        ThreadTuner::new(raw, self.threads)
    }
}

/// Decodes of at most this many tokens are generation steps, whose thread count is tuned.
const SMALL_BATCH: usize = 8;
/// Generation steps between two trials of the other thread count, after a change; every trial
/// that changes nothing doubles it, up to [`MAX_PROBE_EVERY`], so a losing count costs little.
const PROBE_EVERY: u32 = 64;
const MAX_PROBE_EVERY: u32 = 1024;
/// Steps before the first trial: a busy machine makes a two-thread step cost ~1 s here.
const FIRST_PROBE: u32 = 2;
/// Steps of one trial; the first is not measured (it pays for waking or parking a thread).
const PROBE_STEPS: u32 = 3;
/// One thread is preferred only when it is this much faster: on a busy machine it wins by
/// many times, and on a free one a few noisy steps must not make it look better.
const ONE_THREAD_MARGIN: f64 = 1.25;
/// A step this many times slower than usual on the preferred count brings the next trial
/// forward (a quiet machine becoming busy, or the reverse, is noticed at once).
const SLOWDOWN: f64 = 3.0;

/// Chooses between one thread and all of the pool's for generation steps, by their measured
/// time. On free cores all threads win; when other processes hold the cores, every ggml barrier
/// of a two-thread step waits for a descheduled partner (89% of decode time in `ggml_barrier`
/// under perf with the machine's load at 17 on 2 cores, and 1.1 against 20 tok/s for one
/// thread), so one thread wins, by far: it must win by [`ONE_THREAD_MARGIN`], and a single
/// delayed step weighs little. Prompt batches always use every thread: their work between
/// barriers is large. Steps are compared only with steps of the same size: a step of four
/// sequences costs more than a step of one whatever the threads, and mixing them once made a
/// one-thread trial on single steps look faster than two threads on batched ones, which then
/// slowed every step to one thread. Cost: a clock read per decode, and one trial of the other
/// count every [`PROBE_EVERY`] steps (at most [`PROBE_STEPS`] slower steps when the other
/// count loses).
pub struct ThreadTuner {
    /// `None` only in unit tests of the choice itself.
    context: Option<std::ptr::NonNull<sys::llama_context>>,
    max: i32,
    /// Threads set on the context now.
    applied: i32,
    /// Moving average of seconds per generation step of `n` tokens at index `n - 1`:
    /// `[one thread, all threads]`; NaN = not measured yet.
    cost: [[f64; 2]; SMALL_BATCH],
    since_probe: u32,
    /// Steps left in the current trial, and the thread count on trial.
    probing: u32,
    probe_threads: i32,
    probe_every: u32,
    /// The preferred count when the current trial started and the step size it started at,
    /// until the trial is judged.
    trial_from: Option<(i32, usize)>,
    /// The next measurement is a trial's first step.
    discard_next: bool,
}

// SAFETY: the pointer is only used by the thread that owns the context (see `Context`).
unsafe impl Send for ThreadTuner {}

impl ThreadTuner {
    fn new(context: *mut sys::llama_context, max: i32) -> Self {
        Self {
            context: std::ptr::NonNull::new(context),
            max,
            applied: max,
            cost: [[f64::NAN; 2]; SMALL_BATCH],
            since_probe: 0,
            probing: 0,
            probe_threads: max,
            probe_every: PROBE_EVERY,
            trial_from: None,
            discard_next: false,
        }
    }

    /// Threads for the next decode of `tokens` tokens; sets them on the context.
    pub fn before_decode(&mut self, tokens: usize) -> i32 {
        let threads = if self.max == 1 || tokens == 0 || tokens > SMALL_BATCH {
            self.max
        } else {
            self.choose(tokens)
        };
        if threads != self.applied {
            if let Some(context) = self.context {
                // SAFETY: the context is alive (the tuner is owned next to it) and used on this
                // thread only.
                // Both counts: llama.cpp takes the "batch" one for any decode of two or more
                // tokens, which a step of several sequences is.
                unsafe { sys::llama_set_n_threads(context.as_ptr(), threads, threads) };
            }
            self.applied = threads;
        }
        threads
    }

    /// Records how long the decode of `tokens` tokens on `threads` threads took.
    pub fn after_decode(&mut self, tokens: usize, threads: i32, seconds: f64) {
        if self.max == 1 || tokens > SMALL_BATCH || tokens == 0 {
            return;
        }
        if std::mem::take(&mut self.discard_next) {
            return;
        }
        let slot = usize::from(threads == self.max);
        let preferred = self.preferred(tokens);
        let cost = &mut self.cost[tokens - 1];
        // Several times the usual cost on the preferred count: the machine's load may have
        // changed, which the next trial, due now, will tell.
        if self.probing == 0 && threads == preferred && seconds > SLOWDOWN * cost[slot] {
            self.since_probe = self.since_probe.max(self.probe_every);
        }
        cost[slot] = if cost[slot].is_nan() {
            seconds
        } else {
            // One step the OS delayed must not outweigh many normal ones; a lasting slowdown
            // still doubles the average within a few steps.
            0.75 * cost[slot] + 0.25 * seconds.min(2.0 * cost[slot])
        };
        let measured = !cost.iter().any(|c| c.is_nan());
        if self.probing == 0 && self.preferred(tokens) != preferred && measured {
            self.probe_every = PROBE_EVERY;
            let [one, all] = self.cost[tokens - 1];
            tracing::debug!(
                threads = self.preferred(tokens),
                tokens,
                one_thread_ms = one * 1e3,
                all_threads_ms = all * 1e3,
                "generation steps change thread count"
            );
        }
    }

    /// Threads generation steps of `tokens` tokens (1 to [`SMALL_BATCH`]) use when not probing.
    pub fn preferred(&self, tokens: usize) -> i32 {
        let [one, all] = self.cost[tokens.clamp(1, SMALL_BATCH) - 1];
        if one * ONE_THREAD_MARGIN < all {
            1
        } else {
            self.max
        }
    }

    fn choose(&mut self, tokens: usize) -> i32 {
        if self.probing > 0 {
            self.probing -= 1;
            return self.probe_threads;
        }
        let best = self.preferred(tokens);
        if let Some((before, trial_tokens)) = self.trial_from.take() {
            if before == self.preferred(trial_tokens) {
                self.probe_every = (self.probe_every * 2).min(MAX_PROBE_EVERY);
            } else {
                self.probe_every = PROBE_EVERY;
            }
        }
        self.since_probe += 1;
        // The first trial at a step size comes early, so a busy machine is noticed within a few
        // tokens; unless a smaller step already showed all threads winning on their own: a
        // bigger step has more work between barriers, so they win there too.
        let shown_by_smaller = self.cost[..tokens - 1]
            .iter()
            .any(|[one, all]| *one >= *all * ONE_THREAD_MARGIN);
        let due = if self.cost[tokens - 1][0].is_nan() && !shown_by_smaller {
            FIRST_PROBE
        } else {
            self.probe_every
        };
        if self.since_probe < due {
            return best;
        }
        self.since_probe = 0;
        self.probing = PROBE_STEPS - 1;
        self.probe_threads = if best == 1 { self.max } else { 1 };
        self.trial_from = Some((best, tokens));
        self.discard_next = true;
        // A trial replaces what the other count cost long ago: the load may have changed.
        self.cost[tokens - 1][usize::from(self.probe_threads == self.max)] = f64::NAN;
        self.probe_threads
    }
}

impl Drop for CpuThreadpool {
    fn drop(&mut self) {
        // SAFETY: created by ggml_threadpool_new and freed exactly once.
        unsafe { sys::ggml_threadpool_free(self.pool.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` generation steps where one step costs `one` seconds on one thread and `all`
    /// on every thread; returns how many steps ran on one thread.
    fn run(tuner: &mut ThreadTuner, steps: usize, one: f64, all: f64) -> usize {
        let mut on_one = 0;
        for _ in 0..steps {
            let threads = tuner.before_decode(1);
            on_one += usize::from(threads == 1);
            tuner.after_decode(1, threads, if threads == 1 { one } else { all });
        }
        on_one
    }

    #[test]
    fn generation_moves_to_one_thread_when_it_is_faster_and_back_when_it_is_not() {
        let mut tuner = ThreadTuner::new(std::ptr::null_mut(), 2);
        // Free cores: two threads win; one thread is only tried now and then.
        let on_one = run(&mut tuner, 400, 0.010, 0.006);
        assert_eq!(tuner.preferred(1), 2);
        assert!(
            on_one <= 400 / PROBE_EVERY as usize * PROBE_STEPS as usize + PROBE_STEPS as usize,
            "{on_one}"
        );
        // Contended cores: a two-thread step waits on its partner at every barrier.
        run(&mut tuner, 2 * PROBE_EVERY as usize, 0.010, 0.500);
        assert_eq!(tuner.preferred(1), 1);
        let on_one = run(&mut tuner, 200, 0.010, 0.500);
        assert!(on_one >= 200 - 4 * PROBE_STEPS as usize, "{on_one}");
        // The load goes away again: noticed at the next trial, at most MAX_PROBE_EVERY steps on.
        run(
            &mut tuner,
            MAX_PROBE_EVERY as usize + 2 * PROBE_STEPS as usize,
            0.010,
            0.006,
        );
        assert_eq!(tuner.preferred(1), 2);
    }

    #[test]
    fn single_steps_on_one_thread_are_not_compared_with_batched_steps_on_two() {
        let mut tuner = ThreadTuner::new(std::ptr::null_mut(), 2);
        // Free cores, as SmolLM2 measured: a step of one token costs 11 ms on two threads and
        // 17 ms on one; a step of four tokens 27 ms on two and 43 ms on one. Clients come and go, so the step size
        // changes all the time; two threads must stay preferred at both sizes.
        let mut on_one = 0;
        for step in 0..2000usize {
            let tokens = if (step / 37) % 2 == 0 { 1 } else { 4 };
            let threads = tuner.before_decode(tokens);
            on_one += usize::from(threads == 1);
            let seconds = match (tokens, threads) {
                (1, 1) => 0.017,
                (1, _) => 0.011,
                (_, 1) => 0.043,
                _ => 0.027,
            };
            tuner.after_decode(tokens, threads, seconds);
        }
        assert_eq!((tuner.preferred(1), tuner.preferred(4)), (2, 2));
        assert!(on_one <= 45, "{on_one} of 2000 steps on one thread");
    }

    #[test]
    fn load_arriving_after_a_long_quiet_run_is_noticed_within_a_few_steps() {
        let mut tuner = ThreadTuner::new(std::ptr::null_mut(), 2);
        run(&mut tuner, 5000, 0.017, 0.011);
        assert_eq!(tuner.preferred(1), 2);
        // Trials are now MAX_PROBE_EVERY steps apart; a two-thread step suddenly costs 0.5 s.
        run(&mut tuner, 12, 0.017, 0.500);
        assert_eq!(tuner.preferred(1), 1);
    }

    #[test]
    fn one_delayed_step_does_not_move_generation_to_one_thread() {
        let mut tuner = ThreadTuner::new(std::ptr::null_mut(), 2);
        let mut on_one = 0;
        for step in 0..1000usize {
            let threads = tuner.before_decode(1);
            on_one += usize::from(threads == 1);
            // Every 50th two-thread step waits 100 ms for a descheduled partner.
            let seconds = match threads {
                1 => 0.017,
                _ if step % 50 == 49 => 0.100,
                _ => 0.011,
            };
            tuner.after_decode(1, threads, seconds);
        }
        // Each delayed step brings one trial forward (its steps on one thread), nothing more.
        assert_eq!(tuner.preferred(1), 2);
        assert!(on_one <= 20 * PROBE_STEPS as usize, "{on_one} of 1000 steps on one thread");
    }

    #[test]
    fn prompt_batches_and_single_thread_pools_always_use_every_thread() {
        let mut tuner = ThreadTuner::new(std::ptr::null_mut(), 2);
        run(&mut tuner, 100, 0.001, 1.0);
        assert_eq!(tuner.preferred(1), 1);
        assert_eq!(tuner.before_decode(SMALL_BATCH + 1), 2);
        assert_eq!(tuner.before_decode(0), 2);
        tuner.after_decode(0, 2, 1.0);
        let mut single = ThreadTuner::new(std::ptr::null_mut(), 1);
        assert_eq!(run(&mut single, 100, 0.001, 1.0), 100);
        assert_eq!(single.before_decode(1), 1);
    }
}
