//! The mask walks that use the vocabulary's lexeme tables (`lexer.rs`), as more methods of
//! [`Matcher`]: from a state inside a loop (a string body, an extra key), the tokens within
//! the loop and a walk of the others' exits; from a state beside one (the start of a key,
//! a pattern just matched), the loop state's mask corrected where the two states differ;
//! from a state in a bounded chain over such a set (a string with `maxLength`), the tokens
//! within it short enough and the exits from the chain states; and, inside a trie walk, a
//! string's opening quote through the tables of the tokens that start with it.
//!
//! Cost: a state's loop is worked out once (a transition per byte class, a few hundred for
//! UTF-8); a mask from a loop costs a copy of the within-mask plus the exits that stay alive;
//! one from a chain of `k` characters, that plus `k` transitions per exit's first byte and a
//! walk of the rest of the exit per distinct state they lead to; one beside a loop, the trie
//! nodes on which the two states still differ.

use std::sync::Arc;

use super::super::cache::{SharedCaches, DEAD, FULL};
use super::super::ir::{starts_character, ByteSet};
use super::super::lexer::{LoopExits, BOUNDED_CHARS_MAX};
use super::super::mask::TokenMask;
use super::super::toktrie::NO_TOKEN;
use super::{Matcher, CHAIN_MAX};

impl Matcher {
    /// The mask of `root`, computed: from the vocabulary's tables of the loop `root` is in,
    /// or else by a walk of the trie. Returns the mask and `root`'s id after any table clear.
    pub(super) fn mask_of(&mut self, caches: &mut SharedCaches, root: u32) -> (TokenMask, u32) {
        if let Some(computed) = self.mask_from_loop_exits(caches, root) {
            return computed;
        }
        if let Some(computed) = self.mask_from_bounded_loop(caches, root) {
            return computed;
        }
        if let Some(computed) = self.mask_beside_loop(caches, root) {
            return computed;
        }
        self.walk_trie(caches, root)
    }

    /// The mask of `root` when it comes back to itself on every character of a byte set
    /// whose vocabulary tables are worth having (see `lexer.rs`): the tokens made only of
    /// those characters, plus a walk of the other tokens' exits from `root` (each token's
    /// prefix of those characters leads back to `root`). `None` when `root` does not loop or
    /// the table would not pay. Returns the mask and `root`'s id after any table clear.
    fn mask_from_loop_exits(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
    ) -> Option<(TokenMask, u32)> {
        let trie = self.trie.clone();
        let loop_bytes = self.loop_bytes(caches, root)?;
        let exits = trie.loop_exits(&loop_bytes, None)?;
        let mut mask = exits.within.clone();
        let root = self.walk_exits(caches, root, &exits, &mut mask, &mut []);
        self.set_end_of_generation(caches, root, &mut mask);
        Some((mask, root))
    }

