//! Tests of the GBNF front end: the sample corpus, the dialect, and every refusal.

use super::*;
use crate::check::{check_input, CheckOutcome};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/grammars");

fn compile(source: &str) -> CompiledGrammar {
    match compile_gbnf(source.as_bytes(), &Limits::default()) {
        Ok(grammar) => grammar,
        Err(error) => panic!("{source:?} did not compile: {error}"),
    }
}

fn refusal(source: &[u8]) -> GrammarError {
    match compile_gbnf(source, &Limits::default()) {
        Ok(_) => panic!(
            "{:?} compiled but should be refused",
            String::from_utf8_lossy(source)
        ),
        Err(error) => error,
    }
}

fn corpus(name: &str) -> CompiledGrammar {
    let path = format!("{CORPUS}/{name}");
    let source = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    compile_gbnf(&source, &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_corpus_grammar_parses() {
    let mut seen = 0;
    for entry in std::fs::read_dir(CORPUS).unwrap_or_else(|e| panic!("{CORPUS}: {e}")) {
        let path = entry.map(|e| e.path()).unwrap_or_default();
        if path.extension().is_some_and(|e| e == "gbnf") {
            let source = std::fs::read(&path).unwrap_or_default();
            // The folder also holds grammars kept to show a refusal; each says so first.
            let refused = source.starts_with(b"# Refused at load time");
            match compile_gbnf(&source, &Limits::default()) {
                Err(error) if !refused => panic!("{}: {error}", path.display()),
                Ok(_) if refused => panic!("{} says it is refused, and it compiles", path.display()),
                _ => {}
            }
            seen += 1;
        }
    }
    assert!(seen >= 8, "only {seen} grammars found");
}

#[test]
fn corpus_grammars_accept_their_kind_of_text() {
    let cases: &[(&str, &str, &str)] = &[
        ("arithmetic.gbnf", "1+2= 3\n(a*b2)/x =y\n", "1+=2\n"),
        (
            "json.gbnf",
            "{\"a\": [1, 2.5e3, \"x\\u00e9 \u{e9}\"], \"b\": null}",
            "{\"a\" 1}",
        ),
        ("json_arr.gbnf", "[\n{\"k\": true},\n\"s\"]", "[{}]"),
        ("list.gbnf", "- hello\n- w\u{f6}rld \u{1F600}\n", "- a\r\n"),
        (
            "japanese.gbnf",
            "\u{3053}\u{3093}\u{306b}\u{3061}\u{306f} \u{4e16}\u{754c}",
            "hello",
        ),
        (
            "chess.gbnf",
            "1. e4 e5\n2. Nf3 Nc6\n3. O-O exd4+\n",
            "1. e9 e5\n",
        ),
        (
            "c.gbnf",
            "int main(){return 0;}float f(int x){while(x<3){x = x+1;}}",
            "int main(){return 0}",
        ),
        (
            "english.gbnf",
            "Hello, world! It's 3 o'clock.",
            "Hello,  world",
        ),
    ];
    for (name, good, bad) in cases {
        let grammar = corpus(name);
        assert_eq!(
            check_input(&grammar, good.as_bytes()),
            CheckOutcome::Match,
            "{name} on {good:?}"
        );
        assert!(
            matches!(
                check_input(&grammar, bad.as_bytes()),
                CheckOutcome::Mismatch { .. }
            ),
            "{name} accepted {bad:?}"
        );
    }
}

#[test]
fn partial_characters_are_incomplete_not_wrong() {
    let grammar = corpus("japanese.gbnf");
    let word = "\u{3053}\u{3093}".as_bytes();
    assert!(matches!(
        check_input(&grammar, &word[..4]),
        CheckOutcome::Incomplete { .. }
    ));
    assert_eq!(check_input(&grammar, word), CheckOutcome::Match);
}

#[test]
fn repetition_bounds() {
    let grammar = compile("root ::= \"a\"{2,4} (\"bc\"){1} [x-z]{2,} \"d\"?");
    for good in ["aabcxy", "aaabcxyz", "aaaabcxxd", "aabcxxd"] {
        assert_eq!(
            check_input(&grammar, good.as_bytes()),
            CheckOutcome::Match,
            "{good}"
        );
    }
    for bad in ["abcxx", "aaaaabcxx", "aabcx", "aaxx", "aabcxxdd"] {
        assert_ne!(
            check_input(&grammar, bad.as_bytes()),
            CheckOutcome::Match,
            "{bad}"
        );
    }
}

#[test]
fn escapes_classes_and_any_character() {
    let grammar = compile(r#"root ::= "\x41\u00e9\U0001F600\n\t\"\\" [^a-z\]] . [\[\]-]"#);
    let input = "A\u{e9}\u{1F600}\n\t\"\\".to_string() + "Q\u{10FFFF}-";
    assert_eq!(check_input(&grammar, input.as_bytes()), CheckOutcome::Match);
    let wrong = "A\u{e9}\u{1F600}\n\t\"\\".to_string() + "q\u{e9}[";
    assert!(matches!(
        check_input(&grammar, wrong.as_bytes()),
        CheckOutcome::Mismatch { offset: 11, .. }
    ));
}

#[test]
fn multi_line_rules_comments_and_names() {
    let grammar = compile(
        "# a comment\r\nroot ::=\n  ( first-part # inside a group\n    | \"z\" ) tail_2 |\n  \"q\"\n\nfirst-part ::= \"a\"\ntail_2 ::= \"!\"  # end\n",
    );
    for good in ["a!", "z!", "q"] {
        assert_eq!(
            check_input(&grammar, good.as_bytes()),
            CheckOutcome::Match,
            "{good}"
        );
    }
}

fn message(error: &GrammarError) -> String {
    error.to_string()
}

#[test]
fn left_recursion_is_refused_with_the_right_recursive_form() {
    let error = refusal(b"root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]+\n");
    assert!(
        matches!(&error, GrammarError::LeftRecursion { rule, at, .. } if rule == "expr" && *at == Location::at(2, 1))
    );
    let text = message(&error);
    assert!(
        text.contains("`expr`") && text.contains("line 2, column 1"),
        "{text}"
    );
    assert!(text.contains("expr ::= term (\"+\" term)*"), "{text}");

    let indirect = refusal(b"root ::= a\na ::= b \"x\" | \"y\"\nb ::= \"\" | a \"z\"\n");
    assert!(
        matches!(&indirect, GrammarError::LeftRecursion { cycle, .. } if cycle.contains("a") && cycle.contains("b")),
        "{indirect}"
    );
    let nullable = refusal(b"root ::= ws root \"x\" | \"y\"\nws ::= \" \"*\n");
    assert!(
        matches!(&nullable, GrammarError::LeftRecursion { rule, .. } if rule == "root"),
        "{nullable}"
    );
    let grouped = refusal(b"root ::= (\"a\"? root) \"x\" | \"y\"\n");
    assert!(
        matches!(&grouped, GrammarError::LeftRecursion { rule, .. } if rule == "root"),
        "{grouped}"
    );
}

#[test]
fn a_repetition_of_what_can_match_nothing_repeats_what_reads() {
    let cases: [(&str, &[&str], &[&str]); 4] = [
        ("root ::= ([a-z]*)*\n", &["", "a", "abc"], &["A", "a1"]),
        ("root ::= (\"a\"? \"b\"?)* \"!\"\n", &["!", "ab!", "bba!", "abab!"], &["", "c!", "!!"]),
        ("root ::= item* \"end\"\nitem ::= \"x\"? | \"yz\"\n", &["end", "xxend", "xyzxend"], &["yend", "xx"]),
        ("root ::= ((\"a\"*)+ (\"b\"*)*)+\n", &["", "a", "bbb", "abab", "aabba"], &["c", "ac"]),
    ];
    for (source, good, bad) in cases {
        let grammar = compile(source);
        for text in good {
            assert_eq!(check_input(&grammar, text.as_bytes()), CheckOutcome::Match, "{source}: {text:?}");
        }
        for text in bad {
            assert_ne!(check_input(&grammar, text.as_bytes()), CheckOutcome::Match, "{source}: {text:?}");
        }
    }
}

#[test]
fn left_recursion_through_a_construct_names_what_the_user_wrote() {
    let error = refusal(b"# a list\nroot ::= \"[\" (root \",\")* \"]\" | tail\ntail ::= (tail \"x\")* \"y\"\n");
    let text = message(&error);
    assert!(
        matches!(&error, GrammarError::LeftRecursion { rule, at, .. } if rule == "tail" && *at == Location::at(3, 1)),
        "{text}"
    );
    assert!(text.contains("tail -> `(tail \"x\")*` (line 3, column 10) -> tail"), "{text}");
    assert!(!text.contains("tail-"), "a generated rule is named: {text}");
}

#[test]
fn a_rule_with_more_alternatives_than_parse_stacks_is_refused_saying_so() {
    let words: Vec<String> = (0..10_000).map(|i| format!("\"w{i}\"")).collect();
    let error = refusal(format!("# words\nroot ::= {}\n", words.join(" | ")).as_bytes());
    let text = message(&error);
    assert!(
        matches!(&error, GrammarError::TooManyAlternatives { alternatives: 10_000, limit: 1024, at, .. } if *at == Location::at(2, 1)),
        "{text}"
    );
    assert!(text.starts_with("rule `root` at line 2, column 1 has 10000 alternatives"), "{text}");
    assert!(!text.contains("ambiguous"), "{text}");
    let grouped = refusal(format!("root ::= \"<\" ({}) \">\"\n", words[..2_000].join(" | ")).as_bytes());
    assert!(message(&grouped).starts_with("the group `(\"w0\" | "), "{grouped}");
    assert!(message(&grouped).contains("in rule `root` at line 1, column 14"), "{grouped}");
    // Up to the limit, such a rule loads and steps.
    let grammar = compile(&format!("root ::= {}\n", words[..1_000].join(" | ")));
    assert_eq!(check_input(&grammar, b"w999"), CheckOutcome::Match);
}

#[test]
fn token_terminals_are_refused() {
    for source in [
        &b"root ::= <think> \"x\"\n"[..],
        b"root ::= \"a\" <[1000]>\n",
        b"root ::= !<[5]> \"a\"\n",
    ] {
        let error = refusal(source);
        assert!(
            matches!(&error, GrammarError::TokenTerminal { rule, .. } if rule == "root"),
            "{error}"
        );
        assert!(message(&error).contains("not one model's vocabulary"));
    }
    assert!(
        matches!(refusal(b"root ::= <think>\n"), GrammarError::TokenTerminal { text, .. } if text == "<think>")
    );
}

#[test]
fn repetition_bound_above_the_limit_is_refused() {
    let error = refusal(b"root ::= x\nx ::= \"a\"{1,4097}\n");
    assert!(
        matches!(&error, GrammarError::RepetitionTooLarge { rule, bound: 4097, at, .. } if rule == "x" && *at == Location::at(2, 10)),
        "{error}"
    );
    assert!(matches!(
        refusal(b"root ::= \"a\"{99999999999999999999999}\n"),
        GrammarError::RepetitionTooLarge { .. }
    ));
    compile("root ::= \"a\"{0,4096}");
}

#[test]
fn undefined_missing_root_duplicates_and_syntax() {
    assert!(
        matches!(refusal(b"root ::= item\n"), GrammarError::UndefinedRule { rule, name, at } if rule == "root" && name == "item" && at == Location::at(1, 10))
    );
    assert_eq!(refusal(b"item ::= \"a\"\n"), GrammarError::MissingRoot);
    assert!(
        matches!(refusal(b"root ::= \"a\"\nroot ::= \"b\"\n"), GrammarError::DuplicateRule { at, .. } if at == Location::at(2, 1))
    );
    let cases: &[(&[u8], (usize, usize))] = &[
        (b"root ::= \"a\n", (1, 10)),
        (b"root := \"a\"\n", (1, 6)),
        (b"root ::= (\"a\"\n", (2, 1)),
        (b"root ::= \"a\")\n", (1, 13)),
        (b"root ::= [a-\n", (1, 10)),
        (b"root ::= \"a\"\n  \"b\"\n", (2, 3)),
        (b"root ::= \"\\q\"\n", (1, 11)),
        (b"root ::= \"\\uD800\"\n", (1, 11)),
        (b"root ::= *\n", (1, 10)),
        (b"root ::= \"a\"{3,1}\n", (1, 13)),
        (b"root ::= [z-a]\n", (1, 13)),
    ];
    for (source, (line, column)) in cases {
        match refusal(source) {
            GrammarError::Syntax { at, .. } => {
                assert_eq!(
                    at,
                    Location::at(*line, *column),
                    "{}",
                    String::from_utf8_lossy(source)
                )
            }
            other => panic!("{}: {other}", String::from_utf8_lossy(source)),
        }
    }
}

#[test]
fn bad_files_fail_fast_with_a_clear_error() {
    assert_eq!(refusal(b""), GrammarError::Empty);
    assert_eq!(refusal(b"  \n# only a comment\n\n"), GrammarError::Empty);
    assert!(matches!(
        refusal(&[0x7f, 0x45, 0x4c, 0x46, 0xff, 0xfe, 0, 1]),
        GrammarError::NotText { offset: 4 }
    ));
    assert!(matches!(
        refusal(b"root ::= \"a\"\0\0"),
        GrammarError::NotText { .. }
    ));
    let huge = "root ::= \"a\"\n".repeat(10 * 1024 * 1024 / 13);
    let started = std::time::Instant::now();
    assert!(matches!(
        refusal(huge.as_bytes()),
        GrammarError::TooLarge { .. }
    ));
    assert!(started.elapsed().as_secs() < 5);
    let deep = format!(
        "root ::= {}\"a\"{}\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(matches!(refusal(deep.as_bytes()), GrammarError::TooDeep { limit: 256, .. }));
    // Repetitions of repetitions stay linear, but many of them hit the symbol limit, fast.
    let mut blowup = String::from("root ::= x0\n");
    for i in 0..60_000 {
        blowup.push_str(&format!("x{i} ::= \"ab\"{{4096}} x{}\n", i + 1));
    }
    blowup.push_str("x60000 ::= \"\"\n");
    let started = std::time::Instant::now();
    assert!(matches!(
        refusal(blowup.as_bytes()),
        GrammarError::TooLarge { .. }
    ));
    assert!(started.elapsed().as_secs() < 5);
}

#[test]
fn tight_limits_are_enforced() {
    let limits = Limits {
        max_rules: 10,
        ..Limits::default()
    };
    let error = compile_gbnf(b"root ::= \"a\"{0,50}\n", &limits)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(error, GrammarError::TooLarge { .. }), "{error}");
}


fn testdata(name: &str) -> Result<CompiledGrammar, GrammarError> {
    let path = format!("{CORPUS}/{name}");
    let source = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    compile_gbnf(&source, &Limits::default())
}

#[test]
fn testdata_grammars_load_or_are_refused_as_documented() {
    let chess = testdata("move.gbnf").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(check_input(&chess, b"Nf3e5"), CheckOutcome::Match);
    assert_eq!(check_input(&chess, b"e2e4"), CheckOutcome::Match);
    assert!(matches!(
        check_input(&chess, b"e9"),
        CheckOutcome::Mismatch { offset: 1, .. }
    ));
    let csv = testdata("csv.gbnf").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        check_input(&csv, b"name,note\nann,\"a, \"\"b\"\"\nc\"\n"),
        CheckOutcome::Match
    );
    assert!(matches!(
        check_input(&csv, b"a,\"b\"c\n"),
        CheckOutcome::Mismatch { offset: 5, .. }
    ));
    assert!(
        matches!(testdata("left-recursive.gbnf"), Err(GrammarError::LeftRecursion { rule, at, .. }) if rule == "expr" && at == Location::at(4, 1))
    );
    assert!(
        matches!(testdata("token-terminal.gbnf"), Err(GrammarError::TokenTerminal { text, .. }) if text == "<think>")
    );
    assert!(matches!(
        testdata("big-repetition.gbnf"),
        Err(GrammarError::RepetitionTooLarge { bound: 5000, .. })
    ));
}

mod no_panics {
    use super::*;
    use proptest::prelude::*;

    /// Pieces of GBNF syntax, so random sources get past the first token often.
    fn fragment() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "root",
            " ::= ",
            "::=",
            "a",
            "b-c",
            "x_1",
            "\"",
            "\"lit\"",
            "\\",
            "\\x4",
            "\\u00e9",
            "[",
            "]",
            "^",
            "-",
            "[^a-z]",
            "(",
            ")",
            "|",
            "*",
            "+",
            "?",
            "{",
            "}",
            "{2,3}",
            "{1,}",
            ",",
            "0",
            "9999",
            ".",
            "<",
            ">",
            "<think>",
            "!",
            "#",
            " ",
            "\n",
            "\r\n",
            "\t",
            "é",
            "\u{1F600}",
        ])
        .prop_map(str::to_string)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn random_sources_never_panic(pieces in prop::collection::vec(fragment(), 0..40)) {
            let source = pieces.concat();
            if let Ok(grammar) = compile_gbnf(source.as_bytes(), &Limits::default()) {
                for input in ["", "a", "lit", "é", "aaaa"] {
                    let _ = check_input(&grammar, input.as_bytes());
                }
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = compile_gbnf(&bytes, &Limits::default());
        }
    }
}
