//! [`WordDfa`]: a lexicon compiled to a deterministic automaton over symbols (see `decode.rs`),
//! one dense row of next states per state, built once when the lexicon loads.
//!
//! A deny list is an Aho-Corasick automaton with word boundaries. Its text is read as if a
//! *boundary* symbol stood between every non-word symbol (or the start) and the word symbol
//! after it; an entry is built with one wherever its text has one, and with one in front when
//! it must start a word (`word` and `prefix` modes, first symbol a word symbol), so an entry
//! matched inside words too (`substring`) simply has none there. A state stands for the listed
//! prefixes the text currently ends with: its longest one, a node of the trie of entries, from
//! which the others follow by failure links. The boundary is read with the word symbol after it
//! in one step (a node ending in a boundary is never rested in). Two roots stand for "no
//! prefix": after a word symbol and after anything else, since only the latter reads a
//! boundary next. A state where a `word` entry ending in a word symbol is complete is
//! *pending*: a following word symbol cancels the match (`ass` in `assess`), a following
//! non-word symbol confirms it (the step is dead), and the end of the output confirms it too
//! (end-of-generation is refused). Any other entry is confirmed as soon as it completes. A
//! space after a space leaves the state as it is, so a phrase matches across any run of
//! whitespace. A third root, which no text reaches, stands for "a listed word complete and
//! nothing else" (see `masks.rs`).
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
use super::MatchMode;

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
            let at = trie.insert(root, pattern);
            if trie.entry[at as usize] == NO_ENTRY {
                trie.entry[at as usize] = index as u32;
            }
        }
        trie
    }

    /// The node of `pattern` below `root`, added where missing; a boundary adds no depth.
    fn insert(&mut self, root: u32, pattern: &[u8]) -> u32 {
        let mut at = root;
        for &symbol in pattern {
            at = match self.child(at, symbol) {
                Some(child) => child,
                None => {
                    let child = self.children.len() as u32;
                    self.children.push(Vec::new());
                    self.entry.push(NO_ENTRY);
                    self.last.push(symbol);
                    self.depth.push(self.depth[at as usize] + u32::from(symbol != BOUNDARY));
                    self.children[at as usize].push((symbol, child));
                    child
                }
            };
        }
        at
    }

    fn child(&self, node: u32, symbol: u8) -> Option<u32> {
        self.children[node as usize].iter().find(|(s, _)| *s == symbol).map(|(_, child)| *child)
    }

    fn len(&self) -> usize {
        self.children.len()
    }
}

/// Deny lists, while building only: the boundary, read between a non-word symbol (or the start)
/// and a word symbol. Never a symbol of text (see `decode.rs`).
const BOUNDARY: u8 = 0xFD;

/// A deny pattern as the automaton is built from it: a boundary before each of its word symbols
/// that follows a non-word one (the text has one there too), and before its first symbol when
/// that is a word symbol and the entry must start a word (`word` and `prefix` modes).
fn with_boundaries(pattern: &[u8], mode: MatchMode) -> Vec<u8> {
    let mut extended = Vec::with_capacity(pattern.len() + 2);
    for (index, &symbol) in pattern.iter().enumerate() {
        let after_non_word = match index {
            0 => mode != MatchMode::Substring,
            _ => !is_word_symbol(pattern[index - 1]),
        };
        if after_non_word && is_word_symbol(symbol) {
            extended.push(BOUNDARY);
        }
        extended.push(symbol);
    }
    extended
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
    /// spaces; see `entries.rs`), each matched as its mode says.
    pub(crate) fn deny(patterns: &[Vec<u8>], modes: &[MatchMode], max_bytes: usize) -> Result<WordDfa, LexiconError> {
        let (class_of, representatives) = classes_of(patterns);
        let classes = representatives.len();
        let extended: Vec<Vec<u8>> =
            patterns.iter().zip(modes).map(|(pattern, &mode)| with_boundaries(pattern, mode)).collect();
        let mut trie = Trie::of(&extended, AFTER_BOUNDARY, PENDING_WORD as usize + 1);
        // Every state's boundary step ends at a boundary node (see `boundary_step` below).
        trie.insert(AFTER_BOUNDARY, &[BOUNDARY]);
        let states = trie.len();
        check_size(states, classes, max_bytes)?;
        let mut next = vec![DEAD; states * classes];
        // Per state, where a boundary leads (the text's next symbol is a word symbol after a
        // non-word one); a node ending in a boundary, whose row stays as built below.
        let mut boundary_step = vec![DEAD; states];
        let mut fail = vec![DEAD; states];
        let mut pending = vec![false; states];
        let mut confirmed = vec![false; states];
        let mut root = vec![AFTER_BOUNDARY; states];
        root[INSIDE_WORD as usize] = INSIDE_WORD;
        root[PENDING_WORD as usize] = PENDING_WORD;
        pending[PENDING_WORD as usize] = true;
        // The roots, boundaries not yet read: a listed text may start with what its first
        // symbol is (a boundary, or a symbol of an entry matched inside words too).
        for (class, &symbol) in representatives.iter().enumerate() {
            for state in [AFTER_BOUNDARY, INSIDE_WORD, PENDING_WORD] {
                next[state as usize * classes + class] = match trie.child(AFTER_BOUNDARY, symbol) {
                    _ if is_probe(symbol) => state,
                    Some(child) => child,
                    None if is_word_symbol(symbol) => INSIDE_WORD,
                    None => AFTER_BOUNDARY,
                };
            }
        }
        boundary_step[AFTER_BOUNDARY as usize] = trie.child(AFTER_BOUNDARY, BOUNDARY).unwrap_or(DEAD);
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
            let whole_word = ends_here && ends_word && modes[trie.entry[s] as usize] == MatchMode::Word;
            pending[s] = whole_word || pending[link];
            confirmed[s] = (ends_here && !whole_word) || confirmed[link];
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
            boundary_step[s] = trie.child(state, BOUNDARY).unwrap_or(boundary_step[link]);
            for &(symbol, child) in &trie.children[s] {
                fail[child as usize] = match symbol {
                    BOUNDARY => boundary_step[link],
                    _ => next[link * classes + class_of[symbol as usize] as usize],
                };
                queue.push_back(child);
            }
        }
        // A word symbol after a non-word one reads the boundary first. Nodes ending in a
        // boundary are never rested in, and keep the rows read here.
        for state in AFTER_BOUNDARY as usize..states {
            let last_is_word = state == INSIDE_WORD as usize
                || state == PENDING_WORD as usize
                || (state > PENDING_WORD as usize && is_word_symbol(trie.last[state]));
            if last_is_word || trie.last[state] == BOUNDARY {
                continue;
            }
            let through = boundary_step[state] as usize;
            for (class, &symbol) in representatives.iter().enumerate() {
                if is_word_symbol(symbol) {
                    next[state * classes + class] = next[through * classes + class];
                }
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
