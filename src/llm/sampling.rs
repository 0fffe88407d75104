//! Token sampling over a row of logits: repeat penalty, temperature, top-k, top-p, min-p, seed,
//! and the hook through which a constraint removes tokens before anything is drawn.
//!
//! Key types: [`SamplingConfig`], [`Sampler`], [`TokenConstraint`].
//! The constraint is consulted lazily: the unconstrained choice is made first and kept if the
//! constraint allows it. When it is refused, the best-ranked tokens of the row are checked one
//! by one (16 for greedy, 4 x top-k for sampling), which settles most steps without the full set
//! of allowed tokens, whose first computation for a state walks the whole token trie; only when
//! they do not settle it is the full set asked for, as a bitset applied to the row in bulk.
//! Both are exact: greedy takes the highest allowed logit (the lowest id of equals), sampling
//! draws from the constrained distribution (P(t) = p(t) / P(allowed), as llama.cpp does).
//! Cost: one pass over the vocabulary per token (a vectorised argmax, or a one-pass bounded top-k
//! that never materialises the whole vocabulary); a refused choice adds one more such pass and a
//! few constraint checks, and a pass over the allowed bitset when those do not settle it. Only
//! `top_k = 0` with a temperature sorts the whole vocabulary.

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
    /// Every token that may be sampled now, as bits: token `t` is bit `t % 64` of word `t / 64`;
    /// tokens past the last word are not allowed.
    fn allowed_words(&mut self) -> &[u64];
}

/// How many of the best-ranked tokens a refused greedy choice is retried with before the full
/// set of allowed tokens is computed: enough for the usual refusal (the model wants prose or a
/// fence where the grammar wants a brace), few enough that a step whose allowed tokens are all
/// far down the ranking loses little.
const GREEDY_RETRIES: usize = 16;
/// For top-k sampling: how many best-ranked tokens per wanted candidate are checked.
const SAMPLED_RETRIES_PER_CANDIDATE: usize = 4;

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
    ranked: Vec<(u32, f32)>,
    penalized_row: Vec<f32>,
}

impl Sampler {
    pub fn new(config: SamplingConfig) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        Self {
            config,
            rng,
            recent: Default::default(),
            candidates: Vec::new(),
            ranked: Vec::new(),
            penalized_row: Vec::new(),
        }
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
        if let Some(settled) = self.retry_best_ranked(logits, first, constraint) {
            return settled;
        }
        let words = constraint.allowed_words();
        if self.config.temperature <= 0.0 {
            return argmax_allowed(logits, words);
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        candidates.extend(set_bits(words, logits.len()).map(|token| (token, logits[token as usize])));
        let result = self.draw(&mut candidates);
        self.candidates = candidates;
        result
    }

    /// After `refused`: the best-ranked tokens of the row, checked one by one. `None` when they
    /// do not settle the step (the full set of allowed tokens is needed then).
    ///
    /// Exact because the ranking (higher logit first, lower id first among equals) is total
    /// and every token left out ranks below every token checked: for greedy the first allowed
    /// one is the argmax over the allowed tokens; for top-k the first k allowed ones are the k
    /// best allowed, the set `draw` would keep from all of them (which of equal logits at the
    /// k-th place is kept may differ). With `top_k = 0` every allowed token is a candidate, so
    /// nothing short of the full set settles it.
    fn retry_best_ranked(
        &mut self,
        logits: &[f32],
        refused: u32,
        constraint: &mut dyn TokenConstraint,
    ) -> Option<Result<u32, SampleError>> {
        let greedy = self.config.temperature <= 0.0;
        let (wanted, retries) = match (greedy, self.config.top_k) {
            (true, _) => (1, GREEDY_RETRIES),
            (false, 0) => return None,
            (false, k) => (k, k.saturating_mul(SAMPLED_RETRIES_PER_CANDIDATE)),
        };
        let mut ranked = std::mem::take(&mut self.ranked);
        // Greedy may pick an infinite logit; `draw` drops non-finite ones, so sampling skips them.
        let complete = best_ranked(logits, retries, greedy, &mut ranked);
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        for &(token, logit) in ranked.iter() {
            if token != refused && constraint.allows(token) {
                candidates.push((token, logit));
                if candidates.len() == wanted {
                    break;
                }
            }
        }
        let result = if candidates.len() < wanted && !complete {
            None
        } else if candidates.is_empty() {
            Some(Err(SampleError::NothingAllowed))
        } else if greedy {
            Some(Ok(candidates[0].0))
        } else {
            Some(self.draw(&mut candidates))
        };
        self.ranked = ranked;
        self.candidates = candidates;
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
            None if top_k > 0 && top_k < logits.len() => {
                best_ranked(logits, top_k, false, &mut candidates);
            }
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

/// Higher logit first, then lower token id (NaN is never ranked).
fn rank(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0))
}

