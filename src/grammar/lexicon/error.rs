//! [`LexiconError`]: every way loading or applying a lexicon fails, each message fit for a
//! 400 (what is wrong, where, which limit, and what to do); and [`ConstraintError`], what a
//! combined grammar-and-lexicon step reports.
//!
//! Cost: plain data.

use std::fmt;

use super::MatchMode;
use crate::error::GrammarError;

/// Where an entry is: a line of a lexicon file, or a position in a list given in code or a
/// request (counted from 1 in both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryAt {
    Line(usize),
    Item(usize),
}

impl fmt::Display for EntryAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryAt::Line(line) => write!(f, "line {line}"),
            EntryAt::Item(item) => write!(f, "entry {item}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LexiconError {
    #[error("the lexicon has no entries: give at least one word or phrase")]
    NoEntries,
    #[error("the lexicon has {count} entries, above the limit of {limit}")]
    TooManyEntries { count: usize, limit: usize },
    #[error("the lexicon's entries hold {bytes} bytes in all, above the limit of {limit}")]
    TooManyBytes { bytes: usize, limit: usize },
    #[error("the lexicon's {at} is {bytes} bytes long, above the limit of {limit} bytes for one entry")]
    EntryTooLong { at: EntryAt, bytes: usize, limit: usize },
    #[error("the lexicon's {at} is empty: an entry needs at least one character other than whitespace")]
    EmptyEntry { at: EntryAt },
    #[error(
        "the allow lexicon's {at} ({entry:?}) has no word in it: an allow list lists words \
         (letters, digits, `_`); punctuation and spaces are always allowed between them"
    )]
    NoWord { at: EntryAt, entry: String },
    #[error(
        "the lexicon's automaton would have {states} states of {classes} symbol classes \
         ({bytes} bytes), above the limit of {limit} bytes: use fewer or shorter entries"
    )]
    AutomatonTooLarge { states: usize, classes: usize, bytes: usize, limit: usize },
    #[error(
        "the lexicon file does not say whether it lists allowed or banned words: start it with \
         a line `#!allow` or `#!deny`"
    )]
    NoKind,
    #[error("the lexicon files mix allow and deny lists: lists applied together must all allow or all deny")]
    MixedKinds,
    #[error(
        "the lexicon's {at} is an unknown directive {text:?}: the directives are `#!allow` or `#!deny` \
         (before the first entry) and `#!match word|prefix|substring`"
    )]
    BadDirective { at: EntryAt, text: String },
    #[error("the lexicon's {at} sets the unknown match mode {text:?}: use `#!match word`, `#!match prefix` or `#!match substring`")]
    BadMatch { at: EntryAt, text: String },
    #[error(
        "an allow list matches whole words only, so `{mode}` matching does not apply to it{}: \
         `prefix` and `substring` are for deny lists",
        .at.map(|at| format!(" (its {at})")).unwrap_or_default()
    )]
    AllowMatch { mode: MatchMode, at: Option<EntryAt> },
    #[error(
        "with this lexicon the {what} allows no output at all: {reason}; drop the entry or \
         change the {what}"
    )]
    NothingLeft { what: &'static str, reason: String },
    #[error(
        "the lexicon and the {what} leave no token to continue with after {after:?}: every \
         continuation the {what} allows there would write a banned word, or a word the allow \
         list lacks"
    )]
    DeadEnd { what: &'static str, after: String },
    #[error("token {token} ({text:?}) is refused by the lexicon here")]
    TokenRefused { token: u32, text: String },
}

/// Why a combined step failed: the grammar refused the token, or the lexicon did.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    #[error(transparent)]
    Lexicon(#[from] LexiconError),
}
