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
//! A token budget is held to more again, where the sampler says how many tokens are left
//! ([`Constraint::set_tokens_left`]): a token is allowed only if the grammar's document can
//! still be completed in the tokens left after it: one token per byte of its shortest ending
//! (`automaton/distance.rs`), or where that is too many, the fewest tokens found to spell it
//! (`matcher/closing.rs`). So the output ends valid however the budget cuts it. The bound holds
//! where every byte an ending may be written in is a token by itself (ASCII text and UTF-8
//! continuation bytes: so in every vocabulary served); elsewhere no budget is applied. Far
//! from the budget the sampled token is checked against it (a lookup of its successor's
//! distance, kept per state) and nothing else changes; only once a sampled token is refused
//! for the budget are masks narrowed to the tokens that fit, until the next commit. Sampling
//! again from the narrowed mask after such a refusal draws from the same distribution as
//! sampling from the narrowed mask at once.
//!
//! Cost: a check runs the grammar's, then the lexicon's; a mask with both is the two masks
//! (each cached) and their intersection, updated token by token while the grammar's mask
//! stays the same (see `intersection.rs`), counted in the lexicon's time.

use std::time::Instant;

use super::error::{ConstraintError, LexiconError};
use super::intersection::Intersection;
use super::masks::LexiconMatcher;
use crate::automaton::{closing_bytes, NO_ENDING};
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
    /// The token budget, when one is applied (see [`Constraint::set_tokens_left`]).
    budget: Option<Budget>,
    /// Whether one token per byte can write every byte an ending of the grammar may use: a
    /// budget is applied only then.
    byte_tokens_cover: bool,
    /// The mask narrowed to the budget, last computed.
    budget_mask: Option<TokenMask>,
    /// Whether a budget refused some token of this generation: the document was closed early.
    closed_on_budget: bool,
}

/// The tokens a budget leaves, and whether it refused a token at this step.
#[derive(Clone, Copy, Debug)]
struct Budget {
    /// Tokens still allowed, the next one included.
    tokens_left: u32,
    /// A sampled token was refused for the budget since the last commit: masks are narrowed.
    tight: bool,
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
        let byte_tokens_cover = match &parts {
            Parts::Grammar(grammar) | Parts::Both(grammar, _, _) => {
                let written = grammar.grammar().readable_bytes().intersect(&closing_bytes());
                written.is_subset_of(&grammar.trie().single_byte_tokens())
            }
            Parts::Lexicon(_) => false,
        };
        Some(Constraint {
            parts,
            nothing_allowed: false,
            recent: Vec::new(),
            last_token: false,
            last_mask: None,
            budget: None,
            byte_tokens_cover,
            budget_mask: None,
            closed_on_budget: false,
        })
    }

    /// Whether a token budget can close this constraint's document (see the module doc): it
    /// has a grammar, and every byte an ending of that grammar may use is a token of the
    /// vocabulary.
    pub fn can_close_on_budget(&self) -> bool {
        self.byte_tokens_cover
    }

    /// Says how many tokens the budget allows from the next one on (it included): until the
    /// next commit, a token is allowed only where the document can be completed in the tokens
    /// left after it. Does nothing where [`Constraint::can_close_on_budget`] is false.
    pub fn set_tokens_left(&mut self, tokens_left: u32) {
        if self.byte_tokens_cover {
            let tight = self.budget.is_some_and(|budget| budget.tight);
            self.budget = Some(Budget { tokens_left, tight });
        }
    }

    /// The fewest tokens found that complete the grammar's document from here (one per byte
    /// of its shortest ending at most, where [`Constraint::can_close_on_budget`]): 0 when it may
    /// end now or there is no grammar. Of a fresh constraint, what the shortest document takes.
    pub fn closing_tokens(&mut self) -> u32 {
        self.grammar_mut().map_or(0, Matcher::closing_tokens)
    }

    /// Whether `token`, allowed, also leaves a document that the tokens left after it can
    /// complete. When it does not, masks are narrowed to the tokens that do until the next
    /// commit; sample again. Always true without a budget.
    pub fn fits_budget(&mut self, token: u32) -> bool {
        let Some(budget) = self.budget else { return true };
        let most = budget.tokens_left.saturating_sub(1);
        let Some(grammar) = self.grammar_mut() else { return true };
        let fits = grammar.completes_within(token, most).is_none_or(|fits| fits)
            // From where no ending can be written, the budget has nothing to keep.
            || grammar.closing_tokens() == NO_ENDING;
        if !fits {
            self.budget = Some(Budget { tight: true, ..budget });
            self.closed_on_budget = true;
        }
        fits
    }

    /// Whether a budget refused some token of this generation: the output was closed early
    /// to end valid within it.
    pub fn closed_on_budget(&self) -> bool {
        self.closed_on_budget
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
        if self.budget.is_some_and(|budget| budget.tight) && !self.fits_budget(token) {
            return false;
        }
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
        if let Some(budget) = self.budget.filter(|budget| budget.tight) {
            return self.budget_narrowed_mask(budget.tokens_left.saturating_sub(1));
        }
        self.unbudgeted_mask()
    }

    fn unbudgeted_mask(&mut self) -> &TokenMask {
        if self.last_token {
            return self.last_token_mask();
        }
        self.usual_mask()
    }

    /// The mask less the tokens after which the document cannot be completed in `most` tokens;
    /// the mask itself where that leaves none (the budget was set too low for the
    /// document: the cut may then leave it unfinished).
    fn budget_narrowed_mask(&mut self, most: u32) -> &TokenMask {
        let mut narrowed = self.unbudgeted_mask().clone();
        if let Some(grammar) = self.grammar_mut() {
            grammar.narrow_to_budget(&mut narrowed, most);
        }
        if narrowed.count() == 0 {
            self.budget = None;
            return self.unbudgeted_mask();
        }
        self.nothing_allowed = false;
        self.budget_mask.insert(narrowed)
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
        if let Some(budget) = &mut self.budget {
            budget.tight = false;
        }
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

    fn grammar_mut(&mut self) -> Option<&mut Matcher> {
        match &mut self.parts {
            Parts::Grammar(grammar) | Parts::Both(grammar, _, _) => Some(grammar),
            Parts::Lexicon(_) => None,
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
