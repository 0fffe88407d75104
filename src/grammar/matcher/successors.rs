//! How the matcher finds the state after a token, as more methods of [`Matcher`]: from
//! transitions already known, read off the mask state when only whitespace used was lowered, or
//! stepped byte by byte; and, for the tokens longer than the horizon that a mask checks one
//! by one, the shared state they are stepped from.
//!
//! Cost: a known successor is a lookup per byte; otherwise a transition per byte, new
//! states only where no walk has stepped before.

use super::super::cache::{SharedCaches, DEAD, FULL};
use super::Matcher;

impl Matcher {
    /// A state that allows every token exactly as the current one does, and that other
    /// positions share, for checking tokens longer than the horizon: counts moved to just past
    /// the longest token and, where that leaves more than a token can use, the repetition
    /// unbounded (see `CompiledGrammar::unbind_counters`). Inside a long bounded string that
    /// is the string's loop, whose transitions come back to itself, instead of a new state per
    /// character of every long token (a run of spaces is text there) at every position.
    /// `None`: the current state itself (whose id a table clear may change).
    pub(super) fn long_token_root(&mut self, caches: &mut SharedCaches) -> Option<u32> {
        let longest = self.trie.max_depth() as u32;
        let config = caches.table.config(self.state);
        let moved = self.grammar.normalize_for_horizon(config, longest + 1).map(|n| n.config);
        let base = moved.as_deref().unwrap_or(config);
        let shared = match self.grammar.unbind_counters(base, longest + 2) {
            Some(unbound) => Some(unbound.config),
            None => moved,
        };
        let adopted = self.adopt_config(caches, &shared?);
        (adopted != DEAD).then_some(adopted)
    }

    /// The state after `token`, or `None` when it is not allowed.
    pub(super) fn state_after(&mut self, caches: &mut SharedCaches, token: u32) -> Option<u32> {
        if self.trie.is_eog(token) {
            return self.is_accepting().then_some(self.state);
        }
        if !self.trie.is_walkable(token) {
            return None;
        }
        let trie = self.trie.clone();
        let bytes = trie.token_bytes(token)?;
        if let Some(known) = self.known_state_after(caches, bytes) {
            return known;
        }
        if let Some(derived) = self.state_after_via_mask_state(caches, bytes) {
            return derived;
        }
        let mut from = self.state;
        self.steps_from(caches, &mut from, bytes)
    }

    /// The state after `token` from `from`, a state that allows the same tokens as the current
    /// one (`from` is renumbered by a table clear on the way; `None` is the current state);
    /// `None` when not allowed.
    pub(super) fn state_after_from(&mut self, caches: &mut SharedCaches, from: &mut Option<u32>, token: u32) -> Option<u32> {
        match from {
            Some(from) if !self.trie.is_eog(token) => {
                let trie = self.trie.clone();
                let bytes = trie.token_bytes(token)?;
                self.steps_from(caches, from, bytes)
            }
            _ => self.state_after(caches, token),
        }
    }

    /// The state after `bytes` from `from`, stepped byte by byte, clearing the table when it
    /// fills up (keeping the current state and `from`, renumbered); `None` when dead.
    pub(super) fn steps_from(&mut self, caches: &mut SharedCaches, from: &mut u32, bytes: &[u8]) -> Option<u32> {
        'retry: loop {
            let mut state = *from;
            for &byte in bytes {
                state = caches.table.next(state, byte);
                if state == FULL {
                    let mut live = [*from];
                    self.clear_tables(caches, &mut live);
                    *from = live[0];
                    continue 'retry;
                }
                if state == DEAD {
                    return None;
                }
            }
            return Some(state);
        }
    }

    /// The state after `bytes` when every transition on the way is known (`Some(None)`: dead);
    /// `None` when one would have to be computed.
    pub(super) fn known_state_after(&self, caches: &SharedCaches, bytes: &[u8]) -> Option<Option<u32>> {
        let mut state = self.state;
        for &byte in bytes {
            state = caches.table.known_next(state, byte)?;
            if state == DEAD {
                return Some(None);
            }
        }
        Some(Some(state))
    }

    /// The state after `bytes` read off the current state's mask state, when that is the
    /// current configuration with every stack's whitespace used lowered alike (see
    /// `Normalized::uniform_lowering`) and `bytes` is within the horizon: both then step frame
    /// for frame alike, so the successor is the mask state's with the lowering spent. The
    /// mask walk from the mask state has stepped most of the way already, where stepping the
    /// current state would make a new state per byte. `Some(None)`: dead; `None` when this
    /// does not apply or the table is full.
    pub(super) fn state_after_via_mask_state(&mut self, caches: &mut SharedCaches, bytes: &[u8]) -> Option<Option<u32>> {
        let root = caches.table.known_mask_state(self.state)?;
        let lowering = root.uniform_lowering?;
        if bytes.len() as u32 > self.trie.horizon {
            return None;
        }
        let mut state = root.state;
        for &byte in bytes {
            match caches.table.next(state, byte) {
                FULL => return None,
                DEAD => return Some(None),
                next => state = next,
            }
        }
        match caches.table.with_whitespace_spent(state, lowering) {
            FULL | DEAD => None,
            real => {
                #[cfg(test)]
                {
                    self.successors_via_mask_state += 1;
                }
                Some(Some(real))
            }
        }
    }
}
