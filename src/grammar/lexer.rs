//! Lexeme loops on a vocabulary: the token tables that make a mask from inside a string body
//! (or any state that loops on a set of characters) a lookup plus a small walk, shared by
//! every grammar on that vocabulary.
//!
//! A state that reads every character made of a byte set `S` and comes back to itself (the
//! body of a JSON string, an extra object key, free text) allows every token made only of
//! whole characters of `S`, whatever the grammar around it. Every other token splits into
//! the longest prefix of whole `S` characters, which leads back to the same state, and the
//! rest, its *exit*, which starts at the first character that leaves the loop (a closing
//! quote, an escape, a control character). A token that ends inside a character some
//! character of `S` completes is allowed like those within `S`: that character would lead
//! back to the state, so the state after the partial one is alive. Tokens with the same exit
//! behave alike, so the exits form a small trie of their own: a mask from a looping state is
//! the set of tokens within `S` (computed once per vocabulary and set) plus a walk of the
//! exit trie, where a walk of the whole token trie would visit every prefix of every token
//! that holds a quote or a newline.
//!
//! The same tables serve a state in a bounded chain over the set (a string with `maxLength`,
//! `k` characters left): a token within the set is allowed when it has at most `k`
//! characters, and an exit is walked from the chain state its prefix leads to, which is the
//! same state for most exits whatever the prefix (a closing quote).
//!
//! Key types: [`LoopExits`] (per byte set and vocabulary), [`LexemeTables`] (the bounded
//! cache of them, kept by the vocabulary's `TokenTrie`). Cost: building one is a pass over
//! the vocabulary plus sorting its exits; it is built only when exits are few (at most a
//! quarter of the vocabulary), so a walk of it visits a small part of what a trie walk would.
//! A bounded use with `k` characters left makes the mask of the within-tokens of at most `k`
//! characters on first use: a pass over the smaller side of the vocabulary split at `k`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::ir::{starts_character, ByteSet};
use super::mask::TokenMask;

/// Most byte sets whose tables a vocabulary keeps (cleared whole past this).
const LOOP_EXITS_MAX: usize = 16;

/// A loop's tables are built only when at most one token in this many has an exit: with
/// more, a trie walk with skip sets visits little more than the exit trie would, and sorting
/// the exits costs more than the walks save.
pub(crate) const EXIT_SHARE: usize = 4;

/// Nor when more than this many tokens have an exit, whatever the vocabulary's size: the
/// tables cost a pass over the vocabulary plus a sort of the exits, all inside the one mask
/// that first asks for them (~16 ms for a key that must avoid a word's first letter at 262k
/// tokens, where a trie walk takes ~4 ms).
pub(crate) const EXITS_MOST: usize = 1 << 14;

/// The most characters left in a bounded chain that the tables answer for; a chain is
/// followed no further than this anyway (see the matcher's `CHAIN_MAX`).
pub(crate) const BOUNDED_CHARS_MAX: usize = 32;

/// The byte that marks a subtree (of the token trie or an exit trie) holding a token or an
/// exit that is not valid UTF-8. Skip sets are made of bytes from 1 up, so none covers it.
pub(crate) const INVALID_MARK: u8 = 0;

/// One node of the exit trie, in depth-first preorder like the token trie's nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExitNode {
    /// Index one past the last node of this node's subtree.
    pub(crate) subtree_end: u32,
    pub(crate) byte: u8,
    /// 1 for the first byte of an exit.
    pub(crate) depth: u16,
    /// The longest exit through this node, in bytes.
    pub(crate) longest: u16,
}

/// The tokens of a vocabulary seen from a state that loops on a byte set.
pub(crate) struct LoopExits {
    /// Tokens (duplicates included) made only of whole valid UTF-8 characters of the set,
    /// the last of which may be cut short (see [`completable_within`]).
    pub(crate) within: TokenMask,
    /// The distinct exits as a flat trie.
    pub(crate) nodes: Vec<ExitNode>,
    /// Per node: the bytes of its subtree, its own included, with [`INVALID_MARK`] where an
    /// exit in it is not valid UTF-8; a walk allows a subtree whole where a skip set covers it.
    pub(crate) subtree_bytes: Vec<ByteSet>,
    /// Per node and one past the end: where the tokens whose exit ends at that node start in
    /// `tokens`.
    token_starts: Vec<u32>,
    tokens: Vec<u32>,
    /// Per entry of `tokens`: the characters of its prefix within the loop, before the exit.
    prefix_chars: Vec<u16>,
    /// The longest exit, in bytes.
    pub(crate) max_depth: usize,
    /// At index `k`, once asked for: the tokens of `within` of at most `k` characters.
    within_by_chars: [OnceLock<TokenMask>; BOUNDED_CHARS_MAX + 1],
}

