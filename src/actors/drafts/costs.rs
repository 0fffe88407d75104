//! What drafts cost a model worker, measured as it decodes: the time a decode of each batch
//! size takes (what one more row costs next to the step it may save), and per count of
//! generating sequences, what a settled token costs in steps that decoded drafts against steps
//! that did not. Where the drafted tokens come out dearer, drafts pause there, longer each time
//! they still lose: the row costs decide single drafts from means that a busy CPU, the
//! thread tuner's trials and kernels whose cost depends on the row count all bend, and the
//! settled tokens' price is what a user waits for.
//!
//! Key type: [`RowCosts`] (one per worker). Cost: a few float operations per decode.

/// Decode time by batch size, learned from the worker's generation steps: what one more row
/// costs next to the step it saves when kept. On a CPU a row is far from free (llama-bench,
/// SmolLM2 on two threads: 2 rows cost 1.3 single steps, 4 rows 1.85, 8 rows 3.1 on one
/// machine, 1.8, 2.8 and 5.7 on another; Gemma 3 270M, whose step is mostly its 262k-token
/// output layer, 1.0, 1.08, 1.39 on the first).
#[derive(Debug, Clone)]
pub struct RowCosts {
    /// Per batch size from 1: mean seconds of a decode and the step it was last measured at,
    /// if one was seen.
    seconds: Vec<Option<(f64, u64)>>,
    /// Generation steps recorded so far.
    steps: u64,
    /// Per count of generating sequences from 1: how drafted steps pay there.
    paces: Vec<Pace>,
}

impl Default for RowCosts {
    fn default() -> Self {
        RowCosts { seconds: vec![None; MAX_COSTED_ROWS], steps: 0, paces: vec![Pace::default(); MAX_PACED_SEQUENCES] }
    }
}

/// Steps after which a size's cost counts as unmeasured again. A size measured slow (a step
/// that shared the CPU with something else) would otherwise never be decoded, so never
/// measured again, and drafts of that size would stop for the worker's life.
const STALE_STEPS: u64 = 256;

/// Batch sizes whose decode times are kept; larger batches (prompts) are not generation steps.
const MAX_COSTED_ROWS: usize = 48;
/// What a row is taken to cost, as a share of a step, before sizes around it were measured:
/// cheap enough that drafts run and the sizes get measured.
const UNMEASURED_ROW_COST: f64 = 0.1;
/// How much one decode moves its size's mean.
const COST_WEIGHT: f64 = 0.1;

/// Counts of generating sequences whose drafted and plain steps are compared (a worker has as
/// many sequences as its `parallel`; past this count drafts are only costed by rows).
const MAX_PACED_SEQUENCES: usize = 16;
/// Drafted steps in one comparison: enough that a step the OS delayed, or a thread trial,
/// moves the total by a few percent at most.
const PACE_WINDOW: u32 = 64;
/// Plain steps a comparison needs besides.
const MIN_PLAIN_STEPS: u32 = 16;
/// How much dearer a drafted token may come out than a plain one before drafts pause: the
/// totals of a window still differ by a few percent on a shared machine when both cost the same.
const PACE_MARGIN: f64 = 1.05;
/// A step's seconds count at most this many times what its tokens cost in plain steps: one
/// step held up for a tenth of a second must not pause drafts that pay.
const PACE_CLIP: f64 = 3.0;
/// Generation steps a pause lasts, doubling each time the next window loses again.
const MIN_DRAFT_PAUSE: u64 = 256;
const MAX_DRAFT_PAUSE: u64 = 8192;

/// One count of generating sequences: the current window's seconds and settled tokens of
/// drafted and of plain steps, and the pause.
#[derive(Debug, Clone, Copy)]
struct Pace {
    drafted: Tally,
    plain: Tally,
    /// Seconds per token of plain steps in the last window judged: the clip's measure.
    plain_rate: Option<f64>,
    /// The generation step (of [`RowCosts::steps`]) until which drafts wait here.
    paused_until: u64,
    next_pause: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace { drafted: Tally::default(), plain: Tally::default(), plain_rate: None, paused_until: 0, next_pause: MIN_DRAFT_PAUSE }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    steps: u32,
    tokens: u64,
    seconds: f64,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.seconds / self.tokens.max(1) as f64
    }
}

