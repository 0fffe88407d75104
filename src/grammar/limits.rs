//! The bounds that keep every grammar, input and request finite: what a grammar may cost to
//! load, and how much memory a running matcher may use for its caches.
//!
//! Key type: [`Limits`]. Each field documents its default and what raising it costs.

/// Bounds on loading a grammar and on running it. `Limits::default()` suits a daemon serving
/// untrusted requests; every figure is a setting, not a constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest GBNF source accepted, in bytes. Default 1 MiB (llama.cpp's samples are < 2 KiB);
    /// parsing is linear, so this bounds load time to milliseconds.
    pub max_source_bytes: usize,
    /// Most rules after repetitions are expanded. Default 100,000; each costs ~100 bytes.
    pub max_rules: usize,
    /// Most symbols in the expanded grammar. Default 2,000,000; each costs ~40 bytes, so the
    /// compiled form stays under ~100 MB.
    pub max_symbols: usize,
    /// Deepest nesting of parentheses in a GBNF source. Default 256; the parser recurses once per level.
    pub max_nesting: usize,
    /// Largest `{m,n}` bound. Default 4096 (the spec's figure): each count is a separate state.
    pub max_repetition: u32,
    /// Deepest parse stack (nested rules still open). Default 1,024: a document nested deeper
    /// than this is rejected at that point. Each frame costs 4 bytes per stack per state.
    pub max_stack_depth: usize,
    /// Most parse stacks alive at once (an ambiguous grammar keeps several). Default 1,024;
    /// a transition that would need more is treated as dead and counted.
    pub max_stacks: usize,
    /// Most expansion steps to compute one byte transition. Default 200,000.
    pub max_expansion_steps: usize,
    /// Largest automaton state, in 4-byte words of parse stacks. Default 16,384 (64 KiB); a
    /// transition to a larger state is treated as dead and counted. The transition table also
    /// holds at most `transition_states` × 1,024 words of states (16 MiB at the default), and
    /// is cleared when that fills, so an adversarial grammar cannot exhaust memory.
    pub max_state_words: usize,
    /// Bound of the transition table, in automaton states (spec default 4,096). A state costs
    /// its parse stacks plus 4 bytes per byte class; a full table is cleared and counted.
    pub transition_states: usize,
    /// Bound of the mask cache, in masks (spec default 256). A mask costs vocabulary/8 bytes
    /// (6 KiB at 49k tokens, 32 KiB at 262k); a full cache is cleared and counted.
    pub mask_cache: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_source_bytes: 1 << 20,
            max_rules: 100_000,
            max_symbols: 2_000_000,
            max_nesting: 256,
            max_repetition: 4096,
            max_stack_depth: 1024,
            max_stacks: 1024,
            max_expansion_steps: 200_000,
            max_state_words: 16_384,
            transition_states: 4096,
            mask_cache: 256,
        }
    }
}
