//! [`WordDfa`]: a lexicon compiled to a deterministic automaton over symbols (see `decode.rs`),
//! one dense row of next states per state, built once when the lexicon loads.
//!
//! A deny list is an Aho-Corasick automaton with word boundaries. A state stands for the
//! listed prefixes the text currently ends with that started at a word boundary (or whose first
//! symbol is not a word symbol): its longest one, a node of the trie of entries, from which the
//! others follow by failure links. Two roots stand for "no prefix": after a word symbol and
//! after anything else, since a listed word may start only after the latter. A state where an
//! entry ending in a word symbol is complete is *pending*: a following word symbol cancels the
//! match (`ass` in `assess`), a following non-word symbol confirms it (the step is dead), and
//! the end of the output confirms it too (end-of-generation is refused). An entry ending in a
//! non-word symbol is confirmed as soon as it completes. A space after a space leaves the state
//! as it is, so a phrase matches across any run of whitespace. A third root, which no text
//! reaches, stands for "a listed word complete and nothing else" (see `masks.rs`).
//!
//! An allow list is the trie of its words: from the root (between words) a word symbol enters
//! the trie, a non-word symbol stays; inside a word a non-word symbol returns to the root only
//! from a complete word. The output may end at the root or at a complete word.
//!
//! Probes (see `decode.rs`) leave a state as it is, or kill it: for a deny list, the one that
//! announces a non-word character kills a pending state; for an allow list, inside a word that
//! is not complete, it kills, and so does one that announces "a non-word character or a word
//! character starting with this byte" unless the word goes on with that byte.
//!
//! Cost: states x classes x 4 bytes, refused above `LexiconLimits::max_automaton_bytes` before
//! anything is allocated; building is linear in that.

use std::collections::VecDeque;

use super::decode::{is_probe, is_word_symbol, probed_lead, NON_WORD_NEXT, PROBED_LEADS, WORD_OR_NOT_NEXT};
use super::error::LexiconError;

/// The state no listed text can come back from.
pub(crate) const DEAD: u32 = 0;
/// Deny lists: no listed prefix pending, after a non-word symbol or at the start.
pub(crate) const AFTER_BOUNDARY: u32 = 1;
/// Deny lists: no listed prefix pending, after a word symbol.
pub(crate) const INSIDE_WORD: u32 = 2;
/// Deny lists: like [`INSIDE_WORD`], but a listed word is complete and waits for its boundary
/// (no state reaches it; it is the root whose reading of a token a pending state agrees with).
pub(crate) const PENDING_WORD: u32 = 3;
/// Allow lists: between words.
pub(crate) const BETWEEN_WORDS: u32 = 1;
/// `WordDfa::entry_at` of a state where no entry ends.
pub(crate) const NO_ENTRY: u32 = u32::MAX;

pub(crate) struct WordDfa {
    class_of: [u8; 256],
    classes: usize,
    next: Vec<u32>,
    /// Per state: symbols in its longest pending prefix (0 for the roots).
    depth: Vec<u32>,
    accepting: Vec<bool>,
    /// Per state: the root whose reading of a token it agrees with once its pending prefixes
    /// are gone (deny lists; see `masks.rs`).
    root: Vec<u32>,
    /// Per state: whether its longest prefix ends with a space (a next space is skipped).
    ends_with_space: Vec<bool>,
    /// Deny lists, for reports: the failure link and the entry that ends at each trie state.
    pub(crate) fail: Vec<u32>,
    pub(crate) entry_at: Vec<u32>,
    pub(crate) start: u32,
}

/// A trie of symbol strings, entry indices at their ends.
struct Trie {
    children: Vec<Vec<(u8, u32)>>,
    entry: Vec<u32>,
    last: Vec<u8>,
    depth: Vec<u32>,
}

impl Trie {
    /// The trie's root takes id `root`; the other ids below `reserved` stay free (the dead
    /// state, a second root).
    fn of(patterns: &[Vec<u8>], root: u32, reserved: usize) -> Trie {
        let mut trie = Trie {
            children: vec![Vec::new(); reserved],
            entry: vec![NO_ENTRY; reserved],
            last: vec![b' '; reserved],
            depth: vec![0; reserved],
        };
        for (index, pattern) in patterns.iter().enumerate() {
            let mut at = root;
            for &symbol in pattern {
                at = match trie.child(at, symbol) {
                    Some(child) => child,
                    None => {
                        let child = trie.children.len() as u32;
                        trie.children.push(Vec::new());
                        trie.entry.push(NO_ENTRY);
                        trie.last.push(symbol);
                        trie.depth.push(trie.depth[at as usize] + 1);
                        trie.children[at as usize].push((symbol, child));
                        child
                    }
                };
            }
            if trie.entry[at as usize] == NO_ENTRY {
                trie.entry[at as usize] = index as u32;
            }
        }
        trie
    }

