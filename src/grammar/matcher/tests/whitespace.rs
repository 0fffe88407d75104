//! Mask walks through whitespace runs (`lexer_whitespace.rs`): exactness where runs spend
//! the budget, end the document or cross a table clear, and the states a run state's mask
//! makes. Uses the helpers of the matcher tests.

use super::*;

/// A vocabulary heavy in whitespace runs, as real ones are: indentation of every length,
/// mixed newlines, tabs and spaces, and runs that open or close structure after them.
fn whitespace_vocabulary(seed: u64) -> (Vec<Vec<u8>>, Vec<u32>) {
    let (mut vocabulary, eog) = synthetic_vocabulary(seed, 500);
    let mut rng = TestRng::new(seed);
    let after = ["", "\"", "}", "]", "{", "[", ",", ":", "1", "\"a", "\": ", ",\n", "\"a\":"];
    for length in 1..=40 {
        let spaces = " ".repeat(length);
        vocabulary.push(spaces.clone().into_bytes());
        vocabulary.push(format!("\n{spaces}").into_bytes());
        vocabulary.push(format!(",\n{spaces}\"").into_bytes());
        let mut mixed = Vec::new();
        for _ in 0..length {
            mixed.push(b" \n\t\r"[rng.below(4)]);
        }
        mixed.extend_from_slice(after[rng.below(after.len())].as_bytes());
        vocabulary.push(mixed);
    }
    (vocabulary, eog)
}

/// Mask walks read whitespace runs as one state plus an offset (`lexer_whitespace.rs`): the
/// masks stay exact along walks that spend the budget (so runs cross its end mid-token), with
/// runs mixing newlines, tabs and spaces, in tables so small that they clear mid-run.
#[test]
fn masks_are_exact_through_whitespace_runs() {
    let (vocabulary, eog) = whitespace_vocabulary(31);
    let tiny = Limits { transition_states: 8, mask_cache: 2, ..Limits::default() };
    for schema in [
        serde_json::json!({"type": "object", "properties": {
            "a": {"type": "array", "items": {"type": "integer"}},
            "b": {"type": "object", "additionalProperties": {"type": "string"}}}}),
        serde_json::json!({"type": "array", "items": {"type": "object",
            "properties": {"a": {"type": "integer"}}, "required": ["a"]}}),
    ] {
        for limits in [Limits::default(), tiny.clone()] {
            let grammar = schema_grammar(&schema, &limits);
            check_walks_on(&schema.to_string(), grammar, &vocabulary, &eog, 4, 30);
        }
    }
    // The budget (64 bytes) runs out inside a run: 20 + 40 spaces leave 4.
    let grammar = schema_grammar(&serde_json::json!({"type": "array"}), &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie);
    let (twenty, forty) = (" ".repeat(20), " ".repeat(40));
    let sequence: [&[u8]; 6] = [b"[", twenty.as_bytes(), b"1", forty.as_bytes(), b",", b"   "];
    check_sequence("budget", &mut matcher, &vocabulary, &eog, &sequence);
    // Runs of spaces alone (the subtree under a space holds 40 of them) were allowed whole.
    assert!(matcher.run_subtrees_allowed > 0, "no whitespace subtree was allowed whole");
    matcher.compute_mask();
    assert!(matcher.is_allowed(vocabulary.iter().position(|t| t == b"1").unwrap_or(0) as u32));
    let five = vocabulary.iter().position(|t| t == b"     ").unwrap_or(0) as u32;
    assert!(!matcher.is_allowed(five), "a run past the budget");
}

