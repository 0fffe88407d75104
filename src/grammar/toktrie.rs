//! [`TokenTrie`]: the model's vocabulary as a flat prefix tree of token bytes, built once per
//! model and shared in an `Arc` by every matcher.
//!
//! Nodes are stored in depth-first preorder in one array; each node knows its depth and where
//! its subtree ends, so a mask walk is one forward pass that skips a whole subtree the moment
//! the automaton dies on a prefix. Tokens with no bytes (control tokens) are never in the
//! trie; end-of-generation tokens are kept aside and allowed exactly when the automaton
//! accepts. Tokens longer than [`MAX_TOKEN_BYTES`] are left out (never allowed).
//!
//! For each node the trie also keeps the set of bytes in its subtree and where its tokens
//! start in a preorder token list, so that from a state that loops on a set of characters
//! (inside a string, a comment, a list item) a whole subtree made only of those is allowed at
//! once without walking it; and, per such set of bytes, the mask of all tokens made only of
//! them, which a walk from a looping state starts from.
//!
//! The root and every node with many children also list their children's first bytes and
//! node indices side by side ([`WideChildren`]): a walk from such a node passes over the
//! children whose byte is known to kill the automaton without loading their nodes, which lie
//! far apart in the array.
//!
//! Cost: building sorts the vocabulary (~100 ms at 262k tokens); ~50 bytes per node, about
//! 2.2 nodes per token, plus the token bytes themselves (~30 MB at 262k tokens), plus per
//! byte the tokens holding it (4 bytes per distinct byte of each token, ~6 MB at 262k).

/// Longest token kept, in bytes; real vocabularies stay far below.
pub const MAX_TOKEN_BYTES: usize = 512;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::ir::{starts_character, whitespace_slots, ByteSet, WHITESPACE_BYTES};
use super::lexer::{
    character_count, completable_within, whole_characters_within, LexemeTables, LoopExits, EXITS_MOST,
    EXIT_SHARE, INVALID_MARK,
};
use super::mask::TokenMask;

pub(crate) const NO_TOKEN: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(crate) struct TrieNode {
    /// Index one past the last node of this node's subtree.
    pub(crate) subtree_end: u32,
    /// The token ending here, or [`NO_TOKEN`]; further tokens with the same bytes are in
    /// `TokenTrie::duplicates`.
    pub(crate) token: u32,
    pub(crate) byte: u8,
    /// Whether its children are also listed side by side (see [`TokenTrie::wide_children`]).
    pub(crate) wide: bool,
    /// 1 for a first byte; the root is not stored.
    pub(crate) depth: u16,
}

/// A node with at least this many children lists them side by side: a walk from it tests
/// each child's first byte in that list instead of loading the child's node.
const WIDE_CHILDREN: usize = 16;

/// The children of the wide nodes (and the root), by parent: their bytes and node indices,
/// in preorder.
#[derive(Debug, Default)]
pub(crate) struct WideChildren {
    ranges: HashMap<u32, (u32, u32)>,
    pub(crate) nodes: Vec<u32>,
    pub(crate) bytes: Vec<u8>,
}

/// [`WideChildren`]' key for the root, which has no node of its own.
pub(crate) const ROOT_PARENT: u32 = u32::MAX;

