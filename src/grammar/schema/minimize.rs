//! DFA minimization for the automata the schema compiler lowers to rules (a `pattern`'s DFA,
//! the key automaton of `patternProperties`), by Hopcroft's partition refinement.
//!
//! Every state of such an automaton becomes a grammar rule, and every rule reached becomes
//! part of the constraint automaton's states, so two states that accept the same suffixes
//! would make the matcher build (and walk tokens through) the same thing twice. Above all,
//! a search DFA for `.*(?:p).*` keeps tracking partial matches of `p` after it has matched:
//! its "matched" part is many states that all accept every rest, which minimization folds
//! into one state looping on every character, the shape the lexer's loop tables serve.
//!
//! Bounded numbers are built as a union of one digit automaton per length of the integer
//! part; as rules, that union would keep one parse stack per length alive through every
//! digit. [`SmallNfa`] turns such a union into the minimal DFA before it becomes rules.
//!
//! Key function: [`minimize`]; key type: [`SmallNfa`]. Cost: O(k n log n) for n states and k
//! byte classes (bytes no state tells apart share a class), plus O(n k) to set up; the subset
//! construction of a [`SmallNfa`] is capped by the caller's state limit.

use std::collections::HashMap;
use std::hash::Hash;

use super::json::RuleSink;
use crate::ir::{ByteSet, RuleId, Symbol};

/// Which class of equivalent states each state of an automaton belongs to.
pub struct Partition {
    /// Per state: its class, or `None` when it accepts nothing (equivalent to the dead state).
    /// Classes are numbered by their first state, so state 0 is in class 0 unless it is dead.
    pub class_of: Vec<Option<usize>>,
    /// Number of live classes.
    pub classes: usize,
}

/// The coarsest partition of a partial DFA's states into classes that cannot be told apart:
/// the same label (what ending there means), and on every byte, transitions to states of the
/// same class (a byte with no transition leads to a dead state labelled `dead`).
/// `transitions[s]` lists state `s`'s targets with the bytes leading to each; the byte sets
/// of one state must be disjoint.
pub fn minimize<L: Hash + Eq + Clone>(labels: &[L], dead: &L, transitions: &[Vec<(usize, ByteSet)>]) -> Partition {
    let n = labels.len();
    let sink = n;
    let classes_of_bytes = byte_classes(transitions);
    let k = classes_of_bytes.len();
    // Dense transition table over byte classes, the sink included.
    let mut delta = vec![sink as u32; (n + 1) * k];
    for (state, edges) in transitions.iter().enumerate() {
        for (target, bytes) in edges {
            for (class, representative) in classes_of_bytes.iter().enumerate() {
                if bytes.contains(*representative) {
                    delta[state * k + class] = *target as u32;
                }
            }
        }
    }
    // Inverse transitions per byte class, as compressed rows over targets.
    let mut inverse_start = vec![0u32; k * (n + 2)];
    for source in 0..=n {
        for class in 0..k {
            let target = delta[source * k + class] as usize;
            inverse_start[class * (n + 2) + target + 1] += 1;
        }
    }
    for class in 0..k {
        let row = class * (n + 2);
        for target in 0..=n {
            inverse_start[row + target + 1] += inverse_start[row + target];
        }
    }
    let mut inverse = vec![0u32; k * (n + 1)];
    let mut fill = inverse_start.clone();
    for source in 0..=n {
        for class in 0..k {
            let target = delta[source * k + class] as usize;
            let slot = &mut fill[class * (n + 2) + target];
            inverse[class * (n + 1) + *slot as usize] = source as u32;
            *slot += 1;
        }
    }
    let predecessors = |class: usize, target: usize| {
        let row = class * (n + 2);
        let (start, end) = (inverse_start[row + target] as usize, inverse_start[row + target + 1] as usize);
        &inverse[class * (n + 1) + start..class * (n + 1) + end]
    };

    // The partition: the states of each block are contiguous in `elements`.
    let mut refinement = Refinement::new(labels, dead);
    let mut pending: Vec<(usize, usize)> = Vec::new();
    let mut queued: Vec<bool> = Vec::new();
    for block in 0..refinement.blocks() {
        for class in 0..k {
            pending.push((block, class));
        }
    }
    queued.resize(refinement.blocks() * k, true);
    let mut touched: Vec<usize> = Vec::new();
    let mut members: Vec<u32> = Vec::new();
    while let Some((splitter, class)) = pending.pop() {
        queued[splitter * k + class] = false;
        members.clear();
        members.extend_from_slice(refinement.members(splitter));
        for &target in &members {
            for &source in predecessors(class, target as usize) {
                if let Some(block) = refinement.mark(source as usize) {
                    touched.push(block);
                }
            }
        }
        for block in touched.drain(..) {
            let Some(new_block) = refinement.split(block) else { continue };
            queued.resize(refinement.blocks() * k, false);
            for c in 0..k {
                if queued[block * k + c] {
                    queued[new_block * k + c] = true;
                    pending.push((new_block, c));
                } else {
                    let smaller = if refinement.size(new_block) <= refinement.size(block) { new_block } else { block };
                    queued[smaller * k + c] = true;
                    pending.push((smaller, c));
                }
            }
        }
    }

    let dead_block = refinement.block_of[sink];
    let mut numbering: HashMap<usize, usize> = HashMap::new();
    let class_of = (0..n)
        .map(|state| {
            let block = refinement.block_of[state];
            (block != dead_block).then(|| {
                let next = numbering.len();
                *numbering.entry(block).or_insert(next)
            })
        })
        .collect();
    Partition { class_of, classes: numbering.len() }
}

