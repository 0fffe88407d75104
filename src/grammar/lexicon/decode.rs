//! From output bytes to the *symbols* a lexicon's automaton reads: the text with ASCII letters
//! folded to lower case, every whitespace character one space, every punctuation or symbol
//! character outside ASCII one separator symbol, and (in JSON mode) string escapes decoded.
//!
//! A [`Decoder`] is a small state machine over bytes, precomputed as a table: each (decoder
//! state, byte) gives the next decoder state and zero, one or two symbols, or a refusal. It
//! needs state because a character of several bytes is classified only once its first two
//! or three bytes are known, and because a JSON escape spans up to six bytes.
//!
//! Key items: [`Decoder`], [`Mode`], [`is_word_symbol`], [`SEPARATOR`], [`unicode_separators`].
//! Text that is not UTF-8 is refused.
//!
//! Cost: one table lookup per byte; the tables (two of 31 x 256 entries) are built once.

use std::sync::OnceLock;

use crate::ir::ByteSet;

/// How the output is read: as plain text, or as JSON text whose string escapes stand for the
/// characters they encode (a schema's output: `b\u0061d` must not slip past a ban on `bad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    Text,
    Json,
}

/// The symbol every non-ASCII punctuation or symbol character (other than a space) reads as.
/// Never a byte of UTF-8, so no word's symbols contain it (nor the probes below).
pub(crate) const SEPARATOR: u8 = 0xFE;

/// Probes: read where a character has begun but is not known yet, so that a position every
/// ending of which the automaton refuses is refused at once rather than left as a dead end
/// (a banned word complete and waiting for its boundary, then a `\` that can only start the
/// escape of a separator). They change no state: [`NON_WORD_NEXT`] stands for "a non-word
/// character follows" (a JSON escape, the lead of a punctuation block); `WORD_OR_NOT_NEXT`
/// + the lead's index in [`PROBED_LEADS`] for "a non-word character, or a word character
/// whose first byte is that lead".
pub(crate) const NON_WORD_NEXT: u8 = 0xF5;
pub(crate) const WORD_OR_NOT_NEXT: u8 = 0xF6;
/// The lead bytes of characters that may be a word character or not.
pub(crate) const PROBED_LEADS: [u8; 4] = [0xE2, 0xE3, 0xF0, 0xEF];

/// The lead byte a "word or not" probe stands for, if `symbol` is one.
pub(crate) fn probed_lead(symbol: u8) -> Option<u8> {
    PROBED_LEADS.get(usize::from(symbol.checked_sub(WORD_OR_NOT_NEXT)?)).copied()
}

/// Whether `symbol` is a probe (it reads no character).
#[inline]
pub(crate) fn is_probe(symbol: u8) -> bool {
    (NON_WORD_NEXT..WORD_OR_NOT_NEXT + PROBED_LEADS.len() as u8).contains(&symbol)
}

/// Whether `symbol` belongs to a word: ASCII letters and digits, `_`, and the bytes of
/// non-ASCII characters other than punctuation, symbols and spaces.
#[inline]
pub(crate) fn is_word_symbol(symbol: u8) -> bool {
    symbol.is_ascii_alphanumeric() || symbol == b'_' || (0x80..=0xF4).contains(&symbol)
}

