//! JSON building blocks shared by every schema rule: whitespace-aware punctuation, any JSON
//! value, strings (any escape, or the canonical encoding used where a string must be compared
//! with known text), numbers, bounded lists, and literal values for `enum`/`const`.
//!
//! Key type: [`RuleSink`], a [`GrammarBuilder`] plus the lazily built shared rules, so a
//! schema with fifty string properties has one string rule, not fifty, and fifty strings of
//! `maxLength: 255` one chain of 255 rules.
//! Cost: each shared rule is built once per grammar; lists cost one rule per optional element.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::lexicon::strings::AllowedStrings;
use crate::ir::{
    char_ranges_to_alternatives, complement_char_ranges, literal_symbols, ByteSet, GrammarBuilder, RuleId, Symbol,
};

/// Structural whitespace allowed per document (the spec's budget).
pub const WHITESPACE_BUDGET: u32 = 64;

/// Digits of any-JSON numbers (`-json`, `json_object`, `{}` in a schema), bounded as llama.cpp's
/// JSON grammar bounds them, so a model cannot spend its whole budget on one number
/// (`100.0000000000000012000...`): at most 16 integer digits, 1 to 16 fraction digits, and an
/// exponent of 1 or 2 digits (a larger one overflows a double).
pub const ANY_NUMBER_INTEGER_DIGITS: u64 = 16;
pub const ANY_NUMBER_FRACTION_DIGITS: u64 = 16;
pub const ANY_NUMBER_EXPONENT_DIGITS: u64 = 2;

pub(crate) fn byte(b: u8) -> Symbol {
    Symbol::Bytes(ByteSet::single(b))
}

/// A grammar under construction plus the shared JSON rules built so far.
pub(crate) struct RuleSink {
    pub builder: GrammarBuilder,
    /// Any value, and the object alternative of it (JSON mode's top level).
    any_value: Option<(RuleId, RuleId)>,
    any_string: Option<RuleId>,
    string_char: Option<RuleId>,
    canonical_char: Option<RuleId>,
    canonical_tail: Option<RuleId>,
    escaped_or_wide_tail: Option<RuleId>,
    bounded_strings: HashMap<(u64, Option<u64>), RuleId>,
    escape_sets: HashMap<Vec<u8>, RuleId>,
    any_number: Option<RuleId>,
    any_integer: Option<RuleId>,
    literal_cache: HashMap<String, RuleId>,
    /// With an allow lexicon: the strings free string values are lowered to.
    pub allowed: Option<AllowedStrings>,
}

impl RuleSink {
    pub fn new() -> Self {
        RuleSink {
            builder: GrammarBuilder::new(),
            any_value: None,
            any_string: None,
            string_char: None,
            canonical_char: None,
            canonical_tail: None,
            escaped_or_wide_tail: None,
            bounded_strings: HashMap::new(),
            escape_sets: HashMap::new(),
            any_number: None,
            any_integer: None,
            literal_cache: HashMap::new(),
            allowed: None,
        }
    }

    pub fn add(&mut self, name: impl Into<String>, alternatives: Vec<Vec<Symbol>>) -> RuleId {
        self.builder.add(name, alternatives)
    }

    pub fn rule_count(&self) -> usize {
        self.builder.rule_count()
    }

    /// Any RFC 8259 value.
    pub fn any_value(&mut self) -> RuleId {
        self.any_value_rules().0
    }

    /// Any JSON object (whose members hold any value).
    pub fn any_object(&mut self) -> RuleId {
        self.any_value_rules().1
    }

