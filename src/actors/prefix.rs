//! Which KV sequence a new request starts from: every slot remembers the tokens its KV cache
//! holds (the prompt and answer of the last request that ran there, kept after it finished),
//! and a request whose prompt starts with some of them reuses that longest common prefix
//! instead of prefilling it again (what llama-server's `cache_prompt` and vLLM's automatic
//! prefix caching do). A slot can also belong to a named context, whose tokens stay there.
//!
//! A request that wants its prompt's log-probabilities (echo) needs the model's distribution at
//! every prompt position, and a position served from the cache was never computed for it. So a
//! slot also keeps the scores a scoring request computed there ([`PositionScore`]: the next
//! token's log-probability and the top alternatives), and such a request reuses only the part of
//! a prefix whose positions are scored: the K choices of one question share the question's
//! scored prefix, and only their own continuation is decoded (one position more, the last
//! shared one, when the first scoring request stopped exactly there and the choice's token is
//! not among the alternatives that row keeps: [`PositionScore::for_next`]).
//!
//! Requests that arrive together (the K choices of one question as K concurrent requests or one
//! array prompt) would each find nothing cached and decode the shared question K times, so a
//! request that shares at least [`MIN_SHARED_PREFILL`] more tokens with a request still
//! prefilling than any slot holds waits in the queue until that prefill has decoded them
//! ([`worth_waiting`]), and is then placed on a copy of them. A waiting scoring request has the
//! prefill score their last shared row for its own next token too, from the same logits
//! ([`SlotCache::want_score`]), so that it reuses every shared row.
//!
//! A request sent with llama-server's `cache_prompt: false` reuses nothing: it is placed on the
//! free slot whose contents matter least, cleared ([`SlotCache::place_cold`]), and decodes its
//! whole prompt; it neither waits for a prefill nor is waited for.
//!
//! Key types: [`SlotCache`] (the tokens per slot), [`Placement`] (where a request runs and what
//! it reuses), [`PositionScore`], [`Prefilling`] and [`Wait`] (a prefill another request waits
//! for). Pure bookkeeping, no llama.cpp: the worker applies a placement with a sequence truncate
//! or copy. Cost: one prefix comparison per slot and admitted request
//! (O(slots × prompt)), one more per live prefill and waiting request while it waits, and
//! the token lists (4 bytes a token per slot); a scored position keeps
//! about 200 bytes (its top [`crate::core::MAX_TOP_LOGPROBS`] alternatives).

/// What a scoring request computed at one position of a slot's tokens: the distribution after
/// tokens `0..=k` (row `k`), summarised.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionScore {
    /// The token that followed in the prompt it was computed for.
    pub next: u32,
    /// `next`'s log-probability.
    pub logprob: f32,
    /// The most likely tokens there, most likely first, with their log-probabilities.
    pub top: Vec<(u32, f32)>,
}

impl PositionScore {
    /// The same row scored for `next`: itself, or, when `next` is among its top alternatives
    /// (computed from the same logits, bit for bit what a decode for `next` gives), a score
    /// for it; `None` when the row must be decoded again.
    pub fn for_next(&self, next: u32) -> Option<PositionScore> {
        if self.next == next {
            return Some(self.clone());
        }
        let &(_, logprob) = self.top.iter().find(|(token, _)| *token == next)?;
        Some(PositionScore { next, logprob, top: self.top.clone() })
    }
}

/// What one slot's KV cache holds.
#[derive(Debug, Clone, Default)]
struct SlotKv {
    /// The tokens whose keys and values are in the sequence, position 0 first.
    tokens: Vec<u32>,
    /// How many of them, from the start, were decoded in batches through a prefill's kernels
    /// (prompts). Only those are reused: a token decoded alone or with a few rows (a generated
    /// one and its draft) goes through other kernels than a batched prefill, so its KV values
    /// differ in the last bits and a reused answer would no longer match a cold run token for
    /// token.
    reusable: usize,
    /// Step of the last admission into this slot, for least-recently-used choices.
    last_used: u64,
    /// The context whose tokens live here, and how many of them; a request that runs in the
    /// slot leaves them in place.
    owner: Option<(u64, usize)>,
    /// Rows `0..scores.len()` as a scoring request computed them (see [`PositionScore`]).
    scores: Vec<PositionScore>,
    /// Rows scored for another token than the slot's next one: row `k` for the token a
    /// request that waits for this prefill has after the `k + 1` tokens it shares (see
    /// [`SlotCache::want_score`]), from the same logits as the row's own score.
    branches: Vec<(usize, PositionScore)>,
    /// Rows, with a next token, that a waiting request wants scored when they are decoded.
    wanted: Vec<(usize, u32)>,
}

