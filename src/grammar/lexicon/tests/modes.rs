//! Match modes: what `word`, `prefix` and `substring` ban, the default, modes set per entry in
//! a file, allow lists refusing the modes that make no sense there, `check_text` naming the
//! mode, and masks against token checks with every mode in one list (a ban split over tokens
//! or glued to other letters is unreachable, at the end of a budget too).

use proptest::prelude::*;

use super::*;
use crate::lexicon::check::Reason;

fn passes(lexicon: &Lexicon, text: &str) -> bool {
    check_text(lexicon, text.as_bytes(), Target::Text) == LexiconCheck::Pass
}

#[test]
fn word_prefix_and_substring_ban_what_they_say() {
    let word = deny_matching(MatchMode::Word, &["Paris"]);
    let prefix = deny_matching(MatchMode::Prefix, &["Paris"]);
    let substring = deny_matching(MatchMode::Substring, &["Paris"]);
    //                 text               word   prefix substring
    let table: &[(&str, [bool; 3])] = &[
        ("Paris.", [false, false, false]),
        ("PARIS", [false, false, false]),
        ("Parisis the capital", [true, false, false]),
        ("the Parisian cafés", [true, false, false]),
        ("a comparison", [true, true, false]),
        ("Pari", [true, true, true]),
        ("Par is", [true, true, true]),
    ];
    for (text, expected) in table {
        let found = [passes(&word, text), passes(&prefix, text), passes(&substring, text)];
        assert_eq!(found, *expected, "{text:?} passes under word, prefix, substring");
    }
}

#[test]
fn phrases_take_their_mode_at_their_ends() {
    let prefix = deny_matching(MatchMode::Prefix, &["Eiffel Tower"]);
    for text in ["the Eiffel Tower", "eiffel\n towers", "EIFFEL TOWERING"] {
        assert!(!passes(&prefix, text), "{text:?}");
    }
    for text in ["the Eiffel towns", "Eiffel, Tower", "xEiffel Tower"] {
        assert!(passes(&prefix, text), "{text:?}");
    }
    let substring = deny_matching(MatchMode::Substring, &["Eiffel Tower"]);
    assert!(!passes(&substring, "xEiffel Towerx"));
    assert!(passes(&substring, "Eiffel-Tower"));
    // Inside a phrase, a word after a separator starts a word in every mode.
    let inner = deny_matching(MatchMode::Substring, &["a b"]);
    assert!(!passes(&inner, "xa bx"));
    assert!(passes(&inner, "xa xb"));
}

#[test]
fn deny_lists_default_to_prefix_and_allow_lists_to_whole_words() {
    let limits = LexiconLimits::default();
    let denied = Lexicon::new(LexiconKind::Deny, None, &["Paris"], &limits).expect("loads");
    assert!(!passes(&denied, "Parisis") && passes(&denied, "comparison"));
    assert_eq!(MatchMode::default_for(LexiconKind::Deny), MatchMode::Prefix);
    let allowed = Lexicon::new(LexiconKind::Allow, None, &["run"], &limits).expect("loads");
    assert!(passes(&allowed, "run run") && !passes(&allowed, "running"));
    let error = Lexicon::new(LexiconKind::Allow, Some(MatchMode::Prefix), &["run"], &limits).err();
    assert_eq!(error, Some(LexiconError::AllowMatch { mode: MatchMode::Prefix, at: None }));
    assert_eq!(
        error.map(|e| e.to_string()).unwrap_or_default(),
        "an allow list matches whole words only, so `prefix` matching does not apply to it: `prefix` and \
         `substring` are for deny lists"
    );
    let error = Lexicon::parse("#!allow\nyes\n#!match substring\nno\n", None, None, &limits).err();
    assert_eq!(error, Some(LexiconError::AllowMatch { mode: MatchMode::Substring, at: Some(EntryAt::Line(4)) }));
    assert!(Lexicon::parse("#!allow\n#!match word\nyes\n", None, None, &limits).is_ok());
}

