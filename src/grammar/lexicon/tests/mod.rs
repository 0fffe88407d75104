//! Lexicon tests: the rules against a plain reference implementation, masks against
//! token-by-token checks on small vocabularies where listed words must be split over tokens,
//! composition with grammars and schemas, and loading limits.

mod allow;
mod compose;
mod deny;
mod load;
mod modes;

use std::sync::Arc;

use super::decode::{is_word_symbol, Decoder, Mode};
use super::*;
use crate::toktrie::TokenTrie;

/// xorshift64*: deterministic and dependency-free.
pub(super) struct TestRng(u64);

impl TestRng {
    pub(super) fn new(seed: u64) -> Self {
        TestRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as usize
    }
}

/// A deny list of whole words (the rule most tests here pin down; `modes.rs` tests the others).
pub(super) fn deny(entries: &[&str]) -> Arc<Lexicon> {
    deny_matching(MatchMode::Word, entries)
}

pub(super) fn deny_matching(mode: MatchMode, entries: &[&str]) -> Arc<Lexicon> {
    Arc::new(Lexicon::new(LexiconKind::Deny, Some(mode), entries, &LexiconLimits::default()).expect("the list loads"))
}

pub(super) fn allow(entries: &[&str]) -> Arc<Lexicon> {
    Arc::new(Lexicon::new(LexiconKind::Allow, None, entries, &LexiconLimits::default()).expect("the list loads"))
}

/// Every single byte, then `pieces`, then one end-of-generation token (the last id).
pub(super) fn vocabulary(pieces: &[&[u8]]) -> Arc<TokenTrie> {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.extend(pieces.iter().map(|piece| piece.to_vec()));
    tokens.push(Vec::new());
    let eog = tokens.len() as u32 - 1;
    Arc::new(TokenTrie::new(&tokens, &[eog]))
}

/// Every piece of up to `longest` bytes of `texts`, each text also with a space before it, a
/// space after it and a `.` after it, and `extra`: tokens cut anywhere in listed words.
pub(super) fn pieces_vocabulary(texts: &[&str], longest: usize, extra: &[&[u8]]) -> Arc<TokenTrie> {
    let mut pieces: Vec<Vec<u8>> = extra.iter().map(|piece| piece.to_vec()).collect();
    for text in texts {
        let bytes = text.as_bytes();
        for start in 0..bytes.len() {
            for end in start + 1..=bytes.len().min(start + longest) {
                pieces.push(bytes[start..end].to_vec());
            }
        }
        pieces.extend([[b" ", bytes].concat(), [bytes, b" "].concat(), [bytes, b"."].concat()]);
    }
    pieces.sort();
    pieces.dedup();
    let borrowed: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    vocabulary(&borrowed)
}

/// A seeded walk of up to `steps` tokens, each drawn from the mask (pieces preferred to single
/// bytes), checking at every position that the mask equals the token-by-token checks; returns
/// the bytes written.
pub(super) fn walk_checking_masks(matcher: &mut LexiconMatcher, seed: u64, steps: usize) -> Vec<u8> {
    let trie = matcher.trie().clone();
    let mut rng = TestRng::new(seed);
    let mut written: Vec<u8> = Vec::new();
    for _ in 0..steps {
        assert_mask_exact(matcher, &String::from_utf8_lossy(&written));
        let allowed: Vec<u32> = matcher.compute_mask().iter_set().filter(|t| !trie.is_eog(*t)).collect();
        let pieces: Vec<u32> = allowed.iter().copied().filter(|t| *t >= 256).collect();
        let pool = if pieces.is_empty() || rng.below(4) == 0 { &allowed } else { &pieces };
        if pool.is_empty() {
            break;
        }
        let token = pool[rng.below(pool.len())];
        matcher.commit(token).expect("a token of the mask commits");
        written.extend_from_slice(trie.token_bytes(token).unwrap_or_default());
    }
    written
}

/// Seeded walks of 24 tokens over `trie` under a deny list of `entries` (each with its mode):
/// the masks are exact at every step, and no prefix written holds a banned entry.
pub(super) fn walks_write_nothing_banned(
    entries: &[(&str, MatchMode)],
    lexicon: &Arc<Lexicon>,
    trie: &Arc<TokenTrie>,
    target: Target,
    seeds: std::ops::Range<u64>,
) {
    for seed in seeds {
        let mut matcher = LexiconMatcher::new(lexicon.clone(), trie.clone(), target).expect("runs");
        let written = walk_checking_masks(&mut matcher, seed, 24);
        for end in 0..=written.len() {
            assert!(
                !naive_banned_matching(entries, &written[..end], target.mode(), false),
                "{:?} holds a banned entry",
                String::from_utf8_lossy(&written[..end])
            );
        }
    }
}

