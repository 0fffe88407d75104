//! Token sampling over a row of logits: repeat penalty, temperature, top-k, top-p, min-p, seed,
//! and the hook through which a constraint removes tokens before anything is drawn.
//!
//! Key types: [`SamplingConfig`], [`Sampler`], [`TokenConstraint`].
//! The constraint is consulted lazily: the unconstrained choice is made first and kept if the
//! constraint allows it; only when it is rejected are the allowed tokens gathered and the choice
//! redrawn among them. For greedy decoding this is exact; for random sampling it draws from the
//! constrained distribution too (P(t) = p(t) / P(allowed)), which is why llama.cpp does the same.
//! Cost: one pass over the vocabulary per token (a vectorised argmax, or a one-pass bounded top-k
//! that never materialises the whole vocabulary), plus a pass over the allowed tokens when the
//! first choice is rejected. Only `top_k = 0` with a temperature sorts the whole vocabulary.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a request asks of the sampler. `temperature <= 0` means greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    pub temperature: f32,
    /// 0 keeps every token.
    pub top_k: usize,
    /// 1.0 keeps every token.
    pub top_p: f32,
    /// 0.0 keeps every token.
    pub min_p: f32,
    /// 1.0 is no penalty.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// Something that decides which tokens may come next (the constraint engine, through an adapter).
pub trait TokenConstraint {
    /// Whether `token` may be sampled now. Called on the sampler's first choice.
    fn allows(&mut self, token: u32) -> bool;
    /// Calls `visit` with every token that may be sampled now.
    fn for_each_allowed(&mut self, visit: &mut dyn FnMut(u32));
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SampleError {
    #[error("the constraint allows no token at this point")]
    NothingAllowed,
    #[error("the logits row is empty")]
    EmptyLogits,
}

/// One per sequence: holds the random state and the recent tokens for the penalty.
#[derive(Debug)]
pub struct Sampler {
    config: SamplingConfig,
    rng: StdRng,
    recent: std::collections::VecDeque<u32>,
    /// Reused between steps so sampling allocates nothing in the steady state.
    candidates: Vec<(u32, f32)>,
    allowed: Vec<u32>,
    penalized_row: Vec<f32>,
}

impl Sampler {
    pub fn new(config: SamplingConfig) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        Self { config, rng, recent: Default::default(), candidates: Vec::new(), allowed: Vec::new(), penalized_row: Vec::new() }
    }

    pub fn config(&self) -> &SamplingConfig {
        &self.config
    }

    /// Records a token that entered the sequence (prompt or generated) for the repeat penalty.
    pub fn remember(&mut self, token: u32) {
        if self.config.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.config.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Chooses the next token from `logits`, honouring `constraint` if there is one.
    pub fn sample(
        &mut self,
        logits: &[f32],
        constraint: Option<&mut dyn TokenConstraint>,
    ) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        if self.config.repeat_penalty == 1.0 || self.recent.is_empty() {
            return self.sample_row(logits, constraint);
        }
        // Penalize a copy: touching only the recent tokens keeps the pass over the row plain.
        let mut row = std::mem::take(&mut self.penalized_row);
        row.clear();
        row.extend_from_slice(logits);
        let penalty = self.config.repeat_penalty;
        for token in self.recent.iter() {
            if let Some(logit) = row.get_mut(*token as usize) {
                // Applied once per distinct token even if it occurs several times.
                if *logit == logits[*token as usize] {
                    *logit = if *logit > 0.0 { *logit / penalty } else { *logit * penalty };
                }
            }
        }
        let result = self.sample_row(&row, constraint);
        self.penalized_row = row;
        result
    }

    fn sample_row(
        &mut self,
        logits: &[f32],
        constraint: Option<&mut dyn TokenConstraint>,
    ) -> Result<u32, SampleError> {
        let first = self.choose(logits, None)?;
        let Some(constraint) = constraint else {
            return Ok(first);
        };
        if constraint.allows(first) {
            return Ok(first);
        }
        let mut allowed = std::mem::take(&mut self.allowed);
        allowed.clear();
        constraint.for_each_allowed(&mut |token| {
            if (token as usize) < logits.len() {
                allowed.push(token);
            }
        });
        let result = if allowed.is_empty() {
            Err(SampleError::NothingAllowed)
        } else {
            self.choose(logits, Some(&allowed))
        };
        self.allowed = allowed;
        result
    }

