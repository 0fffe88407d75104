//! The byte-level pushdown automaton every constraint runs on, compiled from an
//! [`ir::Grammar`](super::ir::Grammar).
//!
//! A *configuration* is the set of parse stacks still alive after the bytes read so far (an
//! ambiguous grammar keeps several). A stack is a list of grammar positions: the top is the
//! terminal to match next, the frames below are where to return when a rule completes; a
//! stack with no frames has matched the whole root rule (accepting). Each stack also carries
//! how much of the document's whitespace budget it has used. Calls in tail position push no
//! return frame, so `item ::= x item | ""` runs in constant stack.
//!
//! Configurations are encoded canonically as one `Vec<u32>`, with a hash (child module
//! `stacks`), so that `cache.rs` can intern them as state ids and fill a (state, byte class)
//! table lazily. Bytes that no terminal of the grammar tells apart share a byte class, which
//! keeps table rows short.
//!
//! The byte-free expansion of each grammar position (which rules it enters, where it can
//! return) is computed the first time a step needs it and kept in the compiled grammar (child
//! module `expansion`), so a step only glues cached expansions onto the stack below.
//!
//! Each position also knows the fewest bytes that finish its alternative, so a configuration
//! knows how far it is from a complete document, and the shortest ending that gets there
//! (child module `distance`): what a token budget closes a document by.
//!
//! Key types: [`CompiledGrammar`] (immutable but for those caches, shared in an `Arc`),
//! [`CheckOutcome`], [`check_input`]. Cost: compiling is linear in the grammar plus a
//! left-recursion check; a byte step costs about a microsecond per live stack; the matcher
//! caches steps in its transition table.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::counters::{add_loop_rules, ChainRanks, CounterChains};
use super::toktrie::TokenTrie;
use super::error::{GrammarError, Location};
use super::ir::{ByteSet, Grammar, Symbol, WHITESPACE_BYTES};
use super::limits::Limits;

mod analysis;
mod distance;
mod expansion;
mod stacks;

use analysis::byte_classes;
pub(crate) use analysis::find_left_recursion;
use distance::Distances;
pub use distance::{closing_bytes, NO_ENDING};
use expansion::Expansion;
use stacks::StackSet;
pub(crate) use stacks::{
    config_can_continue, config_hash, config_is_accepting, decode, is_whitespace_shift, StepStacks, WordHasher,
};

/// What [`CompiledGrammar::normalize_for_horizon`] made of a configuration.
pub(crate) struct Normalized {
    pub(crate) config: Vec<u32>,
    /// Whether a frame moved within a bounded repetition (not only whitespace used lowered):
    /// then any token longer than the horizon may behave otherwise than from the original.
    pub(crate) counters_moved: bool,
    /// When no frame moved and every stack's whitespace used was lowered by the same count
    /// (to none): that count. Then every token of at most the horizon steps both
    /// configurations alike, frame for frame, and the original's successor is the normalized
    /// one's with that much more whitespace used (see [`CompiledGrammar::with_whitespace_used`]).
    pub(crate) uniform_lowering: Option<u32>,
}

/// What [`CompiledGrammar::unbind_counters`] made of a configuration.
pub(crate) struct Unbound {
    pub(crate) config: Vec<u32>,
    /// The fewest items left among the repetitions moved.
    pub(crate) fewest: u32,
    /// Every repetition moved counts items that each read at least one character: a token
    /// needs `fewest - 1` characters, not only bytes, to reach a bound.
    pub(crate) in_characters: bool,
}

pub(crate) fn whitespace_set() -> ByteSet {
    let mut set = ByteSet::EMPTY;
    for byte in WHITESPACE_BYTES {
        set.insert(byte);
    }
    set
}

/// One grammar position, as the automaton sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlatSymbol {
    Bytes(ByteSet),
    Rule(u32),
    Whitespace,
    /// End of an alternative: return to the frame below.
    End,
}

