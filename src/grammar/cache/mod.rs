//! The two bounded caches a matcher uses, kept apart because their costs differ:
//! [`StateTable`] interns automaton configurations as state ids and fills a (state, byte
//! class) -> state table lazily, like a lazy DFA (cheap entries, many of them);
//! [`MaskCache`] keeps the allowed-token bitset of a state (expensive, few). The state table
//! also remembers each state's [`SkipSet`] once worked out: the bytes and character budget
//! with which whole trie subtrees can be allowed without walking them.
//!
//! Both are shared by every matcher of one grammar and vocabulary ([`SharedCaches`], found
//! through the grammar's [`CacheRegistry`]), so a schema served again starts warm.
//!
//! Both have a bound (`Limits::transition_states`, `Limits::mask_cache`). A full table is
//! cleared, keeping the states the caller still holds and, within a quarter of the table, the
//! states of the masks most recently used; the clear is counted, and the table never grows
//! past its bound. Those masks stay cached under their states' new ids (with the states'
//! skip sets and mask states); the other masks are dropped. States are interned by the hash
//! a byte step computes for its configuration (`automaton/stacks.rs`), so a step's result is
//! not hashed again. Cost: a state costs its encoded configuration, ~20 bytes of index and
//! 4 bytes per byte class; a mask costs vocabulary/8 bytes; a clear re-interns each state it
//! keeps (its transitions are learned again).

use std::any::Any;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::automaton::{
    config_can_continue, config_hash, config_is_accepting, CompiledGrammar, Reading, StepOverflow, StepStacks, WordHasher,
    NO_ENDING,
};
use super::ir::ByteSet;
use super::mask::TokenMask;
use super::toktrie::TokenTrie;

mod skip_sets;

pub(crate) use skip_sets::SkipSet;

/// The state id of the dead configuration (no stack alive); every table has it.
pub(crate) const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;
/// States a fresh table's index is sized for.
const INITIAL_IDS: usize = 1024;
/// States a fresh table's other vectors have room for: on the MaskBench dev set an instance
/// of a fresh grammar peaks at 220 states at the median and 1161 at p90, which would
/// otherwise grow them (and copy them) step by step. Room not yet used is not touched.
const INITIAL_STATES: usize = 1024;
/// Words per state a fresh table has room for (a state is a few stacks of a few frames).
const INITIAL_WORDS_PER_STATE: usize = 32;
/// Returned by [`StateTable::next`] when the table is full; clear it and retry.
pub(crate) const FULL: u32 = u32::MAX - 1;