/// Bytes grouped into classes that every state treats alike; one representative each.
fn byte_classes(transitions: &[Vec<(usize, ByteSet)>]) -> Vec<u8> {
    let mut classes: Vec<ByteSet> = vec![ByteSet::ALL];
    for edges in transitions {
        for (_, bytes) in edges {
            let mut refined = Vec::with_capacity(classes.len() + 1);
            for class in &classes {
                let inside = class.intersect(bytes);
                let outside = ByteSet(std::array::from_fn(|i| class.0[i] & !bytes.0[i]));
                refined.extend([inside, outside].into_iter().filter(|set| !set.is_empty()));
            }
            classes = refined;
        }
    }
    classes.iter().filter_map(|class| class.iter().next()).collect()
}

/// A partition of states 0..=n (n is the dead sink) held as contiguous runs of one array,
/// with marks for the states a splitter reaches.
struct Refinement {
    elements: Vec<u32>,
    position: Vec<u32>,
    block_of: Vec<usize>,
    /// Per block: start and end in `elements`, and how many of its first states are marked.
    bounds: Vec<(u32, u32, u32)>,
}

impl Refinement {
    fn new<L: Hash + Eq + Clone>(labels: &[L], dead: &L) -> Self {
        let mut by_label: HashMap<&L, usize> = HashMap::new();
        let block_of: Vec<usize> = labels
            .iter()
            .chain(std::iter::once(dead))
            .map(|label| {
                let next = by_label.len();
                *by_label.entry(label).or_insert(next)
            })
            .collect();
        let blocks = by_label.len();
        let mut sizes = vec![0u32; blocks];
        block_of.iter().for_each(|&b| sizes[b] += 1);
        let mut bounds = Vec::with_capacity(blocks);
        let mut start = 0;
        for size in sizes {
            bounds.push((start, start + size, start));
            start += size;
        }
        let mut elements = vec![0u32; block_of.len()];
        let mut position = vec![0u32; block_of.len()];
        let mut fill: Vec<u32> = bounds.iter().map(|b| b.0).collect();
        for (state, &block) in block_of.iter().enumerate() {
            elements[fill[block] as usize] = state as u32;
            position[state] = fill[block];
            fill[block] += 1;
        }
        Refinement { elements, position, block_of, bounds }
    }

    fn blocks(&self) -> usize {
        self.bounds.len()
    }

    fn size(&self, block: usize) -> u32 {
        self.bounds[block].1 - self.bounds[block].0
    }

    fn members(&self, block: usize) -> &[u32] {
        let (start, end, _) = self.bounds[block];
        &self.elements[start as usize..end as usize]
    }

    /// Marks `state` (moving it to the marked front of its block); its block when it is the
    /// block's first mark.
    fn mark(&mut self, state: usize) -> Option<usize> {
        let block = self.block_of[state];
        let (_, _, marked_end) = self.bounds[block];
        let at = self.position[state];
        if at < marked_end {
            return None;
        }
        let other = self.elements[marked_end as usize];
        self.elements.swap(at as usize, marked_end as usize);
        self.position[other as usize] = at;
        self.position[state] = marked_end;
        self.bounds[block].2 += 1;
        (marked_end == self.bounds[block].0).then_some(block)
    }

    /// Splits the marked states off `block` into a new block unless all are marked; clears
    /// the marks.
    fn split(&mut self, block: usize) -> Option<usize> {
        let (start, end, marked_end) = self.bounds[block];
        self.bounds[block].2 = start;
        if marked_end == end {
            return None;
        }
        let new_block = self.bounds.len();
        self.bounds.push((start, marked_end, start));
        self.bounds[block] = (marked_end, end, marked_end);
        for &state in &self.elements[start as usize..marked_end as usize] {
            self.block_of[state as usize] = new_block;
        }
        Some(new_block)
    }
}

/// A nondeterministic automaton over bytes, built node by node, lowered to the rules of its
/// minimal DFA.
#[derive(Default)]
pub struct SmallNfa {
    accepting: Vec<bool>,
    edges: Vec<Vec<(u8, usize)>>,
}

/// The subset construction went past its state limit.
pub struct TooManyStates;

impl SmallNfa {
    /// A new node with the given transitions.
    pub fn node(&mut self, accepting: bool, edges: Vec<(u8, usize)>) -> usize {
        self.accepting.push(accepting);
        self.edges.push(edges);
        self.accepting.len() - 1
    }

