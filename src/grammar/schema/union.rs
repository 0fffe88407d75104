//! `anyOf`/`oneOf` between closed objects, lowered as one object.
//!
//! As a plain choice, `anyOf: [{a, b, c}, {a, b, d}]` keeps one parse stack per object alive
//! from the `{` on: every key and every value read while the alternatives agree is read once
//! per alternative, and each combination of their positions is a state of its own to the
//! matcher. Real schemas (a build artifact that is one of five objects sharing four keys)
//! spend most of their mask time there. So alternatives that are closed objects are read by
//! one object whose state is the set of alternatives still possible, each with its own
//! position (properties written so far, or the next declared one): a key moves every
//! alternative that allows it, and the alternatives split only where they give that key
//! values of different schemas. The language is the union of the objects', exactly.
//!
//! Key type: [`ObjectUnions`] (the shapes of the objects lowered so far, and the merged
//! pairs). Cost: one rule per set of positions reached, capped at [`MAX_UNION_STATES`]
//! (beyond it the choice stays as it was), plus a bounded structural comparison of values.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::json::{byte, canonical_json_string, RuleSink};
use crate::ir::{literal_symbols, GrammarBuilder, RuleId, Symbol};

/// Most states one merged object may have; past it the alternatives stay a plain choice.
pub const MAX_UNION_STATES: usize = 512;
/// Rule pairs compared before two values are taken to differ.
const COMPARISON_BUDGET: usize = 4096;
/// Levels of single-rule wrappers and nested choices looked through.
const LOOK_THROUGH: usize = 8;

/// The properties of a closed object (no extra keys) as lowered: name, value rule, required;
/// in any order (each at most once) or in declared order (optional ones skippable).
#[derive(Clone, Debug)]
pub(crate) struct ObjectShape {
    pub properties: Vec<(String, RuleId, bool)>,
    pub any_order: bool,
}

impl ObjectShape {
    /// Position after no property: no property written, or the first declared next.
    const START: u32 = 0;

    fn can_end(&self, position: u32) -> bool {
        let required = |(index, property): (usize, &(String, RuleId, bool))| property.2 && self.pending(position, index);
        !self.properties.iter().enumerate().any(required)
    }

    /// Whether property `index` is still to come at `position` (not yet written, or not yet
    /// passed in declared order).
    fn pending(&self, position: u32, index: usize) -> bool {
        if self.any_order {
            position & (1 << index) == 0
        } else {
            index as u32 >= position
        }
    }

    fn after(&self, position: u32, index: usize) -> Option<u32> {
        if self.any_order {
            return self.pending(position, index).then_some(position | (1 << index));
        }
        let skipped = (position as usize..index).any(|between| self.properties[between].2);
        (index as u32 >= position && !skipped).then_some(index as u32 + 1)
    }
}

/// A set of (alternative, position) pairs, sorted.
type UnionState = Vec<(usize, u32)>;

#[derive(Default)]
pub(crate) struct ObjectUnions {
    /// Closed objects by their rule.
    shapes: HashMap<RuleId, ObjectShape>,
    /// `"name" : value` rules by name and value.
    pairs: HashMap<(String, RuleId), RuleId>,
}

impl ObjectUnions {
    pub fn record(&mut self, object: RuleId, shape: ObjectShape) {
        self.shapes.insert(object, shape);
    }

    /// The alternatives of a choice with those that are closed objects merged into one
    /// object (when at least two are); the others as they were.
    pub fn merge(&mut self, sink: &mut RuleSink, alternatives: Vec<Vec<Symbol>>) -> Vec<Vec<Symbol>> {
        let mut objects: Vec<(RuleId, &ObjectShape)> = Vec::new();
        let mut others: Vec<Vec<Symbol>> = Vec::new();
        for alternative in flattened(&sink.builder, alternatives.clone(), LOOK_THROUGH) {
            let shape = match alternative.as_slice() {
                [Symbol::Rule(rule)] => self.shape_of(&sink.builder, *rule),
                _ => None,
            };
            match shape {
                Some(shape) => objects.push(shape),
                None => others.push(alternative),
            }
        }
        if objects.len() < 2 {
            return alternatives;
        }
        let shapes: Vec<ObjectShape> = objects.iter().map(|(_, shape)| (*shape).clone()).collect();
        let Some(merged) = self.merged_object(sink, &shapes) else { return alternatives };
        others.push(vec![Symbol::Rule(merged)]);
        others
    }

    /// The shape of `rule`, looking through rules that are one reference to another.
    fn shape_of(&self, builder: &GrammarBuilder, mut rule: RuleId) -> Option<(RuleId, &ObjectShape)> {
        for _ in 0..LOOK_THROUGH {
            if let Some(shape) = self.shapes.get(&rule) {
                return Some((rule, shape));
            }
            match builder.alternatives(rule) {
                [only] => match only.as_slice() {
                    [Symbol::Rule(next)] => rule = *next,
                    _ => return None,
                },
                _ => return None,
            }
        }
        None
    }