/// A grammar compiled for the automaton: immutable but for caches filled once, `Send + Sync`,
/// shared through an `Arc` by every request using it.
#[derive(Debug)]
pub struct CompiledGrammar {
    /// Per position, its expansion once computed.
    expansions: Vec<OnceLock<Box<Result<Expansion, StepOverflow>>>>,
    /// All alternatives of all rules back to back, each closed by `End`; a position is an index.
    symbols: Vec<FlatSymbol>,
    /// Start positions of the alternatives of rule `r`: `alt_starts[alt_ranges[r].0..alt_ranges[r].1]`.
    alt_starts: Vec<u32>,
    alt_ranges: Vec<(u32, u32)>,
    rule_names: Vec<String>,
    whitespace_budget: u32,
    byte_class: [u8; 256],
    class_representatives: Vec<u8>,
    /// Canonical encoding of the configuration before any byte.
    initial: Vec<u32>,
    limits: Limits,
    /// Bounded repetitions, for [`CompiledGrammar::normalize_for_horizon`].
    counters: CounterChains,
    /// Per position, the fewest bytes to the end of its alternative (see `distance.rs`).
    distances: Distances,
    /// Every byte some terminal or whitespace can read.
    readable_bytes: ByteSet,
    /// The shortest document, once asked for (see `distance.rs`).
    shortest_document: OnceLock<Option<Box<[u8]>>>,
    /// Per vocabulary, what the matchers of this grammar share on it (their transition table
    /// and masks); opaque here so that the automaton does not depend on the caches built on it.
    attachments: VocabularyAttachments,
}

/// A value per vocabulary, kept by a grammar for whoever runs it on that vocabulary (the
/// matchers' shared caches). The vocabulary is held weakly: an entry whose vocabulary is gone is
/// dropped at the next lookup. Values are opaque (`Any`), so this module knows nothing of them.
#[derive(Default)]
pub(crate) struct VocabularyAttachments(Mutex<Vec<(Weak<TokenTrie>, Arc<dyn Any + Send + Sync>)>>);

impl std::fmt::Debug for VocabularyAttachments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VocabularyAttachments")
    }
}

impl VocabularyAttachments {
    /// The value attached for `trie`, made by `create` on first use.
    pub(crate) fn get_or_attach(
        &self,
        trie: &Arc<TokenTrie>,
        create: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
    ) -> Arc<dyn Any + Send + Sync> {
        let mut entries = match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        entries.retain(|(vocabulary, _)| vocabulary.strong_count() > 0);
        let wanted = Arc::downgrade(trie);
        if let Some((_, value)) = entries.iter().find(|(v, _)| v.ptr_eq(&wanted)) {
            return value.clone();
        }
        let value = create();
        entries.push((wanted, value.clone()));
        value
    }
}

/// Why a byte step could not be computed (the input itself is not at fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepOverflow {
    StackDepth,
    TooManyStacks,
    TooMuchWork,
    StateTooLarge,
}

impl StepOverflow {
    pub(crate) fn describe(self, limits: &Limits) -> String {
        match self {
            StepOverflow::StackDepth => {
                format!("nesting deeper than {} open rules", limits.max_stack_depth)
            }
            StepOverflow::TooManyStacks => {
                format!(
                    "more than {} parse stacks alive at once (that many ways to read the same \
                     bytes were still open: alternatives that begin alike, or repetitions that \
                     can split the same text in several ways)",
                    limits.max_stacks
                )
            }
            StepOverflow::TooMuchWork => {
                format!(
                    "more than {} expansion steps for one byte",
                    limits.max_expansion_steps
                )
            }
            StepOverflow::StateTooLarge => {
                format!("a parse state larger than {} words", limits.max_state_words)
            }
        }
    }
}

