//! Whitespace runs in the mask walks, as more methods of [`Matcher`]. JSON whitespace
//! (`Symbol::Whitespace`) draws on one budget per document, so a whitespace byte leads to a
//! configuration that differs from the one before only in the budget its stacks have used. A
//! walk stepping byte by byte through a vocabulary's indentation tokens (runs of spaces,
//! newlines and tabs of every length) would make and intern a state per run length, and per
//! run length again for every byte after the run, and fill the tables with them.
//!
//! Instead a walk reads a run as one state plus an offset. From a *run state*, one where
//! reading a whitespace byte only spends budget (every stack is on whitespace or is where
//! whitespace may end), each byte of the run only advances the offset; the state and offset
//! stand exactly for the run's real state while no stack can run out of budget on the next
//! byte. The byte that ends the run steps the run state itself when every token below is too
//! short to tell the two apart (the budget left after the run outlasts it), so a quote after
//! four spaces and after eight lead to the same state; only where a token could run the
//! budget out is the run's real state made: in one step, since the run only spent budget,
//! and never for a byte the run state refuses (the real state has the same stacks, so it
//! refuses the byte too).
//!
//! A subtree of the trie made only of whitespace bytes that a run state reads by spending
//! budget, none of its tokens long enough to spend the budget left, is allowed whole without
//! a walk: the indentation tokens under every value's start.
//!
//! Key types: [`RunPath`] (a walk's states and offsets per depth), [`RunStates`] (per
//! matcher: which states are run states, and their budgets left). Cost: a state is
//! classified once per whitespace byte (a table step and a comparison of two
//! configurations); a byte inside a run costs two array lookups.

use super::super::automaton::is_whitespace_shift;
use super::super::ir::{is_not_whitespace, whitespace_slot, whitespace_slots_of_set, ByteSet, WHITESPACE_BYTES};
use super::super::cache::{SharedCaches, DEAD, FULL};
use super::super::toktrie::LongToken;
use super::Matcher;

/// A state's budget left before it was worked out.
const LEFT_UNKNOWN: u32 = u32::MAX;

/// Budget the current state must have left for a long token's whitespace to be classified
/// from its lowered mask state (see [`Matcher::whitespace_token_allowed`]): a first byte that
/// ends a value may spend one, and the state after it must then read one more as the mask
/// state does.
const LOWERED_LEFT_MIN: u32 = 3;

/// The slot of a space in [`WHITESPACE_BYTES`].
const SPACE_SLOT: usize = 0;

/// Where a walk stands at each depth: the state, and the whitespace bytes read past it (the
/// walk's real state is that state after them, see the module docs).
#[derive(Default)]
pub(super) struct RunPath {
    pub(super) states: Vec<u32>,
    pub(super) offsets: Vec<u32>,
}

impl RunPath {
    /// Room for `depths` depths, starting from `root` with nothing read past it.
    pub(super) fn start(&mut self, depths: usize, root: u32) {
        let depths = depths.max(1);
        if self.states.len() < depths {
            self.states.resize(depths, DEAD);
            self.offsets.resize(depths, 0);
        }
        self.states[0] = root;
        self.offsets[0] = 0;
    }
}

/// What a matcher learned about states as whitespace runs, by state id; forgotten when the
/// table's ids change.
#[derive(Default)]
pub(super) struct RunStates {
    epoch: u64,
    /// Per state: its budget left, or [`LEFT_UNKNOWN`].
    left: Vec<u32>,
    /// Per state: bit `i` once it is known whether `WHITESPACE_BYTES[i]` only spends budget
    /// from it, bit `4 + i` when it does.
    shifts: Vec<u8>,
}

impl RunStates {
    fn sync(&mut self, epoch: u64) {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.left.clear();
            self.shifts.clear();
        }
    }
}

impl Matcher {
    /// Steps the walk in `path` by the trie node at `depth` reading `byte`, whose subtree's
    /// longest token has `longest()` bytes: records the state (and offset) at `depth` and
    /// returns the state, or [`DEAD`], or [`FULL`] (clear the table and step again).
    #[inline(always)]
    pub(super) fn step_path(
        &mut self,
        caches: &mut SharedCaches,
        path: &mut RunPath,
        depth: usize,
        byte: u8,
        longest: impl FnOnce() -> u32,
    ) -> u32 {
        let parent = path.states[depth - 1];
        let offset = path.offsets[depth - 1];
        // After a run, the run's real state has the run state's stacks with more budget
        // used, so a byte the run state is known to refuse is refused after the run too.
        let (next, offset) = if is_not_whitespace(byte) && (offset == 0 || caches.table.known_next(parent, byte) == Some(DEAD)) {
            (caches.table.next(parent, byte), 0)
        } else {
            // Bytes from this one to the end of the longest token below.
            let remaining = (longest() + 1).saturating_sub(depth as u32);
            self.step_run(caches, parent, offset, byte, remaining)
        };
        path.states[depth] = next;
        path.offsets[depth] = offset;
        next
    }

