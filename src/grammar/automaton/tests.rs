//! Tests of the automaton: whole-input checks, whitespace budget, limits, left recursion,
//! ambiguity and the wording of what was expected.

use super::*;
use crate::check::{check_input, describe_byte_set, CheckOutcome};
use crate::ir::{literal_symbols, GrammarBuilder};

fn compile(grammar: Grammar) -> CompiledGrammar {
    match CompiledGrammar::new(grammar, &Limits::default()) {
        Ok(compiled) => compiled,
        Err(error) => panic!("compile failed: {error}"),
    }
}

/// root ::= "[" items? "]" ; items ::= digit ("," ws digit)*  (as right recursion)
fn list_grammar(budget: u32) -> Grammar {
    let mut b = GrammarBuilder::new();
    let root = b.declare("root");
    let items = b.declare("items");
    let more = b.declare("more");
    let digit = Symbol::Bytes(ByteSet::range(b'0', b'9'));
    b.define(
        root,
        vec![
            vec![
                Symbol::Bytes(ByteSet::single(b'[')),
                Symbol::Rule(items),
                Symbol::Bytes(ByteSet::single(b']')),
            ],
            literal_symbols(b"[]"),
        ],
    );
    b.define(items, vec![vec![digit, Symbol::Rule(more)]]);
    b.define(
        more,
        vec![
            vec![
                Symbol::Bytes(ByteSet::single(b',')),
                Symbol::Whitespace,
                digit,
                Symbol::Rule(more),
            ],
            vec![],
        ],
    );
    b.finish(root, budget)
}

#[test]
fn accepts_and_rejects_whole_inputs() {
    let g = compile(list_grammar(8));
    assert_eq!(check_input(&g, b"[]"), CheckOutcome::Match);
    assert_eq!(check_input(&g, b"[1,2, 3,\n\t4]"), CheckOutcome::Match);
    assert_eq!(
        check_input(&g, b"[1,2"),
        CheckOutcome::Incomplete {
            expected: "one of \",\" \"]\"".into()
        }
    );
    assert_eq!(
        check_input(&g, b"[1,\nx]"),
        CheckOutcome::Mismatch {
            offset: 4,
            line: 2,
            column: 1,
            expected: "one of [\\t-\\n] \"\\r\" \" \" [0-9]".into()
        }
    );
    assert_eq!(
        check_input(&g, b"[]]"),
        CheckOutcome::Mismatch {
            offset: 2,
            line: 1,
            column: 3,
            expected: "the end of the input".into()
        }
    );
}

#[test]
fn expected_bytes_read_like_grammar_text() {
    let set = |bytes: &[u8]| {
        bytes
            .iter()
            .fold(ByteSet::EMPTY, |s, b| s.union(&ByteSet::single(*b)))
    };
    assert_eq!(describe_byte_set(&set(b",]")), "one of \",\" \"]\"");
    assert_eq!(describe_byte_set(&set(b"\"")), "'\"'");
    assert_eq!(describe_byte_set(&ByteSet::range(b'0', b'9')), "[0-9]");
    let json_value = set(b"\n \"-0123456789[fnt{");
    assert_eq!(
        describe_byte_set(&json_value),
        "one of \"\\n\" \" \" '\"' \"-\" [0-9] \"[\" \"f\" \"n\" \"t\" \"{\""
    );
    let letters = (b'a'..=b'z').step_by(2).collect::<Vec<u8>>();
    assert_eq!(describe_byte_set(&set(&letters)), "[acegikmoqsuwy]");
    assert_eq!(
        describe_byte_set(&ByteSet::EMPTY),
        "nothing (the grammar cannot continue here)"
    );
}

#[test]
fn whitespace_budget_is_shared_by_the_document() {
    let g = compile(list_grammar(3));
    assert_eq!(check_input(&g, b"[1,  2, 3]"), CheckOutcome::Match);
    assert!(matches!(
        check_input(&g, b"[1,  2,  3]"),
        CheckOutcome::Mismatch { offset: 8, .. }
    ));
    let none = compile(list_grammar(0));
    assert!(matches!(
        check_input(&none, b"[1, 2]"),
        CheckOutcome::Mismatch { offset: 3, .. }
    ));
}

