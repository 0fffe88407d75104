//! The parse stacks of one automaton configuration, their canonical order and encoding.
//!
//! A byte step produces stacks in whatever order the expansions give them, with duplicates;
//! [`StepStacks`] gathers them back to back and puts them in canonical order, so that one set
//! of stacks always encodes to the same words and interns as the same state. The order is by a
//! hash of each stack's frames, with the frames themselves compared only when two hashes tie:
//! the stacks of one configuration share long bottoms, and a lexicographic order would walk
//! them in every comparison. The configuration's hash is combined from its stacks' hashes and
//! handed to the state table, which then interns without hashing the encoding again.
//!
//! Encoding: per stack `[frame count, whitespace used, frames bottom..top]`, stacks in the
//! canonical order; of stacks equal but for whitespace used, only the thriftiest is kept (it
//! allows everything the others allow).
//!
//! Key types: [`StepStacks`], [`StackSet`], [`WordHasher`]; [`decode`] and [`config_hash`] read
//! an encoding back. Cost: gathering a stack copies its frames and hashes those above a prefix
//! whose hash is known; ordering deals the stacks into buckets by hash, about a pass over
//! them; encoding is one pass.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hash over 8-byte words (configurations are long: SipHash dominated
/// interning). Keys come from compiled grammars, and the state table is bounded, so collisions
/// cost at most a bounded number of comparisons.
#[derive(Default, Clone, Copy)]
pub(crate) struct WordHasher(u64);

impl WordHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    /// Continues the hash of a stack whose lower frames hashed to `prefix`.
    #[inline]
    fn continuing(prefix: u64) -> Self {
        WordHasher(prefix)
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The hash of a stack's frames, continued from the hash `prefix` of the frames below them.
#[inline]
fn hash_frames(prefix: u64, frames: &[u32]) -> u64 {
    let mut hasher = WordHasher::continuing(prefix);
    for &frame in frames {
        hasher.add(u64::from(frame));
    }
    hasher.finish()
}

/// Up to this many stacks are ordered by one comparison sort, more are dealt into buckets
/// first (see [`StepStacks::order`]).
const FEW_STACKS: usize = 16;

/// One stack gathered by [`StepStacks`]: where its frames are, and what orders it.
#[derive(Clone, Copy, Default)]
struct GatheredStack {
    hash: u64,
    start: u32,
    len: u32,
    ws_used: u32,
}

impl GatheredStack {
    /// This stack's frames, among the frames gathered back to back.
    fn frames_in<'a>(&self, frames: &'a [u32]) -> &'a [u32] {
        frames.get(self.start as usize..(self.start + self.len) as usize).unwrap_or_default()
    }
}

/// The stacks of a configuration under construction (a byte step's, or a rewritten
/// configuration's): frames back to back, then the canonical encoding and its hash.
#[derive(Default)]
pub(crate) struct StepStacks {
    frames: Vec<u32>,
    stacks: Vec<GatheredStack>,
    /// `prefix_hashes[d]`: the hash of the lowest `d` frames of the stack being stepped.
    prefix_hashes: Vec<u64>,
    /// Scratch of [`StepStacks::order`]: the stacks dealt into buckets, and where each ends.
    dealt: Vec<GatheredStack>,
    bucket_ends: Vec<u32>,
    /// The configuration reached, encoded canonically (after [`StepStacks::encode`]).
    pub(crate) encoded: Vec<u32>,
    /// Its hash (see [`config_hash`]).
    pub(crate) hash: u64,
}

