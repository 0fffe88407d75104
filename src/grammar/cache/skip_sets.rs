//! Skip sets, as more methods of [`StateTable`]: for a state, the bytes and character budget
//! with which a mask walk may allow a whole trie subtree without walking it (see
//! [`StateTable::skip_set`]), and the probes they are worked out from: the state most bytes
//! lead to, and the bytes (UTF-8 characters included) that lead there. Besides loops and
//! chains, a closed set of states (a pattern searched inside a string) shares one set. A
//! loop's multi-byte characters are explored from its *detached top* (its stacks without the
//! bottom frames they share), so every string body of a grammar shares one exploration.
//!
//! Cost: each state on a chain or in a closed set costs a transition per ASCII byte class,
//! plus, for a vocabulary with many non-ASCII tokens, a walk of the UTF-8 byte-class paths (a
//! few hundred transitions); a set is worked out once per state and kept with the state. A
//! loop's UTF-8 walk is paid once per distinct top (kept until the table is cleared), then a
//! copy of the loop's stacks without their bottom and a lookup per loop state.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::OnceLock;

use super::super::automaton::{decode, is_whitespace_shift, StepStacks, WordHasher};
use super::super::ir::ByteSet;
use super::{on_grammar, StateTable, DEAD, FULL};

/// Every byte from 0x80 up: the lead and continuation bytes of multi-byte characters.
const NON_ASCII: ByteSet = ByteSet([0, 0, u64::MAX, u64::MAX]);

/// Most states a closed skip set spans (see [`StateTable::closed_skip_set`]).
const CLOSED_SET_MAX: usize = 64;

/// A closed set is looked for only from a state whose bytes that leave its loop alive lead to
/// at most this many states.
const CLOSED_SET_ENTRIES: usize = 2;

/// Most byte classes dropped while looking for a closed set before giving up.
const CLOSED_SET_DROPS: usize = 16;

/// A closed set is looked for only where the bytes that leave a state's loop alive are in at
/// least one token for every this many its loop keeps.
const CLOSED_SET_GAIN: u64 = 256;

/// How many tokens hold the bytes of `set`, roughly: each byte's token count plus one, so
/// that a byte no token holds still weighs something.
fn token_weight(set: &ByteSet, weights: &[u32; 256]) -> u64 {
    set.iter().map(|b| weights[b as usize] as u64 + 1).sum()
}

/// Bytes and a character budget: any valid UTF-8 text of at most `capacity` characters made
/// only of `bytes` keeps the automaton alive (`u32::MAX`: unbounded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SkipSet {
    pub(crate) bytes: ByteSet,
    pub(crate) capacity: u32,
    /// The capacity was cut short by how far the chain was followed, not by the grammar:
    /// following it again from further along may give more.
    pub(crate) truncated: bool,
    /// Every character of `bytes` leads back to this very state, as the vocabulary's loop
    /// tables (`lexer.rs`) require; otherwise the characters lead along a chain, or only
    /// somewhere inside a closed set of states.
    pub(crate) loops: bool,
}

impl SkipSet {
    /// Nothing to skip: no bytes, no characters.
    pub(crate) const NONE: SkipSet = SkipSet {
        bytes: ByteSet::EMPTY,
        capacity: 0,
        truncated: false,
        loops: false,
    };

    /// Whether this set is worth recomputing for a walk that could use `wanted` characters.
    pub(crate) fn is_short(&self, wanted: u32) -> bool {
        self.truncated && self.capacity < wanted
    }
}

impl StateTable {
    /// The skip set of `state`, if computed.
    #[inline]
    pub(crate) fn known_skip_set(&self, state: u32) -> Option<&SkipSet> {
        self.skip_sets
            .get(state as usize)
            .and_then(|set| set.as_ref())
    }

