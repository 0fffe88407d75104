//! The byte-free expansion of each grammar position, as more methods of [`CompiledGrammar`]:
//! which stacks a stack whose top is that position stands for before reading a byte (the
//! rules it enters, down to their first terminals), and whether it can return without one.
//!
//! Expansions are computed the first time a step needs them and kept in the compiled grammar.
//! A rule call's expansion is assembled from the cached expansions of the rule's alternatives
//! and of the position after the call, so every call site of a rule shares the work of
//! expanding it, where following each call site's paths anew would repeat it per site.
//!
//! Key type: [`Expansion`]. Cost: a position's expansion copies its alternatives' stacks with
//! one more frame each (gathered in a per-thread spare buffer, then copied out at its exact
//! size); computed at most once per position (a recursion as deep as rules are nested at the
//! start of one another, bounded by [`NESTING_MAX`] beyond which the paths are followed one
//! by one instead).

use std::cell::RefCell;

use super::{CompiledGrammar, FlatSymbol, StackSet, StepOverflow};

/// The byte-free expansion of one grammar position (see [`CompiledGrammar::expansion`]).
#[derive(Debug)]
pub(super) struct Expansion {
    /// The stacks that replace the position's frame, bottom first, each topped by a terminal
    /// or whitespace, sorted, back to back (one allocation, not one per stack)...
    words: Box<[u32]>,
    /// ...each ending at its entry here.
    ends: Box<[u32]>,
    /// Whether the rest of the alternative can match nothing: the frame below continues.
    pub(super) completes: bool,
}

impl Expansion {
    pub(super) fn stacks(&self) -> impl Iterator<Item = &[u32]> {
        let mut start = 0usize;
        self.ends.iter().map(move |&end| {
            let stack = self.words.get(start..end as usize).unwrap_or_default();
            start = end as usize;
            stack
        })
    }
}

/// Stacks gathered for an [`Expansion`]: back to back, then sorted and deduplicated.
#[derive(Default)]
struct GatheredStacks {
    words: Vec<u32>,
    ranges: Vec<(u32, u32)>,
}

/// Most words a spare gathering buffer keeps (256 KiB).
const SPARE_WORDS_MAX: usize = 1 << 16;

thread_local! {
    /// Gathering buffers not in use: an expansion (assembled inside others, one buffer per
    /// level) is gathered into a buffer grown by earlier ones, not into one grown from empty.
    static SPARE_GATHERED: RefCell<Vec<GatheredStacks>> = const { RefCell::new(Vec::new()) };
}

impl GatheredStacks {
    /// A spare buffer, empty.
    fn take_spare() -> GatheredStacks {
        SPARE_GATHERED.with(|spare| spare.borrow_mut().pop()).unwrap_or_default()
    }

    /// Emptied and kept for the next expansion, unless a pathological one grew it past
    /// what a thread should hold on to.
    fn give_back(mut self) {
        if self.words.capacity() > SPARE_WORDS_MAX {
            return;
        }
        self.words.clear();
        self.ranges.clear();
        SPARE_GATHERED.with(|spare| spare.borrow_mut().push(self));
    }
}

impl GatheredStacks {
    fn push(&mut self, below: Option<u32>, stack: &[u32]) {
        let start = self.words.len() as u32;
        self.words.extend(below);
        self.words.extend_from_slice(stack);
        self.ranges.push((start, self.words.len() as u32));
    }

    fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The expansion of the stacks gathered, sized exactly (no copy to shrink it after);
    /// the buffer goes back to the spares.
    fn into_expansion(mut self, completes: bool) -> Expansion {
        let words = &self.words;
        let slice = |&(start, end): &(u32, u32)| words.get(start as usize..end as usize).unwrap_or_default();
        self.ranges.sort_unstable_by(|a, b| slice(a).cmp(slice(b)));
        self.ranges.dedup_by(|a, b| slice(a) == slice(b));
        let total = self.ranges.iter().map(|&(start, end)| (end - start) as usize).sum();
        let mut sorted = Vec::with_capacity(total);
        let mut ends = Vec::with_capacity(self.ranges.len());
        for range in &self.ranges {
            sorted.extend_from_slice(slice(range));
            ends.push(sorted.len() as u32);
        }
        let expansion = Expansion { words: sorted.into_boxed_slice(), ends: ends.into_boxed_slice(), completes };
        self.give_back();
        expansion
    }
}

