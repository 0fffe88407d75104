//! Deny lists: whole-word, case and whitespace rules, matches split over tokens, pending
//! matches at the end of the output, `check_text` positions, and masks against token checks.

use proptest::prelude::*;

use super::*;
use crate::lexicon::check::Reason;

fn text_matcher(lexicon: &Arc<Lexicon>, trie: &Arc<TokenTrie>) -> LexiconMatcher {
    LexiconMatcher::new(lexicon.clone(), trie.clone(), Target::Text).expect("a deny list runs at decode time")
}

fn passes(lexicon: &Lexicon, text: &str) -> bool {
    check_text(lexicon, text.as_bytes(), Target::Text) == LexiconCheck::Pass
}

#[test]
fn the_budgets_last_token_leaves_no_banned_word_at_the_cut() {
    let trie = vocabulary(&[b"the ", b"lazy", b"lazy ", b"lazyish"]);
    let lexicon = deny(&["lazy"]);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    let mut constraint = Constraint::new(None, Some(text_matcher(&lexicon, &trie))).expect("a lexicon");
    constraint.commit(t("the ")).expect("allowed");
    // Mid-budget, `lazy` may come: `lazyish` could follow.
    assert!(constraint.is_allowed(t("lazy")));
    constraint.next_token_is_last();
    assert!(!constraint.is_allowed(t("lazy")), "a cut right after it would leave the word whole");
    assert!(constraint.is_allowed(t("lazyish")) && constraint.is_allowed(eog(&trie)));
    let mask = constraint.compute_mask().clone();
    assert!(!mask.is_set(t("lazy")) && !mask.is_set(t("lazy ")));
    assert!(mask.is_set(t("lazyish")) && mask.is_set(t("l")), "a prefix of the word is no match");
    // A commit ends the rule.
    constraint.commit(t("l")).expect("allowed");
    assert!(constraint.is_allowed(t("a")));
    // After a whole banned word, the last token must turn it into another word.
    let mut pending = Constraint::new(None, Some(text_matcher(&lexicon, &trie))).expect("a lexicon");
    pending.commit(t("lazy")).expect("pending");
    pending.next_token_is_last();
    assert!(pending.compute_mask().is_set(t("i")), "a word character may still follow");
    assert!(!pending.compute_mask().is_set(t(" ")));
}

#[test]
fn a_banned_word_split_over_tokens_is_unreachable() {
    let trie = vocabulary(&[b"ba", b"ad", b"bad", b"badge", b"ge", b"bad ", b" bad.", b"d."]);
    let lexicon = deny(&["bad"]);
    let mut matcher = text_matcher(&lexicon, &trie);
    let t = |text: &str| token_of(&trie, text.as_bytes());
    assert!(matcher.is_allowed(t("badge")));
    // The whole word with a boundary after it, in one token: refused.
    assert!(!matcher.is_allowed(t("bad ")));
    assert!(!matcher.is_allowed(t(" bad.")));
    assert_mask_exact(&mut matcher, "");
    matcher.commit(t("ba")).expect("a prefix of a banned word is fine");
    assert_mask_exact(&mut matcher, "ba");
    assert!(!matcher.is_allowed(t("d.")));
    matcher.commit(t("d")).expect("`bad` may still become `badge`");
    assert_mask_exact(&mut matcher, "bad");
    // Now only a word character may follow, and the output may not end.
    assert!(!matcher.is_allowed(t(" ")));
    assert!(!matcher.is_allowed(t(".")));
    assert!(!matcher.is_allowed(eog(&trie)));
    assert!(!matcher.is_accepting());
    assert!(matcher.is_allowed(t("ge")));
    assert!(matcher.commit(t(" ")).is_err(), "a refused token is not committed");
    matcher.commit(t("ge")).expect("`badge` is another word");
    assert!(matcher.is_accepting());
    assert!(matcher.is_allowed(eog(&trie)));
    assert!(!matcher.is_allowed(t(" bad.")));
    assert_mask_exact(&mut matcher, "badge");
    // Half a character: only its continuation may follow, and the output may not end.
    matcher.commit(0xE2).expect("the lead byte of a dash");
    assert!(!matcher.is_allowed(eog(&trie)));
    assert!(!matcher.is_allowed(u32::from(b'x')), "not UTF-8");
    assert_mask_exact(&mut matcher, "badge + half a dash");
    matcher.commit(0x80).expect("a continuation");
    matcher.commit(0x94).expect("the dash is whole");
    assert!(matcher.is_allowed(eog(&trie)));
}

