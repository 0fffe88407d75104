//! Masks from loops and their neighbours: the vocabulary's loop tables inside a string body
//! or a bounded string, states that lead into a loop without being one, and the closed skip
//! sets a searched pattern's states share. Uses the helpers of the matcher tests.

use super::*;

/// A synthetic vocabulary plus 2500 tokens of one to three `pieces` each: mostly the plain
/// ones; one token in 24 may also use the last three, which end a string or hold an escape.
fn string_vocabulary(seed: u64, rng_seed: u64, pieces: &[&str]) -> (Vec<Vec<u8>>, Vec<u32>) {
    let (mut vocabulary, eog) = synthetic_vocabulary(seed, 700);
    let mut rng = TestRng::new(rng_seed);
    for count in 0..2500 {
        let mut token = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let piece = pieces[rng.below(if count % 24 == 0 { pieces.len() } else { pieces.len() - 3 })];
            token.extend_from_slice(piece.as_bytes());
        }
        vocabulary.push(token);
    }
    (vocabulary, eog)
}

/// Inside a string body, an extra key or any other loop, masks come from the vocabulary's
/// loop tables (the tokens within the loop, and a walk of the others' exits): a vocabulary of
/// mostly plain text, so that the tables pay and are built, and grammars whose strings close
/// into more structure, hold escapes, and are keys with their own value schemas.
#[test]
fn masks_from_loop_tables_are_exact() {
    let (mut vocabulary, eog) = synthetic_vocabulary(29, 700);
    let mut rng = TestRng::new(3);
    let plain = [
        "hello", " the", "\u{e9}", "\u{3053}", "ab", "x", "e", "1", " ", "-", "\u{1F600}", "Nf",
    ];
    // Plain text, a tenth of it opening a string, so that the tables of the tokens after
    // an opening quote pay too.
    for count in 0..2500 {
        let mut token = if count % 10 == 0 { b"\"".to_vec() } else { Vec::new() };
        for _ in 0..1 + rng.below(3) {
            token.extend_from_slice(plain[rng.below(plain.len())].as_bytes());
        }
        vocabulary.push(token);
    }
    let source = std::fs::read(format!("{CORPUS}/json.gbnf")).unwrap_or_default();
    let grammar =
        Arc::new(compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{e}")));
    let trie = check_walks_on("json", grammar.clone(), &vocabulary, &eog, 3, 40);
    // A value's start, where a big subtree opens a string: single bytes are tokens 0..=255.
    let mut matcher = Matcher::new(grammar, trie.clone());
    for byte in *b"{\"a\":" {
        matcher.compute_mask();
        matcher.commit(u32::from(byte)).unwrap_or_else(|e| panic!("{e}"));
    }
    let mask = matcher.compute_mask().clone();
    for token in 0..vocabulary.len() as u32 {
        let expected = allowed_by_definition(&matcher, &vocabulary, &eog, token);
        assert_eq!(mask.is_set(token), expected, "value start: token {token}");
    }
    assert!(trie.loop_tables_built() > 0, "no loop tables were built");
    for schema in [
        serde_json::json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "string"}}},
            "additionalProperties": {"type": ["string", "null"]}}),
        serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}},
            "patternProperties": {"^x-[a-z]+$": {"type": "integer"}, "^l": {"type": "string"}},
            "additionalProperties": false}),
        serde_json::json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z ]+$"}}),
    ] {
        let grammar = schema_grammar(&schema, &Limits::default());
        check_walks_on(&schema.to_string(), grammar, &vocabulary, &eog, 3, 40);
    }
}

/// Inside a string with `maxLength` and few characters left, masks come from the loop tables
/// of the string's characters with a character budget (`mask_from_bounded_loop`): tokens
/// within the set up to the budget, and exits walked from the chain state after their prefix.
/// The strings are walked character by character to their bound, with escapes and multi-byte
/// characters on the way, and `minLength` keeps a closing quote out of the first states.
#[test]
fn masks_from_bounded_loop_tables_are_exact() {
    let plain = ["hello", " the", "\u{e9}", "\u{3053}", "ab", "x", "e", "1", " ", "-", "Nf", "\"", "\\n", "\","];
    let (vocabulary, eog) = string_vocabulary(37, 5, &plain);
    let mut used = 0;
    for (schema, text) in [
        (serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 9}},
            "required": ["a"], "additionalProperties": false}), "{\"a\":\"xe\\n1\u{e9}-ab\"}"),
        (serde_json::json!({"type": "string", "minLength": 4, "maxLength": 7}), "\"\u{3053}x ex1-\""),
        (serde_json::json!({"type": "array", "items": {"type": "string", "maxLength": 3}}), "[\"abe\",\"x\"]"),
    ] {
        let grammar = schema_grammar(&schema, &Limits::default());
        let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
        let mut matcher = Matcher::new(grammar.clone(), trie.clone());
        let characters: Vec<Vec<u8>> = text.chars().map(|c| c.to_string().into_bytes()).collect();
        // Multi-byte characters are committed byte by byte (tokens 0..=255 are single bytes).
        let bytes: Vec<[u8; 1]> = characters.concat().into_iter().map(|b| [b]).collect();
        let steps: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        check_sequence(&schema.to_string(), &mut matcher, &vocabulary, &eog, &steps);
        used += matcher.bounded_loop_masks;
        check_walks_on(&schema.to_string(), grammar, &vocabulary, &eog, 4, 40);
    }
    assert!(used > 0, "no mask came from a bounded chain's tables");
}

