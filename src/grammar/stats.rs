//! [`MaskStats`]: what constraining a generation cost, counted by the matcher and rendered in
//! the spec's two-line shape for `llamay run -stats`; serializable for the daemon's stats.
//!
//! Cost: a few counters updated per token.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Counters of one matcher. A *step* is one token decision (one commit); a step is *cached*
/// when it was answered without computing a new mask (fast path or a mask from the cache).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaskStats {
    pub steps: u64,
    pub cached_steps: u64,
    /// Masks computed by walking the trie: how many states wanted a mask not in the cache.
    pub masks_computed: u64,
    /// Time spent in the matcher (checks, masks, commits), in nanoseconds.
    pub mask_time_ns: u64,
    pub states: usize,
    pub states_capacity: usize,
    pub states_peak: usize,
    pub masks: usize,
    pub masks_capacity: usize,
    /// Times a full transition table or mask cache was cleared.
    pub table_clears: u64,
    /// Transitions treated as dead because they passed a limit (stack depth, ambiguity).
    pub overflows: u64,
}

impl MaskStats {
    /// The two lines, e.g.
    /// `grammar mask: 80 steps, 0.65 ms each, 1.1% of decode · 74 cached (92.5% hit rate)` and
    /// `  states 2484/4096 (peak 2484) · masks 6/256 · 6 states wanted a mask · 0 table clears`.
    pub fn render(&self, label: &str, decode_time: Duration) -> String {
        let total_ms = self.mask_time_ns as f64 / 1e6;
        let each_ms = if self.steps == 0 {
            0.0
        } else {
            total_ms / self.steps as f64
        };
        let decode_ms = decode_time.as_secs_f64() * 1e3;
        let share = if decode_ms > 0.0 {
            100.0 * total_ms / decode_ms
        } else {
            0.0
        };
        let hit_rate = if self.steps == 0 {
            0.0
        } else {
            100.0 * self.cached_steps as f64 / self.steps as f64
        };
        format!(
            "{label} mask: {} steps, {} ms each, {share:.1}% of decode · {} cached ({hit_rate:.1}% hit rate)\n  \
             states {}/{} (peak {}) · masks {}/{} · {} states wanted a mask · {} table clears",
            self.steps,
            format_ms(each_ms),
            self.cached_steps,
            self.states,
            self.states_capacity,
            self.states_peak,
            self.masks,
            self.masks_capacity,
            self.masks_computed,
            self.table_clears,
        )
    }
}

/// Two significant decimals for large values, more for the tiny ones we aim for.
fn format_ms(ms: f64) -> String {
    if ms >= 0.1 || ms == 0.0 {
        format!("{ms:.2}")
    } else if ms >= 0.01 {
        format!("{ms:.3}")
    } else {
        format!("{ms:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_spec_shape() {
        let stats = MaskStats {
            steps: 80,
            cached_steps: 74,
            masks_computed: 6,
            mask_time_ns: 52_000_000,
            states: 2484,
            states_capacity: 4096,
            states_peak: 2484,
            masks: 6,
            masks_capacity: 256,
            table_clears: 0,
            overflows: 0,
        };
        assert_eq!(
            stats.render("grammar", Duration::from_millis(4727)),
            "grammar mask: 80 steps, 0.65 ms each, 1.1% of decode · 74 cached (92.5% hit rate)\n  \
             states 2484/4096 (peak 2484) · masks 6/256 · 6 states wanted a mask · 0 table clears"
        );
        let tiny = MaskStats {
            steps: 10,
            mask_time_ns: 31_000,
            ..MaskStats::default()
        };
        assert!(tiny
            .render("json", Duration::from_secs(1))
            .starts_with("json mask: 10 steps, 0.0031 ms each, 0.0% of decode"));
    }
}