/// Where an admitted request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The free slot the request decodes in.
    pub slot: usize,
    /// Prompt tokens already in the KV cache (or copied into it); prefill starts after them.
    pub reuse: usize,
    /// Another slot the first `reuse` tokens are copied from; `None` when `slot` holds them.
    pub source: Option<usize>,
}

/// The tokens in every slot of one model's context.
#[derive(Debug, Clone)]
pub struct SlotCache {
    slots: Vec<SlotKv>,
    clock: u64,
}

/// The most tokens of `prompt` a placement may reuse: all but the last when it must decode one
/// (the first sample needs its logits).
fn reuse_limit(prompt: &[u32], must_decode: bool) -> usize {
    if must_decode {
        prompt.len().saturating_sub(1)
    } else {
        prompt.len()
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl SlotCache {
    pub fn new(slots: usize) -> Self {
        SlotCache {
            slots: vec![SlotKv::default(); slots],
            clock: 0,
        }
    }

    /// Where a request with `prompt` runs, given which slots are free (no request in them).
    /// `must_decode` keeps at least one prompt token to decode, since the first sample needs
    /// its logits. `context` is the request's context: its own slot is the preferred source.
    /// `None` when no slot is free.
    pub fn place(
        &self,
        prompt: &[u32],
        free: &[bool],
        must_decode: bool,
        context: Option<u64>,
    ) -> Option<Placement> {
        self.place_scoring(prompt, free, must_decode, context, false)
    }

    /// [`SlotCache::place`]; with `scoring`, a prefix is reused only as far as its positions
    /// are scored for this prompt.
    pub fn place_scoring(
        &self,
        prompt: &[u32],
        free: &[bool],
        must_decode: bool,
        context: Option<u64>,
        scoring: bool,
    ) -> Option<Placement> {
        let limit = reuse_limit(prompt, must_decode);
        let reusable = |index: usize| {
            let kv = &self.slots[index];
            let reuse = common_prefix(&kv.tokens[..kv.reusable], prompt).min(limit);
            if scoring { reuse.min(self.scored_rows(index, prompt)) } else { reuse }
        };
        // The best source anywhere (a running request's slot included), ties to a free one,
        // and to the request's own context.
        let best = (0..self.slots.len())
            .map(|i| {
                (
                    reusable(i),
                    self.owner(i) == context && context.is_some(),
                    free.get(i) == Some(&true),
                    i,
                )
            })
            .max_by_key(|&(reuse, own, is_free, i)| (reuse, own, is_free, std::cmp::Reverse(i)));
        let Some((reuse, _, _, source)) = best else {
            return None;
        };
        // Running in the source itself keeps what it holds up to `reuse`; an owned slot may
        // host a request only when the request keeps the owner's tokens.
        let in_place = free.get(source) == Some(&true)
            && self.slots[source]
                .owner
                .map_or(true, |(_, length)| reuse >= length);
        if in_place && reuse > 0 {
            return Some(Placement {
                slot: source,
                reuse,
                source: None,
            });
        }
        let destination = self.spare_slot(free, if reuse > 0 { Some(source) } else { None })?;
        if reuse == 0 {
            let limit = if scoring { limit.min(self.scored_rows(destination, prompt)) } else { limit };
            return Some(Placement {
                slot: destination,
                reuse: destination_reuse(self, destination, prompt, limit),
                source: None,
            });
        }
        if destination == source {
            // The only free slot is an owned one the request cannot keep: the owner loses it.
            return Some(Placement {
                slot: source,
                reuse,
                source: None,
            });
        }
        Some(Placement {
            slot: destination,
            reuse,
            source: Some(source),
        })
    }

    /// Where a request that reuses nothing (llama-server's `cache_prompt: false`) runs: the free
    /// slot whose contents matter least, cleared, so that it decodes its whole prompt.
    pub fn place_cold(&self, free: &[bool]) -> Option<Placement> {
        let slot = self.spare_slot(free, None)?;
        Some(Placement { slot, reuse: 0, source: None })
    }

    /// The free slot whose contents matter least: unowned before owned, then least recently used.
    fn spare_slot(&self, free: &[bool], except: Option<usize>) -> Option<usize> {
        (0..self.slots.len())
            .filter(|&i| free.get(i) == Some(&true) && Some(i) != except)
            .min_by_key(|&i| (self.slots[i].owner.is_some(), self.slots[i].last_used))
            .or_else(|| except.filter(|&i| free.get(i) == Some(&true)))
    }

    /// Records an admission: the slot now holds its first `reuse` prompt tokens (copied from
    /// `source` or kept from before). An owned slot that a request keeps the owner's tokens of
    /// stays owned; otherwise the ownership ends with its tokens.
    pub fn admit(&mut self, placement: Placement, prompt: &[u32]) {
        self.clock += 1;
        // Rows below `reuse` follow tokens the prompt shares: their scores hold, but for the
        // last one, which may have scored another next token than the prompt's (then a branch
        // scored for the prompt's token, or its top alternatives, serve).
        let held = &self.slots[placement.source.unwrap_or(placement.slot)];
        let mut scores = held.scores[..held.scores.len().min(placement.reuse)].to_vec();
        if let Some(last) = scores.len().checked_sub(1) {
            match prompt.get(last + 1) {
                Some(&next) if scores[last].next != next => {
                    let branch = held.branches.iter().find(|(row, score)| *row == last && score.next == next);
                    match branch.map(|(_, score)| score.clone()).or_else(|| scores[last].for_next(next)) {
                        Some(score) => scores[last] = score,
                        None => {
                            scores.pop();
                        }
                    }
                }
                _ => {}
            }
        }
        let slot = &mut self.slots[placement.slot];
        slot.scores = scores;
        slot.branches.clear();
        slot.wanted.clear();
        slot.tokens.clear();
        slot.tokens.extend_from_slice(&prompt[..placement.reuse]);
        slot.reusable = placement.reuse;
        slot.last_used = self.clock;
        if slot
            .owner
            .is_some_and(|(_, length)| placement.reuse < length)
        {
            slot.owner = None;
        }
    }

    /// Tokens just decoded into `slot`, after the ones it held; `batched` when the decode went
    /// through the kernels of a batched prefill.
    pub fn extend(&mut self, slot: usize, tokens: &[u32], batched: bool) {
        if let Some(kv) = self.slots.get_mut(slot) {
            if batched && kv.reusable == kv.tokens.len() {
                kv.reusable += tokens.len();
            }
            kv.tokens.extend_from_slice(tokens);
        }
    }

    /// The slot's KV state is unknown or cleared.
    pub fn forget(&mut self, slot: usize) {
        if let Some(kv) = self.slots.get_mut(slot) {
            *kv = SlotKv {
                last_used: kv.last_used,
                ..SlotKv::default()
            };
        }
    }

    /// Cuts the slot's tokens to `length` (the owner's tokens after a request that ran in it).
    pub fn truncate(&mut self, slot: usize, length: usize) {
        if let Some(kv) = self.slots.get_mut(slot) {
            kv.tokens.truncate(length);
            kv.reusable = kv.reusable.min(length);
            kv.scores.truncate(length);
            kv.branches.retain(|(row, _)| *row < length);
            kv.wanted.retain(|(row, _)| *row < length);
        }
    }

    /// How many rows from the start of `slot` are scored for `prompt`: each row's score was
    /// computed for the token `prompt` has next, or has that token among its top alternatives
    /// (the rows' own tokens are checked by the prefix comparison).
    /// A row scored for another next token (a branch) counts when it is `prompt`'s.
    pub fn scored_rows(&self, slot: usize, prompt: &[u32]) -> usize {
        self.slots.get(slot).map_or(0, |kv| {
            let scored = |(k, score): &(usize, &PositionScore)| prompt.get(k + 1).is_some_and(|&next| score.for_next(next).is_some());
            let rows = kv.scores.iter().enumerate().take_while(scored).count();
            let branch = rows < kv.scores.len()
                && kv.branches.iter().any(|(row, score)| *row == rows && prompt.get(rows + 1) == Some(&score.next));
            rows + usize::from(branch)
        })
    }

    /// A request waiting for `slot`'s prefill shares its first `row + 1` tokens and has `next`
    /// after them: row `row` is to be scored for `next` too when it is decoded.
    pub fn want_score(&mut self, slot: usize, row: usize, next: u32) {
        if let Some(kv) = self.slots.get_mut(slot) {
            if row >= kv.scores.len() && !kv.wanted.contains(&(row, next)) {
                kv.wanted.push((row, next));
            }
        }
    }

    /// The wanted rows of `slot` (see [`SlotCache::want_score`]) among `rows`, with their next token.
    pub fn wanted_scores(&self, slot: usize, rows: std::ops::Range<usize>) -> Vec<(usize, u32)> {
        self.slots.get(slot).map_or(Vec::new(), |kv| kv.wanted.iter().copied().filter(|(row, _)| rows.contains(row)).collect())
    }

    /// Row `row` of `slot` scored for a wanted next token.
    pub fn add_branch_score(&mut self, slot: usize, row: usize, score: PositionScore) {
        if let Some(kv) = self.slots.get_mut(slot) {
            kv.wanted.retain(|&(wanted, next)| (wanted, next) != (row, score.next));
            kv.branches.push((row, score));
        }
    }

    /// The scores of `slot`'s first rows.
    pub fn scores(&self, slot: usize) -> &[PositionScore] {
        self.slots.get(slot).map_or(&[], |kv| kv.scores.as_slice())
    }

    /// Scores of rows `from..` of `slot`, just computed; kept when they continue the scored rows.
    pub fn add_scores(&mut self, slot: usize, from: usize, scores: impl IntoIterator<Item = PositionScore>) {
        if let Some(kv) = self.slots.get_mut(slot) {
            if kv.scores.len() == from {
                kv.scores.extend(scores);
            }
        }
    }

    pub fn tokens(&self, slot: usize) -> &[u32] {
        self.slots.get(slot).map_or(&[], |kv| kv.tokens.as_slice())
    }

    pub fn owner(&self, slot: usize) -> Option<u64> {
        self.slots
            .get(slot)
            .and_then(|kv| kv.owner.map(|(key, _)| key))
    }

    /// How many tokens the owner of `slot` keeps there.
    pub fn owned_length(&self, slot: usize) -> Option<usize> {
        self.slots
            .get(slot)
            .and_then(|kv| kv.owner.map(|(_, length)| length))
    }

    /// The slot that holds `context`'s tokens, if any.
    pub fn slot_of(&self, context: u64) -> Option<usize> {
        self.slots
            .iter()
            .position(|kv| kv.owner.is_some_and(|(key, _)| key == context))
    }

    /// `slot` now holds all of `context`'s tokens (its whole token list); any other slot the
    /// context held is released (its tokens stay, for prefix reuse).
    pub fn give(&mut self, slot: usize, context: u64) {
        for kv in self.slots.iter_mut() {
            if kv.owner.is_some_and(|(key, _)| key == context) {
                kv.owner = None;
            }
        }
        if let Some(kv) = self.slots.get_mut(slot) {
            kv.owner = Some((context, kv.tokens.len()));
        }
    }

    /// The context no longer holds a slot (deleted, or parked elsewhere).
    pub fn release(&mut self, context: u64) {
        for kv in self.slots.iter_mut() {
            if kv.owner.is_some_and(|(key, _)| key == context) {
                kv.owner = None;
            }
        }
    }

    /// How many of the slot's tokens, from the start, were decoded in batches (see
    /// [`SlotKv::reusable`]).
    pub fn reusable(&self, slot: usize) -> usize {
        self.slots.get(slot).map_or(0, |kv| kv.reusable)
    }

    /// The slot's KV now holds exactly `tokens`, written back from saved state (which was
    /// taken from batched decodes, so all of them are reusable).
    pub fn restored(&mut self, slot: usize, tokens: &[u32]) {
        self.forget(slot);
        self.extend(slot, tokens, true);
    }

    /// Every owned slot with its owner's key.
    pub fn owners(&self) -> Vec<(usize, u64)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, kv)| kv.owner.map(|(key, _)| (slot, key)))
            .collect()
    }

    /// Slots held by contexts.
    pub fn owned_slots(&self) -> usize {
        self.slots.iter().filter(|kv| kv.owner.is_some()).count()
    }
}

