//! The intermediate form every constraint compiles to: a byte-level context-free grammar.
//!
//! GBNF grammars (`gbnf.rs`) and JSON Schemas (`schema.rs`) both lower to a [`Grammar`]; the
//! automaton (`automaton.rs`) is built from it and knows nothing of where it came from.
//! Terminals are sets of bytes, never characters: a character class is lowered to the UTF-8
//! byte sequences of its ranges, so the automaton tracks partial characters across token
//! boundaries for free. Repetition bounds are expanded into rules by the front ends.
//!
//! Key types: [`Grammar`], [`Rule`], [`Symbol`], [`ByteSet`], [`RuleId`].
//! Cost: plain data; building one is linear in the size of the source.

use std::fmt;

/// Index of a rule inside its [`Grammar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

impl RuleId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A set of bytes as a 256-bit bitmap.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ByteSet(pub [u64; 4]);

impl ByteSet {
    pub const EMPTY: ByteSet = ByteSet([0; 4]);
    pub const ALL: ByteSet = ByteSet([u64::MAX; 4]);

    pub fn single(byte: u8) -> ByteSet {
        let mut set = ByteSet::EMPTY;
        set.insert(byte);
        set
    }

    /// All bytes in `lo..=hi`.
    pub fn range(lo: u8, hi: u8) -> ByteSet {
        let mut set = ByteSet::EMPTY;
        set.insert_range(lo, hi);
        set
    }

    pub fn insert(&mut self, byte: u8) {
        self.0[(byte >> 6) as usize] |= 1u64 << (byte & 63);
    }

    pub fn remove(&mut self, byte: u8) {
        self.0[(byte >> 6) as usize] &= !(1u64 << (byte & 63));
    }

    pub fn insert_range(&mut self, lo: u8, hi: u8) {
        for byte in lo..=hi {
            self.insert(byte);
        }
    }

    #[inline]
    pub fn contains(&self, byte: u8) -> bool {
        self.0[(byte >> 6) as usize] & (1u64 << (byte & 63)) != 0
    }

    pub fn union(&self, other: &ByteSet) -> ByteSet {
        ByteSet(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    pub fn intersect(&self, other: &ByteSet) -> ByteSet {
        ByteSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// The bytes of `self` not in `other`.
    pub fn minus(&self, other: &ByteSet) -> ByteSet {
        ByteSet(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// Whether every byte of `self` is in `other`.
    #[inline]
    pub fn is_subset_of(&self, other: &ByteSet) -> bool {
        (self.0[0] & !other.0[0]) | (self.0[1] & !other.0[1]) | (self.0[2] & !other.0[2]) | (self.0[3] & !other.0[3])
            == 0
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0u16..256).map(|b| b as u8).filter(move |b| self.contains(*b))
    }
}

impl fmt::Debug for ByteSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        let bytes: Vec<u8> = self.iter().collect();
        let mut i = 0;
        while i < bytes.len() {
            let start = bytes[i];
            let mut end = start;
            while i + 1 < bytes.len() && bytes[i + 1] == end.wrapping_add(1) && end != 255 {
                i += 1;
                end = bytes[i];
            }
            if start == end {
                write!(f, "{}", start.escape_ascii())?;
            } else {
                write!(f, "{}-{}", start.escape_ascii(), end.escape_ascii())?;
            }
            i += 1;
        }
        write!(f, "]")
    }
}

/// The bytes [`Symbol::Whitespace`] consumes.
pub(crate) const WHITESPACE_BYTES: [u8; 4] = [b' ', b'\t', b'\n', b'\r'];

/// Where `byte` is in [`WHITESPACE_BYTES`], if it is whitespace.
#[inline]
pub(crate) fn whitespace_slot(byte: u8) -> Option<usize> {
    WHITESPACE_BYTES.iter().position(|&w| w == byte)
}

/// Whether `byte` is not one of [`WHITESPACE_BYTES`]: one compare for all but control bytes.
#[inline]
pub(crate) fn is_not_whitespace(byte: u8) -> bool {
    byte > b' ' || whitespace_slot(byte).is_none()
}

/// Which of [`WHITESPACE_BYTES`] `bytes` holds, bit `i` for `WHITESPACE_BYTES[i]`, when it is
/// made only of them; 0 otherwise (and for no bytes).
pub(crate) fn whitespace_slots(bytes: &[u8]) -> u8 {
    let mut slots = 0u8;
    for &byte in bytes {
        match whitespace_slot(byte) {
            Some(slot) => slots |= 1 << slot,
            None => return 0,
        }
    }
    slots
}

/// [`whitespace_slots`] of a set of bytes: 0 when it holds a byte other than whitespace.
pub(crate) fn whitespace_slots_of_set(bytes: &ByteSet) -> u8 {
    let mut slots = 0u8;
    for (slot, &byte) in WHITESPACE_BYTES.iter().enumerate() {
        if bytes.contains(byte) {
            slots |= 1 << slot;
        }
    }
    if bytes.len() == slots.count_ones() {
        slots
    } else {
        0
    }
}

/// One element of an alternative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symbol {
    /// Exactly one byte from the set.
    Bytes(ByteSet),
    /// A non-terminal.
    Rule(RuleId),
    /// Structural whitespace: zero or more of space, tab, newline, carriage return, drawn from
    /// one budget shared by the whole document (see `Grammar::whitespace_budget`). Once the
    /// budget is spent this matches only the empty string, so output continues compact.
    Whitespace,
}

/// A named rule: a choice between sequences. An empty sequence matches the empty string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// For messages: the GBNF rule name, or a JSON pointer-ish label for schema rules.
    pub name: String,
    pub alternatives: Vec<Vec<Symbol>>,
}

