//! Constraints on generated text: GBNF grammars and JSON Schemas compiled to one byte-level
//! pushdown automaton, and per-request matchers that turn it into token masks.
//!
//! Pure: depends only on std, serde, thiserror and regex-syntax, never on the model runtime,
//! the server or the store. Flow: a front end (`gbnf`, `schema`) lowers source text to an
//! [`ir::Grammar`]; [`CompiledGrammar`] prepares it once (shared in an `Arc`); a [`TokenTrie`]
//! over the model's vocabulary is built once per model; each request owns a [`Matcher`] that
//! caches transitions and masks and reports [`MaskStats`]. A [`Lexicon`] (words allowed or
//! banned) runs on the same bytes beside a grammar, or is compiled into a schema's strings; a
//! [`Constraint`] is one generation's grammar and lexicon together (see [`lexicon`]).

pub mod automaton;
pub(crate) mod cache;
pub mod check;
pub(crate) mod counters;
pub mod error;
pub mod gbnf;
pub mod ir;
pub(crate) mod lexer;
pub mod lexicon;
pub mod limits;
pub mod mask;
pub mod matcher;
pub mod schema;
pub mod stats;
pub mod toktrie;

#[cfg(test)]
mod tests;

pub use automaton::CompiledGrammar;
pub use check::{check_input, BytePath, CheckOutcome};
pub use error::{GrammarError, Location};
pub use gbnf::{compile_gbnf, parse_gbnf};
pub use lexicon::{
    check_text, Constraint, ConstraintError, Lexicon, LexiconCheck, LexiconError, LexiconKind, LexiconLimits,
    LexiconMatcher, MatchMode, Target,
};
pub use limits::Limits;
pub use mask::TokenMask;
pub use matcher::Matcher;
pub use stats::MaskStats;
pub use toktrie::TokenTrie;
