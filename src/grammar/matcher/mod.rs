//! [`Matcher`]: the per-request state of a constraint — where the automaton is, the two
//! caches it shares with the other matchers of its grammar and vocabulary, and its own stats —
//! and the operations the sampler calls at each token.
//!
//! The sampler samples first and asks [`Matcher::is_allowed`] (a walk of one token's bytes
//! through the transition table, usually cached); only when the token is refused does it ask
//! for the full [`Matcher::compute_mask`], a single forward pass over the token trie that skips
//! every subtree whose prefix kills the automaton, cached per state.
//!
//! Cost: a cached mask is a lookup; a new one costs the trie nodes whose prefix stays alive
//! (tens of microseconds typically, a full pass over the vocabulary at worst).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::automaton::CompiledGrammar;
use super::check::describe_expected;
use super::cache::{CacheRegistry, MaskRoot, SharedCaches, SkipSet, DEAD, FULL};
use super::error::GrammarError;
use super::ir::{is_not_whitespace, starts_character, utf8_pending_after, ByteSet};
use super::lexer::character_count;
use super::mask::TokenMask;
use super::stats::MaskStats;
use super::toktrie::{TokenTrie, NO_TOKEN, ROOT_PARENT};

/// A state's skip set is computed only when at least this many trie nodes (or a sixteenth of
/// a small trie) are left to walk below it: computing it costs about as much as walking a few
/// thousand nodes.
const SKIP_SET_MIN_NODES: usize = 2048;

/// A state's skip set is computed only once this many of its children were found alive in a
/// walk: a state that lets few bytes through has small masks, cheaper to walk than to analyse.
const SKIP_SET_MIN_ALIVE: u16 = 24;

/// The walk's own state also qualifies once this many nodes below it were found alive.
const ROOT_MIN_ALIVE: usize = 256;

/// How far a chain of states (a bounded repetition) is followed for a skip set: tokens of
/// more characters than this are walked instead. Each chain state costs a transition per byte
/// class.
const CHAIN_MAX: u32 = 32;

/// `depth_children` of a node whose children the walk visits one by one.
const NOT_WIDE: (u32, u32) = (u32::MAX, 0);

/// The constraint state of one generation.
pub struct Matcher {
    grammar: Arc<CompiledGrammar>,
    trie: Arc<TokenTrie>,
    /// The state table and masks of this grammar and vocabulary, shared with every other
    /// matcher of the pair (see [`SharedCaches`]).
    shared: Arc<Mutex<SharedCaches>>,
    /// The current configuration, and its id in the shared table while the table's epoch is
    /// `epoch` (a clear by another matcher renumbers states; the id is then re-interned).
    config: Box<[u32]>,
    state: u32,
    epoch: u64,
    accepting: bool,
    can_continue: bool,
    /// The mask last returned by [`Matcher::compute_mask`].
    last_mask: Option<Arc<TokenMask>>,
    /// One state (and whitespace run offset) per trie depth during a walk; kept to reuse the
    /// allocation.
    depth_path: RunPath,
    /// The same per exit-trie depth during a walk of a loop's exits (see `lexer.rs`).
    exit_path: RunPath,
    /// Which states read whitespace only by spending budget (see `lexer_whitespace.rs`).
    run_states: RunStates,
    /// Per trie depth during a walk: the bytes whose subtrees may be skipped, and the UTF-8
    /// continuation bytes still owed.
    depth_skips: Vec<SkipSet>,
    depth_pending: Vec<u8>,
    depth_ends: Vec<u32>,
    depth_alive: Vec<u16>,
    /// Per trie depth: every byte on the path so far is in the start mask's byte set.
    depth_within: Vec<bool>,
    /// Per trie depth: where a wide node's walk is in its list of children (see `walk_trie`).
    depth_children: Vec<(u32, u32)>,
    /// UTF-8 continuation bytes the committed text still owes (it may end mid-character).
    pending_continuations: u8,
    /// Masks that came from the tables of a bounded chain, for tests to see that path ran.
    #[cfg(test)]
    bounded_loop_masks: usize,
    /// Successors read off a mask state (`state_after_via_mask_state`), for the same.
    #[cfg(test)]
    successors_via_mask_state: usize,
    /// Exit subtrees a skip set allowed whole (`walk_exits`), for the same.
    #[cfg(test)]
    exit_subtrees_skipped: usize,
    /// States made while checking tokens longer than the horizon one by one, for the same.
    #[cfg(test)]
    long_check_states: usize,
    /// Trie subtrees of whitespace a run allowed whole (`run_covers`), for the same.
    #[cfg(test)]
    run_subtrees_allowed: usize,
    /// Whether this step needed a new mask (for the hit rate).
    computed_this_step: bool,
    stats: MaskStats,
}

