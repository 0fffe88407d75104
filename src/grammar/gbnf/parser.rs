//! The GBNF parser: source text to rules, one rule at a time, with groups, repetitions and
//! character classes lowered to rules of their own as they are read.
//!
//! Key type: [`Parser`]. Cost: linear in the source plus the expanded repetitions, each
//! charged to `Limits::max_symbols` before it is built. Nothing recurses: groups nested in
//! groups are a list of the groups still open.

use std::collections::HashMap;

use super::nullable::repeat_only_what_reads;
use super::{charge_symbols, describe, Origin, ParsedGbnf};
use crate::error::{GrammarError, Location};
use crate::ir::{char_ranges_to_alternatives, complement_char_ranges, ByteSet, Grammar, Rule, RuleId, Symbol};
use crate::limits::Limits;

pub(super) struct Parser<'s> {
    text: &'s str,
    /// Byte offset where each line starts, for line:column of any offset.
    line_starts: Vec<usize>,
    pos: usize,
    limits: &'s Limits,
    rules: Vec<Rule>,
    origins: Vec<Origin>,
    /// Unbounded repetitions: each rule `star ::= item star | ""` with its item.
    stars: Vec<(RuleId, Symbol)>,
    /// User rule name -> id; generated rules are not named here.
    by_name: HashMap<String, RuleId>,
    /// For user rules: where they are defined (None until defined).
    defined_at: Vec<Option<Location>>,
    /// First reference of each rule: (referencing rule, where).
    first_reference: Vec<Option<(String, usize)>>,
    /// Character classes already lowered, by their ranges.
    classes: HashMap<Vec<(char, char)>, Symbol>,
    current_rule: String,
    current_location: Location,
    symbol_count: usize,
    generated: usize,
}

/// A group being read: its alternatives so far and the sequence being read. A rule's body is
/// the outermost group; each `(` opens one inside the group being read.
struct OpenGroup {
    alternatives: Vec<Vec<Symbol>>,
    sequence: Vec<Symbol>,
    /// Where the last element starts in `sequence` and in the source: a repetition applies
    /// to it.
    last: Option<(usize, usize)>,
    /// Byte offset of its `(` (0 for a rule's body).
    opened_at: usize,
}

impl OpenGroup {
    fn new(opened_at: usize) -> Self {
        OpenGroup { alternatives: Vec::new(), sequence: Vec::new(), last: None, opened_at }
    }
}

impl<'s> Parser<'s> {
    pub(super) fn new(text: &'s str, limits: &'s Limits) -> Self {
        Parser {
            text,
            line_starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            pos: 0,
            limits,
            rules: Vec::new(),
            origins: Vec::new(),
            stars: Vec::new(),
            by_name: HashMap::new(),
            defined_at: Vec::new(),
            first_reference: Vec::new(),
            classes: HashMap::new(),
            current_rule: String::new(),
            current_location: Location::default(),
            symbol_count: 0,
            generated: 0,
        }
    }

    fn location(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|start| *start <= offset);
        let line_start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let column = self
            .text
            .get(line_start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(0);
        Location::at(line, column + 1)
    }

