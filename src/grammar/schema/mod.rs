//! JSON Schema compiled onto the byte-level grammar IR, keyword by keyword as the spec's
//! table says: enforced, ignored (parsed, listed, not enforced) or refused with an error that
//! names the keyword and where it is.
//!
//! Public API: [`any_json`] (RFC 8259 JSON), [`any_json_object`] (JSON mode), [`compile_schema`] (a schema to a
//! [`Grammar`]), [`review_schema`] (every keyword with its verdict, for `llamay schema
//! check`), [`SchemaError`]. Locations are dotted paths from the root (`properties.a`,
//! `$defs.line.properties.qty`, `anyOf.1`); the root is written `(root)`.
//!
//! Choices the spec leaves open, made here:
//! - Objects with at most [`compile::ANY_ORDER_MAX_PROPERTIES`] properties accept them in any
//!   order; larger objects take them in declared order (optional ones may be skipped; extra
//!   keys, where allowed, come last).
//! - Keys, pattern-matched strings and `enum` strings are compared with known text, so they
//!   must be written in canonical form: literal characters, escaping only `"`, `\` and control
//!   characters. Other strings accept every JSON escape.
//! - `integer` values are written without fraction or exponent; bounded numbers without an
//!   exponent; a length or item maximum above 4096 is clamped to 4096.
//! - `pattern` with `minLength`/`maxLength` is intersected (DFA state x character count);
//!   two different patterns on one value are refused. `\d`, `\w`, `\s` are ASCII, as in RE2.
//! - `enum`/`const` objects of up to four members match in any key order.
//! - An `anyOf`/`oneOf` between closed objects is read as one object that tracks which
//!   alternatives are still possible (`union.rs`); pattern DFAs and bounded numbers are
//!   lowered as minimal DFAs (`minimize.rs`), so the automaton keeps one parse stack there.
//! - Recursive `$ref`s compile to recursive rules; how deep a document may nest through them
//!   is the automaton's stack limit, not a count kept here. Subschemas compiled inside one
//!   another (counting through `$ref`, so a chain `d0 -> d1 -> ...` too) may nest
//!   [`MAX_SCHEMA_DEPTH`] deep; deeper is refused at the `$ref` or keyword that goes past it.
//! - Errors carry the location of the schema that holds the keyword.
//!
//! Cost: compiling is linear in the schema except where the spec allows blow-ups, each capped:
//! alternatives (256), pattern DFA states (2,000), subsets of properties (2^6), digit automata;
//! and the whole grammar is held to [`MAX_SCHEMA_SYMBOLS`] while it is built (`budget.rs`).
//! No walk over a schema recurses deeper than [`MAX_SCHEMA_DEPTH`] levels of subschemas or
//! [`MAX_DOCUMENT_DEPTH`] levels of JSON, so compiling runs in bounded stack.

mod budget;
mod compile;
mod formats;
mod json;
mod keys;
mod keywords;
mod merge;
mod minimize;
mod numbers;
mod part;
mod regex;
mod union;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::ir::{Grammar, RuleId, Symbol};
use crate::lexicon::strings::AllowedStrings;
use crate::lexicon::Lexicon;

pub use budget::{MAX_DOCUMENT_DEPTH, MAX_SCHEMA_DEPTH, MAX_SCHEMA_SYMBOLS};
pub use formats::FormatMode;
pub use json::WHITESPACE_BUDGET;
pub use keywords::{Occurrence, SchemaReport, Verdict};

/// Why a schema is refused: the keyword, where it is, and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    pub keyword: String,
    /// Dotted path from the root; `(root)` for the root itself.
    pub location: String,
    /// Completes "LOCATION uses "KEYWORD", ...".
    pub message: String,
}

impl SchemaError {
    pub(crate) fn new(keyword: &str, location: &str, message: impl Into<String>) -> Self {
        SchemaError {
            keyword: keyword.to_string(),
            location: keywords::display_location(location),
            message: message.into(),
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} uses \"{}\", {}", self.location, self.keyword, self.message)
    }
}

/// A generated document: optional leading whitespace, then the value, and nothing after it.
/// Trailing whitespace is valid JSON text, but allowing it lets a model spend the whole
/// whitespace budget on newlines after the closing brace; without it the constraint is
/// complete at the last byte of the value and generation stops there.
fn document(value: RuleId) -> Vec<Vec<Symbol>> {
    vec![vec![Symbol::Whitespace, Symbol::Rule(value)]]
}

