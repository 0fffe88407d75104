//! Every way loading or running a constraint can fail, as one [`GrammarError`] enum whose
//! messages say what is wrong, where (rule name, line and column when the source is a GBNF
//! file), and what to do about it.
//!
//! Key types: [`GrammarError`], [`Location`]. Cost: plain data.

use std::fmt;

/// Where in a grammar source something is; `None` for grammars built in code (JSON Schema).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Location(pub Option<(usize, usize)>);

impl Location {
    pub fn at(line: usize, column: usize) -> Self {
        Location(Some((line, column)))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, column)) => write!(f, " at line {line}, column {column}"),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("the grammar is empty: define at least `root ::= ...`")]
    Empty,
    #[error(
        "the grammar is not UTF-8 text (invalid byte at offset {offset}); is this a binary file?"
    )]
    NotText { offset: usize },
    #[error("syntax error{at}: {message}")]
    Syntax { at: Location, message: String },
    #[error(
        "rule `{rule}`{at} is left-recursive ({cycle}), so it would never stop expanding; \
         write it right-recursive instead: `expr ::= term (\"+\" term)*` rather than \
         `expr ::= expr \"+\" term | term`"
    )]
    LeftRecursion {
        rule: String,
        cycle: String,
        at: Location,
    },
    #[error(
        "rule `{rule}`{at} uses the token terminal `{text}`: llamay constrains bytes, not one \
         model's vocabulary; write the text as a literal string instead"
    )]
    TokenTerminal {
        rule: String,
        text: String,
        at: Location,
    },
    #[error(
        "rule `{rule}`{at} has a repetition bound of {bound}, above the limit of {max}: each \
         count is a separate state; use `*` or `+` for an unbounded repetition"
    )]
    RepetitionTooLarge {
        rule: String,
        bound: u64,
        max: u32,
        at: Location,
    },
    #[error("rule `{rule}`{at} refers to `{name}`, which is not defined")]
    UndefinedRule {
        rule: String,
        name: String,
        at: Location,
    },
    #[error("rule `{rule}` is defined twice{at}; merge the definitions with `|`")]
    DuplicateRule { rule: String, at: Location },
    #[error("the grammar has no `root` rule: matching starts at `root ::= ...`")]
    MissingRoot,
    #[error("the grammar is too large: {what} is {actual}, above the limit of {limit}")]
    TooLarge {
        what: &'static str,
        actual: usize,
        limit: usize,
    },
    #[error(
        "{what}{at} has {alternatives} alternatives, more than the {limit} parse stacks the \
         automaton keeps alive at once: each alternative that can still match is one, so it \
         could never be entered; group the alternatives by how they begin (`\"ab\" (\"c\" | \"d\")` \
         rather than `\"abc\" | \"abd\"`), or use a character class for single characters"
    )]
    TooManyAlternatives {
        what: String,
        at: Location,
        alternatives: usize,
        limit: usize,
    },
    #[error(
        "the grammar nests parentheses more than {limit} deep{at}; give the inner groups names \
         of their own (`inner ::= ...`), which costs no nesting"
    )]
    TooDeep { limit: usize, at: Location },
    #[error("the grammar is invalid: {0}")]
    Invalid(String),
    #[error("token {token} is not in the vocabulary (size {vocab_size})")]
    UnknownToken { token: u32, vocab_size: usize },
    #[error("token {token} ({text:?}) is not allowed by the grammar here")]
    TokenRejected { token: u32, text: String },
}
