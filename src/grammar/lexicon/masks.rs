//! [`LexiconMatcher`]: a lexicon's automaton run over one generation, and its token masks.
//!
//! A position is an automaton state and a decoder state (a character or escape may be cut
//! between tokens). [`LexiconMatcher::is_allowed`] steps one token's bytes from it, stopping at
//! the first refused byte. Masks are cached per position, per vocabulary, on the lexicon, so
//! every request with the lexicon shares them; a full cache is cleared and counted.
//!
//! A deny list allows almost every token, so its masks are not walked whole. From a root (no
//! listed prefix pending) a token reads the same whatever came before, except for whether a
//! word character came last, and whether a listed word is complete and waits for its boundary:
//! the mask of each root (per decoder state) is one walk of the token trie, once per
//! vocabulary. From any other position, a token reads like from that position's root as soon
//! as every prefix that was pending when it began is gone (the automaton's longest prefix then
//! started inside the token), and from there on the root's mask already says what the token
//! does. So such a mask is the root's, corrected by a walk of only the trie paths along which
//! a pending prefix lives on: the ways the pending word or phrase can go on, a few hundred
//! nodes at most for real lists.
//!
//! Such a mask is kept as the root's plus the tokens it gives otherwise ([`LexMask::Delta`]),
//! so it costs little to keep and to intersect with a grammar's (see `intersection.rs`).
//!
//! An allow list allows few tokens, so its masks are one walk of the trie that skips every
//! subtree at its first refused byte.
//!
//! Cost: a check is a table step per byte; a deny mask from a root the first time for a
//! vocabulary and decoder state is a walk of the whole trie (milliseconds at 262k tokens); from
//! any other position a walk of its pending paths (hundreds of nodes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::decode::{is_probe, is_word_ascii, Decoder, START};
use super::dfa::{AFTER_BOUNDARY, DEAD, INSIDE_WORD, PENDING_WORD};
use super::error::LexiconError;
use super::intersection::{Intersection, LexMask};
use super::{Lexicon, LexiconKind, Target};
use crate::mask::TokenMask;
use crate::stats::MaskStats;
use crate::toktrie::{TokenTrie, NO_TOKEN, ROOT_PARENT};

/// Where the automaton and the decoder are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    state: u32,
    decoder: u8,
}

/// A position in a walk of pending paths: also the symbols read since the token began (a
/// space skipped after a space not counted) and whether the last one was a space.
#[derive(Clone, Copy, Debug)]
struct Frame {
    at: Position,
    read: u32,
    after_space: bool,
}

/// The masks of one lexicon on one vocabulary, shared by every matcher running them.
pub(crate) struct MaskTables {
    /// Deny lists: by root and decoder state, the mask of every token read from there.
    roots: HashMap<u64, Arc<TokenMask>>,
    /// By pair of roots: the tokens on which their masks differ, when few.
    differences: HashMap<(u64, u64), Option<Arc<[u32]>>>,
    masks: HashMap<u64, Arc<LexMask>>,
    /// Bytes the masks hold of their own, and the most they may.
    bytes: usize,
    budget: usize,
    clears: u64,
}

impl MaskTables {
    fn new(budget: usize) -> Self {
        MaskTables {
            roots: HashMap::new(),
            differences: HashMap::new(),
            masks: HashMap::new(),
            bytes: 0,
            budget,
            clears: 0,
        }
    }

    fn lock(tables: &Mutex<MaskTables>) -> MutexGuard<'_, MaskTables> {
        match tables.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn insert(&mut self, key: u64, mask: Arc<LexMask>) {
        let bytes = mask.own_bytes() + 64;
        if self.bytes + bytes > self.budget {
            self.masks.clear();
            self.bytes = 0;
            self.clears += 1;
        }
        self.bytes += bytes;
        self.masks.insert(key, mask);
    }

    /// The tokens on which two roots' masks differ; `None` when so many that intersecting
    /// afresh is cheaper than updating them one by one.
    fn difference(&mut self, a: u64, b: u64) -> Option<Arc<[u32]>> {
        let pair = (a.min(b), a.max(b));
        if let Some(known) = self.differences.get(&pair) {
            return known.clone();
        }
        let (first, second) = (self.roots.get(&a)?, self.roots.get(&b)?);
        let most = first.words().len();
        let mut tokens: Vec<u32> = Vec::new();
        for (index, (x, y)) in first.words().iter().zip(second.words()).enumerate() {
            let mut differ = x ^ y;
            while differ != 0 && tokens.len() <= most {
                tokens.push(index as u32 * 64 + differ.trailing_zeros());
                differ &= differ - 1;
            }
        }
        let found: Option<Arc<[u32]>> = (tokens.len() <= most).then(|| tokens.into());
        self.differences.insert(pair, found.clone());
        found
    }
}