    /// The mask of `root` when it is `k` characters from the end of a chain over a byte set
    /// with loop tables (a string with `maxLength` and `k` characters left): the set's tokens
    /// of at most `k` characters, plus the other tokens' exits, each walked from the chain
    /// state its prefix within the set leads to, once per distinct state the exit's first
    /// byte leads to (a closing quote: the same state from every chain state). `None` unless
    /// the chain is known to end there (its last state refuses every byte of the set), or
    /// when the table fills up on the way (the trie walk makes room then).
    fn mask_from_bounded_loop(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
    ) -> Option<(TokenMask, u32)> {
        if self.pending_continuations != 0 {
            return None;
        }
        let trie = self.trie.clone();
        let skip = match caches.table.known_skip_set(root).copied() {
            Some(known) => known,
            None if self.moves_along_a_chain(caches, root) => caches.table.skip_set(
                root,
                &trie.byte_weights,
                trie.many_non_ascii,
                trie.max_chars.min(CHAIN_MAX),
            )?,
            None => return None,
        };
        let chars = skip.capacity as usize;
        if skip.truncated || !(1..=BOUNDED_CHARS_MAX).contains(&chars) {
            return None;
        }
        let probe = match skip.bytes.contains(trie.loop_probe) {
            true => trie.loop_probe,
            false => (0x20..0x7Fu8).find(|byte| skip.bytes.contains(*byte))?,
        };
        let exits = trie.loop_exits(&skip.bytes, None)?;
        // chain[p]: the state after any `p` characters of the set (one leads to the next).
        let mut chain = Vec::with_capacity(chars + 1);
        chain.push(root);
        for _ in 0..chars {
            match caches.table.next(*chain.last()?, probe) {
                DEAD | FULL => return None,
                next => chain.push(next),
            }
        }
        let end = chain[chars];
        if skip.bytes.iter().any(|byte| caches.table.next(end, byte) != DEAD) {
            return None;
        }
        let (longer, up_to) = trie.split_by_characters(chars as u32 + 1);
        let mut mask = exits.within_up_to(chars, longer, up_to)?.clone();
        // Per exit first byte: the distinct states it leads to, with the prefix lengths
        // (as bits) that lead there.
        let mut targets: Vec<(u32, u64)> = Vec::new();
        let mut index = 0usize;
        while let Some(node) = exits.nodes.get(index) {
            targets.clear();
            for (prefix, &state) in chain.iter().enumerate() {
                match caches.table.next(state, node.byte) {
                    DEAD => {}
                    FULL => return None,
                    target => match targets.iter_mut().find(|(known, _)| *known == target) {
                        Some((_, prefixes)) => *prefixes |= 1 << prefix,
                        None => targets.push((target, 1 << prefix)),
                    },
                }
            }
            for &(_, prefixes) in &targets {
                let from = chain[prefixes.trailing_zeros() as usize];
                if !self.walk_exit_subtree(caches, from, &exits, index, prefixes, &mut mask) {
                    return None;
                }
            }
            index = node.subtree_end as usize;
        }
        self.set_end_of_generation(caches, root, &mut mask);
        #[cfg(test)]
        {
            self.bounded_loop_masks += 1;
        }
        Some((mask, root))
    }

    /// Whether the most common printable byte moves `state` on to a new state twice in a row:
    /// a chain of counted states, where a skip set is worth working out, not a key, a number,
    /// a loop or the state just before one.
    fn moves_along_a_chain(&self, caches: &mut SharedCaches, state: u32) -> bool {
        let probe = self.trie.loop_probe;
        let first = caches.table.next(state, probe);
        if first == DEAD || first == FULL || first == state {
            return false;
        }
        let second = caches.table.next(first, probe);
        second != DEAD && second != FULL && second != first
    }

    /// Sets in `mask` the tokens of the exit subtree at `start` that stay alive from `from`
    /// and whose prefix within the loop has a length among `prefixes` (as bits). Returns
    /// false when the table filled up on the way.
    fn walk_exit_subtree(
        &mut self,
        caches: &mut SharedCaches,
        from: u32,
        exits: &LoopExits,
        start: usize,
        prefixes: u64,
        mask: &mut TokenMask,
    ) -> bool {
        let nodes = &exits.nodes[..];
        let end = nodes.get(start).map_or(start, |node| node.subtree_end as usize);
        let mut path = std::mem::take(&mut self.exit_path);
        path.start(exits.max_depth + 1, from);
        let mut index = start;
        let mut complete = true;
        while let Some(node) = nodes.get(index).filter(|_| index < end) {
            let depth = node.depth as usize;
            let longest = || u32::from(node.longest);
            match self.step_path(caches, &mut path, depth, node.byte, longest) {
                DEAD => index = node.subtree_end as usize,
                FULL => {
                    complete = false;
                    break;
                }
                _ => {
                    let (tokens, prefix_chars) = exits.tokens_with_prefixes_at(index);
                    for (&token, &chars) in tokens.iter().zip(prefix_chars) {
                        if chars < 64 && prefixes >> chars & 1 == 1 {
                            mask.set(token);
                        }
                    }
                    index += 1;
                }
            }
        }
        self.exit_path = path;
        complete
    }

    /// The bytes `state` comes back to itself on, character by character, when it does so
    /// on every character of them (its skip set is a loop, not a chain or a closed set);
    /// worked out once per state, and only for a state that comes back to itself on the
    /// vocabulary's most common printable byte.
    fn loop_bytes(&mut self, caches: &mut SharedCaches, state: u32) -> Option<ByteSet> {
        let set = match caches.table.known_skip_set(state) {
            Some(set) => *set,
            None => {
                let trie = self.trie.clone();
                if caches.table.next(state, trie.loop_probe) != state {
                    return None;
                }
                caches.table.skip_set(
                    state,
                    &trie.byte_weights,
                    trie.many_non_ascii,
                    trie.max_chars.min(CHAIN_MAX),
                )?
            }
        };
        set.loops.then_some(set.bytes)
    }

