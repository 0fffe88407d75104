//! The two bounded caches a matcher keeps, kept apart because their costs differ:
//! [`StateTable`] interns automaton configurations as state ids and fills a (state, byte
//! class) -> state table lazily, like a lazy DFA (cheap entries, many of them);
//! [`MaskCache`] keeps the allowed-token bitset of a state (expensive, few).
//!
//! Both have a bound (`Limits::transition_states`, `Limits::mask_cache`). A full table is
//! cleared, keeping only the states the caller still holds, and the clear is counted; it
//! never grows past its bound. Clearing the state table also drops the masks, whose keys
//! were state ids. Cost: a state costs its encoded configuration twice (vector and index)
//! plus 4 bytes per byte class; a mask costs vocabulary/8 bytes.

use std::collections::HashMap;
use std::sync::Arc;

use super::automaton::{config_can_continue, config_is_accepting, CompiledGrammar};
use super::ir::ByteSet;
use super::mask::TokenMask;

/// The state id of the dead configuration (no stack alive); every table has it.
pub(crate) const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;
/// Returned by [`StateTable::next`] when the table is full; clear it and retry.
pub(crate) const FULL: u32 = u32::MAX - 1;

pub(crate) struct StateTable {
    grammar: Arc<CompiledGrammar>,
    classes: usize,
    configs: Vec<Box<[u32]>>,
    ids: HashMap<Box<[u32]>, u32>,
    transitions: Vec<u32>,
    accepting: Vec<bool>,
    can_continue: Vec<bool>,
    /// Per state, once computed: its *skip bytes* (see [`StateTable::compute_skip_bytes`]) and
    /// whether they loop on the state itself.
    skip_bytes: Vec<Option<(ByteSet, bool)>>,
    capacity: usize,
    /// Words of configurations held, and the most allowed before a clear.
    words: usize,
    word_budget: usize,
    pub(crate) peak: usize,
    pub(crate) clears: u64,
    /// Transitions treated as dead because computing them passed a limit (stack depth,
    /// stack count, expansion work).
    pub(crate) overflows: u64,
}

impl StateTable {
    /// `min_capacity` must exceed the states a caller keeps alive across a clear (a mask walk
    /// keeps one per trie depth), so that a cleared table always has room for the next state.
    pub(crate) fn new(grammar: Arc<CompiledGrammar>, min_capacity: usize) -> Self {
        let classes = grammar.class_count();
        let capacity = grammar.limits().transition_states.max(min_capacity);
        // Room for every state a caller keeps across a clear, each as large as allowed.
        let word_budget = (capacity.saturating_mul(1024))
            .max((min_capacity + 1).saturating_mul(grammar.limits().max_state_words));
        let mut table = StateTable {
            grammar,
            classes,
            configs: Vec::new(),
            ids: HashMap::new(),
            transitions: Vec::new(),
            accepting: Vec::new(),
            can_continue: Vec::new(),
            skip_bytes: Vec::new(),
            capacity,
            words: 0,
            word_budget,
            peak: 0,
            clears: 0,
            overflows: 0,
        };
        table.push_state(Box::new([]));
        table
    }

    /// The state of the grammar before any byte.
    pub(crate) fn initial(&mut self) -> u32 {
        let config = self.grammar.initial_config().to_vec().into_boxed_slice();
        self.intern(config).unwrap_or(DEAD)
    }