fn key(target: Target, at: Position) -> u64 {
    (u64::from(at.state) << 16) | (u64::from(at.decoder) << 2) | target as u64
}

/// The lexicon part of one generation's constraint.
pub struct LexiconMatcher {
    lexicon: Arc<Lexicon>,
    trie: Arc<TokenTrie>,
    target: Target,
    decoder: &'static Decoder,
    tables: Arc<Mutex<MaskTables>>,
    at: Position,
    /// Whether this step needed a new mask (for the hit rate).
    computed_this_step: bool,
    stats: MaskStats,
    /// The open nodes of a walk of pending paths; kept to reuse the allocation.
    open: Vec<(Frame, Children)>,
    /// The mask [`LexiconMatcher::compute_mask`] returns.
    own: Intersection,
}

impl LexiconMatcher {
    /// A matcher at the start of the output; `None` where `lexicon` is compiled into the
    /// grammar for `target` instead (see [`Lexicon::runs_at_decode`]).
    pub fn new(lexicon: Arc<Lexicon>, trie: Arc<TokenTrie>, target: Target) -> Option<Self> {
        if !lexicon.runs_at_decode(target) {
            return None;
        }
        let budget = lexicon.mask_cache_bytes;
        let attached =
            lexicon.attachments.get_or_attach(&trie, || Arc::new(Mutex::new(MaskTables::new(budget))));
        // Only this module attaches values to a lexicon, all of this type.
        let tables = attached
            .downcast::<Mutex<MaskTables>>()
            .unwrap_or_else(|_| Arc::new(Mutex::new(MaskTables::new(budget))));
        let at = Position { state: lexicon.dfa.start, decoder: START };
        let states = lexicon.dfa.state_count();
        // The cache is bounded in bytes: its capacity in masks is counted in whole ones.
        let masks_capacity = budget / (trie.vocab_size() / 8).max(1);
        let stats = MaskStats { states, states_capacity: states, states_peak: states, masks_capacity, ..MaskStats::default() };
        Some(LexiconMatcher {
            decoder: Decoder::of(target.mode()),
            lexicon,
            trie,
            target,
            tables,
            at,
            computed_this_step: false,
            stats,
            open: Vec::new(),
            own: Intersection::default(),
        })
    }

    /// Whether `token` may come next: its bytes complete no banned entry (no word outside an
    /// allow list), or it ends generation where the output may end.
    pub fn is_allowed(&mut self, token: u32) -> bool {
        self.allows(token, false)
    }

    /// [`LexiconMatcher::is_allowed`], and when `must_end`, only where the output may end
    /// after `token` (the last token of a budget): one walk of the token either way.
    pub(crate) fn allows(&mut self, token: u32, must_end: bool) -> bool {
        let started = Instant::now();
        let allowed = match self.after(token) {
            Some(next) => !must_end || self.accepts(next),
            None => false,
        };
        self.add_time(started);
        allowed
    }

    /// Every token allowed next (end-of-generation tokens exactly where the output may end).
    pub fn compute_mask(&mut self) -> &TokenMask {
        let parts = self.mask_parts();
        let started = Instant::now();
        let tables = &self.tables;
        let mask = self.own.update(None, parts, |a, b| MaskTables::lock(tables).difference(a, b));
        self.stats.mask_time_ns += started.elapsed().as_nanos() as u64;
        mask
    }

    /// The mask at the current position, as the lexicon's tables keep it.
    pub(crate) fn mask_parts(&mut self) -> Arc<LexMask> {
        let started = Instant::now();
        let tables = self.tables.clone();
        let mut tables = MaskTables::lock(&tables);
        let key = key(self.target, self.at);
        let mask = match tables.masks.get(&key) {
            Some(mask) => mask.clone(),
            None => {
                self.computed_this_step = true;
                self.stats.masks_computed += 1;
                let clears_before = tables.clears;
                let mask = Arc::new(match self.lexicon.kind {
                    LexiconKind::Deny => self.deny_mask(&mut tables),
                    LexiconKind::Allow => LexMask::Whole(Arc::new(self.walk(self.at))),
                });
                tables.insert(key, mask.clone());
                self.stats.table_clears += tables.clears - clears_before;
                mask
            }
        };
        self.stats.masks = tables.masks.len();
        drop(tables);
        self.add_time(started);
        mask
    }

