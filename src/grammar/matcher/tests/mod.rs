//! Mask exactness: on every state of seeded random walks through the sample grammars, a token
//! is in the mask if and only if feeding its bytes one by one keeps the automaton alive (and
//! an end-of-generation token exactly when the automaton accepts).

use std::sync::Arc;

use super::*;
use crate::gbnf::compile_gbnf;
use crate::limits::Limits;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/grammars");

/// xorshift64*: deterministic and dependency-free.
pub(crate) struct TestRng(u64);

impl TestRng {
    pub(crate) fn new(seed: u64) -> Self {
        TestRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A vocabulary shaped like a real one: every single byte, multi-byte pieces of ASCII and of
/// UTF-8 characters (some cut mid-character), duplicates, control tokens and one EOG token.
pub(crate) fn synthetic_vocabulary(seed: u64, size: usize) -> (Vec<Vec<u8>>, Vec<u32>) {
    let mut rng = TestRng::new(seed);
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let pieces: Vec<&str> = vec![
        " ",
        "\n",
        "\t",
        "- ",
        "\"",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "=",
        "(",
        ")",
        "+",
        "1",
        "0",
        "9",
        ". ",
        "e",
        "a",
        "x",
        "int",
        " ws",
        "true",
        "null",
        "\\",
        "\\u",
        "O-O",
        "Nf",
        "\u{e9}",
        "\u{3053}",
        "\u{3093}",
        "\u{4e16}",
        "\u{1F600}",
        "ab",
        "hello",
        " the",
        "\r\n",
        "\u{2028}",
        "\u{85}",
        "x\u{2029}",
        "\u{e8}",
        "\u{e9}\u{e8}",
        "!",
    ];
    while tokens.len() < size {
        let mut token = Vec::new();
        for _ in 0..1 + rng.below(3) {
            token.extend_from_slice(pieces[rng.below(pieces.len())].as_bytes());
        }
        // Cut some tokens mid-character so partial UTF-8 crosses token boundaries.
        if rng.below(5) == 0 && token.len() > 1 {
            let cut = 1 + rng.below(token.len() - 1);
            if rng.below(2) == 0 {
                token.truncate(cut);
            } else {
                token.drain(..cut);
            }
        }
        tokens.push(token);
    }
    tokens.push(Vec::new()); // a control token
    tokens.push(b"ab".to_vec()); // a duplicate
    tokens.push(Vec::new()); // the EOG token
    let eog = tokens.len() as u32 - 1;
    (tokens, vec![eog])
}

/// The brute-force definition of "allowed".
fn allowed_by_definition(
    matcher: &Matcher,
    vocabulary: &[Vec<u8>],
    eog: &[u32],
    token: u32,
) -> bool {
    if eog.contains(&token) {
        return matcher.is_accepting();
    }
    let bytes = &vocabulary[token as usize];
    if bytes.is_empty() {
        return false;
    }
    let mut config = matcher.config.to_vec();
    for &byte in bytes {
        match matcher.grammar.step(&config, byte) {
            Ok(next) if !next.is_empty() => config = next,
            _ => return false,
        }
    }
    true
}

/// The grammar of a JSON Schema under `limits`, for tests that walk one.
fn schema_grammar(schema: &serde_json::Value, limits: &Limits) -> Arc<CompiledGrammar> {
    let ir = crate::schema::compile_schema(schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
    Arc::new(CompiledGrammar::new(ir, limits).unwrap_or_else(|e| panic!("{schema}: {e}")))
}

fn check_walks(
    name: &str,
    source: &[u8],
    limits: &Limits,
    vocabulary: &[Vec<u8>],
    eog: &[u32],
    seeds: u64,
    steps: usize,
) {
    let grammar = Arc::new(compile_gbnf(source, limits).unwrap_or_else(|e| panic!("{name}: {e}")));
    check_walks_on(name, grammar, vocabulary, eog, seeds, steps);
}

/// Returns the vocabulary's trie, for tests that look at what the walks built in it.
fn check_walks_on(
    name: &str,
    grammar: Arc<CompiledGrammar>,
    vocabulary: &[Vec<u8>],
    eog: &[u32],
    seeds: u64,
    steps: usize,
) -> Arc<TokenTrie> {
    let trie = Arc::new(TokenTrie::new(vocabulary, eog));
    for seed in 0..seeds {
        let mut rng = TestRng::new(seed + 1);
        let mut matcher = Matcher::new(grammar.clone(), trie.clone());
        for step in 0..steps {
            let mask = matcher.compute_mask().clone();
            for token in 0..vocabulary.len() as u32 {
                let expected = allowed_by_definition(&matcher, vocabulary, eog, token);
                assert_eq!(
                    mask.is_set(token),
                    expected,
                    "{name} seed {seed} step {step} token {token} {:?}",
                    String::from_utf8_lossy(&vocabulary[token as usize])
                );
                assert_eq!(
                    matcher.is_allowed(token),
                    expected,
                    "{name}: is_allowed disagrees on {token}"
                );
            }
            let choices: Vec<u32> = mask.iter_set().filter(|t| !eog.contains(t)).collect();
            assert_eq!(mask.count(), mask.iter_set().count());
            if choices.is_empty() {
                assert!(
                    matcher.is_accepting(),
                    "{name}: dead end that does not accept"
                );
                assert!(!matcher.can_continue() || matcher.stats().overflows > 0);
                break;
            }
            let token = choices[rng.below(choices.len())];
            let expected = stepped_config(&matcher, &vocabulary[token as usize]);
            matcher
                .commit(token)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&matcher.config[..], &expected[..], "{name} seed {seed} step {step}: state after commit");
        }
        assert!(matcher.stats().steps > 0);
    }
    trie
}

#[test]
fn masks_are_exact_on_the_sample_grammars() {
    let (vocabulary, eog) = synthetic_vocabulary(7, 1500);
    for name in [
        "arithmetic",
        "c",
        "chess",
        "english",
        "japanese",
        "json",
        "json_arr",
        "list",
    ] {
        let source = std::fs::read(format!("{CORPUS}/{name}.gbnf")).unwrap_or_default();
        check_walks(name, &source, &Limits::default(), &vocabulary, &eog, 2, 40);
    }
    // Chains of states: bounded repetitions, one state per count.
    for chain in [
        "root ::= \"\\\"\" [a-z ]{0,12} \"\\\"\" \"\\n\"",
        "root ::= \"<\" [^>]{2,30} \">\" ([0-9] \"x\"){1,3}",
        "root ::= [^>]{0,2} \">\"",
    ] {
        check_walks(
            chain,
            chain.as_bytes(),
            &Limits::default(),
            &vocabulary,
            &eog,
            4,
            40,
        );
    }
    // A loop where one character (é) leads elsewhere while its neighbours (è) loop.
    let loop_with_exception = "root ::= ([^\\u00e9\\n] | \"\\u00e9\" \"!\")* \"\\n\"";
    check_walks(
        "loop with an exception",
        loop_with_exception.as_bytes(),
        &Limits::default(),
        &vocabulary,
        &eog,
        3,
        40,
    );
}

/// Inside bounded repetitions with many items left a mask comes from the repetition made
/// unbounded, for the tokens too short to reach the bound, and from a walk of the longer
/// tokens from the counted state: a vocabulary with many long tokens, and walks that run into
/// the bounds (strings with `maxLength`, `minLength`, arrays with `maxItems`).
#[test]
fn masks_are_exact_inside_long_bounded_repetitions() {
    let (mut vocabulary, eog) = synthetic_vocabulary(23, 1200);
    let mut rng = TestRng::new(99);
    let short: Vec<Vec<u8>> = vocabulary.iter().filter(|t| !t.is_empty()).cloned().collect();
    // Few enough long tokens (a few percent) that the count floor stays low and most
    // repetitions are unbound; each long one is then walked from the counted state.
    for _ in 0..40 {
        let mut token = Vec::new();
        for _ in 0..2 + rng.below(14) {
            token.extend_from_slice(&short[rng.below(short.len())]);
        }
        token.truncate(48);
        vocabulary.push(token);
    }
    for source in [
        "root ::= \"\\\"\" [^\"\\\\]{0,70} \"\\\"\" \"\\n\"",
        "root ::= \"[\" ([0-9]{1,3} (\",\" [0-9]{1,3}){0,40})? \"]\"",
    ] {
        let grammar = Arc::new(
            compile_gbnf(source.as_bytes(), &Limits::default())
                .unwrap_or_else(|e| panic!("{source}: {e}")),
        );
        check_walks_on(source, grammar, &vocabulary, &eog, 4, 40);
    }
    for schema in [
        serde_json::json!({"type": "object", "additionalProperties": false, "properties": {
            "a": {"type": "string", "maxLength": 60},
            "b": {"type": "array", "items": {"type": "integer"}, "maxItems": 30}}}),
        serde_json::json!({"type": "string", "minLength": 3, "maxLength": 45}),
        serde_json::json!({"type": "array", "maxItems": 25,
            "items": {"type": ["string", "null"], "maxLength": 30}}),
    ] {
        let grammar = schema_grammar(&schema, &Limits::default());
        check_walks_on(&schema.to_string(), grammar, &vocabulary, &eog, 4, 40);
    }
}

#[test]
fn long_tokens_of_few_characters_are_counted_in_characters_inside_a_bounded_string() {
    // Each item of `[^"]{0,40}` is one character, so a token needs as many characters as
    // items are left to pass the bound: "é" x 25 (50 bytes) cannot with 30 left, "é" x 31
    // can. Masks at 40, 30, 20 and 5 characters left are checked whole against the
    // definition. Long tokens are a few percent of the vocabulary, so that masks far from
    // the bound come from the unbounded loop and only tokens with enough characters are
    // walked from the counted state.
    let (mut vocabulary, eog) = synthetic_vocabulary(5, 4000);
    for count in 12..=45 {
        vocabulary.push("\u{e9}".repeat(count).into_bytes());
    }
    for count in [10, 15].into_iter().chain(20..=40) {
        vocabulary.push("a".repeat(count).into_bytes());
    }
    for count in 8..=22 {
        vocabulary.push("\u{3053}".repeat(count).into_bytes());
    }
    let grammar = Arc::new(compile_gbnf(b"root ::= [^\"]{0,40} \"\\\"\"", &Limits::default()).expect("grammar"));
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie);
    let ten = "a".repeat(10);
    let fifteen = "a".repeat(15);
    check_sequence("characters", &mut matcher, &vocabulary, &eog, &[ten.as_bytes(), ten.as_bytes(), fifteen.as_bytes(), b"a"]);
}

#[test]
fn masks_stay_exact_across_table_and_cache_clears() {
    let (vocabulary, eog) = synthetic_vocabulary(11, 800);
    let limits = Limits {
        transition_states: 8,
        mask_cache: 2,
        ..Limits::default()
    };
    let source = std::fs::read(format!("{CORPUS}/json.gbnf")).unwrap_or_default();
    check_walks(
        "json (tiny caches)",
        &source,
        &limits,
        &vocabulary,
        &eog,
        2,
        40,
    );
    let grammar = Arc::new(compile_gbnf(&source, &limits).unwrap_or_else(|e| panic!("{e}")));
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matcher = Matcher::new(grammar, trie);
    for token in [
        b'{' as u32,
        b'"' as u32,
        b'a' as u32,
        b'"' as u32,
        b':' as u32,
    ] {
        matcher.compute_mask();
        matcher.commit(token).unwrap_or_else(|e| panic!("{e}"));
    }
    let stats = matcher.stats();
    assert!(stats.table_clears > 0, "{stats:?}");
    assert!(
        stats.states <= stats.states_capacity && stats.masks <= 2,
        "{stats:?}"
    );
}

#[test]
fn matchers_sharing_a_grammar_stay_exact_when_others_clear_the_tables() {
    let (vocabulary, eog) = synthetic_vocabulary(13, 600);
    let limits = Limits {
        transition_states: 8,
        mask_cache: 2,
        ..Limits::default()
    };
    let source = std::fs::read(format!("{CORPUS}/json.gbnf")).unwrap_or_default();
    let grammar = Arc::new(compile_gbnf(&source, &limits).unwrap_or_else(|e| panic!("{e}")));
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut matchers: Vec<Matcher> = (0..3)
        .map(|_| Matcher::new(grammar.clone(), trie.clone()))
        .collect();
    let mut rng = TestRng::new(5);
    for step in 0..30 {
        for (which, matcher) in matchers.iter_mut().enumerate() {
            let mask = matcher.compute_mask().clone();
            for token in 0..vocabulary.len() as u32 {
                let expected = allowed_by_definition(matcher, &vocabulary, &eog, token);
                assert_eq!(
                    mask.is_set(token),
                    expected,
                    "matcher {which} step {step} token {token}"
                );
            }
            let choices: Vec<u32> = mask.iter_set().filter(|t| !eog.contains(t)).collect();
            if let Some(&token) = choices.get(rng.below(choices.len())) {
                matcher
                    .commit(token)
                    .unwrap_or_else(|e| panic!("matcher {which}: {e}"));
            }
        }
    }
    for matcher in &matchers {
        assert!(matcher.stats().table_clears > 0, "{:?}", matcher.stats());
    }
}

#[test]
fn masks_survive_a_table_clear_under_the_new_ids() {
    let (vocabulary, eog) = synthetic_vocabulary(19, 800);
    let limits = Limits {
        transition_states: 8,
        mask_cache: 8,
        ..Limits::default()
    };
    let source = std::fs::read(format!("{CORPUS}/json.gbnf")).unwrap_or_default();
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let walk = |matcher: &mut Matcher| {
        for token in [b'{' as u32, b'"' as u32, b'k' as u32] {
            matcher.compute_mask();
            matcher.commit(token).unwrap_or_else(|e| panic!("{e}"));
        }
        matcher.compute_mask().clone()
    };
    let compile = || Arc::new(compile_gbnf(&source, &limits).unwrap_or_else(|e| panic!("{e}")));
    let mut matcher = Matcher::new(compile(), trie.clone());
    let before = walk(&mut matcher);
    // The table is tiny: computing those masks already cleared it.
    assert!(matcher.stats().table_clears > 0, "{:?}", matcher.stats());
    let computed = matcher.stats().masks_computed;
    let epoch = SharedCaches::lock(&matcher.shared).table.epoch();
    matcher.with_caches(|matcher, caches| matcher.clear_tables(caches, &mut []));
    {
        let caches = SharedCaches::lock(&matcher.shared);
        assert_ne!(caches.table.epoch(), epoch);
        // The dead state, the current one, and at most a quarter of the table for masks.
        assert!(caches.table.len() <= 2 + caches.table.capacity() / 4);
        assert!(caches.masks.len() >= 1);
    }
    assert_eq!(*matcher.compute_mask(), before);
    assert_eq!(matcher.stats().masks_computed, computed, "{:?}", matcher.stats());
    // Identical to the mask computed afresh, here and in caches of its own.
    matcher.forget_masks();
    assert_eq!(*matcher.compute_mask(), before);
    assert_eq!(matcher.stats().masks_computed, computed + 1);
    let mut fresh = Matcher::new(compile(), trie);
    assert_eq!(walk(&mut fresh), before);
    for token in 0..vocabulary.len() as u32 {
        let expected = allowed_by_definition(&matcher, &vocabulary, &eog, token);
        assert_eq!(before.is_set(token), expected, "token {token}");
    }
}

#[test]
fn a_second_matcher_of_a_grammar_reuses_its_masks_and_counts_only_its_own_work() {
    let (vocabulary, eog) = synthetic_vocabulary(17, 700);
    let source = std::fs::read(format!("{CORPUS}/json.gbnf")).unwrap_or_default();
    let grammar =
        Arc::new(compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{e}")));
    let trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let walk = |matcher: &mut Matcher| {
        for token in [
            b'{' as u32,
            b'"' as u32,
            b'k' as u32,
            b'"' as u32,
            b':' as u32,
        ] {
            matcher.compute_mask();
            matcher.commit(token).unwrap_or_else(|e| panic!("{e}"));
        }
        matcher.compute_mask().clone()
    };
    let mut first = Matcher::new(grammar.clone(), trie.clone());
    let first_mask = walk(&mut first);
    let computed = first.stats().masks_computed;
    assert!(computed > 0, "{:?}", first.stats());
    let mut second = Matcher::new(grammar.clone(), trie.clone());
    let second_mask = walk(&mut second);
    assert_eq!(second_mask, first_mask);
    assert_eq!(second.stats().masks_computed, 0, "{:?}", second.stats());
    assert_eq!(second.stats().cached_steps, 5);
    // Another vocabulary gets caches of its own.
    let other_trie = Arc::new(TokenTrie::new(&vocabulary, &eog));
    let mut third = Matcher::new(grammar, other_trie);
    walk(&mut third);
    assert_eq!(
        third.stats().masks_computed,
        computed,
        "{:?}",
        third.stats()
    );
}

#[test]
fn commit_refuses_and_keeps_state_eog_only_when_accepting() {
    let vocabulary: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        b"b".to_vec(),
        b"ab".to_vec(),
        Vec::new(),
        Vec::new(),
    ];
    let grammar = Arc::new(
        compile_gbnf(b"root ::= \"a\" \"b\"+", &Limits::default())
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let trie = Arc::new(TokenTrie::new(&vocabulary, &[4]));
    let mut matcher = Matcher::new(grammar, trie);
    assert!(!matcher.is_allowed(4) && !matcher.is_allowed(3) && !matcher.is_allowed(1));
    assert!(matches!(
        matcher.commit(1),
        Err(GrammarError::TokenRejected { token: 1, .. })
    ));
    assert!(matches!(
        matcher.commit(99),
        Err(GrammarError::UnknownToken { token: 99, .. })
    ));
    assert_eq!(
        matcher.compute_mask().iter_set().collect::<Vec<_>>(),
        vec![0, 2]
    );
    matcher.commit(2).unwrap_or_else(|e| panic!("{e}"));
    assert!(matcher.is_accepting() && matcher.can_continue());
    assert_eq!(
        matcher.compute_mask().iter_set().collect::<Vec<_>>(),
        vec![1, 4]
    );
    matcher.commit(1).unwrap_or_else(|e| panic!("{e}"));
    matcher.compute_mask();
    matcher.commit(4).unwrap_or_else(|e| panic!("{e}"));
    let stats = matcher.stats();
    assert_eq!(
        (stats.steps, stats.masks_computed, stats.cached_steps),
        (3, 2, 1),
        "{stats:?}"
    );
}

#[test]
fn shared_parts_are_send_and_sync_and_matchers_are_send() {
    fn shared<T: Send + Sync>() {}
    fn owned<T: Send>() {}
    shared::<crate::automaton::CompiledGrammar>();
    shared::<TokenTrie>();
    owned::<Matcher>();
}

/// Mask exactness on real vocabularies: `LLAMAY_VOCAB_JSON=a.json[,b.json] cargo test --release
/// -- --ignored masks_are_exact_on_real_vocabularies` (files as `Vocabulary::to_json` writes).
#[test]
#[ignore = "needs LLAMAY_VOCAB_JSON; takes minutes"]
fn masks_are_exact_on_real_vocabularies() {
    let paths = std::env::var("LLAMAY_VOCAB_JSON").unwrap_or_default();
    assert!(!paths.is_empty(), "set LLAMAY_VOCAB_JSON");
    for path in paths.split(',') {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let tokens: Vec<Vec<u8>> = value["tokens"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|t| {
                        t.as_array()
                            .map(|b| {
                                b.iter()
                                    .filter_map(|x| x.as_u64())
                                    .map(|x| x as u8)
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let eog: Vec<u32> = value["eog"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|t| t.as_u64())
                    .map(|t| t as u32)
                    .collect()
            })
            .unwrap_or_default();
        for name in [
            "arithmetic",
            "c",
            "chess",
            "english",
            "japanese",
            "json",
            "json_arr",
            "list",
        ] {
            let source = std::fs::read(format!("{CORPUS}/{name}.gbnf")).unwrap_or_default();
            check_walks(
                &format!("{name} on {path}"),
                &source,
                &Limits::default(),
                &tokens,
                &eog,
                1,
                12,
            );
        }
    }
}

#[test]
fn character_budgets_count_characters_not_bytes() {
    // At most two characters before ">": "éè" fits, "éèx" does not, though it shares a
    // prefix that starts mid-character.
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for text in [
        "\u{e9}",
        "\u{e9}\u{e8}",
        "\u{e9}\u{e8}x",
        "\u{e9}x>",
        "ab",
        "abc",
        "a>",
        "\u{3053}\u{3093}",
        "\u{3053}\u{3093}\u{306b}",
    ] {
        vocabulary.push(text.as_bytes().to_vec());
    }
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    check_walks(
        "two characters",
        b"root ::= [^>]{0,2} \">\"",
        &Limits::default(),
        &vocabulary,
        &eog,
        4,
        4,
    );
}

#[test]
fn a_wide_nodes_children_known_to_die_are_passed_over_and_the_others_walked() {
    // "a" has twenty children, of which only c, k and q go on: once a dead sibling has taught
    // the table its byte class, the walk passes over the others in the list of "a"'s
    // children. Later seeds start on the transitions the first one learned.
    let mut vocabulary: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for letter in b'a'..=b't' {
        vocabulary.push(vec![b'a', letter]);
        vocabulary.push(vec![b'a', letter, b'!']);
        vocabulary.push(vec![b'a', letter, b'!', b'a']);
    }
    vocabulary.push(Vec::new());
    let eog = vec![vocabulary.len() as u32 - 1];
    check_walks("wide node", b"root ::= (\"a\" [ckq] \"!\")+", &Limits::default(), &vocabulary, &eog, 6, 8);
}

/// The configuration after `bytes` from the matcher's, stepped byte by byte: what a commit
/// must reach, whichever way it finds it (the mask state's transitions, the whitespace lowered spent).
fn stepped_config(matcher: &Matcher, bytes: &[u8]) -> Vec<u32> {
    let mut config = matcher.config.to_vec();
    for &byte in bytes {
        config = matcher.grammar.step(&config, byte).unwrap_or_default();
    }
    config
}

/// Commits `tokens` one by one, checking the whole mask against the definition before each.
fn check_sequence(name: &str, matcher: &mut Matcher, vocabulary: &[Vec<u8>], eog: &[u32], tokens: &[&[u8]]) {
    for (step, text) in tokens.iter().enumerate() {
        let mask = matcher.compute_mask().clone();
        for token in 0..vocabulary.len() as u32 {
            let expected = allowed_by_definition(matcher, vocabulary, eog, token);
            assert_eq!(mask.is_set(token), expected, "{name} step {step}: token {token} {:?}",
                String::from_utf8_lossy(&vocabulary[token as usize]));
        }
        let token = vocabulary.iter().position(|t| t == text).unwrap_or_else(|| panic!("{text:?}"));
        let expected = stepped_config(matcher, text);
        matcher.commit(token as u32).unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
        assert_eq!(&matcher.config[..], &expected[..], "{name} step {step}: state after commit");
    }
}

mod whitespace;

mod loops;