/// A vocabulary as a flat trie, with each token's bytes for single-token checks.
#[derive(Debug)]
pub struct TokenTrie {
    pub(crate) nodes: Vec<TrieNode>,
    /// (token with the same bytes as another, that other token).
    pub(crate) duplicates: Vec<(u32, u32)>,
    eog_tokens: Vec<u32>,
    is_eog: Vec<bool>,
    /// Per node: the bytes found in its subtree (itself included); byte 0 also stands for "a
    /// token here is not valid UTF-8", and no loop set ever contains it.
    pub(crate) subtree_bytes: Vec<ByteSet>,
    /// Per node: the most characters (UTF-8 sequence starts) a token of its subtree has from
    /// this node's byte on.
    pub(crate) subtree_max_chars: Vec<u16>,
    /// The most characters any token has.
    pub(crate) max_chars: u32,
    /// Per node (and one past the end): where its subtree's tokens start in `preorder_tokens`.
    pub(crate) first_token: Vec<u32>,
    /// Token ids in trie preorder, so a subtree's tokens are one slice.
    pub(crate) preorder_tokens: Vec<u32>,
    /// How many tokens contain each byte: what excluding a byte from a skip set costs.
    pub(crate) byte_weights: [u32; 256],
    /// Per byte, the trie's tokens that contain it, and the trie's tokens that are valid
    /// UTF-8: [`TokenTrie::tokens_within`] of a set most tokens fit takes the valid tokens and
    /// removes those holding a byte outside it, where a walk would visit most of the trie.
    tokens_with_byte: Vec<Vec<u32>>,
    valid_tokens: TokenMask,
    /// Whether enough tokens hold non-ASCII bytes (5%) to make skipping them worth working out.
    pub(crate) many_non_ascii: bool,
    byte_offsets: Vec<u32>,
    bytes: Vec<u8>,
    max_depth: usize,
    /// Bytes within which all but the [`LONG_TOKENS_MAX`] longest tokens fit: a mask may be
    /// computed from a state that behaves like the real one for this many bytes (see
    /// `CompiledGrammar::normalize_for_horizon`), the longer tokens then checked one by one.
    pub(crate) horizon: u32,
    /// The tokens longer than `horizon` bytes.
    pub(crate) long_tokens: Vec<LongToken>,
    /// Per node: the longest token of its subtree, in bytes.
    pub(crate) subtree_max_len: Vec<u16>,
    /// Every token of the trie (duplicates too), longest first, and their lengths.
    by_length: Vec<u32>,
    by_length_bytes: Vec<u16>,
    /// The same, most characters first, and their character counts.
    by_characters: Vec<u32>,
    by_characters_counts: Vec<u16>,
    /// The shortest length that at most one in [`COUNTER_FLOOR_SHARE`] tokens reach: a mask
    /// from inside a bounded repetition with more items left than this is computed from the
    /// unbounded repetition, and only the tokens this long or longer are walked from the real
    /// state (see `Matcher::compute_mask`).
    pub(crate) counter_floor: u32,
    /// Per byte set, once asked for: see [`TokenTrie::tokens_within`].
    within: WithinMasks,
    /// Per byte set, once asked for: see [`TokenTrie::loop_exits`].
    lexemes: LexemeTables,
    /// The printable ASCII byte in the most tokens: a state that does not come back to
    /// itself on it is not worth asking whether it loops.
    pub(crate) loop_probe: u8,
    /// The children of the root and of every node with many of them, side by side.
    pub(crate) wide_children: WideChildren,
}

/// A token longer than the vocabulary's horizon, with what a check of it needs at hand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LongToken {
    pub(crate) id: u32,
    /// See [`whitespace_slots`]: nonzero for a token made only of whitespace.
    pub(crate) whitespace_slots: u8,
    /// How many of its bytes are whitespace: the most whitespace budget it can spend.
    pub(crate) whitespace_bytes: u32,
}

/// Most tokens left beyond a vocabulary's horizon (each checked on its own when a mask is
/// computed from a normalized state: a walk of its bytes).
pub(crate) const LONG_TOKENS_MAX: usize = 64;

/// See [`TokenTrie::counter_floor`].
const COUNTER_FLOOR_SHARE: usize = 32;

/// Bounded: cleared whole past this many byte sets.
const WITHIN_MASKS_MAX: usize = 64;

/// [`TokenTrie::tokens_within`] removes tokens from the valid ones, instead of walking the
/// trie, when the bytes outside the set are in at most one token in this many (counted once
/// per byte): a set that leaves out a common letter (a key that must avoid a word) would
/// have its walk visit most of a large vocabulary's trie.
const WITHIN_BY_REMOVAL_SHARE: usize = 2;

#[derive(Default)]
struct WithinMasks(Mutex<HashMap<ByteSet, Arc<TokenMask>>>);

impl std::fmt::Debug for WithinMasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WithinMasks")
    }
}

impl WideChildren {
    /// The lists of the root's children and of every node with [`WIDE_CHILDREN`] or more,
    /// found by hopping from each child to the next over its subtree; marks those nodes wide.
    fn of(nodes: &mut [TrieNode]) -> Self {
        let mut wide = WideChildren::default();
        let mut children = Vec::new();
        // The root first (its children span the whole array), then each node in turn.
        for parent in std::iter::once(ROOT_PARENT).chain(0..nodes.len() as u32) {
            let (first, end) = match parent {
                ROOT_PARENT => (0, nodes.len()),
                node => (node as usize + 1, nodes[node as usize].subtree_end as usize),
            };
            children.clear();
            let mut child = first;
            while child < end {
                children.push(child as u32);
                child = nodes[child].subtree_end as usize;
            }
            if parent != ROOT_PARENT && children.len() < WIDE_CHILDREN {
                continue;
            }
            let start = wide.nodes.len() as u32;
            for &child in &children {
                wide.nodes.push(child);
                wide.bytes.push(nodes[child as usize].byte);
            }
            wide.ranges.insert(parent, (start, wide.nodes.len() as u32));
            if let Some(node) = nodes.get_mut(parent as usize) {
                node.wide = true;
            }
        }
        wide
    }
}