pub(super) fn token_of(trie: &TokenTrie, text: &[u8]) -> u32 {
    (0..trie.vocab_size() as u32)
        .find(|&token| trie.token_bytes(token) == Some(text) && !trie.is_eog(token))
        .unwrap_or_else(|| panic!("{:?} is a token", String::from_utf8_lossy(text)))
}

pub(super) fn eog(trie: &TokenTrie) -> u32 {
    trie.eog_tokens()[0]
}

/// The mask at the matcher's position agrees, token for token, with stepping each token's
/// bytes (and end-of-generation with whether the output may end).
pub(super) fn assert_mask_exact(matcher: &mut LexiconMatcher, context: &str) {
    let vocab_size = matcher.trie().vocab_size() as u32;
    let mask = matcher.compute_mask().clone();
    for token in 0..vocab_size {
        assert_eq!(
            mask.is_set(token),
            matcher.admits(token),
            "token {token} {:?} after {context:?}",
            String::from_utf8_lossy(matcher.token_text(token))
        );
    }
}

/// The deny rules written out plainly for whole-word entries: see [`naive_banned_matching`].
pub(super) fn naive_banned(entries: &[&str], text: &[u8], mode: Mode, at_end: bool) -> bool {
    let entries: Vec<(&str, MatchMode)> = entries.iter().map(|entry| (*entry, MatchMode::Word)).collect();
    naive_banned_matching(&entries, text, mode, at_end)
}

/// The deny rules written out plainly: the symbols of `text` with spaces collapsed, searched
/// for each entry at every position; a boundary checked before an entry that must start a word
/// (word and prefix modes) and after a whole-word one; the end of the text is a boundary when
/// `at_end` (the whole output), not when more may follow.
pub(super) fn naive_banned_matching(entries: &[(&str, MatchMode)], text: &[u8], mode: Mode, at_end: bool) -> bool {
    let Some(symbols) = collapsed_symbols(text, mode) else { return true };
    entries.iter().any(|&(entry, entry_mode)| {
        let Some(pattern) = collapsed_symbols(entry.trim().as_bytes(), Mode::Text) else { return false };
        let pattern: Vec<u8> = pattern.into_iter().skip_while(|s| *s == b' ').collect();
        let pattern: Vec<u8> = {
            let mut p = pattern;
            while p.last() == Some(&b' ') {
                p.pop();
            }
            p
        };
        let starts_word = entry_mode != MatchMode::Substring && is_word_symbol(pattern[0]);
        let ends_word = entry_mode == MatchMode::Word && is_word_symbol(pattern[pattern.len() - 1]);
        (0..=symbols.len().saturating_sub(pattern.len())).any(|at| {
            let end = at + pattern.len();
            end <= symbols.len()
                && symbols[at..end] == pattern[..]
                && (!starts_word || at == 0 || !is_word_symbol(symbols[at - 1]))
                && (!ends_word
                    || (end == symbols.len() && at_end)
                    || symbols.get(end).is_some_and(|s| !is_word_symbol(*s)))
        })
    })
}

/// The allow rules written out plainly: every run of word symbols is a listed word.
pub(super) fn naive_allowed(entries: &[&str], text: &[u8]) -> bool {
    let words = |bytes: &[u8]| -> Vec<Vec<u8>> {
        collapsed_symbols(bytes, Mode::Text)
            .unwrap_or_default()
            .split(|s| !is_word_symbol(*s))
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let listed: Vec<Vec<u8>> = entries.iter().flat_map(|entry| words(entry.as_bytes())).collect();
    words(text).iter().all(|word| listed.contains(word))
}

fn collapsed_symbols(text: &[u8], mode: Mode) -> Option<Vec<u8>> {
    let symbols = Decoder::of(mode).symbols_of(text).ok()?;
    let mut out: Vec<u8> = Vec::new();
    for (symbol, _) in symbols {
        if symbol == b' ' && out.last() == Some(&b' ') {
            continue;
        }
        out.push(symbol);
    }
    Some(out)
}
