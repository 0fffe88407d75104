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
use std::hash::Hash;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::ast::{self, Ast};
use regex_syntax::hir::{Hir, HirKind, Look};

use super::json::{byte, canonical_escape, RuleSink};
use crate::ir::{literal_symbols, ByteSet, RuleId, Symbol};

/// The spec's bound on the DFA of one pattern.
pub const MAX_DFA_STATES: usize = 2_000;
/// Bound on (DFA state, character count) pairs when a length bound joins a pattern.
pub const MAX_PRODUCT_STATES: usize = 50_000;

/// Why a pattern cannot be enforced; the text completes "which ...".
#[derive(Debug)]
pub struct PatternRefusal(pub String);

/// Checks a pattern's syntax and features without compiling it.
pub fn check_pattern(pattern: &str) -> Result<(), PatternRefusal> {
    re2_pattern(pattern).map(|_| ())
}

/// The pattern with RE2's meaning made explicit for regex-syntax: `\d`, `\w` and `\s` are
/// ASCII classes in RE2 (and in JSON Schema's ECMA-262) but Unicode ones in regex-syntax, so
/// they are rewritten to `[[:digit:]]`, `[[:word:]]`, `[[:space:]]`. Refuses what a DFA
/// cannot honour.
pub fn re2_pattern(pattern: &str) -> Result<String, PatternRefusal> {
    let unreadable = |e: &dyn std::fmt::Display| {
        PatternRefusal(format!(
            "which is not a pattern llamay can read (RE2 syntax; lookaround and back-references are not supported): {}",
            first_line(&e.to_string())
        ))
    };
    let ast = regex_syntax::ast::parse::ParserBuilder::new().build().parse(pattern).map_err(|e| unreadable(&e))?;
    let mut ast = ast;
    ascii_perl_classes(&mut ast);
    let hir = regex_syntax::hir::translate::TranslatorBuilder::new()
        .utf8(true)
        .build()
        .translate(pattern, &ast)
        .map_err(|e| unreadable(&e))?;
    if let Some(what) = unsupported_look(&hir) {
        return Err(PatternRefusal(format!("which uses {what}, which a DFA over the string cannot honour; rewrite the pattern without it")));
    }
    Ok(hir.to_string())
}

fn ascii_class(perl: &ast::ClassPerl) -> ast::ClassAscii {
    let kind = match perl.kind {
        ast::ClassPerlKind::Digit => ast::ClassAsciiKind::Digit,
        ast::ClassPerlKind::Space => ast::ClassAsciiKind::Space,
        ast::ClassPerlKind::Word => ast::ClassAsciiKind::Word,
    };
    ast::ClassAscii { span: perl.span, kind, negated: perl.negated }
}

fn ascii_perl_classes(node: &mut Ast) {
    match node {
        Ast::ClassPerl(perl) => {
            let replacement = Ast::ClassBracketed(Box::new(ast::ClassBracketed {
                span: perl.span,
                negated: false,
                kind: ast::ClassSet::Item(ast::ClassSetItem::Ascii(ascii_class(perl))),
            }));
            *node = replacement;
        }
        Ast::ClassBracketed(class) => ascii_class_set(&mut class.kind),
        Ast::Repetition(repetition) => ascii_perl_classes(&mut repetition.ast),
        Ast::Group(group) => ascii_perl_classes(&mut group.ast),
        Ast::Alternation(alternation) => alternation.asts.iter_mut().for_each(ascii_perl_classes),
        Ast::Concat(concat) => concat.asts.iter_mut().for_each(ascii_perl_classes),
        _ => {}
    }
}

fn ascii_class_set(set: &mut ast::ClassSet) {
    match set {
        ast::ClassSet::Item(item) => ascii_class_item(item),
        ast::ClassSet::BinaryOp(op) => {
            ascii_class_set(&mut op.lhs);
            ascii_class_set(&mut op.rhs);
        }
    }
}