    /// The any-value rule and its object alternative, built once.
    fn any_value_rules(&mut self) -> (RuleId, RuleId) {
        if let Some(rules) = self.any_value {
            return rules;
        }
        let value = self.builder.declare("json-value");
        let object = self.builder.declare("json-object");
        self.any_value = Some((value, object));
        let string = self.any_string();
        let value_string = self.free_string();
        let number = self.any_number();
        let pair = self.add(
            "json-member",
            vec![vec![
                Symbol::Rule(string),
                Symbol::Whitespace,
                byte(b':'),
                Symbol::Whitespace,
                Symbol::Rule(value),
            ]],
        );
        // The empty forms are separate alternatives so that two whitespace spots never touch
        // (`{ }` would otherwise split its spaces between them in many ways).
        let members = self.bounded_list("json-members", vec![Symbol::Rule(pair)], 1, None);
        self.builder.define(
            object,
            vec![
                vec![byte(b'{'), Symbol::Whitespace, byte(b'}')],
                vec![byte(b'{'), Symbol::Whitespace, Symbol::Rule(members), Symbol::Whitespace, byte(b'}')],
            ],
        );
        let elements = self.bounded_list("json-elements", vec![Symbol::Rule(value)], 1, None);
        let array = self.add(
            "json-array",
            vec![
                vec![byte(b'['), Symbol::Whitespace, byte(b']')],
                vec![byte(b'['), Symbol::Whitespace, Symbol::Rule(elements), Symbol::Whitespace, byte(b']')],
            ],
        );
        self.builder.define(
            value,
            vec![
                vec![Symbol::Rule(object)],
                vec![Symbol::Rule(array)],
                vec![Symbol::Rule(value_string)],
                vec![Symbol::Rule(number)],
                literal_symbols(b"true"),
                literal_symbols(b"false"),
                literal_symbols(b"null"),
            ],
        );
        (value, object)
    }

    /// One character of a JSON string as written: any unescaped character, or any escape.
    /// `\u` escapes never produce a lone surrogate, so every accepted string decodes.
    pub fn string_char(&mut self) -> RuleId {
        if let Some(id) = self.string_char {
            return id;
        }
        let hex = hex_set();
        let not_d = ByteSet::range(b'0', b'9')
            .union(&ByteSet::range(b'a', b'c'))
            .union(&ByteSet::range(b'A', b'C'))
            .union(&ByteSet::range(b'e', b'f'))
            .union(&ByteSet::range(b'E', b'F'));
        let d = ByteSet::single(b'd').union(&ByteSet::single(b'D'));
        let high = ByteSet::range(b'8', b'9').union(&ByteSet::range(b'a', b'b')).union(&ByteSet::range(b'A', b'B'));
        let low = ByteSet::range(b'c', b'f').union(&ByteSet::range(b'C', b'F'));
        let h = Symbol::Bytes(hex);
        let mut alternatives = char_ranges_to_alternatives(&[('\u{20}', '\u{21}'), ('\u{23}', '\u{5B}'), ('\u{5D}', char::MAX)]);
        let mut short = ByteSet::EMPTY;
        for b in b"\"\\/bfnrt" {
            short.insert(*b);
        }
        // The escapes share their backslash (and `\u` its `u`): one parse stack, not four,
        // waits for an escape after every character of a string.
        let unicode = self.add(
            "json-unicode-escape",
            vec![
                vec![Symbol::Bytes(not_d), h, h, h],
                vec![Symbol::Bytes(d), Symbol::Bytes(ByteSet::range(b'0', b'7')), h, h],
                vec![
                    Symbol::Bytes(d), Symbol::Bytes(high), h, h,
                    byte(b'\\'), byte(b'u'), Symbol::Bytes(d), Symbol::Bytes(low), h, h,
                ],
            ],
        );
        let escape = self.add(
            "json-escape",
            vec![vec![Symbol::Bytes(short)], vec![byte(b'u'), Symbol::Rule(unicode)]],
        );
        alternatives.push(vec![byte(b'\\'), Symbol::Rule(escape)]);
        let id = self.add("json-char", alternatives);
        self.string_char = Some(id);
        id
    }

    /// Any JSON string, quotes included.
    pub fn any_string(&mut self) -> RuleId {
        if let Some(id) = self.any_string {
            return id;
        }
        let ch = self.string_char();
        let body = self.bounded_list_sep("json-chars", vec![Symbol::Rule(ch)], vec![], 0, None);
        let id = self.add("json-string", vec![vec![byte(b'"'), Symbol::Rule(body), byte(b'"')]]);
        self.any_string = Some(id);
        id
    }