#[test]
fn deep_right_recursion_runs_in_constant_stack() {
    let g = compile(list_grammar(0));
    let mut input = b"[1".to_vec();
    for _ in 0..5000 {
        input.extend_from_slice(b",2");
    }
    input.push(b']');
    assert_eq!(check_input(&g, &input), CheckOutcome::Match);
}

#[test]
fn nesting_past_the_stack_limit_is_rejected_not_a_crash() {
    // value ::= "[" value "]" | "x"
    let mut b = GrammarBuilder::new();
    let value = b.declare("value");
    b.define(
        value,
        vec![
            vec![
                Symbol::Bytes(ByteSet::single(b'[')),
                Symbol::Rule(value),
                Symbol::Bytes(ByteSet::single(b']')),
            ],
            literal_symbols(b"x"),
        ],
    );
    let limits = Limits {
        max_stack_depth: 10,
        ..Limits::default()
    };
    let g = CompiledGrammar::new(b.finish(value, 0), &limits)
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(check_input(&g, b"[[[x]]]"), CheckOutcome::Match);
    let deep = format!("{}x{}", "[".repeat(20), "]".repeat(20));
    match check_input(&g, deep.as_bytes()) {
        CheckOutcome::Mismatch {
            expected, offset, ..
        } => {
            assert!(expected.contains("nesting deeper than 10"), "{expected}");
            assert!(offset < 12);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn oversized_states_are_rejected_not_stored() {
    let mut b = GrammarBuilder::new();
    let value = b.declare("value");
    b.define(
        value,
        vec![
            vec![
                Symbol::Bytes(ByteSet::single(b'[')),
                Symbol::Rule(value),
                Symbol::Bytes(ByteSet::single(b']')),
            ],
            literal_symbols(b"x"),
        ],
    );
    let limits = Limits {
        max_state_words: 12,
        ..Limits::default()
    };
    let g = CompiledGrammar::new(b.finish(value, 0), &limits)
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(check_input(&g, b"[x]"), CheckOutcome::Match);
    match check_input(&g, b"[[[[[[x]]]]]]") {
        CheckOutcome::Mismatch { expected, .. } => {
            assert!(expected.contains("larger than 12 words"), "{expected}")
        }
        other => panic!("{other:?}"),
    }
}

fn left_recursive(through_nullable: bool) -> Grammar {
    let mut b = GrammarBuilder::new();
    let expr = b.declare("expr");
    let term = b.literal("term", b"1");
    let maybe = b.add("maybe-space", vec![vec![], literal_symbols(b" ")]);
    let first = if through_nullable {
        vec![Symbol::Rule(maybe), Symbol::Rule(expr)]
    } else {
        vec![Symbol::Rule(expr)]
    };
    let mut alt = first;
    alt.extend(literal_symbols(b"+"));
    alt.push(Symbol::Rule(term));
    b.define(expr, vec![alt, vec![Symbol::Rule(term)]]);
    let root = b.add("root", vec![vec![Symbol::Rule(expr)]]);
    b.finish(root, 0)
}

#[test]
fn left_recursion_is_refused_naming_the_rule() {
    for through_nullable in [false, true] {
        match CompiledGrammar::new(left_recursive(through_nullable), &Limits::default()) {
            Err(GrammarError::LeftRecursion { rule, cycle, .. }) => {
                assert_eq!(rule, "expr");
                assert_eq!(cycle, "expr -> expr");
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn ambiguity_keeps_every_parse_alive() {
    // root ::= a "x" | a "y" ; a ::= "p" | "pp" — two stacks until the choice is made.
    let mut b = GrammarBuilder::new();
    let a = b.add("a", vec![literal_symbols(b"p"), literal_symbols(b"pp")]);
    let mut first = vec![Symbol::Rule(a)];
    first.extend(literal_symbols(b"x"));
    let mut second = vec![Symbol::Rule(a)];
    second.extend(literal_symbols(b"y"));
    let root = b.add("root", vec![first, second]);
    let g = compile(b.finish(root, 0));
    for input in [&b"px"[..], b"ppx", b"py", b"ppy"] {
        assert_eq!(check_input(&g, input), CheckOutcome::Match, "{input:?}");
    }
    assert!(matches!(
        check_input(&g, b"pppx"),
        CheckOutcome::Mismatch { offset: 2, .. }
    ));
}

#[test]
fn ambiguity_past_the_stack_limit_is_rejected_not_a_hang() {
    // root ::= a* "x" with a ::= "p" | "p" | ... : each "p" keeps every alternative alive.
    let mut b = GrammarBuilder::new();
    let alternatives: Vec<Vec<Symbol>> = (0..40)
        .map(|i| {
            let mut alt = literal_symbols(b"p");
            alt.extend(std::iter::repeat_n(Symbol::Whitespace, i % 3));
            alt
        })
        .collect();
    let a = b.add("a", alternatives);
    let nested = b.declare("nested");
    b.define(
        nested,
        vec![
            vec![Symbol::Rule(a), Symbol::Rule(nested), Symbol::Rule(a)],
            vec![],
        ],
    );
    let mut root_alt = vec![Symbol::Rule(nested)];
    root_alt.extend(literal_symbols(b"x"));
    let root = b.add("root", vec![root_alt]);
    let limits = Limits {
        max_stacks: 64,
        ..Limits::default()
    };
    let g = CompiledGrammar::new(b.finish(root, 4), &limits)
        .map_err(|e| e.to_string())
        .unwrap();
    let started = std::time::Instant::now();
    let outcome = check_input(&g, "p".repeat(200).as_bytes());
    assert!(started.elapsed().as_secs() < 10);
    match outcome {
        CheckOutcome::Mismatch { expected, .. } => {
            assert!(expected.contains("cannot continue"), "{expected}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_set_of_stacks_encodes_alike_whatever_order_it_came_in() {
    let stacks: [(&[u32], u32); 6] = [
        (&[4, 9, 2], 1),
        (&[], 0),
        (&[4, 9], 3),
        (&[4, 9, 2], 0),
        (&[7], 2),
        (&[4, 9], 3),
    ];
    let encode = |order: &[usize]| {
        let mut gathered = StepStacks::default();
        for &index in order {
            let (frames, ws_used) = stacks[index];
            gathered.push(frames, ws_used);
        }
        gathered.order();
        gathered.encode();
        (gathered.encoded.clone(), gathered.hash)
    };
    let (encoded, hash) = encode(&[0, 1, 2, 3, 4, 5]);
    for order in [[5, 4, 3, 2, 1, 0], [3, 1, 5, 0, 4, 2], [2, 0, 4, 1, 5, 3]] {
        assert_eq!(encode(&order), (encoded.clone(), hash), "{order:?}");
    }
    assert_eq!(config_hash(&encoded), hash);
    let mut decoded: Vec<(u32, Vec<u32>)> = decode(&encoded).map(|(w, f)| (w, f.to_vec())).collect();
    decoded.sort();
    // Of the two stacks [4, 9, 2], the one that used less whitespace stays.
    assert_eq!(
        decoded,
        vec![(0, vec![]), (0, vec![4, 9, 2]), (2, vec![7]), (3, vec![4, 9])]
    );
}

#[test]
fn stacks_built_on_a_hashed_prefix_hash_as_if_pushed_whole() {
    let mut on_prefix = StepStacks::default();
    on_prefix.hash_prefixes(&[3, 8, 5]);
    on_prefix.push_on_prefix(&[3, 8], &[6, 1], 2);
    on_prefix.push_on_prefix(&[], &[9], 0);
    let mut whole = StepStacks::default();
    whole.push(&[9], 0);
    whole.push(&[3, 8, 6, 1], 2);
    for gathered in [&mut on_prefix, &mut whole] {
        gathered.order();
        gathered.encode();
    }
    assert_eq!(on_prefix.encoded, whole.encoded);
    assert_eq!(on_prefix.hash, whole.hash);
}

#[test]
fn many_stacks_dealt_into_buckets_keep_one_canonical_order() {
    // Enough stacks to be dealt into buckets, sharing bottoms, with duplicates that differ
    // only in whitespace used.
    let stacks: Vec<(Vec<u32>, u32)> = (0..120u32)
        .map(|i| (vec![1, 2, 3, i % 45, i % 7], i % 3))
        .collect();
    let encode = |order: &mut dyn Iterator<Item = usize>| {
        let mut gathered = StepStacks::default();
        for index in order {
            let (frames, ws_used) = &stacks[index];
            gathered.push(frames, *ws_used);
        }
        gathered.order();
        gathered.encode();
        (gathered.encoded.clone(), gathered.hash)
    };
    let (encoded, hash) = encode(&mut (0..stacks.len()));
    assert_eq!(encode(&mut (0..stacks.len()).rev()), (encoded.clone(), hash));
    assert_eq!(encode(&mut (0..stacks.len()).map(|i| i * 7 % 120)), (encoded.clone(), hash));
    let mut expected: Vec<(Vec<u32>, u32)> = Vec::new();
    for (frames, ws_used) in &stacks {
        match expected.iter_mut().find(|(f, _)| f == frames) {
            Some((_, least)) => *least = (*least).min(*ws_used),
            None => expected.push((frames.clone(), *ws_used)),
        }
    }
    expected.sort();
    let mut decoded: Vec<(Vec<u32>, u32)> =
        decode(&encoded).map(|(w, f)| (f.to_vec(), w)).collect();
    decoded.sort();
    assert_eq!(decoded, expected);
}

#[test]
fn bytes_told_alike_step_to_the_same_configuration() {
    // Keys of declared names beside extra keys, strings, numbers and whitespace: tops that
    // split the bytes many ways.
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "main": {"type": "string"}, "mode": {"enum": ["fast", "slow"]},
            "count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}
        },
        "additionalProperties": {"type": "number"}
    });
    let grammar = match crate::schema::compile_schema(&schema) {
        Ok(grammar) => compile(grammar),
        Err(error) => panic!("schema refused: {error}"),
    };
    let mut seen: HashSet<Vec<u32>> = HashSet::new();
    let mut queue = vec![grammar.initial_config().to_vec()];
    let mut checked_wider = 0;
    while let Some(config) = queue.pop() {
        if seen.len() >= 400 || !seen.insert(config.clone()) {
            continue;
        }
        for byte in 0..=255u8 {
            let mut out = StepStacks::default();
            let Ok(alike) = grammar.step_telling_alike(&config, byte, &mut out) else { continue };
            assert!(alike.contains(byte), "a byte always steps like itself");
            let stepped = grammar.step(&config, byte).ok();
            for other in alike.iter() {
                assert_eq!(grammar.step(&config, other).ok(), stepped, "{other} stepped unlike {byte}");
            }
            checked_wider += usize::from(alike.len() > 1);
            if let Some(next) = stepped.filter(|next| !next.is_empty()) {
                queue.push(next);
            }
        }
    }
    assert!(seen.len() >= 100, "the walk reached only {} configurations", seen.len());
    assert!(checked_wider > 1000, "only {checked_wider} bytes had company");
}

#[test]
fn a_whitespace_shift_is_one_more_byte_used_by_every_stack_and_nothing_else() {
    let grammar = compile(list_grammar(8));
    let step = |config: &[u32], text: &[u8]| {
        text.iter().fold(config.to_vec(), |config, &byte| grammar.step(&config, byte).unwrap_or_default())
    };
    let after_comma = step(grammar.initial_config(), b"[1,");
    let one_space = step(&after_comma, b" ");
    assert!(is_whitespace_shift(&after_comma, &one_space));
    assert!(is_whitespace_shift(&one_space, &step(&one_space, b"\n")));
    // Two bytes spent, none spent, and other frames: not one shift.
    assert!(!is_whitespace_shift(&after_comma, &step(&after_comma, b"  ")));
    assert!(!is_whitespace_shift(&after_comma, &after_comma));
    assert!(!is_whitespace_shift(&one_space, &step(&one_space, b"2")));
    // Nothing to spend: `[1` reads no whitespace, so no step from it is a shift.
    let after_digit = step(grammar.initial_config(), b"[1");
    assert!(!is_whitespace_shift(&after_digit, &step(&after_digit, b",")));
}
