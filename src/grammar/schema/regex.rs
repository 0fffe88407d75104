//! `pattern`: RE2-syntax regular expressions compiled to a DFA and lowered to grammar rules.
//!
//! The pattern constrains the decoded string while the automaton reads JSON text, so the DFA
//! runs over the UTF-8 of the value and each byte is written as itself, except `"`, `\` and
//! control characters, which are written as the escape serde_json would use. A string written
//! with other escapes (`\/`, `\u0041`) is therefore not accepted where a pattern applies.
//! The search is unanchored, as in JSON Schema: the regex is wrapped as `.*(?:pattern).*`, so
//! `^` and `$` anchor it. `minLength`/`maxLength` beside a pattern are intersected with it by
//! pairing each DFA state with a character count.
//!
//! Key function: [`pattern_rule`]. Cost: one rule per (DFA state, count) pair, refused beyond
//! [`MAX_DFA_STATES`] DFA states or [`MAX_PRODUCT_STATES`] pairs.

use std::collections::HashMap;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Hir, HirKind, Look};

use super::json::{byte, canonical_escape, RuleSink};
use crate::grammar::ir::{literal_symbols, ByteSet, RuleId, Symbol};

/// The spec's bound on the DFA of one pattern.
pub const MAX_DFA_STATES: usize = 2_000;
/// Bound on (DFA state, character count) pairs when a length bound joins a pattern.
pub const MAX_PRODUCT_STATES: usize = 20_000;

/// Why a pattern cannot be enforced; the text completes "which ...".
#[derive(Debug)]
pub struct PatternRefusal(pub String);

/// Checks a pattern's syntax and features without compiling it.
pub fn check_pattern(pattern: &str) -> Result<(), PatternRefusal> {
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(true)
        .build()
        .parse(pattern)
        .map_err(|e| PatternRefusal(format!("is not a pattern llamay can read (RE2 syntax; lookaround and back-references are not supported): {}", first_line(&e.to_string()))))?;
    if let Some(what) = unsupported_look(&hir) {
        return Err(PatternRefusal(format!("uses {what}, which a DFA over the string cannot honour; rewrite the pattern without it")));
    }
    Ok(())
}

fn first_line(text: &str) -> String {
    text.lines().filter(|l| !l.trim().is_empty()).last().unwrap_or(text).trim().to_string()
}

fn unsupported_look(hir: &Hir) -> Option<&'static str> {
    match hir.kind() {
        HirKind::Look(look) => match look {
            Look::Start | Look::End => None,
            Look::StartLF | Look::EndLF | Look::StartCRLF | Look::EndCRLF => Some("a multi-line anchor"),
            _ => Some("a word boundary (\\b or \\B)"),
        },
        HirKind::Repetition(rep) => unsupported_look(&rep.sub),
        HirKind::Capture(cap) => unsupported_look(&cap.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().find_map(unsupported_look),
        _ => None,
    }
}

/// Characters a string may hold: `min..=max` (max `None` = unbounded).
#[derive(Clone, Copy, Debug)]
pub struct LengthBounds {
    pub min: u64,
    pub max: Option<u64>,
}

/// The body of a string (without quotes) whose decoded value matches `pattern` and whose
/// length is within `lengths`; then the closing quote. `Ok(None)` when no string qualifies.
pub fn pattern_rule(sink: &mut RuleSink, pattern: &str, lengths: LengthBounds) -> Result<Option<RuleId>, PatternRefusal> {
    check_pattern(pattern)?;
    let wrapped = format!("(?s:.)*(?:{pattern})(?s:.)*");
    let dfa = dense::Builder::new()
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::All)
                .start_kind(StartKind::Anchored)
                .minimize(false)
                .dfa_size_limit(Some(8 << 20))
                .determinize_size_limit(Some(8 << 20)),
        )
        .syntax(regex_automata::util::syntax::Config::new().utf8(true))
        .build(&wrapped)
        .map_err(|e| PatternRefusal(format!("compiles to a DFA beyond llamay's limits ({e})")))?;
    let start = dfa
        .start_state(&start::Config::new().anchored(Anchored::Yes))
        .map_err(|e| PatternRefusal(format!("cannot be started as a DFA ({e})")))?;
    let mut lowering = Lowering {
        dfa: &dfa,
        lengths,
        memo: HashMap::new(),
        dfa_states: HashMap::new(),
        escapes: (0u8..=255).map(|b| escape_for_byte(b)).collect(),
    };
    lowering.count_states(start)?;
    lowering.state(sink, start, 0)
}

