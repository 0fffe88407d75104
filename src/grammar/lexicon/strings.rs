//! An allow list lowered to grammar rules for the JSON string values a schema leaves free: a
//! quoted string whose every word is a listed word, any separator between words (written as
//! itself or as a JSON escape), and words written without escapes (as `decode.rs` reads them).
//!
//! The rules are the allow automaton itself, one rule per state: from a state, a word byte
//! leads to its successor's rule (both cases of an ASCII letter), and where a word is complete
//! a separator leads back to the rule between words and the closing quote ends the string.
//! Without length bounds, states whose rules come out equal share one (a trie's complete
//! leaves all do), which minimizes the automaton. With `minLength`/`maxLength` each state is
//! paired with the count of characters written, bounded by [`MAX_COUNTED_STATES`] pairs.
//!
//! Key type: [`AllowedStrings`]. Cost: one rule per (distinct) state, built once per grammar
//! and per pair of bounds.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::decode::{is_word_ascii, unicode_separators};
use super::dfa::BETWEEN_WORDS;
use super::Lexicon;
use crate::ir::{ByteSet, GrammarBuilder, RuleId, Symbol};

/// Most (state, characters written) pairs one length-bounded allowed string may take.
pub const MAX_COUNTED_STATES: usize = 50_000;

/// The allowed-string rules of one grammar under construction.
pub(crate) struct AllowedStrings {
    lexicon: Arc<Lexicon>,
    separator: Option<RuleId>,
    unbounded: Option<RuleId>,
    bounded: HashMap<(u64, Option<u64>), RuleId>,
}

fn byte(b: u8) -> Symbol {
    Symbol::Bytes(ByteSet::single(b))
}

impl AllowedStrings {
    pub(crate) fn new(lexicon: Arc<Lexicon>) -> Self {
        AllowedStrings { lexicon, separator: None, unbounded: None, bounded: HashMap::new() }
    }

    /// A quoted string of allowed words, of any length.
    pub(crate) fn any_length(&mut self, builder: &mut GrammarBuilder) -> RuleId {
        if let Some(id) = self.unbounded {
            return id;
        }
        let body = self.unbounded_body(builder);
        let id = builder.add("allowed-string", vec![vec![byte(b'"'), Symbol::Rule(body)]]);
        self.unbounded = Some(id);
        id
    }

    /// A quoted string of allowed words of `min..=max` characters; the error completes
    /// "which ...".
    pub(crate) fn string(&mut self, builder: &mut GrammarBuilder, min: u64, max: Option<u64>) -> Result<RuleId, String> {
        if min == 0 && max.is_none() {
            return Ok(self.any_length(builder));
        }
        if let Some(id) = self.bounded.get(&(min, max)) {
            return Ok(*id);
        }
        let body = self.counted_body(builder, min, max)?;
        let id = builder.add("allowed-string", vec![vec![byte(b'"'), Symbol::Rule(body)]]);
        self.bounded.insert((min, max), id);
        Ok(id)
    }

    /// One character of a JSON string that is not a word character.
    fn separator(&mut self, builder: &mut GrammarBuilder) -> RuleId {
        if let Some(id) = self.separator {
            return id;
        }
        let mut plain = ByteSet::range(0x20, 0x7F);
        for b in 0..=0x7Fu8 {
            if is_word_ascii(b) || b == b'"' || b == b'\\' {
                plain.remove(b);
            }
        }
        let mut short = ByteSet::EMPTY;
        for b in b"\"\\/bfnrt" {
            short.insert(*b);
        }
        let mut escapes = vec![vec![Symbol::Bytes(short)]];
        // `\u00XY` of every ASCII character that is not a word character, grouped by the
        // digits Y allowed after X.
        let mut by_low: Vec<(ByteSet, ByteSet)> = Vec::new();
        for high in 0..8u8 {
            let mut lows = ByteSet::EMPTY;
            for low in 0..16u8 {
                if !is_word_ascii(high * 16 + low) {
                    for digit in format!("{low:x}{low:X}").bytes() {
                        lows.insert(digit);
                    }
                }
            }
            let high_digit = b'0' + high;
            match by_low.iter_mut().find(|(_, known)| *known == lows) {
                Some((highs, _)) => highs.insert(high_digit),
                None => by_low.push((ByteSet::single(high_digit), lows)),
            }
        }
        for (highs, lows) in by_low {
            escapes.push(vec![byte(b'u'), byte(b'0'), byte(b'0'), Symbol::Bytes(highs), Symbol::Bytes(lows)]);
        }
        let escape = builder.add("allowed-separator-escape", escapes);
        let mut alternatives = vec![vec![Symbol::Bytes(plain)], vec![byte(b'\\'), Symbol::Rule(escape)]];
        for sequence in unicode_separators() {
            alternatives.push(sequence.into_iter().map(Symbol::Bytes).collect());
        }
        let id = builder.add("allowed-separator", alternatives);
        self.separator = Some(id);
        id
    }

