//! Loading: the file format, every budget refused with the limit named, and the messages.

use super::*;

#[test]
fn files_hold_one_entry_per_line_with_comments_and_a_kind() {
    let text = "#!deny\n# brand words\n\n  bad  \nbad word\n\\#tag\n";
    let lexicon = Lexicon::parse(text, None, None, &LexiconLimits::default()).expect("loads");
    assert_eq!((lexicon.kind(), lexicon.entry_count()), (LexiconKind::Deny, 3));
    let check = |text: &str| check_text(&lexicon, text.as_bytes(), Target::Text) == LexiconCheck::Pass;
    assert!(!check("so bad"));
    assert!(!check("a #tag"), "`\\#` stands for `#`");
    assert!(check("brand words"), "comments are not entries");
    // The kind may come from the caller when the file does not say.
    let allowed = Lexicon::parse("yes\nno\n", Some(LexiconKind::Allow), None, &LexiconLimits::default()).expect("loads");
    assert_eq!(allowed.kind(), LexiconKind::Allow);
    let declared = Lexicon::parse("#!allow\nyes\n", Some(LexiconKind::Deny), None, &LexiconLimits::default()).expect("loads");
    assert_eq!(declared.kind(), LexiconKind::Allow, "the file's own directive wins");
}

#[test]
fn malformed_files_are_refused_with_the_line() {
    let limits = LexiconLimits::default();
    assert_eq!(Lexicon::parse("bad\n", None, None, &limits).err(), Some(LexiconError::NoKind));
    assert_eq!(
        Lexicon::parse("#!deny\nbad\n#!allow\n", None, None, &limits).err(),
        Some(LexiconError::BadDirective { at: EntryAt::Line(3), text: "#!allow".into() })
    );
    assert!(matches!(Lexicon::parse("#!maybe\n", None, None, &limits), Err(LexiconError::BadDirective { .. })));
    assert_eq!(Lexicon::parse("#!deny\n# only comments\n", None, None, &limits).err(), Some(LexiconError::NoEntries));
}

#[test]
fn every_budget_is_refused_naming_its_limit() {
    let small = LexiconLimits { max_entries: 2, max_bytes: 10, max_entry_bytes: 6, ..LexiconLimits::default() };
    let refusal = |kind, entries: &[&str], limits: &LexiconLimits| Lexicon::new(kind, None, entries, limits).err();
    let error = refusal(LexiconKind::Deny, &["a", "b", "c"], &small).expect("too many");
    assert_eq!(error, LexiconError::TooManyEntries { count: 3, limit: 2 });
    assert_eq!(error.to_string(), "the lexicon has 3 entries, above the limit of 2");
    let error = refusal(LexiconKind::Deny, &["abcdef", "ghijkl"], &small).expect("too many bytes");
    assert_eq!(error, LexiconError::TooManyBytes { bytes: 12, limit: 10 });
    let error = refusal(LexiconKind::Deny, &["ab", "abcdefg"], &small).expect("too long");
    assert_eq!(error.to_string(), "the lexicon's entry 2 is 7 bytes long, above the limit of 6 bytes for one entry");
    let error = Lexicon::parse("#!deny\nok\nabcdefg\n", None, None, &small).err().expect("too long");
    assert_eq!(error, LexiconError::EntryTooLong { at: EntryAt::Line(3), bytes: 7, limit: 6 });
    assert_eq!(
        refusal(LexiconKind::Deny, &["ok", " \u{a0} "], &LexiconLimits::default()),
        Some(LexiconError::EmptyEntry { at: EntryAt::Item(2) })
    );
    assert_eq!(
        refusal(LexiconKind::Allow, &["ok", "--"], &LexiconLimits::default()),
        Some(LexiconError::NoWord { at: EntryAt::Item(2), entry: "--".into() })
    );
    assert_eq!(refusal(LexiconKind::Deny, &[], &LexiconLimits::default()), Some(LexiconError::NoEntries));
}

#[test]
fn an_automaton_past_its_budget_is_refused_at_load() {
    let words: Vec<String> = (0..500).map(|i| format!("word{i}x")).collect();
    let tight = LexiconLimits { max_automaton_bytes: 64 * 1024, ..LexiconLimits::default() };
    let Err(LexiconError::AutomatonTooLarge { states, classes, bytes, limit }) = Lexicon::new(LexiconKind::Deny, None, &words, &tight)
    else {
        panic!("the automaton is over budget")
    };
    assert_eq!(bytes, states * classes * 4);
    assert_eq!(limit, 64 * 1024);
    assert!(bytes > limit);
    let lexicon = Lexicon::new(LexiconKind::Deny, None, &words, &LexiconLimits::default()).expect("fits the default");
    assert_eq!(lexicon.state_count(), states);
}

#[test]
fn several_files_load_as_one_list_of_one_kind() {
    let limits = LexiconLimits::default();
    let both = Lexicon::parse_all(&["#!deny\nbad\n", "#!deny\nworse\n"], None, None, &limits).expect("loads");
    assert_eq!((both.kind(), both.entry_count()), (LexiconKind::Deny, 2));
    assert!(check_text(&both, b"bad", Target::Text) != LexiconCheck::Pass);
    assert!(check_text(&both, b"worse", Target::Text) != LexiconCheck::Pass);
    assert_eq!(
        Lexicon::parse_all(&["#!deny\nbad\n", "#!allow\ngood\n"], None, None, &limits).err(),
        Some(LexiconError::MixedKinds)
    );
}