impl CompiledGrammar {
    /// Compiles `grammar`, refusing left recursion (direct, indirect or behind nullable
    /// prefixes), dangling rule references and grammars over `limits`.
    pub fn new(mut grammar: Grammar, limits: &Limits) -> Result<Self, GrammarError> {
        let source_rule_count = grammar.rules.len();
        if source_rule_count > limits.max_rules {
            return Err(GrammarError::TooLarge {
                what: "the rule count",
                actual: source_rule_count,
                limit: limits.max_rules,
            });
        }
        if grammar.root.index() >= source_rule_count {
            return Err(GrammarError::MissingRoot);
        }
        // Rule references are checked against the source rules only: the loop rules added
        // here are never named by the source.
        for rule in &grammar.rules {
            for symbol in rule.alternatives.iter().flatten() {
                if let Symbol::Rule(id) = symbol {
                    if id.index() >= source_rule_count {
                        return Err(GrammarError::Invalid(format!(
                            "rule `{}` refers to rule number {} but there are only {source_rule_count}",
                            rule.name, id.0
                        )));
                    }
                }
            }
        }
        let chain_ranks = ChainRanks::of(&grammar);
        let added_rules = add_loop_rules(&mut grammar, &chain_ranks);
        let rule_count = grammar.rules.len();
        let symbol_total: usize = grammar
            .rules
            .iter()
            .flat_map(|r| &r.alternatives)
            .map(|a| a.len() + 1)
            .sum();
        // Refused before anything is allocated for it.
        if symbol_total > limits.max_symbols || symbol_total >= u32::MAX as usize {
            return Err(GrammarError::TooLarge {
                what: "the expanded grammar (symbols)",
                actual: symbol_total,
                limit: limits.max_symbols,
            });
        }
        let alternative_total: usize = grammar.rules.iter().map(|r| r.alternatives.len()).sum();
        let mut symbols = Vec::with_capacity(symbol_total);
        let mut alt_starts = Vec::with_capacity(alternative_total);
        let mut alt_ranges = Vec::with_capacity(rule_count);
        for rule in &grammar.rules {
            let first_alt = alt_starts.len() as u32;
            for alternative in &rule.alternatives {
                alt_starts.push(symbols.len() as u32);
                for symbol in alternative {
                    symbols.push(match *symbol {
                        Symbol::Bytes(set) => FlatSymbol::Bytes(set),
                        Symbol::Whitespace => FlatSymbol::Whitespace,
                        Symbol::Rule(id) => {
                            if id.index() >= rule_count {
                                return Err(GrammarError::Invalid(format!(
                                    "rule `{}` refers to rule number {} but there are only {rule_count}",
                                    rule.name, id.0
                                )));
                            }
                            FlatSymbol::Rule(id.0)
                        }
                    });
                }
                symbols.push(FlatSymbol::End);
            }
            alt_ranges.push((first_alt, alt_starts.len() as u32));
        }
        if let Some(cycle) = find_left_recursion(&grammar) {
            let names: Vec<&str> = cycle
                .iter()
                .map(|r| grammar.rules[*r].name.as_str())
                .collect();
            let mut cycle_text = names.join(" -> ");
            cycle_text.push_str(" -> ");
            cycle_text.push_str(names[0]);
            return Err(GrammarError::LeftRecursion {
                rule: names[0].to_string(),
                cycle: cycle_text,
                at: Location::default(),
            });
        }
        let (byte_class, class_representatives) = byte_classes(&symbols);
        let distances = Distances::new(&symbols, &alt_starts, &alt_ranges);
        let mut readable_bytes = ByteSet::EMPTY;
        for symbol in &symbols {
            match symbol {
                FlatSymbol::Bytes(set) => readable_bytes = readable_bytes.union(set),
                FlatSymbol::Whitespace if grammar.whitespace_budget > 0 => {
                    readable_bytes = readable_bytes.union(&whitespace_set())
                }
                _ => {}
            }
        }
        let counters = CounterChains::find(
            &grammar,
            &chain_ranks,
            &added_rules,
            &alt_starts,
            &alt_ranges,
            symbols.len(),
        );
        let mut compiled = CompiledGrammar {
            expansions: (0..symbols.len()).map(|_| OnceLock::new()).collect(),
            symbols,
            alt_starts,
            alt_ranges,
            // Moved, not copied: the source grammar is dropped below.
            rule_names: grammar.rules.iter_mut().map(|r| std::mem::take(&mut r.name)).collect(),
            whitespace_budget: grammar.whitespace_budget,
            byte_class,
            class_representatives,
            initial: Vec::new(),
            limits: limits.clone(),
            counters,
            distances,
            readable_bytes,
            shortest_document: OnceLock::new(),
            attachments: VocabularyAttachments::default(),
        };
        let mut stacks = StackSet::default();
        let root_call = [u32::MAX];
        compiled
            .expand_call(grammar.root.0, &root_call[..0], 0, &mut stacks)
            .map_err(|overflow| {
                GrammarError::Invalid(format!(
                    "the start of the grammar needs {}",
                    overflow.describe(limits)
                ))
            })?;
        compiled.initial = stacks.into_encoded();
        Ok(compiled)
    }

