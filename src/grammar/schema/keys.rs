//! Object keys under `patternProperties`: which schema an extra key's value gets depends on
//! which patterns the key matches and whether it is a declared property name. Both are
//! regular properties of the key, so the key is read by one automaton, the product of the
//! declared names (a trie over bytes) and one DFA per pattern, and each state that may end
//! the key says which value rule follows.
//!
//! Each pattern is searched as JSON Schema does (unanchored: `.*(?:pattern).*`, so `^`/`$`
//! anchor it), and its DFA never dies on valid UTF-8: at the closing quote every pattern
//! answers matched or not. Keys are written in canonical encoding (only `"`, `\` and control
//! characters escaped, as serde_json writes them), like declared names.
//!
//! Key types: [`KeyPattern`], [`KeyAutomaton`], [`ObjectPatterns`] (the patterns of a
//! conjunction's object parts). Cost: one grammar rule per product state reached, refused
//! beyond [`MAX_KEY_STATES`]; usually the names' trie plus a few states per pattern.

use std::collections::HashMap;
use std::rc::Rc;

use regex_automata::dfa::{dense, Automaton};
use regex_automata::util::primitives::StateID;

use super::json::{byte, canonical_escape, grouped_escapes};
use super::merge::ObjectPart;
use super::part::Part;
use super::SchemaError;
use super::regex::{number_state, search_dfa, PatternRefusal};
use crate::ir::{utf8_pending_after, ByteSet, RuleId, Symbol};

/// Most product states one object's keys may need.
pub const MAX_KEY_STATES: usize = 4096;
/// Most patterns that apply to one object (the matched set is a bit mask).
pub const MAX_KEY_PATTERNS: usize = 64;

/// One `patternProperties` pattern as a search DFA over the key's UTF-8.
pub struct KeyPattern {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
}

impl KeyPattern {
    pub fn new(pattern: &str) -> Result<Self, PatternRefusal> {
        let (dfa, start) = search_dfa(pattern)?;
        Ok(KeyPattern { dfa, start })
    }

    /// Whether `name` contains a match of the pattern.
    pub fn matches(&self, name: &str) -> bool {
        let mut state = self.start;
        for &b in name.as_bytes() {
            state = self.dfa.next_state(state, b);
        }
        self.dfa.is_match_state(self.dfa.next_eoi_state(state))
    }
}

/// No trie node: the key already left every declared name.
const OFF_TRIE: u32 = u32::MAX;

/// The key automaton of one object: states, their transitions grouped by target, and per
/// state whether the key may end there as an extra key and with which patterns matched.
pub struct KeyAutomaton {
    states: Vec<KeyState>,
}

struct KeyState {
    /// `Some(matched patterns)` when the key may end here and is not a declared name.
    ends: Option<u64>,
    /// (target, bytes written as themselves, bytes written as escapes).
    transitions: Vec<(usize, ByteSet, Vec<u8>)>,
}