    /// Picks among `only` (or the whole row when `None`).
    fn choose(&mut self, logits: &[f32], only: Option<&[u32]>) -> Result<u32, SampleError> {
        if self.config.temperature <= 0.0 {
            return argmax(logits, only);
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        let top_k = self.config.top_k;
        match only {
            Some(tokens) => candidates.extend(tokens.iter().map(|t| (*t, logits[*t as usize]))),
            // With a top-k, gather only the k best in one pass instead of the whole vocabulary
            // (262,144 pairs for Gemma 3), which `draw` would then cut to k anyway.
            None if top_k > 0 && top_k < logits.len() => top_k_of(logits, top_k, &mut candidates),
            None => candidates.extend(logits.iter().enumerate().map(|(i, l)| (i as u32, *l))),
        }
        let chosen = self.draw(&mut candidates);
        self.candidates = candidates;
        chosen
    }

    /// Temperature, top-k, min-p and top-p over `candidates`, then one draw.
    fn draw(&mut self, candidates: &mut Vec<(u32, f32)>) -> Result<u32, SampleError> {
        candidates.retain(|(_, l)| l.is_finite());
        if candidates.is_empty() {
            return Err(SampleError::NothingAllowed);
        }
        let top_k = self.config.top_k;
        if top_k > 0 && top_k < candidates.len() {
            candidates.select_nth_unstable_by(top_k - 1, |a, b| b.1.total_cmp(&a.1));
            candidates.truncate(top_k);
        }
        candidates.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let max = candidates[0].1;
        let temperature = self.config.temperature;
        for candidate in candidates.iter_mut() {
            candidate.1 = ((candidate.1 - max) / temperature).exp();
        }
        // min-p: drop tokens far less likely than the best one (whose weight is 1).
        if self.config.min_p > 0.0 {
            let floor = self.config.min_p;
            candidates.retain(|(_, w)| *w >= floor);
        }
        let total: f64 = candidates.iter().map(|(_, w)| *w as f64).sum();
        // top-p: keep the smallest prefix whose mass reaches top_p.
        if self.config.top_p < 1.0 {
            let target = total * self.config.top_p.max(0.0) as f64;
            let mut mass = 0.0f64;
            let mut keep = candidates.len();
            for (i, (_, weight)) in candidates.iter().enumerate() {
                mass += *weight as f64;
                if mass >= target {
                    keep = i + 1;
                    break;
                }
            }
            candidates.truncate(keep.max(1));
        }
        let total: f64 = candidates.iter().map(|(_, w)| *w as f64).sum();
        let mut remaining = self.rng.gen::<f64>() * total;
        for (token, weight) in candidates.iter() {
            remaining -= *weight as f64;
            if remaining <= 0.0 {
                return Ok(*token);
            }
        }
        Ok(candidates[candidates.len() - 1].0)
    }
}

/// The `k` highest finite logits of `logits` (unordered) into `out`, in one pass: a value enters
/// the buffer only when it beats the k-th best seen so far, and the buffer is cut back to k
/// whenever it reaches 2k, so the pass costs one comparison per token and a few selections.
fn top_k_of(logits: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    let limit = 2 * k.max(32);
    let mut threshold = f32::NEG_INFINITY;
    for (index, logit) in logits.iter().enumerate() {
        if *logit > threshold && logit.is_finite() {
            out.push((index as u32, *logit));
            if out.len() == limit {
                out.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
                out.truncate(k);
                threshold = out[k - 1].1;
            }
        }
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
        out.truncate(k);
    }
}

/// The highest logit among `only` (or the whole row); NaN never wins, the first of equals does.
fn argmax(logits: &[f32], only: Option<&[u32]>) -> Result<u32, SampleError> {
    if only.is_none() {
        // Two plain passes the compiler vectorises, instead of one branchy pass: `f32::max`
        // skips NaN, and the first position holding the maximum is the same token the
        // one-pass version keeps.
        let max = logits.iter().fold(f32::NEG_INFINITY, |best, logit| best.max(*logit));
        return logits.iter().position(|logit| *logit == max).map(|i| i as u32).ok_or(SampleError::NothingAllowed);
    }
    let mut best: Option<(u32, f32)> = None;
    let mut consider = |token: u32, logit: f32| {
        if !logit.is_nan() && best.is_none_or(|(_, b)| logit > b) {
            best = Some((token, logit));
        }
    };
    match only {
        Some(tokens) => tokens.iter().for_each(|t| consider(*t, logits[*t as usize])),
        None => logits.iter().enumerate().for_each(|(i, l)| consider(i as u32, *l)),
    }
    best.map(|(t, _)| t).ok_or(SampleError::NothingAllowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlyEven;
    impl TokenConstraint for OnlyEven {
        fn allows(&mut self, token: u32) -> bool {
            token % 2 == 0
        }
        fn for_each_allowed(&mut self, visit: &mut dyn FnMut(u32)) {
            (0..10).filter(|t| t % 2 == 0).for_each(visit);
        }
    }

    fn greedy() -> SamplingConfig {
        SamplingConfig { temperature: 0.0, ..Default::default() }
    }

    #[test]
    fn greedy_takes_the_best_allowed_token() {
        let logits = [0.0, 5.0, 1.0, 4.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let mut sampler = Sampler::new(greedy());
        assert_eq!(sampler.sample(&logits, None), Ok(1));
        assert_eq!(sampler.sample(&logits, Some(&mut OnlyEven)), Ok(4));
    }

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let config = SamplingConfig { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 7, ..Default::default() };
        let draw = |config: SamplingConfig| {
            let mut sampler = Sampler::new(config);
            (0..50).map(|_| sampler.sample(&logits, None).unwrap()).collect::<Vec<_>>()
        };
        let first = draw(config.clone());
        assert_eq!(first, draw(config.clone()));
        assert_ne!(first, draw(SamplingConfig { seed: 8, ..config }));
        assert!(first.iter().collect::<std::collections::HashSet<_>>().len() > 3);
    }

    #[test]
    fn constrained_random_sampling_never_leaves_the_allowed_set() {
        let logits: Vec<f32> = (0..10).map(|i| 10.0 - i as f32).collect();
        let config = SamplingConfig { temperature: 2.0, top_k: 0, top_p: 1.0, seed: 3, ..Default::default() };
        let mut sampler = Sampler::new(config);
        for _ in 0..200 {
            let token = sampler.sample(&logits, Some(&mut OnlyEven)).unwrap();
            assert_eq!(token % 2, 0);
        }
    }

    #[test]
    fn top_k_one_is_greedy_and_repeat_penalty_demotes_recent_tokens() {
        let logits = [1.0, 3.0, 2.9];
        let config = SamplingConfig { temperature: 1.0, top_k: 1, seed: 1, ..Default::default() };
        let mut sampler = Sampler::new(config);
        assert_eq!(sampler.sample(&logits, None), Ok(1));
        let mut penalized = Sampler::new(SamplingConfig { repeat_penalty: 1.5, ..greedy() });
        penalized.remember(1);
        assert_eq!(penalized.sample(&logits, None), Ok(2));
    }

    #[test]
    fn the_one_pass_top_k_keeps_exactly_the_k_best_finite_logits() {
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 40.0 - 20.0
        };
        let mut logits: Vec<f32> = (0..50_000).map(|_| next()).collect();
        logits[17] = f32::NAN;
        logits[99] = f32::INFINITY;
        logits[1234] = f32::NEG_INFINITY;
        for k in [1, 5, 40, 100] {
            let mut fast = Vec::new();
            top_k_of(&logits, k, &mut fast);
            let mut reference: Vec<(u32, f32)> =
                logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, l)| (i as u32, *l)).collect();
            // Ties (the pseudo-random row has a few) are ordered by token id on both sides.
            let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
            reference.sort_by(order);
            reference.truncate(k);
            fast.sort_by(order);
            assert_eq!(fast, reference, "k = {k}");
        }
    }

    #[test]
    fn argmax_skips_nan_and_keeps_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0, f32::NAN], None), Ok(2));
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY], None), Ok(0));
        assert_eq!(argmax(&[f32::NAN, f32::NAN], None), Err(SampleError::NothingAllowed));
        assert_eq!(argmax(&[5.0, 1.0, 7.0], Some(&[0, 1])), Ok(0));
    }

    #[test]
    fn a_constraint_that_allows_nothing_is_an_error() {
        struct Nothing;
        impl TokenConstraint for Nothing {
            fn allows(&mut self, _: u32) -> bool {
                false
            }
            fn for_each_allowed(&mut self, _: &mut dyn FnMut(u32)) {}
        }
        let mut sampler = Sampler::new(greedy());
        assert_eq!(sampler.sample(&[1.0, 2.0], Some(&mut Nothing)), Err(SampleError::NothingAllowed));
        assert_eq!(sampler.sample(&[], None), Err(SampleError::EmptyLogits));
    }
}