fn ascii_class_item(item: &mut ast::ClassSetItem) {
    match item {
        ast::ClassSetItem::Perl(perl) => {
            let replacement = ast::ClassSetItem::Ascii(ascii_class(perl));
            *item = replacement;
        }
        ast::ClassSetItem::Bracketed(class) => ascii_class_set(&mut class.kind),
        ast::ClassSetItem::Union(union) => union.items.iter_mut().for_each(ascii_class_item),
        _ => {}
    }
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
    let (pattern, anchored_start, anchored_end) = re2_pattern_with_anchors(pattern)?;
    // JSON Schema searches; an explicit anchor makes the wrapper on that side redundant, and
    // leaving it out keeps the DFA (and the product with a length bound) small.
    let prefix = if anchored_start { "" } else { "(?s:.)*" };
    let suffix = if anchored_end { "" } else { "(?s:.)*" };
    let wrapped = format!("{prefix}(?:{pattern}){suffix}");
    let (dfa, start) = anchored_dfa(&wrapped)?;
    let table = TransitionTable::build(&dfa, start)?;
    let counts = match lengths.max {
        Some(max) => max + 1,
        None => lengths.min + 1,
    };
    let pairs = (table.states.len() as u64).saturating_mul(counts);
    if pairs > MAX_PRODUCT_STATES as u64 {
        return Err(PatternRefusal(format!(
            "which together with minLength/maxLength needs {pairs} states, above the limit of {MAX_PRODUCT_STATES}; loosen the length bounds"
        )));
    }
    let mut lowering = Lowering { table: &table, lengths, counts, rules: vec![None; pairs as usize] };
    Ok(lowering.lower(sink))
}

/// A DFA that reads a whole string and matches when it contains a match of `pattern`
/// (JSON Schema's unanchored search: `.*(?:pattern).*`), and its start state. On valid UTF-8
/// it never dies, so at the end of the input it answers whether the pattern matched.
pub fn search_dfa(pattern: &str) -> Result<(dense::DFA<Vec<u32>>, StateID), PatternRefusal> {
    let rewritten = re2_pattern(pattern)?;
    let wrapped = format!("(?s:.)*(?:{rewritten})(?s:.)*");
    anchored_dfa(&wrapped)
}

/// An anchored, all-matches DFA of `wrapped` within llamay's size limits, and its start state.
fn anchored_dfa(wrapped: &str) -> Result<(dense::DFA<Vec<u32>>, StateID), PatternRefusal> {
    let dfa = dense::Builder::new()
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::All)
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(1 << 20))
                .determinize_size_limit(Some(1 << 20)),
        )
        .syntax(regex_automata::util::syntax::Config::new().utf8(true))
        .build(wrapped)
        .map_err(|e| PatternRefusal(format!("which compiles to a DFA beyond llamay's limits ({e})")))?;
    let start = dfa
        .start_state(&start::Config::new().anchored(Anchored::Yes))
        .map_err(|e| PatternRefusal(format!("which cannot be started as a DFA ({e})")))?;
    Ok((dfa, start))
}

/// The pattern rewritten for RE2 semantics, and whether it is anchored at its start and end.
fn re2_pattern_with_anchors(pattern: &str) -> Result<(String, bool, bool), PatternRefusal> {
    let rewritten = re2_pattern(pattern)?;
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(true)
        .build()
        .parse(&rewritten)
        .map_err(|e| PatternRefusal(format!("which could not be re-read after rewriting ({e})")))?;
    let is_start = |h: &Hir| matches!(h.kind(), HirKind::Look(Look::Start));
    let is_end = |h: &Hir| matches!(h.kind(), HirKind::Look(Look::End));
    let (start, end) = match hir.kind() {
        HirKind::Concat(parts) => (parts.first().is_some_and(is_start), parts.last().is_some_and(is_end)),
        _ => (is_start(&hir), is_end(&hir)),
    };
    Ok((rewritten, start, end))
}

fn escape_for_byte(b: u8) -> Option<Vec<Symbol>> {
    if b >= 0x80 {
        return None;
    }
    canonical_escape(b as char).map(|escape| literal_symbols(escape.as_bytes()))
}

/// Transitions of one DFA state grouped by target: the plain bytes and the bytes written as
/// escapes, separately for bytes that start a character and continuation bytes.
struct TransitionGroup {
    target: usize,
    starts_char: bool,
    plain: ByteSet,
    escaped: Vec<u8>,
}

/// The number of the automaton state `key` in a breadth-first exploration: its place in
/// `order` (the states found so far, numbered through `index`), appended when new; refused
/// with `too_many`'s reason once `max` states are found.
pub(super) fn number_state<K: Hash + Eq + Clone>(
    index: &mut HashMap<K, usize>,
    order: &mut Vec<K>,
    key: K,
    max: usize,
    too_many: impl FnOnce() -> String,
) -> Result<usize, PatternRefusal> {
    if let Some(&number) = index.get(&key) {
        return Ok(number);
    }
    if order.len() >= max {
        return Err(PatternRefusal(too_many()));
    }
    index.insert(key.clone(), order.len());
    order.push(key);
    Ok(order.len() - 1)
}