impl Matcher {
    pub fn new(grammar: Arc<CompiledGrammar>, trie: Arc<TokenTrie>) -> Self {
        let shared = CacheRegistry::caches_for(&grammar, &trie);
        let config: Box<[u32]> = grammar.initial_config().into();
        let mut matcher = Matcher {
            grammar,
            trie,
            shared,
            config,
            state: DEAD,
            // No table epoch is this: the first use interns the configuration.
            epoch: u64::MAX,
            accepting: false,
            can_continue: false,
            last_mask: None,
            depth_path: RunPath::default(),
            exit_path: RunPath::default(),
            run_states: RunStates::default(),
            depth_skips: Vec::new(),
            depth_pending: Vec::new(),
            depth_ends: Vec::new(),
            depth_alive: Vec::new(),
            depth_within: Vec::new(),
            depth_children: Vec::new(),
            pending_continuations: 0,
            #[cfg(test)]
            bounded_loop_masks: 0,
            #[cfg(test)]
            successors_via_mask_state: 0,
            #[cfg(test)]
            exit_subtrees_skipped: 0,
            #[cfg(test)]
            long_check_states: 0,
            #[cfg(test)]
            run_subtrees_allowed: 0,
            computed_this_step: false,
            stats: MaskStats::default(),
        };
        let shared = matcher.shared.clone();
        let mut caches = SharedCaches::lock(&shared);
        matcher.sync(&mut caches);
        matcher.accepting = caches.table.is_accepting(matcher.state);
        matcher.can_continue = caches.table.can_continue(matcher.state);
        matcher.refresh_stats(&caches);
        drop(caches);
        matcher
    }

    /// Makes `self.state` an id of the shared table's current epoch.
    fn sync(&mut self, caches: &mut SharedCaches) {
        if self.epoch != caches.table.epoch() {
            self.state = caches.adopt(&self.config, &mut []);
            self.epoch = caches.table.epoch();
        }
    }

    /// Runs `operation` on the shared caches, with the current state valid in them, counting
    /// the clears and overflows it caused in this matcher's stats.
    fn with_caches<R>(&mut self, operation: impl FnOnce(&mut Self, &mut SharedCaches) -> R) -> R {
        let shared = self.shared.clone();
        let mut caches = SharedCaches::lock(&shared);
        let clears_before = caches.table.clears + caches.masks.clears;
        let overflows_before = caches.table.overflows;
        self.sync(&mut caches);
        caches.table.lend(Some(self.grammar.clone()));
        let result = operation(self, &mut caches);
        caches.table.lend(None);
        self.epoch = caches.table.epoch();
        self.stats.table_clears += (caches.table.clears + caches.masks.clears) - clears_before;
        self.stats.overflows += caches.table.overflows - overflows_before;
        self.refresh_stats(&caches);
        result
    }

    /// Whether `token` may come next: its bytes keep the automaton alive, or it ends
    /// generation and the automaton accepts.
    pub fn is_allowed(&mut self, token: u32) -> bool {
        let started = Instant::now();
        let allowed =
            self.with_caches(|matcher, caches| matcher.state_after(caches, token).is_some());
        self.add_time(started);
        allowed
    }

