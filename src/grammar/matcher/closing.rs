//! How far the matcher is from a complete document, as more methods of [`Matcher`]: the
//! distance (fewest bytes to an accepting configuration, see `automaton/distance.rs`) here and
//! after a token, and a mask narrowed to the tokens that keep a complete document within
//! reach. A token budget closes the document with these (see `lexicon/constraint.rs`).
//!
//! Cost: a distance is worked out once per state and kept in the shared state table (a lookup
//! per frame of the configuration), so asking it after a token costs that token's check; a
//! narrowed mask checks every token of the mask it narrows.

use super::super::automaton::NO_ENDING;
use super::super::mask::TokenMask;
use super::Matcher;
use std::time::Instant;

impl Matcher {
    /// The fewest bytes that complete the document from here: 0 when it may end now.
    pub fn distance(&mut self) -> u32 {
        self.with_caches(|matcher, caches| caches.table.distance(matcher.state))
    }

    /// The distance after `token` (see [`Matcher::distance`]), or `None` when `token` is not
    /// allowed; an end-of-generation token is at 0 where it is allowed.
    pub fn distance_after(&mut self, token: u32) -> Option<u32> {
        let started = Instant::now();
        let distance = self.with_caches(|matcher, caches| {
            let next = matcher.state_after(caches, token)?;
            Some(caches.table.distance(next))
        });
        self.add_time(started);
        distance
    }

    /// Unsets in `mask` every token after which the document would be more than `most` bytes
    /// from complete (and every token not allowed at all).
    pub fn narrow_to_distance(&mut self, mask: &mut TokenMask, most: u32) {
        let started = Instant::now();
        let candidates: Vec<u32> = mask.iter_set().collect();
        self.with_caches(|matcher, caches| {
            for token in candidates {
                let distance = matcher.state_after(caches, token).map_or(NO_ENDING, |next| caches.table.distance(next));
                if distance > most {
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
}