    /// A string value with nothing but its type to constrain it: any string, or with an allow
    /// lexicon one of its words only (property names stay any string).
    pub fn free_string(&mut self) -> RuleId {
        match self.allowed.as_mut() {
            Some(allowed) => allowed.any_length(&mut self.builder),
            None => self.any_string(),
        }
    }

    /// One character in its canonical encoding (see [`canonical_char_alternatives`]).
    pub fn canonical_char(&mut self) -> RuleId {
        if let Some(id) = self.canonical_char {
            return id;
        }
        let alternatives = canonical_char_alternatives(&[('\0', char::MAX)]);
        let id = self.add("json-canonical-char", alternatives);
        self.canonical_char = Some(id);
        id
    }

    /// Canonical characters up to and including the closing quote.
    pub fn canonical_tail(&mut self) -> RuleId {
        if let Some(id) = self.canonical_tail {
            return id;
        }
        let ch = self.canonical_char();
        let tail = self.builder.declare("json-canonical-tail");
        self.builder.define(tail, vec![vec![byte(b'"')], vec![Symbol::Rule(ch), Symbol::Rule(tail)]]);
        self.canonical_tail = Some(tail);
        tail
    }

    /// One character that is not printable ASCII (an escaped one or one of two or more UTF-8
    /// bytes), in canonical encoding, then [`RuleSink::canonical_tail`]: how a key leaves a
    /// trie of names at any node whose children are all printable ASCII, shared by all of them
    /// so that each node adds one byte set, not the ~300 symbols of every other character.
    pub fn escaped_or_wide_tail(&mut self) -> RuleId {
        if let Some(id) = self.escaped_or_wide_tail {
            return id;
        }
        let tail = self.canonical_tail();
        let ranges = [('\0', '\u{1F}'), ('"', '"'), ('\\', '\\'), ('\u{80}', char::MAX)];
        let alternatives = canonical_char_alternatives(&ranges)
            .into_iter()
            .map(|mut sequence| {
                sequence.push(Symbol::Rule(tail));
                sequence
            })
            .collect();
        let id = self.add("key-escaped-or-wide-tail", alternatives);
        self.escaped_or_wide_tail = Some(id);
        id
    }

    /// A quoted key (canonical encoding) equal to none of `names`: a trie of the names whose
    /// every node may leave the trie by a character none of its children starts with.
    pub fn key_other_than(&mut self, names: &[&str]) -> RuleId {
        if names.is_empty() {
            return self.any_string();
        }
        #[derive(Default)]
        struct Node {
            children: BTreeMap<char, usize>,
            terminal: bool,
        }
        let mut nodes = vec![Node::default()];
        for name in names {
            let mut at = 0;
            for c in name.chars() {
                at = match nodes[at].children.get(&c) {
                    Some(next) => *next,
                    None => {
                        nodes.push(Node::default());
                        let next = nodes.len() - 1;
                        nodes[at].children.insert(c, next);
                        next
                    }
                };
            }
            nodes[at].terminal = true;
        }
        let tail = self.canonical_tail();
        let ids: Vec<RuleId> = (0..nodes.len()).map(|_| self.builder.declare("other-key")).collect();
        // Printable ASCII other than `"` and `\`: the characters written as one plain byte.
        let mut plain_ascii = ByteSet::range(0x20, 0x7F);
        plain_ascii.remove(b'"');
        plain_ascii.remove(b'\\');
        for (index, node) in nodes.iter().enumerate() {
            let mut alternatives = Vec::new();
            if !node.terminal {
                alternatives.push(vec![byte(b'"')]);
            }
            for (c, child) in &node.children {
                let mut sequence = canonical_char_alternatives(&[(*c, *c)]).into_iter().next().unwrap_or_default();
                sequence.push(Symbol::Rule(ids[*child]));
                alternatives.push(sequence);
            }
            let all_plain_ascii = node.children.keys().all(|c| c.is_ascii() && plain_ascii.contains(*c as u8));
            if all_plain_ascii {
                // Leaving the names: a plain ASCII byte no child starts with, or any other
                // character (shared by every such node).
                let mut leave = plain_ascii;
                for c in node.children.keys() {
                    leave.remove(*c as u8);
                }
                if !leave.is_empty() {
                    alternatives.push(vec![Symbol::Bytes(leave), Symbol::Rule(tail)]);
                }
                alternatives.push(vec![Symbol::Rule(self.escaped_or_wide_tail())]);
            } else {
                let taken: Vec<(char, char)> = node.children.keys().map(|c| (*c, *c)).collect();
                for mut sequence in canonical_char_alternatives(&complement_char_ranges(&taken)) {
                    sequence.push(Symbol::Rule(tail));
                    alternatives.push(sequence);
                }
            }
            self.builder.define(ids[index], alternatives);
        }
        self.add("other-key-quoted", vec![vec![byte(b'"'), Symbol::Rule(ids[0])]])
    }

