//! Repetitions of something that can match nothing: `([a-z]*)*`, `(a? b?)*`, `item*` with
//! `item ::= "x"?`. Lowered as written (`star ::= item star | ""`), the repetition could call
//! itself without reading a byte, a left recursion the automaton refuses, though the user wrote
//! none. What such a repetition matches is what repeating the non-empty matches of its item
//! matches (`(x*)*` is `x*`), so its item is replaced by a rule for those: llama.cpp's parser
//! accepts these grammars, and so does this one.
//!
//! Key function: [`repeat_only_what_reads`]. Cost: one nullable pass over the grammar, and per
//! nullable rule reached from such an item a copy of its alternatives (each alternative once
//! per nullable symbol it starts with), charged to the symbol limit; a list of rules to do,
//! no recursion.

use std::collections::HashMap;

use super::{charge_symbols, ParsedGbnf};
use crate::error::GrammarError;
use crate::ir::{rules_satisfying, Rule, RuleId, Symbol};
use crate::limits::Limits;

/// Makes every unbounded repetition `star ::= item star | ""` in `stars` whose item can match
/// nothing repeat the item's non-empty matches instead. `symbols` is what the grammar holds
/// so far, counted as `limits` count it.
pub(super) fn repeat_only_what_reads(
    parsed: &mut ParsedGbnf,
    stars: &[(RuleId, Symbol)],
    symbols: usize,
    limits: &Limits,
) -> Result<(), GrammarError> {
    let nullable = rules_satisfying(&parsed.grammar, |symbol| matches!(symbol, Symbol::Whitespace));
    let is_nullable = |id: RuleId| nullable.get(id.index()).copied().unwrap_or(false);
    let mut reading = NonEmpty { made: HashMap::new(), pending: Vec::new(), symbols, limits };
    for &(star, item) in stars {
        let Symbol::Rule(item) = item else { continue };
        if !is_nullable(item) {
            continue;
        }
        let item_reading = reading.of(parsed, item)?;
        parsed.grammar.rules[star.index()].alternatives = vec![vec![Symbol::Rule(item_reading), Symbol::Rule(star)], Vec::new()];
    }
    while let Some((rule, reads)) = reading.pending.pop() {
        let mut alternatives: Vec<Vec<Symbol>> = Vec::new();
        let source = parsed.grammar.rules[rule.index()].alternatives.clone();
        for alternative in &source {
            // The alternative's non-empty matches: those whose first byte is read by its
            // symbol `at`, every symbol before it having matched nothing.
            for (at, symbol) in alternative.iter().enumerate() {
                let first = match *symbol {
                    Symbol::Rule(id) if is_nullable(id) => Symbol::Rule(reading.of(parsed, id)?),
                    // Structural whitespace never comes from GBNF.
                    Symbol::Whitespace => break,
                    other => other,
                };
                let mut sequence = vec![first];
                sequence.extend_from_slice(&alternative[at + 1..]);
                reading.charge(sequence.len())?;
                alternatives.push(sequence);
                if !matches!(*symbol, Symbol::Rule(id) if is_nullable(id)) {
                    break;
                }
            }
        }
        parsed.grammar.rules[reads.index()].alternatives = alternatives;
    }
    Ok(())
}

/// The rules for the non-empty matches of nullable rules, made on first use and filled in
/// from a list of those still to do.
struct NonEmpty<'l> {
    made: HashMap<RuleId, RuleId>,
    /// (nullable rule, its rule of non-empty matches still without alternatives).
    pending: Vec<(RuleId, RuleId)>,
    symbols: usize,
    limits: &'l Limits,
}

impl NonEmpty<'_> {
    /// The rule of the non-empty matches of nullable `rule`, declared (and queued) when new;
    /// it has the same origin as `rule`, so messages name what the user wrote.
    fn of(&mut self, parsed: &mut ParsedGbnf, rule: RuleId) -> Result<RuleId, GrammarError> {
        if let Some(&made) = self.made.get(&rule) {
            return Ok(made);
        }
        let rules = &mut parsed.grammar.rules;
        if rules.len() >= self.limits.max_rules {
            return Err(GrammarError::TooLarge {
                what: "the rule count (after expanding repetitions)",
                actual: rules.len() + 1,
                limit: self.limits.max_rules,
            });
        }
        let made = RuleId(rules.len() as u32);
        let name = format!("{}-reading", rules[rule.index()].name);
        rules.push(Rule { name, alternatives: Vec::new() });
        let origin = parsed.origins[rule.index()].clone();
        parsed.origins.push(origin);
        self.made.insert(rule, made);
        self.pending.push((rule, made));
        Ok(made)
    }

    fn charge(&mut self, symbols: usize) -> Result<(), GrammarError> {
        charge_symbols(&mut self.symbols, symbols, self.limits)
    }
}