    /// The tokens on which the masks of roots `a` and `b` differ, when few.
    pub(crate) fn root_difference(&self, a: u64, b: u64) -> Option<Arc<[u32]>> {
        MaskTables::lock(&self.tables).difference(a, b)
    }

    /// Advances past `token`; refuses one the lexicon does not allow here, leaving the state
    /// unchanged.
    pub fn commit(&mut self, token: u32) -> Result<(), LexiconError> {
        let next = self.position_after(token)?;
        self.advance(next);
        Ok(())
    }

    /// Where `token` leads, for a caller that commits it next with [`LexiconMatcher::advance`]
    /// (once the grammar took it too); a refusal when the lexicon does not allow it here.
    pub(crate) fn position_after(&mut self, token: u32) -> Result<Position, LexiconError> {
        let started = Instant::now();
        let next = self.after(token).ok_or_else(|| self.refusal(token));
        self.add_time(started);
        next
    }

    pub(crate) fn advance(&mut self, next: Position) {
        self.at = next;
        self.stats.steps += 1;
        if !self.computed_this_step {
            self.stats.cached_steps += 1;
        }
        self.computed_this_step = false;
    }

    /// Whether `token` may come next, step by step and untimed: what masks must agree with.
    #[cfg(test)]
    pub(crate) fn admits(&self, token: u32) -> bool {
        self.after(token).is_some()
    }

    pub(crate) fn refusal(&self, token: u32) -> LexiconError {
        LexiconError::TokenRefused { token, text: String::from_utf8_lossy(self.token_text(token)).into_owned() }
    }

    pub(crate) fn token_text(&self, token: u32) -> &[u8] {
        self.trie.token_bytes(token).unwrap_or_default()
    }

    pub fn trie(&self) -> &Arc<TokenTrie> {
        &self.trie
    }

    pub fn target(&self) -> Target {
        self.target
    }

    /// Whether the output may end here.
    pub fn is_accepting(&self) -> bool {
        self.accepts(self.at)
    }

    /// Whether `token` is allowed and leaves the output where it may end (for the last token
    /// of a budget: see [`Constraint::next_token_is_last`](super::Constraint::next_token_is_last)).
    pub(crate) fn ends_after(&self, token: u32) -> bool {
        self.after(token).is_some_and(|next| self.accepts(next))
    }

    /// Whether the output may end at `at`: no listed word pending, no word unfinished, and no
    /// character or escape cut short.
    fn accepts(&self, at: Position) -> bool {
        at.decoder == START && self.lexicon.dfa.is_accepting(at.state)
    }

    pub fn stats(&self) -> &MaskStats {
        &self.stats
    }

    /// Counts time the caller spent on this lexicon's behalf (combining masks).
    pub(crate) fn add_time(&mut self, started: Instant) {
        self.stats.mask_time_ns += started.elapsed().as_nanos() as u64;
    }

    /// The position after `token`, or `None` if the lexicon refuses it here.
    fn after(&self, token: u32) -> Option<Position> {
        if self.trie.is_eog(token) {
            return self.is_accepting().then_some(self.at);
        }
        if !self.trie.is_walkable(token) {
            return None;
        }
        let mut at = self.at;
        for &byte in self.trie.token_bytes(token)? {
            at = self.step(at, byte)?;
        }
        Some(at)
    }

    #[inline]
    fn step(&self, at: Position, byte: u8) -> Option<Position> {
        let decoded = self.decoder.step(at.decoder, byte);
        if decoded.is_refused() {
            return None;
        }
        let dfa = &self.lexicon.dfa;
        let mut state = at.state;
        for symbol in decoded.symbols() {
            state = dfa.next(state, symbol);
            if state == DEAD {
                return None;
            }
        }
        Some(Position { state, decoder: decoded.next() })
    }

    /// [`LexiconMatcher::step`] in a walk of pending paths.
    #[inline]
    fn step_frame(&self, frame: Frame, byte: u8) -> Option<Frame> {
        let decoded = self.decoder.step(frame.at.decoder, byte);
        if decoded.is_refused() {
            return None;
        }
        let dfa = &self.lexicon.dfa;
        let Frame { at: Position { mut state, .. }, mut read, mut after_space } = frame;
        for symbol in decoded.symbols() {
            // The automaton stays put on a space after a space; the walk must not count it.
            if symbol == b' ' && after_space {
                continue;
            }
            state = dfa.next(state, symbol);
            if state == DEAD {
                return None;
            }
            if is_probe(symbol) {
                continue;
            }
            read += 1;
            after_space = symbol == b' ';
        }
        Some(Frame { at: Position { state, decoder: decoded.next() }, read, after_space })
    }