impl StepStacks {
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.stacks.clear();
    }

    /// Stacks gathered so far, duplicates included until [`StepStacks::order`].
    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Adds the stack `frames` (bottom first).
    pub(crate) fn push(&mut self, frames: &[u32], ws_used: u32) {
        self.push_above(&[], 0, frames, ws_used);
    }

    /// Remembers the hashes of every bottom part of `frames`, for
    /// [`StepStacks::push_on_prefix`] with stacks built on them.
    pub(crate) fn hash_prefixes(&mut self, frames: &[u32]) {
        self.prefix_hashes.clear();
        let mut hasher = WordHasher::default();
        self.prefix_hashes.push(hasher.finish());
        for &frame in frames {
            hasher.add(u64::from(frame));
            self.prefix_hashes.push(hasher.finish());
        }
    }

    /// Adds the stack `prefix` + `above`, where `prefix` is the bottom part of the frames last
    /// given to [`StepStacks::hash_prefixes`].
    pub(crate) fn push_on_prefix(&mut self, prefix: &[u32], above: &[u32], ws_used: u32) {
        let prefix_hash = match self.prefix_hashes.get(prefix.len()) {
            Some(&hash) => hash,
            None => hash_frames(0, prefix),
        };
        self.push_above(prefix, prefix_hash, above, ws_used);
    }

    fn push_above(&mut self, prefix: &[u32], prefix_hash: u64, above: &[u32], ws_used: u32) {
        let start = self.frames.len() as u32;
        self.frames.extend_from_slice(prefix);
        self.frames.extend_from_slice(above);
        self.stacks.push(GatheredStack {
            hash: hash_frames(prefix_hash, above),
            start,
            len: (prefix.len() + above.len()) as u32,
            ws_used,
        });
    }

    /// Puts the stacks in canonical order (by hash, then frames, then whitespace used) and
    /// drops duplicates, keeping of stacks equal but for whitespace used the thriftiest.
    ///
    /// Hashes are spread evenly, so the stacks are first dealt into about one bucket per
    /// stack by the top bits of their hash; sorting within buckets then costs little, where
    /// a comparison sort of the whole would cost log n comparisons per stack.
    pub(crate) fn order(&mut self) {
        let frames = &self.frames;
        let frames_of = |stack: &GatheredStack| stack.frames_in(frames);
        let canonical = |a: &GatheredStack, b: &GatheredStack| {
            a.hash
                .cmp(&b.hash)
                .then_with(|| frames_of(a).cmp(frames_of(b)))
                .then(a.ws_used.cmp(&b.ws_used))
        };
        let count = self.stacks.len();
        if count <= FEW_STACKS {
            self.stacks.sort_unstable_by(canonical);
        } else {
            let bits = count.next_power_of_two().trailing_zeros();
            let bucket_of = |stack: &GatheredStack| (stack.hash >> (64 - bits)) as usize;
            // `bucket_ends[b]` counts the stacks of bucket `b`, then (summed) is where the
            // bucket starts, then (advanced by each stack dealt) where it ends.
            let bucket_ends = &mut self.bucket_ends;
            bucket_ends.clear();
            bucket_ends.resize(1 << bits, 0);
            for stack in &self.stacks {
                bucket_ends[bucket_of(stack)] += 1;
            }
            let mut start = 0;
            for slot in bucket_ends.iter_mut() {
                let size = *slot;
                *slot = start;
                start += size;
            }
            self.dealt.clear();
            self.dealt.resize(count, GatheredStack::default());
            for stack in &self.stacks {
                let slot = &mut bucket_ends[bucket_of(stack)];
                self.dealt[*slot as usize] = *stack;
                *slot += 1;
            }
            let mut start = 0;
            for &end in bucket_ends.iter() {
                let bucket = &mut self.dealt[start..end as usize];
                if bucket.len() > 1 {
                    bucket.sort_unstable_by(canonical);
                }
                start = end as usize;
            }
            std::mem::swap(&mut self.stacks, &mut self.dealt);
        }
        self.stacks.dedup_by(|later, earlier| {
            later.hash == earlier.hash && frames_of(later) == frames_of(earlier)
        });
    }

    /// Words the encoding of the stacks gathered will take.
    pub(crate) fn encoded_words(&self) -> usize {
        self.stacks.iter().map(|stack| stack.len as usize + 2).sum()
    }

    /// Encodes the stacks, which [`StepStacks::order`] has ordered, into `encoded` and `hash`.
    pub(crate) fn encode(&mut self) {
        let mut encoded = std::mem::take(&mut self.encoded);
        encoded.clear();
        encoded.reserve(self.encoded_words());
        let mut hasher = WordHasher::default();
        for stack in &self.stacks {
            encoded.push(stack.len);
            encoded.push(stack.ws_used);
            encoded.extend_from_slice(stack.frames_in(&self.frames));
            hasher.add(stack.hash);
            hasher.add(u64::from(stack.ws_used));
        }
        self.encoded = encoded;
        self.hash = hasher.finish();
    }

    /// Orders and encodes the stacks gathered, with no bound on their count or size.
    pub(crate) fn into_encoded(mut self) -> Vec<u32> {
        self.order();
        self.encode();
        self.encoded
    }
}