/// A state whose characters lead into a loop (here the state after `<`, whose first letter
/// enters `rest`) gets a skip set with no character limit too, but its loop tables would be
/// wrong: an exit such as `>` is walked from the state itself, where it dies, though after
/// the token's letters it is alive. Its masks must come from elsewhere, even once its set
/// is known.
#[test]
fn a_state_leading_into_a_loop_is_not_read_as_the_loop() {
    let mut rng = TestRng::new(11);
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    for count in 0..3000 {
        let mut token: Vec<u8> = (0..1 + rng.below(5)).map(|_| letters[rng.below(26)]).collect();
        if count % 9 == 0 {
            token.push(b'>');
        }
        vocabulary.push(token);
    }
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    let source = b"root ::= \"<\" ( [a-z] rest | \"?\" ) \"!\"\nrest ::= [a-z]* \">\"\n";
    let grammar = Arc::new(compile_gbnf(source, &Limits::default()).unwrap_or_else(|e| panic!("{e}")));
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie.clone());
    matcher.compute_mask();
    matcher.commit(u32::from(b'<')).unwrap_or_else(|e| panic!("{e}"));
    let set = {
        let mut caches = SharedCaches::lock(&matcher.shared);
        caches.table.skip_set(matcher.state, &trie.byte_weights, false, CHAIN_MAX)
    };
    assert!(set.is_some_and(|set| set.capacity == u32::MAX && !set.loops), "{set:?}");
    matcher.forget_masks();
    let mask = matcher.compute_mask().clone();
    for token in 0..vocabulary.len() as u32 {
        let expected = allowed_by_definition(&matcher, &vocabulary, &eog, token);
        assert_eq!(mask.is_set(token), expected, "token {token} {:?}", String::from_utf8_lossy(&vocabulary[token as usize]));
    }
}