/// What one generation step (a decode of generating sequences' rows only) measured.
#[derive(Debug, Clone, Copy)]
pub struct GenerationStep {
    /// Sequences that generated, one sampled row each.
    pub sequences: usize,
    /// Rows decoded: the sampled ones and their drafts.
    pub rows: usize,
    /// Tokens the rows settled.
    pub tokens: usize,
    /// Seconds of the decode alone.
    pub decode_seconds: f64,
    /// Seconds from building the step's batch to proposing the next drafts: the decode and
    /// the settling around it.
    pub seconds: f64,
}

/// What a window of drafted steps showed, for the worker's log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PaceVerdict {
    /// Drafted tokens cost this share of plain ones; drafts go on.
    Pays(f64),
    /// Drafted tokens cost this share of plain ones; drafts pause for this many steps.
    Pauses(f64, u64),
}

impl RowCosts {
    /// One generation step, once what it decoded was settled: its decode time for the row
    /// costs, its whole time and settled tokens for the pace of its count of sequences.
    /// Returns the verdict when this step closed a window of drafted steps.
    pub fn generation_step(&mut self, step: GenerationStep) -> Option<PaceVerdict> {
        self.record(step.rows, step.decode_seconds);
        self.settled(step.sequences, step.rows, step.tokens, step.seconds)
    }

    /// A generation step of `rows` rows took `seconds` to decode.
    fn record(&mut self, rows: usize, seconds: f64) {
        self.steps += 1;
        let Some(slot) = rows.checked_sub(1).and_then(|at| self.seconds.get_mut(at)) else { return };
        let mean = match *slot {
            Some((mean, _)) => mean + COST_WEIGHT * (seconds - mean),
            None => seconds,
        };
        *slot = Some((mean, self.steps));
    }

    /// A generation step of `sequences` generating sequences, which decoded `rows` rows (more
    /// than `sequences`: drafts) and settled `tokens`, took `seconds` in all (see
    /// [`GenerationStep::seconds`]); the step's decode was recorded first (its count of steps
    /// dates a pause).
    fn settled(&mut self, sequences: usize, rows: usize, tokens: usize, seconds: f64) -> Option<PaceVerdict> {
        let steps = self.steps;
        let pace = sequences.checked_sub(1).and_then(|at| self.paces.get_mut(at))?;
        let seconds = match pace.plain_rate {
            Some(rate) => seconds.min(PACE_CLIP * rate * tokens as f64),
            None => seconds,
        };
        let tally = if rows > sequences { &mut pace.drafted } else { &mut pace.plain };
        tally.steps += 1;
        tally.tokens += tokens as u64;
        tally.seconds += seconds;
        if pace.drafted.steps < PACE_WINDOW || pace.plain.steps < MIN_PLAIN_STEPS {
            return None;
        }
        let share = pace.drafted.rate() / pace.plain.rate();
        pace.plain_rate = Some(pace.plain.rate());
        (pace.drafted, pace.plain) = (Tally::default(), Tally::default());
        if share > PACE_MARGIN {
            pace.paused_until = steps + pace.next_pause;
            let verdict = PaceVerdict::Pauses(share, pace.next_pause);
            pace.next_pause = (pace.next_pause * 2).min(MAX_DRAFT_PAUSE);
            Some(verdict)
        } else {
            pace.next_pause = MIN_DRAFT_PAUSE;
            Some(PaceVerdict::Pays(share))
        }
    }

    /// Whether drafts wait, at this count of generating sequences, after a window where they
    /// lost time.
    fn paused(&self, sequences: usize) -> bool {
        sequences.checked_sub(1).and_then(|at| self.paces.get(at)).is_some_and(|pace| self.steps < pace.paused_until)
    }