    /// The word bytes leaving `state`, by the state each leads to (both cases of a letter).
    fn word_steps(&self, state: u32) -> Vec<(ByteSet, u32)> {
        let mut steps: Vec<(ByteSet, u32)> = Vec::new();
        for (symbol, target) in self.lexicon.dfa.word_steps(state) {
            let mut bytes = ByteSet::single(symbol);
            if symbol.is_ascii_lowercase() {
                bytes.insert(symbol.to_ascii_uppercase());
            }
            match steps.iter_mut().find(|(_, known)| *known == target) {
                Some((set, _)) => *set = set.union(&bytes),
                None => steps.push((bytes, target)),
            }
        }
        steps
    }

    /// The rules of every state, equal ones shared, and the one between words (where a string
    /// starts).
    fn unbounded_body(&mut self, builder: &mut GrammarBuilder) -> RuleId {
        let separator = self.separator(builder);
        let lexicon = self.lexicon.clone();
        let dfa = &lexicon.dfa;
        let between = builder.declare("allowed-words");
        let states = dfa.state_count() as u32;
        let mut rule_of: Vec<RuleId> = vec![between; states as usize];
        let mut by_body: HashMap<Vec<Vec<Symbol>>, RuleId> = HashMap::new();
        // A trie: every state's successors have larger ids, so their rules exist first.
        for state in (BETWEEN_WORDS..states).rev() {
            let mut alternatives = Vec::new();
            if dfa.is_accepting(state) {
                alternatives.push(vec![byte(b'"')]);
                alternatives.push(vec![Symbol::Rule(separator), Symbol::Rule(between)]);
            }
            for (bytes, target) in self.word_steps(state) {
                alternatives.push(vec![Symbol::Bytes(bytes), Symbol::Rule(rule_of[target as usize])]);
            }
            if state == BETWEEN_WORDS {
                builder.define(between, alternatives);
                break;
            }
            rule_of[state as usize] = *by_body
                .entry(alternatives)
                .or_insert_with_key(|alternatives| builder.add("allowed-word", alternatives.clone()));
        }
        between
    }

    /// The rules of each reachable (state, characters written) pair, the count saturating at
    /// `min` when there is no maximum.
    fn counted_body(&mut self, builder: &mut GrammarBuilder, min: u64, max: Option<u64>) -> Result<RuleId, String> {
        let separator = self.separator(builder);
        let lexicon = self.lexicon.clone();
        let dfa = &lexicon.dfa;
        let cap = max.unwrap_or(min);
        let count_after = |written: u64, step: u64| (written + step).min(cap);
        let mut pairs = CountedPairs::default();
        let start = pairs.id((BETWEEN_WORDS, 0), builder);
        while let Some((state, written)) = pairs.queue.pop_front() {
            if pairs.ids.len() > MAX_COUNTED_STATES {
                return Err(format!(
                    "with the allow lexicon's {} automaton states, needs more than {MAX_COUNTED_STATES} \
                     (state, length) pairs for its length bounds; drop minLength/maxLength there or use a shorter list",
                    dfa.state_count()
                ));
            }
            let room = max.is_none_or(|max| written < max);
            let mut alternatives = Vec::new();
            if dfa.is_accepting(state) {
                if written >= min {
                    alternatives.push(vec![byte(b'"')]);
                }
                if room {
                    let next = pairs.id((BETWEEN_WORDS, count_after(written, 1)), builder);
                    alternatives.push(vec![Symbol::Rule(separator), Symbol::Rule(next)]);
                }
            }
            for (bytes, target) in self.word_steps(state) {
                // A byte that continues a character adds none; its lead counted it.
                for starts in [false, true] {
                    let part = bytes.intersect(if starts { &LEADS } else { &CONTINUATIONS });
                    if part.is_empty() || (starts && !room) {
                        continue;
                    }
                    let next = pairs.id((target, count_after(written, u64::from(starts))), builder);
                    alternatives.push(vec![Symbol::Bytes(part), Symbol::Rule(next)]);
                }
            }
            let id = pairs.id((state, written), builder);
            builder.define(id, alternatives);
        }
        Ok(start)
    }
}

/// The (state, characters written) pairs declared so far, and those still to define.
#[derive(Default)]
struct CountedPairs {
    ids: HashMap<(u32, u64), RuleId>,
    queue: VecDeque<(u32, u64)>,
}

impl CountedPairs {
    fn id(&mut self, pair: (u32, u64), builder: &mut GrammarBuilder) -> RuleId {
        *self.ids.entry(pair).or_insert_with(|| {
            self.queue.push_back(pair);
            builder.declare("allowed-word-counted")
        })
    }
}

/// Bytes that start a character, and those that continue one.
const CONTINUATIONS: ByteSet = ByteSet([0, 0, u64::MAX, 0]);
const LEADS: ByteSet = ByteSet([u64::MAX, u64::MAX, 0, u64::MAX]);

#[cfg(test)]
use crate::ir::starts_character;

#[cfg(test)]
#[test]
fn lead_and_continuation_sets_split_bytes_as_utf8_does() {
    for b in 0..=255u8 {
        assert_eq!(LEADS.contains(b), starts_character(b), "{b:#x}");
        assert_eq!(CONTINUATIONS.contains(b), !starts_character(b), "{b:#x}");
    }
}
