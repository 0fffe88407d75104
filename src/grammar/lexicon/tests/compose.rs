//! Lexicons with grammars and schemas: the product at decode time, fixed text dropped when
//! compiling, JSON escapes, allow lists compiled into a schema's free strings, dead ends.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::automaton::CompiledGrammar;
use crate::check::{check_input, CheckOutcome};
use crate::lexicon::check::Reason;
use crate::limits::Limits;
use crate::matcher::Matcher;
use crate::schema::{any_json_with_lexicon, compile_schema_with_lexicon, FormatMode};

fn schema_grammar(schema: &Value, lexicon: &Arc<Lexicon>) -> Result<Arc<CompiledGrammar>, LexiconError> {
    let ir = compile_schema_with_lexicon(schema, FormatMode::Ignore, lexicon).expect("the schema compiles");
    let ir = lexicon.restrict(ir, Target::Json)?;
    Ok(Arc::new(CompiledGrammar::new(ir, &Limits::default()).expect("the automaton builds")))
}

fn gbnf_grammar(source: &str, lexicon: &Lexicon) -> Result<Arc<CompiledGrammar>, ConstraintError> {
    compile_gbnf_with_lexicon(source.as_bytes(), &Limits::default(), lexicon).map(Arc::new)
}

fn matches(grammar: &CompiledGrammar, text: &str) -> bool {
    check_input(grammar, text.as_bytes()) == CheckOutcome::Match
}

fn constraint(grammar: &Arc<CompiledGrammar>, lexicon: &Arc<Lexicon>, trie: &Arc<TokenTrie>, target: Target) -> Constraint {
    let lexicon = LexiconMatcher::new(lexicon.clone(), trie.clone(), target);
    Constraint::new(Some(Matcher::new(grammar.clone(), trie.clone())), lexicon).expect("something to constrain")
}

#[test]
fn deny_with_a_grammar_refuses_the_word_across_tokens() {
    let lexicon = deny(&["bad"]);
    let grammar = gbnf_grammar("root ::= \"the \" [a-z]+ \".\"", &lexicon).expect("compiles");
    let trie = vocabulary(&[b"the ", b"ba", b"ge."]);
    let mut both = constraint(&grammar, &lexicon, &trie, Target::Grammar);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    for token in [t("the "), t("ba"), t("d")] {
        assert!(both.is_allowed(token));
        both.commit(token).expect("allowed");
    }
    assert!(!both.is_allowed(t(".")), "the grammar allows it, the lexicon does not");
    assert!(!both.compute_mask().is_set(t(".")));
    assert!(both.compute_mask().is_set(t("ge.")));
    assert!(matches!(both.commit(t(".")), Err(ConstraintError::Lexicon(LexiconError::TokenRefused { .. }))));
    both.commit(t("ge.")).expect("badge");
    assert!(both.is_accepting());
    let stats = both.lexicon_stats().expect("a lexicon");
    assert_eq!(stats.steps, 4, "the refused commit is not a step");
    assert!(stats.masks_computed >= 1);
    assert!(stats.render("lexicon", std::time::Duration::from_millis(10)).starts_with("lexicon mask: 4 steps"));
    assert_eq!(both.mask_time_ns(), stats.mask_time_ns + both.grammar_stats().expect("a grammar").mask_time_ns);
}