    pub(crate) fn len(&self) -> usize {
        self.configs.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn config(&self, state: u32) -> &[u32] {
        self.configs
            .get(state as usize)
            .map(|c| &c[..])
            .unwrap_or(&[])
    }

    #[inline]
    pub(crate) fn is_accepting(&self, state: u32) -> bool {
        self.accepting.get(state as usize).copied().unwrap_or(false)
    }

    #[inline]
    pub(crate) fn can_continue(&self, state: u32) -> bool {
        self.can_continue
            .get(state as usize)
            .copied()
            .unwrap_or(false)
    }

    /// The skip bytes of `state` and whether they loop on it, if computed.
    #[inline]
    pub(crate) fn skip_bytes(&self, state: u32) -> Option<&(ByteSet, bool)> {
        self.skip_bytes
            .get(state as usize)
            .and_then(|set| set.as_ref())
    }

    /// Computes the *skip bytes* of `state` towards `target`: ASCII bytes leading from
    /// `state` to `target`, plus the non-ASCII bytes appearing in no character that fails to.
    /// So any valid UTF-8 character made only of skip bytes leads from `state` to `target`.
    /// With `target == state` these are the state's loop bytes; otherwise `target` must loop
    /// and the result is cut down to its loop bytes, so that any valid UTF-8 text made of skip
    /// bytes leads from `state` into the loop and stays there, alive. Explores the UTF-8
    /// encodings one byte class at a time (hundreds of transitions at most); `None` when the
    /// table filled up on the way.
    /// Which bytes to give up is chosen by `byte_weights` (tokens containing each byte), so
    /// that the bytes excluded are the rarest in the vocabulary.
    pub(crate) fn compute_skip_bytes(
        &mut self,
        state: u32,
        target: u32,
        byte_weights: &[u32; 256],
    ) -> Option<ByteSet> {
        let target_loop = if target == state {
            ByteSet::ALL
        } else {
            match self.skip_bytes(target) {
                Some((set, true)) => *set,
                _ => return None,
            }
        };
        let mut set = ByteSet::EMPTY;
        for byte in 1..0x80u8 {
            match self.next(state, byte) {
                FULL => return None,
                next if next == target => set.insert(byte),
                _ => {}
            }
        }
        let mut unclean = ByteSet::EMPTY;
        for sequence in regex_syntax::utf8::Utf8Sequences::new('\u{80}', '\u{10FFFF}') {
            let ranges: Vec<(u8, u8)> = sequence
                .as_slice()
                .iter()
                .map(|r| (r.start, r.end))
                .collect();
            let mut path = Vec::with_capacity(4);
            self.mark_unclean(
                target,
                &ranges,
                state,
                &mut path,
                byte_weights,
                &mut unclean,
            )?;
        }
        for byte in 0x80..=0xFFu8 {
            if !unclean.contains(byte) {
                set.insert(byte);
            }
        }
        let set = set.intersect(&target_loop);
        if let Some(slot) = self.skip_bytes.get_mut(state as usize) {
            *slot = Some((set, target == state));
        }
        Some(set)
    }

    /// Follows every byte-class path through the UTF-8 byte ranges `ranges` from `at`. Where
    /// a path dies, or ends anywhere but `origin`, every character on it must contain an
    /// unclean byte: unless one of its byte groups already is, the group whose bytes occur in
    /// the fewest tokens becomes unclean.
    fn mark_unclean(
        &mut self,
        origin: u32,
        ranges: &[(u8, u8)],
        at: u32,
        path: &mut Vec<ByteSet>,
        byte_weights: &[u32; 256],
        unclean: &mut ByteSet,
    ) -> Option<()> {
        let Some((&(low, high), rest)) = ranges.split_first() else {
            return Some(());
        };
        let mut groups: Vec<(u8, ByteSet)> = Vec::new();
        for byte in low..=high {
            let class = self.grammar.byte_class()[byte as usize];
            match groups.iter_mut().find(|(c, _)| *c == class) {
                Some((_, bytes)) => bytes.insert(byte),
                None => groups.push((class, ByteSet::single(byte))),
            }
        }
        for (_, bytes) in groups {
            let representative = bytes.iter().next().unwrap_or(low);
            let next = self.next(at, representative);
            if next == FULL {
                return None;
            }
            path.push(bytes);
            if next == DEAD || (rest.is_empty() && next != origin) {
                let covered = path.iter().any(|group| group.intersect(unclean) == *group);
                if !covered {
                    let weight = |group: &ByteSet| {
                        group
                            .iter()
                            .map(|b| byte_weights[b as usize] as u64)
                            .sum::<u64>()
                    };
                    if let Some(cheapest) = path.iter().min_by_key(|group| weight(group)) {
                        *unclean = unclean.union(cheapest);
                    }
                }
            } else if !rest.is_empty() {
                self.mark_unclean(origin, rest, next, path, byte_weights, unclean)?;
            }
            path.pop();
        }
        Some(())
    }

    /// The state after `byte`, [`DEAD`], or [`FULL`] when a new state would not fit.
    #[inline]
    pub(crate) fn next(&mut self, state: u32, byte: u8) -> u32 {
        let index =
            state as usize * self.classes + self.grammar.byte_class()[byte as usize] as usize;
        match self.transitions.get(index) {
            Some(&target) if target != UNKNOWN => target,
            Some(_) => self.fill(index, state, byte),
            None => DEAD,
        }
    }

    #[cold]
    fn fill(&mut self, index: usize, state: u32, byte: u8) -> u32 {
        let target = match self.grammar.step(&self.configs[state as usize], byte) {
            Err(_) => {
                self.overflows += 1;
                DEAD
            }
            Ok(next) if next.is_empty() => DEAD,
            Ok(next) => match self.intern(next.into_boxed_slice()) {
                Some(id) => id,
                None => return FULL,
            },
        };
        self.transitions[index] = target;
        target
    }

    fn intern(&mut self, config: Box<[u32]>) -> Option<u32> {
        if config.is_empty() {
            return Some(DEAD);
        }
        if let Some(&id) = self.ids.get(&config) {
            return Some(id);
        }
        if self.configs.len() >= self.capacity || self.words + config.len() > self.word_budget {
            return None;
        }
        Some(self.push_state(config))
    }

    fn push_state(&mut self, config: Box<[u32]>) -> u32 {
        let id = self.configs.len() as u32;
        self.words += config.len();
        self.accepting.push(config_is_accepting(&config));
        self.can_continue.push(config_can_continue(&config));
        self.skip_bytes.push(None);
        self.transitions
            .extend(std::iter::repeat_n(UNKNOWN, self.classes));
        if !config.is_empty() {
            self.ids.insert(config.clone(), id);
        }
        self.configs.push(config);
        self.peak = self.peak.max(self.configs.len());
        id
    }

    /// Empties the table except for the states in `live`, whose ids are rewritten in place.
    pub(crate) fn clear_keeping(&mut self, live: &mut [u32]) {
        let old = std::mem::take(&mut self.configs);
        self.ids.clear();
        self.transitions.clear();
        self.accepting.clear();
        self.can_continue.clear();
        self.skip_bytes.clear();
        self.words = 0;
        self.clears += 1;
        self.push_state(Box::new([]));
        for state in live.iter_mut() {
            let config = old.get(*state as usize).cloned().unwrap_or_default();
            *state = match self.ids.get(&config) {
                Some(&id) => id,
                None if config.is_empty() => DEAD,
                None => self.push_state(config),
            };
        }
    }
}

/// Allowed-token masks by state id, bounded; cleared whole when full or when the state table
/// is cleared.
pub(crate) struct MaskCache {
    index: HashMap<u32, usize>,
    masks: Vec<TokenMask>,
    capacity: usize,
    pub(crate) clears: u64,
}

impl MaskCache {
    pub(crate) fn new(capacity: usize) -> Self {
        MaskCache {
            index: HashMap::new(),
            masks: Vec::new(),
            capacity: capacity.max(1),
            clears: 0,
        }
    }

    pub(crate) fn get(&self, state: u32) -> Option<usize> {
        self.index.get(&state).copied()
    }

    pub(crate) fn mask(&self, slot: usize) -> &TokenMask {
        &self.masks[slot]
    }

    /// Stores `mask` for `state`, clearing the cache first when it is full; returns its slot.
    pub(crate) fn insert(&mut self, state: u32, mask: TokenMask) -> usize {
        if self.masks.len() >= self.capacity {
            self.clear();
            self.clears += 1;
        }
        self.masks.push(mask);
        let slot = self.masks.len() - 1;
        self.index.insert(state, slot);
        slot
    }

    /// Drops every mask (state ids changed); not counted as a clear of this cache.
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.masks.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.masks.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}
