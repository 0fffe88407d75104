//! Whole inputs against a compiled grammar, for people: [`check_input`] says whether a text
//! matches and, when not, where and what was expected there ([`CheckOutcome`]);
//! [`describe_expected`] and [`describe_byte_set`] render what the automaton accepts next;
//! [`BytePath`] walks a grammar byte by byte, for tools and tests that explore its sentences.
//!
//! Cost: a byte step per input byte (uncached: a check runs once per input).

use super::automaton::{config_is_accepting, CompiledGrammar};
use super::ir::ByteSet;

/// The result of matching a whole input against a grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The input is a complete sentence of the grammar.
    Match,
    /// The input is a valid prefix, but the grammar needs more.
    Incomplete { expected: String },
    /// The automaton died at byte `offset` (line and column are 1-based, columns in bytes).
    Mismatch {
        offset: usize,
        line: usize,
        column: usize,
        expected: String,
    },
}

/// Matches `input` against the whole grammar, saying where and why it fails.
pub fn check_input(grammar: &CompiledGrammar, input: &[u8]) -> CheckOutcome {
    let mut config = grammar.initial_config().to_vec();
    let (mut line, mut column) = (1usize, 1usize);
    for (offset, &byte) in input.iter().enumerate() {
        let next = match grammar.step(&config, byte) {
            Ok(next) => next,
            Err(overflow) => {
                return CheckOutcome::Mismatch {
                    offset,
                    line,
                    column,
                    expected: format!("(cannot continue: {})", overflow.describe(grammar.limits())),
                }
            }
        };
        if next.is_empty() {
            return CheckOutcome::Mismatch {
                offset,
                line,
                column,
                expected: describe_expected(grammar, &config),
            };
        }
        config = next;
        if byte == b'\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    if config_is_accepting(&config) {
        CheckOutcome::Match
    } else {
        CheckOutcome::Incomplete {
            expected: describe_expected(grammar, &config),
        }
    }
}

/// A position in a grammar reached byte by byte, uncached: what may come next, whether the bytes
/// so far are a whole sentence. For random walks in tests and for tools, not for decoding (the
/// [`crate::Matcher`] caches what this recomputes).
#[derive(Clone)]
pub struct BytePath<'g> {
    grammar: &'g CompiledGrammar,
    config: Vec<u32>,
}

impl<'g> BytePath<'g> {
    /// The grammar's start, before any byte.
    pub fn new(grammar: &'g CompiledGrammar) -> Self {
        BytePath { grammar, config: grammar.initial_config().to_vec() }
    }

    /// The bytes that keep the walk alive.
    pub fn allowed(&self) -> ByteSet {
        self.grammar.allowed_bytes(&self.config)
    }

    /// Whether the bytes so far are a complete sentence.
    pub fn is_accepting(&self) -> bool {
        config_is_accepting(&self.config)
    }

    /// Takes `byte`; false (and the walk unchanged) when the grammar refuses it or a limit
    /// would be exceeded.
    pub fn push(&mut self, byte: u8) -> bool {
        match self.grammar.step(&self.config, byte) {
            Ok(next) if !next.is_empty() => {
                self.config = next;
                true
            }
            _ => false,
        }
    }
}

/// A human description of what `config` accepts next, e.g. `one of "," "]"` or `[0-9]`.
pub(crate) fn describe_expected(grammar: &CompiledGrammar, config: &[u32]) -> String {
    let allowed = grammar.allowed_bytes(config);
    let accepting = config_is_accepting(config);
    let mut text = describe_byte_set(&allowed);
    if accepting {
        if allowed.is_empty() {
            text = "the end of the input".to_string();
        } else {
            text.push_str(" or the end of the input");
        }
    }
    text
}

/// Renders a byte set for people: `"e"`, `[0-9]`, `one of "," "]"`, `one of "-" [0-9]`, or a
/// bracketed class when there are many ranges.
pub(crate) fn describe_byte_set(set: &ByteSet) -> String {
    if set.is_empty() {
        return "nothing (the grammar cannot continue here)".to_string();
    }
    if set.len() == 256 {
        return "any byte".to_string();
    }
    let mut ranges: Vec<(u8, u8)> = Vec::new();
    for byte in set.iter() {
        match ranges.last_mut() {
            Some((_, high)) if *high as u16 + 1 == byte as u16 => *high = byte,
            _ => ranges.push((byte, byte)),
        }
    }
    let in_class = |byte: u8| -> String {
        match byte {
            b'-' | b']' | b'[' | b'\\' | b'^' => format!("\\{}", byte as char),
            0x21..=0x7e => (byte as char).to_string(),
            _ => byte.escape_ascii().to_string(),
        }
    };
    let quoted = |byte: u8| -> String {
        match byte {
            b'"' => "'\"'".to_string(),
            0x20..=0x7e => format!("\"{}\"", byte as char),
            _ => format!("\"{}\"", byte.escape_ascii()),
        }
    };
    let item = |(low, high): (u8, u8)| -> String {
        if low == high {
            quoted(low)
        } else {
            format!("[{}-{}]", in_class(low), in_class(high))
        }
    };
    if let [only] = ranges[..] {
        return item(only);
    }
    if ranges.len() <= 12 {
        let items: Vec<String> = ranges.into_iter().map(item).collect();
        return format!("one of {}", items.join(" "));
    }
    let body: String = ranges
        .into_iter()
        .map(|(low, high)| {
            if low == high {
                in_class(low)
            } else {
                format!("{}-{}", in_class(low), in_class(high))
            }
        })
        .collect();
    format!("[{body}]")
}