impl TokenTrie {
    /// `token_bytes[id]` is the text of token `id` (empty for control tokens); `eog_tokens`
    /// end generation.
    pub fn new(token_bytes: &[Vec<u8>], eog_tokens: &[u32]) -> Self {
        let vocab_size = token_bytes.len();
        let mut is_eog = vec![false; vocab_size];
        let mut eog: Vec<u32> = Vec::new();
        for &token in eog_tokens {
            if let Some(flag) = is_eog.get_mut(token as usize) {
                if !*flag {
                    *flag = true;
                    eog.push(token);
                }
            }
        }
        let mut byte_offsets = Vec::with_capacity(vocab_size + 1);
        let mut bytes = Vec::new();
        byte_offsets.push(0u32);
        for token in token_bytes {
            bytes.extend_from_slice(token);
            byte_offsets.push(bytes.len() as u32);
        }
        let mut order: Vec<u32> = (0..vocab_size as u32)
            .filter(|&id| {
                let text = &token_bytes[id as usize];
                !is_eog[id as usize] && !text.is_empty() && text.len() <= MAX_TOKEN_BYTES
            })
            .collect();
        order.sort_by(|a, b| token_bytes[*a as usize].cmp(&token_bytes[*b as usize]));

        let mut nodes: Vec<TrieNode> = Vec::with_capacity(order.len() * 2);
        let mut parents: Vec<u32> = Vec::with_capacity(order.len() * 2);
        let mut duplicates = Vec::new();
        // Indices of the open nodes along the current path; path[d] is at depth d + 1.
        let mut path: Vec<usize> = Vec::new();
        let mut previous: &[u8] = &[];
        let mut max_depth = 0;
        for &id in &order {
            let text = &token_bytes[id as usize][..];
            let shared = previous
                .iter()
                .zip(text)
                .take_while(|(a, b)| a == b)
                .count();
            while path.len() > shared {
                if let Some(closed) = path.pop() {
                    nodes[closed].subtree_end = nodes.len() as u32;
                }
            }
            for (offset, &byte) in text.iter().enumerate().skip(shared) {
                parents.push(path.last().map(|p| *p as u32).unwrap_or(u32::MAX));
                path.push(nodes.len());
                nodes.push(TrieNode {
                    subtree_end: 0,
                    token: NO_TOKEN,
                    byte,
                    wide: false,
                    depth: offset as u16 + 1,
                });
            }
            if let Some(&last) = path.last() {
                if nodes[last].token == NO_TOKEN {
                    nodes[last].token = id;
                } else {
                    duplicates.push((id, nodes[last].token));
                }
            }
            max_depth = max_depth.max(text.len());
            previous = text;
        }
        let end = nodes.len() as u32;
        for open in path {
            nodes[open].subtree_end = end;
        }
        let wide_children = WideChildren::of(&mut nodes);
        let mut subtree_bytes: Vec<ByteSet> = nodes
            .iter()
            .map(|n| {
                let mut set = ByteSet::single(n.byte);
                let invalid = n.token != NO_TOKEN
                    && std::str::from_utf8(&token_bytes[n.token as usize]).is_err();
                if invalid {
                    set.insert(INVALID_MARK);
                }
                set
            })
            .collect();
        for index in (0..nodes.len()).rev() {
            let parent = parents[index] as usize;
            if parent < subtree_bytes.len() {
                subtree_bytes[parent] = subtree_bytes[parent].union(&subtree_bytes[index]);
            }
        }
        let mut longest_below = vec![0u16; nodes.len()];
        let mut subtree_max_chars = vec![0u16; nodes.len()];
        for index in (0..nodes.len()).rev() {
            let chars = u16::from(starts_character(nodes[index].byte)) + longest_below[index];
            subtree_max_chars[index] = chars;
            if let Some(parent) = longest_below.get_mut(parents[index] as usize) {
                *parent = (*parent).max(chars);
            }
        }
        // Per node: the longest token (in bytes) of its subtree.
        let mut subtree_max_len: Vec<u16> = nodes
            .iter()
            .map(|n| if n.token != NO_TOKEN { n.depth } else { 0 })
            .collect();
        for index in (0..nodes.len()).rev() {
            let own = subtree_max_len[index];
            if let Some(parent) = subtree_max_len.get_mut(parents[index] as usize) {
                *parent = (*parent).max(own);
            }
        }
        let max_chars = nodes
            .iter()
            .zip(&subtree_max_chars)
            .filter(|(node, _)| node.depth == 1)
            .map(|(_, chars)| *chars as u32)
            .max()
            .unwrap_or(0);
        let mut first_token = Vec::with_capacity(nodes.len() + 1);
        let mut preorder_tokens = Vec::with_capacity(order.len());
        for node in &nodes {
            first_token.push(preorder_tokens.len() as u32);
            if node.token != NO_TOKEN {
                preorder_tokens.push(node.token);
            }
        }
        first_token.push(preorder_tokens.len() as u32);
        let mut byte_weights = [0u32; 256];
        for token in token_bytes {
            let mut seen = ByteSet::EMPTY;
            for &byte in token {
                seen.insert(byte);
            }
            for byte in seen.iter() {
                byte_weights[byte as usize] += 1;
            }
        }
        let mut tokens_with_byte: Vec<Vec<u32>> =
            byte_weights.iter().map(|&weight| Vec::with_capacity(weight as usize)).collect();
        let mut valid_tokens = TokenMask::new(vocab_size);
        for &token in &preorder_tokens {
            let text = token_bytes.get(token as usize).map_or(&[][..], Vec::as_slice);
            let mut seen = ByteSet::EMPTY;
            for &byte in text {
                seen.insert(byte);
            }
            for byte in seen.iter() {
                tokens_with_byte[byte as usize].push(token);
            }
            if std::str::from_utf8(text).is_ok() {
                valid_tokens.set(token);
            }
        }
        let non_ascii = token_bytes
            .iter()
            .filter(|t| t.iter().any(|b| *b >= 0x80))
            .count();
        let mut by_length: Vec<u32> = order.clone();
        by_length.sort_by_key(|id| std::cmp::Reverse(token_bytes[*id as usize].len()));
        let horizon = by_length
            .get(LONG_TOKENS_MAX.min(by_length.len().saturating_sub(1)))
            .map_or(0, |id| token_bytes[*id as usize].len() as u32);
        let long_tokens: Vec<LongToken> = by_length
            .iter()
            .take_while(|id| token_bytes[**id as usize].len() as u32 > horizon)
            .map(|&id| {
                let bytes = &token_bytes[id as usize];
                LongToken {
                    id,
                    whitespace_slots: whitespace_slots(bytes),
                    whitespace_bytes: bytes.iter().filter(|b| WHITESPACE_BYTES.contains(b)).count() as u32,
                }
            })
            .collect();
        let by_length_counts = by_length.len();
        let counter_floor = (1..=MAX_TOKEN_BYTES as u32)
            .find(|&length| {
                let longer = by_length.partition_point(|id| token_bytes[*id as usize].len() as u32 >= length);
                longer * COUNTER_FLOOR_SHARE <= by_length_counts
            })
            .unwrap_or(MAX_TOKEN_BYTES as u32);
        let loop_probe = (0x21..0x7Fu8)
            .max_by_key(|b| byte_weights[*b as usize])
            .unwrap_or(b'e');
        // Counted once per token, not once per comparison.
        let mut counted: Vec<(u16, u32)> =
            order.iter().map(|&id| (character_count(&token_bytes[id as usize]) as u16, id)).collect();
        counted.sort_by_key(|&(count, _)| std::cmp::Reverse(count));
        let (by_characters_counts, by_characters): (Vec<u16>, Vec<u32>) = counted.into_iter().unzip();
        let by_length_bytes: Vec<u16> =
            by_length.iter().map(|id| token_bytes[*id as usize].len() as u16).collect();
        TokenTrie {
            subtree_max_len,
            by_length,
            by_length_bytes,
            by_characters,
            by_characters_counts,
            counter_floor,
            horizon,
            long_tokens,
            byte_weights,
            tokens_with_byte,
            valid_tokens,
            many_non_ascii: non_ascii * 20 >= vocab_size,
            nodes,
            duplicates,
            eog_tokens: eog,
            is_eog,
            subtree_bytes,
            subtree_max_chars,
            max_chars,
            first_token,
            preorder_tokens,
            byte_offsets,
            bytes,
            max_depth,
            within: WithinMasks::default(),
            lexemes: LexemeTables::default(),
            loop_probe,
            wide_children,
        }
    }