#[test]
fn only_whole_words_match() {
    let lexicon = deny(&["ass", ".net", "c++"]);
    assert!(passes(&lexicon, "class assess passage"));
    assert!(!passes(&lexicon, "an ass."));
    assert!(!passes(&lexicon, "ass"));
    assert!(!passes(&lexicon, "asp.net"), "`.net` needs no boundary before it");
    assert!(passes(&lexicon, "dotnet and .network"));
    assert!(!passes(&lexicon, "I like c++ a lot"));
    assert!(passes(&lexicon, "abc++"), "`c++` starts with a word character: it needs a boundary before");
    assert!(passes(&lexicon, "ass_hat ass1"), "digits and `_` are word characters");
}

#[test]
fn ascii_case_is_ignored_and_other_letters_match_as_written() {
    let lexicon = deny(&["Bad", "café"]);
    for text in ["bad", "BAD", "bAd", "Café", "CAFé"] {
        assert!(!passes(&lexicon, text), "{text}");
    }
    assert!(passes(&lexicon, "CAFÉ"), "É is not folded");
    assert!(passes(&lexicon, "cafés"));
}

#[test]
fn phrases_match_across_any_run_of_whitespace() {
    let lexicon = deny(&["bad  word"]);
    for text in ["bad word", "bad  word", "so bad\n\t word!", "BAD\u{a0}WORD", "bad\u{3000}word"] {
        assert!(!passes(&lexicon, text), "{text:?}");
    }
    for text in ["bad, word", "bad words", "badword", "bad"] {
        assert!(passes(&lexicon, text), "{text:?}");
    }
}

#[test]
fn punctuation_outside_ascii_separates_words() {
    let lexicon = deny(&["bad", "well—actually"]);
    for text in ["“bad”", "bad—really", "bad😀", "«bad»", "well–actually"] {
        assert!(!passes(&lexicon, text), "{text}");
    }
    assert!(passes(&lexicon, "badé ébad"));
}

#[test]
fn check_says_where_and_which_entry() {
    let lexicon = deny(&["bad", "c++"]);
    let fail = |text: &str| match check_text(&lexicon, text.as_bytes(), Target::Text) {
        LexiconCheck::Fail(violation) => violation,
        LexiconCheck::Pass => panic!("{text:?} passes"),
    };
    let found = fail("ok\nthis is Bad, really");
    assert_eq!((found.offset, found.end, found.line, found.column), (11, 14, 2, 9));
    assert_eq!(found.text, "Bad");
    assert_eq!(found.reason, Reason::Banned { entry: "bad".into(), mode: MatchMode::Word });
    assert_eq!(found.to_string(), "line 2, column 9 (byte 11): \"Bad\" is banned (entry \"bad\", match word)");
    // `bad` alone is confirmed by the newline before the phrase completes.
    assert_eq!(fail("a bad\n  word").text, "bad");
    // Columns count characters.
    let phrase = deny(&["bad word"]);
    let LexiconCheck::Fail(found) = check_text(&phrase, "é a bad\n  word".as_bytes(), Target::Text) else {
        panic!("the phrase matches")
    };
    assert_eq!((found.offset, found.line, found.column), (5, 1, 5));
    assert_eq!(found.text, "bad\n  word");
    assert_eq!(found.reason, Reason::Banned { entry: "bad word".into(), mode: MatchMode::Word });
    // Pending at the end of the text: the end confirms it.
    let found = fail("so bad");
    assert_eq!((found.offset, found.end, found.text.as_str()), (3, 6, "bad"));
    let found = fail("I like c++ a lot");
    assert_eq!((found.offset, found.text.as_str()), (7, "c++"));
    assert_eq!(found.reason, Reason::Banned { entry: "c++".into(), mode: MatchMode::Word });
    let LexiconCheck::Fail(found) = check_text(&lexicon, b"ok \xFF", Target::Text) else { panic!("not UTF-8") };
    assert_eq!((found.offset, found.reason), (3, Reason::NotText));
    let LexiconCheck::Fail(found) = check_text(&lexicon, b"ok \xE2\x80", Target::Text) else { panic!("cut short") };
    assert_eq!((found.offset, found.reason), (3, Reason::NotText));
}