    /// The *skip set* of `state` (computed once): bytes and a capacity such that any valid
    /// UTF-8 text of at most `capacity` characters made only of those bytes keeps the automaton
    /// alive from `state`. A state whose characters lead back to itself (inside a string, a
    /// comment, a list item) has unbounded capacity; a chain of states each leading to the
    /// next (a string with `maxLength`, a bounded repetition) has the chain's length, followed
    /// up to `max_chars` (the most characters any token has). Each state on the chain costs a
    /// transition per byte class plus, with `explore_utf8`, up to a few hundred more. Where
    /// many tokens hold characters that leave such a loop yet stay alive, the set may instead
    /// be that of a closed set of states around `state` (see
    /// [`StateTable::closed_skip_set`]). `None` when the table filled up on the way.
    pub(crate) fn skip_set(
        &mut self,
        state: u32,
        weights: &[u32; 256],
        explore_utf8: bool,
        max_chars: u32,
    ) -> Option<SkipSet> {
        let weight = |set: &ByteSet| token_weight(set, weights);
        // A chain state's set carries on into the rest of the chain when the rest's bytes
        // hold at least half its weight.
        let carries_on = |entry: &ByteSet, rest: &ByteSet| {
            2 * weight(&entry.intersect(rest)) >= weight(entry)
        };
        // Follow the chain: each state's most common character leads to the next.
        let mut chain: Vec<(u32, ByteSet)> = Vec::new();
        let mut current = state;
        // The set of `state` itself was known: nothing new to work out.
        let mut chain_was_known = false;
        let tail = loop {
            match self.known_skip_set(current) {
                // A known set cut short is followed again while there is room to do better.
                Some(known) if !known.is_short(max_chars.saturating_sub(chain.len() as u32)) => {
                    chain_was_known = chain.is_empty();
                    break *known
                }
                _ => {}
            }
            if chain.len() as u32 >= max_chars {
                // Far enough: no token is longer. Following again from further along may
                // give more.
                break SkipSet {
                    bytes: ByteSet::ALL,
                    capacity: 0,
                    truncated: true,
                    loops: false,
                };
            }
            if chain.iter().any(|(s, _)| *s == current) {
                // A cycle longer than one state: no promise past it, and none to gain later.
                break SkipSet {
                    bytes: ByteSet::ALL,
                    capacity: 0,
                    truncated: false,
                    loops: false,
                };
            }
            if let Some((_, previous)) = chain.last() {
                // The previous state's set is carried on only by bytes this state reads (or
                // by non-ASCII ones, which may continue a character): when too few of them
                // are, the chain ends there whatever follows, so this state is not stepped.
                if !carries_on(previous, &self.readable_ascii(current).union(&NON_ASCII)) {
                    break SkipSet::NONE;
                }
            }
            let Some(target) = self.heaviest_target(current, weights)? else {
                break SkipSet::NONE;
            };
            // Whitespace that only spends budget makes a new state per byte up to the end of
            // the budget, each stepped on every byte class: the mask walks read such runs as
            // one state (`lexer_whitespace.rs`), so a chain ends where one begins.
            if is_whitespace_shift(self.config(current), self.config(target)) {
                break SkipSet::NONE;
            }
            let entry = self.entry_bytes(current, target, weights, explore_utf8)?;
            if target == current {
                let looping = SkipSet {
                    bytes: entry,
                    capacity: u32::MAX,
                    truncated: false,
                    loops: true,
                };
                self.remember_skip_set(current, looping);
                break looping;
            }
            chain.push((current, entry));
            current = target;
        };
        let mut after = tail;
        for (chain_state, entry) in chain.into_iter().rev() {
            // Either the bytes this state and the rest of the chain share, for one more
            // character than the rest allows; or, when the rest allows few of this state's
            // bytes (the chain ends), all of them for one character.
            after = if after.capacity > 0 && carries_on(&entry, &after.bytes) {
                SkipSet {
                    bytes: entry.intersect(&after.bytes),
                    capacity: after.capacity.saturating_add(1),
                    truncated: after.truncated,
                    loops: false,
                }
            } else {
                SkipSet {
                    bytes: entry,
                    capacity: u32::from(!entry.is_empty()),
                    truncated: false,
                    loops: false,
                }
            };
            self.remember_skip_set(chain_state, after);
        }
        if after.capacity == u32::MAX && !chain_was_known {
            if let Some(closed) = self.closed_skip_set(state, &after, weights, explore_utf8)? {
                return Some(closed);
            }
        }
        Some(after)
    }