/// The `n` best-ranked tokens of `logits` (see [`rank`]), sorted, into `out`; NaN never, and
/// infinite logits only with `keep_infinite`. Returns whether `out` holds every such token.
/// One pass: a block of 64 logits whose maximum cannot beat the n-th best so far is skipped
/// whole (a vectorised max), otherwise its tokens enter a buffer cut back to n when it reaches
/// 2n; a logit equal to the cut's last one comes later in id order, so it ranks below it.
fn best_ranked(logits: &[f32], n: usize, keep_infinite: bool, out: &mut Vec<(u32, f32)>) -> bool {
    out.clear();
    let n = n.max(1);
    let limit = 2 * n.max(32);
    let mut floor = f32::NEG_INFINITY;
    let mut cut = false;
    for (block_index, block) in logits.chunks(64).enumerate() {
        let block_max = block.iter().fold(f32::NEG_INFINITY, |best, logit| best.max(*logit));
        if cut && block_max <= floor {
            continue;
        }
        let base = block_index * 64;
        for (offset, &logit) in block.iter().enumerate() {
            if logit.is_nan() || (cut && logit <= floor) || (!keep_infinite && logit.is_infinite()) {
                continue;
            }
            out.push(((base + offset) as u32, logit));
            if out.len() == limit {
                out.select_nth_unstable_by(n - 1, rank);
                out.truncate(n);
                floor = out[n - 1].1;
                cut = true;
            }
        }
    }
    if out.len() > n {
        out.select_nth_unstable_by(n - 1, rank);
        out.truncate(n);
        cut = true;
    }
    out.sort_unstable_by(rank);
    !cut
}

/// Log-probabilities (natural log) at one position of a logits row: the log-softmax of the row
/// as it is (the model's own distribution: no penalty, temperature or mask applied), or, with
/// `allowed` (bits as [`TokenConstraint::allowed_words`]), of the allowed tokens only,
/// renormalised over them. Returns `token`'s log-probability (`-inf` when it is not allowed)
/// and the `top` most likely tokens with theirs, most likely first (lower id first among
/// equals). Computed in f64 so that a 262k-token row sums without drift.
/// Cost: two passes over the row (max, then sum of exponentials) and a bounded top-`top` pass.
pub fn log_probabilities(logits: &[f32], token: u32, top: usize, allowed: Option<&[u64]>) -> (f32, Vec<(u32, f32)>) {
    let is_allowed = |t: usize| allowed.is_none_or(|words| words.get(t / 64).is_some_and(|w| w >> (t % 64) & 1 == 1));
    let finite = |t: usize, logit: f32| logit.is_finite() && is_allowed(t);
    let max = logits
        .iter()
        .enumerate()
        .filter(|(t, l)| finite(*t, **l))
        .fold(f32::NEG_INFINITY, |best, (_, l)| best.max(*l));
    if max == f32::NEG_INFINITY {
        return (f32::NEG_INFINITY, Vec::new());
    }
    let sum: f64 = logits
        .iter()
        .enumerate()
        .filter(|(t, l)| finite(*t, **l))
        .map(|(_, l)| f64::from(*l - max).exp())
        .sum();
    let log_total = f64::from(max) + sum.ln();
    let log_probability = |t: usize| -> f32 {
        match logits.get(t) {
            Some(&logit) if finite(t, logit) => (f64::from(logit) - log_total) as f32,
            _ => f32::NEG_INFINITY,
        }
    };
    let mut ranked = Vec::new();
    if top > 0 {
        match allowed {
            None => {
                best_ranked(logits, top, false, &mut ranked);
            }
            Some(words) => {
                ranked.extend(set_bits(words, logits.len()).map(|t| (t, logits[t as usize])).filter(|(_, l)| l.is_finite()));
                ranked.sort_unstable_by(rank);
                ranked.truncate(top);
            }
        }
    }
    let alternatives = ranked.iter().map(|&(t, _)| (t, log_probability(t as usize))).collect();
    (log_probability(token as usize), alternatives)
}

/// The tokens set in `words` that index into a row of `row_len` logits, in id order.
fn set_bits(words: &[u64], row_len: usize) -> impl Iterator<Item = u32> + '_ {
    words.iter().enumerate().flat_map(move |(index, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let bit = rest.trailing_zeros();
            rest &= rest - 1;
            Some(index as u32 * 64 + bit)
        })
        .take_while(move |token| (*token as usize) < row_len)
    })
}