    /// The tables of a state that loops on `loop_bytes` (see `lexer.rs`): the tokens made
    /// only of its characters, and the rest by where they leave the loop; with a `lead` byte
    /// (ASCII), those of the tokens that start with it, read after it. Built once per byte set
    /// and vocabulary and shared by every grammar; `None` when many tokens leave the loop.
    pub(crate) fn loop_exits(
        &self,
        loop_bytes: &ByteSet,
        lead: Option<u8>,
    ) -> Option<Arc<LoopExits>> {
        if lead.is_some_and(|byte| !byte.is_ascii()) {
            return None;
        }
        self.lexemes
            .get_or_build(loop_bytes, lead, || self.split_for_loop(loop_bytes, lead))
    }

    /// Splits the tokens (after `lead`, if given) into those made only of whole characters of
    /// `loop_bytes` and the others with their exits, by a walk of the trie: a subtree made
    /// only of those bytes (and of valid UTF-8) is taken whole, one whose own byte is not
    /// among them holds only exits, and only the paths in between are followed. `None` past
    /// a [`EXIT_SHARE`]th of the tokens with exits.
    fn split_for_loop(&self, loop_bytes: &ByteSet, lead: Option<u8>) -> Option<LoopExits> {
        let mut within = TokenMask::new(self.vocab_size());
        let mut exits: Vec<(&[u8], u32, u16)> = Vec::new();
        let (mut index, end, offset) = match lead {
            None => (0, self.nodes.len(), 0),
            Some(lead) => {
                let mut at = 0usize;
                loop {
                    let node = self.nodes.get(at)?;
                    if node.byte == lead {
                        // The lead alone leaves nothing to read: within.
                        if node.token != NO_TOKEN {
                            within.set(node.token);
                        }
                        break (at + 1, node.subtree_end as usize, 1);
                    }
                    at = node.subtree_end as usize;
                }
            }
        };
        let most_exits = (self.tokens_between(index, end).len() / EXIT_SHARE).min(EXITS_MOST);
        // Every token holding a byte outside the set has an exit, so the most common such
        // byte's count is a bound known before any work (for the whole vocabulary); so is
        // the count of the tokens under the nodes of the first two levels whose byte is
        // not in the set, cheap to take and it turns most sets that would not pay away
        // (bytes above ASCII sort last, so the walk would find them last).
        let surely_exiting = match lead {
            None => (0..=u8::MAX)
                .filter(|b| !loop_bytes.contains(*b))
                .map(|b| self.byte_weights[b as usize] as usize)
                .max()
                .unwrap_or(0),
            Some(_) => 0,
        };
        if surely_exiting > most_exits || self.exits_at_least(index, end, loop_bytes) > most_exits {
            return None;
        }
        while index < end {
            let Some(node) = self.nodes.get(index) else {
                break;
            };
            let subtree_end = node.subtree_end as usize;
            let tokens = || self.tokens_between(index, subtree_end);
            // The mark of an invalid token is never in a loop's bytes.
            let inside = self.subtree_bytes.get(index).is_some_and(|subtree| subtree.is_subset_of(loop_bytes));
            if inside {
                within.set_all(tokens());
                index = subtree_end;
            } else if !loop_bytes.contains(node.byte) {
                for &token in tokens() {
                    self.split_token(token, offset, loop_bytes, &mut within, &mut exits);
                }
                if exits.len() > most_exits {
                    return None;
                }
                index = subtree_end;
            } else {
                if node.token != NO_TOKEN {
                    self.split_token(node.token, offset, loop_bytes, &mut within, &mut exits);
                }
                index += 1;
            }
        }
        for &(token, _) in &self.duplicates {
            let bytes = self.token_bytes(token).unwrap_or_default();
            if lead.is_none_or(|lead| bytes.first() == Some(&lead)) {
                self.split_token(token, offset, loop_bytes, &mut within, &mut exits);
            }
        }
        if exits.len() > most_exits {
            return None;
        }
        Some(LoopExits::new(within, exits))
    }