    /// A skip set for `state` beyond its loop or chain, `current`, where many tokens hold
    /// characters that leave it yet stay alive (a pattern searched inside a string: its hex
    /// digits move to another state of the pattern's automaton, not back): the bytes under
    /// which a closed set of states around `state` only leads to states of the same set,
    /// which then all share the set. `None` (inner) when no such set holds more tokens than
    /// `current` does.
    ///
    /// The closed set is explored from `state` over the candidate bytes; where a byte dies
    /// in a state of the set or leads out of it by a whitespace step, either that byte or a
    /// byte on the way to that state is dropped, whichever fewer tokens hold, and the
    /// exploration starts again. Past [`CLOSED_SET_MAX`] states or [`CLOSED_SET_DROPS`]
    /// drops there is no set. Costs a transition per byte class per state of the set, plus
    /// the UTF-8 paths from each with `explore_utf8`.
    fn closed_skip_set(
        &mut self,
        state: u32,
        current: &SkipSet,
        weights: &[u32; 256],
        explore_utf8: bool,
    ) -> Option<Option<SkipSet>> {
        let weight = |set: &ByteSet| token_weight(set, weights);
        let ascii = ByteSet::range(1, 0x7F);
        let looping = current.bytes.intersect(&ascii);
        let mut leaving = ByteSet::EMPTY;
        let mut entries: Vec<u32> = Vec::new();
        for byte in ascii.minus(&looping).iter() {
            match self.next(state, byte) {
                FULL => return None,
                DEAD => {}
                next if is_whitespace_shift(self.config(state), self.config(next)) => {}
                next => {
                    leaving.insert(byte);
                    if !entries.contains(&next) {
                        entries.push(next);
                    }
                }
            }
        }
        // Many distinct states left to (the first letters of an object's keys) open a tree of
        // states, not a small closed set: not worth exploring.
        if entries.len() > CLOSED_SET_ENTRIES || weight(&leaving) * CLOSED_SET_GAIN < weight(&looping) {
            return Some(None);
        }
        let Some((mut bytes, members)) = self.close_over(state, looping.union(&leaving), weights)? else {
            return Some(None);
        };
        if weight(&bytes) <= weight(&looping) {
            return Some(None);
        }
        if explore_utf8 {
            let unclean = self.unclean_utf8(&members, &members, weights)?;
            bytes = bytes.union(&NON_ASCII.minus(&unclean));
            if weight(&bytes) <= weight(&current.bytes) {
                return Some(None);
            }
        }
        let closed = SkipSet {
            bytes,
            capacity: u32::MAX,
            truncated: false,
            loops: false,
        };
        for &member in &members {
            let known = self.known_skip_set(member).map_or(0, |known| weight(&known.bytes));
            if known < weight(&bytes) {
                self.remember_skip_set(member, closed);
            }
        }
        Some(Some(closed))
    }