fn escape_for_byte(b: u8) -> Option<Vec<Symbol>> {
    if b >= 0x80 {
        return None;
    }
    canonical_escape(b as char).map(|escape| literal_symbols(escape.as_bytes()))
}

struct Lowering<'a> {
    dfa: &'a dense::DFA<Vec<u32>>,
    lengths: LengthBounds,
    memo: HashMap<(StateID, u64), Option<RuleId>>,
    dfa_states: HashMap<StateID, ()>,
    escapes: Vec<Option<Vec<Symbol>>>,
}

impl Lowering<'_> {
    /// Walks the DFA from `start`, refusing it past [`MAX_DFA_STATES`].
    fn count_states(&mut self, start: StateID) -> Result<(), PatternRefusal> {
        let mut stack = vec![start];
        self.dfa_states.insert(start, ());
        while let Some(state) = stack.pop() {
            for b in 0..=255u8 {
                let next = self.dfa.next_state(state, b);
                if self.dfa.is_dead_state(next) || self.dfa.is_quit_state(next) {
                    continue;
                }
                if self.dfa_states.insert(next, ()).is_none() {
                    if self.dfa_states.len() > MAX_DFA_STATES {
                        return Err(PatternRefusal(format!(
                            "compiles to a DFA of more than {MAX_DFA_STATES} states; simplify the pattern"
                        )));
                    }
                    stack.push(next);
                }
            }
        }
        Ok(())
    }

    /// The rule for DFA `state` after `count` characters (saturated where no bound cares).
    fn state(&mut self, sink: &mut RuleSink, state: StateID, count: u64) -> Result<Option<RuleId>, PatternRefusal> {
        if let Some(found) = self.memo.get(&(state, count)) {
            return Ok(*found);
        }
        if self.memo.len() > MAX_PRODUCT_STATES {
            return Err(PatternRefusal(format!(
                "together with minLength/maxLength needs more than {MAX_PRODUCT_STATES} states; loosen the length bounds"
            )));
        }
        // Reserve the rule first: DFA states loop.
        let id = sink.builder.declare("pattern-state");
        self.memo.insert((state, count), Some(id));
        let mut alternatives = Vec::new();
        let eoi = self.dfa.next_eoi_state(state);
        let length_ok = count >= self.lengths.min && self.lengths.max.is_none_or(|max| count <= max);
        if self.dfa.is_match_state(eoi) && length_ok {
            alternatives.push(vec![byte(b'"')]);
        }
        let mut plain: Vec<(RuleId, ByteSet)> = Vec::new();
        for b in 0..=255u8 {
            let next = self.dfa.next_state(state, b);
            if self.dfa.is_dead_state(next) || self.dfa.is_quit_state(next) {
                continue;
            }
            // A byte that is not a UTF-8 continuation byte starts a new character.
            let starts_char = !(0x80..0xC0).contains(&b);
            let next_count = if starts_char { count + 1 } else { count };
            if self.lengths.max.is_some_and(|max| next_count > max) {
                continue;
            }
            let saturated = match self.lengths.max {
                Some(_) => next_count,
                None => next_count.min(self.lengths.min),
            };
            let Some(target) = self.state(sink, next, saturated)? else { continue };
            match &self.escapes[b as usize] {
                Some(escape) => {
                    let mut sequence = escape.clone();
                    sequence.push(Symbol::Rule(target));
                    alternatives.push(sequence);
                }
                None => match plain.iter_mut().find(|(t, _)| *t == target) {
                    Some((_, set)) => set.insert(b),
                    None => plain.push((target, ByteSet::single(b))),
                },
            }
        }
        alternatives.extend(plain.into_iter().map(|(target, set)| vec![Symbol::Bytes(set), Symbol::Rule(target)]));
        sink.builder.define(id, alternatives);
        Ok(Some(id))
    }
}