/// Expansions being assembled from others may nest this deep before the rest is followed
/// path by path (a grammar may nest rules at each other's start without bound).
const NESTING_MAX: usize = 64;

impl CompiledGrammar {
    /// What a stack whose top is `position` expands to before reading a byte, computed once
    /// per position and shared by every matcher: the stacks above the top's frame, and
    /// whether the rest of the alternative can match nothing (then the frame below continues).
    pub(super) fn expansion(&self, position: u32) -> Result<&Expansion, StepOverflow> {
        self.expansion_within(position, &mut Vec::new())
    }

    /// [`CompiledGrammar::expansion`] while the expansions of `open` are being assembled:
    /// a position among them (which refused left recursion rules out, but a hang would be
    /// the price of being wrong) or past [`NESTING_MAX`] is followed path by path.
    fn expansion_within(&self, position: u32, open: &mut Vec<u32>) -> Result<&Expansion, StepOverflow> {
        let Some(cell) = self.expansions.get(position as usize) else {
            return Err(StepOverflow::TooMuchWork);
        };
        if let Some(known) = cell.get() {
            return known.as_ref().as_ref().map_err(|overflow| *overflow);
        }
        let computed = if open.len() >= NESTING_MAX || open.contains(&position) {
            self.followed_expansion(position)
        } else {
            open.push(position);
            let assembled = self.assembled_expansion(position, open);
            open.pop();
            assembled
        };
        let kept = cell.get_or_init(|| Box::new(computed));
        kept.as_ref().as_ref().map_err(|overflow| *overflow)
    }

    /// The expansion of `position` from those of the positions it leads to.
    fn assembled_expansion(&self, position: u32, open: &mut Vec<u32>) -> Result<Expansion, StepOverflow> {
        let mut stacks = GatheredStacks::take_spare();
        let completes = match self.symbols[position as usize] {
            FlatSymbol::Whitespace => {
                if self.whitespace_budget > 0 {
                    stacks.push(None, &[position]);
                }
                self.gather(position + 1, None, &mut stacks, open)?
            }
            FlatSymbol::Rule(rule) => {
                let return_to = position + 1;
                // A call last in its alternative pushes no frame: the callee returns straight
                // to the frame below.
                let below = (self.symbols[return_to as usize] != FlatSymbol::End).then_some(return_to);
                let (lo, hi) = self.alt_ranges[rule as usize];
                let mut returns = false;
                for &alternative in &self.alt_starts[lo as usize..hi as usize] {
                    returns |= self.gather(alternative, below, &mut stacks, open)?;
                }
                match below {
                    Some(return_to) if returns => self.gather(return_to, None, &mut stacks, open)?,
                    _ => returns,
                }
            }
            FlatSymbol::Bytes(_) | FlatSymbol::End => self.gather(position, None, &mut stacks, open)?,
        };
        let expansion = stacks.into_expansion(completes);
        if expansion.ends.len() > self.limits.max_stacks {
            return Err(StepOverflow::TooManyStacks);
        }
        Ok(expansion)
    }

    /// Adds the stacks of `position`'s expansion, on the frame `below` if any, to `stacks`;
    /// returns whether the expansion completes. A terminal or an alternative's end is its own
    /// expansion: no cached one is made for it.
    fn gather(
        &self,
        position: u32,
        below: Option<u32>,
        stacks: &mut GatheredStacks,
        open: &mut Vec<u32>,
    ) -> Result<bool, StepOverflow> {
        match self.symbols[position as usize] {
            FlatSymbol::Bytes(_) => stacks.push(below, &[position]),
            FlatSymbol::End => return Ok(true),
            FlatSymbol::Whitespace | FlatSymbol::Rule(_) => {
                let expansion = self.expansion_within(position, open)?;
                for stack in expansion.stacks() {
                    if stack.len() + 1 >= self.limits.max_stack_depth {
                        return Err(StepOverflow::StackDepth);
                    }
                    stacks.push(below, stack);
                }
                // Duplicates are dropped only at the end: a bound on what is gathered before
                // then, as a byte step has, keeps a pathological grammar's memory in check.
                if stacks.len() > self.limits.max_stacks.saturating_mul(4) {
                    return Err(StepOverflow::TooManyStacks);
                }
                return Ok(expansion.completes);
            }
        }
        Ok(false)
    }

