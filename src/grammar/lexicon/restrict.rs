//! [`Lexicon::restrict`]: a grammar's fixed text checked against a lexicon when the constraint
//! is compiled, so that an `enum` member, a property name or a literal of a GBNF grammar that
//! the lexicon rules out is never started at decode time only to reach a dead end.
//!
//! Within an alternative, a run of single-byte terminals is text every path through it writes.
//! The run is ruled out when the lexicon refuses it whatever came before: for a deny list, when
//! it completes a banned entry read both after a word character and after any other (what
//! came before can only add matches); for an allow list, when a word that starts and ends
//! inside the run is not listed. Such alternatives are dropped, then the rules no output can
//! complete any more, as the schema compiler drops rules that cannot finish.
//!
//! [`compile_gbnf_with_lexicon`] does the same for a GBNF source.
//!
//! Cost: one automaton step per byte of literal text.

use super::decode::{is_word_symbol, Decoder};
use super::dfa::{AFTER_BOUNDARY, BETWEEN_WORDS, DEAD, INSIDE_WORD};
use super::error::{ConstraintError, LexiconError};
use super::{Lexicon, LexiconKind, Target};
use crate::automaton::{find_left_recursion, CompiledGrammar};
use crate::gbnf::{compile_gbnf, parse_gbnf};
use crate::ir::{Grammar, Symbol};
use crate::limits::Limits;

impl Lexicon {
    /// `grammar` (a GBNF grammar's IR for [`Target::Grammar`], a schema's for
    /// [`Target::Json`]) without the alternatives whose fixed text this lexicon rules out.
    /// Refuses a grammar left with no output at all. Unchanged where the lexicon does not run
    /// beside the grammar (an allow list on JSON output is compiled into its strings).
    pub fn restrict(&self, mut grammar: Grammar, target: Target) -> Result<Grammar, LexiconError> {
        if !self.runs_at_decode(target) {
            return Ok(grammar);
        }
        let decoder = Decoder::of(target.mode());
        let mut first_dropped: Option<String> = None;
        let root = grammar.root;
        let root_reentered =
            grammar.rules.iter().flat_map(|rule| rule.alternatives.iter().flatten()).any(|symbol| *symbol == Symbol::Rule(root));
        for (index, rule) in grammar.rules.iter_mut().enumerate() {
            // The alternatives of a root no rule enters again start and end the output.
            let whole_output = index == root.index() && !root_reentered;
            rule.alternatives.retain(|alternative| match self.refused_run(alternative, decoder, whole_output) {
                Some(text) => {
                    first_dropped.get_or_insert(text);
                    false
                }
                None => true,
            });
        }
        let Some(dropped) = first_dropped else {
            return Ok(grammar);
        };
        crate::schema::prune(grammar).ok_or_else(|| LexiconError::NothingLeft {
            what: target.describe(),
            reason: format!("every output it allows writes text such as {dropped:?}, which the lexicon rules out"),
        })
    }

    /// The first run of fixed text in `alternative` that the lexicon rules out, if any. With
    /// `whole_output`, a run that starts the alternative starts the output, and one that ends
    /// it ends the output.
    fn refused_run(&self, alternative: &[Symbol], decoder: &Decoder, whole_output: bool) -> Option<String> {
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0;
        for (position, symbol) in alternative.iter().map(Some).chain([None]).enumerate() {
            match symbol {
                Some(Symbol::Bytes(set)) if set.len() == 1 => run.extend(set.iter()),
                _ => {
                    let edges = (whole_output && run_start == 0, whole_output && symbol.is_none());
                    if !run.is_empty() && self.rules_out(&run, decoder, edges) {
                        return Some(String::from_utf8_lossy(&run).into_owned());
                    }
                    run.clear();
                    run_start = position + 1;
                }
            }
        }
        None
    }

    /// Whether the lexicon refuses `text` whatever comes before it (nothing, when it starts
    /// the output) and after it (nothing, when it ends the output).
    fn rules_out(&self, text: &[u8], decoder: &Decoder, (starts_output, ends_output): (bool, bool)) -> bool {
        let Ok(symbols) = decoder.symbols_of(text) else {
            return true;
        };
        let symbols: Vec<u8> = symbols.into_iter().map(|(symbol, _)| symbol).collect();
        let dies_from = |mut state: u32, symbols: &[u8]| {
            let died = symbols.iter().any(|&symbol| {
                state = self.dfa.next(state, symbol);
                state == DEAD
            });
            died || (ends_output && !self.dfa.is_accepting(state))
        };
        match self.kind {
            LexiconKind::Deny => {
                dies_from(AFTER_BOUNDARY, &symbols) && (starts_output || dies_from(INSIDE_WORD, &symbols))
            }
            // The first word may be the end of one begun before the run: read from the first
            // separator on.
            LexiconKind::Allow => {
                let from = if starts_output { Some(0) } else { symbols.iter().position(|symbol| !is_word_symbol(*symbol)) };
                from.is_some_and(|from| dies_from(BETWEEN_WORDS, &symbols[from..]))
            }
        }
    }
}

/// Parses and compiles a GBNF grammar under `lexicon`: its literal text that the lexicon
/// rules out is dropped (see [`Lexicon::restrict`]); the lexicon itself then runs beside it
/// ([`super::LexiconMatcher`] with [`Target::Grammar`]).
pub fn compile_gbnf_with_lexicon(
    source: &[u8],
    limits: &Limits,
    lexicon: &Lexicon,
) -> Result<CompiledGrammar, ConstraintError> {
    let parsed = parse_gbnf(source, limits)?;
    if find_left_recursion(&parsed.grammar).is_some() {
        // Only the plain compile names the source rules of the cycle.
        compile_gbnf(source, limits)?;
    }
    let grammar = lexicon.restrict(parsed.grammar, Target::Grammar)?;
    Ok(CompiledGrammar::new(grammar, limits)?)
}