    /// One of the ASCII characters `bytes` in its canonical escape (see [`canonical_escape`];
    /// characters written plainly are skipped), one rule per distinct set.
    pub fn canonical_escapes_of(&mut self, bytes: &[u8]) -> RuleId {
        if let Some(id) = self.escape_sets.get(bytes) {
            return *id;
        }
        let alternatives = grouped_escapes(bytes.iter().filter(|b| b.is_ascii()).map(|&b| char::from(b)));
        let id = self.add("escaped-char", alternatives);
        self.escape_sets.insert(bytes.to_vec(), id);
        id
    }

    /// A quoted string of `min..=max` characters (any escapes), one rule per distinct bounds:
    /// schemas repeat `maxLength: 255` on many properties, and each copy would otherwise
    /// cost a chain of `max` rules.
    pub fn bounded_string(&mut self, min: u64, max: Option<u64>) -> RuleId {
        if let Some(id) = self.bounded_strings.get(&(min, max)) {
            return *id;
        }
        let ch = self.string_char();
        let body = self.bounded_list_sep("string-chars", vec![Symbol::Rule(ch)], vec![], min, max);
        let id = self.add("bounded-string", vec![vec![byte(b'"'), Symbol::Rule(body), byte(b'"')]]);
        self.bounded_strings.insert((min, max), id);
        id
    }

    /// Any JSON number whose parts fit the `ANY_NUMBER_*` digit bounds.
    pub fn any_number(&mut self) -> RuleId {
        if let Some(id) = self.any_number {
            return id;
        }
        let digit = || vec![Symbol::Bytes(ByteSet::range(b'0', b'9'))];
        let more_digits =
            self.bounded_list_sep("json-number-digits", digit(), vec![], 0, Some(ANY_NUMBER_INTEGER_DIGITS - 1));
        let magnitude = self.add(
            "json-number-magnitude",
            vec![vec![byte(b'0')], vec![Symbol::Bytes(ByteSet::range(b'1', b'9')), Symbol::Rule(more_digits)]],
        );
        let integer = self.add(
            "json-number-integer",
            vec![vec![Symbol::Rule(magnitude)], vec![byte(b'-'), Symbol::Rule(magnitude)]],
        );
        let fraction_digits =
            self.bounded_list_sep("json-fraction-digits", digit(), vec![], 1, Some(ANY_NUMBER_FRACTION_DIGITS));
        let fraction = self.add("json-fraction", vec![vec![], vec![byte(b'.'), Symbol::Rule(fraction_digits)]]);
        let exponent_digits =
            self.bounded_list_sep("json-exponent-digits", digit(), vec![], 1, Some(ANY_NUMBER_EXPONENT_DIGITS));
        let mut sign = ByteSet::single(b'+');
        sign.insert(b'-');
        let e = ByteSet::single(b'e').union(&ByteSet::single(b'E'));
        let exponent = self.add(
            "json-exponent",
            vec![
                vec![],
                vec![Symbol::Bytes(e), Symbol::Rule(exponent_digits)],
                vec![Symbol::Bytes(e), Symbol::Bytes(sign), Symbol::Rule(exponent_digits)],
            ],
        );
        let id = self.add(
            "json-number",
            vec![vec![Symbol::Rule(integer), Symbol::Rule(fraction), Symbol::Rule(exponent)]],
        );
        self.any_number = Some(id);
        id
    }