    /// Every token allowed from `start`: one walk of the trie, each subtree skipped at the
    /// first byte refused on its path.
    fn walk(&self, start: Position) -> TokenMask {
        let trie = &self.trie;
        let mut mask = TokenMask::new(trie.vocab_size());
        self.walk_nodes(start, 0..trie.nodes.len(), &mut mask);
        self.finish_walked(start, &mut mask);
        mask
    }

    /// Sets in `mask` the tokens of the sibling subtrees spanning `nodes` (the root's children
    /// or some of them) that `start` allows; a subtree is skipped at its first refused byte.
    fn walk_nodes(&self, start: Position, nodes: std::ops::Range<usize>, mask: &mut TokenMask) {
        let trie = &self.trie;
        let mut path = vec![start; trie.max_depth() + 1];
        let mut index = nodes.start;
        while let Some(node) = trie.nodes.get(index).filter(|_| index < nodes.end) {
            let depth = node.depth as usize;
            match self.step(path[depth - 1], node.byte) {
                None => index = node.subtree_end as usize,
                Some(at) => {
                    if node.token != NO_TOKEN {
                        mask.set(node.token);
                    }
                    path[depth] = at;
                    index += 1;
                }
            }
        }
    }

    /// Duplicates as their tokens, end-of-generation where `start` may end.
    fn finish_walked(&self, start: Position, mask: &mut TokenMask) {
        self.trie.mirror_duplicates(mask);
        let accepting = self.accepts(start);
        for &token in self.trie.eog_tokens() {
            if accepting {
                mask.set(token);
            } else {
                mask.unset(token);
            }
        }
    }

    /// The mask of the root position `at`, once per vocabulary. After a character that is
    /// whole (the decoder at its start), the roots read a token alike unless it starts with a
    /// character that may be a word character: the mask of the root inside a word, and of the
    /// one with a word pending (which refuses every token starting otherwise), are the mask
    /// after a boundary with only those subtrees walked again.
    fn root_mask(&self, tables: &mut MaskTables, at: Position) -> (u64, Arc<TokenMask>) {
        let root_key = key(self.target, at);
        if let Some(mask) = tables.roots.get(&root_key) {
            return (root_key, mask.clone());
        }
        let mask = if at.decoder == START && (at.state == INSIDE_WORD || at.state == PENDING_WORD) {
            let (_, after_boundary) = self.root_mask(tables, Position { state: AFTER_BOUNDARY, decoder: START });
            let mut mask = (*after_boundary).clone();
            let trie = &self.trie;
            let mut children = Children::of(trie, ROOT_PARENT, 0, trie.nodes.len());
            while let Some((byte, index, end)) = children.next(trie) {
                let may_start_a_word = is_word_ascii(byte) || (0xC3..=0xF4).contains(&byte);
                if may_start_a_word || at.state == PENDING_WORD {
                    for &token in trie.tokens_between(index, end) {
                        mask.unset(token);
                    }
                }
                if may_start_a_word {
                    self.walk_nodes(at, index..end, &mut mask);
                }
            }
            self.finish_walked(at, &mut mask);
            mask
        } else {
            self.walk(at)
        };
        let mask = Arc::new(mask);
        tables.roots.insert(root_key, mask.clone());
        (root_key, mask)
    }

    /// A deny list's mask at the current position: its root's, corrected along the paths on
    /// which a prefix pending at the position lives on (see the module documentation).
    fn deny_mask(&mut self, tables: &mut MaskTables) -> LexMask {
        let dfa = &self.lexicon.dfa;
        let at = self.at;
        let (root_key, root) = self.root_mask(tables, Position { state: dfa.root(at.state), decoder: at.decoder });
        if dfa.depth(at.state) == 0 {
            return LexMask::Delta { root_key, root, overrides: Vec::new() };
        }
        let trie = self.trie.clone();
        let mut corrections = Corrections::new(&root, trie.vocab_size() / 64);
        if !self.accepts(at) {
            corrections.give_all(trie.eog_tokens(), false);
        }
        // Children still to read, per open node: from a wide node's list of children (bytes side
        // by side: most are passed over without loading their nodes, far apart in the trie), or
        // from the nodes that follow it.
        let mut open = std::mem::take(&mut self.open);
        open.clear();
        let first = Frame { at, read: 0, after_space: dfa.ends_with_space(at.state) };
        open.push((first, Children::of(&trie, ROOT_PARENT, 0, trie.nodes.len())));
        while let Some((frame, children)) = open.last_mut() {
            let frame = *frame;
            let Some((byte, index, end)) = children.next(&trie) else {
                open.pop();
                continue;
            };
            match self.step_frame(frame, byte) {
                None => corrections.give_all(trie.tokens_between(index, end), false),
                // Nothing pending from before the token: the rest reads as from the root.
                Some(next) if dfa.depth(next.at.state) <= next.read => {}
                Some(next) => {
                    let node = &trie.nodes[index];
                    if node.token != NO_TOKEN {
                        corrections.give(node.token, true);
                    }
                    if index + 1 < end {
                        let children = match node.wide {
                            true => Children::of(&trie, index as u32, index + 1, end),
                            false => Children::Following { next: index + 1, end },
                        };
                        open.push((next, children));
                    }
                }
            }
        }
        self.open = open;
        corrections.finish(root_key, &trie)
    }
}