    /// Every token allowed next (end-of-generation tokens exactly when accepting).
    pub fn compute_mask(&mut self) -> &TokenMask {
        let started = Instant::now();
        let mask = self.with_caches(|matcher, caches| {
            // The exact mask of this very state, once worked out: a position inside a string
            // or between list items comes back many times.
            let own = caches.masks.get(matcher.state);
            if let Some(mask) = own.and_then(|slot| caches.masks.mask(slot)) {
                return mask.clone();
            }
            // Masks are computed and cached for the state that behaves like this one for any
            // token within the vocabulary's horizon (a count far from its bound, a whitespace
            // budget far from spent), so positions inside a long bounded string share one.
            let horizon = matcher.trie.horizon;
            let mask_root = match caches.table.known_mask_state(matcher.state) {
                Some(known) => known,
                None => {
                    let config = caches.table.config(matcher.state);
                    let known = match matcher.grammar.normalize_for_horizon(config, horizon) {
                        Some(normalized) => {
                            let root = matcher.adopt_config(caches, &normalized.config);
                            // A state that would not fit even in a cleared table: the
                            // mask comes from the current state itself.
                            if root == DEAD {
                                MaskRoot::itself(matcher.state)
                            } else {
                                MaskRoot {
                                    state: root,
                                    counters_moved: normalized.counters_moved,
                                    uniform_lowering: normalized.uniform_lowering,
                                }
                            }
                        }
                        None => MaskRoot::itself(matcher.state),
                    };
                    caches.table.remember_mask_state(matcher.state, known);
                    known
                }
            };
            let root = mask_root.state;
            let normalized = root != matcher.state;
            let cached = caches.masks.get(root);
            let mask = match cached.and_then(|slot| caches.masks.mask(slot)) {
                Some(mask) => mask.clone(),
                None => {
                    matcher.computed_this_step = true;
                    matcher.stats.masks_computed += 1;
                    let (mask, root) = match matcher.mask_via_loops(caches, root) {
                        Some(computed) => computed,
                        None => matcher.mask_of(caches, root),
                    };
                    let mask = Arc::new(mask);
                    caches.masks.insert(root, mask.clone());
                    mask
                }
            };
            if !normalized || matcher.trie.long_tokens.is_empty() {
                return mask;
            }
            // Tokens longer than the horizon may behave otherwise: each is checked itself, and
            // the mask copied only when one does.
            let mut exact: Option<TokenMask> = None;
            let trie = matcher.trie.clone();
            // Stepped from the state `long_token_root` finds, worked out on first use.
            let mut long_root: Option<Option<u32>> = None;
            #[cfg(test)]
            let states_before = caches.table.len();
            for &long_token in &trie.long_tokens {
                // Only whitespace used was lowered, and both budgets still cover this token.
                if !mask_root.counters_moved && long_token.whitespace_bytes <= horizon.saturating_add(1) {
                    continue;
                }
                let token = long_token.id;
                let by_whitespace = trie
                    .token_bytes(token)
                    .and_then(|bytes| matcher.whitespace_token_allowed(caches, long_token, bytes));
                let allowed = match by_whitespace {
                    Some(allowed) => allowed,
                    None => {
                        let from = long_root.get_or_insert_with(|| matcher.long_token_root(caches));
                        matcher.state_after_from(caches, from, token).is_some()
                    }
                };
                if allowed != mask.is_set(token) {
                    let exact = exact.get_or_insert_with(|| (*mask).clone());
                    if allowed {
                        exact.set(token);
                    } else {
                        exact.unset(token);
                    }
                }
            }
            #[cfg(test)]
            {
                matcher.long_check_states += caches.table.len().saturating_sub(states_before);
            }
            let exact = exact.map_or(mask, Arc::new);
            // Under this state's own id (current after any clear on the way).
            caches.masks.insert(matcher.state, exact.clone());
            exact
        });
        self.add_time(started);
        self.last_mask.insert(mask)
    }