/// The highest logit among the tokens set in `words`, as [`argmax`] over them: NaN never wins,
/// the lowest id of equals does. A block of 64 allowed tokens is reduced with a vectorised max.
fn argmax_allowed(logits: &[f32], words: &[u64]) -> Result<u32, SampleError> {
    let mut best: Option<(u32, f32)> = None;
    for (block_index, (block, &word)) in logits.chunks(64).zip(words).enumerate() {
        if word == 0 {
            continue;
        }
        let base = block_index * 64;
        if word == u64::MAX && block.len() == 64 {
            let max = block.iter().fold(f32::NEG_INFINITY, |best, logit| best.max(*logit));
            if best.is_some_and(|(_, b)| max <= b) {
                continue;
            }
            // None when the whole block is NaN.
            if let Some(offset) = block.iter().position(|logit| *logit == max) {
                best = Some(((base + offset) as u32, max));
            }
            continue;
        }
        let mut rest = word;
        while rest != 0 {
            let bit = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let Some(&logit) = block.get(bit) else { break };
            if !logit.is_nan() && best.is_none_or(|(_, b)| logit > b) {
                best = Some(((base + bit) as u32, logit));
            }
        }
    }
    best.map(|(t, _)| t).ok_or(SampleError::NothingAllowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The even tokens below 10.
    struct OnlyEven;
    impl TokenConstraint for OnlyEven {
        fn allows(&mut self, token: u32) -> bool {
            token < 10 && token % 2 == 0
        }
        fn allowed_words(&mut self) -> &[u64] {
            &[0b01_0101_0101]
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
            best_ranked(&logits, k, false, &mut fast);
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
            fn allowed_words(&mut self) -> &[u64] {
                &[]
            }
        }
        let mut sampler = Sampler::new(greedy());
        assert_eq!(sampler.sample(&[1.0, 2.0], Some(&mut Nothing)), Err(SampleError::NothingAllowed));
        assert_eq!(sampler.sample(&[], None), Err(SampleError::EmptyLogits));
    }

    /// A constraint over an explicit bitset.
    struct Bits(Vec<u64>);
    impl TokenConstraint for Bits {
        fn allows(&mut self, token: u32) -> bool {
            self.0.get(token as usize / 64).is_some_and(|word| (word >> (token % 64)) & 1 == 1)
        }
        fn allowed_words(&mut self) -> &[u64] {
            &self.0
        }
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn unit(&mut self) -> f64 {
            self.next() as f64 / (1u64 << 31) as f64
        }
    }

    /// A row with many equal logits, NaN, infinities and both zeros, and `density` of its
    /// tokens allowed (each allowed block of 64 sometimes whole, to reach the dense path).
    fn tied_case(random: &mut Lcg, vocab: usize, density: f64) -> (Vec<f32>, Bits) {
        let logits = (0..vocab)
            .map(|_| match random.next() % 40 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                3 => -0.0,
                r => (r % 9) as f32 - 4.0,
            })
            .collect();
        let mut words = vec![0u64; vocab.div_ceil(64)];
        for (index, word) in words.iter_mut().enumerate() {
            if random.unit() < density * density {
                *word = u64::MAX;
                continue;
            }
            for bit in 0..64 {
                if index * 64 + bit < vocab && random.unit() < density {
                    *word |= 1 << bit;
                }
            }
        }
        (logits, Bits(words))
    }

    /// The definition: the highest non-NaN logit among the allowed tokens, the lowest id first.
    fn argmax_by_definition(logits: &[f32], allowed: &mut Bits) -> Result<u32, SampleError> {
        let mut best: Option<(u32, f32)> = None;
        for (token, logit) in logits.iter().enumerate() {
            let token = token as u32;
            if allowed.allows(token) && !logit.is_nan() && best.is_none_or(|(_, b)| *logit > b) {
                best = Some((token, *logit));
            }
        }
        best.map(|(t, _)| t).ok_or(SampleError::NothingAllowed)
    }

    #[test]
    fn constrained_greedy_is_the_argmax_over_the_allowed_tokens() {
        let mut random = Lcg(99);
        for vocab in [1, 5, 63, 64, 65, 200, 1000, 5000] {
            for density in [0.0, 0.0005, 0.01, 0.2, 0.9, 1.0] {
                for _ in 0..40 {
                    let (logits, mut allowed) = tied_case(&mut random, vocab, density);
                    let expected = argmax_by_definition(&logits, &mut allowed);
                    let words = allowed.0.clone();
                    assert_eq!(argmax_allowed(&logits, &words), expected, "bitset pass, {vocab} tokens");
                    let mut sampler = Sampler::new(greedy());
                    assert_eq!(sampler.sample(&logits, Some(&mut allowed)), expected, "{vocab} tokens, {density}");
                }
            }
        }
    }

    #[test]
    fn constrained_top_k_sampling_draws_what_a_draw_over_all_allowed_tokens_draws() {
        let mut random = Lcg(7);
        for vocab in [50, 3000] {
            for density in [0.002, 0.05, 0.5, 1.0] {
                for (top_k, top_p, min_p) in [(1, 1.0, 0.0), (5, 0.9, 0.0), (40, 0.95, 0.05), (0, 0.9, 0.0)] {
                    // Distinct logits: which of equal logits at the k-th place is kept is the
                    // one thing the two ways may choose differently.
                    let mut logits: Vec<f32> = (0..vocab).map(|i| i as f32 * 0.003 - 4.0).collect();
                    for i in (1..vocab).rev() {
                        logits.swap(i, random.next() as usize % (i + 1));
                    }
                    let (_, mut allowed) = tied_case(&mut random, vocab, density);
                    let seed = random.next();
                    let config = SamplingConfig { temperature: 0.8, top_k, top_p, min_p, seed, ..Default::default() };
                    let mut fast = Sampler::new(config.clone());
                    let mut reference = Sampler::new(config);
                    let allowed_tokens: Vec<u32> = (0..vocab as u32).filter(|t| allowed.allows(*t)).collect();
                    for draw in 0..20 {
                        let expected = match reference.choose(&logits, None) {
                            Ok(first) if allowed.allows(first) => Ok(first),
                            Ok(_) if allowed_tokens.is_empty() => Err(SampleError::NothingAllowed),
                            Ok(_) => reference.choose(&logits, Some(&allowed_tokens)),
                            Err(error) => Err(error),
                        };
                        assert_eq!(
                            fast.sample(&logits, Some(&mut allowed)),
                            expected,
                            "{vocab} tokens, density {density}, top-k {top_k}, draw {draw}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn best_ranked_keeps_the_n_best_by_logit_then_id() {
        let mut random = Lcg(3);
        for vocab in [10, 64, 500, 20_000] {
            let (logits, _) = tied_case(&mut random, vocab, 0.0);
            for keep_infinite in [true, false] {
                let mut reference: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| !l.is_nan() && (keep_infinite || l.is_finite()))
                    .map(|(i, l)| (i as u32, *l))
                    .collect();
                reference.sort_by(rank);
                for n in [1, 16, 40, 160, 30_000] {
                    let mut fast = Vec::new();
                    let complete = best_ranked(&logits, n, keep_infinite, &mut fast);
                    assert_eq!(complete, reference.len() <= n, "{vocab} tokens, n = {n}");
                    let expected = &reference[..n.min(reference.len())];
                    // Compare bit patterns: -0.0 and 0.0 are equal logits but distinct values.
                    let bits = |list: &[(u32, f32)]| list.iter().map(|(t, l)| (*t, l.to_bits())).collect::<Vec<_>>();
                    assert_eq!(bits(&fast), bits(expected), "{vocab} tokens, n = {n}");
                }
            }
        }
    }

    #[test]
    fn log_probabilities_are_a_log_softmax_with_sorted_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, f32::NEG_INFINITY];
        let total: f64 = logits.iter().filter(|l| l.is_finite()).map(|l| f64::from(*l).exp()).sum();
        let (chosen, top) = log_probabilities(&logits, 2, 3, None);
        assert!((f64::from(chosen) - (2.0 - total.ln())).abs() < 1e-6);
        let ids: Vec<u32> = top.iter().map(|(t, _)| *t).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
        let sum: f64 = (0..logits.len()).map(|t| f64::from(log_probabilities(&logits, t as u32, 0, None).0).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        // Under a mask of tokens 0 and 2 the distribution is renormalised over them.
        let allowed = [0b101u64];
        let (masked, top) = log_probabilities(&logits, 2, 5, Some(&allowed));
        let pair = (1f64.exp() + 2f64.exp()).ln();
        assert!((f64::from(masked) - (2.0 - pair)).abs() < 1e-6);
        assert_eq!(top.iter().map(|(t, _)| *t).collect::<Vec<_>>(), [2, 0]);
        assert_eq!(log_probabilities(&logits, 1, 0, Some(&allowed)).0, f32::NEG_INFINITY);
    }
}