    fn child(&self, node: u32, symbol: u8) -> Option<u32> {
        self.children[node as usize].iter().find(|(s, _)| *s == symbol).map(|(_, child)| *child)
    }

    fn len(&self) -> usize {
        self.children.len()
    }
}

/// Symbol classes: each symbol a pattern uses is its own class, the space and each probe too;
/// every other word symbol is one class and every other non-word symbol another. Returns the map and one
/// symbol per class.
fn classes_of(patterns: &[Vec<u8>]) -> ([u8; 256], Vec<u8>) {
    let mut used = [false; 256];
    used[b' ' as usize] = true;
    used[NON_WORD_NEXT as usize] = true;
    for index in 0..PROBED_LEADS.len() {
        used[usize::from(WORD_OR_NOT_NEXT) + index] = true;
    }
    for pattern in patterns {
        for &symbol in pattern {
            used[symbol as usize] = true;
        }
    }
    let mut class_of = [0u8; 256];
    let mut representatives = Vec::new();
    let mut other_word = None;
    let mut other_non_word = None;
    for symbol in 0..=255u8 {
        let class = if used[symbol as usize] {
            representatives.push(symbol);
            representatives.len() - 1
        } else {
            let shared = if is_word_symbol(symbol) { &mut other_word } else { &mut other_non_word };
            *shared.get_or_insert_with(|| {
                representatives.push(symbol);
                representatives.len() - 1
            })
        };
        class_of[symbol as usize] = class as u8;
    }
    (class_of, representatives)
}

fn check_size(states: usize, classes: usize, limit: usize) -> Result<(), LexiconError> {
    let bytes = states.saturating_mul(classes).saturating_mul(4);
    if bytes > limit {
        return Err(LexiconError::AutomatonTooLarge { states, classes, bytes, limit });
    }
    Ok(())
}

impl WordDfa {
    /// The automaton of a deny list of normalized entries (no leading, trailing or double
    /// spaces; see `entries.rs`).
    pub(crate) fn deny(patterns: &[Vec<u8>], max_bytes: usize) -> Result<WordDfa, LexiconError> {
        let (class_of, representatives) = classes_of(patterns);
        let classes = representatives.len();
        let trie = Trie::of(patterns, AFTER_BOUNDARY, PENDING_WORD as usize + 1);
        let states = trie.len();
        check_size(states, classes, max_bytes)?;
        let mut next = vec![DEAD; states * classes];
        let mut fail = vec![DEAD; states];
        let mut pending = vec![false; states];
        let mut confirmed = vec![false; states];
        let mut root = vec![AFTER_BOUNDARY; states];
        root[INSIDE_WORD as usize] = INSIDE_WORD;
        root[PENDING_WORD as usize] = PENDING_WORD;
        pending[PENDING_WORD as usize] = true;
        for (class, &symbol) in representatives.iter().enumerate() {
            if is_probe(symbol) {
                for state in [AFTER_BOUNDARY, INSIDE_WORD, PENDING_WORD] {
                    next[state as usize * classes + class] = state;
                }
                continue;
            }
            let word = is_word_symbol(symbol);
            let start = trie.child(AFTER_BOUNDARY, symbol);
            next[AFTER_BOUNDARY as usize * classes + class] =
                start.unwrap_or(if word { INSIDE_WORD } else { AFTER_BOUNDARY });
            // Inside a word no listed word may start; a listed text that starts with a
            // non-word symbol may.
            next[INSIDE_WORD as usize * classes + class] =
                if word { INSIDE_WORD } else { start.unwrap_or(AFTER_BOUNDARY) };
            next[PENDING_WORD as usize * classes + class] = next[INSIDE_WORD as usize * classes + class];
        }
        // Breadth first, so that a state's failure link has its row before the state does.
        let mut queue: VecDeque<u32> = VecDeque::new();
        for &(symbol, child) in &trie.children[AFTER_BOUNDARY as usize] {
            fail[child as usize] = if is_word_symbol(symbol) { INSIDE_WORD } else { AFTER_BOUNDARY };
            queue.push_back(child);
        }
        while let Some(state) = queue.pop_front() {
            let s = state as usize;
            let link = fail[s] as usize;
            let ends_word = is_word_symbol(trie.last[s]);
            let ends_here = trie.entry[s] != NO_ENTRY;
            pending[s] = (ends_here && ends_word) || pending[link];
            confirmed[s] = (ends_here && !ends_word) || confirmed[link];
            root[s] = match (pending[s], ends_word) {
                (true, _) => PENDING_WORD,
                (false, true) => INSIDE_WORD,
                (false, false) => AFTER_BOUNDARY,
            };
            for (class, &symbol) in representatives.iter().enumerate() {
                next[s * classes + class] = match trie.child(state, symbol) {
                    Some(child) => child,
                    None if is_probe(symbol) || (symbol == b' ' && trie.last[s] == b' ') => state,
                    None => next[link * classes + class],
                };
            }
            for &(symbol, child) in &trie.children[s] {
                fail[child as usize] = next[link * classes + class_of[symbol as usize] as usize];
                queue.push_back(child);
            }
        }
        // Deaths last: the rows above were read as plain prefix sets while building. A word
        // may always follow (a probe for "word or not" never confirms a match).
        for state in AFTER_BOUNDARY as usize..states {
            for (class, &symbol) in representatives.iter().enumerate() {
                let target = &mut next[state * classes + class];
                let non_word_next = symbol == NON_WORD_NEXT || (!is_word_symbol(symbol) && !is_probe(symbol));
                if (non_word_next && pending[state]) || confirmed[*target as usize] {
                    *target = DEAD;
                }
            }
        }
        let mut accepting: Vec<bool> = pending.iter().map(|p| !p).collect();
        accepting[DEAD as usize] = false;
        let ends_with_space = (0..states).map(|s| s > PENDING_WORD as usize && trie.last[s] == b' ').collect();
        Ok(WordDfa {
            class_of,
            classes,
            next,
            depth: trie.depth,
            accepting,
            root,
            ends_with_space,
            fail,
            entry_at: trie.entry,
            start: AFTER_BOUNDARY,
        })
    }