    fn syntax(&self, offset: usize, message: impl Into<String>) -> GrammarError {
        GrammarError::Syntax {
            at: self.location(offset),
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.text[self.pos..].chars().nth(ahead)
    }

    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the file".to_string(),
            Some('\n') | Some('\r') => "the end of the line".to_string(),
            Some(c) => format!("`{c}`"),
        }
    }

    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                        self.pos += c.len_utf8();
                    }
                }
                _ => break,
            }
        }
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_'
    }

    fn parse_name(&mut self) -> Option<&'s str> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_name_char) {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.text[start..self.pos])
    }

    pub(super) fn parse_grammar(&mut self) -> Result<(), GrammarError> {
        self.skip_space(true);
        if self.pos >= self.text.len() {
            return Err(GrammarError::Empty);
        }
        while self.pos < self.text.len() {
            self.parse_rule()?;
            self.skip_space(true);
        }
        Ok(())
    }

    fn rule_id(&mut self, name: &str) -> Result<RuleId, GrammarError> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        let id = self.new_rule(name.to_string())?;
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    fn new_rule(&mut self, name: String) -> Result<RuleId, GrammarError> {
        if self.rules.len() >= self.limits.max_rules {
            return Err(GrammarError::TooLarge {
                what: "the rule count (after expanding repetitions)",
                actual: self.rules.len() + 1,
                limit: self.limits.max_rules,
            });
        }
        let id = RuleId(self.rules.len() as u32);
        self.rules.push(Rule {
            name,
            alternatives: Vec::new(),
        });
        self.origins.push(Origin {
            rule: self.current_rule.clone(),
            defined_at: self.current_location,
            construct: None,
        });
        self.defined_at.push(None);
        self.first_reference.push(None);
        Ok(id)
    }

    /// A rule for a group, a repetition or a character class, made from the source text
    /// `construct` (byte offsets) of the rule being read.
    fn generated_rule(
        &mut self,
        alternatives: Vec<Vec<Symbol>>,
        construct: std::ops::Range<usize>,
    ) -> Result<RuleId, GrammarError> {
        self.generated += 1;
        let name = format!("{}-{}", self.current_rule, self.generated);
        let id = self.new_rule(name)?;
        self.rules[id.index()].alternatives = alternatives;
        self.origins[id.index()].construct = Some(construct);
        Ok(id)
    }

    fn count_symbols(&mut self, added: usize) -> Result<(), GrammarError> {
        charge_symbols(&mut self.symbol_count, added, self.limits)
    }

    fn parse_rule(&mut self) -> Result<(), GrammarError> {
        let start = self.pos;
        let Some(name) = self.parse_name() else {
            return Err(self.syntax(
                self.pos,
                format!("expected a rule name, found {}", self.found()),
            ));
        };
        let location = self.location(start);
        self.current_rule = name.to_string();
        self.current_location = location;
        self.generated = 0;
        self.skip_space(false);
        if !self.text[self.pos..].starts_with("::=") {
            return Err(self.syntax(
                self.pos,
                format!(
                    "expected `::=` after the rule name `{name}`, found {}",
                    self.found()
                ),
            ));
        }
        self.pos += 3;
        self.skip_space(true);
        let id = self.rule_id(name)?;
        // A rule first seen as a reference records its origin at the reference; fix it here.
        self.origins[id.index()] = Origin { rule: name.to_string(), defined_at: location, construct: None };
        if self.defined_at[id.index()].is_some() {
            return Err(GrammarError::DuplicateRule {
                rule: name.to_string(),
                at: location,
            });
        }
        self.defined_at[id.index()] = Some(location);
        let alternatives = self.parse_alternates()?;
        self.rules[id.index()].alternatives = alternatives;
        match self.peek() {
            None => Ok(()),
            Some('\n') => {
                self.pos += 1;
                Ok(())
            }
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                Ok(())
            }
            Some(')') => Err(self.syntax(self.pos, "unbalanced `)`: no group is open here")),
            Some(_) => Err(self.syntax(
                self.pos,
                format!("unexpected {} in rule `{name}`", self.found()),
            )),
        }
    }

    /// The alternatives of a rule's body. Groups are read with a list of the groups still
    /// open, not by recursion, so nesting costs no stack; it is held to
    /// `Limits::max_nesting` all the same.
    fn parse_alternates(&mut self) -> Result<Vec<Vec<Symbol>>, GrammarError> {
        let mut enclosing: Vec<OpenGroup> = Vec::new();
        let mut group = OpenGroup::new(0);
        loop {
            if let Some(opened_at) = self.parse_sequence(&mut group, !enclosing.is_empty())? {
                if enclosing.len() >= self.limits.max_nesting {
                    return Err(GrammarError::TooDeep {
                        limit: self.limits.max_nesting,
                        at: self.location(opened_at),
                    });
                }
                self.pos += 1;
                self.skip_space(true);
                enclosing.push(std::mem::replace(&mut group, OpenGroup::new(opened_at)));
                continue;
            }
            group.alternatives.push(std::mem::take(&mut group.sequence));
            group.last = None;
            if self.peek() == Some('|') {
                self.pos += 1;
                self.skip_space(true);
                continue;
            }
            let Some(mut outer) = enclosing.pop() else {
                return Ok(group.alternatives);
            };
            if self.peek() != Some(')') {
                return Err(self.syntax(
                    self.pos,
                    format!(
                        "expected `)` to close the group opened at {}, found {}",
                        describe(self.location(group.opened_at)),
                        self.found()
                    ),
                ));
            }
            self.pos += 1;
            outer.last = Some((outer.sequence.len(), group.opened_at));
            if group.alternatives.len() == 1 {
                outer.sequence.extend(group.alternatives.into_iter().flatten());
            } else {
                let id = self.generated_rule(group.alternatives, group.opened_at..self.pos)?;
                outer.sequence.push(Symbol::Rule(id));
            }
            self.count_symbols(1)?;
            self.skip_space(!enclosing.is_empty());
            group = outer;
        }
    }

    /// Reads elements into `group`'s sequence up to a `|`, a `)`, the end of the rule or a
    /// `(`; returns the offset of a `(`, whose group the caller reads next.
    fn parse_sequence(&mut self, group: &mut OpenGroup, nested: bool) -> Result<Option<usize>, GrammarError> {
        while let Some(c) = self.peek() {
            let element_start = self.pos;
            match c {
                '"' => {
                    self.pos += 1;
                    let mut bytes = Vec::new();
                    loop {
                        match self.peek() {
                            None | Some('\n') | Some('\r') => {
                                return Err(
                                    self.syntax(element_start, "unterminated string literal")
                                )
                            }
                            Some('"') => {
                                self.pos += 1;
                                break;
                            }
                            Some(_) => {
                                let c = self.parse_char()?;
                                let mut buffer = [0u8; 4];
                                bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                            }
                        }
                    }
                    self.count_symbols(bytes.len())?;
                    group.last = Some((group.sequence.len(), element_start));
                    group.sequence.extend(bytes.iter().map(|b| Symbol::Bytes(ByteSet::single(*b))));
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None | Some('\n') | Some('\r') => {
                                return Err(
                                    self.syntax(element_start, "unterminated character class")
                                )
                            }
                            Some(']') => {
                                self.pos += 1;
                                break;
                            }
                            Some(_) => {
                                let low = self.parse_char()?;
                                let mut high = low;
                                if self.peek() == Some('-')
                                    && !matches!(
                                        self.peek_at(1),
                                        Some(']') | Some('\n') | Some('\r') | None
                                    )
                                {
                                    self.pos += 1;
                                    let range_end = self.pos;
                                    high = self.parse_char()?;
                                    if high < low {
                                        return Err(self.syntax(
                                            range_end,
                                            format!("the range {low:?}-{high:?} is backwards"),
                                        ));
                                    }
                                }
                                ranges.push((low, high));
                            }
                        }
                    }
                    if negated {
                        ranges = complement_char_ranges(&ranges);
                    }
                    let symbol = self.class_symbol(ranges, element_start..self.pos)?;
                    group.last = Some((group.sequence.len(), element_start));
                    group.sequence.push(symbol);
                }
                '.' => {
                    self.pos += 1;
                    let symbol = self.class_symbol(complement_char_ranges(&[]), element_start..self.pos)?;
                    group.last = Some((group.sequence.len(), element_start));
                    group.sequence.push(symbol);
                }
                '(' => return Ok(Some(element_start)),
                '<' | '!' if c == '<' || self.peek_at(1) == Some('<') => {
                    let end = self.text[self.pos..]
                        .find(['>', '\n'])
                        .map(|i| self.pos + i + 1)
                        .unwrap_or(self.text.len());
                    let token = self.text[self.pos..end].trim_end().to_string();
                    return Err(GrammarError::TokenTerminal {
                        rule: self.current_rule.clone(),
                        text: token,
                        at: self.location(element_start),
                    });
                }
                '*' | '+' | '?' | '{' => {
                    let Some((start, source_start)) = group.last else {
                        return Err(self.syntax(
                            element_start,
                            format!("`{c}` must follow something to repeat"),
                        ));
                    };
                    let (min, max) = self.parse_repetition()?;
                    let unit = group.sequence.split_off(start);
                    let repeated = self.repeat(unit, min, max, source_start..self.pos)?;
                    group.sequence.extend(repeated);
                }
                c if Self::is_name_char(c) => {
                    let Some(name) = self.parse_name() else { break };
                    let id = self.rule_id(name)?;
                    if self.first_reference[id.index()].is_none() {
                        self.first_reference[id.index()] =
                            Some((self.current_rule.clone(), element_start));
                    }
                    self.count_symbols(1)?;
                    group.last = Some((group.sequence.len(), element_start));
                    group.sequence.push(Symbol::Rule(id));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(None)
    }

    /// Parses the operator at the cursor: `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`.
    fn parse_repetition(&mut self) -> Result<(u64, Option<u64>), GrammarError> {
        let start = self.pos;
        let Some(operator) = self.peek() else {
            return Err(self.syntax(start, "expected a repetition"));
        };
        self.pos += 1;
        let bounds = match operator {
            '*' => (0, None),
            '+' => (1, None),
            '?' => (0, Some(1)),
            _ => {
                self.skip_space(true);
                let min = self.parse_int()?;
                self.skip_space(true);
                let max = match self.peek() {
                    Some(',') => {
                        self.pos += 1;
                        self.skip_space(true);
                        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            let max = self.parse_int()?;
                            self.skip_space(true);
                            Some(max)
                        } else {
                            None
                        }
                    }
                    _ => Some(min),
                };
                if self.peek() != Some('}') {
                    return Err(self.syntax(
                        self.pos,
                        format!(
                            "expected `}}` to close the repetition, found {}",
                            self.found()
                        ),
                    ));
                }
                self.pos += 1;
                if let Some(max) = max {
                    if max < min {
                        return Err(self.syntax(
                            start,
                            format!(
                                "the repetition {{{min},{max}}} has its maximum below its minimum"
                            ),
                        ));
                    }
                }
                (min, max)
            }
        };
        let largest = bounds.1.unwrap_or(bounds.0);
        if largest > self.limits.max_repetition as u64 {
            return Err(GrammarError::RepetitionTooLarge {
                rule: self.current_rule.clone(),
                bound: largest,
                max: self.limits.max_repetition,
                at: self.location(start),
            });
        }
        Ok(bounds)
    }

    fn parse_int(&mut self) -> Result<u64, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.syntax(start, format!("expected a number, found {}", self.found())));
        }
        // Anything too long to parse is certainly above the repetition limit.
        Ok(self.text[start..self.pos]
            .parse::<u64>()
            .unwrap_or(u64::MAX))
    }

    /// Lowers `unit{min,max}` (`max` None: unbounded).
    fn repeat(
        &mut self,
        unit: Vec<Symbol>,
        min: u64,
        max: Option<u64>,
        construct: std::ops::Range<usize>,
    ) -> Result<Vec<Symbol>, GrammarError> {
        if unit.is_empty() {
            return Ok(unit);
        }
        let item = if unit.len() == 1 {
            unit[0]
        } else {
            Symbol::Rule(self.generated_rule(vec![unit], construct.clone())?)
        };
        let optional = match max {
            None => 1,
            Some(max) => max - min,
        };
        self.count_symbols((min + 2 * optional) as usize)?;
        let mut out = vec![item; min as usize];
        match max {
            None => {
                let star = self.generated_rule(Vec::new(), construct)?;
                self.rules[star.index()].alternatives =
                    vec![vec![item, Symbol::Rule(star)], Vec::new()];
                self.stars.push((star, item));
                out.push(Symbol::Rule(star));
            }
            Some(_) if optional > 0 => {
                if self.rules.len() as u64 + optional > self.limits.max_rules as u64 {
                    return Err(GrammarError::TooLarge {
                        what: "the rule count (after expanding repetitions)",
                        actual: self.rules.len() + optional as usize,
                        limit: self.limits.max_rules,
                    });
                }
                let mut tail = self.generated_rule(vec![vec![item], Vec::new()], construct.clone())?;
                for _ in 1..optional {
                    tail = self.generated_rule(vec![vec![item, Symbol::Rule(tail)], Vec::new()], construct.clone())?;
                }
                out.push(Symbol::Rule(tail));
            }
            Some(_) => {}
        }
        Ok(out)
    }

    /// One symbol matching one character from `ranges`: a byte set when every character is a
    /// single byte, otherwise a rule over the UTF-8 sequences (shared by equal classes).
    fn class_symbol(&mut self, ranges: Vec<(char, char)>, construct: std::ops::Range<usize>) -> Result<Symbol, GrammarError> {
        if let Some(symbol) = self.classes.get(&ranges) {
            return Ok(*symbol);
        }
        let alternatives = char_ranges_to_alternatives(&ranges);
        let symbol = if alternatives.iter().all(|alt| alt.len() == 1) && !alternatives.is_empty() {
            let mut set = ByteSet::EMPTY;
            for alt in &alternatives {
                if let Some(Symbol::Bytes(bytes)) = alt.first() {
                    set = set.union(bytes);
                }
            }
            Symbol::Bytes(set)
        } else {
            self.count_symbols(alternatives.iter().map(|a| a.len() + 1).sum())?;
            let saved = std::mem::take(&mut self.generated);
            let id = self.generated_rule(alternatives, construct)?;
            self.rules[id.index()].name = format!("{}-class{}", self.current_rule, id.0);
            self.generated = saved;
            Symbol::Rule(id)
        };
        self.classes.insert(ranges, symbol);
        Ok(symbol)
    }

    /// One character of a literal or class, with escapes resolved to code points.
    fn parse_char(&mut self) -> Result<char, GrammarError> {
        let start = self.pos;
        let Some(c) = self.peek() else {
            return Err(self.syntax(start, "unexpected end of file"));
        };
        self.pos += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let Some(escape) = self.peek() else {
            return Err(self.syntax(start, "unexpected end of file after `\\`"));
        };
        self.pos += escape.len_utf8();
        let digits = match escape {
            'n' => return Ok('\n'),
            't' => return Ok('\t'),
            'r' => return Ok('\r'),
            '\\' | '"' | '[' | ']' | '-' | '^' => return Ok(escape),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            other => return Err(self.syntax(start, format!("unknown escape `\\{other}`"))),
        };
        let hex_start = self.pos;
        let hex: String = self.text[self.pos..].chars().take(digits).collect();
        if hex.len() != digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.syntax(
                start,
                format!("`\\{escape}` needs {digits} hexadecimal digits"),
            ));
        }
        self.pos = hex_start + digits;
        let value = u32::from_str_radix(&hex, 16).unwrap_or(u32::MAX);
        char::from_u32(value).ok_or_else(|| {
            self.syntax(
                start,
                format!("`\\{escape}{hex}` is not a Unicode scalar value"),
            )
        })
    }

    /// The grammar read, once every rule referred to is defined and `root` is, with each
    /// repetition of something that can match nothing made to repeat only what reads bytes.
    pub(super) fn finish(self) -> Result<ParsedGbnf, GrammarError> {
        for (index, defined) in self.defined_at.iter().enumerate() {
            let Some((rule, offset)) = &self.first_reference[index] else {
                continue;
            };
            if defined.is_none()
                && self.by_name.get(&self.rules[index].name) == Some(&RuleId(index as u32))
            {
                return Err(GrammarError::UndefinedRule {
                    rule: rule.clone(),
                    name: self.rules[index].name.clone(),
                    at: self.location(*offset),
                });
            }
        }
        let Some(&root) = self.by_name.get("root") else {
            return Err(GrammarError::MissingRoot);
        };
        if self.defined_at[root.index()].is_none() {
            return Err(GrammarError::MissingRoot);
        }
        let mut parsed = ParsedGbnf {
            grammar: Grammar {
                rules: self.rules,
                root,
                whitespace_budget: 0,
            },
            origins: self.origins,
        };
        repeat_only_what_reads(&mut parsed, &self.stars, self.symbol_count, self.limits)?;
        Ok(parsed)
    }
}