#[test]
fn a_file_sets_modes_per_entry_and_the_caller_the_rest() {
    let limits = LexiconLimits::default();
    let text = "#!deny\nParis\n#!match word\nass\n#!match substring\nfoo\n";
    let lexicon = Lexicon::parse(text, None, None, &limits).expect("loads");
    assert_eq!(lexicon.mode_counts(), [1, 1, 1]);
    assert!(!passes(&lexicon, "Parisian"), "before any `#!match`, the list's mode (the default)");
    assert!(passes(&lexicon, "assess") && !passes(&lexicon, "an ass"));
    assert!(!passes(&lexicon, "tofoo"));
    let whole = Lexicon::parse(text, None, Some(MatchMode::Word), &limits).expect("loads");
    assert!(passes(&whole, "Parisian"), "the caller's mode for the entries before `#!match`");
    assert!(!passes(&whole, "tofoo"), "the file's `#!match` wins for the entries after it");
    // An entry listed twice keeps the widest mode.
    let twice = Lexicon::new(LexiconKind::Deny, Some(MatchMode::Word), &["ass"], &limits).expect("loads");
    assert!(passes(&twice, "assess"));
    let twice = Lexicon::parse("#!deny\n#!match word\nass\n#!match prefix\nASS\n", None, None, &limits).expect("loads");
    assert_eq!(twice.mode_counts(), [0, 1, 0]);
    assert!(!passes(&twice, "assess"));
    let error = Lexicon::parse("#!deny\n#!match partial\nx\n", None, None, &limits).err();
    assert_eq!(error, Some(LexiconError::BadMatch { at: EntryAt::Line(2), text: "partial".into() }));
    assert_eq!(
        error.map(|e| e.to_string()).unwrap_or_default(),
        "the lexicon's line 2 sets the unknown match mode \"partial\": use `#!match word`, `#!match prefix` or \
         `#!match substring`"
    );
    assert!(matches!(Lexicon::parse("#!deny\n#!matches word\nx\n", None, None, &limits), Err(LexiconError::BadDirective { .. })));
}

#[test]
fn check_names_the_entry_and_the_mode_that_refused() {
    let lexicon = Lexicon::parse("#!deny\nParis\n#!match substring\ntower\n", None, None, &LexiconLimits::default())
        .expect("loads");
    let fail = |text: &str| match check_text(&lexicon, text.as_bytes(), Target::Text) {
        LexiconCheck::Fail(violation) => violation,
        LexiconCheck::Pass => panic!("{text:?} passes"),
    };
    let found = fail("It is Parisis.");
    assert_eq!((found.offset, found.text.as_str()), (6, "Paris"));
    assert_eq!(found.reason, Reason::Banned { entry: "Paris".into(), mode: MatchMode::Prefix });
    assert_eq!(found.to_string(), "line 1, column 7 (byte 6): \"Paris\" is banned (entry \"Paris\", match prefix)");
    let found = fail("the Eiffeltower");
    assert_eq!((found.offset, found.text.as_str()), (10, "tower"));
    assert_eq!(found.reason, Reason::Banned { entry: "tower".into(), mode: MatchMode::Substring });
}

#[test]
fn a_ban_is_not_escaped_by_splitting_or_gluing_over_tokens() {
    let trie = vocabulary(&[b"Par", b"is", b"isis", b"Paris", b"Parisis", b" Paris", b"ian", b"compa", b"rison", b"comparison"]);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    let prefix = deny_matching(MatchMode::Prefix, &["Paris"]);
    let mut matcher = LexiconMatcher::new(prefix.clone(), trie.clone(), Target::Text).expect("runs");
    for refused in ["Paris", "Parisis", " Paris"] {
        assert!(!matcher.is_allowed(t(refused)), "{refused:?}");
    }
    assert!(matcher.is_allowed(t("comparison")));
    assert_mask_exact(&mut matcher, "");
    matcher.commit(t("Par")).expect("a start of the entry is no match");
    assert!(!matcher.is_allowed(t("is")) && !matcher.is_allowed(t("isis")), "glued or not, `Paris` is refused");
    assert_mask_exact(&mut matcher, "Par");
    matcher.commit(t("i")).expect("still no match");
    assert!(!matcher.is_allowed(t("s")));
    assert!(matcher.is_allowed(eog(&trie)), "`Pari` may end the output");
    // At the end of a budget the same holds, and there is no word pending to refuse.
    let mut constraint = Constraint::new(None, LexiconMatcher::new(prefix, trie.clone(), Target::Text)).expect("a lexicon");
    constraint.commit(t("Par")).expect("allowed");
    constraint.next_token_is_last();
    let mask = constraint.compute_mask().clone();
    assert!(!mask.is_set(t("is")) && !mask.is_set(t("isis")));
    assert!(mask.is_set(t("ian")) && mask.is_set(eog(&trie)), "`Parian` is another word");
    let substring = deny_matching(MatchMode::Substring, &["Paris"]);
    let mut matcher = LexiconMatcher::new(substring, trie.clone(), Target::Text).expect("runs");
    assert!(!matcher.is_allowed(t("comparison")));
    matcher.commit(t("compa")).expect("allowed");
    assert!(!matcher.is_allowed(t("rison")));
    assert_mask_exact(&mut matcher, "compa");
}