/// A whole grammar; `root` is where matching starts and what must be complete to accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grammar {
    pub rules: Vec<Rule>,
    pub root: RuleId,
    /// How many bytes all [`Symbol::Whitespace`] occurrences may consume together.
    pub whitespace_budget: u32,
}

impl Grammar {
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.index()]
    }
}

/// Builds a grammar rule by rule; rules can be declared before they are defined so that
/// recursive structures can refer to themselves. Counts the symbols defined as it goes, so a
/// front end can hold what it builds to a budget while building it.
#[derive(Debug, Default)]
pub struct GrammarBuilder {
    rules: Vec<Rule>,
    symbols: usize,
}

impl GrammarBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reserves a rule with no alternatives yet; fill it with [`GrammarBuilder::define`].
    pub fn declare(&mut self, name: impl Into<String>) -> RuleId {
        let id = RuleId(self.rules.len() as u32);
        self.rules.push(Rule { name: name.into(), alternatives: Vec::new() });
        id
    }

    pub fn define(&mut self, id: RuleId, alternatives: Vec<Vec<Symbol>>) {
        let rule = &mut self.rules[id.index()];
        self.symbols -= rule.alternatives.iter().map(Vec::len).sum::<usize>();
        self.symbols += alternatives.iter().map(Vec::len).sum::<usize>();
        rule.alternatives = alternatives;
    }

    /// Declares and defines in one step.
    pub fn add(&mut self, name: impl Into<String>, alternatives: Vec<Vec<Symbol>>) -> RuleId {
        let id = self.declare(name);
        self.define(id, alternatives);
        id
    }

    /// A rule matching exactly the bytes of `literal`.
    pub fn literal(&mut self, name: impl Into<String>, literal: &[u8]) -> RuleId {
        let seq = literal.iter().map(|b| Symbol::Bytes(ByteSet::single(*b))).collect();
        self.add(name, vec![seq])
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Symbols in all alternatives defined so far.
    pub fn symbol_count(&self) -> usize {
        self.symbols
    }

    /// The alternatives of `id` as defined so far (none while only declared).
    pub fn alternatives(&self, id: RuleId) -> &[Vec<Symbol>] {
        self.rules.get(id.index()).map_or(&[], |rule| rule.alternatives.as_slice())
    }

    pub fn finish(self, root: RuleId, whitespace_budget: u32) -> Grammar {
        Grammar { rules: self.rules, root, whitespace_budget }
    }
}

/// Symbols matching exactly `literal`.
pub fn literal_symbols(literal: &[u8]) -> Vec<Symbol> {
    literal.iter().map(|b| Symbol::Bytes(ByteSet::single(*b))).collect()
}

/// The UTF-8 byte sequences matching exactly one character from `ranges`, as alternatives.
/// A negated class is passed as its complement. Surrogates are never matched.
///
/// Sequences that differ only in their first byte range are one alternative (the ASCII
/// ranges of `[^"\\]`, the lead bytes `E1-EC` and `EE-EF` of three-byte characters): each
/// alternative is a parse stack of its own wherever the class may come next, and every byte
/// step works through every stack.
pub fn char_ranges_to_alternatives(ranges: &[(char, char)]) -> Vec<Vec<Symbol>> {
    let mut alternatives: Vec<Vec<Symbol>> = Vec::new();
    for &(lo, hi) in ranges {
        if lo > hi {
            continue;
        }
        for sequence in regex_syntax::utf8::Utf8Sequences::new(lo, hi) {
            let mut symbols = sequence.as_slice().iter().map(|r| ByteSet::range(r.start, r.end));
            let Some(lead) = symbols.next() else {
                continue;
            };
            let tail: Vec<Symbol> = symbols.map(Symbol::Bytes).collect();
            let same_tail = alternatives.iter_mut().find(|alternative| alternative.get(1..) == Some(&tail[..]));
            match same_tail.and_then(|alternative| alternative.first_mut()) {
                Some(Symbol::Bytes(leads)) => *leads = leads.union(&lead),
                _ => alternatives.push(std::iter::once(Symbol::Bytes(lead)).chain(tail).collect()),
            }
        }
    }
    alternatives
}

