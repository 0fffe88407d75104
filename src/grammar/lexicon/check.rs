//! [`check_text`]: whether a whole text passes a lexicon and, when not, where it fails and on
//! which word or entry, for `llamay lexicon check` and for tests. It runs the same automaton
//! the sampler runs, so a text passes exactly when the sampler could have written it.
//!
//! Cost: a step per byte, and on a failure a scan of the entries to name the one that matched.

use std::fmt;

use super::decode::{is_probe, is_word_symbol, Decoder, START};
use super::dfa::{BETWEEN_WORDS, DEAD};
use super::{Lexicon, LexiconKind, MatchMode, Target};

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexiconCheck {
    Pass,
    Fail(Violation),
}

/// Where a text fails a lexicon and why. Offsets are bytes; `line` and `column` count from 1,
/// the column in characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub offset: usize,
    pub end: usize,
    pub line: usize,
    pub column: usize,
    /// The offending text as written.
    pub text: String,
    pub reason: Reason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A deny list's entry (as listed) matches here, under its match mode.
    Banned { entry: String, mode: MatchMode },
    /// A word that an allow list lacks.
    NotAllowed,
    /// A JSON `\u` escape of a word character (or no JSON escape at all), refused while a
    /// lexicon applies.
    EscapedWordCharacter,
    /// Bytes that are not UTF-8.
    NotText,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {} (byte {}): {:?} ", self.line, self.column, self.offset, self.text)?;
        match &self.reason {
            Reason::Banned { entry, mode } => write!(f, "is banned (entry {entry:?}, match {mode})"),
            Reason::NotAllowed => f.write_str("is not a word of the allow list"),
            Reason::EscapedWordCharacter => {
                f.write_str("escapes a word character, refused while a lexicon applies: write the character itself")
            }
            Reason::NotText => f.write_str("is not UTF-8 text"),
        }
    }
}

/// Checks `text` against `lexicon`, read as `target` says (JSON escapes decoded for
/// [`Target::Json`]). An allow list is checked on the whole text here, whatever the target.
pub fn check_text(lexicon: &Lexicon, text: &[u8], target: Target) -> LexiconCheck {
    let decoder = Decoder::of(target.mode());
    let dfa = &lexicon.dfa;
    let mut state = dfa.start;
    let mut decoder_state = START;
    // The symbols the automaton read (a space after a space is skipped), with their offsets.
    let mut read: Vec<(u8, usize)> = Vec::new();
    let mut word_start = 0;
    let mut char_start = 0;
    for (offset, &byte) in text.iter().enumerate() {
        if decoder_state == START {
            char_start = offset;
        }
        let decoded = decoder.step(decoder_state, byte);
        if decoded.is_refused() {
            let reason = match text.get(char_start) {
                Some(b'\\') if target == Target::Json => Reason::EscapedWordCharacter,
                _ => Reason::NotText,
            };
            return fail(text, char_start, offset + 1, reason);
        }
        for symbol in decoded.symbols() {
            if symbol == b' ' && read.last().is_some_and(|(last, _)| *last == b' ') {
                continue;
            }
            let next = dfa.next(state, symbol);
            if lexicon.kind == LexiconKind::Allow && state == BETWEEN_WORDS && is_word_symbol(symbol) {
                word_start = char_start;
            }
            if next == DEAD {
                return match lexicon.kind {
                    LexiconKind::Deny => banned_before_or_at(lexicon, text, &read, symbol, char_start),
                    LexiconKind::Allow => {
                        let end = if is_word_symbol(symbol) { word_end(decoder, text, offset) } else { char_start };
                        fail(text, word_start, end, Reason::NotAllowed)
                    }
                };
            }
            state = next;
            if !is_probe(symbol) {
                read.push((symbol, char_start));
            }
        }
        decoder_state = decoded.next();
    }
    if decoder_state != START {
        return fail(text, char_start, text.len(), Reason::NotText);
    }
    if dfa.is_accepting(state) {
        return LexiconCheck::Pass;
    }
    match lexicon.kind {
        LexiconKind::Deny => match pending_entry(lexicon, &read) {
            Some((start, reason)) => fail(text, start, text.len(), reason),
            None => fail(text, text.len(), text.len(), unnamed()),
        },
        LexiconKind::Allow => fail(text, word_start, text.len(), Reason::NotAllowed),
    }
}