    /// [`Matcher::compute_mask`] as the shared mask itself, for a caller that keeps it to tell
    /// whether the next mask is the same one.
    pub fn compute_mask_shared(&mut self) -> Arc<TokenMask> {
        self.compute_mask();
        self.last_mask.clone().unwrap_or_else(|| Arc::new(TokenMask::new(self.trie.vocab_size())))
    }

    /// Advances past `token`; refuses a token the grammar does not allow here, leaving the
    /// state unchanged.
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        let started = Instant::now();
        let next = self.with_caches(|matcher, caches| {
            let next = matcher.state_after(caches, token)?;
            matcher.config = caches.table.config(next).into();
            matcher.accepting = caches.table.is_accepting(next);
            matcher.can_continue = caches.table.can_continue(next);
            Some(next)
        });
        let result = match next {
            Some(next) => {
                self.state = next;
                for &byte in self.trie.token_bytes(token).unwrap_or_default() {
                    self.pending_continuations = utf8_pending_after(self.pending_continuations, byte);
                }
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
        result
    }

    /// Whether the text so far is a complete sentence of the grammar.
    pub fn is_accepting(&self) -> bool {
        self.accepting
    }

    /// Whether some non-empty continuation exists.
    pub fn can_continue(&self) -> bool {
        self.can_continue
    }

    pub fn stats(&self) -> &MaskStats {
        &self.stats
    }

    pub fn grammar(&self) -> &Arc<CompiledGrammar> {
        &self.grammar
    }

    pub fn trie(&self) -> &Arc<TokenTrie> {
        &self.trie
    }

    /// Forgets every cached mask of this grammar and vocabulary (transitions stay); for
    /// measuring the cost of a mask walk.
    pub fn forget_masks(&mut self) {
        SharedCaches::lock(&self.shared).masks.clear();
    }

    /// What the grammar expects next, for messages.
    pub fn expected(&self) -> String {
        describe_expected(&self.grammar, &self.config)
    }

    fn rejection(&self, token: u32) -> GrammarError {
        match self.trie.token_bytes(token) {
            None => GrammarError::UnknownToken {
                token,
                vocab_size: self.trie.vocab_size(),
            },
            Some(bytes) => GrammarError::TokenRejected {
                token,
                text: String::from_utf8_lossy(bytes).into_owned(),
            },
        }
    }

    /// Clears the transition table keeping the current state and `also_live` (and the masks
    /// it has room to keep, see [`SharedCaches::clear_keeping`]).
    fn clear_tables(&mut self, caches: &mut SharedCaches, also_live: &mut [u32]) {
        let mut live = Vec::with_capacity(also_live.len() + 1);
        live.push(self.state);
        live.extend_from_slice(also_live);
        caches.clear_keeping(&mut live);
        self.state = live[0];
        self.epoch = caches.table.epoch();
        also_live.copy_from_slice(&live[1..]);
    }

    /// One forward pass over the trie from the current state. A subtree is skipped as soon as
    /// its prefix kills the automaton. From a state that loops on a set of characters (or
    /// leads into such a loop), a subtree of valid UTF-8 tokens made only of their bytes is
    /// allowed whole without being walked; inside a character the set of the state where the
    /// character began still applies while the character's bytes belong to it.
    /// The walk starts from `root` (the current state, or one equivalent to it for the
    /// tokens walked); returns the mask and `root`'s id after any table clear on the way.
    fn walk_trie(&mut self, caches: &mut SharedCaches, root: u32) -> (TokenMask, u32) {
        let trie = self.trie.clone();
        let nodes = &trie.nodes[..];
        let subtree_bytes = &trie.subtree_bytes[..];
        let subtree_max_len = &trie.subtree_max_len[..];
        let depth_count = trie.max_depth() + 1;
        let mut path = std::mem::take(&mut self.depth_path);
        path.start(depth_count, root);
        // depth_skips[d]: bytes and a character budget such that a subtree below the node at
        // depth d made of valid UTF-8 tokens of those bytes, within the budget, is allowed.
        let mut depth_skips = std::mem::take(&mut self.depth_skips);
        depth_skips.resize(depth_count, SkipSet::NONE);
        // depth_pending[d]: continuation bytes still owed after the node at depth d.
        let mut depth_pending = std::mem::take(&mut self.depth_pending);
        depth_pending.resize(depth_count, 0);
        // depth_ends[d]: where the subtree of the node at depth d ends (the root's: all nodes).
        let mut depth_ends = std::mem::take(&mut self.depth_ends);
        depth_ends.resize(depth_count, 0);
        depth_ends[0] = nodes.len() as u32;
        // depth_alive[d]: children of the node at depth d found alive so far in this walk.
        let mut depth_alive = std::mem::take(&mut self.depth_alive);
        depth_alive.resize(depth_count, 0);
        let mut depth_within = std::mem::take(&mut self.depth_within);
        depth_within.resize(depth_count, false);
        depth_alive[0] = 0;
        let mut alive_total = 0usize;
        let skip_set_min_nodes = (nodes.len() / 16).clamp(64, SKIP_SET_MIN_NODES);
        depth_pending[0] = self.pending_continuations;
        depth_skips[0] = match self.pending_continuations {
            0 => caches
                .table
                .known_skip_set(root)
                .copied()
                .unwrap_or(SkipSet::NONE),
            _ => SkipSet::NONE,
        };
        // From a state that loops on a set of bytes, start from every token made only of them
        // (shared per vocabulary) instead of setting them subtree by subtree: a skipped
        // subtree whose path and bytes lie in that set needs no bits set.
        let (mut mask, mut within_bytes) = if depth_skips[0].capacity == u32::MAX {
            let start = trie.tokens_within(&depth_skips[0].bytes);
            ((*start).clone(), depth_skips[0].bytes)
        } else {
            (TokenMask::new(trie.vocab_size()), ByteSet::EMPTY)
        };
        depth_within[0] = depth_skips[0].capacity == u32::MAX;
        // The table epoch of the last clear made to learn a skip set, and whether they fit.
        let mut cleared_for_skip_set = None;
        let mut skip_sets_fit = true;
        // depth_children[d]: for a wide node at depth d, its next child in the trie's list
        // of its children and where that list ends; NOT_WIDE otherwise. A child whose byte
        // is known to kill the automaton is passed over there, without loading its node.
        let mut depth_children = std::mem::take(&mut self.depth_children);
        depth_children.resize(depth_count, NOT_WIDE);
        depth_children[0] = trie.wide_children(ROOT_PARENT).unwrap_or(NOT_WIDE);
        // The depth of the deepest node on the walk's path whose subtree holds `index`.
        let mut open = 0usize;
        let mut index = 0usize;
        'walk: loop {
            while index >= depth_ends[open] as usize {
                if open == 0 {
                    break 'walk;
                }
                open -= 1;
            }
            let (cursor, end) = &mut depth_children[open];
            if *cursor != NOT_WIDE.0 {
                let state = path.states[open];
                let wide = &trie.wide_children;
                while *cursor < *end {
                    let at = *cursor as usize;
                    let passed = (wide.nodes[at] as usize) < index;
                    let byte = wide.bytes[at];
                    // Also inside a whitespace run: a byte that ends it is refused after the
                    // run exactly where the run state refuses it (see `step_path`).
                    let dies = || is_not_whitespace(byte) && caches.table.known_next(state, byte) == Some(DEAD);
                    if !passed && !dies() {
                        break;
                    }
                    *cursor += 1;
                }
                match wide.nodes.get(*cursor as usize) {
                    Some(&child) if *cursor < *end => index = child as usize,
                    _ => {
                        index = depth_ends[open] as usize;
                        continue;
                    }
                }
            }
            let Some(node) = nodes.get(index) else { break };
            let depth = node.depth as usize;
            let skips = depth_skips[depth - 1];
            let fits = |chars: &u16| *chars as u32 <= skips.capacity;
            if trie.subtree_max_chars.get(index).is_some_and(fits)
                && subtree_bytes
                    .get(index)
                    .is_some_and(|bytes| bytes.is_subset_of(&skips.bytes))
            {
                let end = node.subtree_end as usize;
                if !(depth_within[depth - 1] && skips.bytes.is_subset_of(&within_bytes)) {
                    mask.set_all(trie.tokens_between(index, end));
                }
                index = end;
                continue;
            }
            let parent = path.states[depth - 1];
            let parent_in_run = path.offsets[depth - 1] > 0;
            // Indentation tokens under a state that reads whitespace by spending budget: allowed
            // whole while the budget outlasts the longest of them.
            if node.byte <= b' ' && depth_pending[depth - 1] == 0 {
                let rest = (u32::from(subtree_max_len.get(index).copied().unwrap_or(u16::MAX)) + 1)
                    .saturating_sub(depth as u32);
                let bytes = subtree_bytes.get(index).unwrap_or(&ByteSet::ALL);
                if self.run_covers(caches, parent, path.offsets[depth - 1], bytes, rest) {
                    let end = node.subtree_end as usize;
                    mask.set_all(trie.tokens_between(index, end));
                    index = end;
                    #[cfg(test)]
                    {
                        self.run_subtrees_allowed += 1;
                    }
                    continue;
                }
            }
            let longest = || u32::from(subtree_max_len.get(index).copied().unwrap_or(u16::MAX));
            let next = self.step_path(caches, &mut path, depth, node.byte, longest);
            if next == DEAD {
                index = node.subtree_end as usize;
                continue;
            }
            if next == FULL {
                // Keep the states of the path being walked; the current state stays first.
                self.clear_tables(caches, &mut path.states[0..depth]);
                continue;
            }
            // Inside a whitespace run the state stands for another one (see
            // `lexer_whitespace.rs`): its skip sets and loop tables do not apply.
            let in_run = path.offsets[depth] > 0;
            if depth == 1 && !in_run && node.subtree_end as usize - index >= skip_set_min_nodes {
                // A big subtree into a loop (a string's opening quote): the vocabulary's
                // tables for it, instead of walking it.
                if let Some(exits) = self.lead_exits(caches, next, node.byte) {
                    mask.union_with(&exits.within);
                    self.walk_exits(caches, next, &exits, &mut mask, &mut path.states[0..1]);
                    index = node.subtree_end as usize;
                    continue;
                }
            }
            let parent_pending = depth_pending[depth - 1];
            depth_alive[depth - 1] = depth_alive[depth - 1].saturating_add(1);
            alive_total += 1;
            let left_under_parent = depth_ends[depth - 1] as usize - index;
            if parent_pending == 0
                && skip_sets_fit
                && !parent_in_run
                && (depth_alive[depth - 1] >= SKIP_SET_MIN_ALIVE
                    || (depth == 1 && alive_total >= ROOT_MIN_ALIVE))
                && left_under_parent >= skip_set_min_nodes
                && caches
                    .table
                    .known_skip_set(parent)
                    .is_none_or(|known| known.is_short(CHAIN_MAX / 2))
                && !self.is_run_state(caches, parent)
            {
                // Learn the bytes this state lets through unchanged or along a chain, so that
                // its big subtrees can be allowed without a walk. That costs a transition per
                // byte class per chain state, so only where much of the trie is left below.
                let weights = &trie.byte_weights;
                let learned = caches.table.skip_set(
                    parent,
                    weights,
                    trie.many_non_ascii,
                    trie.max_chars.min(CHAIN_MAX),
                );
                if learned.is_none() {
                    // The table filled up on the way. Left full, every later child of this
                    // state would work the set out again and fail the same way (a long
                    // bounded string: hundreds of milliseconds); so the table is cleared now,
                    // unless it was just cleared for this and the set does not fit at all.
                    if cleared_for_skip_set == Some(caches.table.epoch()) {
                        skip_sets_fit = false;
                    } else {
                        self.clear_tables(caches, &mut path.states[0..depth]);
                        cleared_for_skip_set = Some(caches.table.epoch());
                        continue;
                    }
                }
                if let Some(set) = learned {
                    depth_skips[depth - 1] = set;
                    if depth == 1 && set.capacity == u32::MAX && !depth_within[0] {
                        // The walk's own state loops after all: its tokens made only of the
                        // loop's bytes are allowed; subtrees opened before this still set
                        // their bits themselves.
                        mask.union_with(&trie.tokens_within(&set.bytes));
                        within_bytes = set.bytes;
                        depth_within[0] = true;
                    }
                }
            }
            let pending = utf8_pending_after(parent_pending, node.byte);
            depth_pending[depth] = pending;
            let parent_skips = depth_skips[depth - 1];
            depth_skips[depth] = if in_run {
                SkipSet::NONE
            } else if pending == 0 {
                caches
                    .table
                    .known_skip_set(next)
                    .copied()
                    .unwrap_or(SkipSet::NONE)
            } else if parent_skips.bytes.contains(node.byte) {
                // Inside a character begun under the parent's set: the set still holds, with
                // the character this byte starts (if any) taken from the budget.
                let started = u32::from(starts_character(node.byte));
                SkipSet {
                    capacity: parent_skips.capacity.saturating_sub(started),
                    ..parent_skips
                }
            } else {
                SkipSet::NONE
            };
            depth_within[depth] = depth_within[depth - 1] && within_bytes.contains(node.byte);
            depth_ends[depth] = node.subtree_end;
            depth_alive[depth] = 0;
            if node.token != NO_TOKEN {
                mask.set(node.token);
            }
            depth_children[depth] = match node.wide {
                true => trie.wide_children(index as u32).unwrap_or(NOT_WIDE),
                false => NOT_WIDE,
            };
            open = depth;
            index += 1;
        }
        trie.mirror_duplicates(&mut mask);
        if caches.table.is_accepting(self.state) {
            for &token in trie.eog_tokens() {
                mask.set(token);
            }
        }
        let root = path.states[0];
        self.depth_path = path;
        self.depth_skips = depth_skips;
        self.depth_pending = depth_pending;
        self.depth_ends = depth_ends;
        self.depth_alive = depth_alive;
        self.depth_within = depth_within;
        self.depth_children = depth_children;
        (mask, root)
    }