#[test]
fn fixed_text_a_deny_list_rules_out_is_dropped_when_compiling() {
    let lexicon = deny(&["bad"]);
    let grammar = gbnf_grammar("root ::= \"good\" | \"bad\" | \"badge\"", &lexicon).expect("compiles");
    assert!(matches(&grammar, "good") && matches(&grammar, "badge"));
    assert!(!matches(&grammar, "bad"));
    let Err(error) = gbnf_grammar("root ::= \"so\" end\nend ::= \" bad.\"", &lexicon) else { panic!("nothing is left") };
    assert!(error.to_string().contains("allows no output at all"), "{error}");
    // Left recursion is still reported at its source rule.
    let Err(error) = gbnf_grammar("root ::= root \"x\" | \"x\"", &lexicon) else { panic!("left recursive") };
    assert!(error.to_string().contains("rule `root`"), "{error}");

    let schema = json!({"type": "object", "properties": {
        "level": {"enum": ["bad", "good", "not bad at all", "badly"]},
        "bad": {"type": "integer"}}, "required": ["level"]});
    let grammar = schema_grammar(&schema, &lexicon).expect("compiles");
    assert!(matches(&grammar, r#"{"level": "good"}"#));
    assert!(matches(&grammar, r#"{"level": "badly"}"#));
    assert!(!matches(&grammar, r#"{"level": "bad"}"#));
    assert!(!matches(&grammar, r#"{"level": "not bad at all"}"#));
    assert!(!matches(&grammar, r#"{"level": "good", "bad": 1}"#), "an optional property named with a banned word is dropped");
    for schema in [
        json!({"const": "bad"}),
        json!({"type": "object", "properties": {"bad": {"type": "string"}}, "required": ["bad"]}),
    ] {
        let Err(error) = schema_grammar(&schema, &lexicon) else { panic!("{schema} has nothing left") };
        assert!(matches!(error, LexiconError::NothingLeft { what: "schema", .. }), "{error}");
    }
}

#[test]
fn json_escapes_cannot_spell_a_banned_word() {
    let lexicon = deny(&["bad"]);
    let grammar = schema_grammar(&json!({"type": "string"}), &lexicon).expect("compiles");
    let trie = vocabulary(&[b"\\u0061", b"\\u00", b"61", b"\\n", b"\\u0020"]);
    let mut both = constraint(&grammar, &lexicon, &trie, Target::Json);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    both.commit(t("\"")).expect("a string");
    both.commit(t("b")).expect("b");
    assert!(!both.is_allowed(t("\\u0061")), "an escaped letter is refused");
    both.commit(t("\\u00")).expect("may still escape punctuation");
    assert!(!both.is_allowed(t("61")));
    both.commit(t("2")).expect("`\\u002d` is a hyphen");
    both.commit(t("d")).expect("`\\u002d` is a hyphen");
    let text = br#""b\u0061d""#;
    let LexiconCheck::Fail(found) = check_text(&lexicon, text, Target::Json) else { panic!("refused") };
    assert_eq!((found.offset, found.reason), (2, Reason::EscapedWordCharacter));
    // Escapes of whitespace separate the words of a phrase as whitespace does.
    let phrase = deny(&["bad word"]);
    assert!(check_text(&phrase, br#""bad\nword""#, Target::Json) != LexiconCheck::Pass);
    assert!(check_text(&phrase, br#""bad\u0020word""#, Target::Json) != LexiconCheck::Pass);
    assert_eq!(check_text(&phrase, br#""bad\"word""#, Target::Json), LexiconCheck::Pass);
}

#[test]
fn a_dead_end_is_reported() {
    let lexicon = deny(&["bad"]);
    // `[bB]` is no fixed text: the grammar compiles, and after `bad` needs a `.`.
    let grammar = gbnf_grammar("root ::= [bB] \"ad.\"", &lexicon).expect("compiles");
    let trie = vocabulary(&[]);
    let mut both = constraint(&grammar, &lexicon, &trie, Target::Grammar);
    for byte in [b'b', b'a', b'd'] {
        both.commit(u32::from(byte)).expect("allowed");
    }
    assert_eq!(both.dead_end(), None);
    assert_eq!(both.compute_mask().count(), 0);
    let error = both.dead_end().expect("nothing is allowed");
    assert_eq!(error, LexiconError::DeadEnd { what: "grammar", after: "bad".into() });
    assert!(error.to_string().starts_with("the lexicon and the grammar leave no token to continue with after \"bad\""));
}

#[test]
fn allow_with_a_schema_applies_to_free_string_values() {
    let lexicon = allow(&["hello", "world"]);
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["Zebra crossing"]},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "short": {"type": "string", "maxLength": 11},
        "long": {"type": "string", "minLength": 6}},
        "required": ["name", "kind", "code"]});
    let grammar = schema_grammar(&schema, &lexicon).expect("compiles");
    let doc = |name: &str, extra: &str| format!(r#"{{"name": "{name}", "kind": "Zebra crossing", "code": "XYZ"{extra}}}"#);
    for (name, extra) in [
        ("Hello, world!", ""),
        ("", ""),
        (r"hello\nWORLD\u0021 ", ""),
        ("hello\u{2014}world", ""),
        ("hello", r#", "short": "hello world""#),
        ("hello", r#", "long": "hello ""#),
    ] {
        assert!(matches(&grammar, &doc(name, extra)), "{}", doc(name, extra));
    }
    for (name, extra) in [
        ("hello there", ""),
        (r"hell\u006f", ""),
        (r"hello \u00bf", ""),
        ("hel", ""),
        ("hello", r#", "short": "hello world!""#),
        ("hello", r#", "long": "hello""#),
    ] {
        assert!(!matches(&grammar, &doc(name, extra)), "{}", doc(name, extra));
    }
    assert!(LexiconMatcher::new(lexicon.clone(), vocabulary(&[]), Target::Json).is_none());
    // Any JSON: values only, keys stay free.
    let any = CompiledGrammar::new(any_json_with_lexicon(&lexicon), &Limits::default()).expect("builds");
    assert!(matches(&any, r#"{"any key": ["hello", {"x": "World"}], "n": 3}"#));
    assert!(!matches(&any, r#"{"a": "nope"}"#));
    // A length bound on a string too many (state, length) pairs would need is refused.
    let words: Vec<String> = (0..2000).map(|i| format!("w{i}x")).collect();
    let big = Arc::new(Lexicon::new(LexiconKind::Allow, None, &words, &LexiconLimits::default()).expect("loads"));
    let error = compile_schema_with_lexicon(&json!({"type": "string", "maxLength": 4000}), FormatMode::Ignore, &big)
        .expect_err("too many pairs");
    assert_eq!(error.keyword, "maxLength");
    assert!(error.to_string().contains("(state, length) pairs"), "{error}");
}

#[test]
fn allow_with_a_grammar_applies_to_the_whole_output() {
    let lexicon = allow(&["hello", "world"]);
    let grammar = gbnf_grammar("root ::= (\"hello world\" | \"hello there\") [a-z]*", &lexicon).expect("compiles");
    assert!(matches(&grammar, "hello world"));
    assert!(!matches(&grammar, "hello there"), "the fixed text `there` is dropped");
    let trie = vocabulary(&[b"hello ", b"wor", b"ld"]);
    let mut both = constraint(&grammar, &lexicon, &trie, Target::Grammar);
    both.commit(token_of(&trie, b"hello ")).expect("allowed");
    both.commit(token_of(&trie, b"wor")).expect("allowed");
    assert!(!both.is_accepting());
    both.commit(token_of(&trie, b"ld")).expect("allowed");
    assert!(both.is_accepting());
    assert!(!both.is_allowed(u32::from(b'x')), "`worldx` is not a listed word");
}

const DENIED: &[&str] = &["bad", "evil plan", "xyz"];

fn walk_vocabulary() -> Arc<TokenTrie> {
    let pieces: &[&[u8]] = &[
        b"{\"", b"\":", b"\"title\"", b"title", b"\"tags\"", b"tags", b"\"level\"", b"level", b"\": \"", b"\", \"", b"\"]",
        b"[\"", b"\"}", b", ", b"good", b"bad", b"ba", b"ad", b"d ", b"badge", b" evil", b"evil", b" plan", b"pla", b"n\"",
        b"xyz", b"xy", b"z\"", b"\\u0061", b"\\u00", b"\\n", b"\\t", b"\\\"", b" ", b"  ", "\u{2014}".as_bytes(), b"\xE2\x80",
    ];
    vocabulary(pieces)
}

/// Every string (keys and values) of a JSON value.
fn strings_of(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| strings_of(item, out)),
        Value::Object(members) => members.iter().for_each(|(key, item)| {
            out.push(key.clone());
            strings_of(item, out);
        }),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random walks of the combined constraint: its mask is exactly the tokens both parts
    /// allow, the text stays a prefix of the schema's documents and never holds a banned entry;
    /// a finished document parses, and none of its decoded strings holds one.
    #[test]
    fn deny_and_schema_walks_stay_in_both(seed in any::<u64>()) {
        let lexicon = deny(DENIED);
        let schema = json!({"type": "object", "properties": {
            "title": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "level": {"enum": ["bad", "good", "bad word ok"]}},
            "required": ["title", "level"], "additionalProperties": false});
        let grammar = schema_grammar(&schema, &lexicon).expect("compiles");
        let trie = walk_vocabulary();
        let mut both = constraint(&grammar, &lexicon, &trie, Target::Json);
        let mut rng = TestRng::new(seed);
        let mut written: Vec<u8> = Vec::new();
        let mut finished = false;
        for _ in 0..120 {
            let allowed: Vec<u32> = both.compute_mask().iter_set().collect();
            // The intersection kept up to date token by token is the product, token for token.
            for token in 0..trie.vocab_size() as u32 {
                prop_assert_eq!(allowed.contains(&token), both.is_allowed(token), "token {} after {:?}", token, String::from_utf8_lossy(&written));
            }
            prop_assert!(!allowed.is_empty(), "dead end after {:?}", String::from_utf8_lossy(&written));
            if allowed.contains(&eog(&trie)) && rng.below(3) == 0 {
                finished = true;
                break;
            }
            let pieces: Vec<u32> = allowed.iter().copied().filter(|t| *t >= 256 && !trie.is_eog(*t)).collect();
            let pool: Vec<u32> = if pieces.is_empty() || rng.below(4) == 0 {
                allowed.iter().copied().filter(|t| !trie.is_eog(*t)).collect()
            } else {
                pieces
            };
            if pool.is_empty() {
                finished = true;
                break;
            }
            let token = pool[rng.below(pool.len())];
            prop_assert!(both.is_allowed(token));
            both.commit(token).expect("a token of the mask commits");
            written.extend_from_slice(trie.token_bytes(token).unwrap_or_default());
            let prefix = !matches!(check_input(&grammar, &written), CheckOutcome::Mismatch { .. });
            prop_assert!(prefix, "{:?} left the schema", String::from_utf8_lossy(&written));
            prop_assert!(!naive_banned(DENIED, &written, Mode::Json, false), "{:?}", String::from_utf8_lossy(&written));
        }
        if finished {
            prop_assert_eq!(check_input(&grammar, &written), CheckOutcome::Match);
            let value: Value = serde_json::from_slice(&written).expect("a finished document parses");
            let mut strings = Vec::new();
            strings_of(&value, &mut strings);
            // Decoded by serde: an escape is the character it stands for (`\bad` is a
            // backspace and `ad`, which the raw text would not tell).
            for text in strings {
                prop_assert!(!naive_banned(DENIED, text.as_bytes(), Mode::Text, true), "{:?}", text);
            }
        }
    }
}