    /// The trie's tokens (not duplicates) that are valid UTF-8 made only of `bytes`: those a
    /// state whose skip set is `bytes` with no character limit allows whole. Computed once
    /// per byte set and vocabulary (a pass over the vocabulary), shared by every grammar.
    pub(crate) fn tokens_within(&self, bytes: &ByteSet) -> Arc<TokenMask> {
        let mut known = match self.within.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(mask) = known.get(bytes) {
            return mask.clone();
        }
        // Removing the tokens that hold a byte outside the set from the valid ones touches
        // each of those tokens once; a walk visits every node on a path into the set.
        let outside = (0..=u8::MAX).filter(|b| !bytes.contains(*b));
        let removed: usize = outside.clone().map(|b| self.byte_weights[b as usize] as usize).sum();
        let mut mask = TokenMask::new(self.vocab_size());
        if removed <= self.vocab_size() / WITHIN_BY_REMOVAL_SHARE {
            mask = self.valid_tokens.clone();
            for byte in outside {
                for &token in self.tokens_with_byte.get(byte as usize).map_or(&[][..], Vec::as_slice) {
                    mask.unset(token);
                }
            }
        } else if bytes.contains(INVALID_MARK) {
            // The mark would read as an allowed byte: check token by token.
            for &token in &self.preorder_tokens {
                let Some(text) = self.token_bytes(token) else {
                    continue;
                };
                if text.iter().all(|b| bytes.contains(*b)) && std::str::from_utf8(text).is_ok() {
                    mask.set(token);
                }
            }
        } else {
            // A walk of the trie: a subtree whose bytes all lie in the set (and holds no
            // invalid token, which would carry the mark) is taken whole; one whose own byte
            // does not is left whole.
            let mut index = 0usize;
            while let Some(node) = self.nodes.get(index) {
                let end = node.subtree_end as usize;
                let within = self.subtree_bytes.get(index).is_some_and(|subtree| subtree.is_subset_of(bytes));
                if within {
                    mask.set_all(self.tokens_between(index, end));
                    index = end;
                    continue;
                }
                if !bytes.contains(node.byte) {
                    index = end;
                    continue;
                }
                if node.token != NO_TOKEN {
                    let text = self.token_bytes(node.token).unwrap_or_default();
                    if std::str::from_utf8(text).is_ok() {
                        mask.set(node.token);
                    }
                }
                index += 1;
            }
        }
        if known.len() >= WITHIN_MASKS_MAX {
            known.clear();
        }
        let mask = Arc::new(mask);
        known.insert(*bytes, mask.clone());
        mask
    }

