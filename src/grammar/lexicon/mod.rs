//! Lexicons: lists of words or phrases that constrain the *text* of the output, enforced on
//! the same byte level as grammars and schemas, so that no tokenisation gets around them.
//!
//! # The rules
//!
//! **Words.** A word is a maximal run of word characters: ASCII letters and digits, `_`, and
//! every character outside ASCII except punctuation, symbols and spaces (U+0080–U+00BF,
//! U+2000–U+2BFF, U+2E00–U+2E7F, U+3000–U+303F, the punctuation and symbols among the
//! compatibility, small, fullwidth and halfwidth forms of U+FE10–U+FFFD, and the emoji
//! planes U+1F000–U+1FFFF are not word characters; see `decode.rs`). Everything else separates words. Matching ignores ASCII case (`Bad`, `BAD` and
//! `bad` are one word); letters outside ASCII match exactly as written.
//!
//! **deny** — the output never contains a listed entry, matched as its [`MatchMode`] says:
//! - `word`: as whole words: where the entry starts with a word character, the character
//!   before the match is not one (or the output starts there); where it ends with one, the
//!   character after is not one (or the output ends there). So a banned `ass` leaves `class`
//!   and `assess` alone, and a banned `.net` (no word character before it) still matches in
//!   `asp.net`.
//! - `prefix` (the default): as `word` at the start only: no word starts with the entry
//!   (`Paris` bans `Parisis` and `Parisian`, not `comparison`). A model kept from a whole word
//!   glues letters to it, and a reader still reads the word: hence the default.
//! - `substring`: anywhere, inside words too (`paris` bans `comparison`).
//! - Inside an entry, a word character after a non-word one starts a word in every mode (the
//!   `t` of `Eiffel Tower` must start a word in the text too).
//! - In a phrase (an entry with spaces), any run of whitespace matches the spaces, including
//!   newlines and Unicode spaces; punctuation matches itself; every non-ASCII punctuation or
//!   symbol character matches every other (`well—actually` also bans `well–actually`).
//! - A match is refused whatever the tokens: a banned word split over several tokens is as
//!   unreachable as one token holding it. While the output ends with a complete banned word
//!   that a following word character could still turn into another word (`bad`, which may
//!   become `badge`), ending the output is refused as well, and so is any non-word character.
//!   A token budget's cut is an end too: the last token it allows must leave the output where
//!   it may end ([`Constraint::next_token_is_last`]).
//!
//! **allow** — every word of the output is one of the list's words: an entry with several
//! words (`New York`) allows each of them, in any order; separators between words are always
//! allowed; numbers are words too (list them). The output may not end in the middle of a word
//! that is only the start of a listed one. Allow lists match whole words only: a `prefix` or
//! `substring` mode is refused ([`LexiconError::AllowMatch`]).
//!
//! **Text** that is not UTF-8 is refused while a lexicon applies.
//!
//! **With a JSON Schema or any-JSON output** the text is read as JSON: inside strings an
//! escape counts as the character it encodes, and `\u` escapes of word characters (and of any
//! character outside ASCII) are refused while a lexicon applies, so a word cannot hide behind
//! escapes (`b\u0061d`); the characters themselves can always be written unescaped.
//! - A deny list applies to the whole JSON text: keys, string values, numbers and literals. An
//!   `enum`/`const` member, property name or other fixed text of the schema that contains a
//!   banned entry (bounded within that text, as a quoted string is) is dropped when the
//!   constraint is compiled; a required one makes the schema unsatisfiable, which is refused
//!   ([`LexiconError::NothingLeft`]). Where only what the model writes around fixed text
//!   completes a banned entry, the decoder can reach a point with no token left: that dead end
//!   is reported ([`LexiconError::DeadEnd`]), never written.
//! - An allow list applies to the string values the schema leaves free (no `enum`, `const`,
//!   `pattern` or enforced `format`), and to the string values of any-JSON output; property
//!   names and fixed strings stay as the schema says. It is compiled into the schema's grammar
//!   (with `minLength`/`maxLength` counted as usual), not checked beside it.
//!
//! **With a GBNF grammar** the lexicon applies to the whole output, as text (a backslash is
//! punctuation). Literal text of the grammar that the lexicon rules out is dropped when the
//! constraint is compiled, as for a schema.
//!
//! **Lexicon files** hold one entry per line; surrounding whitespace is trimmed, blank lines
//! and lines starting with `#` are skipped, `\#` at the start of a line stands for a `#`. A
//! line `#!deny` or `#!allow` before the first entry says which kind the file is; a line
//! `#!match word` (`prefix`, `substring`) sets the mode of the entries after it, the ones
//! before any taking the list's mode (the caller's, else the kind's default). An entry listed
//! under several modes takes the widest.
//!
//! **Budgets** ([`LexiconLimits`]): 100,000 entries, 4 MiB of entries in all, 1 KiB per entry,
//! and 64 MiB for the automaton (states x symbol classes x 4 bytes; a 10,000-word English
//! list needs about 3 MiB); past any of them the lexicon is refused when it loads.
//!
//! # The engine
//!
//! A [`Lexicon`] compiles its entries to a deterministic automaton over *symbols* (the bytes
//! with case folded, whitespace one space, non-ASCII punctuation one separator; JSON escapes
//! decoded): `decode.rs` turns bytes into symbols, `dfa.rs` builds the automaton (Aho-Corasick
//! with word boundaries for deny lists, whatever their modes, a trie of words for allow
//! lists). A [`LexiconMatcher`] runs it per request over a [`TokenTrie`], giving token masks
//! the way a grammar [`Matcher`](crate::Matcher) does, cached per automaton state across requests
//! (`masks.rs`); a [`Constraint`] runs both and allows a token only when both do.
//! [`check_text`] says whether a text passes and where it fails.
//!
//! # Wiring (what a daemon or command calls)
//!
//! 1. Load: [`Lexicon::new`] (a request's list) or [`Lexicon::parse`] (a file), with the
//!    list's [`MatchMode`] if one was given, into an `Arc`; keep daemon-wide ones loaded,
//!    since their masks are cached on them.
//! 2. Compile the request's grammar with it: [`crate::schema::compile_schema_with_lexicon`] or
//!    [`crate::schema::any_json_with_lexicon`] for JSON output, then [`Lexicon::restrict`] on
//!    that IR (with [`Target::Json`]); [`compile_gbnf_with_lexicon`] for a GBNF source.
//! 3. At decode time: [`LexiconMatcher::new`] (it returns `None` where the lexicon was
//!    compiled into the grammar), then [`Constraint::new`] with the grammar's `Matcher`, if
//!    any; the sampler calls `is_allowed`, `compute_mask` and `commit` on the `Constraint` as
//!    it did on the `Matcher`. An empty mask is a dead end: [`Constraint::dead_end`] says why.
//! 4. Stats: [`Constraint::lexicon_stats`] renders with `MaskStats::render("lexicon", ..)`.
//!
//! Key types: [`Lexicon`], [`LexiconKind`], [`MatchMode`], [`LexiconLimits`], [`Target`], [`LexiconMatcher`],
//! [`Constraint`], [`LexiconError`]. Cost: loading is linear in the entries (a few ms for
//! 10,000 words); see `masks.rs` for decode-time costs.