    /// Rules for the language read from any of `starts` (`None` when it is empty): the
    /// subset construction, minimized; one rule per state, its alternatives the bytes to each
    /// target, plus the empty one where the input may end.
    pub fn lower(&self, sink: &mut RuleSink, starts: &[usize], name: &str, max_states: usize) -> Result<Option<RuleId>, TooManyStates> {
        let mut start: Vec<usize> = starts.to_vec();
        start.sort_unstable();
        start.dedup();
        let mut index: HashMap<Vec<usize>, usize> = HashMap::new();
        index.insert(start.clone(), 0);
        let mut sets = vec![start];
        let mut accepting = Vec::new();
        let mut transitions: Vec<Vec<(usize, ByteSet)>> = Vec::new();
        let mut cursor = 0;
        while cursor < sets.len() {
            let mut by_byte: Vec<(u8, Vec<usize>)> = Vec::new();
            for &node in &sets[cursor] {
                for &(b, target) in &self.edges[node] {
                    match by_byte.iter_mut().find(|(other, _)| *other == b) {
                        Some((_, targets)) => targets.push(target),
                        None => by_byte.push((b, vec![target])),
                    }
                }
            }
            accepting.push(sets[cursor].iter().any(|&node| self.accepting[node]));
            let mut edges: Vec<(usize, ByteSet)> = Vec::new();
            for (b, mut targets) in by_byte {
                targets.sort_unstable();
                targets.dedup();
                let target = match index.get(&targets) {
                    Some(&target) => target,
                    None => {
                        if sets.len() >= max_states {
                            return Err(TooManyStates);
                        }
                        index.insert(targets.clone(), sets.len());
                        sets.push(targets);
                        sets.len() - 1
                    }
                };
                match edges.iter_mut().find(|(other, _)| *other == target) {
                    Some((_, set)) => set.insert(b),
                    None => edges.push((target, ByteSet::single(b))),
                }
            }
            transitions.push(edges);
            cursor += 1;
        }
        let partition = minimize(&accepting, &false, &transitions);
        if partition.class_of[0].is_none() {
            return Ok(None);
        }
        let ids: Vec<RuleId> = (0..partition.classes).map(|_| sink.builder.declare(name)).collect();
        let mut defined = vec![false; partition.classes];
        for (state, class) in partition.class_of.iter().enumerate() {
            let Some(class) = *class else { continue };
            if std::mem::replace(&mut defined[class], true) {
                continue;
            }
            let mut alternatives: Vec<Vec<Symbol>> = Vec::new();
            if accepting[state] {
                alternatives.push(vec![]);
            }
            let mut by_class: Vec<(usize, ByteSet)> = Vec::new();
            for (target, bytes) in &transitions[state] {
                let Some(target) = partition.class_of[*target] else { continue };
                match by_class.iter_mut().find(|(other, _)| *other == target) {
                    Some((_, set)) => *set = set.union(bytes),
                    None => by_class.push((target, *bytes)),
                }
            }
            alternatives.extend(by_class.into_iter().map(|(target, bytes)| vec![Symbol::Bytes(bytes), Symbol::Rule(ids[target])]));
            sink.builder.define(ids[class], alternatives);
        }
        Ok(Some(ids[0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(list: &[(usize, &[u8])]) -> Vec<(usize, ByteSet)> {
        list.iter()
            .map(|(target, bytes)| (*target, bytes.iter().fold(ByteSet::EMPTY, |set, b| set.union(&ByteSet::single(*b)))))
            .collect()
    }

    #[test]
    fn equivalent_states_merge_and_dead_ones_drop() {
        // 0 -a-> 1, 0 -b-> 2; 1 and 2 both accept and loop on a to each other; 3 is
        // reachable on c but never accepts, so it is dead.
        let transitions = vec![edges(&[(1, b"a"), (2, b"b"), (3, b"c")]), edges(&[(2, b"a")]), edges(&[(1, b"a")]), edges(&[(3, b"x")])];
        let partition = minimize(&[false, true, true, false], &false, &transitions);
        assert_eq!(partition.classes, 2);
        assert_eq!(partition.class_of, vec![Some(0), Some(1), Some(1), None]);
    }

    #[test]
    fn states_that_differ_later_stay_apart() {
        // a chain 0 -a-> 1 -a-> 2 -a-> 3 (accepting): no two states are equivalent.
        let transitions = vec![edges(&[(1, b"a")]), edges(&[(2, b"a")]), edges(&[(3, b"a")]), vec![]];
        let partition = minimize(&[0u8, 0, 0, 1], &0, &transitions);
        assert_eq!(partition.classes, 4);
        assert_eq!(partition.class_of, vec![Some(0), Some(1), Some(2), Some(3)]);
        // Labels beyond accepting/not: two ending states with different labels differ.
        let transitions = vec![edges(&[(1, b"a"), (2, b"b")]), vec![], vec![]];
        let partition = minimize(&[None, Some(1u64), Some(2)], &None, &transitions);
        assert_eq!(partition.classes, 3);
    }
}