pub(crate) struct StateTable {
    /// Weak: the grammar owns the tables shared by its matchers (see [`CacheRegistry`]).
    grammar: Weak<CompiledGrammar>,
    byte_class: [u8; 256],
    classes: usize,
    /// One byte of each class, by class.
    class_bytes: Vec<u8>,
    /// Every state's encoded configuration, back to back (one allocation, not one per
    /// state); state `s` holds `config_words[config_starts[s]..config_starts[s + 1]]`.
    config_words: Vec<u32>,
    config_starts: Vec<u32>,
    /// By configuration hash, the state interned last with it; per state, the state interned
    /// before it with the same hash ([`DEAD`] ends the chain: it is never interned).
    ids: HashMap<u64, u32, BuildHasherDefault<WordHasher>>,
    same_hash: Vec<u32>,
    transitions: Vec<u32>,
    accepting: Vec<bool>,
    can_continue: Vec<bool>,
    /// Per state, once computed: its skip set (see [`StateTable::skip_set`]).
    skip_sets: Vec<Option<SkipSet>>,
    /// Per state, once asked for: its distance from an accepting configuration (see
    /// `automaton/distance.rs`); [`UNKNOWN`] until then.
    distances: Vec<u32>,
    /// Per state, once worked out: the fewest tokens found that complete the document from it
    /// (see `matcher/closing.rs`); [`UNKNOWN`] until then.
    closing_tokens: Vec<u32>,
    /// Per state, once asked for: the state masks are computed from; its state is
    /// [`UNKNOWN`] until then.
    mask_states: Vec<MaskRoot>,
    /// By the state of a loop's top frames alone, what its UTF-8 characters do (see
    /// [`StateTable::detached_loop_utf8`]).
    detached_utf8: HashMap<u32, Option<skip_sets::DetachedUtf8>, BuildHasherDefault<WordHasher>>,
    /// Reused by every byte step this table computes.
    step_buffer: StepStacks,
    /// The other buffer of steps chained without interning (see
    /// [`StateTable::alive_after_whitespace_run`]).
    probe_buffer: StepStacks,
    /// The grammar, held strongly only while a matcher operates on the table (see
    /// [`StateTable::lend`]).
    lent: Option<Arc<CompiledGrammar>>,
    capacity: usize,
    /// The most words of configurations held before a clear.
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
    pub(crate) fn new(grammar: &Arc<CompiledGrammar>, min_capacity: usize) -> Self {
        let classes = grammar.class_count();
        let capacity = grammar.limits().transition_states.max(min_capacity);
        // Room for every state a caller keeps across a clear, each as large as allowed.
        // Offsets into the configuration buffer are u32: the budget stays within them.
        let word_budget = (capacity.saturating_mul(1024))
            .max((min_capacity + 1).saturating_mul(grammar.limits().max_state_words))
            .min(u32::MAX as usize / 2);
        let byte_class = *grammar.byte_class();
        let initial = capacity.min(INITIAL_STATES);
        let mut class_bytes = vec![0u8; classes];
        for byte in (0..=255u8).rev() {
            if let Some(slot) = class_bytes.get_mut(byte_class[byte as usize] as usize) {
                *slot = byte;
            }
        }
        let mut table = StateTable {
            grammar: Arc::downgrade(grammar),
            byte_class,
            classes,
            class_bytes,
            config_words: Vec::with_capacity(initial * INITIAL_WORDS_PER_STATE),
            config_starts: {
                let mut starts = Vec::with_capacity(initial + 1);
                starts.push(0);
                starts
            },
            // Sized for a table in use, so that interning rarely rehashes.
            ids: HashMap::with_capacity_and_hasher(capacity.min(INITIAL_IDS), Default::default()),
            same_hash: Vec::with_capacity(initial),
            transitions: Vec::with_capacity(initial * classes),
            accepting: Vec::with_capacity(initial),
            can_continue: Vec::with_capacity(initial),
            skip_sets: Vec::with_capacity(initial),
            distances: Vec::with_capacity(initial),
            closing_tokens: Vec::with_capacity(initial),
            mask_states: Vec::with_capacity(initial),
            detached_utf8: HashMap::default(),
            step_buffer: StepStacks::default(),
            probe_buffer: StepStacks::default(),
            lent: None,
            capacity,
            word_budget,
            peak: 0,
            clears: 0,
            overflows: 0,
        };
        table.push_state(&[], config_hash(&[]));
        table
    }

    /// Holds `grammar` (this table's own) strongly while a matcher operates, `None` after:
    /// kept past the operation it would keep the grammar, which owns the table, alive.
    pub(crate) fn lend(&mut self, grammar: Option<Arc<CompiledGrammar>>) {
        self.lent = grammar;
    }

    /// Changes whenever state ids are reassigned (a clear): ids from another epoch are stale.
    pub(crate) fn epoch(&self) -> u64 {
        self.clears
    }

