//! [`LexiconMatcher`]: a lexicon's automaton run over one generation, and its token masks.
//!
//! A position is an automaton state and a decoder state (a character or escape may be cut
//! between tokens). [`LexiconMatcher::is_allowed`] steps one token's bytes from it, stopping at
//! the first refused byte. Masks are cached per position, per vocabulary, on the lexicon, so
//! every request with the lexicon shares them; a full cache is cleared and counted.
//!
//! A deny list allows almost every token, so its masks are not walked whole. From a root (no
//! listed prefix pending) a token reads the same whatever came before, except for whether a
//! word character came last: the mask of each root (per decoder state) is one walk of the
//! whole token trie, once per vocabulary. From any other position, a token reads like from
//! that position's root as soon as every prefix that was pending when it began is gone (the
//! automaton's longest prefix then started inside the token), and from there on the root's
//! mask already says what the token does. So such a mask is the root's, corrected by a walk
//! of only the trie paths along which a pending prefix lives on: the ways the pending word or
//! phrase can go on, a few hundred nodes at most for real lists.
//!
//! An allow list allows few tokens, so its masks are one walk of the trie that skips every
//! subtree at its first refused byte.
//!
//! Cost: a check is a table step per byte; a deny mask from a root the first time for a
//! vocabulary is a walk of the whole trie (milliseconds at 262k tokens), then a copy; from any
//! other position a copy of the root's (vocabulary/8 bytes) and a walk of its pending paths.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::decode::{is_probe, Decoder, START};
use super::dfa::DEAD;
use super::error::LexiconError;
use super::{Lexicon, LexiconKind, Target};
use crate::mask::TokenMask;
use crate::stats::MaskStats;
use crate::toktrie::{TokenTrie, NO_TOKEN};

/// Where the automaton and the decoder are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
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
    masks: HashMap<u64, Arc<TokenMask>>,
    capacity: usize,
    clears: u64,
}

impl MaskTables {
    fn lock(tables: &Mutex<MaskTables>) -> MutexGuard<'_, MaskTables> {
        match tables.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn insert(&mut self, key: u64, mask: Arc<TokenMask>) {
        if self.masks.len() >= self.capacity {
            self.masks.clear();
            self.clears += 1;
        }
        self.masks.insert(key, mask);
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
    last_mask: Option<Arc<TokenMask>>,
    /// Whether this step needed a new mask (for the hit rate).
    computed_this_step: bool,
    stats: MaskStats,
    /// One frame per trie depth during a walk; kept to reuse the allocation.
    frames: Vec<Frame>,
}

impl LexiconMatcher {
    /// A matcher at the start of the output; `None` where `lexicon` is compiled into the
    /// grammar for `target` instead (see [`Lexicon::runs_at_decode`]).
    pub fn new(lexicon: Arc<Lexicon>, trie: Arc<TokenTrie>, target: Target) -> Option<Self> {
        if !lexicon.runs_at_decode(target) {
            return None;
        }
        let capacity = lexicon.mask_cache;
        let attached = lexicon.attachments.get_or_attach(&trie, || {
            Arc::new(Mutex::new(MaskTables { roots: HashMap::new(), masks: HashMap::new(), capacity, clears: 0 }))
        });
        // Only this module attaches values to a lexicon, all of this type.
        let tables = attached.downcast::<Mutex<MaskTables>>().unwrap_or_else(|_| {
            Arc::new(Mutex::new(MaskTables { roots: HashMap::new(), masks: HashMap::new(), capacity, clears: 0 }))
        });
        let at = Position { state: lexicon.dfa.start, decoder: START };
        let states = lexicon.dfa.state_count();
        let stats = MaskStats { states, states_capacity: states, states_peak: states, masks_capacity: capacity, ..MaskStats::default() };
        Some(LexiconMatcher {
            decoder: Decoder::of(target.mode()),
            lexicon,
            trie,
            target,
            tables,
            at,
            last_mask: None,
            computed_this_step: false,
            stats,
            frames: Vec::new(),
        })
    }

    pub fn lexicon(&self) -> &Arc<Lexicon> {
        &self.lexicon
    }

