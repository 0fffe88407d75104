//! Timing for the benches that compare llamay with llguidance (`maskbench`, `schema_compile`):
//! the bench thread's CPU time, and one summary and printed row of a set of timings, so both
//! report avg, p50, p99 and max the same way.
//!
//! Key items: [`CpuInstant`], [`summary`], [`row`]. Cost: a `clock_gettime` per reading.

/// A point in this thread's CPU time: on a shared machine wall time also counts the turns of
/// other processes, which land on either engine at random and make single masks look slow.
#[derive(Clone, Copy)]
pub struct CpuInstant(f64);

impl CpuInstant {
    pub fn now() -> Self {
        let mut spec = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `spec` is a valid, writable timespec for the duration of the call.
        let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut spec) };
        if status != 0 {
            return CpuInstant(0.0);
        }
        CpuInstant(spec.tv_sec as f64 * 1e6 + spec.tv_nsec as f64 / 1e3)
    }

    pub fn elapsed_micros(&self) -> f64 {
        (CpuInstant::now().0 - self.0).max(0.0)
    }
}

/// avg, p50, p99 and max of `times` (sorted in place); `None` when there are none.
pub fn summary(times: &mut [f64]) -> Option<[f64; 4]> {
    if times.is_empty() {
        return None;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let n = times.len();
    let avg = times.iter().sum::<f64>() / n as f64;
    let at = |q: f64| times[((n as f64 * q) as usize).min(n - 1)];
    Some([avg, at(0.5), at(0.99), times[n - 1]])
}

/// Prints `label` and the [`summary`] of `times` in microseconds, and returns the summary.
pub fn row(label: &str, times: &mut [f64]) -> Option<[f64; 4]> {
    let result = summary(times);
    match result {
        Some([avg, p50, p99, max]) => println!(
            "  {label:<28} n={:<7} avg {avg:>9.1} us  p50 {p50:>9.1} us  p99 {p99:>9.1} us  max {max:>10.1} us",
            times.len()
        ),
        None => println!("  {label:<28} (none)"),
    }
    result
}
