//! [`Matcher`]: the per-request state of a constraint — where the automaton is, its two
//! caches, and its stats — and the operations the sampler calls at each token.
//!
//! The sampler samples first and asks [`Matcher::is_allowed`] (a walk of one token's bytes
//! through the transition table, usually cached); only when the token is refused does it ask
//! for the full [`Matcher::compute_mask`], a single forward pass over the token trie that skips
//! every subtree whose prefix kills the automaton, cached per state.
//!
//! Cost: a cached mask is a lookup; a new one costs the trie nodes whose prefix stays alive
//! (tens of microseconds typically, a full pass over the vocabulary at worst).

use std::sync::Arc;
use std::time::Instant;

use super::automaton::{describe_expected, CompiledGrammar};
use super::cache::{MaskCache, StateTable, DEAD, FULL};
use super::error::GrammarError;
use super::mask::TokenMask;
use super::stats::MaskStats;
use super::toktrie::{TokenTrie, NO_TOKEN};

/// The constraint state of one generation.
pub struct Matcher {
    grammar: Arc<CompiledGrammar>,
    trie: Arc<TokenTrie>,
    table: StateTable,
    masks: MaskCache,
    state: u32,
    /// One state per trie depth during a walk; kept to reuse the allocation.
    depth_states: Vec<u32>,
    /// The loop byte set of each state in `depth_states` (0: none known).
    depth_loops: Vec<u128>,
    /// Whether this step needed a new mask (for the hit rate).
    computed_this_step: bool,
    stats: MaskStats,
}

impl Matcher {
    pub fn new(grammar: Arc<CompiledGrammar>, trie: Arc<TokenTrie>) -> Self {
        // Room for the dead state, the current one, one per trie depth, and the next.
        let mut table = StateTable::new(grammar.clone(), trie.max_depth() + 4);
        let state = table.initial();
        let masks = MaskCache::new(grammar.limits().mask_cache);
        let depth_states = vec![DEAD; trie.max_depth() + 1];
        let mut matcher =
            Matcher { grammar, trie, table, masks, state, depth_states, depth_loops: Vec::new(), computed_this_step: false, stats: MaskStats::default() };
        matcher.refresh_stats();
        matcher
    }

    /// Whether `token` may come next: its bytes keep the automaton alive, or it ends
    /// generation and the automaton accepts.
    pub fn is_allowed(&mut self, token: u32) -> bool {
        let started = Instant::now();
        let allowed = self.state_after(token).is_some();
        self.add_time(started);
        allowed
    }

    /// Every token allowed next (end-of-generation tokens exactly when accepting).
    pub fn compute_mask(&mut self) -> &TokenMask {
        let started = Instant::now();
        let slot = match self.masks.get(self.state) {
            Some(slot) => slot,
            None => {
                self.computed_this_step = true;
                self.stats.masks_computed += 1;
                let mask = self.walk_trie();
                self.masks.insert(self.state, mask)
            }
        };
        self.add_time(started);
        self.refresh_stats();
        self.masks.mask(slot)
    }