    /// Any integer written without fraction or exponent: `-?(0|[1-9][0-9]*)`.
    pub fn any_integer(&mut self) -> RuleId {
        if let Some(id) = self.any_integer {
            return id;
        }
        let magnitude = self.unsigned_integer_rule();
        let id = self.add(
            "json-integer",
            vec![vec![Symbol::Rule(magnitude)], vec![byte(b'-'), Symbol::Rule(magnitude)]],
        );
        self.any_integer = Some(id);
        id
    }

    pub fn unsigned_integer_rule(&mut self) -> RuleId {
        let digits = self.digits_rule_optional();
        self.add(
            "json-uint",
            vec![vec![byte(b'0')], vec![Symbol::Bytes(ByteSet::range(b'1', b'9')), Symbol::Rule(digits)]],
        )
    }

    /// `[0-9]*`
    pub fn digits_rule_optional(&mut self) -> RuleId {
        let id = self.builder.declare("json-digits-opt");
        self.builder.define(id, vec![vec![], vec![Symbol::Bytes(ByteSet::range(b'0', b'9')), Symbol::Rule(id)]]);
        id
    }

    /// `item (WS "," WS item)*` with `min..=max` items (an empty list allowed when `min` is 0).
    pub fn bounded_list(&mut self, name: &str, item: Vec<Symbol>, min: u64, max: Option<u64>) -> RuleId {
        let separator = vec![Symbol::Whitespace, byte(b','), Symbol::Whitespace];
        self.bounded_list_sep(name, item, separator, min, max)
    }

    /// A list of `min..=max` copies of `item` separated by `separator`.
    pub fn bounded_list_sep(
        &mut self,
        name: &str,
        item: Vec<Symbol>,
        separator: Vec<Symbol>,
        min: u64,
        max: Option<u64>,
    ) -> RuleId {
        let mut with_separator = separator.clone();
        with_separator.extend(item.iter().copied());
        if max == Some(0) {
            return self.add(name, vec![vec![]]);
        }
        let first_required = min.max(1);
        let tail = match max {
            None => {
                let tail = self.builder.declare(format!("{name}-more"));
                let mut more = with_separator.clone();
                more.push(Symbol::Rule(tail));
                self.builder.define(tail, vec![vec![], more]);
                if min == 0 && separator.is_empty() {
                    // The loop itself: before the first item the automaton is then in the
                    // same state as between items (the body of a string reads its first
                    // character from the state it reads every other one from).
                    return tail;
                }
                tail
            }
            Some(max) => {
                let mut tail = self.add(format!("{name}-end"), vec![vec![]]);
                for _ in first_required..max {
                    let mut more = with_separator.clone();
                    more.push(Symbol::Rule(tail));
                    tail = self.add(format!("{name}-opt"), vec![vec![], more]);
                }
                tail
            }
        };
        let mut sequence = item.clone();
        for _ in 1..first_required {
            sequence.extend(with_separator.iter().copied());
        }
        sequence.push(Symbol::Rule(tail));
        let mut alternatives = vec![sequence];
        if min == 0 {
            alternatives.push(vec![]);
        }
        self.add(name, alternatives)
    }

    /// A rule matching `value` as JSON, with structural whitespace allowed inside containers.
    /// Integral numbers also match written with a `.0` fraction; objects of up to four members
    /// match in any key order, larger ones in their given order.
    pub fn literal_value(&mut self, value: &Value) -> RuleId {
        let key = value.to_string();
        if let Some(id) = self.literal_cache.get(&key) {
            return *id;
        }
        self.new_literal(value, key)
    }