/// Whether an ASCII character is part of words.
#[inline]
pub(crate) fn is_word_ascii(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The symbol of an ASCII byte: letters folded, whitespace a space, the rest as itself.
#[inline]
fn ascii_symbol(byte: u8) -> u8 {
    match byte {
        b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => b' ',
        _ => byte.to_ascii_lowercase(),
    }
}

/// The non-ASCII characters read as separators rather than word characters, as UTF-8 byte
/// sets in sequence (each alternative one character): the Latin-1 punctuation block and C1
/// controls (U+0080–U+00BF, no-break space included), general punctuation, super- and
/// subscripts, currency, letterlike symbols, arrows, mathematical and technical symbols, box
/// drawing, dingbats (U+2000–U+2BFF), supplemental punctuation (U+2E00–U+2E7F), CJK
/// punctuation (U+3000–U+303F), the vertical, compatibility and small forms of punctuation
/// (U+FE10–U+FE19, U+FE30–U+FE6F), the fullwidth and halfwidth forms of ASCII and CJK
/// punctuation and symbols (`！`, `～`, `｡`, `￥`), the specials (U+FFF9–U+FFFD), and the emoji
/// and pictograph planes (U+1F000–U+1FFFF). Everything else outside ASCII counts as a letter.
/// Shared with the schema lowering of allowed strings, so both read characters alike.
pub(crate) fn unicode_separators() -> Vec<Vec<ByteSet>> {
    let continuation = ByteSet::range(0x80, 0xBF);
    let mut sequences = vec![
        vec![ByteSet::single(0xC2), continuation],
        vec![ByteSet::single(0xE2), ByteSet::range(0x80, 0xAF), continuation],
        vec![ByteSet::single(0xE2), ByteSet::range(0xB8, 0xB9), continuation],
        vec![ByteSet::single(0xE3), ByteSet::single(0x80), continuation],
        vec![ByteSet::single(0xF0), ByteSet::single(0x9F), continuation, continuation],
    ];
    for (second, lasts) in SPECIALS_SEPARATORS {
        for &(first, last) in lasts {
            sequences.push(vec![ByteSet::single(0xEF), ByteSet::single(second), ByteSet::range(first, last)]);
        }
    }
    sequences
}

/// The separators among the characters U+FE00–U+FFFF (lead byte 0xEF): per second byte, the
/// ranges of third bytes that are punctuation or symbols. Every other character there is a
/// letter, among them the fullwidth letters and digits (`Ａ`, `１`) and halfwidth katakana.
const SPECIALS_SEPARATORS: [(u8, &[(u8, u8)]); 5] = [
    // U+FE10–U+FE19 vertical forms, U+FE30–U+FE3F compatibility forms.
    (0xB8, &[(0x90, 0x99), (0xB0, 0xBF)]),
    // U+FE40–U+FE4F compatibility forms, U+FE50–U+FE6F small forms.
    (0xB9, &[(0x80, 0xAF)]),
    // U+FF01–U+FF0F, U+FF1A–U+FF20, U+FF3B–U+FF3F: fullwidth ASCII punctuation.
    (0xBC, &[(0x81, 0x8F), (0x9A, 0xA0), (0xBB, 0xBF)]),
    // U+FF40, U+FF5B–U+FF65: fullwidth ASCII and halfwidth CJK punctuation.
    (0xBD, &[(0x80, 0x80), (0x9B, 0xA5)]),
    // U+FFE0–U+FFEE fullwidth and halfwidth symbols, U+FFF9–U+FFFD specials.
    (0xBF, &[(0xA0, 0xAE), (0xB9, 0xBD)]),
];


// Decoder states.
const GROUND: u8 = 0;
const AFTER_C2: u8 = 1;
const AFTER_E2: u8 = 2;
const AFTER_E2_80: u8 = 3;
const AFTER_E2_81: u8 = 4;
const AFTER_E3: u8 = 5;
const AFTER_E3_80: u8 = 6;
const AFTER_F0: u8 = 7;
/// Continuation bytes of a separator still to skip.
const SKIP_ONE: u8 = 8;
const SKIP_TWO: u8 = 9;
/// Continuation bytes of a letter still to read (they are symbols of its word).
const LETTER_ONE: u8 = 10;
const LETTER_TWO: u8 = 11;
const LETTER_THREE: u8 = 12;
/// After `\` (JSON mode).
const ESCAPE: u8 = 13;
/// After `\u`, `\u0`, `\u00`.
const UNICODE_1: u8 = 14;
const UNICODE_2: u8 = 15;
const UNICODE_3: u8 = 16;
/// After `\u00` and the digit `d` (0–7): `UNICODE_4 + d`.
const UNICODE_4: u8 = 17;
const AFTER_EF: u8 = 25;
/// After 0xEF and a second byte in [`SPECIALS_SEPARATORS`]: `AFTER_EF_SECOND + index`.
const AFTER_EF_SECOND: u8 = 26;
pub(crate) const DECODER_STATES: usize = 31;

/// The decoder state before any byte.
pub(crate) const START: u8 = GROUND;

/// What one byte does: packed as next state (bits 0–4), symbol count (5–6), refusal (bit 7)
/// and up to three symbols (8–15, 16–23, 24–31): a letter whose class only its third byte
/// tells gives all three of its bytes at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decoded(u32);

const _: () = assert!(DECODER_STATES <= 32, "a decoder state is packed in five bits");

impl Decoded {
    const REFUSED: Decoded = Decoded(1 << 7);

    fn emit(next: u8, symbols: &[u8]) -> Decoded {
        debug_assert!(usize::from(next) < DECODER_STATES && symbols.len() <= 3);
        let mut packed = u32::from(next) | ((symbols.len() as u32) << 5);
        for (index, &symbol) in symbols.iter().take(3).enumerate() {
            packed |= u32::from(symbol) << (8 + 8 * index);
        }
        Decoded(packed)
    }

    #[inline]
    pub(crate) fn is_refused(self) -> bool {
        self.0 & (1 << 7) != 0
    }

    #[inline]
    pub(crate) fn next(self) -> u8 {
        (self.0 & 0x1F) as u8
    }

    #[inline]
    pub(crate) fn symbols(self) -> impl Iterator<Item = u8> {
        let count = (self.0 >> 5) & 3;
        (0..count).map(move |index| (self.0 >> (8 + 8 * index)) as u8)
    }
}

/// The precomputed decoder of one [`Mode`].
pub(crate) struct Decoder {
    table: Box<[Decoded]>,
}

impl Decoder {
    /// The shared decoder of `mode`.
    pub(crate) fn of(mode: Mode) -> &'static Decoder {
        static TEXT: OnceLock<Decoder> = OnceLock::new();
        static JSON: OnceLock<Decoder> = OnceLock::new();
        match mode {
            Mode::Text => TEXT.get_or_init(|| Decoder::build(Mode::Text)),
            Mode::Json => JSON.get_or_init(|| Decoder::build(Mode::Json)),
        }
    }

    fn build(mode: Mode) -> Decoder {
        let mut table = Vec::with_capacity(DECODER_STATES * 256);
        for state in 0..DECODER_STATES as u8 {
            for byte in 0..=255u8 {
                table.push(transition(mode, state, byte));
            }
        }
        Decoder { table: table.into_boxed_slice() }
    }

    #[inline]
    pub(crate) fn step(&self, state: u8, byte: u8) -> Decoded {
        self.table[(usize::from(state) << 8) | usize::from(byte)]
    }

    /// The symbols of `bytes` read from the start (probes left out), with the byte offset of
    /// the character each comes from; `Err` at a refused byte (the offset of its character).
    /// A character cut short at the end gives no symbol.
    pub(crate) fn symbols_of(&self, bytes: &[u8]) -> Result<Vec<(u8, usize)>, usize> {
        let mut symbols = Vec::with_capacity(bytes.len());
        let mut state = START;
        let mut char_start = 0;
        for (offset, &byte) in bytes.iter().enumerate() {
            if state == GROUND {
                char_start = offset;
            }
            let decoded = self.step(state, byte);
            if decoded.is_refused() {
                return Err(char_start);
            }
            symbols.extend(decoded.symbols().filter(|symbol| !is_probe(*symbol)).map(|symbol| (symbol, char_start)));
            state = decoded.next();
        }
        Ok(symbols)
    }
}