    /// The vocabulary's tables for the tokens that start with `lead` and lead into `state`,
    /// when `state` loops on characters `lead` is not one of (the opening quote of a string).
    pub(super) fn lead_exits(
        &mut self,
        caches: &mut SharedCaches,
        state: u32,
        lead: u8,
    ) -> Option<Arc<LoopExits>> {
        let loop_bytes = self.loop_bytes(caches, state)?;
        if loop_bytes.contains(lead) {
            return None;
        }
        self.trie.loop_exits(&loop_bytes, Some(lead))
    }

    /// Sets in `mask` every token whose exit from the loop of `root` keeps the automaton
    /// alive from `root`: a walk of the exit trie. `outer` holds states of an enclosing walk,
    /// kept (and renumbered) across a table clear. Returns `root`'s id after any clear.
    pub(super) fn walk_exits(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
        exits: &LoopExits,
        mask: &mut TokenMask,
        outer: &mut [u32],
    ) -> u32 {
        let nodes = &exits.nodes[..];
        let mut path = std::mem::take(&mut self.exit_path);
        path.start(exits.max_depth + 1, root);
        let mut index = 0usize;
        while let Some(node) = nodes.get(index) {
            let depth = node.depth as usize;
            // Where the walk is back in a state with a skip set (the loop itself, after a
            // character that left it for a moment), a subtree the set covers is allowed
            // whole: an exit holding a common letter would otherwise be stepped to its end.
            // The set covers only valid UTF-8 subtrees (see `INVALID_MARK`), and in those the
            // node starts a character exactly when no continuation byte is owed before it.
            if path.offsets[depth - 1] == 0 && starts_character(node.byte) {
                let skips = caches.table.known_skip_set(path.states[depth - 1]);
                let rest = u32::from(node.longest) + 1 - depth as u32;
                if skips.is_some_and(|skips| {
                    rest <= skips.capacity
                        && exits.subtree_bytes.get(index).is_some_and(|bytes| bytes.is_subset_of(&skips.bytes))
                }) {
                    mask.set_all(exits.tokens_under(index));
                    index = node.subtree_end as usize;
                    #[cfg(test)]
                    {
                        self.exit_subtrees_skipped += 1;
                    }
                    continue;
                }
            }
            let longest = || u32::from(node.longest);
            let next = self.step_path(caches, &mut path, depth, node.byte, longest);
            if next == DEAD {
                index = node.subtree_end as usize;
                continue;
            }
            if next == FULL {
                let mut live: Vec<u32> = outer.to_vec();
                live.extend_from_slice(&path.states[0..depth]);
                self.clear_tables(caches, &mut live);
                outer.copy_from_slice(&live[..outer.len()]);
                path.states[0..depth].copy_from_slice(&live[outer.len()..]);
                continue;
            }
            mask.set_all(exits.tokens_at(index));
            index += 1;
        }
        let root = path.states[0];
        self.exit_path = path;
        root
    }

    /// The mask of `root` from that of the loop state most of its bytes lead to, when that
    /// loop's mask comes from the vocabulary's tables: a walk of the trie from both states
    /// at once that stops wherever they meet, clearing the subtrees only the loop allows and
    /// walking those only `root` does. `None` when no such loop is beside `root`.
    fn mask_beside_loop(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
    ) -> Option<(TokenMask, u32)> {
        let trie = self.trie.clone();
        let reference = caches.table.heaviest_target(root, &trie.byte_weights)??;
        if reference == root || reference == DEAD {
            return None;
        }
        let cached = caches
            .masks
            .get(reference)
            .and_then(|slot| caches.masks.mask(slot))
            .cloned();
        // Without a mask of its own, the reference needs loop tables (see `loop_bytes`):
        // whether it may have them is found out before comparing every byte of the two.
        let may_loop = match caches.table.known_skip_set(reference) {
            Some(known) => known.loops,
            None => caches.table.next(reference, trie.loop_probe) == reference,
        };
        if cached.is_none() && !may_loop {
            return None;
        }
        // Most of the tokens the loop allows must start the same way from `root`, or
        // clearing the rest would cost more than walking.
        let (mut shared, mut loop_only) = (0u64, 0u64);
        for byte in 1..0x80u8 {
            let weight = u64::from(trie.byte_weights[byte as usize]) + 1;
            match (
                caches.table.next(root, byte),
                caches.table.next(reference, byte),
            ) {
                (FULL, _) | (_, FULL) => return None,
                (_, DEAD) => {}
                (ours, _) if ours == reference => shared += weight,
                (DEAD, _) => loop_only += weight,
                _ => {}
            }
        }
        if loop_only >= shared {
            return None;
        }
        let (reference_mask, reference) = match cached {
            Some(mask) => (mask, reference),
            None => {
                let mut live = [root];
                let (mask, reference) = self.loop_mask_keeping(caches, reference, &mut live)?;
                let mask = Arc::new(mask);
                caches.masks.insert(reference, mask.clone());
                return Some(self.walk_beside(caches, live[0], reference, &mask));
            }
        };
        Some(self.walk_beside(caches, root, reference, &reference_mask))
    }

