//! [`Constraint`]: one generation's whole constraint, a grammar [`Matcher`] and a
//! [`LexiconMatcher`] (either or both), seen by the sampler as one: a token is allowed when
//! both allow it, a mask is the intersection of both masks, and the output may end when both
//! accept. Both automata read the same bytes, so this is their product.
//!
//! The last token a budget allows is held to more: the output is cut after it, so it must also
//! leave the lexicon where the output may end (a length cut right after `lazy` would otherwise
//! leave a banned word at the end, since only the next character would have said `lazy` was
//! whole).
//!
//! Cost: a check runs the grammar's, then the lexicon's; a mask with both is the two masks
//! (each cached) and their intersection, updated token by token while the grammar's mask
//! stays the same (see `intersection.rs`), counted in the lexicon's time.

use std::time::Instant;

use super::error::{ConstraintError, LexiconError};
use super::intersection::Intersection;
use super::masks::LexiconMatcher;
use crate::mask::TokenMask;
use crate::matcher::Matcher;
use crate::stats::MaskStats;

/// Bytes of committed output kept to say where a dead end happened.
const RECENT_BYTES: usize = 48;

/// One generation's grammar, lexicon, or both.
pub struct Constraint {
    parts: Parts,
    /// Whether the last mask computed was empty.
    nothing_allowed: bool,
    /// The end of the output so far, to say where a dead end happened.
    recent: Vec<u8>,
    /// Whether the next token is the last one the budget allows.
    last_token: bool,
    /// The last token's mask: the usual one less the tokens the lexicon may not end after.
    last_mask: Option<TokenMask>,
}

enum Parts {
    Grammar(Matcher),
    Lexicon(LexiconMatcher),
    /// With the intersection of their masks.
    Both(Matcher, LexiconMatcher, Intersection),
}

impl Constraint {
    /// The constraint of a generation; `None` when there is nothing to constrain.
    pub fn new(grammar: Option<Matcher>, lexicon: Option<LexiconMatcher>) -> Option<Constraint> {
        let parts = match (grammar, lexicon) {
            (Some(grammar), Some(lexicon)) => Parts::Both(grammar, lexicon, Intersection::default()),
            (Some(grammar), None) => Parts::Grammar(grammar),
            (None, Some(lexicon)) => Parts::Lexicon(lexicon),
            (None, None) => return None,
        };
        Some(Constraint { parts, nothing_allowed: false, recent: Vec::new(), last_token: false, last_mask: None })
    }

    /// Says that the next token is the last the budget allows: until the next commit, a token
    /// is allowed only where the lexicon lets the output end after it, when some token does
    /// (where none does, the usual tokens stay allowed, and the cut may leave a word the
    /// lexicon would have wanted to see finished). A grammar is not held to this: a cut
    /// leaves JSON or grammar output unfinished whatever the token.
    pub fn next_token_is_last(&mut self) {
        self.last_token = self.lexicon().is_some();
    }

    /// Whether `token` may come next.
    pub fn is_allowed(&mut self, token: u32) -> bool {
        let must_end = self.last_token;
        match &mut self.parts {
            Parts::Grammar(grammar) => grammar.is_allowed(token),
            Parts::Lexicon(lexicon) => lexicon.allows(token, must_end),
            // The grammar first: it refuses far more often than a lexicon does.
            Parts::Both(grammar, lexicon, _) => grammar.is_allowed(token) && lexicon.allows(token, must_end),
        }
    }

    /// Every token allowed next.
    pub fn compute_mask(&mut self) -> &TokenMask {
        if self.last_token {
            return self.last_token_mask();
        }
        self.usual_mask()
    }

    /// The usual mask, less the tokens the lexicon may not end after; the usual mask where
    /// that leaves none.
    fn last_token_mask(&mut self) -> &TokenMask {
        let mut last = self.usual_mask().clone();
        let started = Instant::now();
        if let Some(lexicon) = self.lexicon() {
            let refused: Vec<u32> = last.iter_set().filter(|&token| !lexicon.ends_after(token)).collect();
            for token in refused {
                last.unset(token);
            }
        }
        if let Some(lexicon) = self.lexicon_mut() {
            lexicon.add_time(started);
        }
        if last.count() == 0 {
            self.last_token = false;
            return self.usual_mask();
        }
        self.nothing_allowed = false;
        self.last_mask.insert(last)
    }