impl LoopExits {
    /// The tokens whose exit is the path to node `index`.
    #[inline]
    pub(crate) fn tokens_at(&self, index: usize) -> &[u32] {
        self.tokens_with_prefixes_at(index).0
    }

    /// The tokens whose exit is the path to node `index`, each with the characters of its
    /// prefix within the loop.
    #[inline]
    pub(crate) fn tokens_with_prefixes_at(&self, index: usize) -> (&[u32], &[u16]) {
        let start = self.token_starts.get(index).copied().unwrap_or(0) as usize;
        let end = self.token_starts.get(index + 1).copied().unwrap_or(0) as usize;
        (
            self.tokens.get(start..end).unwrap_or_default(),
            self.prefix_chars.get(start..end).unwrap_or_default(),
        )
    }

    /// The tokens whose exit runs through node `index`: those of its subtree.
    pub(crate) fn tokens_under(&self, index: usize) -> &[u32] {
        let end = self.nodes.get(index).map_or(index, |node| node.subtree_end as usize);
        let start = self.token_starts.get(index).copied().unwrap_or(0) as usize;
        let end = self.token_starts.get(end).copied().unwrap_or(0) as usize;
        self.tokens.get(start..end).unwrap_or_default()
    }

    /// The tokens within the loop of at most `chars` characters, or `None` past
    /// [`BOUNDED_CHARS_MAX`]; `longer` and `up_to` split the vocabulary into the tokens of
    /// more characters and the others. Each count's mask is made on first use from the
    /// smaller of the two lists, so no single mask pays for the tables of every count.
    pub(crate) fn within_up_to(&self, chars: usize, longer: &[u32], up_to: &[u32]) -> Option<&TokenMask> {
        let slot = self.within_by_chars.get(chars)?;
        Some(slot.get_or_init(|| {
            if longer.len() < up_to.len() {
                let mut mask = self.within.clone();
                for &token in longer {
                    mask.unset(token);
                }
                mask
            } else {
                let mut mask = TokenMask::new(self.within.vocab_size());
                for &token in up_to.iter().filter(|&&token| self.within.is_set(token)) {
                    mask.set(token);
                }
                mask
            }
        }))
    }