    /// The ASCII bytes of `candidates` (kept or dropped by byte class) under which the
    /// states reached from `state` stay within a set of at most [`CLOSED_SET_MAX`] states
    /// with no step that dies or only spends whitespace budget; with the set's states,
    /// `state` first. `None` (inner) when there is no such set, or it is not found within
    /// [`CLOSED_SET_DROPS`] drops.
    fn close_over(
        &mut self,
        state: u32,
        mut candidates: ByteSet,
        weights: &[u32; 256],
    ) -> Option<Option<(ByteSet, Vec<u32>)>> {
        let byte_class = self.byte_class;
        let class_weight = |class: u8, candidates: &ByteSet| {
            candidates
                .iter()
                .filter(|&b| byte_class[b as usize] == class)
                .map(|b| weights[b as usize] as u64 + 1)
                .sum::<u64>()
        };
        'explore: for _ in 0..CLOSED_SET_DROPS {
            if candidates.is_empty() {
                return Some(None);
            }
            // Each member: its state, the member it was reached from, and the byte.
            let mut members: Vec<(u32, usize, u8)> = vec![(state, usize::MAX, 0)];
            let mut index = 0;
            while let Some(&(from, _, _)) = members.get(index) {
                let mut seen_classes = ByteSet::EMPTY;
                let explored = candidates;
                for byte in explored.iter() {
                    let class = byte_class[byte as usize];
                    if seen_classes.contains(class) {
                        continue;
                    }
                    seen_classes.insert(class);
                    let next = self.next(from, byte);
                    if next == FULL {
                        return None;
                    }
                    let known = members.iter().any(|&(member, _, _)| member == next);
                    if !known && members.len() >= CLOSED_SET_MAX {
                        return Some(None);
                    }
                    if next == DEAD || (!known && is_whitespace_shift(self.config(from), self.config(next))) {
                        // Drop this byte's class or one on the way to `from`: the lightest.
                        let mut lightest = (class_weight(class, &candidates), class);
                        let mut at = index;
                        while let Some(&(_, parent, via)) = members.get(at) {
                            let via_class = byte_class[via as usize];
                            let via_weight = class_weight(via_class, &candidates);
                            if parent != usize::MAX && via_weight < lightest.0 {
                                lightest = (via_weight, via_class);
                            }
                            at = parent;
                        }
                        for byte in explored.iter() {
                            if byte_class[byte as usize] == lightest.1 {
                                candidates.remove(byte);
                            }
                        }
                        continue 'explore;
                    }
                    if !known {
                        members.push((next, index, byte));
                    }
                }
                index += 1;
            }
            return Some(Some((candidates, members.into_iter().map(|(member, _, _)| member).collect())));
        }
        Some(None)
    }

    /// The ASCII bytes `state` may read: those whose transition is not known to be dead.
    fn readable_ascii(&self, state: u32) -> ByteSet {
        let row = state as usize * self.classes;
        let mut set = ByteSet::EMPTY;
        for byte in 0..0x80u8 {
            let class = self.byte_class[byte as usize] as usize;
            if self.transitions.get(row + class).is_some_and(|&target| target != DEAD) {
                set.insert(byte);
            }
        }
        set
    }

    pub(super) fn remember_skip_set(&mut self, state: u32, set: SkipSet) {
        if let Some(slot) = self.skip_sets.get_mut(state as usize) {
            *slot = Some(set);
        }
    }

    /// The state most ASCII bytes (weighted by how many tokens hold them) lead to from
    /// `state`, if any byte leads anywhere alive.
    pub(crate) fn heaviest_target(&mut self, state: u32, weights: &[u32; 256]) -> Option<Option<u32>> {
        let mut totals: Vec<(u32, u64)> = Vec::new();
        for byte in 1..0x80u8 {
            match self.next(state, byte) {
                FULL => return None,
                DEAD => {}
                next => match totals.iter_mut().find(|(s, _)| *s == next) {
                    Some((_, total)) => *total += weights[byte as usize] as u64 + 1,
                    None => totals.push((next, weights[byte as usize] as u64 + 1)),
                },
            }
        }
        Some(
            totals
                .into_iter()
                .max_by_key(|(_, total)| *total)
                .map(|(target, _)| target),
        )
    }

    /// The bytes such that any valid UTF-8 character made only of them leads from `state` to
    /// `target`: ASCII bytes that do, plus (with `explore_utf8`) the non-ASCII bytes left after
    /// every character that does not has given up one byte, the one in the fewest tokens.
    /// Explores the UTF-8 encodings one byte class at a time.
    fn entry_bytes(
        &mut self,
        state: u32,
        target: u32,
        weights: &[u32; 256],
        explore_utf8: bool,
    ) -> Option<ByteSet> {
        let mut set = ByteSet::EMPTY;
        for byte in 1..0x80u8 {
            match self.next(state, byte) {
                FULL => return None,
                next if next == target => set.insert(byte),
                _ => {}
            }
        }
        // A loop's characters are worth exploring whatever the vocabulary: once per top of
        // its stacks, its non-ASCII tokens are then no exits to walk from every string. (A
        // chain's states each have a top of their own: no fewer states that way.)
        if target == state {
            if let Some(non_ascii) = self.detached_loop_utf8(state, weights)? {
                return Some(set.union(&non_ascii));
            }
        }
        if !explore_utf8 {
            return Some(set);
        }
        let unclean = self.unclean_utf8(&[state], &[target], weights)?;
        for byte in 0x80..=0xFFu8 {
            if !unclean.contains(byte) {
                set.insert(byte);
            }
        }
        Some(set)
    }

    /// For `state`, which loops on ASCII characters: the non-ASCII bytes every multi-byte
    /// character of which leads back to it, or `None` (inner) when that is not worked out
    /// this way. `None` when the table filled up.
    ///
    /// The stacks of a state inside a string body share their bottom frames (what follows
    /// the string), and a character that pops none of them steps every such state alike. So
    /// the characters are explored once from the *detached* state, the stacks without those
    /// frames, and the answer serves every state with the same top frames: the mid-character
    /// states are made once per grammar instead of once per string. A walk in which a stack
    /// of the detached state empties before a character ends (it would go on into the shared
    /// frames) or grows so deep or large that a real state would pass a limit gives no answer.
    fn detached_loop_utf8(&mut self, state: u32, weights: &[u32; 256]) -> Option<Option<ByteSet>> {
        let config = self.config(state);
        let shared = shared_bottom(config);
        if shared == 0 {
            return Some(None);
        }
        let top_config = detached(config, shared);
        let top = self.intern(&top_config.encoded, top_config.hash)?;
        let found = match self.detached_utf8.get(&top) {
            Some(&known) => known,
            None => {
                let (unclean, seen) = self.walk_utf8(&[top], &[top], weights, true)?;
                let found = (!seen.accepting).then_some(DetachedUtf8 { non_ascii: NON_ASCII.minus(&unclean), seen });
                self.detached_utf8.insert(top, found);
                found
            }
        };
        let limits = on_grammar(&self.lent, &self.grammar, |grammar| {
            (grammar.limits().max_stack_depth, grammar.limits().max_state_words)
        });
        let Some((max_depth, max_words)) = limits else {
            return Some(None);
        };
        // Margins: an expansion checks its depth before it pushes.
        let within_limits = |seen: &WalkSeen| {
            seen.deepest + shared + 2 < max_depth && seen.widest + seen.most_stacks * shared < max_words
        };
        Some(found.filter(|found| within_limits(&found.seen)).map(|found| found.non_ascii))
    }

    /// The non-ASCII bytes to leave out so that every valid UTF-8 character of the rest leads
    /// from each of `starts` to one of `ends`: for each character that does not, one of its
    /// byte groups (see [`StateTable::mark_unclean`]).
    fn unclean_utf8(&mut self, starts: &[u32], ends: &[u32], weights: &[u32; 256]) -> Option<ByteSet> {
        self.walk_utf8(starts, ends, weights, false).map(|(unclean, _)| unclean)
    }

    /// [`StateTable::unclean_utf8`], and with `track` what the states it stepped to were like.
    fn walk_utf8(
        &mut self,
        starts: &[u32],
        ends: &[u32],
        weights: &[u32; 256],
        track: bool,
    ) -> Option<(ByteSet, WalkSeen)> {
        let mut walk = Utf8Walk {
            ends,
            weights,
            unclean: ByteSet::EMPTY,
            path: Vec::with_capacity(4),
            clean: HashMap::default(),
            groups: Vec::new(),
            track,
            seen: WalkSeen::default(),
        };
        for &start in starts {
            walk.note(self, start, true);
            for ranges in multi_byte_sequences() {
                self.mark_unclean(&mut walk, ranges, start)?;
            }
        }
        Some((walk.unclean, walk.seen))
    }

    /// Follows every byte-class path through the UTF-8 byte ranges `ranges` from `at`. Where
    /// a path dies, or ends anywhere but at one of the walk's ends, every character on it must
    /// contain an unclean byte: unless one of its byte groups already is, the group whose
    /// bytes occur in the fewest tokens becomes unclean. Paths from a state already known to
    /// end well are not followed again.
    fn mark_unclean(&mut self, walk: &mut Utf8Walk<'_>, ranges: &[(u8, u8)], at: u32) -> Option<()> {
        let Some((&(low, high), rest)) = ranges.split_first() else {
            return Some(());
        };
        if self.ends_well(walk, ranges, at)? {
            return Some(());
        }
        for &bytes in walk.class_groups(self, low, high).iter() {
            let representative = bytes.iter().next().unwrap_or(low);
            let next = self.next(at, representative);
            if next == FULL {
                return None;
            }
            walk.note(self, next, !rest.is_empty());
            walk.path.push(bytes);
            if next == DEAD || (rest.is_empty() && !walk.ends.contains(&next)) {
                let covered = walk.path.iter().any(|group| group.intersect(&walk.unclean) == *group);
                if !covered {
                    let weight = |group: &ByteSet| group.iter().map(|b| walk.weights[b as usize] as u64).sum::<u64>();
                    if let Some(cheapest) = walk.path.iter().min_by_key(|group| weight(group)) {
                        walk.unclean = walk.unclean.union(cheapest);
                    }
                }
            } else if !rest.is_empty() {
                self.mark_unclean(walk, rest, next)?;
            }
            walk.path.pop();
        }
        Some(())
    }

    /// Whether every byte-class path through `ranges` from `at` stays alive and ends at one
    /// of the walk's ends; remembered per state and ranges for the rest of the walk, since
    /// most paths meet again after their first byte.
    fn ends_well(&mut self, walk: &mut Utf8Walk<'_>, ranges: &[(u8, u8)], at: u32) -> Option<bool> {
        let Some((&(low, high), rest)) = ranges.split_first() else {
            return Some(true);
        };
        let key = (at, packed_ranges(ranges));
        if let Some(&known) = walk.clean.get(&key) {
            return Some(known);
        }
        let mut well = true;
        for &bytes in walk.class_groups(self, low, high).iter() {
            let next = self.next(at, bytes.iter().next().unwrap_or(low));
            walk.note(self, next, !rest.is_empty());
            well = match next {
                FULL => return None,
                DEAD => false,
                _ if rest.is_empty() => walk.ends.contains(&next),
                _ => self.ends_well(walk, rest, next)?,
            };
            if !well {
                break;
            }
        }
        walk.clean.insert(key, well);
        Some(well)
    }

    /// The bytes of `low..=high` grouped by byte class.
    fn class_groups(&self, low: u8, high: u8) -> Rc<[ByteSet]> {
        let mut groups: Vec<(u8, ByteSet)> = Vec::new();
        for byte in low..=high {
            let class = self.byte_class[byte as usize];
            match groups.iter_mut().find(|(c, _)| *c == class) {
                Some((_, bytes)) => bytes.insert(byte),
                None => groups.push((class, ByteSet::single(byte))),
            }
        }
        groups.into_iter().map(|(_, bytes)| bytes).collect()
    }
}