    /// The (state, offset) after `byte` from `state` with `offset` whitespace bytes read past
    /// it, where `remaining` bytes are left to read from `byte` on: inside a run the
    /// offset grows; after it, the run state itself steps when `remaining` bytes cannot spend
    /// the budget it has left past the run, and else the run's real state is made first.
    #[inline(never)]
    fn step_run(
        &mut self,
        caches: &mut SharedCaches,
        state: u32,
        offset: u32,
        byte: u8,
        remaining: u32,
    ) -> (u32, u32) {
        if self.grammar.whitespace_budget() == 0 {
            return (caches.table.next(state, byte), 0);
        }
        if let Some(slot) = whitespace_slot(byte) {
            // The state and offset stay exact while no stack can spend its last byte.
            if offset + 1 < self.whitespace_left(caches, state) {
                match self.reads_as_shift(caches, state, slot) {
                    None => return (FULL, 0),
                    Some(true) => return (state, offset + 1),
                    Some(false) => {}
                }
            }
        }
        if offset == 0 || self.whitespace_left(caches, state).saturating_sub(offset) > remaining {
            return (caches.table.next(state, byte), 0);
        }
        let real = caches.table.with_whitespace_spent(state, offset);
        if real == FULL || real == DEAD {
            return (real, 0);
        }
        (caches.table.next(real, byte), 0)
    }

    /// Whether every token of a trie subtree whose bytes are `bytes` is allowed where a walk
    /// stands at `state` with `offset` whitespace bytes read past it, the longest token being
    /// `rest` bytes from there: the bytes are whitespace that `state` reads only by spending
    /// budget, and the run stays exact to the end of that token (see `step_run`). Saves
    /// stepping a vocabulary's indentation tokens one by one from every value's start.
    pub(super) fn run_covers(
        &mut self,
        caches: &mut SharedCaches,
        state: u32,
        offset: u32,
        bytes: &ByteSet,
        rest: u32,
    ) -> bool {
        let slots = whitespace_slots_of_set(bytes);
        if slots == 0 || self.grammar.whitespace_budget() == 0 {
            return false;
        }
        let shifts = (0..WHITESPACE_BYTES.len())
            .all(|slot| slots & (1 << slot) == 0 || self.reads_as_shift(caches, state, slot) == Some(true));
        shifts && offset.saturating_add(rest) < self.whitespace_left(caches, state)
    }

    /// Whether long `token` (its bytes `bytes`, from the caller's trie: no reference count
    /// taken per token), if made only of whitespace bytes, may come next: allowed where each
    /// of its bytes leads back to the current state (a string body); else from the budget
    /// alone where the current state reads each of its bytes only by spending budget: a run
    /// shorter than what every stack has left is allowed (the run's state stays exact all the
    /// way), one longer than what any stack has left is not, and one in between is stepped
    /// from the state after all but its last bytes that only spend budget. A run whose first
    /// byte ends what came before it (a number, a closed value) is read so from the state
    /// after that byte. `None` when that does not settle it (another token or state, or a
    /// full table). For the long tokens a normalized mask leaves to check: stepped byte by
    /// byte, an indentation token makes a state per byte with this position's budget, none of
    /// them known from the mask's walk.
    ///
    /// Where the current state's mask state is the same configuration with every stack's
    /// whitespace used lowered alike (see `Normalized::uniform_lowering`) and a few bytes of
    /// budget still left, the bytes are classified from the mask state instead: frame for
    /// frame, both read whitespace alike while neither runs out, and the mask's walk has
    /// classified the mask state already, where the current state would make new states for
    /// it at every position; only the budget left differs, by the lowering.
    pub(super) fn whitespace_token_allowed(
        &mut self,
        caches: &mut SharedCaches,
        token: LongToken,
        bytes: &[u8],
    ) -> Option<bool> {
        if token.whitespace_slots == 0 || self.grammar.whitespace_budget() == 0 {
            return None;
        }
        let lowered =
            caches.table.known_mask_state(self.state).and_then(|root| Some((root.state, root.uniform_lowering?)));
        let (from, lowering) = match lowered {
            Some((root, lowering)) if self.whitespace_left(caches, root).saturating_sub(lowering) >= LOWERED_LEFT_MIN => {
                (root, lowering)
            }
            _ => (self.state, 0),
        };
        if let Some(allowed) = self.whitespace_run_allowed(caches, from, lowering, token.whitespace_slots, bytes) {
            return Some(allowed);
        }
        let (&first, rest) = bytes.split_first()?;
        match caches.table.next(from, first) {
            DEAD => Some(false),
            FULL => None,
            next => self.whitespace_run_allowed(caches, next, lowering, token.whitespace_slots, rest),
        }
    }