    /// The expansion of `position` by following every byte-free path from it one by one.
    fn followed_expansion(&self, position: u32) -> Result<Expansion, StepOverflow> {
        let mut out = StackSet::default();
        self.expand(vec![(0, vec![position])], &mut out)?;
        let mut completes = false;
        let mut stacks = GatheredStacks::default();
        for (frames, _) in out.stacks {
            if frames.is_empty() {
                completes = true;
            } else {
                stacks.push(None, &frames);
            }
        }
        Ok(stacks.into_expansion(completes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gbnf::compile_gbnf;
    use crate::ir::{Grammar, GrammarBuilder, Symbol};
    use crate::limits::Limits;

    fn stacks_of(expansion: &Expansion) -> (Vec<Vec<u32>>, bool) {
        (expansion.stacks().map(<[u32]>::to_vec).collect(), expansion.completes)
    }

    /// Every position's assembled expansion is what following its paths one by one gives.
    fn assert_assembled_as_followed(name: &str, grammar: &CompiledGrammar) {
        let mut compared = 0;
        for position in 0..grammar.symbols.len() as u32 {
            let followed = grammar.followed_expansion(position).map(|e| stacks_of(&e));
            let assembled = grammar.expansion(position).map(stacks_of);
            assert_eq!(assembled, followed, "{name}: position {position}");
            compared += 1;
        }
        assert!(compared > 0, "{name}: no positions");
    }

    #[test]
    fn assembled_expansions_are_the_followed_ones() {
        let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/grammars");
        for name in ["arithmetic", "c", "chess", "json", "list", "english"] {
            let source = std::fs::read(format!("{corpus}/{name}.gbnf")).unwrap_or_else(|e| panic!("{name}: {e}"));
            let grammar = compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_assembled_as_followed(name, &grammar);
        }
        let schema = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
            "b": {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "null"}]}},
            "additionalProperties": {"type": "boolean"}});
        let ir = crate::schema::compile_schema(&schema).unwrap_or_else(|e| panic!("{e}"));
        let grammar = CompiledGrammar::new(ir, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_assembled_as_followed("schema", &grammar);
    }

    /// Rules nested at each other's start deeper than [`NESTING_MAX`]: the innermost are
    /// followed path by path, and the expansions still agree; a nullable rule between them
    /// makes calls return into the frames below.
    #[test]
    fn expansions_nested_past_the_recursion_bound_agree() {
        let depth = NESTING_MAX * 2;
        let mut builder = GrammarBuilder::new();
        let rules: Vec<_> = (0..=depth).map(|i| builder.declare(&format!("r{i}"))).collect();
        let maybe = builder.declare("maybe");
        builder.define(maybe, vec![vec![Symbol::Bytes(crate::ir::ByteSet::single(b'm'))], vec![]]);
        for i in 0..depth {
            let close = Symbol::Bytes(crate::ir::ByteSet::single(b')'));
            builder.define(rules[i], vec![vec![Symbol::Rule(maybe), Symbol::Rule(rules[i + 1]), close]]);
        }
        builder.define(rules[depth], vec![vec![Symbol::Bytes(crate::ir::ByteSet::single(b'a'))]]);
        let ir: Grammar = builder.finish(rules[0], 0);
        let grammar = CompiledGrammar::new(ir, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_assembled_as_followed("nested", &grammar);
        let text = format!("a{}", ")".repeat(depth));
        let mut config = grammar.initial_config().to_vec();
        for &byte in text.as_bytes() {
            config = grammar.step(&config, byte).unwrap_or_else(|e| panic!("{e:?}"));
            assert!(!config.is_empty(), "died on {}", byte as char);
        }
        assert!(super::super::config_is_accepting(&config));
    }
}