/// The complement of `ranges` within all Unicode scalar values, sorted and merged.
pub fn complement_char_ranges(ranges: &[(char, char)]) -> Vec<(char, char)> {
    let mut sorted: Vec<(u32, u32)> = ranges.iter().map(|(a, b)| (*a as u32, *b as u32)).collect();
    sorted.sort_unstable();
    let mut result = Vec::new();
    let mut next = 0u32;
    for (lo, hi) in sorted {
        if lo > next {
            push_scalar_range(&mut result, next, lo - 1);
        }
        next = next.max(hi.saturating_add(1));
    }
    if next <= 0x10FFFF {
        push_scalar_range(&mut result, next, 0x10FFFF);
    }
    result
}

/// Pushes `lo..=hi` minus the surrogate block as `char` ranges.
fn push_scalar_range(out: &mut Vec<(char, char)>, lo: u32, hi: u32) {
    let pieces = [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)];
    for (a, b) in pieces {
        if a <= b {
            if let (Some(a), Some(b)) = (char::from_u32(a), char::from_u32(b)) {
                out.push((a, b));
            }
        }
    }
}

/// The rules with an alternative whose every symbol is a rule so marked or a terminal
/// `terminal_holds` accepts, as a least fixpoint: with `Whitespace` holding and `Bytes` not,
/// the rules that match the empty string; with non-empty `Bytes` holding too, the rules that
/// match something. A worklist over rule uses, so linear in the grammar's size (a pass per
/// level of nesting would be quadratic on long chains of rules).
pub fn rules_satisfying(grammar: &Grammar, terminal_holds: impl Fn(&Symbol) -> bool) -> Vec<bool> {
    let rule_count = grammar.rules.len();
    let mut marked = vec![false; rule_count];
    // Per alternative: (its rule, rule symbols not yet marked); alternatives with a failing
    // terminal never count down.
    let mut waiting: Vec<(usize, usize)> = Vec::new();
    let mut uses: Vec<Vec<usize>> = vec![Vec::new(); rule_count];
    let mut queue: Vec<usize> = Vec::new();
    for (index, rule) in grammar.rules.iter().enumerate() {
        for alternative in &rule.alternatives {
            if alternative.iter().any(|s| !matches!(s, Symbol::Rule(_)) && !terminal_holds(s)) {
                continue;
            }
            let slot = waiting.len();
            let mut pending = 0;
            for symbol in alternative {
                if let Symbol::Rule(id) = symbol {
                    if let Some(list) = uses.get_mut(id.index()) {
                        list.push(slot);
                        pending += 1;
                    }
                }
            }
            waiting.push((index, pending));
            if pending == 0 && !marked[index] {
                marked[index] = true;
                queue.push(index);
            }
        }
    }
    while let Some(rule) = queue.pop() {
        for &slot in &uses[rule] {
            let (owner, pending) = &mut waiting[slot];
            *pending -= 1;
            if *pending == 0 && !marked[*owner] {
                marked[*owner] = true;
                queue.push(*owner);
            }
        }
    }
    marked
}

/// Whether `byte` starts a character in UTF-8 (it is not a continuation byte); character
/// budgets count these.
#[inline]
pub(crate) fn starts_character(byte: u8) -> bool {
    !(0x80..=0xBF).contains(&byte)
}

/// UTF-8 continuation bytes still owed after `byte`, when `pending` were owed before it.
#[inline]
pub(crate) fn utf8_pending_after(pending: u8, byte: u8) -> u8 {
    match byte {
        0x80..=0xBF => pending.saturating_sub(1),
        0xC0..=0xDF => 1,
        0xE0..=0xEF => 2,
        0xF0..=0xFF => 3,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `bytes` is read by `alternative`, byte for byte.
    fn reads(alternative: &[Symbol], bytes: &[u8]) -> bool {
        alternative.len() == bytes.len()
            && alternative.iter().zip(bytes).all(|(symbol, byte)| matches!(symbol, Symbol::Bytes(set) if set.contains(*byte)))
    }

    #[test]
    fn a_class_has_one_alternative_per_shape_of_utf8_sequence_and_reads_the_same_characters() {
        let ranges = [('\u{20}', '\u{21}'), ('\u{23}', '\u{5B}'), ('\u{5D}', char::MAX)];
        let alternatives = char_ranges_to_alternatives(&ranges);
        // The three ASCII ranges are one alternative, and so are the lead bytes E1-EC and
        // EE-EF of three-byte characters: 1 + 7 where one per UTF-8 sequence made 3 + 8.
        assert_eq!(alternatives.len(), 8, "{alternatives:?}");
        let in_class = |c: char| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c));
        let samples = (0..0x11_0000u32)
            .step_by(61)
            .chain([0x22, 0x5C, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x1_0000, 0x10_FFFF]);
        for c in samples.filter_map(char::from_u32) {
            let mut buffer = [0u8; 4];
            let bytes = c.encode_utf8(&mut buffer).as_bytes();
            let readers = alternatives.iter().filter(|alternative| reads(alternative, bytes)).count();
            assert_eq!(readers, usize::from(in_class(c)), "{c:?} read by {readers} alternatives");
        }
    }
}