    pub(crate) fn len(&self) -> usize {
        self.config_starts.len() - 1
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn config(&self, state: u32) -> &[u32] {
        config_in(&self.config_words, &self.config_starts, state)
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

    /// The distance of `state` from an accepting configuration in bytes, worked out on first
    /// use and kept ([`NO_ENDING`] for the dead state or without the grammar).
    pub(crate) fn distance(&mut self, state: u32) -> u32 {
        match self.distances.get(state as usize) {
            Some(&known) if known != UNKNOWN => known,
            Some(_) => {
                let config = config_in(&self.config_words, &self.config_starts, state);
                let distance =
                    on_grammar(&self.lent, &self.grammar, |grammar| grammar.distance(config)).unwrap_or(NO_ENDING);
                self.distances[state as usize] = distance;
                distance
            }
            None => NO_ENDING,
        }
    }

    /// The fewest tokens found that complete the document from `state`, if worked out.
    pub(crate) fn known_closing_tokens(&self, state: u32) -> Option<u32> {
        self.closing_tokens.get(state as usize).copied().filter(|&tokens| tokens != UNKNOWN)
    }

    /// Records that `tokens` tokens complete the document from `state`, where fewer were not
    /// already known.
    pub(crate) fn found_closing_tokens(&mut self, state: u32, tokens: u32) {
        if let Some(slot) = self.closing_tokens.get_mut(state as usize) {
            *slot = (*slot).min(tokens);
        }
    }

    /// The state masks of `state` are computed from, if worked out since the last clear.
    pub(crate) fn known_mask_state(&self, state: u32) -> Option<MaskRoot> {
        self.mask_states.get(state as usize).copied().filter(|root| root.state != UNKNOWN)
    }

    pub(crate) fn remember_mask_state(&mut self, state: u32, mask_state: MaskRoot) {
        if let Some(slot) = self.mask_states.get_mut(state as usize) {
            *slot = mask_state;
        }
    }

    /// The state after `byte`, [`DEAD`], or [`FULL`] when a new state would not fit.
    #[inline]
    pub(crate) fn next(&mut self, state: u32, byte: u8) -> u32 {
        let index = self.transition_index(state, byte);
        match self.transitions.get(index) {
            Some(&target) if target != UNKNOWN => target,
            Some(_) => self.fill(index, state, byte),
            None => DEAD,
        }
    }

    /// Where the transition of `state` on `byte` is kept in `transitions`.
    #[inline]
    fn transition_index(&self, state: u32, byte: u8) -> usize {
        state as usize * self.classes + self.byte_class[byte as usize] as usize
    }

    /// The state after `byte` if that transition is known: no step is computed.
    #[inline]
    pub(crate) fn known_next(&self, state: u32, byte: u8) -> Option<u32> {
        self.transitions.get(self.transition_index(state, byte)).copied().filter(|&target| target != UNKNOWN)
    }

    /// The state of `state`'s configuration with `bytes` more whitespace used on every stack,
    /// interned directly; [`FULL`] when it would not fit. That is the state after a run of
    /// `bytes` whitespace bytes each of which only spends budget there (see
    /// `lexer_whitespace.rs`), without a new state per byte; or the real successor of a state
    /// whose mask state lowered it uniformly (see `Normalized::uniform_lowering`).
    pub(crate) fn with_whitespace_spent(&mut self, state: u32, bytes: u32) -> u32 {
        let config = config_in(&self.config_words, &self.config_starts, state);
        let step_buffer = &mut self.step_buffer;
        let spend = |used: u32| used.saturating_add(bytes);
        if on_grammar(&self.lent, &self.grammar, |grammar| grammar.with_whitespace_used(config, spend, step_buffer))
            .is_none()
        {
            return DEAD;
        }
        self.intern_step_result().unwrap_or(FULL)
    }

    /// Whether the configuration of `state` with `spent` more whitespace used on every stack,
    /// then stepped by `bytes`, is alive; `None` when the grammar is gone. Worked out in the
    /// table's step buffers, interning nothing: a long whitespace token that would end the
    /// budget is checked so at every position, and the states it passes through (budget
    /// nearly and wholly spent) need not be made for that. A step past a limit is dead, as in
    /// [`StateTable::next`].
    pub(crate) fn alive_after_whitespace_run(&mut self, state: u32, spent: u32, bytes: &[u8]) -> Option<bool> {
        let config = config_in(&self.config_words, &self.config_starts, state);
        let (current, next) = (&mut self.step_buffer, &mut self.probe_buffer);
        let stepped = on_grammar(&self.lent, &self.grammar, |grammar| {
            grammar.with_whitespace_used(config, |used| used.saturating_add(spent), current);
            for &byte in bytes {
                if current.encoded.is_empty() {
                    break;
                }
                grammar.step_with(&current.encoded, byte, next)?;
                std::mem::swap(current, next);
            }
            Ok::<bool, StepOverflow>(!current.encoded.is_empty())
        })?;
        Some(stepped.unwrap_or_else(|_| {
            self.overflows += 1;
            false
        }))
    }

    /// Interns the configuration a step left encoded in the step buffer (with its hash);
    /// `None` when full.
    fn intern_step_result(&mut self) -> Option<u32> {
        let next = std::mem::take(&mut self.step_buffer.encoded);
        let interned = self.intern(&next, self.step_buffer.hash);
        self.step_buffer.encoded = next;
        interned
    }

    #[cold]
    fn fill(&mut self, index: usize, state: u32, byte: u8) -> u32 {
        let config = config_in(&self.config_words, &self.config_starts, state);
        let step_buffer = &mut self.step_buffer;
        let Some(stepped) =
            on_grammar(&self.lent, &self.grammar, |grammar| grammar.step_telling_alike(config, byte, step_buffer))
        else {
            return DEAD;
        };
        let alike = match stepped {
            // Only this byte's own transition is known then: the limit stops the step early.
            Err(_) => {
                self.overflows += 1;
                if let Some(slot) = self.transitions.get_mut(index) {
                    *slot = DEAD;
                }
                return DEAD;
            }
            Ok(alike) => alike,
        };
        let Some(target) = self.intern_step_result() else { return FULL };
        // Every class this configuration does not tell apart from `byte` goes where it went:
        // a state inside a key or a string body sees a handful of cases, where the grammar
        // has a class per letter of every name it holds.
        let row = index - self.byte_class[byte as usize] as usize;
        for (class, &representative) in self.class_bytes.iter().enumerate() {
            if alike.contains(representative) {
                if let Some(slot) = self.transitions.get_mut(row + class) {
                    if *slot == UNKNOWN {
                        *slot = target;
                    }
                }
            }
        }
        target
    }

    /// The state of `config`, whose hash is `hash`, if interned.
    fn find(&self, config: &[u32], hash: u64) -> Option<u32> {
        let mut id = *self.ids.get(&hash)?;
        while id != DEAD {
            if self.config(id) == config {
                return Some(id);
            }
            id = self.same_hash.get(id as usize).copied().unwrap_or(DEAD);
        }
        None
    }

    /// The state of `config` (hashed to `hash`), interned now if new; `None` when full.
    /// Looks up before copying: most steps reach a known state.
    fn intern(&mut self, config: &[u32], hash: u64) -> Option<u32> {
        if config.is_empty() {
            return Some(DEAD);
        }
        if let Some(id) = self.find(config, hash) {
            return Some(id);
        }
        if self.len() >= self.capacity || self.config_words.len() + config.len() > self.word_budget {
            return None;
        }
        Some(self.push_state(config, hash))
    }

    fn push_state(&mut self, config: &[u32], hash: u64) -> u32 {
        let id = self.len() as u32;
        // Without the grammar at hand, every class is left to be stepped.
        let reading = on_grammar(&self.lent, &self.grammar, |grammar| grammar.reading(config)).unwrap_or_else(|| {
            Reading {
                readable: ByteSet::ALL,
                accepting: config_is_accepting(config),
                can_continue: config_can_continue(config),
            }
        });
        self.accepting.push(reading.accepting);
        self.can_continue.push(reading.can_continue);
        self.skip_sets.push(None);
        self.distances.push(UNKNOWN);
        self.closing_tokens.push(UNKNOWN);
        self.mask_states.push(MaskRoot::UNKNOWN);
        // Classes no stack can read are dead from the start: a fresh state's walk then steps
        // only the few classes that lead somewhere, not every class of the grammar.
        self.transitions.extend(self.class_bytes.iter().map(|&byte| {
            if reading.readable.contains(byte) {
                UNKNOWN
            } else {
                DEAD
            }
        }));
        let previous = if config.is_empty() {
            DEAD
        } else {
            self.ids.insert(hash, id).unwrap_or(DEAD)
        };
        self.same_hash.push(previous);
        self.config_words.extend_from_slice(config);
        self.config_starts.push(self.config_words.len() as u32);
        self.peak = self.peak.max(self.len());
        id
    }

    /// Empties the table except for the states in `live`, whose ids are rewritten in place,
    /// and as many of `wanted` (in order) as fit in a quarter of the table, and in at most
    /// half of the room `live` leaves, in states and in words. A kept state keeps its skip
    /// set, and its mask state where that is kept too. Returns the new id of each kept state.
    pub(crate) fn clear_keeping(&mut self, live: &mut [u32], wanted: &[u32]) -> IdRemap {
        let old_words = std::mem::take(&mut self.config_words);
        let old_starts = std::mem::replace(&mut self.config_starts, vec![0]);
        let old = (&old_words[..], &old_starts[..]);
        let old_skip_sets = std::mem::take(&mut self.skip_sets);
        let old_mask_states = std::mem::take(&mut self.mask_states);
        self.ids.clear();
        self.same_hash.clear();
        self.transitions.clear();
        self.accepting.clear();
        self.can_continue.clear();
        self.distances.clear();
        self.closing_tokens.clear();
        self.detached_utf8.clear();
        self.clears += 1;
        self.push_state(&[], config_hash(&[]));
        let mut remap = IdRemap(vec![UNKNOWN; old_starts.len().saturating_sub(1)]);
        remap.set(DEAD, DEAD);
        for state in live.iter_mut() {
            *state = self.keep(old, &mut remap, *state);
        }
        let most_states =
            self.len() + (self.capacity / 4).min(self.capacity.saturating_sub(self.len()) / 2);
        let words = self.config_words.len();
        let most_words =
            words + (self.word_budget / 4).min(self.word_budget.saturating_sub(words) / 2);
        for &state in wanted {
            if self.len() >= most_states {
                break;
            }
            let words = config_in(old.0, old.1, state).len();
            if remap.get(state).is_none()
                && words > 0
                && self.config_words.len() + words <= most_words
            {
                self.keep(old, &mut remap, state);
            }
        }
        for (before, &after) in remap.0.iter().enumerate() {
            if after == UNKNOWN || after == DEAD {
                continue;
            }
            if let Some(&set) = old_skip_sets.get(before).and_then(|set| set.as_ref()) {
                self.remember_skip_set(after, set);
            }
            let root = old_mask_states.get(before).copied().unwrap_or(MaskRoot::UNKNOWN);
            if let Some(state) = remap.get(root.state) {
                self.remember_mask_state(after, MaskRoot { state, ..root });
            }
        }
        remap
    }

    /// Interns `state` of the table being cleared (its words and starts, `old`) again, once;
    /// DEAD for an unknown id.
    fn keep(&mut self, old: (&[u32], &[u32]), remap: &mut IdRemap, state: u32) -> u32 {
        if let Some(kept) = remap.get(state) {
            return kept;
        }
        let config = config_in(old.0, old.1, state);
        if config.is_empty() {
            return DEAD;
        }
        let kept = self.push_state(config, config_hash(config));
        remap.set(state, kept);
        kept
    }
}

/// The state masks of a state are computed from (see `CompiledGrammar::normalize_for_horizon`),
/// and whether a bounded repetition was moved to reach it: then every token beyond the
/// vocabulary's horizon needs a check of its own, not only the whitespace-heavy ones.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MaskRoot {
    pub(crate) state: u32,
    pub(crate) counters_moved: bool,
    /// See `Normalized::uniform_lowering`: then the state's successors can be read off the
    /// mask state's, whose transitions the mask walk has mostly filled.
    pub(crate) uniform_lowering: Option<u32>,
}

impl MaskRoot {
    const UNKNOWN: MaskRoot = MaskRoot { state: UNKNOWN, counters_moved: false, uniform_lowering: None };

