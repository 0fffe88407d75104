//! Allow lists alone: words only from the list (any case, any separators), the end refused in
//! the middle of a word, `check_text` on the first unlisted word, masks against token checks.

use proptest::prelude::*;

use super::*;
use crate::lexicon::check::Reason;

const WORDS: &[&str] = &["hello", "world", "New York", "help", "42"];

#[test]
fn words_come_only_from_the_list() {
    let lexicon = allow(WORDS);
    let check = |text: &str| check_text(&lexicon, text.as_bytes(), Target::Text);
    for text in ["Hello, world!", "new york", "york new", "", "  ...  ", "help: 42 HELLO—world"] {
        assert_eq!(check(text), LexiconCheck::Pass, "{text:?}");
    }
    let LexiconCheck::Fail(found) = check("hello there world") else { panic!("`there` is not listed") };
    assert_eq!((found.offset, found.end, found.text.as_str()), (6, 11, "there"));
    assert_eq!(found.reason, Reason::NotAllowed);
    assert_eq!(found.to_string(), "line 1, column 7 (byte 6): \"there\" is not a word of the allow list");
    // A listed word's prefix followed by a separator, and one at the very end.
    let LexiconCheck::Fail(found) = check("hel, world") else { panic!("`hel` is not listed") };
    assert_eq!(found.text, "hel");
    let LexiconCheck::Fail(found) = check("world hel") else { panic!("the output may not end inside a word") };
    assert_eq!((found.offset, found.text.as_str()), (6, "hel"));
    let LexiconCheck::Fail(found) = check("worlds") else { panic!("`worlds` is another word") };
    assert_eq!(found.text, "worlds");
}

#[test]
fn tokens_continue_only_listed_words() {
    let trie = vocabulary(&[b"hel", b"lo", b"p", b" wor", b"ld", b"hello", b"!", b" there", b"lo!"]);
    let lexicon = allow(WORDS);
    let mut matcher = LexiconMatcher::new(lexicon, trie.clone(), Target::Text).expect("runs on text");
    let t = |text: &str| token_of(&trie, text.as_bytes());
    assert!(!matcher.is_allowed(t(" there")));
    assert!(matcher.is_allowed(eog(&trie)), "the empty output is fine");
    assert_mask_exact(&mut matcher, "");
    matcher.commit(t("hel")).expect("a prefix of listed words");
    assert!(!matcher.is_allowed(eog(&trie)));
    assert!(!matcher.is_allowed(t("!")), "`hel` is not a word");
    assert!(matcher.is_allowed(t("lo!")));
    assert!(matcher.is_allowed(t("p")));
    assert_mask_exact(&mut matcher, "hel");
    matcher.commit(t("lo")).expect("hello");
    assert!(matcher.is_allowed(eog(&trie)));
    assert_mask_exact(&mut matcher, "hello");
    matcher.commit(t(" wor")).expect("a prefix of world");
    assert_mask_exact(&mut matcher, "hello wor");
    assert!(LexiconMatcher::new(allow(WORDS), trie, Target::Json).is_none(), "on JSON an allow list is compiled into the schema");
}

const FRAGMENTS: &[&str] = &["hello", "hel", "lo", "world", "wor", "ld", "new", "York", "yorks", "42", "4", " ", ", ", "!", "\n", "—", "é", "x", "_"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn check_agrees_with_the_rules_written_plainly(picks in proptest::collection::vec(0..FRAGMENTS.len(), 0..10)) {
        let text: String = picks.iter().map(|&i| FRAGMENTS[i]).collect();
        let lexicon = allow(WORDS);
        let passed = check_text(&lexicon, text.as_bytes(), Target::Text) == LexiconCheck::Pass;
        prop_assert_eq!(passed, naive_allowed(WORDS, text.as_bytes()), "{:?}", text);
    }
}

#[test]
fn masks_match_token_checks_on_walks() {
    let texts: Vec<&str> = FRAGMENTS.iter().chain(WORDS).copied().collect();
    let trie = pieces_vocabulary(&texts, usize::MAX, &[]);
    let lexicon = allow(WORDS);
    for seed in 0..30 {
        let mut matcher = LexiconMatcher::new(lexicon.clone(), trie.clone(), Target::Text).expect("runs");
        let written = walk_checking_masks(&mut matcher, seed, 16);
        // Wherever the walk stopped, if the output may end there, it passes the rules.
        if matcher.is_accepting() {
            assert!(naive_allowed(WORDS, &written), "{:?}", String::from_utf8_lossy(&written));
        }
    }
}