    /// [`RuleSink::literal_value`] when that is built already or its JSON text (about the
    /// symbols it becomes) is at most `room` bytes; otherwise that length, nothing built.
    pub fn literal_value_within(&mut self, value: &Value, room: usize) -> Result<RuleId, usize> {
        let key = value.to_string();
        if let Some(id) = self.literal_cache.get(&key) {
            return Ok(*id);
        }
        if key.len() > room {
            return Err(key.len());
        }
        Ok(self.new_literal(value, key))
    }

    fn new_literal(&mut self, value: &Value, key: String) -> RuleId {
        let alternatives = self.literal_alternatives(value);
        let id = self.add(format!("literal {}", truncate(&key, 40)), alternatives);
        self.literal_cache.insert(key, id);
        id
    }

    fn literal_alternatives(&mut self, value: &Value) -> Vec<Vec<Symbol>> {
        match value {
            Value::Array(elements) if elements.is_empty() => {
                vec![vec![byte(b'['), Symbol::Whitespace, byte(b']')]]
            }
            Value::Object(members) if members.is_empty() => {
                vec![vec![byte(b'{'), Symbol::Whitespace, byte(b'}')]]
            }
            Value::Array(elements) => {
                let mut sequence = vec![byte(b'['), Symbol::Whitespace];
                for (index, element) in elements.iter().enumerate() {
                    if index > 0 {
                        sequence.extend([Symbol::Whitespace, byte(b','), Symbol::Whitespace]);
                    }
                    sequence.push(Symbol::Rule(self.literal_value(element)));
                }
                sequence.extend([Symbol::Whitespace, byte(b']')]);
                vec![sequence]
            }
            Value::Object(members) => {
                let pairs: Vec<RuleId> = members
                    .iter()
                    .map(|(name, element)| {
                        let mut pair = literal_symbols(canonical_json_string(name).as_bytes());
                        pair.extend([Symbol::Whitespace, byte(b':'), Symbol::Whitespace]);
                        pair.push(Symbol::Rule(self.literal_value(element)));
                        self.add("literal member", vec![pair])
                    })
                    .collect();
                // Key order does not change a JSON object: small ones match in any order.
                let orders = if pairs.len() <= LITERAL_ANY_ORDER_MAX { permutations(pairs.len()) } else { vec![(0..pairs.len()).collect()] };
                orders
                    .into_iter()
                    .map(|order| {
                        let mut sequence = vec![byte(b'{'), Symbol::Whitespace];
                        for (position, index) in order.into_iter().enumerate() {
                            if position > 0 {
                                sequence.extend([Symbol::Whitespace, byte(b','), Symbol::Whitespace]);
                            }
                            sequence.push(Symbol::Rule(pairs[index]));
                        }
                        sequence.extend([Symbol::Whitespace, byte(b'}')]);
                        sequence
                    })
                    .collect()
            }
            Value::String(text) => vec![literal_symbols(canonical_json_string(text).as_bytes())],
            Value::Number(number) => {
                let written = number.to_string();
                let mut alternatives = vec![literal_symbols(written.as_bytes())];
                if let Some(whole) = written.strip_suffix(".0") {
                    alternatives.push(literal_symbols(whole.as_bytes()));
                } else if number.is_i64() || number.is_u64() {
                    alternatives.push(literal_symbols(format!("{written}.0").as_bytes()));
                }
                alternatives
            }
            other => vec![literal_symbols(other.to_string().as_bytes())],
        }
    }
}

/// `enum`/`const` objects with at most this many members match in any key order (n! orders).
const LITERAL_ANY_ORDER_MAX: usize = 4;

/// Every ordering of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for shorter in permutations(n - 1) {
        for slot in 0..=shorter.len() {
            let mut order = shorter.clone();
            order.insert(slot, n - 1);
            out.push(order);
        }
    }
    out
}

fn truncate(text: &str, limit: usize) -> String {
    text.chars().take(limit).collect()
}

fn hex_set() -> ByteSet {
    ByteSet::range(b'0', b'9').union(&ByteSet::range(b'a', b'f')).union(&ByteSet::range(b'A', b'F'))
}

/// A character's canonical JSON escape: at most six bytes (`\u001f`), kept inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Escape {
    bytes: [u8; 6],
    len: u8,
}

