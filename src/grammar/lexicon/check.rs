//! [`check_text`]: whether a whole text passes a lexicon and, when not, where it fails and on
//! which word or entry, for `llamay lexicon check` and for tests. It runs the same automaton
//! the sampler runs, so a text passes exactly when the sampler could have written it.
//!
//! Cost: a step per byte, and on a failure a scan of the entries to name the one that matched.

use std::fmt;

use super::decode::{is_probe, is_word_symbol, Decoder, START};
use super::dfa::{BETWEEN_WORDS, DEAD};
use super::{Lexicon, LexiconKind, Target};

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
    /// A deny list's entry (as listed) matches here.
    Banned { entry: String },
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
            Reason::Banned { entry } => write!(f, "is banned (entry {entry:?})"),
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
            Some((start, entry)) => fail(text, start, text.len(), Reason::Banned { entry }),
            None => fail(text, text.len(), text.len(), Reason::Banned { entry: String::new() }),
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
    if let Some((start, entry)) = ending_entry(lexicon, &with_symbol, |last| !is_word_symbol(last)) {
        return fail(text, start, end_of_char, Reason::Banned { entry });
    }
    match pending_entry(lexicon, read) {
        Some((start, entry)) => fail(text, start, at, Reason::Banned { entry }),
        None => fail(text, at, end_of_char, Reason::Banned { entry: String::new() }),
    }
}

/// A deny entry ending in a word symbol that the symbols read end with, matched from a word
/// boundary: the match a non-word symbol or the end of the output confirms.
fn pending_entry(lexicon: &Lexicon, read: &[(u8, usize)]) -> Option<(usize, String)> {
    ending_entry(lexicon, read, is_word_symbol)
}

/// The longest entry, whose last symbol satisfies `last_holds`, that `read` ends with and that
/// starts where a match may start; its start offset and text.
fn ending_entry(lexicon: &Lexicon, read: &[(u8, usize)], last_holds: impl Fn(u8) -> bool) -> Option<(usize, String)> {
    let mut best: Option<(usize, usize)> = None;
    for (index, pattern) in lexicon.patterns.iter().enumerate() {
        let Some(&last) = pattern.last() else { continue };
        if !last_holds(last) || pattern.len() > read.len() {
            continue;
        }
        let from = read.len() - pattern.len();
        let matches = read[from..].iter().zip(pattern).all(|((symbol, _), expected)| symbol == expected);
        let starts_word = is_word_symbol(pattern[0]);
        let boundary_before = from == 0 || !is_word_symbol(read[from - 1].0);
        if matches && (!starts_word || boundary_before) && best.is_none_or(|(length, _)| pattern.len() > length) {
            best = Some((pattern.len(), index));
        }
    }
    best.map(|(length, index)| (read[read.len() - length].1, lexicon.originals[index].clone()))
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