    fn usual_mask(&mut self) -> &TokenMask {
        let mask = match &mut self.parts {
            Parts::Grammar(grammar) => grammar.compute_mask(),
            Parts::Lexicon(lexicon) => lexicon.compute_mask(),
            Parts::Both(grammar, lexicon, both) => {
                let grammar_mask = grammar.compute_mask_shared();
                let lexicon_mask = lexicon.mask_parts();
                let started = Instant::now();
                let lexicon_ref = &*lexicon;
                let mask = both.update(Some(grammar_mask), lexicon_mask, |a, b| lexicon_ref.root_difference(a, b));
                lexicon.add_time(started);
                mask
            }
        };
        self.nothing_allowed = mask.words().iter().all(|word| *word == 0);
        mask
    }

    /// Advances past `token`; refuses a token either part refuses, leaving both unchanged.
    pub fn commit(&mut self, token: u32) -> Result<(), ConstraintError> {
        let lexicon = match &mut self.parts {
            Parts::Grammar(grammar) => {
                grammar.commit(token)?;
                None
            }
            Parts::Lexicon(lexicon) => {
                lexicon.commit(token)?;
                Some(&*lexicon)
            }
            Parts::Both(grammar, lexicon, _) => {
                let next = lexicon.position_after(token)?;
                grammar.commit(token)?;
                lexicon.advance(next);
                Some(&*lexicon)
            }
        };
        if let Some(lexicon) = lexicon {
            self.recent.extend_from_slice(lexicon.token_text(token));
            let excess = self.recent.len().saturating_sub(RECENT_BYTES);
            self.recent.drain(..excess);
        }
        self.nothing_allowed = false;
        self.last_token = false;
        Ok(())
    }

    /// Whether the output may end here.
    pub fn is_accepting(&self) -> bool {
        self.grammar().is_none_or(Matcher::is_accepting) && self.lexicon().is_none_or(LexiconMatcher::is_accepting)
    }

    /// Whether some non-empty continuation may exist (a lexicon alone always has one).
    pub fn can_continue(&self) -> bool {
        self.grammar().is_none_or(Matcher::can_continue)
    }

    /// Why the last mask was empty, when it was: the lexicon and the grammar left nothing.
    pub fn dead_end(&self) -> Option<LexiconError> {
        let lexicon = self.lexicon().filter(|_| self.nothing_allowed)?;
        let start = (0..self.recent.len()).find(|&i| self.recent[i] & 0xC0 != 0x80).unwrap_or(0);
        Some(LexiconError::DeadEnd {
            what: lexicon.target().describe(),
            after: String::from_utf8_lossy(&self.recent[start..]).into_owned(),
        })
    }

    pub fn grammar(&self) -> Option<&Matcher> {
        match &self.parts {
            Parts::Grammar(grammar) | Parts::Both(grammar, _, _) => Some(grammar),
            Parts::Lexicon(_) => None,
        }
    }

    pub fn lexicon(&self) -> Option<&LexiconMatcher> {
        match &self.parts {
            Parts::Lexicon(lexicon) | Parts::Both(_, lexicon, _) => Some(lexicon),
            Parts::Grammar(_) => None,
        }
    }

    fn lexicon_mut(&mut self) -> Option<&mut LexiconMatcher> {
        match &mut self.parts {
            Parts::Lexicon(lexicon) | Parts::Both(_, lexicon, _) => Some(lexicon),
            Parts::Grammar(_) => None,
        }
    }

    pub fn grammar_stats(&self) -> Option<&MaskStats> {
        self.grammar().map(Matcher::stats)
    }

    pub fn lexicon_stats(&self) -> Option<&MaskStats> {
        self.lexicon().map(LexiconMatcher::stats)
    }

    /// Time spent in both parts, in nanoseconds.
    pub fn mask_time_ns(&self) -> u64 {
        self.grammar_stats().map_or(0, |s| s.mask_time_ns) + self.lexicon_stats().map_or(0, |s| s.mask_time_ns)
    }
}