impl Escape {
    fn short(second: u8) -> Self {
        Escape { bytes: [b'\\', second, 0, 0, 0, 0], len: 2 }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// How a character is written when it must be compared with known text (property names,
/// patterns): literally, unless JSON requires an escape, then the escape serde_json writes.
pub(crate) fn canonical_escape(c: char) -> Option<Escape> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match c {
        '"' => Some(Escape::short(b'"')),
        '\\' => Some(Escape::short(b'\\')),
        '\u{08}' => Some(Escape::short(b'b')),
        '\u{0C}' => Some(Escape::short(b'f')),
        '\n' => Some(Escape::short(b'n')),
        '\r' => Some(Escape::short(b'r')),
        '\t' => Some(Escape::short(b't')),
        c if (c as u32) < 0x20 => {
            let code = c as usize;
            Some(Escape { bytes: [b'\\', b'u', b'0', b'0', HEX[code >> 4], HEX[code & 15]], len: 6 })
        }
        _ => None,
    }
}

/// The canonical escapes of `chars` (those written plainly are skipped) as alternatives,
/// grouped by all but their last byte: the 34 escapes of every character are 3 alternatives
/// (`\` then one of `"\bfnrt`, `\u000` then a hex digit, `\u001` then one), so a position
/// where any of them may come holds 3 parse stacks for them, not 34.
pub(crate) fn grouped_escapes(chars: impl IntoIterator<Item = char>) -> Vec<Vec<Symbol>> {
    let mut groups: Vec<(Escape, ByteSet)> = Vec::new();
    for escape in chars.into_iter().filter_map(canonical_escape) {
        let Some((&last, prefix)) = escape.as_bytes().split_last() else { continue };
        match groups.iter_mut().find(|(known, _)| known.as_bytes().split_last().map(|(_, p)| p) == Some(prefix)) {
            Some((_, lasts)) => lasts.insert(last),
            None => groups.push((escape, ByteSet::single(last))),
        }
    }
    groups.sort_unstable_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
    groups
        .into_iter()
        .map(|(escape, lasts)| {
            let prefix = escape.as_bytes().split_last().map_or(&[][..], |(_, prefix)| prefix);
            let mut sequence = literal_symbols(prefix);
            sequence.push(Symbol::Bytes(lasts));
            sequence
        })
        .collect()
}

/// `text` as a quoted JSON string in canonical encoding.
pub(crate) fn canonical_json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match canonical_escape(c) {
            Some(escape) => out.extend(escape.as_bytes().iter().map(|&b| char::from(b))),
            None => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Alternatives writing exactly one character of `ranges` in canonical encoding.
pub(crate) fn canonical_char_alternatives(ranges: &[(char, char)]) -> Vec<Vec<Symbol>> {
    let mut plain = Vec::new();
    let mut escaped = Vec::new();
    for &(lo, hi) in ranges {
        let mut start = lo as u32;
        let end = hi as u32;
        // Characters needing an escape are all below 0x5D; walk them one by one.
        while start <= end && start <= 0x5C {
            if let Some(c) = char::from_u32(start) {
                match canonical_escape(c) {
                    Some(_) => escaped.push(c),
                    None => plain.push((c, c)),
                }
            }
            start += 1;
        }
        if start <= end {
            if let (Some(a), Some(b)) = (char::from_u32(start), char::from_u32(end)) {
                plain.push((a, b));
            }
        }
    }
    let mut alternatives = char_ranges_to_alternatives(&merge_ranges(plain));
    alternatives.extend(grouped_escapes(escaped));
    alternatives
}

fn merge_ranges(mut ranges: Vec<(char, char)>) -> Vec<(char, char)> {
    ranges.sort_unstable();
    let mut merged: Vec<(char, char)> = Vec::new();
    for (lo, hi) in ranges {
        if let Some(last) = merged.last_mut() {
            if (lo as u32) <= (last.1 as u32).saturating_add(1) {
                if hi > last.1 {
                    last.1 = hi;
                }
                continue;
            }
        }
        merged.push((lo, hi));
    }
    merged
}