/// Any RFC 8259 JSON document.
pub fn any_json() -> Grammar {
    any_json_in(json::RuleSink::new())
}

/// [`any_json`] under a lexicon: with an allow list, string values hold only its words (see
/// [`crate::lexicon`]); a deny list is checked beside the grammar, so nothing changes here.
pub fn any_json_with_lexicon(lexicon: &Arc<Lexicon>) -> Grammar {
    let mut sink = json::RuleSink::new();
    sink.allowed = allowed_strings(Some(lexicon));
    any_json_in(sink)
}

/// What free string values are lowered to under `lexicon`, when it restricts them.
fn allowed_strings(lexicon: Option<&Arc<Lexicon>>) -> Option<AllowedStrings> {
    lexicon.filter(|lexicon| lexicon.restricts_strings()).map(|lexicon| AllowedStrings::new(lexicon.clone()))
}

fn any_json_in(mut sink: json::RuleSink) -> Grammar {
    let value = sink.any_value();
    let root = sink.add("root", document(value));
    sink.builder.finish(root, WHITESPACE_BUDGET)
}

/// A JSON object at the top level, anything inside it (JSON mode: `-json`, `format: "json"`,
/// `json_object`): every client of a JSON mode reads an object, as llama.cpp's server and
/// Ollama compile theirs. Bounded as [`any_json`] is: the same number digits and whitespace budget.
pub fn any_json_object() -> Grammar {
    any_json_object_in(json::RuleSink::new())
}

/// [`any_json_object`] under a lexicon, as [`any_json_with_lexicon`] is.
pub fn any_json_object_with_lexicon(lexicon: &Arc<Lexicon>) -> Grammar {
    let mut sink = json::RuleSink::new();
    sink.allowed = allowed_strings(Some(lexicon));
    any_json_object_in(sink)
}

fn any_json_object_in(mut sink: json::RuleSink) -> Grammar {
    let object = sink.any_object();
    let root = sink.add("root", document(object));
    sink.builder.finish(root, WHITESPACE_BUDGET)
}

/// Whether the JSON number `value` is a whole multiple of `step`, in exact decimal arithmetic,
/// as the grammar decides `multipleOf` (binary floating point calls 2.22 no multiple of 0.01).
/// False when either is not a finite number or they are too long to compare.
pub fn is_decimal_multiple(value: &Value, step: f64) -> bool {
    let step = serde_json::Number::from_f64(step).map(Value::Number);
    match (numbers::Decimal::from_json(value), step.as_ref().and_then(numbers::Decimal::from_json)) {
        (Some(value), Some(step)) => value.is_multiple_of(&step).unwrap_or(false),
        _ => false,
    }
}

/// Compiles `schema` to a grammar of the documents it allows, or says which keyword, where,
/// cannot be enforced.
pub fn compile_schema(schema: &Value) -> Result<Grammar, SchemaError> {
    compile_schema_with(schema, FormatMode::Ignore)
}

/// [`compile_schema`], with `format` enforced when `formats` says so.
pub fn compile_schema_with(schema: &Value, formats: FormatMode) -> Result<Grammar, SchemaError> {
    compile_schema_in(schema, formats, None)
}

/// [`compile_schema_with`] under a lexicon: with an allow list, the string values the schema
/// leaves free (no `enum`, `const`, `pattern` or enforced `format`) hold only its words (see
/// [`crate::lexicon`]). A deny list is checked beside the grammar; pass the result to
/// [`Lexicon::restrict`] in either case.
pub fn compile_schema_with_lexicon(schema: &Value, formats: FormatMode, lexicon: &Arc<Lexicon>) -> Result<Grammar, SchemaError> {
    compile_schema_in(schema, formats, Some(lexicon))
}

fn compile_schema_in(schema: &Value, formats: FormatMode, lexicon: Option<&Arc<Lexicon>>) -> Result<Grammar, SchemaError> {
    budget::check_document_depth(schema)?;
    if let Some(refusal) = keywords::first_refusal(schema) {
        return Err(refusal);
    }
    let mut compiler = compile::Compiler::new(schema);
    compiler.formats = formats;
    compiler.sink.allowed = allowed_strings(lexicon);
    let value = compiler.compile(vec![compile::Part::new(schema, "")], true)?.ok_or_else(|| {
        SchemaError::new("schema", "", "which no JSON document can satisfy")
    })?;
    let root = compiler.sink.add("root", document(value));
    let built = compiler.sink.builder.symbol_count();
    if built > MAX_SCHEMA_SYMBOLS {
        return Err(budget::too_large("schema", "", 0, built));
    }
    let grammar = compiler.sink.builder.finish(root, WHITESPACE_BUDGET);
    prune(grammar).ok_or_else(|| SchemaError::new("schema", "", "which no JSON document can satisfy"))
}

