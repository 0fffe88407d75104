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
//! Each chain also gets a *loop rule* `loop ::= "" | body loop` (added to the grammar by
//! [`add_loop_rules`], reachable from nowhere): the repetition without its bound. A token of
//! fewer than `r` bytes cannot tell `opt_r` from the loop, so a mask walk may run from a state
//! whose counted positions are moved into their loops ([`CounterChains::unbound_position`]):
//! one state for every count instead of one per count, and the loop's state loops, so whole
//! trie subtrees are allowed at once. Only tokens of `r` bytes or more are then walked from
//! the counted state itself.
//!
//! When no item of a chain can begin with a UTF-8 continuation byte (a string's characters),
//! each item reads at least one character, so the same holds counting a token's characters
//! instead of its bytes ([`CounterChains::counts_characters`]): a long token of a script
//! with multi-byte characters is then not walked from a counted state it cannot exhaust.
//!
//! A frame *before* a call into a chain (a string's mandatory first character, then up to 255
//! more) is moved likewise, into a twin of its alternative that calls the loop instead.
//!
//! Key types: [`CounterChains`], [`ChainRanks`], [`LoopRules`]. Cost: found once per compiled grammar, linear
//! in its size, plus one rule per chain; a mapped position is two lookups.

use std::collections::HashMap;

use super::ir::{rules_satisfying, ByteSet, Grammar, Rule, RuleId, Symbol};

const NONE: u32 = u32::MAX;

/// The counter chains of one grammar, by position of the flattened grammar.
#[derive(Debug, Default)]
pub(crate) struct CounterChains {
    /// Per position: (chain, rank of the member holding it) or `(NONE, _)`.
    position_member: Vec<(u32, u32)>,
    /// Per chain, per rank (index 0 unused): where the member's non-empty alternative starts.
    member_starts: Vec<Vec<u32>>,
    /// Per chain: where its loop rule's non-empty alternative starts, or `NONE`.
    loop_starts: Vec<u32>,
    /// Per chain: each item reads at least one character (see `ChainRanks`).
    character_items: Vec<bool>,
    /// Per position before a chain call in an alternative with a twin: the same place in the
    /// twin and the fewest items its chain calls allow; `(NONE, _)` elsewhere.
    call_sites: Vec<(u32, u32)>,
}

/// Which rules are members of a counter chain: per rule its rank (0: not a member), the
/// lowest member of its chain (names the chain) and which alternative holds the body.
pub(crate) struct ChainRanks {
    rank: Vec<u32>,
    lowest: Vec<u32>,
    body: Vec<u8>,
    /// Per member: every item of its body begins with a byte that starts a UTF-8 character
    /// (not a continuation byte), so each item reads at least one character.
    character_items: Vec<bool>,
}

impl ChainRanks {
    pub(crate) fn of(grammar: &Grammar) -> Self {
        let nullable = nullable_rules(grammar);
        // A member: `"" | body next` (in either order) with a non-nullable body and a next
        // rule other than itself (that is a loop, not a count); returns the index of the body
        // alternative and the next rule.
        let shape_of = |rule: usize| -> Option<(usize, u32)> {
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
            if next.index() == rule {
                return None;
            }
            let consumes = items.iter().any(|symbol| match symbol {
                Symbol::Bytes(set) => !set.is_empty(),
                Symbol::Whitespace => false,
                Symbol::Rule(id) => !nullable.get(id.index()).copied().unwrap_or(true),
            });
            (!items.is_empty() && consumes).then_some((body, next.0))
        };
        // Computed once per rule: the walk below asks for each rule's shape several times.
        let shapes: Vec<Option<(usize, u32)>> = (0..grammar.rules.len()).map(shape_of).collect();
        let member_shape =
            |rule: usize| -> Option<(usize, u32)> { shapes.get(rule).copied().flatten() };
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
        let mut body = vec![0u8; rule_count];
        // Members of the walk in progress: a flag per rule, as a search of the path would make
        // a chain walked from its top (the order pruning leaves) quadratic in its length.
        let mut on_path = vec![false; rule_count];
        for start in 0..rule_count {
            if rank[start] != 0 || member_shape(start).is_none() {
                continue;
            }
            let mut path = vec![start];
            on_path[start] = true;
            let mut at = start;
            loop {
                let Some((_, next)) = member_shape(at) else {
                    break;
                };
                let next = next as usize;
                if next == at || on_path.get(next).copied().unwrap_or(true) || !same_body(at, next) {
                    break;
                }
                if rank[next] != 0 {
                    break;
                }
                path.push(next);
                on_path[next] = true;
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
                on_path[member] = false;
                base_rank += 1;
                rank[member] = base_rank;
                lowest[member] = base_lowest;
                body[member] = member_shape(member).map_or(0, |(index, _)| index as u8);
            }
        }
        let mid_character = rules_may_start_mid_character(grammar, &nullable);
        let character_items = (0..rule_count)
            .map(|rule| {
                rank[rule] != 0
                    && member_shape(rule).is_some_and(|(index, _)| {
                        let sequence = &grammar.rules[rule].alternatives[index];
                        items_start_characters(&sequence[..sequence.len() - 1], &nullable, &mid_character)
                    })
            })
            .collect();
        ChainRanks { rank, lowest, body, character_items }
    }
}