    /// The mask of `root` when it lies inside bounded repetitions with many items left: the
    /// mask of the same state with those repetitions unbounded (one state for every count,
    /// cached, and cheap to walk because it loops), exact for the tokens too short to reach a
    /// bound; the tokens long enough to are walked from `root` itself. `None` when `root` is
    /// in no such repetition. Returns the mask and `root`'s id after any table clear.
    fn mask_via_loops(&mut self, caches: &mut SharedCaches, root: u32) -> Option<(TokenMask, u32)> {
        let floor = self.trie.counter_floor;
        let unbound = self.grammar.unbind_counters(caches.table.config(root), floor.saturating_add(2))?;
        let config: Box<[u32]> = caches.table.config(root).into();
        // Tokens of fewer than `fewest - 1` bytes (or characters) cannot reach a bound (see
        // `unbind_counters`).
        let walk_from = unbound.fewest - 1;
        let epoch = caches.table.epoch();
        let unbound_state = self.adopt_config(caches, &unbound.config);
        if unbound_state == DEAD {
            return None;
        }
        let cached = caches
            .masks
            .get(unbound_state)
            .and_then(|slot| caches.masks.mask(slot))
            .cloned();
        let unbound_mask = match cached {
            Some(mask) => mask,
            None => {
                let (mask, unbound_state) = self.mask_of(caches, unbound_state);
                let mask = Arc::new(mask);
                caches.masks.insert(unbound_state, mask.clone());
                mask
            }
        };
        let mut root = root;
        if caches.table.epoch() != epoch {
            root = self.adopt_config(caches, &config);
        }
        let mut mask = (*unbound_mask).clone();
        let trie = self.trie.clone();
        let long_tokens = match unbound.in_characters {
            true => trie.split_by_characters(walk_from).0,
            false => trie.tokens_at_least(walk_from),
        };
        for &token in long_tokens {
            mask.unset(token);
        }
        let root = self.walk_long_tokens(caches, root, walk_from, unbound.in_characters, &mut mask);
        Some((mask, root))
    }

