//! The GBNF front end: parses llama.cpp's grammar dialect and lowers it to an
//! [`ir::Grammar`](super::ir::Grammar).
//!
//! Supported: rules `name ::= ...` (names of letters, digits, `-` and `_`), `#` comments,
//! alternation, grouping (newlines allowed inside parentheses and after `|` or `::=`),
//! `*` `+` `?` `{m}` `{m,}` `{m,n}`, string literals and character classes with escapes
//! (`\n \t \r \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`, all naming code points, as in llama.cpp),
//! ranges, negation `[^...]`, and `.` (any character). Characters become their UTF-8 bytes.
//! Repetitions expand into rules as llama.cpp does: `x{2,4}` is `x x opt2` with
//! `opt2 ::= x opt1 | ""`, `opt1 ::= x | ""`; an unbounded repetition of something that can
//! match nothing (`([a-z]*)*`) repeats only what reads bytes (`nullable.rs`), as llama.cpp
//! accepts it.
//!
//! Refused at load time, each naming what the user wrote (a rule, or a group, repetition or
//! class quoted from the source) and its line:column: left recursion, token terminals
//! (`<think>`, `<[1000]>`), repetition bounds above `Limits::max_repetition`, a rule with
//! more alternatives than the automaton keeps parse stacks, undefined or twice-defined rules, a
//! missing `root`, syntax errors, parentheses nested past `Limits::max_nesting`, and sources
//! over the limits (size, rules, expanded symbols), so no input hangs or exhausts memory.
//!
//! Key functions: [`parse_gbnf`], [`compile_gbnf`]; the parser is `parser.rs`. Cost: linear
//! in the source plus the expanded repetitions (bounded by `Limits::max_symbols`).

mod nullable;
mod parser;

use std::ops::Range;

use super::automaton::{find_left_recursion, CompiledGrammar};
use super::error::{GrammarError, Location};
use super::limits::Limits;
use parser::Parser;

/// A parsed GBNF grammar plus where each rule came from, for messages.
#[derive(Debug)]
pub struct ParsedGbnf {
    pub grammar: super::ir::Grammar,
    /// For every rule of `grammar`, where it came from.
    pub origins: Vec<Origin>,
}

/// Where a rule of a parsed grammar comes from.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The source rule it was written in.
    pub rule: String,
    /// Where that rule is defined.
    pub defined_at: Location,
    /// For a rule made for a group, a repetition or a character class: the bytes of the
    /// source it was made from.
    pub construct: Option<Range<usize>>,
}

/// Parses and lowers `source`; no automaton is built.
pub fn parse_gbnf(source: &[u8], limits: &Limits) -> Result<ParsedGbnf, GrammarError> {
    if source.len() > limits.max_source_bytes {
        return Err(GrammarError::TooLarge {
            what: "the grammar source (bytes)",
            actual: source.len(),
            limit: limits.max_source_bytes,
        });
    }
    let text = std::str::from_utf8(source).map_err(|e| GrammarError::NotText {
        offset: e.valid_up_to(),
    })?;
    if let Some(offset) = text.find('\0') {
        return Err(GrammarError::NotText { offset });
    }
    let mut parser = Parser::new(text, limits);
    parser.parse_grammar()?;
    parser.finish()
}

/// Parses `source` and compiles it for the automaton; left recursion and rules too wide for
/// the automaton are reported at what the user wrote.
pub fn compile_gbnf(source: &[u8], limits: &Limits) -> Result<CompiledGrammar, GrammarError> {
    let parsed = parse_gbnf(source, limits)?;
    let text = String::from_utf8_lossy(source);
    if let Some(cycle) = find_left_recursion(&parsed.grammar) {
        return Err(left_recursion(&parsed, &text, &cycle));
    }
    if let Some(wide) = too_many_alternatives(&parsed, &text, limits) {
        return Err(wide);
    }
    CompiledGrammar::new(parsed.grammar, limits)
}