/// The symbols of `sequence` its first byte may come from: those up to and including the
/// first that cannot match the empty string.
fn leading_symbols<'a>(sequence: &'a [Symbol], nullable: &'a [bool]) -> impl Iterator<Item = &'a Symbol> {
    let mut open = true;
    sequence.iter().take_while(move |symbol| {
        let take = open;
        open = match symbol {
            Symbol::Whitespace => true,
            Symbol::Bytes(_) => false,
            Symbol::Rule(id) => nullable.get(id.index()).copied().unwrap_or(true),
        };
        take
    })
}

/// Whether the first byte `items` read can never continue a UTF-8 character (`items` do not
/// match the empty string: a chain member's body consumes).
fn items_start_characters(items: &[Symbol], nullable: &[bool], mid_character: &[bool]) -> bool {
    leading_symbols(items, nullable).all(|symbol| match symbol {
        Symbol::Bytes(set) => !may_continue_character(set),
        Symbol::Whitespace => true,
        Symbol::Rule(id) => !mid_character.get(id.index()).copied().unwrap_or(true),
    })
}

fn may_continue_character(set: &ByteSet) -> bool {
    (0x80..=0xBFu8).any(|byte| set.contains(byte))
}

/// Which rules may begin with a UTF-8 continuation byte: a worklist over the rules called
/// where an alternative may begin, so linear in the grammar's size.
fn rules_may_start_mid_character(grammar: &Grammar, nullable: &[bool]) -> Vec<bool> {
    let rule_count = grammar.rules.len();
    let mut marked = vec![false; rule_count];
    // called_first_by[r]: the rules with an alternative that may begin by calling r.
    let mut called_first_by: Vec<Vec<usize>> = vec![Vec::new(); rule_count];
    let mut queue = Vec::new();
    for (index, rule) in grammar.rules.iter().enumerate() {
        for alternative in &rule.alternatives {
            for symbol in leading_symbols(alternative, nullable) {
                match symbol {
                    Symbol::Bytes(set) if may_continue_character(set) && !marked[index] => {
                        marked[index] = true;
                        queue.push(index);
                    }
                    Symbol::Rule(id) => {
                        if let Some(callers) = called_first_by.get_mut(id.index()) {
                            callers.push(index);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    while let Some(rule) = queue.pop() {
        for &caller in &called_first_by[rule] {
            if !marked[caller] {
                marked[caller] = true;
                queue.push(caller);
            }
        }
    }
    marked
}

/// Adds a loop rule for every chain of `ranks` to `grammar` (see the module comment); returns
/// per chain (named by its lowest member) its loop rule. Existing rule ids do not change.
pub(crate) fn add_loop_rules(grammar: &mut Grammar, ranks: &ChainRanks) -> LoopRules {
    let mut loops: HashMap<u32, u32> = HashMap::new();
    for rule in 0..ranks.rank.len() {
        if ranks.rank[rule] == 0 || loops.contains_key(&ranks.lowest[rule]) {
            continue;
        }
        let body_index = ranks.body[rule] as usize;
        let Some(member) = grammar.rules.get(rule) else {
            continue;
        };
        let loop_id = grammar.rules.len() as u32;
        let mut sequence = member.alternatives[body_index].clone();
        if let Some(last) = sequence.last_mut() {
            *last = Symbol::Rule(RuleId(loop_id));
        }
        let mut alternatives = vec![Vec::new(), Vec::new()];
        alternatives[body_index] = sequence;
        let name = format!("{} (unbounded)", member.name);
        grammar.rules.push(Rule { name, alternatives });
        loops.insert(ranks.lowest[rule], loop_id);
    }
    // Twins of the alternatives that call into a chain, the calls going to the loops instead,
    // so that a frame before such a call (`"\"" char opt_255 "\""` with `minLength: 1`) can be
    // unbound too.
    let mut twins = Vec::new();
    for rule in 0..ranks.rank.len() {
        if ranks.rank[rule] != 0 {
            continue;
        }
        let Some(source) = grammar.rules.get(rule) else {
            continue;
        };
        let mut new_rules = Vec::new();
        for (alternative, sequence) in source.alternatives.iter().enumerate() {
            let mut twin = sequence.clone();
            let mut fewest = u32::MAX;
            let mut last_call = None;
            for (offset, symbol) in twin.iter_mut().enumerate() {
                let Symbol::Rule(called) = *symbol else {
                    continue;
                };
                let called = called.index();
                let rank = ranks.rank.get(called).copied().unwrap_or(0);
                if rank < TWIN_MIN_RANK {
                    continue;
                }
                let Some(&loop_rule) = ranks.lowest.get(called).and_then(|l| loops.get(l)) else {
                    continue;
                };
                *symbol = Symbol::Rule(RuleId(loop_rule));
                fewest = fewest.min(rank);
                last_call = Some(offset as u32);
            }
            if let Some(last_call) = last_call {
                let twin_rule = (grammar.rules.len() + new_rules.len()) as u32;
                let name = format!("{} (calls unbounded)", source.name);
                new_rules.push(Rule {
                    name,
                    alternatives: vec![twin],
                });
                twins.push(Twin {
                    rule: rule as u32,
                    alternative: alternative as u32,
                    twin_rule,
                    last_call,
                    fewest,
                });
            }
        }
        grammar.rules.extend(new_rules);
    }
    LoopRules { loops, twins }
}

/// A chain entered with fewer items than this is not worth a twin: masks are only taken from
/// loops far from the bound.
const TWIN_MIN_RANK: u32 = 3;

/// What [`add_loop_rules`] added: per chain (named by its lowest member) its loop rule, and
/// the twins of alternatives calling chains.
pub(crate) struct LoopRules {
    loops: HashMap<u32, u32>,
    twins: Vec<Twin>,
}

/// Alternative `alternative` of `rule` with its chain calls (the last at `last_call`, the
/// fewest items any allows `fewest`) going to loops, as the only alternative of `twin_rule`.
struct Twin {
    rule: u32,
    alternative: u32,
    twin_rule: u32,
    last_call: u32,
    fewest: u32,
}

impl CounterChains {
    /// Finds the chains of `grammar` (ranked by `ranks`, with loop rules `loops`);
    /// `alt_starts[alt_ranges[r]]` are the flattened start positions of rule `r`'s
    /// alternatives, `symbol_count` the flattened length.
    pub(crate) fn find(
        grammar: &Grammar,
        ranks: &ChainRanks,
        added: &LoopRules,
        alt_starts: &[u32],
        alt_ranges: &[(u32, u32)],
        symbol_count: usize,
    ) -> Self {
        let ChainRanks {
            rank,
            lowest,
            body: bodies,
            character_items: member_character_items,
        } = ranks;
        let rule_count = rank.len().min(grammar.rules.len());
        let mut chain_ids: HashMap<u32, u32> = HashMap::new();
        let mut member_starts: Vec<Vec<u32>> = Vec::new();
        let mut loop_starts: Vec<u32> = Vec::new();
        let mut character_items: Vec<bool> = Vec::new();
        let mut position_member = vec![(NONE, 0u32); symbol_count];
        for rule in 0..rule_count {
            if rank[rule] == 0 {
                continue;
            }
            let body = bodies[rule] as usize;
            let body_start = |rule: usize| -> Option<u32> {
                let (lo, _) = *alt_ranges.get(rule)?;
                alt_starts.get(lo as usize + body).copied()
            };
            let Some(start) = body_start(rule) else {
                continue;
            };
            let chain = *chain_ids.entry(lowest[rule]).or_insert_with(|| {
                member_starts.push(Vec::new());
                let loop_start = added
                    .loops
                    .get(&lowest[rule])
                    .and_then(|&loop_rule| body_start(loop_rule as usize));
                loop_starts.push(loop_start.unwrap_or(NONE));
                // Members of a chain share their body, so any one of them says.
                character_items.push(member_character_items.get(rule).copied().unwrap_or(false));
                (member_starts.len() - 1) as u32
            });
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
        let mut call_sites = vec![(NONE, 0u32); symbol_count];
        for twin in &added.twins {
            let start_of = |rule: u32, alternative: u32| -> Option<u32> {
                let (lo, _) = *alt_ranges.get(rule as usize)?;
                alt_starts.get((lo + alternative) as usize).copied()
            };
            let (Some(own), Some(twin_start)) = (
                start_of(twin.rule, twin.alternative),
                start_of(twin.twin_rule, 0),
            ) else {
                continue;
            };
            for offset in 0..=twin.last_call {
                if let Some(slot) = call_sites.get_mut((own + offset) as usize) {
                    *slot = (twin_start + offset, twin.fewest);
                }
            }
        }
        CounterChains {
            position_member,
            member_starts,
            loop_starts,
            character_items,
            call_sites,
        }
    }

    /// `position` moved into its chain's loop rule when it lies in a member with at least
    /// `min_rank` items left, with that count; `None` otherwise. The loop behaves exactly as
    /// the member for any text of fewer bytes than the count.
    #[inline]
    pub(crate) fn unbound_position(&self, position: u32, min_rank: u32) -> Option<(u32, u32)> {
        let &(chain, rank) = self.position_member.get(position as usize)?;
        if chain == NONE {
            // Before a call into a chain: the twin calls the loop. The call has not read an
            // item yet, so the same count argument holds.
            let &(twin_position, fewest) = self.call_sites.get(position as usize)?;
            return (twin_position != NONE && fewest >= min_rank)
                .then_some((twin_position, fewest));
        }
        if rank < min_rank {
            return None;
        }
        let own = *self.member_starts.get(chain as usize)?.get(rank as usize)?;
        let loop_start = *self.loop_starts.get(chain as usize)?;
        (own != NONE && loop_start != NONE).then(|| (loop_start + (position - own), rank))
    }

    /// Whether `position`, moved by [`CounterChains::unbound_position`], counts items that
    /// each read at least one character; `false` before a chain call (its twin's
    /// alternative may read anything first).
    pub(crate) fn counts_characters(&self, position: u32) -> bool {
        match self.position_member.get(position as usize) {
            Some(&(chain, _)) if chain != NONE => self.character_items.get(chain as usize).copied().unwrap_or(false),
            _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `c3 ::= "" | item c2`, `c2 ::= "" | item c1`, `c1 ::= "" | item end`, with `item`
    /// the first of `item_rules` (rule 5 on).
    fn chain_with(item_rules: Vec<Vec<Vec<Symbol>>>) -> Grammar {
        let rule = |name: &str, alternatives: Vec<Vec<Symbol>>| Rule { name: name.into(), alternatives };
        let call = |id: u32| Symbol::Rule(RuleId(id));
        let mut rules = vec![
            rule("root", vec![vec![call(1)]]),
            rule("c3", vec![vec![], vec![call(5), call(2)]]),
            rule("c2", vec![vec![], vec![call(5), call(3)]]),
            rule("c1", vec![vec![], vec![call(5), call(4)]]),
            rule("end", vec![vec![]]),
        ];
        for (index, alternatives) in item_rules.into_iter().enumerate() {
            rules.push(rule(&format!("item{index}"), alternatives));
        }
        Grammar { rules, root: RuleId(0), whitespace_budget: 0 }
    }

    fn bytes(lo: u8, hi: u8) -> Symbol {
        Symbol::Bytes(ByteSet::range(lo, hi))
    }

    #[test]
    fn a_chain_counts_characters_only_when_no_item_can_begin_mid_character() {
        let letters = chain_with(vec![vec![vec![bytes(b'a', b'z')]]]);
        let ranks = ChainRanks::of(&letters);
        assert_eq!(ranks.rank[1..4], [3, 2, 1]);
        assert!(ranks.character_items[1..4].iter().all(|&counts| counts));

        let continuations = chain_with(vec![vec![vec![bytes(0x80, 0xBF)]]]);
        assert!(!ChainRanks::of(&continuations).character_items[1]);

        // A nullable rule first, then one whose first byte may continue a character.
        let nested = chain_with(vec![
            vec![vec![Symbol::Rule(RuleId(6)), Symbol::Rule(RuleId(7))]],
            vec![vec![], vec![bytes(b'x', b'x')]],
            vec![vec![bytes(b'a', b'a')], vec![bytes(0xA0, 0xA0), bytes(b'b', b'b')]],
        ]);
        let ranks = ChainRanks::of(&nested);
        assert_eq!(ranks.rank[1], 3);
        assert!(!ranks.character_items[1]);
    }
}