    /// How many tokens under the nodes `start..end` (siblings and their subtrees) have a
    /// byte outside `loop_bytes` among the nodes' own bytes or their children's: a lower
    /// bound on the exits there, counted from subtree token ranges alone.
    fn exits_at_least(&self, start: usize, end: usize, loop_bytes: &ByteSet) -> usize {
        let tokens_under = |index: usize, subtree_end: usize| self.tokens_between(index, subtree_end).len();
        let mut count = 0;
        let mut index = start;
        while let Some(node) = self.nodes.get(index).filter(|_| index < end) {
            let subtree_end = node.subtree_end as usize;
            if !loop_bytes.contains(node.byte) {
                count += tokens_under(index, subtree_end);
            } else {
                let mut child = index + 1;
                while let Some(below) = self.nodes.get(child).filter(|_| child < subtree_end) {
                    let child_end = below.subtree_end as usize;
                    if !loop_bytes.contains(below.byte) {
                        count += tokens_under(child, child_end);
                    }
                    child = child_end;
                }
            }
            index = subtree_end;
        }
        count
    }

    /// Puts `token` (read from byte `offset`) in `within` or, with its exit, in `exits`.
    fn split_token<'t>(
        &'t self,
        token: u32,
        offset: usize,
        loop_bytes: &ByteSet,
        within: &mut TokenMask,
        exits: &mut Vec<(&'t [u8], u32, u16)>,
    ) {
        let bytes = self.token_bytes(token).unwrap_or_default();
        let rest = bytes.get(offset..).unwrap_or_default();
        let inside = whole_characters_within(rest, loop_bytes);
        if inside == rest.len() || completable_within(&rest[inside..], loop_bytes) {
            within.set(token);
        } else {
            let chars = character_count(&rest[..inside]).min(usize::from(u16::MAX)) as u16;
            exits.push((&rest[inside..], token, chars));
        }
    }

    /// How many byte sets have loop tables built (not counting sets found not worth them).
    #[cfg(test)]
    pub(crate) fn loop_tables_built(&self) -> usize {
        self.lexemes.built()
    }

    /// The tokens of the nodes from `start` up to node `end`: a subtree's when `end` is where
    /// it ends.
    pub(crate) fn tokens_between(&self, start: usize, end: usize) -> &[u32] {
        let first = self.first_token.get(start).copied().unwrap_or(0) as usize;
        let last = self.first_token.get(end).copied().unwrap_or(0) as usize;
        self.preorder_tokens.get(first..last).unwrap_or_default()
    }

    /// Gives every token with the same bytes as another the other's bit in `mask`: a walk of
    /// the trie decides only the token its node carries.
    pub(crate) fn mirror_duplicates(&self, mask: &mut TokenMask) {
        for &(token, same_as) in &self.duplicates {
            if mask.is_set(same_as) {
                mask.set(token);
            } else {
                mask.unset(token);
            }
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.is_eog.len()
    }

    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog_tokens
    }

    pub fn is_eog(&self, token: u32) -> bool {
        self.is_eog.get(token as usize).copied().unwrap_or(false)
    }

    /// The tokens (duplicates too) of at least `length` bytes.
    pub(crate) fn tokens_at_least(&self, length: u32) -> &[u32] {
        let count = self.by_length_bytes.partition_point(|len| u32::from(*len) >= length);
        &self.by_length[..count]
    }

    /// The tokens (duplicates too) of at least `count` characters, and the others.
    pub(crate) fn split_by_characters(&self, count: u32) -> (&[u32], &[u32]) {
        let found = self.by_characters_counts.partition_point(|n| u32::from(*n) >= count);
        self.by_characters.split_at(found)
    }

    /// The bytes of `token`, or `None` outside the vocabulary.
    pub fn token_bytes(&self, token: u32) -> Option<&[u8]> {
        let start = *self.byte_offsets.get(token as usize)? as usize;
        let end = *self.byte_offsets.get(token as usize + 1)? as usize;
        self.bytes.get(start..end)
    }