#[test]
fn masks_are_cached_on_the_lexicon_for_every_matcher() {
    let trie = vocabulary(&[b"ba", b"ad"]);
    let lexicon = deny(&["bad"]);
    let mut first = text_matcher(&lexicon, &trie);
    first.commit(token_of(&trie, b"ba")).expect("allowed");
    let computed = first.compute_mask().clone();
    assert_eq!(first.stats().masks_computed, 1);
    let mut second = text_matcher(&lexicon, &trie);
    second.commit(token_of(&trie, b"ba")).expect("allowed");
    assert_eq!(*second.compute_mask(), computed);
    assert_eq!(second.stats().masks_computed, 0, "the first matcher's mask is reused");
    assert_eq!(second.stats().steps, 1);
    assert_eq!(second.stats().cached_steps, 1);
}

const ENTRIES: &[&str] = &["bad", "bad word", "ass", "c++", ".net", "no  way", "Über", "é", "x-ray"];

const FRAGMENTS: &[&str] = &[
    "bad", "ba", "d", "ass", "cl", "c", "++", "+", ".net", ".", "net", "no", "way", " ", "  ", "\n", "\t", "Über",
    "über", "é", "É", "—", "“", "x", "s", "word", "words", "_", "1", "-", "ray", "\u{a0}",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The automaton refuses exactly the texts in which the plainly written rules find a match.
    #[test]
    fn check_agrees_with_the_rules_written_plainly(picks in proptest::collection::vec(0..FRAGMENTS.len(), 0..14)) {
        let text: String = picks.iter().map(|&i| FRAGMENTS[i]).collect();
        let lexicon = deny(ENTRIES);
        let passed = check_text(&lexicon, text.as_bytes(), Target::Text) == LexiconCheck::Pass;
        prop_assert_eq!(passed, !naive_banned(ENTRIES, text.as_bytes(), Mode::Text, true), "{:?}", text);
    }
}

/// Random walks over pieces of the entries, spaces of several lengths, split UTF-8 characters
/// and JSON escapes: the masks are exact (the root masks and pending-path walks), and no
/// prefix written holds a banned entry.
fn masks_match_checks_on_walks(target: Target, seeds: std::ops::Range<u64>) {
    let extra: &[&[u8]] = &[b"   ", b" \n ", b"\\u00", b"\\u0061", b"61", b"2d", b"\\n", b"\\\"", b"\"", b"\xE2\x80"];
    let texts: Vec<&str> = ENTRIES.iter().chain(FRAGMENTS).copied().collect();
    let trie = pieces_vocabulary(&texts, 5, extra);
    let whole_words: Vec<(&str, MatchMode)> = ENTRIES.iter().map(|entry| (*entry, MatchMode::Word)).collect();
    walks_write_nothing_banned(&whole_words, &deny(ENTRIES), &trie, target, seeds);
}

#[test]
fn masks_match_token_checks_on_text() {
    masks_match_checks_on_walks(Target::Text, 0..40);
}

#[test]
fn masks_match_token_checks_on_json() {
    masks_match_checks_on_walks(Target::Json, 100..130);
}