/// Where the children of an open trie node are read from.
#[derive(Clone, Copy, Debug)]
enum Children {
    /// Positions in `TokenTrie::wide_children`.
    Listed { at: u32, end: u32, subtree_end: usize },
    /// Node indices.
    Following { next: usize, end: usize },
}

impl Children {
    /// The children of `parent` (a node index, or `ROOT_PARENT`), whose nodes span
    /// `first..end`.
    fn of(trie: &TokenTrie, parent: u32, first: usize, end: usize) -> Children {
        match trie.wide_children(parent) {
            Some((at, listed_end)) => Children::Listed { at, end: listed_end, subtree_end: end },
            None => Children::Following { next: first, end },
        }
    }

    /// The next child's byte, node index and subtree end.
    fn next(&mut self, trie: &TokenTrie) -> Option<(u8, usize, usize)> {
        match self {
            Children::Listed { at, end, subtree_end } => {
                if *at >= *end {
                    return None;
                }
                let position = *at as usize;
                *at += 1;
                let wide = &trie.wide_children;
                // Siblings lie back to back: a child's subtree ends where the next one starts.
                let child_end = if *at < *end { wide.nodes[position + 1] as usize } else { *subtree_end };
                Some((wide.bytes[position], wide.nodes[position] as usize, child_end))
            }
            Children::Following { next, end } => {
                if *next >= *end {
                    return None;
                }
                let node = trie.nodes[*next];
                let index = *next;
                *next = node.subtree_end as usize;
                Some((node.byte, index, node.subtree_end as usize))
            }
        }
    }
}

/// A root's mask with some tokens given otherwise, as a list while it is short, else built.
struct Corrections<'r> {
    root: &'r Arc<TokenMask>,
    overrides: Vec<(u32, bool)>,
    whole: Option<TokenMask>,
    /// The longest list kept before the mask is built instead.
    most: usize,
}

impl<'r> Corrections<'r> {
    fn new(root: &'r Arc<TokenMask>, most: usize) -> Self {
        Corrections { root, overrides: Vec::new(), whole: None, most }
    }

    fn give(&mut self, token: u32, allowed: bool) {
        match self.whole.as_mut() {
            Some(mask) if allowed => mask.set(token),
            Some(mask) => mask.unset(token),
            None if self.root.is_set(token) != allowed => {
                self.overrides.push((token, allowed));
                if self.overrides.len() > self.most {
                    let mut mask = (**self.root).clone();
                    for (token, allowed) in self.overrides.drain(..) {
                        if allowed {
                            mask.set(token);
                        } else {
                            mask.unset(token);
                        }
                    }
                    self.whole = Some(mask);
                }
            }
            None => {}
        }
    }

    fn give_all(&mut self, tokens: &[u32], allowed: bool) {
        for &token in tokens {
            self.give(token, allowed);
        }
    }

    /// The mask, with every token of the same bytes as a corrected one corrected alike.
    fn finish(mut self, root_key: u64, trie: &TokenTrie) -> LexMask {
        if let Some(mut mask) = self.whole.take() {
            trie.mirror_duplicates(&mut mask);
            return LexMask::Whole(Arc::new(mask));
        }
        if !self.overrides.is_empty() && !trie.duplicates.is_empty() {
            let given: HashMap<u32, bool> = self.overrides.iter().copied().collect();
            for &(token, same_as) in &trie.duplicates {
                if let Some(&allowed) = given.get(&same_as) {
                    self.overrides.push((token, allowed));
                }
            }
        }
        LexMask::Delta { root_key, root: self.root.clone(), overrides: self.overrides }
    }
}