/// The fewest tokens a request waits to reuse more of (see [`worth_waiting`]): fewer cost less
/// to decode again than the step the request would wait and the copy of their cells.
pub const MIN_SHARED_PREFILL: usize = 32;

/// A request in a slot still decoding its prompt, as a request that starts the same way sees it.
#[derive(Debug, Clone, Copy)]
pub struct Prefilling<'a> {
    /// The slot it decodes in.
    pub slot: usize,
    pub prompt: &'a [u32],
    /// Prompt tokens decoded so far.
    pub done: usize,
    /// Prompt tokens its prefill decodes in batches, so that its slot keeps them for reuse: all
    /// but the last, which is decoded as a generated token is, unless it samples nothing.
    pub batched: usize,
    /// Whether it scores its prompt, so that its rows serve a scoring request too.
    pub scoring: bool,
}

impl Prefilling<'_> {
    /// Tokens of `prompt` that [`SlotCache::place_scoring`] will reuse from this request's slot
    /// once its prefill has decoded them; `limit` as there.
    fn will_share(&self, prompt: &[u32], limit: usize, scoring: bool) -> usize {
        let common = common_prefix(self.prompt, prompt);
        let reusable = common.min(self.batched).min(limit);
        match (scoring, self.scoring) {
            // Row `k` scores token `k + 1`; the last shared row is scored for the waiting
            // request's next token too (see [`Prefilling::branch`]).
            (false, _) | (true, true) => reusable,
            (true, false) => 0,
        }
    }

    /// The row a scoring request for `prompt` wants scored for its own next token, with that
    /// token: the last row the two share, when the prompts go on differently after it.
    fn branch(&self, prompt: &[u32], shared: usize) -> Option<(usize, u32)> {
        let common = common_prefix(self.prompt, prompt);
        let next = *prompt.get(common)?;
        (shared == common && common > 0 && common < self.prompt.len()).then_some((common - 1, next))
    }
}