impl KeyAutomaton {
    /// The product of the names' trie and the patterns' DFAs; refuses past
    /// [`MAX_KEY_STATES`] states.
    pub fn build(names: &[&str], patterns: &[&KeyPattern]) -> Result<Self, PatternRefusal> {
        if patterns.len() > MAX_KEY_PATTERNS {
            return Err(PatternRefusal(format!(
                "with {} patterns on one object, above the limit of {MAX_KEY_PATTERNS}",
                patterns.len()
            )));
        }
        // The names' trie over bytes: children by byte, and which nodes end a name.
        let mut children: Vec<HashMap<u8, u32>> = vec![HashMap::new()];
        let mut terminal = vec![false];
        for name in names {
            let mut at = 0usize;
            for &b in name.as_bytes() {
                let next = match children[at].get(&b) {
                    Some(next) => *next as usize,
                    None => {
                        children.push(HashMap::new());
                        terminal.push(false);
                        let next = children.len() - 1;
                        children[at].insert(b, next as u32);
                        next
                    }
                };
                at = next;
            }
            terminal[at] = true;
        }
        // (trie node, pattern states, UTF-8 continuation bytes still owed).
        type Key = (u32, Vec<StateID>, u8);
        let start: Key = (0, patterns.iter().map(|p| p.start).collect(), 0);
        let mut index: HashMap<Key, usize> = HashMap::new();
        let mut order: Vec<Key> = vec![start.clone()];
        index.insert(start, 0);
        let mut states = Vec::new();
        let mut cursor = 0;
        while cursor < order.len() {
            let (node, dfa_states, pending) = order[cursor].clone();
            cursor += 1;
            let is_name = node != OFF_TRIE && terminal[node as usize];
            let mut matched = 0u64;
            for (i, (pattern, &state)) in patterns.iter().zip(&dfa_states).enumerate() {
                if pattern
                    .dfa
                    .is_match_state(pattern.dfa.next_eoi_state(state))
                {
                    matched |= 1 << i;
                }
            }
            let mut transitions: Vec<(usize, ByteSet, Vec<u8>)> = Vec::new();
            // Runs of bytes lead to the same product state (a pattern's byte classes are
            // ranges): the last one reached is compared before hashing a key for the index.
            let mut next_states: Vec<StateID> = Vec::with_capacity(patterns.len());
            let mut last: Option<usize> = None;
            'bytes: for b in 0..=255u8 {
                next_states.clear();
                for (pattern, &state) in patterns.iter().zip(&dfa_states) {
                    let next = pattern.dfa.next_state(state, b);
                    if pattern.dfa.is_dead_state(next) || pattern.dfa.is_quit_state(next) {
                        continue 'bytes;
                    }
                    next_states.push(next);
                }
                let next_node = match node {
                    OFF_TRIE => OFF_TRIE,
                    _ => children[node as usize].get(&b).copied().unwrap_or(OFF_TRIE),
                };
                let next_pending = utf8_pending_after(pending, b);
                let reaches_last = last.is_some_and(|last| {
                    let (last_node, last_states, last_pending) = &order[last];
                    *last_node == next_node && *last_pending == next_pending && *last_states == next_states
                });
                let target = match last {
                    Some(last) if reaches_last => last,
                    _ => {
                        let key = (next_node, next_states.clone(), next_pending);
                        let target = number_state(&mut index, &mut order, key, MAX_KEY_STATES, || {
                            format!("whose patterns, with the declared property names, need more than {MAX_KEY_STATES} key states; simplify them")
                        })?;
                        last = Some(target);
                        target
                    }
                };
                let entry = match transitions.iter().position(|(t, _, _)| *t == target) {
                    Some(position) => &mut transitions[position],
                    None => {
                        transitions.push((target, ByteSet::EMPTY, Vec::new()));
                        let last = transitions.len() - 1;
                        &mut transitions[last]
                    }
                };
                if canonical_escape(char::from(b)).is_some() {
                    entry.2.push(b);
                } else {
                    entry.1.insert(b);
                }
            }
            // A key ends only between characters.
            states.push(KeyState {
                ends: (!is_name && pending == 0).then_some(matched),
                transitions,
            });
        }
        Ok(KeyAutomaton {
            states: minimize(states),
        })
    }

    /// The distinct sets of matched patterns with which an extra key can end.
    pub fn ending_sets(&self) -> Vec<u64> {
        let mut sets: Vec<u64> = self.states.iter().filter_map(|s| s.ends).collect();
        sets.sort_unstable();
        sets.dedup();
        sets
    }

    /// Rules for `"key" WS ":" WS value`, the value chosen by `value_for` from the matched
    /// set (`None`: a key ending so is not allowed); states with no way out are left for the
    /// grammar-wide pruning pass.
    pub fn lower(
        &self,
        builder: &mut crate::ir::GrammarBuilder,
        value_for: &HashMap<u64, Option<RuleId>>,
    ) -> RuleId {
        let ids: Vec<RuleId> = (0..self.states.len())
            .map(|_| builder.declare("key-state"))
            .collect();
        for (state, id) in self.states.iter().zip(&ids) {
            let mut alternatives = Vec::new();
            if let Some(value) = state
                .ends
                .and_then(|set| value_for.get(&set).copied().flatten())
            {
                alternatives.push(vec![
                    byte(b'"'),
                    Symbol::Whitespace,
                    byte(b':'),
                    Symbol::Whitespace,
                    Symbol::Rule(value),
                ]);
            }
            for (target, plain, escaped) in &state.transitions {
                if !plain.is_empty() {
                    alternatives.push(vec![Symbol::Bytes(*plain), Symbol::Rule(ids[*target])]);
                }
                for mut sequence in grouped_escapes(escaped.iter().map(|&b| char::from(b))) {
                    sequence.push(Symbol::Rule(ids[*target]));
                    alternatives.push(sequence);
                }
            }
            builder.define(*id, alternatives);
        }
        builder.add(
            "pattern-key-pair",
            vec![vec![byte(b'"'), Symbol::Rule(ids[0])]],
        )
    }
}