/// Every keyword reachable from the root with its verdict, plus the refusal (from a keyword or
/// from compiling) if there is one.
pub fn review_schema(schema: &Value) -> SchemaReport {
    review_schema_with(schema, FormatMode::Ignore)
}

/// [`review_schema`], with `format` enforced when `formats` says so (known formats are then
/// listed as enforced).
pub fn review_schema_with(schema: &Value, formats: FormatMode) -> SchemaReport {
    let mut occurrences = keywords::scan(schema);
    if formats == FormatMode::Enforce {
        for occurrence in occurrences.iter_mut().filter(|o| o.keyword == "format") {
            occurrence.verdict = Verdict::Enforced;
            occurrence.note = "enforced on request (date-time, date, time, email, uuid, ipv4, ipv6, hostname, uri; others stay annotations)".into();
        }
    }
    let (refusal, rule_count) = match compile_schema_with(schema, formats) {
        Ok(grammar) => (None, Some(grammar.rules.len())),
        Err(error) => (Some(error), None),
    };
    let mut report = SchemaReport { occurrences, refusal, rule_count };
    if let Some(refusal) = &report.refusal {
        let listed = report
            .occurrences
            .iter_mut()
            .find(|o| o.keyword == refusal.keyword && o.location == refusal.location);
        match listed {
            Some(occurrence) => {
                occurrence.verdict = Verdict::Refused;
                occurrence.note = refusal.message.clone();
            }
            None => report.occurrences.push(Occurrence {
                keyword: refusal.keyword.clone(),
                location: refusal.location.clone(),
                verdict: Verdict::Refused,
                note: refusal.message.clone(),
            }),
        }
    }
    report
}

/// Drops alternatives that can never finish (a dead end would let a sampler walk into a state
/// with no way out) and rules the root cannot reach. `None` when the root itself is dead.
/// Rules are moved, not copied: on large schemas this pass touches every symbol.
pub(crate) fn prune(mut grammar: Grammar) -> Option<Grammar> {
    let count = grammar.rules.len();
    let productive = crate::ir::rules_satisfying(&grammar, |symbol| match symbol {
        Symbol::Bytes(set) => !set.is_empty(),
        _ => true,
    });
    let symbol_ok = |symbol: &Symbol| match symbol {
        Symbol::Bytes(set) => !set.is_empty(),
        Symbol::Rule(id) => productive.get(id.index()).copied().unwrap_or(false),
        Symbol::Whitespace => true,
    };
    if !productive.get(grammar.root.index()).copied().unwrap_or(false) {
        return None;
    }
    for rule in &mut grammar.rules {
        rule.alternatives.retain(|alternative| alternative.iter().all(symbol_ok));
    }
    let mut new_index: Vec<Option<u32>> = vec![None; count];
    let mut order = vec![grammar.root.index()];
    new_index[grammar.root.index()] = Some(0);
    let mut cursor = 0;
    while cursor < order.len() {
        let rule = &grammar.rules[order[cursor]];
        cursor += 1;
        for symbol in rule.alternatives.iter().flatten() {
            if let Symbol::Rule(id) = symbol {
                if new_index[id.index()].is_none() {
                    new_index[id.index()] = Some(order.len() as u32);
                    order.push(id.index());
                }
            }
        }
    }
    let mut old_rules: Vec<Option<crate::ir::Rule>> = grammar.rules.into_iter().map(Some).collect();
    let rules = order
        .iter()
        .filter_map(|&old| old_rules[old].take())
        .map(|mut rule| {
            for symbol in rule.alternatives.iter_mut().flatten() {
                if let Symbol::Rule(id) = symbol {
                    *id = RuleId(new_index[id.index()].unwrap_or(0));
                }
            }
            rule
        })
        .collect();
    Some(Grammar { rules, root: RuleId(0), whitespace_budget: grammar.whitespace_budget })
}