    pub(crate) fn attachments(&self) -> &VocabularyAttachments {
        &self.attachments
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn rule_names(&self) -> &[String] {
        &self.rule_names
    }

    pub(crate) fn initial_config(&self) -> &[u32] {
        &self.initial
    }

    /// Every byte the grammar can read somewhere.
    pub fn readable_bytes(&self) -> ByteSet {
        self.readable_bytes
    }

    /// How many whitespace bytes a whole document may hold.
    pub(crate) fn whitespace_budget(&self) -> u32 {
        self.whitespace_budget
    }

    /// The whitespace bytes every stack of `config` may still read: the budget less the most
    /// any of its stacks has used.
    pub(crate) fn whitespace_left(&self, config: &[u32]) -> u32 {
        let most_used = decode(config).map(|(ws_used, _)| ws_used).max().unwrap_or(0);
        self.whitespace_budget.saturating_sub(most_used)
    }

    /// The whitespace bytes some stack of `config` may still read: the budget less the least
    /// any of its stacks has used.
    pub(crate) fn whitespace_left_most(&self, config: &[u32]) -> u32 {
        let least_used = decode(config).map(|(ws_used, _)| ws_used).min().unwrap_or(0);
        self.whitespace_budget.saturating_sub(least_used)
    }

    /// `config` with `change` applied to every stack's whitespace used. Adding `n` makes the
    /// configuration after a run of `n` whitespace bytes that each only spent budget (see
    /// `is_whitespace_shift`) at once instead of byte by byte, or undoes a uniform lowering
    /// (see [`Normalized::uniform_lowering`]) on a configuration stepped from the lowered one.
    /// Left encoded in `out`, with its hash: a state table interns it from its own buffer.
    pub(crate) fn with_whitespace_used(&self, config: &[u32], change: impl Fn(u32) -> u32, out: &mut StepStacks) {
        out.clear();
        for (ws_used, frames) in decode(config) {
            out.push(frames, change(ws_used));
        }
        out.order();
        out.encode();
    }

    #[inline]
    pub(crate) fn byte_class(&self) -> &[u8; 256] {
        &self.byte_class
    }

    pub(crate) fn class_count(&self) -> usize {
        self.class_representatives.len()
    }

    /// Pushes onto `out` every stack reached by calling `rule` with `frames` below it, after
    /// following every path that consumes no byte.
    fn expand_call(
        &self,
        rule: u32,
        frames: &[u32],
        ws_used: u32,
        out: &mut StackSet,
    ) -> Result<(), StepOverflow> {
        let (lo, hi) = self.alt_ranges[rule as usize];
        let mut work = Vec::new();
        for alt in &self.alt_starts[lo as usize..hi as usize] {
            let mut stack = frames.to_vec();
            stack.push(*alt);
            work.push((ws_used, stack));
        }
        self.expand(work, out)
    }

    /// Follows every byte-free path from the pending stacks in `work` (each may have a rule
    /// call, an `End` or whitespace on top) and adds the resulting stacks, whose tops are
    /// terminals, to `out`. Terminates because left recursion was refused at compile time.
    fn expand(
        &self,
        mut work: Vec<(u32, Vec<u32>)>,
        out: &mut StackSet,
    ) -> Result<(), StepOverflow> {
        let mut steps = 0usize;
        // Keyed by frames the grammar made, so the cheap word hash will do (see WordHasher).
        let mut seen: HashSet<(u32, Vec<u32>), BuildHasherDefault<WordHasher>> = HashSet::default();
        while let Some((ws_used, mut frames)) = work.pop() {
            if !seen.insert((ws_used, frames.clone())) {
                continue;
            }
            loop {
                steps += 1;
                if steps > self.limits.max_expansion_steps {
                    return Err(StepOverflow::TooMuchWork);
                }
                let Some(&position) = frames.last() else {
                    out.insert(ws_used, frames);
                    break;
                };
                match self.symbols[position as usize] {
                    FlatSymbol::Bytes(_) => {
                        out.insert(ws_used, frames);
                        break;
                    }
                    FlatSymbol::Whitespace => {
                        if ws_used < self.whitespace_budget {
                            out.insert(ws_used, frames.clone());
                        }
                        if let Some(top) = frames.last_mut() {
                            *top = position + 1;
                        }
                    }
                    FlatSymbol::End => {
                        frames.pop();
                    }
                    FlatSymbol::Rule(rule) => {
                        frames.pop();
                        let return_to = position + 1;
                        if self.symbols[return_to as usize] != FlatSymbol::End {
                            frames.push(return_to);
                        }
                        if frames.len() >= self.limits.max_stack_depth {
                            return Err(StepOverflow::StackDepth);
                        }
                        let (lo, hi) = self.alt_ranges[rule as usize];
                        let alternatives = &self.alt_starts[lo as usize..hi as usize];
                        let Some((first, rest)) = alternatives.split_first() else {
                            break;
                        };
                        for alt in rest {
                            let mut other = frames.clone();
                            other.push(*alt);
                            work.push((ws_used, other));
                        }
                        frames.push(*first);
                    }
                }
            }
            if out.len() > self.limits.max_stacks {
                return Err(StepOverflow::TooManyStacks);
            }
        }
        Ok(())
    }

    /// The configuration after reading `byte` in configuration `config` (both encoded); an
    /// empty result is the dead configuration.
    pub(crate) fn step(&self, config: &[u32], byte: u8) -> Result<Vec<u32>, StepOverflow> {
        let mut out = StepStacks::default();
        self.step_with(config, byte, &mut out)?;
        Ok(out.encoded)
    }

    /// [`CompiledGrammar::step`] into `out.encoded`, with `out` a buffer kept across steps
    /// (the stacks go back to back in it, not in a vector each).
    pub(crate) fn step_with(
        &self,
        config: &[u32],
        byte: u8,
        out: &mut StepStacks,
    ) -> Result<(), StepOverflow> {
        self.step_telling_alike(config, byte, out).map(|_| ())
    }

    /// [`CompiledGrammar::step_with`], returning the bytes it treats exactly as it treats
    /// `byte` from `config`: a step depends on the byte only through which stacks' top
    /// terminals accept it, so every byte that the same stacks accept reaches the same
    /// configuration. Lets the state table fill a whole row from one step where the grammar's
    /// byte classes (made for every terminal at once) split what this configuration does not.
    /// Worked out in the pass that steps, not in a second one over the stacks.
    pub(crate) fn step_telling_alike(
        &self,
        config: &[u32],
        byte: u8,
        out: &mut StepStacks,
    ) -> Result<ByteSet, StepOverflow> {
        out.clear();
        let mut alike = ByteSet::ALL;
        for (ws_used, frames) in decode(config) {
            let Some((&top, below)) = frames.split_last() else {
                continue;
            };
            let (accepted, is_whitespace) = match self.symbols[top as usize] {
                FlatSymbol::Bytes(set) => (set, false),
                FlatSymbol::Whitespace if ws_used < self.whitespace_budget => (whitespace_set(), true),
                _ => continue,
            };
            if !accepted.contains(byte) {
                alike = alike.minus(&accepted);
                continue;
            }
            alike = alike.intersect(&accepted);
            out.hash_prefixes(below);
            if is_whitespace {
                let used = ws_used + 1;
                if used < self.whitespace_budget {
                    out.push_on_prefix(below, &[top], used);
                }
                self.continue_at(below, top + 1, used, out)?;
            } else {
                self.continue_at(below, top + 1, ws_used, out)?;
            }
            if out.len() > self.limits.max_stacks.saturating_mul(4) {
                return Err(StepOverflow::TooManyStacks);
            }
        }
        out.order();
        if out.len() > self.limits.max_stacks {
            return Err(StepOverflow::TooManyStacks);
        }
        if out.encoded_words() > self.limits.max_state_words {
            return Err(StepOverflow::StateTooLarge);
        }
        out.encode();
        Ok(alike)
    }

    /// Adds to `out` the stacks reached from the stack `below` + `position` without reading a
    /// byte, using the cached expansion of each position and returning into `below` while
    /// the rest of an alternative can match nothing.
    fn continue_at(
        &self,
        below: &[u32],
        mut position: u32,
        ws_used: u32,
        out: &mut StepStacks,
    ) -> Result<(), StepOverflow> {
        let mut depth = below.len();
        loop {
            // A terminal, or an alternative's end, is its own expansion.
            match self.symbols[position as usize] {
                FlatSymbol::Bytes(_) => {
                    if depth + 1 > self.limits.max_stack_depth {
                        return Err(StepOverflow::StackDepth);
                    }
                    out.push_on_prefix(&below[..depth], &[position], ws_used);
                    return Ok(());
                }
                FlatSymbol::End if depth == 0 => {
                    out.push(&[], ws_used);
                    return Ok(());
                }
                FlatSymbol::End => {
                    depth -= 1;
                    position = below[depth];
                    continue;
                }
                FlatSymbol::Whitespace | FlatSymbol::Rule(_) => {}
            }
            let expansion = self.expansion(position)?;
            for relative in expansion.stacks() {
                let on_whitespace = relative
                    .last()
                    .is_some_and(|top| self.symbols[*top as usize] == FlatSymbol::Whitespace);
                if on_whitespace && ws_used >= self.whitespace_budget {
                    continue;
                }
                if depth + relative.len() > self.limits.max_stack_depth {
                    return Err(StepOverflow::StackDepth);
                }
                out.push_on_prefix(&below[..depth], relative, ws_used);
                if out.len() > self.limits.max_stacks.saturating_mul(4) {
                    return Err(StepOverflow::TooManyStacks);
                }
            }
            if !expansion.completes {
                return Ok(());
            }
            if depth == 0 {
                out.push(&[], ws_used);
                return Ok(());
            }
            depth -= 1;
            position = below[depth];
        }
    }

    /// A configuration that keeps exactly the same bytes alive as `config` for any text of at
    /// most `horizon` bytes, and that many configurations share: each frame inside a bounded
    /// repetition with more than `horizon + 1` items left is moved to the member with
    /// `horizon + 1` left, and a stack's whitespace used is lowered to none while it leaves at
    /// least `horizon + 1` bytes of the budget. `None` when that is `config` itself. A mask
    /// from this configuration is exact for every token of at most `horizon` bytes; with
    /// [`Normalized::counters_moved`] false, also for every token of at most `horizon + 1`
    /// whitespace bytes (each frame of both still has that much budget left).
    ///
    /// Lowered rather than raised: a document without whitespace so far (the usual case) is
    /// its own mask state, so a position makes no second state beside the one it commits to.
    pub(crate) fn normalize_for_horizon(&self, config: &[u32], horizon: u32) -> Option<Normalized> {
        // The most whitespace a stack may have used and still be lowered.
        let floor = self.whitespace_budget.saturating_sub(horizon.saturating_add(1));
        let lowers = |ws_used: u32| ws_used != 0 && ws_used <= floor;
        let moves = |position: u32| self.counters.map_position(position, horizon) != position;
        // Most configurations change in nothing: found so before building anything.
        if !decode(config).any(|(ws_used, frames)| lowers(ws_used) || frames.iter().any(|&p| moves(p))) {
            return None;
        }
        let mut counters_moved = false;
        // The least and most whitespace any stack has used: every stack is lowered alike
        // when the two agree.
        let (mut least_used, mut most_used) = (u32::MAX, 0);
        let mut stacks = StepStacks::default();
        let mut mapped = Vec::new();
        for (ws_used, frames) in decode(config) {
            mapped.clear();
            mapped.extend(
                frames
                    .iter()
                    .map(|&position| self.counters.map_position(position, horizon)),
            );
            least_used = least_used.min(ws_used);
            most_used = most_used.max(ws_used);
            counters_moved |= mapped[..] != frames[..];
            stacks.push(&mapped, if lowers(ws_used) { 0 } else { ws_used });
        }
        Some(Normalized {
            config: stacks.into_encoded(),
            counters_moved,
            uniform_lowering: (!counters_moved && least_used == most_used && lowers(most_used)).then_some(most_used),
        })
    }

    /// `config` with every frame inside a bounded repetition with at least `min_rank` items
    /// left moved into the repetition's unbounded loop (see `counters.rs`), and the fewest
    /// items left among the frames moved; `None` when no frame moved. The result keeps
    /// exactly the same tokens alive as `config` among those of at most that count minus two
    /// bytes (the current item may complete without a byte, each further one reads one), or
    /// characters where every repetition moved counts characters.
    pub(crate) fn unbind_counters(&self, config: &[u32], min_rank: u32) -> Option<Unbound> {
        // Most configurations have no frame to move: found so before building anything.
        let moves = |position: u32| self.counters.unbound_position(position, min_rank).is_some();
        if self.counters.is_empty() || !decode(config).any(|(_, frames)| frames.iter().any(|&p| moves(p))) {
            return None;
        }
        let mut fewest = u32::MAX;
        let mut in_characters = true;
        let mut stacks = StepStacks::default();
        let mut mapped = Vec::new();
        for (ws_used, frames) in decode(config) {
            mapped.clear();
            mapped.extend(frames.iter().map(|&position| {
                match self.counters.unbound_position(position, min_rank) {
                    Some((unbound, rank)) => {
                        fewest = fewest.min(rank);
                        in_characters &= self.counters.counts_characters(position);
                        unbound
                    }
                    None => position,
                }
            }));
            stacks.push(&mapped, ws_used);
        }
        (fewest != u32::MAX).then(|| Unbound { config: stacks.into_encoded(), fewest, in_characters })
    }

    /// The bytes some stack of `config` can read next.
    pub(crate) fn allowed_bytes(&self, config: &[u32]) -> ByteSet {
        self.reading(config).readable
    }

    /// What `config` can read and whether it is complete, in one pass over its stacks (a
    /// state table learns all three of each state it makes).
    pub(crate) fn reading(&self, config: &[u32]) -> Reading {
        let mut reading = Reading { readable: ByteSet::EMPTY, accepting: false, can_continue: false };
        for (ws_used, frames) in decode(config) {
            let Some(&top) = frames.last() else {
                reading.accepting = true;
                continue;
            };
            reading.can_continue = true;
            match self.symbols[top as usize] {
                FlatSymbol::Bytes(set) => reading.readable = reading.readable.union(&set),
                FlatSymbol::Whitespace if ws_used < self.whitespace_budget => {
                    reading.readable = reading.readable.union(&whitespace_set())
                }
                _ => {}
            }
        }
        reading
    }
}

/// See [`CompiledGrammar::reading`]: the bytes some stack can read next, whether some stack
/// has matched the whole root rule, and whether some stack can still read a byte.
pub(crate) struct Reading {
    pub(crate) readable: ByteSet,
    pub(crate) accepting: bool,
    pub(crate) can_continue: bool,
}

#[cfg(test)]
mod tests;