mod check;
mod constraint;
mod decode;
mod dfa;
mod entries;
mod error;
mod intersection;
mod masks;
mod restrict;
pub(crate) mod strings;

#[cfg(test)]
mod tests;

use std::fmt;

pub use check::{check_text, LexiconCheck, Reason, Violation};
pub use constraint::Constraint;
pub use error::{ConstraintError, EntryAt, LexiconError};
pub use masks::LexiconMatcher;
pub use restrict::compile_gbnf_with_lexicon;

use crate::automaton::VocabularyAttachments;
use decode::Mode;
use dfa::WordDfa;
use entries::{normalize, parse_file, RawEntry};

/// Whether a lexicon lists the only words allowed, or words that must never appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LexiconKind {
    Allow,
    Deny,
}

/// How a deny list's entry matches the output (see the module documentation). An allow list
/// lists whole words: it takes only [`MatchMode::Word`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MatchMode {
    /// The entry as whole words: a word character on neither side (`Paris`, not `Parisis`).
    Word,
    /// No word starts with the entry (`Paris`, `Parisis`, `Parisian`; not `comparison`).
    #[default]
    Prefix,
    /// The entry occurs nowhere, inside words too (`comparison` holds `paris`).
    Substring,
}

impl MatchMode {
    pub const NAMES: &'static str = "word, prefix or substring";