    fn merged_object(&mut self, sink: &mut RuleSink, shapes: &[ObjectShape]) -> Option<RuleId> {
        let start: UnionState = (0..shapes.len()).map(|alternative| (alternative, ObjectShape::START)).collect();
        let mut index: HashMap<UnionState, usize> = HashMap::new();
        index.insert(start.clone(), 0);
        let mut states = vec![start];
        // Per state: may the object end here, and per (name, value) the next state.
        let mut moves: Vec<(bool, Vec<(String, RuleId, usize)>)> = Vec::new();
        let mut comparisons = Comparisons::default();
        let mut cursor = 0;
        while cursor < states.len() {
            let state = states[cursor].clone();
            cursor += 1;
            let may_end = state.iter().any(|(alternative, position)| shapes[*alternative].can_end(*position));
            // Per key: groups of alternatives giving it the same value, with their positions.
            let mut by_key: BTreeMap<&str, Vec<(RuleId, UnionState)>> = BTreeMap::new();
            for (alternative, position) in &state {
                let shape = &shapes[*alternative];
                for (property, (name, value, _)) in shape.properties.iter().enumerate() {
                    let Some(next) = shape.after(*position, property) else { continue };
                    let groups = by_key.entry(name.as_str()).or_default();
                    let group = groups.iter().position(|(other, _)| comparisons.same(&sink.builder, *other, *value));
                    match group {
                        Some(group) => groups[group].1.push((*alternative, next)),
                        None => groups.push((*value, vec![(*alternative, next)])),
                    }
                }
            }
            let mut out = Vec::new();
            for (name, groups) in by_key {
                for (value, mut target) in groups {
                    target.sort_unstable();
                    let target = match index.get(&target) {
                        Some(&target) => target,
                        None => {
                            if states.len() >= MAX_UNION_STATES {
                                return None;
                            }
                            index.insert(target.clone(), states.len());
                            states.push(target);
                            states.len() - 1
                        }
                    };
                    out.push((name.to_string(), value, target));
                }
            }
            moves.push((may_end, out));
        }
        let ids: Vec<RuleId> = (0..states.len()).map(|_| sink.builder.declare("object-union-after")).collect();
        let separator = [Symbol::Whitespace, byte(b','), Symbol::Whitespace];
        let mut first = Vec::new();
        for (state, (may_end, out)) in moves.iter().enumerate() {
            let mut alternatives = Vec::new();
            if *may_end {
                alternatives.push(vec![Symbol::Whitespace]);
            }
            for (name, value, target) in out {
                let pair = self.pair(sink, name, *value);
                if state == 0 {
                    first.push(vec![Symbol::Rule(pair), Symbol::Rule(ids[*target])]);
                }
                let mut sequence = separator.to_vec();
                sequence.extend([Symbol::Rule(pair), Symbol::Rule(ids[*target])]);
                alternatives.push(sequence);
            }
            sink.builder.define(ids[state], alternatives);
        }
        let mut object = Vec::new();
        if !first.is_empty() {
            let body = sink.add("object-union-body", first);
            object.push(vec![byte(b'{'), Symbol::Whitespace, Symbol::Rule(body), byte(b'}')]);
        }
        if moves[0].0 {
            object.push(vec![byte(b'{'), Symbol::Whitespace, byte(b'}')]);
        }
        Some(sink.add("object-union", object))
    }

    fn pair(&mut self, sink: &mut RuleSink, name: &str, value: RuleId) -> RuleId {
        if let Some(found) = self.pairs.get(&(name.to_string(), value)) {
            return *found;
        }
        let mut pair = literal_symbols(canonical_json_string(name).as_bytes());
        pair.extend([Symbol::Whitespace, byte(b':'), Symbol::Whitespace, Symbol::Rule(value)]);
        let id = sink.add(format!("property {name}"), vec![pair]);
        self.pairs.insert((name.to_string(), value), id);
        id
    }
}

/// The alternatives with each one that is a reference to a plain choice of references
/// replaced by that choice's alternatives (a nested `anyOf`), `depth` levels deep.
fn flattened(builder: &GrammarBuilder, alternatives: Vec<Vec<Symbol>>, depth: usize) -> Vec<Vec<Symbol>> {
    let mut out: Vec<Vec<Symbol>> = Vec::new();
    for alternative in alternatives {
        let nested = match alternative.as_slice() {
            [Symbol::Rule(rule)] if depth > 0 => {
                let inner = builder.alternatives(*rule);
                let is_choice = inner.len() > 1 && inner.iter().all(|a| matches!(a.as_slice(), [Symbol::Rule(_)]));
                is_choice.then(|| inner.to_vec())
            }
            _ => None,
        };
        let expanded = match nested {
            Some(inner) => flattened(builder, inner, depth - 1),
            None => vec![alternative],
        };
        for alternative in expanded {
            if !out.contains(&alternative) {
                out.push(alternative);
            }
        }
    }
    out
}

/// Structural equality of rules (the same alternatives, symbol by symbol, referring to
/// rules equal in turn), within a budget; rules not defined yet equal only themselves.
#[derive(Default)]
struct Comparisons {
    known: HashMap<(RuleId, RuleId), bool>,
}

impl Comparisons {
    fn same(&mut self, builder: &GrammarBuilder, a: RuleId, b: RuleId) -> bool {
        if a == b {
            return true;
        }
        let key = if a.index() < b.index() { (a, b) } else { (b, a) };
        if let Some(known) = self.known.get(&key) {
            return *known;
        }
        let same = bisimilar(builder, a, b);
        self.known.insert(key, same);
        same
    }
}

fn bisimilar(builder: &GrammarBuilder, a: RuleId, b: RuleId) -> bool {
    let mut assumed: HashSet<(RuleId, RuleId)> = HashSet::new();
    let mut pending = vec![(a, b)];
    while let Some((x, y)) = pending.pop() {
        if x == y || !assumed.insert((x, y)) {
            continue;
        }
        if assumed.len() > COMPARISON_BUDGET {
            return false;
        }
        let (left, right) = (builder.alternatives(x), builder.alternatives(y));
        if left.is_empty() || left.len() != right.len() {
            return false;
        }
        for (l, r) in left.iter().zip(right) {
            if l.len() != r.len() {
                return false;
            }
            for (ls, rs) in l.iter().zip(r) {
                match (ls, rs) {
                    (Symbol::Rule(p), Symbol::Rule(q)) => pending.push((*p, *q)),
                    (ls, rs) if ls == rs => {}
                    _ => return false,
                }
            }
        }
    }
    true
}