/// A prefill a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The slot of the prefill, which the request will copy its prefix from.
    pub slot: usize,
    /// For a scoring request, the row of that slot to score for its next token too, and that
    /// token (see [`SlotCache::want_score`]).
    pub branch: Option<(usize, u32)>,
}

/// Which of `prefilling`, if any, a request for `prompt` that would reuse `reuse` tokens placed
/// now does better to wait for in the queue, until it has decoded the prefix they share: one that
/// request will hold at least [`MIN_SHARED_PREFILL`] more tokens of `prompt` than `reuse` and
/// has not decoded them yet. The prefix is then decoded once and copied (K choices of one
/// question sent together). The wait is bounded: it ends when that prefill has covered the
/// shared part, and the worker offers only requests that arrived before the waiting one,
/// whose number is fixed. `must_decode` and `scoring` as for [`SlotCache::place_scoring`].
pub fn worth_waiting<'a>(
    prompt: &[u32],
    must_decode: bool,
    scoring: bool,
    reuse: usize,
    prefilling: impl IntoIterator<Item = Prefilling<'a>>,
) -> Option<Wait> {
    let limit = reuse_limit(prompt, must_decode);
    prefilling.into_iter().find_map(|other| {
        let shared = other.will_share(prompt, limit, scoring);
        let worth = shared >= reuse + MIN_SHARED_PREFILL && other.done < shared;
        worth.then(|| Wait { slot: other.slot, branch: other.branch(prompt, shared).filter(|_| scoring) })
    })
}