/// Inside a string searched for a pattern (four hex digits anywhere), a hex digit moves the
/// pattern's automaton on rather than back, so no loop holds the characters most tokens are
/// made of. The pattern's states form a closed set under every character but the quote and
/// the backslash (UTF-8 ones too), and share that set as their skip set; masks stay exact
/// from each of them, the quote included, which only the last one allows.
#[test]
fn a_pattern_searched_in_a_string_shares_one_closed_skip_set() {
    let pieces = ["be", "ef", "12", "0a", "cafe", "the", "x", " ", "-", "\u{e9}", "\u{3053}", "\"", "\\n", "\","];
    let (mut vocabulary, eog) = string_vocabulary(41, 7, &pieces);
    vocabulary.extend(pieces.iter().map(|piece| piece.as_bytes().to_vec()));
    let schema = serde_json::json!({"type": "array", "items": {"type": "string", "pattern": "[a-f0-9]{4}"}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = check_walks_on("pattern", grammar.clone(), &vocabulary, &eog, 4, 40);
    assert!(trie.many_non_ascii, "the closed set's UTF-8 characters go untested");
    let mut matcher = Matcher::new(grammar, trie.clone());
    check_sequence("pattern", &mut matcher, &vocabulary, &eog, &[b"[", b"\""]);
    let set = {
        let mut caches = SharedCaches::lock(&matcher.shared);
        caches.table.skip_set(matcher.state, &trie.byte_weights, true, CHAIN_MAX)
    };
    let closed = |set: &SkipSet| {
        !set.loops
            && set.capacity == u32::MAX
            && "ax3 \u{e9}\u{3053}".bytes().all(|byte| set.bytes.contains(byte))
            && !set.bytes.contains(b'"')
    };
    assert!(set.as_ref().is_some_and(closed), "{set:?}");
    matcher.forget_masks();
    let steps: [&[u8]; 8] = [b"x", b"be", b" ", b"ef", "\u{e9}".as_bytes(), b"12", b"0a", b"\""];
    check_sequence("pattern", &mut matcher, &vocabulary, &eog, &steps);
    let caches = SharedCaches::lock(&matcher.shared);
    let sharing = (0..caches.table.len() as u32)
        .filter(|&state| caches.table.known_skip_set(state).is_some_and(|known| *known == set.unwrap_or(SkipSet::NONE)))
        .count();
    // The pattern's four states: none to three digits of it read.
    assert!(sharing >= 4, "only {sharing} states share the closed set");
}

/// The skip set of a state that loops on ASCII characters holds the multi-byte characters
/// that lead back to it, whether or not the vocabulary asks for UTF-8 to be explored: worked
/// out once from the top frames of the loop's stacks, so the second loop with the same top
/// (`u` again, followed by other text) makes none of the mid-character states again. A
/// character that completes `u` returns into the frames below, not to the loop, and one
/// outside the class dies: neither is in the set.
#[test]
fn a_loops_utf8_characters_are_worked_out_once_for_every_loop_with_its_top_frames() {
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    vocabulary.extend(["ab", "\u{e9}", "\u{3053}", "\u{1F600}"].iter().map(|t| t.as_bytes().to_vec()));
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    let source = "root ::= \"(\" u \")(\" u \")\"\nu ::= s \"\u{e9}\" | s \"!\"\ns ::= [^()!\u{1F600}]*\n";
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    for explore_utf8 in [false, true] {
        // A grammar of its own each time: matchers of one grammar share its table.
        let grammar = Arc::new(compile_gbnf(source.as_bytes(), &Limits::default()).unwrap_or_else(|e| panic!("{e}")));
        let mut matcher = Matcher::new(grammar, trie.clone());
        let mut new_states = Vec::new();
        // Committed byte by byte without masks, so that only the skip sets make states.
        for text in [&b"(a"[..], &b"!)(a"[..]] {
            for &byte in text {
                matcher.commit(u32::from(byte)).unwrap_or_else(|e| panic!("{e}"));
            }
            let mut caches = SharedCaches::lock(&matcher.shared);
            let before = caches.table.len();
            let set = caches.table.skip_set(matcher.state, &trie.byte_weights, explore_utf8, CHAIN_MAX);
            assert!(set.is_some_and(|set| set.loops), "{set:?}");
            let set = set.unwrap_or(SkipSet::NONE);
            for (character, back) in [("\u{3053}", true), ("\u{e9}", false), ("\u{1F600}", false)] {
                let after = character.bytes().try_fold(matcher.state, |state, byte| {
                    Some(caches.table.next(state, byte)).filter(|&next| next != DEAD && next != FULL)
                });
                assert_eq!(after == Some(matcher.state), back, "{character} from the loop");
                assert_eq!(character.bytes().all(|byte| set.bytes.contains(byte)), back, "{character} in {set:?}");
            }
            new_states.push(caches.table.len() - before);
        }
        // The first loop made the mid-character states (33 new states here); the second
        // reuses them (8 here), where a walk of its own would make as many again.
        assert!(new_states[1] * 2 < new_states[0], "new states per loop: {new_states:?}");
    }
}

/// Extra keys that must not hold a word (a `patternProperties` entry named like a keyword,
/// with the schema `false`): the key's loop is left by the word's first letter, so every
/// token holding that letter is an exit. Past the letter the walk is back in the loop, where
/// the loop's skip set allows the rest of an exit whole instead of stepping it to its end;
/// masks stay exact on the way into the word, at its last letter and after it.
#[test]
fn exits_back_in_their_loop_are_allowed_by_its_skip_set() {
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let mut rng = TestRng::new(13);
    let plain = ["the", "x", "e", " ", "-", "\u{e9}", "\u{3053}", "1", "mor"];
    let rare = ["a", "ad", "add", "itional", "Propertie", "s", "\"", "\\n", "\":"];
    // The word's letters must be rare next to the loop's, or the key's states would share a
    // closed skip set instead of a loop with tables.
    for count in 0..3000 {
        let mut token = match count % 64 {
            0 => rare[rng.below(rare.len())].as_bytes().to_vec(),
            _ => Vec::new(),
        };
        for _ in 0..1 + rng.below(3) {
            token.extend_from_slice(plain[rng.below(plain.len())].as_bytes());
        }
        vocabulary.push(token);
    }
    vocabulary.extend(rare.iter().chain(&plain).map(|piece| piece.as_bytes().to_vec()));
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    let schema = serde_json::json!({"type": "object", "patternProperties": {
        ".*": {"type": "array", "items": {"type": "string"}}, "additionalProperties": false}});
    let grammar = schema_grammar(&schema, &Limits::default());
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie.clone());
    let steps: [&[u8]; 12] =
        [b"{", b"\"", b"the", b"a", b"x", b"add", b"itional", b"Propertie", b"x", b"\":", b"[", b"]"];
    check_sequence("no keyword in keys", &mut matcher, &vocabulary, &eog, &steps);
    assert!(trie.loop_tables_built() > 0, "no loop tables were built");
    assert!(matcher.exit_subtrees_skipped > 0, "no exit subtree was allowed by a skip set");
}
