//! How far the matcher is from a complete document, as more methods of [`Matcher`]: the
//! distance (fewest bytes to an accepting configuration, see `automaton/distance.rs`) and the
//! fewest tokens found to get there, here and after a token, and a mask narrowed to the tokens
//! that keep a complete document within a budget. A token budget closes the document with
//! these (see `lexicon/constraint.rs`).
//!
//! Tokens: where every byte an ending is written in is a token, the distance in bytes is also
//! a number of tokens that completes the document. Where a budget is tighter than that, the
//! shortest ending is walked through the state table (a byte at a time, to a successor one
//! byte nearer) and the fewest tokens of the vocabulary that spell it are counted; each state
//! on the way keeps the count from its own point on, so the state after the first of those
//! tokens already knows it can finish in one token fewer.
//!
//! Cost: a distance is worked out once per state and kept in the shared state table (a lookup
//! per frame of the configuration), so asking it after a token costs that token's check; a
//! count of tokens walks the ending's bytes (a transition per byte class tried) and the trie
//! along it, once per state (kept until the table is cleared); a narrowed mask checks every
//! token of the mask it narrows.

use std::time::Instant;

use super::super::automaton::{closing_bytes, NO_ENDING};
use super::super::cache::{SharedCaches, DEAD, FULL};
use super::super::mask::TokenMask;
use super::Matcher;

impl Matcher {
    /// The fewest tokens found that complete the document from here: 0 when it may end now,
    /// [`NO_ENDING`] when no ending is written in the bytes endings use.
    pub fn closing_tokens(&mut self) -> u32 {
        self.with_caches(|matcher, caches| {
            let state = matcher.state;
            match caches.table.distance(state) {
                NO_ENDING => NO_ENDING,
                bytes => matcher.closing_tokens_of(caches, state).min(bytes),
            }
        })
    }

    /// Whether `token` is allowed and leaves a document that at most `most` tokens complete;
    /// `None` when it is not allowed. An end-of-generation token ends a complete document.
    pub fn completes_within(&mut self, token: u32, most: u32) -> Option<bool> {
        let started = Instant::now();
        let fits = self.with_caches(|matcher, caches| {
            let next = matcher.state_after(caches, token)?;
            Some(matcher.state_completes_within(caches, next, most))
        });
        self.add_time(started);
        fits
    }

    /// Unsets in `mask` every token after which the document cannot be completed in `most`
    /// tokens (and every token not allowed at all).
    pub fn narrow_to_budget(&mut self, mask: &mut TokenMask, most: u32) {
        let started = Instant::now();
        let candidates: Vec<u32> = mask.iter_set().collect();
        self.with_caches(|matcher, caches| {
            for token in candidates {
                let fits = matcher.state_after(caches, token).is_some_and(|next| matcher.state_completes_within(caches, next, most));
                if !fits {
                    mask.unset(token);
                }
            }
        });
        self.add_time(started);
    }

    /// The shortest bytes that complete the document from here (empty when it may end now);
    /// `None` when none do, or finding them passes a limit of the automaton.
    pub fn shortest_ending(&self) -> Option<Vec<u8>> {
        self.grammar.shortest_ending(&self.config)
    }

    /// Whether at most `most` tokens complete the document from `state`: its distance in bytes
    /// first (a lookup), the tokens counted only where that is too many.
    fn state_completes_within(&mut self, caches: &mut SharedCaches, state: u32, most: u32) -> bool {
        match caches.table.distance(state) {
            bytes if bytes <= most => true,
            NO_ENDING => false,
            _ => self.closing_tokens_of(caches, state) <= most,
        }
    }

    /// The fewest tokens found that spell the shortest ending from `state` (see the module
    /// doc), kept for every state on the way; the distance in bytes where the walk cannot be
    /// made (the table fills up on the way, or a limit of the automaton is passed).
    fn closing_tokens_of(&mut self, caches: &mut SharedCaches, state: u32) -> u32 {
        if let Some(known) = caches.table.known_closing_tokens(state) {
            return known;
        }
        let bytes_distance = caches.table.distance(state);
        let closing = closing_bytes();
        // Printable ASCII first, as the grammar's shortest ending prefers.
        let preferred = (b' '..=b'~').chain([b'\n', b'\t', b'\r']).chain(0x80..=0xbf).filter(|b| closing.contains(*b));
        let preferred: Vec<u8> = preferred.collect();
        let (mut path, mut ending) = (vec![state], Vec::new());
        let (mut at, mut distance) = (state, bytes_distance);
        while distance > 0 && distance != NO_ENDING {
            let mut nearer = None;
            for &byte in &preferred {
                match caches.table.next(at, byte) {
                    FULL => return bytes_distance,
                    DEAD => continue,
                    next if caches.table.distance(next) < distance => {
                        nearer = Some((byte, next));
                        break;
                    }
                    _ => continue,
                }
            }
            let Some((byte, next)) = nearer else { return bytes_distance };
            ending.push(byte);
            path.push(next);
            at = next;
            distance = caches.table.distance(next);
        }
        // fewest[i]: the fewest tokens that spell `ending[i..]`, each token a whole stretch.
        let mut fewest = vec![u32::MAX; ending.len() + 1];
        fewest[ending.len()] = 0;
        for start in (0..ending.len()).rev() {
            let mut best = u32::MAX;
            self.trie.token_prefix_lengths(&ending[start..], |length| {
                best = best.min(fewest[start + length].saturating_add(1));
            });
            fewest[start] = best;
        }
        for (&on_path, &count) in path.iter().zip(&fewest) {
            if count != u32::MAX {
                caches.table.found_closing_tokens(on_path, count);
            }
        }
        caches.table.known_closing_tokens(state).unwrap_or(bytes_distance).min(bytes_distance)
    }
}