    /// A state that is its own mask state.
    pub(crate) fn itself(state: u32) -> MaskRoot {
        MaskRoot { state, counters_moved: false, uniform_lowering: None }
    }
}

/// The new id of each state kept across a clear of a [`StateTable`], by its old id.
pub(crate) struct IdRemap(Vec<u32>);

impl IdRemap {
    /// The new id of `old`, if that state was kept.
    pub(crate) fn get(&self, old: u32) -> Option<u32> {
        self.0.get(old as usize).copied().filter(|id| *id != UNKNOWN)
    }

    fn set(&mut self, old: u32, new: u32) {
        if let Some(slot) = self.0.get_mut(old as usize) {
            *slot = new;
        }
    }
}

/// Runs `operation` on the grammar lent for this operation, or else on the table's own while
/// it is alive; `None` when it is gone. The lent one saves an upgrade per step (two atomic
/// operations, as much as a cheap step); a matcher holds it, so it is alive.
fn on_grammar<R>(
    lent: &Option<Arc<CompiledGrammar>>,
    owner: &Weak<CompiledGrammar>,
    operation: impl FnOnce(&CompiledGrammar) -> R,
) -> Option<R> {
    match lent.as_deref() {
        Some(grammar) => Some(operation(grammar)),
        None => owner.upgrade().map(|grammar| operation(&grammar)),
    }
}

/// State `state`'s configuration in a table's back-to-back words (empty for an unknown id).
fn config_in<'a>(words: &'a [u32], starts: &[u32], state: u32) -> &'a [u32] {
    let index = state as usize;
    match (starts.get(index), starts.get(index + 1)) {
        (Some(&start), Some(&end)) => words.get(start as usize..end as usize).unwrap_or_default(),
        _ => &[],
    }
}