    /// Whether the whitespace `run` (of the bytes of `slots`) keeps alive the state that is
    /// `state` with `lowering` more whitespace used on every stack, when `state` loops on those
    /// bytes or reads each of them only by spending budget (see
    /// [`Matcher::whitespace_token_allowed`]); `None` otherwise.
    fn whitespace_run_allowed(
        &mut self,
        caches: &mut SharedCaches,
        state: u32,
        lowering: u32,
        slots: u8,
        run: &[u8],
    ) -> Option<bool> {
        // Inside a string every whitespace byte leads back to the same state: any run fits.
        let loops = (0..WHITESPACE_BYTES.len()).all(|slot| {
            slots & (1 << slot) == 0 || caches.table.next(state, WHITESPACE_BYTES[slot]) == state
        });
        if loops {
            return Some(true);
        }
        for slot in 0..WHITESPACE_BYTES.len() {
            let used = slots & (1 << slot) != 0;
            if used && self.reads_as_shift(caches, state, slot) != Some(true) {
                return None;
            }
        }
        let length = run.len() as u32;
        let left = self.whitespace_left(caches, state).saturating_sub(lowering);
        if length < left {
            return Some(true);
        }
        let left_most = self.grammar.whitespace_left_most(caches.table.config(state)).saturating_sub(lowering);
        if length > left_most {
            return Some(false);
        }
        // The run ends some stacks' budget: its first `left - 1` bytes still only spend
        // budget, so their configuration is made at once and only the rest is stepped.
        // (`state` has yet to spend `lowering` more than the real state.)
        let shifted = left.saturating_sub(1);
        let rest = run.get(shifted as usize..)?;
        caches.table.alive_after_whitespace_run(state, shifted + lowering, rest)
    }

    /// Whether `state` reads a space only by spending budget. Its whitespace is walked as
    /// runs, and its other bytes end the run into states of their own, so a skip set (which
    /// would follow the run a state per byte) skips nothing a walk does not do cheaply.
    pub(super) fn is_run_state(&mut self, caches: &mut SharedCaches, state: u32) -> bool {
        self.grammar.whitespace_budget() != 0
            && self.reads_as_shift(caches, state, SPACE_SLOT) == Some(true)
    }

    /// The whitespace bytes `state` has left (see `CompiledGrammar::whitespace_left`).
    fn whitespace_left(&mut self, caches: &SharedCaches, state: u32) -> u32 {
        let runs = &mut self.run_states;
        runs.sync(caches.table.epoch());
        let index = state as usize;
        if let Some(&left) = runs.left.get(index) {
            if left != LEFT_UNKNOWN {
                return left;
            }
        }
        let left = self.grammar.whitespace_left(caches.table.config(state));
        if runs.left.len() <= index {
            runs.left.resize(index + 1, LEFT_UNKNOWN);
        }
        runs.left[index] = left;
        left
    }

    /// Whether reading `WHITESPACE_BYTES[slot]` from `state` only spends budget; `None` when
    /// the table is full.
    fn reads_as_shift(&mut self, caches: &mut SharedCaches, state: u32, slot: usize) -> Option<bool> {
        self.run_states.sync(caches.table.epoch());
        let index = state as usize;
        let known = self.run_states.shifts.get(index).copied().unwrap_or(0);
        if known & (1 << slot) != 0 {
            return Some(known & (16 << slot) != 0);
        }
        let next = caches.table.next(state, WHITESPACE_BYTES[slot]);
        if next == FULL {
            return None;
        }
        // Coming back to itself (a space inside a string) spends nothing.
        let shifts = next != DEAD
            && next != state
            && is_whitespace_shift(caches.table.config(state), caches.table.config(next));
        let runs = &mut self.run_states;
        if runs.shifts.len() <= index {
            runs.shifts.resize(index + 1, 0);
        }
        runs.shifts[index] |= (1 << slot) | (u8::from(shifts) << (4 + slot));
        Some(shifts)
    }
}