fn is_continuation(byte: u8) -> bool {
    (0x80..=0xBF).contains(&byte)
}

fn transition(mode: Mode, state: u8, byte: u8) -> Decoded {
    // Text that is not UTF-8 is refused: a lexicon constrains text.
    let continuation = is_continuation(byte);
    match state {
        GROUND => match byte {
            // Every escape the decoder reads is of a non-word character.
            b'\\' if mode == Mode::Json => Decoded::emit(ESCAPE, &[NON_WORD_NEXT]),
            0x00..=0x7F => Decoded::emit(GROUND, &[ascii_symbol(byte)]),
            0xC2 => Decoded::emit(AFTER_C2, &[NON_WORD_NEXT]),
            0xE2 => Decoded::emit(AFTER_E2, &[WORD_OR_NOT_NEXT]),
            0xE3 => Decoded::emit(AFTER_E3, &[WORD_OR_NOT_NEXT + 1]),
            0xF0 => Decoded::emit(AFTER_F0, &[WORD_OR_NOT_NEXT + 2]),
            0xEF => Decoded::emit(AFTER_EF, &[WORD_OR_NOT_NEXT + 3]),
            // Leads of letters pass through as themselves, their continuations after them.
            0xC3..=0xDF => Decoded::emit(LETTER_ONE, &[byte]),
            0xE0..=0xEE => Decoded::emit(LETTER_TWO, &[byte]),
            0xF1..=0xF4 => Decoded::emit(LETTER_THREE, &[byte]),
            _ => Decoded::REFUSED,
        },
        // Every state but the escape ones waits for the rest of a character.
        _ if !continuation && (state < ESCAPE || state >= AFTER_EF) => Decoded::REFUSED,
        AFTER_C2 => Decoded::emit(GROUND, &[if byte == 0xA0 { b' ' } else { SEPARATOR }]),
        AFTER_E2 => match byte {
            0x80 => Decoded::emit(AFTER_E2_80, &[NON_WORD_NEXT]),
            0x81 => Decoded::emit(AFTER_E2_81, &[NON_WORD_NEXT]),
            0x82..=0xAF | 0xB8..=0xB9 => Decoded::emit(SKIP_ONE, &[SEPARATOR]),
            _ => Decoded::emit(LETTER_ONE, &[0xE2, byte]),
        },
        // U+2000–U+200A and U+202F are spaces; the rest of the block is punctuation.
        AFTER_E2_80 => {
            let space = (0x80..=0x8A).contains(&byte) || byte == 0xAF;
            Decoded::emit(GROUND, &[if space { b' ' } else { SEPARATOR }])
        }
        // U+205F is a space.
        AFTER_E2_81 => Decoded::emit(GROUND, &[if byte == 0x9F { b' ' } else { SEPARATOR }]),
        AFTER_E3 if byte == 0x80 => Decoded::emit(AFTER_E3_80, &[NON_WORD_NEXT]),
        AFTER_E3 => Decoded::emit(LETTER_ONE, &[0xE3, byte]),
        // U+3000 is a space.
        AFTER_E3_80 => Decoded::emit(GROUND, &[if byte == 0x80 { b' ' } else { SEPARATOR }]),
        AFTER_F0 if byte == 0x9F => Decoded::emit(SKIP_TWO, &[SEPARATOR]),
        AFTER_F0 => Decoded::emit(LETTER_TWO, &[0xF0, byte]),
        // Whether the character is a letter waits for its third byte where the block mixes
        // letters and punctuation; its symbols come then.
        AFTER_EF => match SPECIALS_SEPARATORS.iter().position(|(second, _)| *second == byte) {
            Some(index) => Decoded::emit(AFTER_EF_SECOND + index as u8, &[]),
            None => Decoded::emit(LETTER_ONE, &[0xEF, byte]),
        },
        _ if (AFTER_EF_SECOND..AFTER_EF_SECOND + SPECIALS_SEPARATORS.len() as u8).contains(&state) => {
            let (second, separators) = SPECIALS_SEPARATORS[usize::from(state - AFTER_EF_SECOND)];
            if separators.iter().any(|&(first, last)| (first..=last).contains(&byte)) {
                Decoded::emit(GROUND, &[SEPARATOR])
            } else {
                Decoded::emit(GROUND, &[0xEF, second, byte])
            }
        }
        SKIP_ONE => Decoded::emit(GROUND, &[]),
        SKIP_TWO => Decoded::emit(SKIP_ONE, &[]),
        LETTER_ONE => Decoded::emit(GROUND, &[byte]),
        LETTER_TWO => Decoded::emit(LETTER_ONE, &[byte]),
        LETTER_THREE => Decoded::emit(LETTER_TWO, &[byte]),
        ESCAPE => match byte {
            b'"' | b'\\' | b'/' => Decoded::emit(GROUND, &[byte]),
            b'b' => Decoded::emit(GROUND, &[0x08]),
            b'f' | b'n' | b'r' | b't' => Decoded::emit(GROUND, &[b' ']),
            b'u' => Decoded::emit(UNICODE_1, &[]),
            _ => Decoded::REFUSED,
        },
        // Only escapes of ASCII characters that are not word characters are read: any other
        // would hide a letter from the lexicon (the character itself can always be written).
        UNICODE_1 if byte == b'0' => Decoded::emit(UNICODE_2, &[]),
        UNICODE_2 if byte == b'0' => Decoded::emit(UNICODE_3, &[]),
        UNICODE_3 if (b'0'..=b'7').contains(&byte) => Decoded::emit(UNICODE_4 + (byte - b'0'), &[]),
        _ if (UNICODE_4..UNICODE_4 + 8).contains(&state) => {
            let Some(low) = (byte as char).to_digit(16) else { return Decoded::REFUSED };
            let character = (state - UNICODE_4) * 16 + low as u8;
            if is_word_ascii(character) {
                Decoded::REFUSED
            } else {
                Decoded::emit(GROUND, &[ascii_symbol(character)])
            }
        }
        _ => Decoded::REFUSED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbols(mode: Mode, text: &[u8]) -> Result<Vec<u8>, usize> {
        Decoder::of(mode).symbols_of(text).map(|found| found.into_iter().map(|(symbol, _)| symbol).collect())
    }

    #[test]
    fn letters_fold_whitespace_is_one_space_and_punctuation_stays() {
        assert_eq!(symbols(Mode::Text, b"Ab\tC-d_9"), Ok(b"ab c-d_9".to_vec()));
        // Letters outside ASCII keep their bytes (and their case).
        assert_eq!(symbols(Mode::Text, "É".as_bytes()), Ok("É".as_bytes().to_vec()));
        assert_eq!(symbols(Mode::Text, "ñ".as_bytes()), Ok("ñ".as_bytes().to_vec()));
        assert_eq!(symbols(Mode::Text, "ⰰ".as_bytes()), Ok("ⰰ".as_bytes().to_vec()));
    }

    #[test]
    fn unicode_punctuation_is_a_separator_and_unicode_spaces_are_spaces() {
        assert_eq!(symbols(Mode::Text, "a—b".as_bytes()), Ok(vec![b'a', SEPARATOR, b'b']));
        assert_eq!(symbols(Mode::Text, "“a”".as_bytes()), Ok(vec![SEPARATOR, b'a', SEPARATOR]));
        assert_eq!(symbols(Mode::Text, "a\u{a0}b\u{3000}c\u{2009}d".as_bytes()), Ok(b"a b c d".to_vec()));
        assert_eq!(symbols(Mode::Text, "«a»".as_bytes()), Ok(vec![SEPARATOR, b'a', SEPARATOR]));
        assert_eq!(symbols(Mode::Text, "a😀b".as_bytes()), Ok(vec![b'a', SEPARATOR, b'b']));
        assert_eq!(symbols(Mode::Text, "a→b".as_bytes()), Ok(vec![b'a', SEPARATOR, b'b']));
        // Bytes that are not UTF-8 are refused.
        assert_eq!(symbols(Mode::Text, &[b'a', 0xE2, b'x']), Err(1));
        assert_eq!(symbols(Mode::Text, &[0xFF]), Err(0));
        assert_eq!(symbols(Mode::Text, &[b'a', 0xA9]), Err(1));
        assert_eq!(symbols(Mode::Text, &[0xC3, 0xA9, 0xA9]), Err(2));
    }

    #[test]
    fn every_separator_sequence_decodes_to_a_non_word_symbol() {
        for sequence in unicode_separators() {
            let bytes: Vec<u8> = sequence.iter().map(|set| set.iter().next().unwrap_or(0)).collect();
            let found = symbols(Mode::Text, &bytes).unwrap_or_default();
            assert_eq!(found.len(), 1, "{bytes:x?}");
            assert!(!is_word_symbol(found[0]), "{bytes:x?}");
        }
    }

    /// The separators outside ASCII by code point, as the documentation lists them.
    fn documented_separator(c: char) -> bool {
        matches!(u32::from(c),
            0x80..=0xBF | 0x2000..=0x2BFF | 0x2E00..=0x2E7F | 0x3000..=0x303F
            | 0xFE10..=0xFE19 | 0xFE30..=0xFE6F | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40
            | 0xFF5B..=0xFF65 | 0xFFE0..=0xFFEE | 0xFFF9..=0xFFFD | 0x1F000..=0x1FFFF)
    }

    #[test]
    fn every_character_outside_ascii_is_a_letter_or_a_separator_as_documented() {
        let sequences = unicode_separators();
        for c in (0x80..=0x10FFFF).filter_map(char::from_u32) {
            let mut buffer = [0u8; 4];
            let bytes = c.encode_utf8(&mut buffer).as_bytes();
            let found = symbols(Mode::Text, bytes).unwrap_or_else(|at| panic!("U+{:04X} refused at {at}", u32::from(c)));
            let separator = documented_separator(c);
            if separator {
                assert!(found.len() == 1 && !is_word_symbol(found[0]), "U+{:04X}: {found:x?}", u32::from(c));
            } else {
                assert_eq!(found, bytes, "U+{:04X} is a letter", u32::from(c));
            }
            let listed = sequences.iter().any(|sequence| {
                sequence.len() == bytes.len() && sequence.iter().zip(bytes).all(|(set, byte)| set.contains(*byte))
            });
            assert_eq!(listed, separator, "U+{:04X} in unicode_separators()", u32::from(c));
        }
        // A character cut short by another is refused.
        assert_eq!(symbols(Mode::Text, &[0xEF, 0xBC, b'x']), Err(0));
        assert_eq!(symbols(Mode::Text, "a！b～".as_bytes()), Ok(vec![b'a', SEPARATOR, b'b', SEPARATOR]));
        assert_eq!(symbols(Mode::Text, "Ａ１".as_bytes()), Ok("Ａ１".as_bytes().to_vec()));
    }

    #[test]
    fn json_escapes_decode_and_escapes_of_word_characters_are_refused() {
        assert_eq!(symbols(Mode::Json, br#"a\"b\nc\/\u002d"#), Ok(b"a\"b c/-".to_vec()));
        assert_eq!(symbols(Mode::Json, br"\u0009"), Ok(b" ".to_vec()));
        assert_eq!(symbols(Mode::Json, br"b\u0061d"), Err(1));
        assert_eq!(symbols(Mode::Json, br"\u00e9"), Err(0));
        assert_eq!(symbols(Mode::Json, br"\u2014"), Err(0));
        assert_eq!(symbols(Mode::Json, br"\x"), Err(0));
        // In text mode a backslash is punctuation.
        assert_eq!(symbols(Mode::Text, br"b\u0061d"), Ok(br"b\u0061d".to_vec()));
    }
}