    /// The mode a list of `kind` has when none is given: prefix for a deny list (a ban of
    /// `Paris` is meant to keep `Parisis` out too), word for an allow list.
    pub fn default_for(kind: LexiconKind) -> MatchMode {
        match kind {
            LexiconKind::Deny => MatchMode::Prefix,
            LexiconKind::Allow => MatchMode::Word,
        }
    }
}

impl std::str::FromStr for MatchMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "word" => Ok(MatchMode::Word),
            "prefix" => Ok(MatchMode::Prefix),
            "substring" => Ok(MatchMode::Substring),
            other => Err(format!("unknown match mode {other:?}: use {}", MatchMode::NAMES)),
        }
    }
}

impl fmt::Display for MatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchMode::Word => "word",
            MatchMode::Prefix => "prefix",
            MatchMode::Substring => "substring",
        })
    }
}

impl fmt::Display for LexiconKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LexiconKind::Allow => "allow",
            LexiconKind::Deny => "deny",
        })
    }
}

/// What a lexicon constrains beside: nothing (plain text), a GBNF grammar, or JSON output (a
/// JSON Schema, or any JSON). It decides how the text is read and where the lexicon is
/// enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Text,
    Grammar,
    Json,
}

impl Target {
    pub(crate) fn mode(self) -> Mode {
        match self {
            Target::Json => Mode::Json,
            Target::Text | Target::Grammar => Mode::Text,
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Target::Text => "output",
            Target::Grammar => "grammar",
            Target::Json => "schema",
        }
    }
}

/// Bounds on loading a lexicon and on caching its masks; the defaults suit a daemon serving
/// untrusted requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexiconLimits {
    /// Most entries. Default 100,000.
    pub max_entries: usize,
    /// Most bytes of all entries together. Default 4 MiB.
    pub max_bytes: usize,
    /// Longest entry, in bytes. Default 1 KiB.
    pub max_entry_bytes: usize,
    /// Largest automaton (states x symbol classes x 4 bytes). Default 64 MiB; a 10,000-word
    /// English list takes about 3 MiB.
    pub max_automaton_bytes: usize,
    /// Bytes of masks cached per vocabulary; a full cache is cleared and counted. Default
    /// 16 MiB: a deny list's mask is mostly a list of the few tokens it gives otherwise than
    /// its root's (shared) mask, so this holds thousands; a whole mask is vocabulary/8 bytes
    /// (32 KiB at 262k tokens).
    pub mask_cache_bytes: usize,
}

impl Default for LexiconLimits {
    fn default() -> Self {
        LexiconLimits {
            max_entries: 100_000,
            max_bytes: 4 << 20,
            max_entry_bytes: 1024,
            max_automaton_bytes: 64 << 20,
            mask_cache_bytes: 16 << 20,
        }
    }
}

/// A compiled lexicon, shared in an `Arc` by every request that uses it (its masks are cached
/// on it, per vocabulary).
pub struct Lexicon {
    kind: LexiconKind,
    /// Deny lists: each distinct entry's symbols (see `decode.rs`); allow lists: each word's.
    patterns: Vec<Vec<u8>>,
    /// Per pattern, how it matches (allow lists: always whole words).
    modes: Vec<MatchMode>,
    /// Per pattern, the entry it came from as given (allow lists: the word).
    originals: Vec<String>,
    entry_count: usize,
    bytes: usize,
    dfa: WordDfa,
    mask_cache_bytes: usize,
    /// Per vocabulary, the mask caches of the matchers that run this lexicon on it.
    attachments: VocabularyAttachments,
}

impl fmt::Debug for Lexicon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lexicon")
            .field("kind", &self.kind)
            .field("entries", &self.entry_count)
            .field("states", &self.dfa.state_count())
            .finish_non_exhaustive()
    }
}