    /// The tables from the tokens within the loop (`within`) and every other token with its
    /// exit and the characters of its prefix within the loop.
    pub(crate) fn new(within: TokenMask, exits: Vec<(&[u8], u32, u16)>) -> LoopExits {
        let exits = sorted_exits(exits);
        let mut nodes: Vec<ExitNode> = Vec::with_capacity(exits.len() * 2);
        let mut token_starts: Vec<u32> = Vec::with_capacity(exits.len() * 2 + 1);
        let mut tokens: Vec<u32> = Vec::with_capacity(exits.len());
        let mut prefix_chars: Vec<u16> = Vec::with_capacity(exits.len());
        let mut subtree_bytes: Vec<ByteSet> = Vec::with_capacity(exits.len() * 2);
        // Open nodes along the current path; path[d] is at depth d + 1.
        let mut path: Vec<usize> = Vec::new();
        let mut previous: &[u8] = &[];
        let mut max_depth = 0;
        for &(exit, token, chars) in &exits {
            let shared = previous
                .iter()
                .zip(exit)
                .take_while(|(a, b)| a == b)
                .count();
            // The same exit as the previous token: the node is open at the end of the path.
            if shared == exit.len() && shared == previous.len() {
                tokens.push(token);
                prefix_chars.push(chars);
                continue;
            }
            while path.len() > shared {
                if let Some(closed) = path.pop() {
                    nodes[closed].subtree_end = nodes.len() as u32;
                }
            }
            for (offset, &byte) in exit.iter().enumerate().skip(shared) {
                path.push(nodes.len());
                token_starts.push(tokens.len() as u32);
                nodes.push(ExitNode {
                    subtree_end: 0,
                    byte,
                    depth: offset as u16 + 1,
                    longest: 0,
                });
                subtree_bytes.push(ByteSet::single(byte));
            }
            // The exit starts a character, so it is valid UTF-8 from any character on in it
            // exactly when it is valid whole.
            if std::str::from_utf8(exit).is_err() {
                if let Some(last) = subtree_bytes.last_mut() {
                    last.insert(INVALID_MARK);
                }
            }
            for &open in &path {
                nodes[open].longest = nodes[open].longest.max(exit.len() as u16);
            }
            // Sorted order puts an exit before those it is a prefix of, so the tokens of a
            // node come before those of every node after it in preorder.
            tokens.push(token);
            prefix_chars.push(chars);
            max_depth = max_depth.max(exit.len());
            previous = exit;
        }
        let end = nodes.len() as u32;
        for open in path {
            nodes[open].subtree_end = end;
        }
        token_starts.push(tokens.len() as u32);
        // Children come after their parent in preorder: a backward pass folds each node's
        // bytes into its children's.
        for index in (0..nodes.len()).rev() {
            let end = nodes[index].subtree_end as usize;
            let mut child = index + 1;
            while child < end {
                subtree_bytes[index] = subtree_bytes[index].union(&subtree_bytes[child]);
                child = nodes[child].subtree_end as usize;
            }
        }
        LoopExits {
            within,
            nodes,
            subtree_bytes,
            token_starts,
            tokens,
            prefix_chars,
            max_depth,
            within_by_chars: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

/// `exits` in the order `sort_unstable` gives them (by exit, then token and characters), sorted
/// by each exit's first eight bytes as one word first: a set that leaves the loop on a common
/// letter has exits in a quarter of a large vocabulary, and comparing them as slices made
/// the sort most of the cost of its tables.
fn sorted_exits(exits: Vec<(&[u8], u32, u16)>) -> Vec<(&[u8], u32, u16)> {
    // Big-endian and zero-padded, the word orders exits as their bytes do, up to ties.
    let word = |exit: &[u8]| exit.iter().take(8).enumerate().fold(0u64, |word, (at, &b)| word | u64::from(b) << (56 - 8 * at));
    let mut keyed: Vec<(u64, (&[u8], u32, u16))> = exits.into_iter().map(|exit| (word(exit.0), exit)).collect();
    keyed.sort_unstable_by(|(word_a, a), (word_b, b)| {
        word_a.cmp(word_b).then_with(|| {
            // Equal words of exits of at most eight bytes: the shorter one (zero-padded) is a
            // prefix of the longer one.
            if a.0.len().max(b.0.len()) <= 8 {
                a.0.len().cmp(&b.0.len())
            } else {
                a.0.cmp(b.0)
            }
            .then_with(|| (a.1, a.2).cmp(&(b.1, b.2)))
        })
    });
    keyed.into_iter().map(|(_, exit)| exit).collect()
}

/// The characters `bytes` starts (its bytes that are not UTF-8 continuation bytes).
pub(crate) fn character_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| starts_character(**b)).count()
}

/// How many leading bytes of `bytes` are whole valid UTF-8 characters made only of `set`.
pub(crate) fn whole_characters_within(bytes: &[u8], set: &ByteSet) -> usize {
    let mut at = 0;
    while let Some(&lead) = bytes.get(at) {
        let width = match lead {
            0x00..=0x7F if set.contains(lead) => {
                at += 1;
                continue;
            }
            0x00..=0x7F => return at,
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return at,
        };
        let Some(character) = bytes.get(at..at + width) else {
            return at;
        };
        if std::str::from_utf8(character).is_err() || !character.iter().all(|b| set.contains(*b)) {
            return at;
        }
        at += width;
    }
    at
}

/// Whether `bytes` is the start of a valid UTF-8 character (one byte short of it at least)
/// that some character made only of `set` completes: from a state that loops on `set`, such
/// a token tail keeps the automaton alive (the character it starts leads back into the loop),
/// whatever grammar is around the loop.
pub(crate) fn completable_within(bytes: &[u8], set: &ByteSet) -> bool {
    let Some(&lead) = bytes.first() else {
        return false;
    };
    // A character's width and the range of its second byte, by its lead byte (RFC 3629);
    // every later byte is a plain continuation byte.
    const TAIL: (u8, u8) = (0x80, 0xBF);
    let (width, second) = match lead {
        0xC2..=0xDF => (2, TAIL),
        0xE0 => (3, (0xA0, 0xBF)),
        0xE1..=0xEC | 0xEE..=0xEF => (3, TAIL),
        0xED => (3, (0x80, 0x9F)),
        0xF0 => (4, (0x90, 0xBF)),
        0xF1..=0xF3 => (4, TAIL),
        0xF4 => (4, (0x80, 0x8F)),
        _ => return false,
    };
    if bytes.len() >= width || !set.contains(lead) {
        return false;
    }
    (1..width).all(|position| {
        let (low, high) = if position == 1 { second } else { TAIL };
        match bytes.get(position) {
            Some(&byte) => (low..=high).contains(&byte) && set.contains(byte),
            None => (low..=high).any(|byte| set.contains(byte)),
        }
    })
}

/// The [`LoopExits`] of the byte sets asked for on one vocabulary, and the sets found not
/// worth them; bounded.
#[derive(Default)]
pub(crate) struct LexemeTables(Mutex<HashMap<(ByteSet, Option<u8>), Option<Arc<LoopExits>>>>);

impl std::fmt::Debug for LexemeTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LexemeTables")
    }
}