    /// The automaton of an allow list of words (runs of word symbols).
    pub(crate) fn allow(words: &[Vec<u8>], max_bytes: usize) -> Result<WordDfa, LexiconError> {
        let (class_of, representatives) = classes_of(words);
        let classes = representatives.len();
        let trie = Trie::of(words, BETWEEN_WORDS, BETWEEN_WORDS as usize + 1);
        let states = trie.len();
        check_size(states, classes, max_bytes)?;
        let mut next = vec![DEAD; states * classes];
        let mut accepting = vec![false; states];
        for state in BETWEEN_WORDS..states as u32 {
            let s = state as usize;
            let complete = state == BETWEEN_WORDS || trie.entry[s] != NO_ENTRY;
            accepting[s] = complete;
            for (class, &symbol) in representatives.iter().enumerate() {
                // A probe passes where what it announces may follow.
                let probe_passes = match probed_lead(symbol) {
                    Some(lead) => Some(complete || trie.child(state, lead).is_some()),
                    None => (symbol == NON_WORD_NEXT).then_some(complete),
                };
                next[s * classes + class] = if let Some(passes) = probe_passes {
                    if passes { state } else { DEAD }
                } else if is_word_symbol(symbol) {
                    trie.child(state, symbol).unwrap_or(DEAD)
                } else if complete {
                    BETWEEN_WORDS
                } else {
                    DEAD
                };
            }
        }
        Ok(WordDfa {
            class_of,
            classes,
            next,
            depth: vec![0; states],
            accepting,
            root: vec![BETWEEN_WORDS; states],
            ends_with_space: vec![false; states],
            fail: Vec::new(),
            entry_at: trie.entry,
            start: BETWEEN_WORDS,
        })
    }

    #[inline]
    pub(crate) fn next(&self, state: u32, symbol: u8) -> u32 {
        let class = self.class_of[symbol as usize] as usize;
        self.next[state as usize * self.classes + class]
    }

    pub(crate) fn is_accepting(&self, state: u32) -> bool {
        self.accepting.get(state as usize).copied().unwrap_or(false)
    }

    #[inline]
    pub(crate) fn depth(&self, state: u32) -> u32 {
        self.depth[state as usize]
    }

    #[inline]
    pub(crate) fn root(&self, state: u32) -> u32 {
        self.root[state as usize]
    }

    #[inline]
    pub(crate) fn ends_with_space(&self, state: u32) -> bool {
        self.ends_with_space[state as usize]
    }

    pub(crate) fn state_count(&self) -> usize {
        self.depth.len()
    }

    /// Every word symbol a step from `state` keeps alive, with where it leads (for lowering an
    /// allow list to grammar rules).
    pub(crate) fn word_steps(&self, state: u32) -> impl Iterator<Item = (u8, u32)> + '_ {
        (0..=255u8)
            .filter(|&symbol| is_word_symbol(symbol))
            .map(move |symbol| (symbol, self.next(state, symbol)))
            .filter(|(_, target)| *target != DEAD)
    }

    /// The heap bytes this automaton holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.next.len() * 4 + self.depth.len() * 14 + self.fail.len() * 4 + self.entry_at.len() * 4
    }
}
