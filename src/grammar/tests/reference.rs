//! Property test: on random small grammars and random inputs, the automaton accepts exactly
//! what a simple memoized backtracking recognizer over the same IR accepts.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use crate::automaton::CompiledGrammar;
use crate::check::{check_input, CheckOutcome};
use crate::ir::{ByteSet, Grammar, Rule, RuleId, Symbol};
use crate::limits::Limits;

/// Every (end offset, whitespace used) at which `symbols` can finish when started at `start`.
struct Reference<'a> {
    grammar: &'a Grammar,
    input: &'a [u8],
    memo: HashMap<(u32, usize, u32), BTreeSet<(usize, u32)>>,
}

impl Reference<'_> {
    fn sequence(
        &mut self,
        symbols: &[Symbol],
        start: usize,
        ws_used: u32,
    ) -> BTreeSet<(usize, u32)> {
        let mut frontier: BTreeSet<(usize, u32)> = [(start, ws_used)].into_iter().collect();
        for symbol in symbols {
            let mut next = BTreeSet::new();
            for &(at, used) in &frontier {
                next.extend(self.symbol(*symbol, at, used));
            }
            frontier = next;
        }
        frontier
    }

    fn symbol(&mut self, symbol: Symbol, at: usize, ws_used: u32) -> BTreeSet<(usize, u32)> {
        let mut ends = BTreeSet::new();
        match symbol {
            Symbol::Bytes(set) => {
                if self.input.get(at).is_some_and(|b| set.contains(*b)) {
                    ends.insert((at + 1, ws_used));
                }
            }
            Symbol::Whitespace => {
                ends.insert((at, ws_used));
                let mut k = 0;
                while self
                    .input
                    .get(at + k)
                    .is_some_and(|b| b" \t\n\r".contains(b))
                    && ws_used + (k as u32) < self.grammar.whitespace_budget
                {
                    k += 1;
                    ends.insert((at + k, ws_used + k as u32));
                }
            }
            Symbol::Rule(id) => {
                if let Some(known) = self.memo.get(&(id.0, at, ws_used)) {
                    return known.clone();
                }
                let alternatives = self.grammar.rules[id.index()].alternatives.clone();
                for alternative in &alternatives {
                    ends.extend(self.sequence(alternative, at, ws_used));
                }
                self.memo.insert((id.0, at, ws_used), ends.clone());
            }
        }
        ends
    }
}

fn reference_accepts(grammar: &Grammar, input: &[u8]) -> bool {
    let mut reference = Reference {
        grammar,
        input,
        memo: HashMap::new(),
    };
    reference
        .symbol(Symbol::Rule(grammar.root), 0, 0)
        .iter()
        .any(|(end, _)| *end == input.len())
}

fn symbol_strategy(rule_count: u32) -> impl Strategy<Value = Symbol> {
    prop_oneof![
        3 => prop::sample::select(vec![
            ByteSet::single(b'a'),
            ByteSet::single(b'b'),
            ByteSet::range(b'a', b'b'),
            ByteSet::single(b' '),
        ])
        .prop_map(Symbol::Bytes),
        1 => Just(Symbol::Whitespace),
        3 => (0..rule_count).prop_map(|r| Symbol::Rule(RuleId(r))),
    ]
}

fn grammar_strategy() -> impl Strategy<Value = Grammar> {
    (1u32..5, 0u32..4).prop_flat_map(|(rule_count, budget)| {
        let alternative = prop::collection::vec(symbol_strategy(rule_count), 0..4);
        let rule = prop::collection::vec(alternative, 1..4);
        prop::collection::vec(rule, rule_count as usize).prop_map(move |rules| Grammar {
            rules: rules
                .into_iter()
                .enumerate()
                .map(|(i, alternatives)| Rule {
                    name: format!("r{i}"),
                    alternatives,
                })
                .collect(),
            root: RuleId(0),
            whitespace_budget: budget,
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn automaton_agrees_with_the_reference(
        grammar in grammar_strategy(),
        inputs in prop::collection::vec(prop::collection::vec(prop::sample::select(b"ab \n".to_vec()), 0..7), 1..12),
    ) {
        // Left-recursive grammars are refused (and would not terminate in the reference).
        let Ok(compiled) = CompiledGrammar::new(grammar.clone(), &Limits::default()) else {
            return Ok(());
        };
        for input in inputs {
            let outcome = check_input(&compiled, &input);
            if let CheckOutcome::Mismatch { expected, .. } = &outcome {
                prop_assume!(!expected.starts_with("(cannot continue"));
            }
            prop_assert_eq!(outcome == CheckOutcome::Match, reference_accepts(&grammar, &input), "input {:?} outcome {:?}", String::from_utf8_lossy(&input), outcome);
        }
    }
}