#[test]
fn a_whole_word_entry_beside_a_prefix_one_still_waits_for_its_boundary() {
    let lexicon = Lexicon::parse("#!deny\n#!match word\nlazy\n#!match prefix\nParis\n", None, None, &LexiconLimits::default())
        .expect("loads");
    let lexicon = Arc::new(lexicon);
    let trie = vocabulary(&[b"lazy", b"lazyish", b"Paris"]);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    let mut constraint = Constraint::new(None, LexiconMatcher::new(lexicon, trie.clone(), Target::Text)).expect("a lexicon");
    assert!(constraint.is_allowed(t("lazy")) && !constraint.is_allowed(t("Paris")));
    constraint.next_token_is_last();
    assert!(!constraint.is_allowed(t("lazy")), "a cut right after it would leave the word whole");
    assert!(constraint.is_allowed(t("lazyish")));
}

#[test]
fn grammar_literals_a_prefix_ban_rules_out_are_dropped() {
    let lexicon = deny_matching(MatchMode::Prefix, &["Paris"]);
    let compiled = compile_gbnf_with_lexicon(br#"root ::= "Parisian" | "Lyon""#, &crate::limits::Limits::default(), &lexicon)
        .expect("compiles");
    let trie = vocabulary(&[b"Parisian", b"Lyon"]);
    let matcher = crate::Matcher::new(Arc::new(compiled), trie.clone());
    let mut constraint = Constraint::new(Some(matcher), LexiconMatcher::new(lexicon, trie.clone(), Target::Grammar))
        .expect("both");
    assert!(!constraint.is_allowed(token_of(&trie, b"P")), "the alternative is gone");
    assert!(constraint.is_allowed(token_of(&trie, b"Lyon")));
}

const ENTRIES: &[(&str, MatchMode)] = &[
    ("bad", MatchMode::Word),
    ("bad word", MatchMode::Prefix),
    ("ass", MatchMode::Prefix),
    ("ray", MatchMode::Substring),
    ("c++", MatchMode::Prefix),
    (".net", MatchMode::Substring),
    ("no  way", MatchMode::Substring),
    ("Über", MatchMode::Prefix),
    ("é", MatchMode::Substring),
    ("x-ray", MatchMode::Word),
];

const FRAGMENTS: &[&str] = &[
    "bad", "ba", "d", "ass", "cl", "c", "++", "+", ".net", ".", "net", "no", "way", " ", "  ", "\n", "Über", "über",
    "é", "É", "—", "x", "s", "word", "words", "_", "1", "-", "ray", "r", "ay", "\u{a0}",
];

fn mixed() -> Arc<Lexicon> {
    let mut text = String::from("#!deny\n");
    for (entry, mode) in ENTRIES {
        text.push_str(&format!("#!match {mode}\n{entry}\n"));
    }
    Arc::new(Lexicon::parse(&text, None, None, &LexiconLimits::default()).expect("loads"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// With every mode in one list, the automaton refuses exactly the texts in which the plainly
    /// written rules find a match.
    #[test]
    fn check_agrees_with_the_rules_written_plainly_in_every_mode(picks in proptest::collection::vec(0..FRAGMENTS.len(), 0..14)) {
        let text: String = picks.iter().map(|&i| FRAGMENTS[i]).collect();
        let passed = check_text(&mixed(), text.as_bytes(), Target::Text) == LexiconCheck::Pass;
        prop_assert_eq!(passed, !naive_banned_matching(ENTRIES, text.as_bytes(), Mode::Text, true), "{:?}", text);
    }
}

/// Random walks over pieces of the entries: the masks are exact in every mode, and no prefix
/// written holds a banned entry.
fn masks_match_checks_on_walks(target: Target, seeds: std::ops::Range<u64>) {
    let extra: &[&[u8]] = &[b"   ", b" \n ", b"\\u00", b"\\u0061", b"\\n", b"\"", b"\xE2\x80", b"xray", b"array"];
    let texts: Vec<&str> = ENTRIES.iter().map(|(entry, _)| *entry).chain(FRAGMENTS.iter().copied()).collect();
    let trie = pieces_vocabulary(&texts, 5, extra);
    walks_write_nothing_banned(ENTRIES, &mixed(), &trie, target, seeds);
}

#[test]
fn masks_match_token_checks_in_every_mode_on_text() {
    masks_match_checks_on_walks(Target::Text, 0..40);
}

#[test]
fn masks_match_token_checks_in_every_mode_on_json() {
    masks_match_checks_on_walks(Target::Json, 100..130);
}