/// Allowed-token masks by state id, bounded; cleared whole when full. Across a clear of the
/// state table the masks of the states it kept are kept, under their new ids.
pub(crate) struct MaskCache {
    index: HashMap<u32, usize>,
    masks: Vec<Arc<TokenMask>>,
    /// Per slot: when it was last stored or served.
    used: Vec<u64>,
    tick: u64,
    capacity: usize,
    pub(crate) clears: u64,
}

impl MaskCache {
    pub(crate) fn new(capacity: usize) -> Self {
        MaskCache {
            index: HashMap::new(),
            masks: Vec::new(),
            used: Vec::new(),
            tick: 0,
            capacity: capacity.max(1),
            clears: 0,
        }
    }

    /// The slot of the mask of `state`, if cached; marks it used.
    pub(crate) fn get(&mut self, state: u32) -> Option<usize> {
        let slot = self.index.get(&state).copied()?;
        self.tick += 1;
        if let Some(used) = self.used.get_mut(slot) {
            *used = self.tick;
        }
        Some(slot)
    }

    pub(crate) fn mask(&self, slot: usize) -> Option<&Arc<TokenMask>> {
        self.masks.get(slot)
    }

    /// Stores `mask` for `state`, clearing the cache first when it is full.
    pub(crate) fn insert(&mut self, state: u32, mask: Arc<TokenMask>) {
        if self.masks.len() >= self.capacity {
            self.clear();
            self.clears += 1;
        }
        self.tick += 1;
        self.masks.push(mask);
        self.used.push(self.tick);
        self.index.insert(state, self.masks.len() - 1);
    }

