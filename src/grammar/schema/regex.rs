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
use regex_syntax::ast::{self, Ast};
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
    let pattern = re2_pattern(pattern)?;
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
        .map_err(|e| PatternRefusal(format!("which compiles to a DFA beyond llamay's limits ({e})")))?;
    let start = dfa
        .start_state(&start::Config::new().anchored(Anchored::Yes))
        .map_err(|e| PatternRefusal(format!("which cannot be started as a DFA ({e})")))?;
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
                            "which compiles to a DFA of more than {MAX_DFA_STATES} states; simplify the pattern"
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
                "which together with minLength/maxLength needs more than {MAX_PRODUCT_STATES} states; loosen the length bounds"
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