/// The byte ranges of every multi-byte UTF-8 character (no surrogates), one sequence of
/// ranges per shape (see `regex_syntax::utf8`).
fn multi_byte_sequences() -> &'static [Vec<(u8, u8)>] {
    static SEQUENCES: OnceLock<Vec<Vec<(u8, u8)>>> = OnceLock::new();
    SEQUENCES.get_or_init(|| {
        regex_syntax::utf8::Utf8Sequences::new('\u{80}', '\u{10FFFF}')
            .map(|sequence| sequence.as_slice().iter().map(|r| (r.start, r.end)).collect())
            .collect()
    })
}

/// Up to four byte ranges of a UTF-8 sequence as one word: no range starts at 0 (they are
/// all above ASCII), so sequences of different lengths never pack alike.
fn packed_ranges(ranges: &[(u8, u8)]) -> u64 {
    ranges
        .iter()
        .take(4)
        .enumerate()
        .fold(0, |word, (at, &(low, high))| word | (u64::from(low) << 8 | u64::from(high)) << (16 * at))
}

/// One exploration of UTF-8 characters (see [`StateTable::unclean_utf8`]).
struct Utf8Walk<'a> {
    /// Where a character must end.
    ends: &'a [u32],
    weights: &'a [u32; 256],
    /// The bytes left out so far.
    unclean: ByteSet,
    /// The byte groups of the character being followed.
    path: Vec<ByteSet>,
    /// States and remaining ranges (packed) already followed, and whether every path from
    /// them ended well.
    clean: HashMap<(u32, u64), bool, BuildHasherDefault<WordHasher>>,
    /// The byte-class groups of each range met so far: a few ranges, met at every step.
    groups: Vec<((u8, u8), Rc<[ByteSet]>)>,
    /// Whether to note what the states stepped to are like, in `seen`.
    track: bool,
    seen: WalkSeen,
}