struct TransitionTable {
    /// Per DFA state (dense index): whether the input may end here, and its transitions.
    states: Vec<(bool, Vec<TransitionGroup>)>,
    escapes: Vec<Option<Vec<Symbol>>>,
}

impl TransitionTable {
    fn build(dfa: &dense::DFA<Vec<u32>>, start: StateID) -> Result<Self, PatternRefusal> {
        let mut index: HashMap<StateID, usize> = HashMap::new();
        let mut order = vec![start];
        index.insert(start, 0);
        let mut states = Vec::new();
        let escapes: Vec<Option<Vec<Symbol>>> = (0u8..=255).map(escape_for_byte).collect();
        let mut cursor = 0;
        while cursor < order.len() {
            let state = order[cursor];
            cursor += 1;
            let accepting = dfa.is_match_state(dfa.next_eoi_state(state));
            let mut groups: Vec<TransitionGroup> = Vec::new();
            for b in 0..=255u8 {
                let next = dfa.next_state(state, b);
                if dfa.is_dead_state(next) || dfa.is_quit_state(next) {
                    continue;
                }
                let target = number_state(&mut index, &mut order, next, MAX_DFA_STATES, || {
                    format!("which compiles to a DFA of more than {MAX_DFA_STATES} states; simplify the pattern")
                })?;
                let starts_char = !(0x80..0xC0).contains(&b);
                let group = match groups.iter_mut().position(|g| g.target == target && g.starts_char == starts_char) {
                    Some(position) => &mut groups[position],
                    None => {
                        groups.push(TransitionGroup { target, starts_char, plain: ByteSet::EMPTY, escaped: Vec::new() });
                        let last = groups.len() - 1;
                        &mut groups[last]
                    }
                };
                if escapes[b as usize].is_some() {
                    group.escaped.push(b);
                } else {
                    group.plain.insert(b);
                }
            }
            states.push((accepting, groups));
        }
        Ok(TransitionTable { states: minimal(states), escapes })
    }
}

/// The states merged where they cannot be told apart, the start state first. A search DFA
/// (`.*(?:p).*`) keeps tracking partial matches of `p` after a match, so all its states past
/// a match accept every rest yet are distinct: merged, they become one state looping on
/// every character, and a string past its match costs the matcher one state, not dozens.
/// Merging keeps each state's count of characters right, since whether a byte starts a
/// character depends on the byte alone.
fn minimal(states: Vec<(bool, Vec<TransitionGroup>)>) -> Vec<(bool, Vec<TransitionGroup>)> {
    let labels: Vec<bool> = states.iter().map(|(accepting, _)| *accepting).collect();
    let edges: Vec<Vec<(usize, ByteSet)>> = states
        .iter()
        .map(|(_, groups)| {
            groups
                .iter()
                .map(|group| (group.target, group.escaped.iter().fold(group.plain, |set, b| set.union(&ByteSet::single(*b)))))
                .collect()
        })
        .collect();
    let partition = super::minimize::minimize(&labels, &false, &edges);
    let mut merged: Vec<Option<(bool, Vec<TransitionGroup>)>> = (0..partition.classes).map(|_| None).collect();
    for ((accepting, groups), class) in states.into_iter().zip(&partition.class_of) {
        let Some(class) = class else { continue };
        if merged[*class].is_some() {
            continue;
        }
        let mut regrouped: Vec<TransitionGroup> = Vec::new();
        for group in groups {
            let Some(target) = partition.class_of[group.target] else { continue };
            match regrouped.iter_mut().find(|g| g.target == target && g.starts_char == group.starts_char) {
                Some(existing) => {
                    existing.plain = existing.plain.union(&group.plain);
                    existing.escaped.extend_from_slice(&group.escaped);
                }
                None => regrouped.push(TransitionGroup { target, ..group }),
            }
        }
        merged[*class] = Some((accepting, regrouped));
    }
    let minimal: Vec<_> = merged.into_iter().flatten().collect();
    if minimal.is_empty() {
        // No string matches: one state that neither ends nor reads on.
        return vec![(false, Vec::new())];
    }
    minimal
}