/// A destination chosen for want of any shared prefix may still hold some of the prompt.
fn destination_reuse(cache: &SlotCache, slot: usize, prompt: &[u32], limit: usize) -> usize {
    let kv = &cache.slots[slot];
    let reuse = common_prefix(&kv.tokens[..kv.reusable], prompt).min(limit);
    match cache.owned_length(slot) {
        Some(length) if reuse < length => 0,
        _ => reuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(slots: &[&[u32]]) -> SlotCache {
        let mut cache = SlotCache::new(slots.len());
        for (index, tokens) in slots.iter().enumerate() {
            cache.admit(
                Placement {
                    slot: index,
                    reuse: 0,
                    source: None,
                },
                &[],
            );
            cache.extend(index, tokens, true);
        }
        cache
    }

    #[test]
    fn the_free_slot_holding_the_longest_prefix_is_used_in_place() {
        let cache = cache_with(&[&[1, 2, 9], &[1, 2, 3, 4, 7]]);
        let placement = cache
            .place(&[1, 2, 3, 4, 5, 6], &[true, true], true, None)
            .unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 1,
                reuse: 4,
                source: None
            }
        );
    }

    #[test]
    fn one_prompt_token_is_always_left_to_decode() {
        let cache = cache_with(&[&[1, 2, 3]]);
        let placement = cache.place(&[1, 2, 3], &[true], true, None).unwrap();
        assert_eq!(placement.reuse, 2);
        // Creating a context samples nothing, so all of it may come from the cache.
        assert_eq!(
            cache.place(&[1, 2, 3], &[true], false, None).unwrap().reuse,
            3
        );
    }

    #[test]
    fn a_busy_holder_is_copied_into_the_least_recently_used_free_slot() {
        let cache = cache_with(&[&[5, 5], &[1, 2, 3, 4], &[6]]);
        let placement = cache
            .place(&[1, 2, 3, 8], &[true, false, true], true, None)
            .unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 0,
                reuse: 3,
                source: Some(1)
            }
        );
    }

    #[test]
    fn a_context_keeps_its_slot_unless_a_request_keeps_its_tokens() {
        let mut cache = cache_with(&[&[1, 2, 3, 4], &[]]);
        cache.give(0, 7);
        // Shares only part of the context: copied elsewhere, the context's slot stays.
        let placement = cache.place(&[1, 2, 9], &[true, true], true, None).unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 1,
                reuse: 2,
                source: Some(0)
            }
        );
        // Continues the whole context: runs in its slot, which the request leaves as it was.
        let placement = cache
            .place(&[1, 2, 3, 4, 5, 6], &[true, true], true, Some(7))
            .unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 0,
                reuse: 4,
                source: None
            }
        );
        cache.admit(placement, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(cache.owner(0), Some(7));
        // With no other free slot, a request that cannot keep it takes the slot.
        let placement = cache.place(&[1, 2, 9], &[true, false], true, None).unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 0,
                reuse: 2,
                source: None
            }
        );
        cache.admit(placement, &[1, 2, 9]);
        assert_eq!(cache.owner(0), None);
    }

    #[test]
    fn tokens_decoded_one_at_a_time_are_not_reused() {
        let mut cache = cache_with(&[&[1, 2, 3]]);
        cache.extend(0, &[4], false);
        cache.extend(0, &[5], true);
        assert_eq!(cache.tokens(0), &[1, 2, 3, 4, 5]);
        assert_eq!(
            cache
                .place(&[1, 2, 3, 4, 5, 6], &[true], true, None)
                .unwrap()
                .reuse,
            3
        );
    }

    #[test]
    fn nothing_shared_goes_to_an_unowned_slot_first() {
        let mut cache = cache_with(&[&[1, 2], &[3, 4]]);
        cache.give(0, 1);
        let placement = cache.place(&[9, 9, 9], &[true, true], true, None).unwrap();
        assert_eq!(
            placement,
            Placement {
                slot: 1,
                reuse: 0,
                source: None
            }
        );
        assert_eq!(cache.place(&[9], &[false, false], true, None), None);
    }

    #[test]
    fn a_cold_request_reuses_nothing_and_takes_the_slot_that_matters_least() {
        let mut cache = cache_with(&[&[1, 2, 3, 4], &[1, 2, 3, 4, 5], &[7]]);
        cache.give(2, 9);
        let prompt = [1, 2, 3, 4, 5, 6];
        assert_eq!(cache.place(&prompt, &[true, true, true], true, None).unwrap().reuse, 5);
        // The least recently used unowned slot, cleared, although slot 1 holds all but one token.
        let cold = cache.place_cold(&[true, true, true]).unwrap();
        assert_eq!(cold, Placement { slot: 0, reuse: 0, source: None });
        // An owned slot only when no other is free; none when none is.
        assert_eq!(cache.place_cold(&[false, false, true]).unwrap(), Placement { slot: 2, reuse: 0, source: None });
        assert_eq!(cache.place_cold(&[false, false, false]), None);
    }

    fn score(next: u32) -> PositionScore {
        PositionScore { next, logprob: -1.0, top: vec![(next, -1.0)] }
    }

    #[test]
    fn a_scoring_request_reuses_only_scored_rows_and_they_follow_the_prefix() {
        let mut cache = cache_with(&[&[1, 2, 3, 4, 5]]);
        let prompt = [1, 2, 3, 4, 9];
        // Nothing scored: a scoring request decodes its whole prompt, an ordinary one reuses.
        assert_eq!(cache.place_scoring(&prompt, &[true], true, None, true).unwrap().reuse, 0);
        assert_eq!(cache.place(&prompt, &[true], true, None).unwrap().reuse, 4);
        // Rows 0..4 scored for a prompt that went on 2, 3, 4, 5.
        cache.add_scores(0, 0, [score(2), score(3), score(4), score(5)]);
        // A prompt sharing 1 2 3 4 and then 9: rows 0..2 predicted 2, 3, 4 as it has them, row
        // 3 predicted 5 where it has 9, so that row is decoded again.
        assert_eq!(cache.scored_rows(0, &prompt), 3);
        assert_eq!(cache.place_scoring(&prompt, &[true], true, None, true).unwrap().reuse, 3);
        // Scores that do not continue the scored rows are not kept; a truncate cuts them.
        cache.add_scores(0, 7, [score(1)]);
        assert_eq!(cache.scores(0).len(), 4);
        cache.truncate(0, 2);
        assert_eq!(cache.scores(0).len(), 2);
        // Admitting with a shorter reuse keeps the rows below it only.
        cache.admit(Placement { slot: 0, reuse: 1, source: None }, &[1, 2, 3]);
        assert_eq!(cache.scores(0), &[score(2)]);
        cache.forget(0);
        assert!(cache.scores(0).is_empty());
    }

    #[test]
    fn a_row_scored_for_another_token_serves_one_among_its_top_alternatives() {
        let mut cache = cache_with(&[&[1, 2, 3, 4, 5]]);
        let alternatives = vec![(5, -0.25), (9, -1.5)];
        let last = PositionScore { next: 5, logprob: -0.25, top: alternatives.clone() };
        cache.add_scores(0, 0, [score(2), score(3), score(4), last]);
        // The question's last row predicted 5; a choice going on with 9, the second most likely
        // token there, reuses it: the logits were the same, so is its score.
        let prompt = [1, 2, 3, 4, 9];
        assert_eq!(cache.scored_rows(0, &prompt), 4);
        let placement = cache.place_scoring(&prompt, &[true], true, None, true).unwrap();
        assert_eq!(placement.reuse, 4);
        cache.admit(placement, &prompt);
        assert_eq!(cache.scores(0)[3], PositionScore { next: 9, logprob: -1.5, top: alternatives });
        // A token outside the alternatives has that row decoded again.
        assert_eq!(cache.place_scoring(&[1, 2, 3, 4, 7], &[true], true, None, true).unwrap().reuse, 3);
    }

    fn waits<'a>(prompt: &[u32], must_decode: bool, scoring: bool, reuse: usize, prefilling: impl IntoIterator<Item = Prefilling<'a>>) -> bool {
        worth_waiting(prompt, must_decode, scoring, reuse, prefilling).is_some()
    }

    #[test]
    fn a_request_waits_for_a_prefill_it_shares_a_long_prefix_with_until_that_prefix_is_decoded() {
        let question: Vec<u32> = (100..200).collect();
        let choice = |tokens: &[u32]| [question.as_slice(), tokens].concat();
        let (first, second) = (choice(&[1, 2]), choice(&[3]));
        let prefilling = |done: usize, scoring: bool| Prefilling { slot: 0, prompt: &first, done, batched: first.len() - 1, scoring };
        // Nothing of the question decoded yet: both kinds of request wait for it.
        assert!(waits(&second, true, false, 0, [prefilling(0, false)]));
        assert!(waits(&second, true, true, 0, [prefilling(0, true)]));
        // Part of it decoded (a long prefix takes several chunks): still worth waiting for the rest.
        assert!(waits(&second, true, true, 40, [prefilling(40, true)]));
        // Decoded as far as the shared part goes: placed now, it copies them.
        assert!(!waits(&second, true, false, 100, [prefilling(100, false)]));
        assert!(!waits(&second, true, true, 100, [prefilling(100, true)]));
        // A scoring request wants the question's last row scored for its own next token.
        let wait = worth_waiting(&second, true, true, 0, [prefilling(0, true)]);
        assert_eq!(wait, Some(Wait { slot: 0, branch: Some((99, 3)) }));
        assert_eq!(worth_waiting(&second, true, false, 0, [prefilling(0, true)]).unwrap().branch, None);
        // A prefill that scores nothing holds no rows a scoring request can use.
        assert!(!waits(&second, true, true, 0, [prefilling(0, false)]));
        // A prefix shorter than the minimum, or one already reused from a slot, is not waited for.
        let short = [&question[..MIN_SHARED_PREFILL - 1], &[7, 7][..]].concat();
        assert!(!waits(&short, true, false, 0, [prefilling(0, false)]));
        assert!(!waits(&second, true, false, 70, [prefilling(0, false)]));
        // Nothing prefilling: nothing to wait for.
        assert!(!waits(&second, true, false, 0, []));
    }

    #[test]
    fn a_waiting_choice_gets_the_last_shared_row_scored_for_its_own_next_token_and_copies_the_rest() {
        let question: Vec<u32> = (100..140).collect();
        let first = [question.as_slice(), &[1, 2]].concat();
        let second = [question.as_slice(), &[3]].concat();
        let mut cache = cache_with(&[&[], &[], &[]]);
        let prefilling = Prefilling { slot: 0, prompt: &first, done: 0, batched: first.len() - 1, scoring: true };
        let wait = worth_waiting(&second, true, true, 0, [prefilling]).unwrap();
        assert_eq!(wait, Wait { slot: 0, branch: Some((39, 3)) });
        cache.want_score(0, 39, 3);
        cache.want_score(0, 39, 3);
        // The prefill decodes and scores its prompt but the last token; the wanted row is
        // scored for 3 as well, from the same logits.
        cache.extend(0, &first[..first.len() - 1], true);
        cache.add_scores(0, 0, first[1..first.len() - 1].iter().map(|&next| score(next)));
        assert_eq!(cache.wanted_scores(0, 0..first.len() - 1), [(39, 3)]);
        cache.add_branch_score(0, 39, score(3));
        assert!(cache.wanted_scores(0, 0..first.len()).is_empty());
        // Placed with every shared row, copied from the busy prefill; row 39 is its own.
        let free = [false, true, true];
        let placement = cache.place_scoring(&second, &free, true, None, true).unwrap();
        assert_eq!(placement, Placement { slot: 1, reuse: question.len(), source: Some(0) });
        assert_eq!(cache.place(&second, &free, true, None).unwrap().reuse, question.len());
        cache.admit(placement, &second);
        assert_eq!(cache.scores(1).len(), question.len());
        assert_eq!(cache.scores(1)[39], score(3));
        assert_eq!(cache.scores(1)[38], score(139));
        // A choice nobody scored row 39 for decodes it again.
        let third = [question.as_slice(), &[4]].concat();
        assert_eq!(cache.place_scoring(&third, &free, true, None, true).unwrap().reuse, question.len() - 1);
    }
}