    /// Interns `config`, keeping the current state across a clear that makes room.
    fn adopt_config(&mut self, caches: &mut SharedCaches, config: &[u32]) -> u32 {
        let mut live = [self.state];
        let epoch = caches.table.epoch();
        let id = caches.adopt(config, &mut live);
        if caches.table.epoch() != epoch {
            self.state = live[0];
        }
        id
    }

    /// Sets in `mask` every token of at least `min_len` bytes (characters, with
    /// `in_characters`) that `root` allows: a walk of only the trie subtrees holding such
    /// tokens. Returns `root`'s id after any table clear.
    fn walk_long_tokens(
        &mut self,
        caches: &mut SharedCaches,
        root: u32,
        min_len: u32,
        in_characters: bool,
        mask: &mut TokenMask,
    ) -> u32 {
        let trie = self.trie.clone();
        let nodes = &trie.nodes[..];
        let mut path = std::mem::take(&mut self.depth_path);
        path.start(trie.max_depth() + 1, root);
        // characters[d]: the characters of the path's bytes down to depth d.
        let mut characters = vec![0u32; trie.max_depth() + 1];
        let mut index = 0usize;
        while let Some(node) = nodes.get(index) {
            let depth = node.depth as usize;
            let longest = u32::from(trie.subtree_max_len.get(index).copied().unwrap_or(0));
            let most = match in_characters {
                true => characters[depth - 1] + u32::from(trie.subtree_max_chars.get(index).copied().unwrap_or(0)),
                false => longest,
            };
            if most < min_len {
                index = node.subtree_end as usize;
                continue;
            }
            let next = self.step_path(caches, &mut path, depth, node.byte, || longest);
            if next == DEAD {
                index = node.subtree_end as usize;
                continue;
            }
            if next == FULL {
                self.clear_tables(caches, &mut path.states[0..depth]);
                continue;
            }
            characters[depth] = characters[depth - 1] + u32::from(starts_character(node.byte));
            let reached = if in_characters { characters[depth] } else { depth as u32 };
            if node.token != NO_TOKEN && reached >= min_len {
                mask.set(node.token);
            }
            index += 1;
        }
        for &(token, same_as) in &trie.duplicates {
            let bytes = trie.token_bytes(token).unwrap_or_default();
            let length = if in_characters { character_count(bytes) } else { bytes.len() };
            if length as u32 >= min_len && mask.is_set(same_as) {
                mask.set(token);
            }
        }
        let root = path.states[0];
        self.depth_path = path;
        root
    }

    fn add_time(&mut self, started: Instant) {
        self.stats.mask_time_ns += started.elapsed().as_nanos() as u64;
    }

    /// The sizes of the shared caches (clears and overflows are counted per matcher).
    fn refresh_stats(&mut self, caches: &SharedCaches) {
        self.stats.states = caches.table.len();
        self.stats.states_capacity = caches.table.capacity();
        self.stats.states_peak = caches.table.peak;
        self.stats.masks = caches.masks.len();
        self.stats.masks_capacity = caches.masks.capacity();
    }
}


mod closing;
mod drafts;
mod lexer_walks;

mod successors;

mod lexer_whitespace;

use lexer_whitespace::{RunPath, RunStates};

#[cfg(test)]
mod tests;