struct Lowering<'a> {
    table: &'a TransitionTable,
    lengths: LengthBounds,
    /// Distinct character counts tracked (saturating at the bound that matters).
    counts: u64,
    rules: Vec<Option<RuleId>>,
}

impl Lowering<'_> {
    /// Declares a rule per reachable (DFA state, count) pair, then defines them all; dead
    /// ends are left for the grammar-wide pruning pass.
    fn lower(&mut self, sink: &mut RuleSink) -> Option<RuleId> {
        let start = self.rule(sink, 0, 0);
        let mut pending = vec![(0usize, 0u64)];
        let mut defined = vec![false; self.rules.len()];
        while let Some((state, count)) = pending.pop() {
            let slot = state * self.counts as usize + count as usize;
            if defined[slot] {
                continue;
            }
            defined[slot] = true;
            let (accepting, groups) = &self.table.states[state];
            let mut alternatives = Vec::new();
            let length_ok = count >= self.lengths.min && self.lengths.max.is_none_or(|max| count <= max);
            if *accepting && length_ok {
                alternatives.push(vec![byte(b'"')]);
            }
            for group in groups {
                let next_count = if group.starts_char { count + 1 } else { count };
                let next_count = match self.lengths.max {
                    Some(max) if next_count > max => continue,
                    Some(_) => next_count,
                    None => next_count.min(self.lengths.min),
                };
                let target = self.rule(sink, group.target, next_count);
                pending.push((group.target, next_count));
                if !group.plain.is_empty() {
                    alternatives.push(vec![Symbol::Bytes(group.plain), Symbol::Rule(target)]);
                }
                if group.escaped.len() > 1 {
                    // Most states of a pattern with `.` or a negated class read every control
                    // character, each written as an escape of up to six bytes: one shared
                    // rule for the set keeps each state a few symbols long.
                    let escapes = sink.canonical_escapes_of(&group.escaped);
                    alternatives.push(vec![Symbol::Rule(escapes), Symbol::Rule(target)]);
                    continue;
                }
                for b in &group.escaped {
                    if let Some(escape) = &self.table.escapes[*b as usize] {
                        let mut sequence = escape.clone();
                        sequence.push(Symbol::Rule(target));
                        alternatives.push(sequence);
                    }
                }
            }
            let id = self.rule(sink, state, count);
            sink.builder.define(id, alternatives);
        }
        Some(start)
    }

    fn rule(&mut self, sink: &mut RuleSink, state: usize, count: u64) -> RuleId {
        let slot = state * self.counts as usize + count as usize;
        match self.rules[slot] {
            Some(id) => id,
            None => {
                let id = sink.builder.declare("pattern-state");
                self.rules[slot] = Some(id);
                id
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_after(table: &TransitionTable, text: &[u8]) -> Option<usize> {
        text.iter().try_fold(0usize, |state, &b| {
            table.states[state]
                .1
                .iter()
                .find(|group| group.plain.contains(b) || group.escaped.contains(&b))
                .map(|group| group.target)
        })
    }

    #[test]
    fn a_search_past_its_match_is_one_state_looping_on_every_character() {
        let (dfa, start) = search_dfa(r"(\d\d):([0-5][0-9])").expect("pattern");
        let table = TransitionTable::build(&dfa, start).expect("table");
        let matched = state_after(&table, b"12:34").expect("a state");
        assert!(table.states[matched].0, "a match may end the string");
        for rest in ["x", "1", "12:3", "\u{e9}", "\u{4e16}\"", "\n", "\u{1f600}9"] {
            let text = [b"12:34".as_slice(), rest.as_bytes()].concat();
            assert_eq!(state_after(&table, &text), Some(matched), "{rest:?}");
        }
        // Before the match, partial matches are still told apart, and ending there is refused.
        let partial = state_after(&table, b"12:3").expect("a state");
        assert_ne!(partial, matched);
        assert!(!table.states[partial].0);
        assert_eq!(state_after(&table, b"x12:3"), Some(partial));
    }

    #[test]
    fn an_anchored_pattern_drops_the_states_that_cannot_match() {
        let (dfa, start) = anchored_dfa("(?:ab|ac)d").expect("pattern");
        let table = TransitionTable::build(&dfa, start).expect("table");
        // start, a, a[bc], a[bc]d: `ab` and `ac` lead to one state.
        assert_eq!(table.states.len(), 4);
        assert_eq!(state_after(&table, b"ab"), state_after(&table, b"ac"));
        assert_eq!(state_after(&table, b"ad"), None);
    }
}