    /// What growing a batch of `rows` rows by one costs, in tokens: the time it adds over the
    /// time a step of `base` rows (one per generating sequence) spends per token. A kept draft
    /// token is one token more for that time.
    pub fn next_row(&self, base: usize, rows: usize) -> f64 {
        let at = |rows: usize| {
            let (mean, measured_at) = rows.checked_sub(1).and_then(|i| self.seconds.get(i).copied().flatten())?;
            (self.steps - measured_at <= STALE_STEPS).then_some(mean)
        };
        match (at(base), at(rows), at(rows + 1)) {
            (Some(step), Some(now), Some(then)) if step > 0.0 => ((then - now) * base as f64 / step).max(0.0),
            _ => UNMEASURED_ROW_COST,
        }
    }

    /// How many tokens of each draft are worth decoding, one length for all: sequences that
    /// llama.cpp computes in one pass must bring as many rows each (see `model::step`).
    /// `drafts` holds each sequence's draft length and acceptance; the batch has `rows` rows so
    /// far, against steps of `base` rows. Token `i` of a draft is reached and kept with
    /// probability `acceptance^i`; the length taken is the one whose expected tokens, summed
    /// over the sequences, beat the rows' cost by the most, summed over the draft so that one
    /// size measured slow or fast does not decide alone. Next to three other sequences a row
    /// must be worth more: their tokens share the time it adds. None while drafts pause at
    /// `base` sequences, or where one of the sequences has no draft.
    pub fn worth(&self, drafts: &[(usize, f64)], base: usize, rows: usize) -> usize {
        if self.paused(base) {
            return 0;
        }
        let common = drafts.iter().map(|(length, _)| *length).min().unwrap_or(0);
        let mut reach = vec![1.0; drafts.len()];
        let (mut rows, mut gain, mut best, mut best_gain) = (rows, 0.0, 0, 0.0);
        for length in 1..=common {
            for (reach, (_, acceptance)) in reach.iter_mut().zip(drafts) {
                *reach *= acceptance;
                gain += *reach - self.next_row(base, rows);
                rows += 1;
            }
            if gain > best_gain {
                (best, best_gain) = (length, gain);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One generation step as the worker reports it: its decode, then what it settled.
    fn step(costs: &mut RowCosts, sequences: usize, rows: usize, tokens: usize, seconds: f64) -> Option<PaceVerdict> {
        costs.generation_step(GenerationStep { sequences, rows, tokens, decode_seconds: seconds, seconds })
    }

    /// A window of one sequence's steps: every fourth a draft of two rows that settles
    /// `drafted_tokens` in `drafted_seconds`, the others plain steps of 10 ms.
    fn window(costs: &mut RowCosts, drafted_tokens: usize, drafted_seconds: f64) -> Vec<PaceVerdict> {
        let mut verdicts = Vec::new();
        for at in 0..PACE_WINDOW * 4 {
            let verdict = if at % 4 == 3 {
                step(costs, 1, 3, drafted_tokens, drafted_seconds)
            } else {
                step(costs, 1, 1, 1, 0.010)
            };
            verdicts.extend(verdict);
        }
        verdicts
    }

    #[test]
    fn a_draft_row_is_decoded_while_its_chance_of_being_kept_beats_what_it_costs() {
        let mut costs = RowCosts::default();
        // Unmeasured: rows are taken to be cheap.
        assert_eq!(costs.worth(&[(8, 0.9)], 1, 1), 8);
        // Measured as SmolLM2 on two CPU threads: one row 10 ms, two 13, three 16.5, four 19.
        for (rows, ms) in [(1, 10.0), (2, 13.0), (3, 16.5), (4, 19.0), (5, 22.0)] {
            costs.record(rows, ms / 1000.0);
        }
        assert!((costs.next_row(1, 1) - 0.3).abs() < 1e-9);
        // 0.9, 0.81, 0.73, 0.66 beat 0.30, 0.35, 0.25, 0.30 (then unmeasured: 0.1).
        assert_eq!(costs.worth(&[(4, 0.9)], 1, 1), 4);
        // 0.5 beats 0.30, 0.25 does not beat 0.35.
        assert_eq!(costs.worth(&[(4, 0.5)], 1, 1), 1);
        assert_eq!(costs.worth(&[(4, 0.2)], 1, 1), 0);
        // With four sequences a step of 4 rows takes 19 ms, 4.75 ms a token; a fifth row adds 3 ms,
        // 0.63 of a token: only a likely draft token is worth it.
        assert!((costs.next_row(4, 4) - 3.0 * 4.0 / 19.0).abs() < 1e-9);
        for (rows, ms) in [(6, 25.0), (7, 28.0), (8, 31.0)] {
            costs.record(rows, ms / 1000.0);
        }
        assert_eq!(costs.worth(&[(4, 0.7)], 4, 4), 1, "0.7 beats 0.63, 0.49 does not");
        assert_eq!(costs.worth(&[(4, 0.6)], 4, 4), 0);
    }

    #[test]
    fn a_size_measured_slow_is_measured_again_after_a_while() {
        let mut costs = RowCosts::default();
        costs.record(1, 0.010);
        // Each row measured at two steps' time (the CPU was shared): no draft is worth it.
        for rows in 2..=5 {
            costs.record(rows, 0.010 + 0.020 * (rows - 1) as f64);
        }
        assert_eq!(costs.worth(&[(4, 0.9)], 1, 1), 0);
        // Steps of one row go on; once the two-row time is stale, a draft runs to measure it again.
        for _ in 0..=STALE_STEPS {
            costs.record(1, 0.010);
        }
        assert!(costs.worth(&[(4, 0.9)], 1, 1) > 0);
    }

    #[test]
    fn sequences_computed_together_draft_one_length_and_none_where_one_has_none() {
        let costs = RowCosts::default();
        // Unmeasured rows are cheap: the shorter draft's length, for both.
        assert_eq!(costs.worth(&[(3, 0.9), (5, 0.9)], 2, 2), 3);
        assert_eq!(costs.worth(&[(3, 0.9), (0, 0.0)], 2, 2), 0);
    }

    fn assert_pauses(verdicts: &[PaceVerdict], share: f64, steps: u64) {
        let [PaceVerdict::Pauses(judged, paused)] = verdicts[..] else { panic!("{verdicts:?}") };
        assert!((judged - share).abs() < 1e-9 && paused == steps, "{verdicts:?}");
    }

    #[test]
    fn drafts_whose_tokens_cost_more_than_plain_ones_pause_longer_each_time() {
        let mut costs = RowCosts::default();
        // Two tokens for 25 ms: 12.5 ms a token against 10.
        assert_pauses(&window(&mut costs, 2, 0.025), 1.25, MIN_DRAFT_PAUSE);
        assert_eq!(costs.worth(&[(4, 0.9)], 1, 1), 0);
        // Another count of sequences is judged on its own.
        assert!(costs.worth(&[(4, 0.9)], 2, 2) > 0);
        for _ in 0..MIN_DRAFT_PAUSE {
            step(&mut costs, 1, 1, 1, 0.010);
        }
        assert!(costs.worth(&[(4, 0.9)], 1, 1) > 0, "the pause is over");
        assert_pauses(&window(&mut costs, 2, 0.025), 1.25, 2 * MIN_DRAFT_PAUSE);
    }

    #[test]
    fn drafts_whose_tokens_cost_less_go_on_through_a_step_the_os_held_up() {
        let mut costs = RowCosts::default();
        // Three tokens for 15 ms: 5 ms a token against 10.
        let verdicts = window(&mut costs, 3, 0.015);
        let [PaceVerdict::Pays(share)] = verdicts[..] else { panic!("{verdicts:?}") };
        assert!((share - 0.5).abs() < 1e-9);
        // Equal cost, and one drafted step held up for a second: clipped to three plain tokens.
        step(&mut costs, 1, 3, 2, 1.0);
        let verdicts = window(&mut costs, 2, 0.020);
        let [PaceVerdict::Pays(share)] = verdicts[..] else { panic!("{verdicts:?}") };
        assert!(share <= PACE_MARGIN, "{share}");
        assert!(costs.worth(&[(4, 0.9)], 1, 1) > 0);
    }
}