    /// Advances past `token`; refuses a token the grammar does not allow here, leaving the
    /// state unchanged.
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        let started = Instant::now();
        let result = match self.state_after(token) {
            Some(next) => {
                self.state = next;
                self.stats.steps += 1;
                if !self.computed_this_step {
                    self.stats.cached_steps += 1;
                }
                self.computed_this_step = false;
                Ok(())
            }
            None => Err(self.rejection(token)),
        };
        self.add_time(started);
        self.refresh_stats();
        result
    }

    /// Whether the text so far is a complete sentence of the grammar.
    pub fn is_accepting(&self) -> bool {
        self.table.is_accepting(self.state)
    }

    /// Whether some non-empty continuation exists.
    pub fn can_continue(&self) -> bool {
        self.table.can_continue(self.state)
    }

    pub fn stats(&self) -> &MaskStats {
        &self.stats
    }

    /// Forgets every cached mask (transitions stay); for measuring the cost of a mask walk.
    pub fn forget_masks(&mut self) {
        self.masks.clear();
    }

    /// What the grammar expects next, for messages.
    pub fn expected(&self) -> String {
        describe_expected(&self.grammar, self.table.config(self.state))
    }

    fn rejection(&self, token: u32) -> GrammarError {
        match self.trie.token_bytes(token) {
            None => GrammarError::UnknownToken { token, vocab_size: self.trie.vocab_size() },
            Some(bytes) => GrammarError::TokenRejected { token, text: String::from_utf8_lossy(bytes).into_owned() },
        }
    }

    /// The state after `token`, or `None` when it is not allowed.
    fn state_after(&mut self, token: u32) -> Option<u32> {
        if self.trie.is_eog(token) {
            return self.is_accepting().then_some(self.state);
        }
        if !self.trie.is_walkable(token) {
            return None;
        }
        let trie = self.trie.clone();
        let bytes = trie.token_bytes(token)?;
        'retry: loop {
            let mut state = self.state;
            for &byte in bytes {
                state = self.table.next(state, byte);
                if state == FULL {
                    self.clear_tables(&mut []);
                    continue 'retry;
                }
                if state == DEAD {
                    return None;
                }
            }
            return Some(state);
        }
    }

    /// Clears the transition table keeping the current state and `also_live`, and drops every
    /// mask (their keys were state ids).
    fn clear_tables(&mut self, also_live: &mut [u32]) {
        let mut live = Vec::with_capacity(also_live.len() + 1);
        live.push(self.state);
        live.extend_from_slice(also_live);
        self.table.clear_keeping(&mut live);
        self.state = live[0];
        also_live.copy_from_slice(&live[1..]);
        self.masks.clear();
    }

    /// One forward pass over the trie from the current state. A subtree is skipped as soon as
    /// its prefix kills the automaton; from a state that loops on a set of ASCII bytes, a
    /// subtree made only of those bytes is allowed whole without being walked.
    fn walk_trie(&mut self) -> TokenMask {
        let trie = self.trie.clone();
        let mut mask = TokenMask::new(trie.vocab_size());
        let nodes = &trie.nodes[..];
        let subtree_ascii = &trie.subtree_ascii[..];
        let mut depth_states = std::mem::take(&mut self.depth_states);
        depth_states.resize(trie.max_depth() + 1, DEAD);
        let mut depth_loops = std::mem::take(&mut self.depth_loops);
        depth_loops.resize(trie.max_depth() + 1, 0);
        depth_states[0] = self.state;
        depth_loops[0] = self.table.loop_bytes(self.state).unwrap_or(0);
        let mut index = 0usize;
        while let Some(node) = nodes.get(index) {
            let depth = node.depth as usize;
            let parent_loop = depth_loops[depth - 1];
            if parent_loop != 0 && subtree_ascii.get(index).is_some_and(|bytes| bytes & !parent_loop == 0) {
                let end = node.subtree_end as usize;
                let first = trie.first_token.get(index).copied().unwrap_or(0) as usize;
                let last = trie.first_token.get(end).copied().unwrap_or(0) as usize;
                for &token in trie.preorder_tokens.get(first..last).unwrap_or_default() {
                    mask.set(token);
                }
                index = end;
                continue;
            }
            let parent = depth_states[depth - 1];
            let next = self.table.next(parent, node.byte);
            if next == DEAD {
                index = node.subtree_end as usize;
                continue;
            }
            if next == FULL {
                // Keep the states of the path being walked; the current state stays first.
                self.clear_tables(&mut depth_states[1..depth]);
                depth_states[0] = self.state;
                continue;
            }
            if next == parent && self.table.loop_bytes(parent).is_none() {
                // A state that loops: learn on which bytes, so its big subtrees can be skipped.
                if let Some(loop_set) = self.table.compute_loop_bytes(parent) {
                    depth_loops[depth - 1] = loop_set;
                }
            }
            depth_states[depth] = next;
            depth_loops[depth] = self.table.loop_bytes(next).unwrap_or(0);
            if node.token != NO_TOKEN {
                mask.set(node.token);
            }
            index += 1;
        }
        for &(token, same_as) in &trie.duplicates {
            if mask.is_set(same_as) {
                mask.set(token);
            }
        }
        if self.is_accepting() {
            for &token in trie.eog_tokens() {
                mask.set(token);
            }
        }
        self.depth_states = depth_states;
        self.depth_loops = depth_loops;
        mask
    }

    fn add_time(&mut self, started: Instant) {
        self.stats.mask_time_ns += started.elapsed().as_nanos() as u64;
    }

    fn refresh_stats(&mut self) {
        self.stats.states = self.table.len();
        self.stats.states_capacity = self.table.capacity();
        self.stats.states_peak = self.table.peak;
        self.stats.masks = self.masks.len();
        self.stats.masks_capacity = self.masks.capacity();
        self.stats.table_clears = self.table.clears + self.masks.clears;
        self.stats.overflows = self.table.overflows;
    }
}

#[cfg(test)]
#[path = "matcher_tests.rs"]
mod tests;