    /// Drops every mask; not counted as a clear of this cache.
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.masks.clear();
        self.used.clear();
    }

    /// The states with a mask, the most recently used first.
    fn states_by_recency(&self) -> Vec<u32> {
        let mut held: Vec<(u64, u32)> = self
            .index
            .iter()
            .map(|(&state, &slot)| (self.used.get(slot).copied().unwrap_or(0), state))
            .collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        held.into_iter().map(|(_, state)| state).collect()
    }

    /// Keeps the masks of the states `remap` kept, under their new ids; drops the others.
    fn renumber(&mut self, remap: &IdRemap) {
        let masks = std::mem::take(&mut self.masks);
        let used = std::mem::take(&mut self.used);
        // The index names each state's current slot; a slot stored over later is not in it.
        for (state, slot) in std::mem::take(&mut self.index) {
            let (Some(new), Some(mask)) = (remap.get(state), masks.get(slot)) else {
                continue;
            };
            self.masks.push(mask.clone());
            self.used.push(used.get(slot).copied().unwrap_or(0));
            self.index.insert(new, self.masks.len() - 1);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.masks.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

/// The state table and mask cache of one (grammar, vocabulary) pair, shared by every matcher
/// of that pair so that a schema served again starts warm. Matchers of one model run on one
/// thread, so the lock is uncontended; a matcher keeps its own configuration and re-interns
/// it when a clear (by any matcher) changed the state ids.
pub(crate) struct SharedCaches {
    pub(crate) table: StateTable,
    pub(crate) masks: MaskCache,
}

impl SharedCaches {
    /// The state of `config` (a configuration of the table's grammar), interned; clears the
    /// table (see [`SharedCaches::clear_keeping`]) when it is full. DEAD for the empty
    /// configuration.
    pub(crate) fn adopt(&mut self, config: &[u32], live: &mut [u32]) -> u32 {
        let hash = config_hash(config);
        match self.table.intern(config, hash) {
            Some(id) => id,
            None => {
                self.clear_keeping(live);
                self.table.intern(config, hash).unwrap_or(DEAD)
            }
        }
    }

    /// Clears the state table keeping `live` (ids rewritten in place) and the states of the
    /// masks most recently used, as many as the table keeps; their masks are kept under
    /// their new ids, the others dropped.
    pub(crate) fn clear_keeping(&mut self, live: &mut [u32]) {
        let wanted = self.masks.states_by_recency();
        let remap = self.table.clear_keeping(live, &wanted);
        self.masks.renumber(&remap);
    }

    /// Locks `shared`; a poisoned lock (a panic elsewhere mid-update) is started afresh.
    pub(crate) fn lock(shared: &Mutex<SharedCaches>) -> MutexGuard<'_, SharedCaches> {
        match shared.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                shared.clear_poison();
                let mut guard = poisoned.into_inner();
                guard.table.lend(None);
                guard.table.clear_keeping(&mut [], &[]);
                guard.masks.clear();
                guard
            }
        }
    }
}

/// Finds the [`SharedCaches`] of a (grammar, vocabulary) pair, kept among the grammar's
/// per-vocabulary attachments so they live as long as the compiled grammar does (the tables
/// point back to it weakly).
pub(crate) struct CacheRegistry;

impl CacheRegistry {
    /// The caches of `grammar` with `trie`, created on first use.
    pub(crate) fn caches_for(
        grammar: &Arc<CompiledGrammar>,
        trie: &Arc<TokenTrie>,
    ) -> Arc<Mutex<SharedCaches>> {
        // Room for the dead state, a matcher's current one, one per trie depth, and the next.
        let create = || {
            Arc::new(Mutex::new(SharedCaches {
                table: StateTable::new(grammar, trie.max_depth() + 4),
                masks: MaskCache::new(grammar.limits().mask_cache),
            }))
        };
        let attached = grammar
            .attachments()
            .get_or_attach(trie, || create() as Arc<dyn Any + Send + Sync>);
        // Only this module attaches values, all of this type; were another one there, this
        // matcher would run on caches of its own.
        attached
            .downcast::<Mutex<SharedCaches>>()
            .unwrap_or_else(|_| create())
    }
}