/// Adds `added` to `count`, the symbols the grammar expands into so far; refused once that
/// passes `limits.max_symbols`, while the grammar is built rather than after.
fn charge_symbols(count: &mut usize, added: usize, limits: &Limits) -> Result<(), GrammarError> {
    *count = count.saturating_add(added);
    if *count > limits.max_symbols {
        return Err(GrammarError::TooLarge {
            what: "the expanded grammar (symbols)",
            actual: *count,
            limit: limits.max_symbols,
        });
    }
    Ok(())
}

/// The refusal of a left-recursive cycle of rules, told in the user's terms: source rules by
/// name, generated ones as the construct they were made from, starting at a source rule.
fn left_recursion(parsed: &ParsedGbnf, text: &str, cycle: &[usize]) -> GrammarError {
    let origin = |rule: usize| parsed.origins.get(rule);
    let start = cycle.iter().position(|&rule| origin(rule).is_some_and(|o| o.construct.is_none())).unwrap_or(0);
    let mut steps: Vec<String> = Vec::new();
    for &rule in cycle[start..].iter().chain(&cycle[..start]) {
        let Some(origin) = origin(rule) else { continue };
        let step = match &origin.construct {
            Some(range) => construct_step(text, range),
            None => origin.rule.clone(),
        };
        if steps.last() != Some(&step) {
            steps.push(step);
        }
    }
    let (rule, at) = match cycle.get(start).and_then(|&rule| origin(rule)) {
        Some(Origin { rule, defined_at, construct: None }) => (rule.clone(), *defined_at),
        Some(Origin { rule, construct: Some(range), .. }) => (rule.clone(), location_in(text, range.start)),
        None => (String::new(), Location::default()),
    };
    let first = steps.first().cloned().unwrap_or_default();
    GrammarError::LeftRecursion { rule, cycle: format!("{} -> {first}", steps.join(" -> ")), at }
}

/// The first rule with more alternatives than the automaton keeps parse stacks alive: each
/// alternative that can still match is one, so entering it could never be stepped.
fn too_many_alternatives(parsed: &ParsedGbnf, text: &str, limits: &Limits) -> Option<GrammarError> {
    let (index, rule) = parsed
        .grammar
        .rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule.alternatives.iter().filter(|a| !a.is_empty()).count() > limits.max_stacks)?;
    let origin = parsed.origins.get(index)?;
    let (what, at) = match &origin.construct {
        Some(range) => (format!("the group {} in rule `{}`", construct_step(text, range), origin.rule), location_in(text, range.start)),
        None => (format!("rule `{}`", origin.rule), origin.defined_at),
    };
    Some(GrammarError::TooManyAlternatives { what, at, alternatives: rule.alternatives.len(), limit: limits.max_stacks })
}

/// A construct quoted from the source, with where it starts: `` `([a-z]*)*` (line 1, column 10) ``.
fn construct_step(text: &str, range: &Range<usize>) -> String {
    let source = text.get(range.clone()).unwrap_or_default();
    let mut quoted: String = source.split_whitespace().collect::<Vec<_>>().join(" ");
    if quoted.chars().count() > 40 {
        quoted = quoted.chars().take(39).chain(['…']).collect();
    }
    match location_in(text, range.start).0 {
        Some((line, column)) => format!("`{quoted}` (line {line}, column {column})"),
        None => format!("`{quoted}`"),
    }
}

/// Line and column (in characters, from 1) of byte `offset` of `text`.
fn location_in(text: &str, offset: usize) -> Location {
    let before = text.get(..offset.min(text.len())).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.matches('\n').count() + 1;
    Location::at(line, before[line_start..].chars().count() + 1)
}

fn describe(location: Location) -> String {
    match location.0 {
        Some((line, column)) => format!("{line}:{column}"),
        None => "?".to_string(),
    }
}

#[cfg(test)]
mod tests;