impl Lexicon {
    /// A lexicon of `entries` (each a word or phrase), as a request gives it, matched as
    /// `mode` says (`None`: [`MatchMode::default_for`] its kind).
    pub fn new<S: AsRef<str>>(
        kind: LexiconKind,
        mode: Option<MatchMode>,
        entries: &[S],
        limits: &LexiconLimits,
    ) -> Result<Lexicon, LexiconError> {
        let raw: Vec<RawEntry<'_>> = entries
            .iter()
            .enumerate()
            .map(|(index, text)| RawEntry { text: text.as_ref(), at: EntryAt::Item(index + 1), mode: None })
            .collect();
        Lexicon::build(kind, mode, &raw, limits)
    }

    /// A lexicon file's text (see the module documentation for its format). Its kind is the
    /// one the file declares, else `kind`; a file that declares none, read with no `kind`, is
    /// refused. `mode` is the match mode of the entries before any `#!match` line.
    pub fn parse(
        text: &str,
        kind: Option<LexiconKind>,
        mode: Option<MatchMode>,
        limits: &LexiconLimits,
    ) -> Result<Lexicon, LexiconError> {
        let (declared, raw) = parse_file(text)?;
        let kind = declared.or(kind).ok_or(LexiconError::NoKind)?;
        Lexicon::build(kind, mode, &raw, limits)
    }

    /// Several lexicon files read as one list, their entries together (each file's kind and
    /// modes as in [`Lexicon::parse`]); files of different kinds are refused.
    pub fn parse_all(
        texts: &[&str],
        kind: Option<LexiconKind>,
        mode: Option<MatchMode>,
        limits: &LexiconLimits,
    ) -> Result<Lexicon, LexiconError> {
        let mut chosen: Option<LexiconKind> = None;
        let mut raw = Vec::new();
        for text in texts {
            let (declared, entries) = parse_file(text)?;
            let this = declared.or(kind).ok_or(LexiconError::NoKind)?;
            if chosen.is_some_and(|kind| kind != this) {
                return Err(LexiconError::MixedKinds);
            }
            chosen = Some(this);
            raw.extend(entries);
        }
        Lexicon::build(chosen.ok_or(LexiconError::NoEntries)?, mode, &raw, limits)
    }

    fn build(
        kind: LexiconKind,
        mode: Option<MatchMode>,
        raw: &[RawEntry<'_>],
        limits: &LexiconLimits,
    ) -> Result<Lexicon, LexiconError> {
        let normalized = normalize(kind, mode.unwrap_or(MatchMode::default_for(kind)), raw, limits)?;
        let dfa = match kind {
            LexiconKind::Deny => WordDfa::deny(&normalized.patterns, &normalized.modes, limits.max_automaton_bytes)?,
            LexiconKind::Allow => WordDfa::allow(&normalized.patterns, limits.max_automaton_bytes)?,
        };
        Ok(Lexicon {
            kind,
            patterns: normalized.patterns,
            modes: normalized.modes,
            originals: normalized.originals,
            entry_count: raw.len(),
            bytes: normalized.bytes,
            dfa,
            mask_cache_bytes: limits.mask_cache_bytes,
            attachments: VocabularyAttachments::default(),
        })
    }

    pub fn kind(&self) -> LexiconKind {
        self.kind
    }

    /// Entries as given (duplicates included).
    pub fn entry_count(&self) -> usize {
        self.entry_count
    }

    /// Distinct entries (deny lists) by match mode: word, prefix, substring.
    pub fn mode_counts(&self) -> [usize; 3] {
        let mut counts = [0; 3];
        for mode in &self.modes {
            counts[*mode as usize] += 1;
        }
        counts
    }

    /// Bytes of all entries as given.
    pub fn entry_bytes(&self) -> usize {
        self.bytes
    }

    /// States of the compiled automaton.
    pub fn state_count(&self) -> usize {
        self.dfa.state_count()
    }

    /// Memory the compiled automaton holds, in bytes.
    pub fn automaton_bytes(&self) -> usize {
        self.dfa.heap_bytes()
    }

    /// Whether this lexicon is checked beside the grammar at decode time for `target`; not
    /// where it is compiled into the grammar (an allow list on JSON output).
    pub fn runs_at_decode(&self, target: Target) -> bool {
        !(self.kind == LexiconKind::Allow && target == Target::Json)
    }

    /// Whether the JSON string values a schema leaves free are compiled to this lexicon's
    /// words (an allow list).
    pub(crate) fn restricts_strings(&self) -> bool {
        self.kind == LexiconKind::Allow
    }
}