/// A long whitespace token right after a number: its first byte ends the number, the rest
/// spends budget. Masks stay exact where the budget left after the number is about the run's
/// length (the run fits, reaches the end of the budget, or passes it).
#[test]
fn a_run_after_a_number_is_checked_against_the_budget_left() {
    let (vocabulary, eog) = whitespace_vocabulary(7);
    let grammar = schema_grammar(&serde_json::json!({"type": "array"}), &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    for before in [20, 23, 24, 25, 28] {
        let mut matcher = Matcher::new(grammar.clone(), trie.clone());
        let spaces = " ".repeat(before);
        let sequence: [&[u8]; 4] = [b"[", spaces.as_bytes(), b"1", b","];
        check_sequence(&format!("{before} spaces before"), &mut matcher, &vocabulary, &eog, &sequence);
    }
}

/// A grammar whose document may end in whitespace, with a small budget: a run can end the
/// document, reach the budget exactly, or pass it.
#[test]
fn a_whitespace_run_can_end_the_document() {
    use crate::ir::{literal_symbols, GrammarBuilder, Symbol};
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for text in ["[ ", "1 ", "]  ", "] \n ", " ]\n", " \t", "  1", "\n\n", "   ", "    ", "]\n\n\n\n\n\n"] {
        vocabulary.push(text.as_bytes().to_vec());
    }
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    for budget in [0, 1, 2, 3, 6, 9] {
        let mut builder = GrammarBuilder::new();
        let root = builder.declare("root");
        let mut document = literal_symbols(b"[");
        document.extend([Symbol::Whitespace, Symbol::Whitespace]);
        document.extend(literal_symbols(b"1"));
        document.push(Symbol::Whitespace);
        document.extend(literal_symbols(b"]"));
        document.push(Symbol::Whitespace);
        builder.define(root, vec![document]);
        let grammar = Arc::new(
            CompiledGrammar::new(builder.finish(root, budget), &Limits::default())
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let trie = check_walks_on(&format!("budget {budget}"), grammar.clone(), &vocabulary, &eog, 6, 8);
        if budget == 6 {
            let mut matcher = Matcher::new(grammar, trie);
            let sequence: [&[u8]; 4] = [b"[ ", b"1 ", b"] \n ", b" "];
            check_sequence("end", &mut matcher, &vocabulary, &eog, &sequence);
            assert!(matcher.is_accepting());
        }
    }
}

/// A state that reads whitespace only by spending budget has its whitespace walked as runs:
/// its mask makes no state per run length, even where the walk finds enough alive below it to
/// consider working out a skip set (which would follow the run a state per byte).
#[test]
fn a_mask_at_a_whitespace_run_makes_no_state_per_run_length() {
    use crate::automaton::is_whitespace_shift;
    // Runs of every length that end the token, mixing all four whitespace bytes: hundreds
    // of trie nodes alive below the state after `[`, none of which could spend its budget.
    let (mut vocabulary, eog) = synthetic_vocabulary(7, 500);
    let mut rng = TestRng::new(7);
    for length in 1..=40 {
        for _ in 0..8 {
            vocabulary.push((0..length).map(|_| b" \n\t\r"[rng.below(4)]).collect());
        }
    }
    let schema = serde_json::json!({"type": "array", "items": {"type": "integer"}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie);
    let open = vocabulary.iter().position(|t| t == b"[").unwrap_or(0) as u32;
    matcher.commit(open).unwrap_or_else(|e| panic!("{e}"));
    let states_before = matcher.stats().states as u32;
    matcher.compute_mask();
    let caches = SharedCaches::lock(&matcher.shared);
    let made: Vec<&[u32]> = (states_before..caches.table.len() as u32)
        .map(|state| caches.table.config(state))
        .collect();
    // The states after one, two, ... whitespace bytes from the state the mask was walked
    // from (the one after `[`, its budget normalized).
    let root = caches.table.known_mask_state(matcher.state).map_or(matcher.state, |root| root.state);
    let mut run = caches.table.config(root);
    let mut run_length = 0;
    while let Some(next) = made.iter().find(|config| is_whitespace_shift(run, config)) {
        run = next;
        run_length += 1;
    }
    // Probing the state's bytes steps a space or two; a skip set would follow the run to
    // the vocabulary's longest token (32 states here).
    assert!(run_length <= 2, "a state per whitespace run length: {run_length} of them");
}

/// Far from the end of the budget a mask comes from the state with no whitespace used, and a
/// commit reads its successor off that state's transitions, spending the whitespace lowered
/// (`state_after_via_mask_state`). The states reached are checked against stepping byte by
/// byte (`check_sequence`), through tokens that spend budget and tokens that do not, up to
/// where the budget left is within the horizon and commits step the real state again.
#[test]
fn successors_are_read_off_the_mask_state_while_only_whitespace_was_lowered() {
    let (vocabulary, eog) = whitespace_vocabulary(13);
    let schema = serde_json::json!({
        "type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie);
    let spaces = " ".repeat(12);
    let mut sequence: Vec<&[u8]> = vec![b"[", b"{", b"\"", b"a", b"\"", b":", b" ", b"1", b"}"];
    // 4 x 13 bytes: the budget (64) nearly spent, never passed.
    for _ in 0..4 {
        sequence.extend([b",".as_slice(), b"\n", spaces.as_bytes(), b"{", b"\"", b"a", b"\"", b":", b"2", b"}"]);
    }
    check_sequence("array of objects", &mut matcher, &vocabulary, &eog, &sequence);
    assert!(matcher.successors_via_mask_state > 0, "no successor came from a mask state");
}

/// Inside a string a run of spaces is text, each space a character of the string's bounded
/// count. At the string's start (`minLength` not yet met, so the count stays put), after a
/// space before the array, the mask state only had its whitespace used lowered, and the runs
/// longer than the horizon are checked one by one: from the string's unbounded loop, not
/// through a new count state per space. The masks stay exact on the way.
#[test]
fn long_runs_inside_a_bounded_string_are_stepped_from_its_loop() {
    let (vocabulary, eog) = whitespace_vocabulary(17);
    let schema = serde_json::json!({"type": "array", "items":
        {"type": "string", "minLength": 1, "maxLength": 200}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let longest_run = trie.long_tokens.iter().map(|long| long.whitespace_bytes).max().unwrap_or(0);
    assert!(longest_run > trie.horizon + 1, "no run long enough to be checked one by one");
    let mut matcher = Matcher::new(grammar, trie);
    let mut made = 0;
    let first: [&[u8]; 3] = [b" ", b"[", b"\""];
    let second: [&[u8]; 3] = [b"\"", b",", b"\""];
    for (before, start) in [(&first[..], b"x".as_slice()), (&second[..], b"y")] {
        check_sequence("bounded strings", &mut matcher, &vocabulary, &eog, before);
        matcher.compute_mask();
        let own_mask_state = {
            let caches = SharedCaches::lock(&matcher.shared);
            caches.table.known_mask_state(matcher.state).is_some_and(|root| root.state == matcher.state)
        };
        assert!(!own_mask_state, "the string's start is its own mask state: no long run is checked");
        let states_before = matcher.long_check_states;
        // The mask at the string's start, then its first character.
        check_sequence("bounded strings", &mut matcher, &vocabulary, &eog, &[start]);
        made += matcher.long_check_states - states_before;
    }
    check_sequence("bounded strings", &mut matcher, &vocabulary, &eog, &[b"\"", b"]"]);
    assert!(made < longest_run as usize / 2, "{made} states made checking runs of up to {longest_run} spaces");
}

/// Long whitespace tokens (past the horizon) that a normalized mask checks one by one are
/// classified from the mask state, whose whitespace used was lowered alike on every stack,
/// not from the current state: the masks stay exact, also for the token that spends the
/// budget to its last byte (checked without interning the states it passes through), and the
/// checks make no state (the current one's would be a new state per position).
#[test]
fn long_whitespace_tokens_are_classified_from_the_lowered_mask_state() {
    use crate::schema::WHITESPACE_BUDGET;
    let (mut vocabulary, eog) = synthetic_vocabulary(11, 500);
    // Up to past the budget: the 64-space token spends it exactly.
    for length in 1..=70 {
        vocabulary.push(" ".repeat(length).into_bytes());
        vocabulary.push(format!("\n{}", " ".repeat(length)).into_bytes());
    }
    let schema = serde_json::json!({"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "integer"}}, "b": {"type": "string"}}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    assert!(trie.long_tokens.iter().any(|token| token.whitespace_bytes == WHITESPACE_BUDGET));
    let mut matcher = Matcher::new(grammar, trie);
    // One space early: every later position is a state with whitespace used, lowered for
    // its mask.
    let sequence: [&[u8]; 11] = [b"{", b" ", b"\"", b"a", b"\"", b":", b"[", b"1", b",", b"2", b"]"];
    check_sequence("lowered", &mut matcher, &vocabulary, &eog, &sequence);
    assert!(matcher.successors_via_mask_state > 0, "no position had a lowered mask state");
    assert_eq!(matcher.long_check_states, 0, "states made checking long whitespace tokens");
}