    /// [`Matcher::mask_from_loop_exits`] for a state other than the walk's root, keeping the
    /// states in `live` across a table clear.
    fn loop_mask_keeping(
        &mut self,
        caches: &mut SharedCaches,
        state: u32,
        live: &mut [u32],
    ) -> Option<(TokenMask, u32)> {
        let loop_bytes = self.loop_bytes(caches, state)?;
        let exits = self.trie.loop_exits(&loop_bytes, None)?;
        let mut mask = exits.within.clone();
        let state = self.walk_exits(caches, state, &exits, &mut mask, live);
        self.set_end_of_generation(caches, state, &mut mask);
        Some((mask, state))
    }

    /// The mask of `root` as `reference_mask` (that of `reference`) corrected where the two
    /// states part: the trie is walked from both, a subtree is left as it is where they meet
    /// (or both die), cleared where only `root` dies, and walked where `root` lives on.
    /// Returns the mask and `root`'s id after any table clear.
    fn walk_beside(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
        reference: u32,
        reference_mask: &TokenMask,
    ) -> (TokenMask, u32) {
        let trie = self.trie.clone();
        let nodes = &trie.nodes[..];
        let mut mask = reference_mask.clone();
        let depth_count = trie.max_depth() + 1;
        let mut our_path = std::mem::take(&mut self.depth_path);
        our_path.start(depth_count, root);
        let mut their_path = std::mem::take(&mut self.exit_path);
        their_path.start(depth_count, reference);
        let (ours, theirs) = (&mut our_path.states, &mut their_path.states);
        let mut index = 0usize;
        while let Some(node) = nodes.get(index) {
            let depth = node.depth as usize;
            let mine = caches.table.next(ours[depth - 1], node.byte);
            let other = caches.table.next(theirs[depth - 1], node.byte);
            if mine == FULL || other == FULL {
                let mut live: Vec<u32> = ours[0..depth].to_vec();
                live.extend_from_slice(&theirs[0..depth]);
                self.clear_tables(caches, &mut live);
                ours[0..depth].copy_from_slice(&live[..depth]);
                theirs[0..depth].copy_from_slice(&live[depth..]);
                continue;
            }
            let subtree_end = node.subtree_end as usize;
            if mine == other {
                index = subtree_end;
                continue;
            }
            if mine == DEAD {
                for &token in trie.tokens_between(index, subtree_end) {
                    mask.unset(token);
                }
                index = subtree_end;
                continue;
            }
            ours[depth] = mine;
            theirs[depth] = other;
            if node.token != NO_TOKEN {
                mask.set(node.token);
            }
            index += 1;
        }
        trie.mirror_duplicates(&mut mask);
        let root = ours[0];
        self.set_end_of_generation(caches, root, &mut mask);
        self.depth_path = our_path;
        self.exit_path = their_path;
        (mask, root)
    }

    /// End-of-generation tokens in `mask` exactly when `state` accepts.
    fn set_end_of_generation(&self, caches: &SharedCaches, state: u32, mask: &mut TokenMask) {
        let accepting = caches.table.is_accepting(state);
        for &token in self.trie.eog_tokens() {
            if accepting {
                mask.set(token);
            } else {
                mask.unset(token);
            }
        }
    }
}