    /// Whether `token` may come next: its bytes complete no banned entry (no word outside an
    /// allow list), or it ends generation where the output may end.
    pub fn is_allowed(&mut self, token: u32) -> bool {
        let started = Instant::now();
        let allowed = self.after(token).is_some();
        self.add_time(started);
        allowed
    }

    /// Every token allowed next (end-of-generation tokens exactly where the output may end).
    pub fn compute_mask(&mut self) -> &TokenMask {
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
                    LexiconKind::Deny => self.deny_mask(&mut *tables),
                    LexiconKind::Allow => self.walk(self.at),
                });
                tables.insert(key, mask.clone());
                self.stats.table_clears += tables.clears - clears_before;
                mask
            }
        };
        self.stats.masks = tables.masks.len();
        drop(tables);
        self.add_time(started);
        self.last_mask.insert(mask)
    }

    /// Advances past `token`; refuses one the lexicon does not allow here, leaving the state
    /// unchanged.
    pub fn commit(&mut self, token: u32) -> Result<(), LexiconError> {
        let started = Instant::now();
        let result = match self.after(token) {
            Some(at) => {
                self.at = at;
                self.stats.steps += 1;
                if !self.computed_this_step {
                    self.stats.cached_steps += 1;
                }
                self.computed_this_step = false;
                Ok(())
            }
            None => Err(self.refusal(token)),
        };
        self.add_time(started);
        result
    }

    /// Whether `token` may come next, untimed (for a caller that commits next).
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
        self.lexicon.dfa.is_accepting(self.at.state)
    }

    pub fn stats(&self) -> &MaskStats {
        &self.stats
    }

    /// Forgets every cached mask of this lexicon and vocabulary but the roots'; for measuring
    /// the cost of a mask.
    pub fn forget_masks(&mut self) {
        MaskTables::lock(&self.tables).masks.clear();
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
        let trie = self.trie.clone();
        let mut mask = TokenMask::new(trie.vocab_size());
        let mut path = vec![start; trie.max_depth() + 1];
        let mut index = 0usize;
        while let Some(node) = trie.nodes.get(index) {
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
        trie.mirror_duplicates(&mut mask);
        if self.lexicon.dfa.is_accepting(start.state) {
            for &token in trie.eog_tokens() {
                mask.set(token);
            }
        }
        mask
    }

    /// A deny list's mask at the current position: its root's, corrected along the paths on
    /// which a prefix pending at the position lives on (see the module documentation).
    fn deny_mask(&mut self, tables: &mut MaskTables) -> TokenMask {
        let dfa = &self.lexicon.dfa;
        let at = self.at;
        let root = Position { state: dfa.root(at.state), decoder: at.decoder };
        let root_key = key(self.target, root);
        let root_mask = match tables.roots.get(&root_key) {
            Some(mask) => mask.clone(),
            None => {
                let mask = Arc::new(self.walk(root));
                tables.roots.insert(root_key, mask.clone());
                mask
            }
        };
        let mut mask = (*root_mask).clone();
        if dfa.depth(at.state) == 0 {
            return mask;
        }
        let trie = self.trie.clone();
        let accepting = dfa.is_accepting(at.state);
        for &token in trie.eog_tokens() {
            if accepting {
                mask.set(token);
            } else {
                mask.unset(token);
            }
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.resize(trie.max_depth() + 1, Frame { at, read: 0, after_space: false });
        frames[0].after_space = dfa.ends_with_space(at.state);
        let mut index = 0usize;
        while let Some(node) = trie.nodes.get(index) {
            let depth = node.depth as usize;
            let end = node.subtree_end as usize;
            match self.step_frame(frames[depth - 1], node.byte) {
                None => {
                    for &token in trie.tokens_between(index, end) {
                        mask.unset(token);
                    }
                    index = end;
                }
                // Nothing pending from before the token: the rest reads as from the root.
                Some(frame) if dfa.depth(frame.at.state) <= frame.read => index = end,
                Some(frame) => {
                    if node.token != NO_TOKEN {
                        mask.set(node.token);
                    }
                    frames[depth] = frame;
                    index += 1;
                }
            }
        }
        self.frames = frames;
        trie.mirror_duplicates(&mut mask);
        mask
    }
}