/// The hash [`StepStacks::encode`] gives the configuration `config` (encoded canonically).
pub(crate) fn config_hash(config: &[u32]) -> u64 {
    let mut hasher = WordHasher::default();
    for (ws_used, frames) in decode(config) {
        hasher.add(hash_frames(0, frames));
        hasher.add(u64::from(ws_used));
    }
    hasher.finish()
}

/// Iterates the stacks of an encoded configuration as (whitespace used, frames bottom..top).
pub(crate) fn decode(config: &[u32]) -> impl Iterator<Item = (u32, &[u32])> {
    let mut rest = config;
    std::iter::from_fn(move || {
        let (&len, tail) = rest.split_first()?;
        let (&ws_used, tail) = tail.split_first()?;
        let len = (len as usize).min(tail.len());
        let (frames, tail) = tail.split_at(len);
        rest = tail;
        Some((ws_used, frames))
    })
}

/// True when `after` is `before` with one more whitespace byte used by every stack and
/// nothing else changed: reading that byte only spent budget. Both are canonical encodings,
/// whose stacks are ordered by their frames alone (at most one stack per frames), so the
/// stacks are compared in step, without gathering or sorting them.
pub(crate) fn is_whitespace_shift(before: &[u32], after: &[u32]) -> bool {
    if before.len() != after.len() {
        return false;
    }
    let mut shifted = decode(after);
    decode(before).all(|(used, frames)| {
        shifted
            .next()
            .is_some_and(|(now_used, now_frames)| now_frames == frames && used.checked_add(1) == Some(now_used))
    })
}

/// True when some stack of `config` has matched the whole root rule.
pub(crate) fn config_is_accepting(config: &[u32]) -> bool {
    decode(config).any(|(_, frames)| frames.is_empty())
}

/// True when some stack of `config` can still read a byte.
pub(crate) fn config_can_continue(config: &[u32]) -> bool {
    decode(config).any(|(_, frames)| !frames.is_empty())
}

/// The stacks an expansion reaches, deduplicated as they come (an expansion checks its stack
/// count as it goes); a stack that differs from another only by using more whitespace is
/// dropped, since the thriftier one allows everything it allows.
#[derive(Default)]
pub(super) struct StackSet {
    pub(super) stacks: HashMap<Vec<u32>, u32, BuildHasherDefault<WordHasher>>,
}

impl StackSet {
    pub(super) fn insert(&mut self, ws_used: u32, frames: Vec<u32>) {
        let entry = self.stacks.entry(frames).or_insert(ws_used);
        *entry = (*entry).min(ws_used);
    }

    pub(super) fn len(&self) -> usize {
        self.stacks.len()
    }

    pub(super) fn into_encoded(self) -> Vec<u32> {
        let mut gathered = StepStacks::default();
        for (frames, ws_used) in &self.stacks {
            gathered.push(frames, *ws_used);
        }
        gathered.into_encoded()
    }
}