/// What the states a UTF-8 walk stepped to were like.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WalkSeen {
    /// Some stack had matched all its frames before a character ended: where the frames it
    /// stands for have frames below, the stack would have gone on into those.
    accepting: bool,
    /// The most frames of a stack, words of a state, and stacks of a state.
    deepest: usize,
    widest: usize,
    most_stacks: usize,
}

/// What the multi-byte characters do from a detached loop state (see
/// [`StateTable::detached_loop_utf8`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct DetachedUtf8 {
    /// The bytes whose characters all lead back to it.
    non_ascii: ByteSet,
    seen: WalkSeen,
}

/// How many bottom frames every stack of `config` shares, leaving each stack one frame at
/// least.
fn shared_bottom(config: &[u32]) -> usize {
    let mut stacks = decode(config);
    let Some((_, first)) = stacks.next() else {
        return 0;
    };
    let mut shared = first.len().saturating_sub(1);
    for (_, frames) in stacks {
        let common = first.iter().zip(frames).take_while(|(a, b)| a == b).count();
        shared = shared.min(common).min(frames.len().saturating_sub(1));
    }
    shared
}

/// The stacks of `config` without their `shared` bottom frames, ordered and encoded.
fn detached(config: &[u32], shared: usize) -> StepStacks {
    let mut stacks = StepStacks::default();
    for (ws_used, frames) in decode(config) {
        stacks.push(frames.get(shared..).unwrap_or_default(), ws_used);
    }
    stacks.order();
    stacks.encode();
    stacks
}

impl Utf8Walk<'_> {
    /// Notes what `state` is like, when the walk tracks that; `within` when a character
    /// starts or goes on there.
    fn note(&mut self, table: &StateTable, state: u32, within: bool) {
        if !self.track || state == DEAD || state == FULL {
            return;
        }
        let config = table.config(state);
        let seen = &mut self.seen;
        seen.accepting |= within && table.is_accepting(state);
        seen.widest = seen.widest.max(config.len());
        let mut stacks = 0;
        for (_, frames) in decode(config) {
            seen.deepest = seen.deepest.max(frames.len());
            stacks += 1;
        }
        seen.most_stacks = seen.most_stacks.max(stacks);
    }

    /// The bytes of `low..=high` grouped by `table`'s byte classes, worked out once a walk.
    fn class_groups(&mut self, table: &StateTable, low: u8, high: u8) -> Rc<[ByteSet]> {
        if let Some((_, groups)) = self.groups.iter().find(|(range, _)| *range == (low, high)) {
            return groups.clone();
        }
        let groups = table.class_groups(low, high);
        self.groups.push(((low, high), groups.clone()));
        groups
    }
}