/// The states merged where they cannot be told apart (same ending, and transitions on the
/// same bytes to states that cannot be told apart); the start state stays first. The
/// pattern DFAs are searches that keep tracking partial matches, so a key that has matched
/// a pattern would otherwise reach an equal but distinct state after each character, and its
/// loop, one state in truth, would look like several to the matcher.
fn minimize(states: Vec<KeyState>) -> Vec<KeyState> {
    let labels: Vec<Option<u64>> = states.iter().map(|state| state.ends).collect();
    let edges: Vec<Vec<(usize, ByteSet)>> = states
        .iter()
        .map(|state| {
            state
                .transitions
                .iter()
                .map(|(target, plain, escaped)| (*target, escaped.iter().fold(*plain, |set, b| set.union(&ByteSet::single(*b)))))
                .collect()
        })
        .collect();
    let partition = super::minimize::minimize(&labels, &None, &edges);
    let mut merged: Vec<Option<KeyState>> = (0..partition.classes).map(|_| None).collect();
    for (state, class) in states.into_iter().zip(&partition.class_of) {
        let Some(class) = class else { continue };
        if merged[*class].is_some() {
            continue;
        }
        let mut transitions: Vec<(usize, ByteSet, Vec<u8>)> = Vec::new();
        for (target, plain, escaped) in state.transitions {
            let Some(target) = partition.class_of[target] else { continue };
            match transitions.iter_mut().find(|(t, _, _)| *t == target) {
                Some((_, merged_plain, merged_escaped)) => {
                    *merged_plain = merged_plain.union(&plain);
                    merged_escaped.extend_from_slice(&escaped);
                }
                None => transitions.push((target, plain, escaped)),
            }
        }
        merged[*class] = Some(KeyState { ends: state.ends, transitions });
    }
    let minimal: Vec<KeyState> = merged.into_iter().flatten().collect();
    if minimal.is_empty() {
        // No key at all can end: one state with no way on.
        return vec![KeyState { ends: None, transitions: Vec::new() }];
    }
    minimal
}

/// The `patternProperties` of a conjunction's object parts, compiled once per object:
/// (index of the object part, the pattern, the schema of the values of keys it matches).
pub(crate) struct ObjectPatterns<'a> {
    pub entries: Vec<(usize, KeyPattern, Part<'a>)>,
    /// Where the first pattern is, for messages.
    pub location: Rc<str>,
}

impl<'a> ObjectPatterns<'a> {
    /// Not inlined: each pattern's DFA is built in this frame, which the compiler's recursion
    /// through objects would otherwise carry at every level.
    #[inline(never)]
    pub fn new(objects: &[ObjectPart<'a>]) -> Result<Self, SchemaError> {
        let mut entries = Vec::new();
        let mut location: Option<Rc<str>> = None;
        for (index, object) in objects.iter().enumerate() {
            for (pattern, part) in &object.patterns {
                let compiled = KeyPattern::new(pattern)
                    .map_err(|refusal| SchemaError::new("patternProperties", &object.location, refusal.0))?;
                location.get_or_insert_with(|| object.location.clone());
                entries.push((index, compiled, part.clone()));
            }
        }
        Ok(ObjectPatterns { entries, location: location.unwrap_or_else(|| "".into()) })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn of_object(&self, object: usize) -> impl Iterator<Item = (&KeyPattern, &Part<'a>)> {
        self.entries.iter().filter(move |(owner, _, _)| *owner == object).map(|(_, pattern, part)| (pattern, part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matched_pattern_loops_on_one_state_and_keys_end_between_characters() {
        let x = KeyPattern::new("^x-[a-z]+$").expect("pattern");
        let label = KeyPattern::new("^label_").expect("pattern");
        let automaton = KeyAutomaton::build(&["name"], &[&x, &label]).expect("automaton");
        let after = |text: &[u8]| {
            text.iter().try_fold(0usize, |state, &b| {
                automaton.states[state]
                    .transitions
                    .iter()
                    .find(|(_, plain, escaped)| plain.contains(b) || escaped.contains(&b))
                    .map(|t| t.0)
            })
        };
        let matched = after(b"label_").expect("a key");
        for text in ["label_t", "label_team", "label_t\u{e9}", "label_\u{4e16}x"] {
            assert_eq!(after(text.as_bytes()), Some(matched), "{text}");
        }
        assert_eq!(automaton.states[matched].ends, Some(0b10));
        let ends = |text: &[u8]| after(text).map(|state| automaton.states[state].ends);
        assert_eq!(ends(b"x-ab"), Some(Some(0b01)));
        assert_eq!(ends(b"name"), Some(None));
        assert_eq!(ends(b"other"), Some(Some(0)));
        // Inside a character a key cannot end.
        assert_eq!(ends(&[b'a', 0xC3]), Some(None));
        assert_eq!(ends(&[b'l', 0xE4, 0xB8]), Some(None));
    }
}