    /// Whether `token` can ever be allowed by the trie (non-empty, not too long, not EOG).
    pub(crate) fn is_walkable(&self, token: u32) -> bool {
        !self.is_eog(token)
            && self
                .token_bytes(token)
                .is_some_and(|b| !b.is_empty() && b.len() <= MAX_TOKEN_BYTES)
    }

    /// Where the children of `parent` (a wide node's index, or [`ROOT_PARENT`]) lie in
    /// `wide_children.nodes` and `.bytes`; `None` for a node that is not wide.
    #[inline]
    pub(crate) fn wide_children(&self, parent: u32) -> Option<(u32, u32)> {
        self.wide_children.ranges.get(&parent).copied()
    }

    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The lengths of the tokens that `bytes` begins with (each a token's whole bytes), shortest
    /// first: a walk down the trie along `bytes`.
    pub(crate) fn token_prefix_lengths(&self, bytes: &[u8], mut found: impl FnMut(usize)) {
        let (mut first, mut end) = (0usize, self.nodes.len());
        for (depth, &byte) in bytes.iter().enumerate() {
            let mut child = first;
            let node = loop {
                match self.nodes.get(child) {
                    Some(node) if child < end && node.byte == byte => break Some(node),
                    Some(node) if child < end => child = node.subtree_end as usize,
                    _ => break None,
                }
            };
            let Some(node) = node else { return };
            if node.token != NO_TOKEN && !self.is_eog(node.token) {
                found(depth + 1);
            }
            (first, end) = (child + 1, node.subtree_end as usize);
        }
    }

    /// The bytes that are a token by themselves: a text made only of them can always be
    /// written one token per byte.
    pub fn single_byte_tokens(&self) -> ByteSet {
        let mut bytes = ByteSet::EMPTY;
        if let Some((start, end)) = self.wide_children(ROOT_PARENT) {
            for at in start..end {
                let node = self.wide_children.nodes.get(at as usize).and_then(|&n| self.nodes.get(n as usize));
                if let Some(node) = node.filter(|node| node.token != NO_TOKEN && !self.is_eog(node.token)) {
                    bytes.insert(node.byte);
                }
            }
        }
        bytes
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_layout_with_subtree_ends_and_duplicates() {
        let vocab: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            b"a".to_vec(),
            b"b".to_vec(),
            vec![],
            b"abc".to_vec(),
            b"ab".to_vec(),
        ];
        let trie = TokenTrie::new(&vocab, &[3]);
        let shape: Vec<(u8, u16, u32, u32)> = trie
            .nodes
            .iter()
            .map(|n| (n.byte, n.depth, n.token, n.subtree_end))
            .collect();
        assert_eq!(
            shape,
            vec![
                (b'a', 1, 1, 3),
                (b'b', 2, 0, 3),
                (b'c', 3, 4, 3),
                (b'b', 1, 2, 4)
            ]
        );
        assert_eq!(trie.duplicates, vec![(5, 0)]);
        assert_eq!(trie.eog_tokens(), &[3]);
        assert_eq!(trie.token_bytes(4), Some(&b"abc"[..]));
        assert_eq!(trie.max_depth(), 3);
        let set = |bytes: &[u8]| {
            bytes
                .iter()
                .fold(ByteSet::EMPTY, |s, b| s.union(&ByteSet::single(*b)))
        };
        assert_eq!(
            trie.subtree_bytes,
            vec![set(b"abc"), set(b"bc"), set(b"c"), set(b"b")]
        );
        let split = TokenTrie::new(&[vec![0xC3], vec![0xC3, 0xA9], b"x".to_vec()], &[]);
        assert_eq!(
            split.subtree_bytes,
            vec![set(b"x"), set(&[0, 0xC3, 0xA9]), set(&[0xA9])]
        );
        assert_eq!(trie.preorder_tokens, vec![1, 0, 4, 2]);
        assert_eq!(trie.first_token, vec![0, 1, 2, 3, 4]);
        assert_eq!(trie.subtree_max_chars, vec![3, 2, 1, 1]);
        assert_eq!(trie.max_chars, 3);
    }

    #[test]
    fn wide_nodes_list_their_children_side_by_side_in_preorder() {
        // "a" has 20 children, "b" has 2: the root and "a" are wide, "b" is not.
        let mut vocab: Vec<Vec<u8>> = (b'a'..=b't').map(|c| vec![b'a', c, b'!']).collect();
        vocab.extend([b"b".to_vec(), b"bx".to_vec(), b"by".to_vec(), b"a".to_vec()]);
        let trie = TokenTrie::new(&vocab, &[]);
        let listed = |(start, end): (u32, u32)| -> Vec<(u8, u32)> {
            (start as usize..end as usize)
                .map(|i| (trie.wide_children.bytes[i], trie.wide_children.nodes[i]))
                .collect()
        };
        let roots = listed(trie.wide_children(ROOT_PARENT).expect("the root is always listed"));
        assert_eq!(roots.iter().map(|(byte, _)| *byte).collect::<Vec<_>>(), b"ab");
        let a = roots[0].1;
        assert!(trie.nodes[a as usize].wide);
        let children = listed(trie.wide_children(a).expect("20 children make a wide node"));
        assert_eq!(children.len(), 20);
        for (i, (byte, node)) in children.iter().enumerate() {
            assert_eq!(*byte, b'a' + i as u8);
            assert_eq!(trie.nodes[*node as usize].byte, *byte);
            assert_eq!(trie.nodes[*node as usize].depth, 2);
            // In preorder: each child's subtree ends where the next child starts.
            if let Some((_, after)) = children.get(i + 1) {
                assert_eq!(trie.nodes[*node as usize].subtree_end, *after);
            }
        }
        let b = roots[1].1;
        assert!(!trie.nodes[b as usize].wide);
        assert_eq!(trie.wide_children(b), None);
    }

    /// `tokens_within` of a set most tokens fit is made by removing tokens from the valid
    /// ones, of a small set by a walk: both are the trie's valid tokens made only of the set.
    #[test]
    fn tokens_within_a_set_by_removal_or_by_walk_match_the_definition() {
        let texts: Vec<&[u8]> = vec![
            b"a", b"b", b"ab", b"ba", b"\"", b"a\"", b"\\n", b"x", b"\xc3\xa9", b"\xc3", b"a\xc3", b"\xa9",
            b"\n", b"ax", b"\0", b"a\0", b"xx", b"ab", b"bab", b"xyz", b"\xe3\x81\x93",
        ];
        let vocab: Vec<Vec<u8>> = texts.iter().map(|t| t.to_vec()).collect();
        let trie = TokenTrie::new(&vocab, &[]);
        let mut body = ByteSet::range(0x20, 0xF4);
        body.remove(b'"');
        body.remove(b'\\');
        let mut without_a = body;
        without_a.remove(b'a');
        let mut with_nul = body;
        with_nul.insert(0);
        let letters = ByteSet::single(b'a').union(&ByteSet::single(b'b'));
        for set in [body, without_a, with_nul, letters, ByteSet::ALL, ByteSet::EMPTY] {
            let mut expected: Vec<u32> = trie
                .preorder_tokens
                .iter()
                .copied()
                .filter(|&token| {
                    let text = &vocab[token as usize];
                    text.iter().all(|b| set.contains(*b)) && std::str::from_utf8(text).is_ok()
                })
                .collect();
            expected.sort_unstable();
            let mut within: Vec<u32> = trie.tokens_within(&set).iter_set().collect();
            within.sort_unstable();
            assert_eq!(within, expected, "set {set:?}");
        }
    }

    #[test]
    fn loop_tables_split_tokens_at_their_exit_and_after_a_lead() {
        let texts: Vec<&[u8]> = vec![
            b"a", b"b", b"ab", b"ba", b"aa", b"bb", b"aba", b"bab", b"a\"", b"\"", b"\"ab",
            b"\"a\",", b"\"b", b"\"ba", b"\"aa", b"\"bb", b"\"\n", b"\"aba", b"\"bab", b"\"abb",
            b"\"bba", b"ab",
        ];
        let id = |text: &[u8]| texts.iter().position(|t| *t == text).unwrap_or(usize::MAX) as u32;
        let vocab: Vec<Vec<u8>> = texts.iter().map(|t| t.to_vec()).collect();
        let trie = TokenTrie::new(&vocab, &[]);
        let letters = ByteSet::single(b'a').union(&ByteSet::single(b'b'));
        // Most tokens leave a loop on letters: no tables.
        assert!(trie.loop_exits(&letters, None).is_none());
        let after_quote = trie.loop_exits(&letters, Some(b'"')).expect("few exits");
        let mut within: Vec<u32> = after_quote.within.iter_set().collect();
        within.sort_unstable();
        let mut expected: Vec<u32> = [
            &b"\""[..], b"\"ab", b"\"b", b"\"ba", b"\"aa", b"\"bb", b"\"aba", b"\"bab", b"\"abb",
            b"\"bba",
        ]
        .iter()
        .map(|t| id(t))
        .collect();
        expected.sort_unstable();
        assert_eq!(within, expected);
        let exits: Vec<(u8, u16, Vec<u32>)> = after_quote
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.byte, n.depth, after_quote.tokens_at(i).to_vec()))
            .collect();
        assert_eq!(
            exits,
            vec![
                (b'\n', 1, vec![id(b"\"\n")]),
                (b'"', 1, vec![]),
                (b',', 2, vec![id(b"\"a\",")]),
            ]
        );
        // A lead that starts a character of several bytes is refused.
        assert!(trie.loop_exits(&letters, Some(0xC3)).is_none());
    }
}