impl LexemeTables {
    /// The tables of `loop_bytes` (for the tokens after `lead`, if given), made by `build`
    /// on first use; `None`, remembered, when `build` found them not worth having.
    pub(crate) fn get_or_build(
        &self,
        loop_bytes: &ByteSet,
        lead: Option<u8>,
        build: impl FnOnce() -> Option<LoopExits>,
    ) -> Option<Arc<LoopExits>> {
        let mut known = match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = (*loop_bytes, lead);
        if let Some(entry) = known.get(&key) {
            return entry.clone();
        }
        let built = build().map(Arc::new);
        if known.len() >= LOOP_EXITS_MAX {
            known.clear();
        }
        known.insert(key, built.clone());
        built
    }
}

#[cfg(test)]
impl LexemeTables {
    pub(crate) fn built(&self) -> usize {
        match self.0.lock() {
            Ok(known) => known.values().filter(|entry| entry.is_some()).count(),
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(bytes: &[u8]) -> ByteSet {
        bytes
            .iter()
            .fold(ByteSet::EMPTY, |s, b| s.union(&ByteSet::single(*b)))
    }

    #[test]
    fn splits_at_the_first_character_outside_the_set() {
        let mut letters = set_of(b"ab ");
        // é is C3 A9: both bytes in the set make it a whole character within.
        letters.insert(0xC3);
        letters.insert(0xA9);
        assert_eq!(whole_characters_within(b"ab a", &letters), 4);
        assert_eq!(whole_characters_within(b"ab\"x", &letters), 2);
        assert_eq!(whole_characters_within("a\u{e9}b".as_bytes(), &letters), 4);
        // A partial character is an exit even when its bytes are in the set.
        assert_eq!(whole_characters_within(&[b'a', 0xC3], &letters), 1);
        // è (C3 A8): its second byte is outside.
        assert_eq!(whole_characters_within("a\u{e8}".as_bytes(), &letters), 1);
    }

    #[test]
    fn a_cut_character_is_within_when_the_set_can_complete_it() {
        let mut string_body = ByteSet::range(0x20, 0x7E).union(&ByteSet::range(0x80, 0xF4));
        string_body.remove(b'"');
        assert!(completable_within(&[0xC3], &string_body));
        assert!(completable_within(&[0xE2, 0x82], &string_body));
        assert!(completable_within(&[0xF0, 0x9F, 0x98], &string_body));
        // Whole characters, ASCII and bytes no character starts with are not cut ones.
        assert!(!completable_within(&[0xC3, 0xA9], &string_body));
        assert!(!completable_within(b"a", &string_body));
        assert!(!completable_within(&[0x80], &string_body));
        assert!(!completable_within(&[0xC0], &string_body));
        // E0 80 starts no character (overlong), ED A0 only a surrogate.
        assert!(!completable_within(&[0xE0, 0x80], &string_body));
        assert!(!completable_within(&[0xED, 0xA0], &string_body));
        // é (C3 A9) alone in the set: C3 is completed by A9, but E2 by nothing.
        let e_acute = set_of(b"ab").union(&set_of(&[0xC3, 0xA9]));
        assert!(completable_within(&[0xC3], &e_acute));
        assert!(!completable_within(&[0xC4], &e_acute));
        let mut no_tails = string_body;
        for byte in 0x80..=0xBF {
            no_tails.remove(byte);
        }
        assert!(!completable_within(&[0xC3], &no_tails));
    }

    #[test]
    fn exits_sort_by_their_first_word_as_by_their_bytes() {
        // Zero bytes, prefixes of each other, exits alike in their first eight bytes and
        // longer, the same exit for several tokens: every way two words can tie.
        let texts: [&[u8]; 14] = [
            b"\"", b"\",", b"\"\0", b"\"\0\0", b"", b"\0", b"abcdefgh", b"abcdefghi", b"abcdefgh\0",
            b"abcdefg", b"abcdefgz", b"\xff\xff", b"\"", b"abcdefghi",
        ];
        let exits: Vec<(&[u8], u32, u16)> =
            texts.iter().enumerate().map(|(at, text)| (*text, (at as u32 * 7) % 5, at as u16 % 3)).collect();
        let mut expected = exits.clone();
        expected.sort_unstable();
        let mut reversed = exits.clone();
        reversed.reverse();
        assert_eq!(sorted_exits(exits), expected);
        assert_eq!(sorted_exits(reversed), expected);
    }

    #[test]
    fn within_up_to_a_count_is_the_same_from_either_side_of_the_split() {
        // Characters per token: 0:1, 1:2, 2:3, 3:1, 4:5, 5:2; tokens 3 and 5 are exits.
        let mut within = TokenMask::new(6);
        within.set_all(&[0, 1, 2, 4]);
        let exits = LoopExits::new(within, vec![(b"\"", 3, 0), (b"\"", 5, 1)]);
        let by_characters = [4, 2, 1, 5, 0, 3];
        let set = |mask: Option<&TokenMask>| mask.map(|mask| mask.iter_set().collect::<Vec<_>>());
        // Fewer longer tokens (2) than shorter ones (4): `within` less the longer ones.
        let (longer, up_to) = by_characters.split_at(2);
        assert_eq!(set(exits.within_up_to(2, longer, up_to)), Some(vec![0, 1]));
        // Fewer shorter tokens: those of them within.
        let (longer, up_to) = by_characters.split_at(4);
        assert_eq!(set(exits.within_up_to(1, longer, up_to)), Some(vec![0]));
        assert_eq!(set(exits.within_up_to(BOUNDED_CHARS_MAX + 1, &[], &by_characters)), None);
    }

    #[test]
    fn exits_form_a_trie_holding_every_token_once() {
        let mut within = TokenMask::new(8);
        within.set(0);
        let exits: Vec<(&[u8], u32, u16)> = vec![
            (b"\",", 5, 0),
            (b"\"", 3, 2),
            (b"\n", 7, 1),
            (b"\",", 2, 0),
            (b"\"", 1, 0),
            (b"\",", 4, 3),
        ];
        let exits = LoopExits::new(within, exits);
        let shape: Vec<(u8, u16, u16, u32, Vec<u32>)> = exits
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.byte, n.depth, n.longest, n.subtree_end, exits.tokens_at(i).to_vec()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (b'\n', 1, 1, 1, vec![7]),
                (b'"', 1, 2, 3, vec![1, 3]),
                (b',', 2, 2, 3, vec![2, 4, 5]),
            ]
        );
        assert_eq!(exits.max_depth, 2);
        let (tokens, prefix_chars) = exits.tokens_with_prefixes_at(2);
        assert_eq!((tokens, prefix_chars), (&[2, 4, 5][..], &[0, 3, 0][..]));
        assert_eq!(exits.within.iter_set().collect::<Vec<_>>(), vec![0]);
    }
}