/// The deny entry whose match the step on `symbol` (of the character at `at`) confirms: one
/// completed by `symbol` itself, or one that was complete and waited for a non-word symbol.
fn banned_before_or_at(lexicon: &Lexicon, text: &[u8], read: &[(u8, usize)], symbol: u8, at: usize) -> LexiconCheck {
    let mut with_symbol = read.to_vec();
    with_symbol.push((symbol, at));
    let end_of_char = at + char_len(text, at);
    let completed = |last: u8, mode: MatchMode| mode != MatchMode::Word || !is_word_symbol(last);
    if let Some((start, reason)) = ending_entry(lexicon, &with_symbol, completed) {
        return fail(text, start, end_of_char, reason);
    }
    match pending_entry(lexicon, read) {
        Some((start, reason)) => fail(text, start, at, reason),
        None => fail(text, at, end_of_char, unnamed()),
    }
}

/// A ban whose entry was not found (the automaton and the scan disagree: not expected).
fn unnamed() -> Reason {
    Reason::Banned { entry: String::new(), mode: MatchMode::Word }
}

/// A whole-word deny entry ending in a word symbol that the symbols read end with, matched
/// from a word boundary: the match a non-word symbol or the end of the output confirms.
fn pending_entry(lexicon: &Lexicon, read: &[(u8, usize)]) -> Option<(usize, Reason)> {
    ending_entry(lexicon, read, |last, mode| mode == MatchMode::Word && is_word_symbol(last))
}

/// The longest entry, whose last symbol and mode satisfy `ends`, that `read` ends with and
/// that starts where its mode lets a match start; its start offset and the reason it gives.
fn ending_entry(
    lexicon: &Lexicon,
    read: &[(u8, usize)],
    ends: impl Fn(u8, MatchMode) -> bool,
) -> Option<(usize, Reason)> {
    let mut best: Option<(usize, usize)> = None;
    for (index, (pattern, &mode)) in lexicon.patterns.iter().zip(&lexicon.modes).enumerate() {
        let Some(&last) = pattern.last() else { continue };
        if !ends(last, mode) || pattern.len() > read.len() {
            continue;
        }
        let from = read.len() - pattern.len();
        let matches = read[from..].iter().zip(pattern).all(|((symbol, _), expected)| symbol == expected);
        let needs_boundary = mode != MatchMode::Substring && is_word_symbol(pattern[0]);
        let boundary_before = from == 0 || !is_word_symbol(read[from - 1].0);
        if matches && (!needs_boundary || boundary_before) && best.is_none_or(|(length, _)| pattern.len() > length) {
            best = Some((pattern.len(), index));
        }
    }
    best.map(|(length, index)| {
        let reason = Reason::Banned { entry: lexicon.originals[index].clone(), mode: lexicon.modes[index] };
        (read[read.len() - length].1, reason)
    })
}

/// Where the word going on at `offset` ends.
fn word_end(decoder: &Decoder, text: &[u8], offset: usize) -> usize {
    let mut state = START;
    let mut end = offset;
    for (at, &byte) in text.iter().enumerate().skip(offset) {
        if state == START {
            end = at;
        }
        let decoded = decoder.step(state, byte);
        if decoded.is_refused() || decoded.symbols().any(|symbol| !is_word_symbol(symbol)) {
            return end;
        }
        state = decoded.next();
    }
    text.len()
}

fn char_len(text: &[u8], at: usize) -> usize {
    1 + text.iter().skip(at + 1).take_while(|byte| **byte & 0xC0 == 0x80).count()
}

fn fail(text: &[u8], offset: usize, end: usize, reason: Reason) -> LexiconCheck {
    let end = end.clamp(offset, text.len());
    let before = &text[..offset];
    let line = 1 + before.iter().filter(|byte| **byte == b'\n').count();
    let line_start = before.iter().rposition(|byte| *byte == b'\n').map_or(0, |at| at + 1);
    let column = 1 + before[line_start..].iter().filter(|byte| **byte & 0xC0 != 0x80).count();
    LexiconCheck::Fail(Violation {
        offset,
        end,
        line,
        column,
        text: String::from_utf8_lossy(&text[offset..end]).into_owned(),
        reason,
    })
}
