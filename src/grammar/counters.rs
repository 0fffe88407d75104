//! Counter chains: the rules a bounded repetition expands to (`maxLength`, `maxItems`, `x{0,n}`),
//! found in a grammar by their shape, so that a mask can be computed from a state that only
//! remembers as much of the count as one token can use.
//!
//! A bounded repetition lowers to a chain of rules `opt_r ::= "" | body opt_(r-1)`, with the
//! same non-nullable `body` in each; `opt_r` allows up to `r` more items. Inside the chain each
//! count is a different automaton state, so inside a string with `maxLength: 200` every
//! character is a new state and a new mask. But a token of at most `h` bytes completes at most
//! `h` items (each reads a byte or more), so for it `opt_r` with `r > h + 1` behaves exactly as
//! `opt_(h+1)`: [`CounterChains::map_position`] moves a grammar position to that member.
//!
//! Key type: [`CounterChains`]. Cost: found once per compiled grammar, linear in its size; a
//! mapped position is two lookups.

use std::collections::HashMap;

use super::ir::{rules_satisfying, Grammar, Symbol};

const NONE: u32 = u32::MAX;

/// The counter chains of one grammar, by position of the flattened grammar.
#[derive(Debug, Default)]
pub(crate) struct CounterChains {
    /// Per position: (chain, rank of the member holding it) or `(NONE, _)`.
    position_member: Vec<(u32, u32)>,
    /// Per chain, per rank (index 0 unused): where the member's non-empty alternative starts.
    member_starts: Vec<Vec<u32>>,
}

impl CounterChains {
    /// Finds the chains of `grammar`; `alt_starts[alt_ranges[r]]` are the flattened start
    /// positions of rule `r`'s alternatives, `symbol_count` the flattened length.
    pub(crate) fn find(
        grammar: &Grammar,
        alt_starts: &[u32],
        alt_ranges: &[(u32, u32)],
        symbol_count: usize,
    ) -> Self {
        let nullable = nullable_rules(grammar);
        // A member: `"" | body next` (in either order) with a non-nullable body; returns the
        // index of the body alternative.
        let member_shape = |rule: usize| -> Option<(usize, u32)> {
            let alternatives = &grammar.rules.get(rule)?.alternatives;
            if alternatives.len() != 2 {
                return None;
            }
            let body = match (alternatives[0].is_empty(), alternatives[1].is_empty()) {
                (true, false) => 1,
                (false, true) => 0,
                _ => return None,
            };
            let sequence = &alternatives[body];
            let (last, items) = sequence.split_last()?;
            let Symbol::Rule(next) = last else {
                return None;
            };
            let consumes = items.iter().any(|symbol| match symbol {
                Symbol::Bytes(set) => !set.is_empty(),
                Symbol::Whitespace => false,
                Symbol::Rule(id) => !nullable.get(id.index()).copied().unwrap_or(true),
            });
            (!items.is_empty() && consumes).then_some((body, next.0))
        };
        let same_body = |a: usize, b: usize| -> bool {
            match (member_shape(a), member_shape(b)) {
                (Some((ia, _)), Some((ib, _))) => {
                    let sa = &grammar.rules[a].alternatives[ia];
                    let sb = &grammar.rules[b].alternatives[ib];
                    sa.len() == sb.len() && sa[..sa.len() - 1] == sb[..sb.len() - 1]
                }
                _ => false,
            }
        };
        // Rank of each member: 1 + the rank of its successor when that is a member with the
        // same body; the chain is named by its lowest member.
        let rule_count = grammar.rules.len();
        let mut rank = vec![0u32; rule_count];
        let mut lowest = vec![NONE; rule_count];
        for start in 0..rule_count {
            if rank[start] != 0 || member_shape(start).is_none() {
                continue;
            }
            let mut path = vec![start];
            let mut at = start;
            loop {
                let Some((_, next)) = member_shape(at) else {
                    break;
                };
                let next = next as usize;
                if next == at || path.contains(&next) || !same_body(at, next) {
                    break;
                }
                if rank[next] != 0 {
                    break;
                }
                path.push(next);
                at = next;
            }
            // `at` ends the walk: its successor is not a continuing member (or is ranked).
            let (mut base_rank, base_lowest) = match member_shape(at).map(|(_, next)| next as usize)
            {
                Some(next) if next != at && same_body(at, next) && rank[next] != 0 => {
                    (rank[next], lowest[next])
                }
                _ => (0, at as u32),
            };
            for &member in path.iter().rev() {
                base_rank += 1;
                rank[member] = base_rank;
                lowest[member] = base_lowest;
            }
        }
        let mut chain_ids: HashMap<u32, u32> = HashMap::new();
        let mut member_starts: Vec<Vec<u32>> = Vec::new();
        let mut position_member = vec![(NONE, 0u32); symbol_count];
        for rule in 0..rule_count {
            if rank[rule] == 0 {
                continue;
            }
            let Some((body, _)) = member_shape(rule) else {
                continue;
            };
            let chain = *chain_ids.entry(lowest[rule]).or_insert_with(|| {
                member_starts.push(Vec::new());
                (member_starts.len() - 1) as u32
            });
            let (lo, _) = alt_ranges[rule];
            let start = alt_starts[lo as usize + body];
            let starts = &mut member_starts[chain as usize];
            if starts.len() <= rank[rule] as usize {
                starts.resize(rank[rule] as usize + 1, NONE);
            }
            starts[rank[rule] as usize] = start;
            let length = grammar.rules[rule].alternatives[body].len();
            for position in start..start + length as u32 {
                if let Some(slot) = position_member.get_mut(position as usize) {
                    *slot = (chain, rank[rule]);
                }
            }
        }
        CounterChains {
            position_member,
            member_starts,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.member_starts.is_empty()
    }

    /// `position`, or the same place in the member of its chain with `horizon + 1` items left
    /// when its own member has more: equivalent for any text of at most `horizon` bytes.
    #[inline]
    pub(crate) fn map_position(&self, position: u32, horizon: u32) -> u32 {
        let Some(&(chain, rank)) = self.position_member.get(position as usize) else {
            return position;
        };
        let cap = horizon.saturating_add(1);
        if chain == NONE || rank <= cap {
            return position;
        }
        let starts = &self.member_starts[chain as usize];
        match (starts.get(rank as usize), starts.get(cap as usize)) {
            (Some(&own), Some(&target)) if own != NONE && target != NONE => {
                target + (position - own)
            }
            _ => position,
        }
    }
}

/// Which rules can match the empty string.
fn nullable_rules(grammar: &Grammar) -> Vec<bool> {
    rules_satisfying(grammar, |symbol| matches!(symbol, Symbol::Whitespace))
}
