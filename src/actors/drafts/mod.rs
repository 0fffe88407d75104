//! Drafts: tokens proposed for a sequence's next decode, so that one `llama_decode` may settle
//! several tokens (speculative decoding whose drafts cost no model). Two sources:
//! - the bytes the grammar forces after the last token (`er_id": "` once `{"ord` is written in
//!   a closed object), as the model's tokenizer splits them; where the grammar allows
//!   whitespace first, the whitespace the answer wrote between the same two bytes before (at
//!   first, the layout of the model's previous answer, then JSON's usual one);
//! - text copied from the prompt (prompt lookup): the longest recent stretch of the answer that
//!   also occurs in the prompt, or the word it has begun where a word of the prompt starts so,
//!   and what follows it there up to the clause's end (`Acme Corporation` in an extraction);
//! - the answer repeating itself: the same lookup in the answer's earlier bytes, continued with
//!   the period of the repeat (a small model's runaway `0000…` or blank lines until the token
//!   limit, which plain decoding spends a step per token on).
//!
//! Drafts are only proposals. The model worker decodes them after the sampled token and samples
//! every row as plain decoding would, keeping a draft token only while it equals what was
//! sampled (see `model::verify`), so the output is what plain decoding writes, greedy or seeded,
//! and never leaves the constraint. What of a draft is decoded is decided against its cost: each
//! source's acceptance so far ([`Drafter::acceptance`]) against what one more row of the batch
//! costs ([`RowCosts`], measured by the worker). Copies that keep missing pause, and so do all
//! drafts of a worker where its drafted steps' tokens come out dearer than its plain steps'.
//!
//! Key types: [`Drafter`] (one per sequence; its counts are a `core::DraftCounts`),
//! [`RowCosts`] (one per worker). Cost per step: the grammar's forced bytes (a grammar step per
//! byte), one scan of the prompt's and the answer's bytes for the answer's last [`MIN_MATCH`]
//! bytes, and one tokenisation of at most [`MAX_COPY_BYTES`] or [`MAX_FORCED_BYTES`] bytes.

use std::sync::Arc;

use crate::core::DraftCounts;
use crate::grammar::lexicon::Constraint as OutputConstraint;
use crate::llm::Vocabulary;

mod costs;
pub use costs::{GenerationStep, PaceVerdict, RowCosts};

/// Text to tokens as the model's own tokenizer splits it (a draft the model would write the
/// same way is one it confirms), at most the given count.
pub type DraftTokenizer = Arc<dyn Fn(&[u8], usize) -> Vec<u32> + Send + Sync>;

/// Per pair of bytes, the whitespace an answer wrote between them (empty: none): how the model
/// lays out JSON, which a model keeps from one answer to the next.
pub type Habits = std::collections::HashMap<(u8, u8), Vec<u8>>;

/// Most tokens one draft holds.
pub const MAX_DRAFT: usize = 8;
/// Stands for the answer's start as the byte before its first one in [`Habits`]: a NUL byte
/// is no byte JSON writes before a value.
const ANSWER_START: u8 = 0;
/// Most forced bytes read ahead.
const MAX_FORCED_BYTES: usize = 64;
/// The shortest end of the answer that, found in the prompt, starts a copy: shorter ones match
/// by chance (`", "`).
const MIN_MATCH: usize = 4;
/// The fewest bytes of a string value that, found at a word's start in the prompt, start a copy.
const MIN_VALUE_START: usize = 2;
/// The longest end of the answer looked up.
const MAX_MATCH: usize = 24;
/// Bytes of the prompt a copy may take after the match.
const MAX_COPY_BYTES: usize = 48;
/// Steps without copies after one that missed at the smallest length, doubling up to the most.
const MIN_COPY_PAUSE: u32 = 4;
const MAX_COPY_PAUSE: u32 = 64;

/// Where the draft in flight came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Forced = 0,
    Copied = 1,
    /// Copied from the answer's own earlier bytes; counted with copies, trusted on its own.
    Repeated = 2,
}

/// The lookup sources, each with its own budget and pauses: a prompt that is being copied
/// says nothing about whether the answer is repeating itself.
const LOOKUPS: [Source; 2] = [Source::Copied, Source::Repeated];

/// A lookup source's state: how far it is trusted to run ahead, and its pauses.
#[derive(Debug, Clone)]
struct Lookup {
    /// Most tokens of a draft: doubled when a whole draft is kept, halved when none is.
    budget: usize,
    /// Steps left before this source drafts again, and the pause the next refused one starts.
    pause: u32,
    next_pause: u32,
}

impl Default for Lookup {
    fn default() -> Self {
        Lookup { budget: 2, pause: 0, next_pause: MIN_COPY_PAUSE }
    }
}

impl Lookup {
    /// `kept` of `drafted` tokens from this source were kept.
    fn settle(&mut self, kept: usize, drafted: usize) {
        if kept == 0 && self.budget == 1 {
            // Copies keep missing (free text that echoes the prompt's words): each costs a
            // row of decode, so they stop for a while, longer each time.
            self.pause = self.next_pause;
            self.next_pause = (self.next_pause * 2).min(MAX_COPY_PAUSE);
        }
        self.budget = if kept == drafted {
            self.next_pause = MIN_COPY_PAUSE;
            (self.budget * 2).min(MAX_DRAFT)
        } else if kept == 0 {
            (self.budget / 2).max(1)
        } else {
            self.budget
        };
    }
}

/// Where a lookup found the answer's end, and how long the match is.
struct Found {
    source: Source,
    matched: usize,
    bytes: Vec<u8>,
}

/// Per source (forced, copied, repeated): the acceptance rate assumed before any outcome.
const PRIOR_ACCEPTANCE: [f64; 3] = [0.9, 0.6, 0.6];
/// How far a draft that was not decoded moves its source's rate back towards the prior.
const UNTRIED_DRIFT: f64 = 0.1;
/// How much one outcome moves a source's acceptance rate.
const ACCEPTANCE_WEIGHT: f64 = 0.2;

/// One sequence's drafting state.
pub struct Drafter {
    tokenizer: DraftTokenizer,
    vocabulary: Arc<Vocabulary>,
    /// The prompt's text as bytes (control tokens add none): where copies come from.
    prompt: Vec<u8>,
    /// The answer's bytes so far.
    answer: Vec<u8>,
    /// Per pair of bytes, the whitespace the answer wrote between them last time (empty:
    /// none): the guess where the grammar allows whitespace before a forced byte.
    habits: Habits,
    /// The last non-whitespace byte and the whitespace written after it so far.
    pending_habit: Option<(u8, Vec<u8>)>,
    /// Per lookup source (copied, repeated): its budget and pauses.
    lookups: [Lookup; 2],
    /// Per source (forced, copied, repeated): how often a draft token the model reached was kept.
    acceptance: [f64; 3],
    in_flight: Option<(Source, usize)>,
    counts: DraftCounts,
}

impl Drafter {
    pub fn new(tokenizer: DraftTokenizer, vocabulary: Arc<Vocabulary>, prompt: &[u32]) -> Self {
        let prompt = prompt.iter().flat_map(|&token| vocabulary.piece(token).iter().copied()).collect();
        Drafter {
            tokenizer,
            vocabulary,
            prompt,
            answer: Vec::new(),
            habits: Default::default(),
            pending_habit: Some((ANSWER_START, Vec::new())),
            lookups: Default::default(),
            acceptance: PRIOR_ACCEPTANCE,
            in_flight: None,
            counts: DraftCounts::default(),
        }
    }

    /// Starts from the layout an earlier answer of the same model used, until this answer
    /// shows its own (the first `{` then newline and indent need no step each then).
    pub fn with_habits(mut self, habits: Habits) -> Self {
        self.habits = habits;
        self
    }

    /// The layout this answer used, for the next one.
    pub fn habits(&self) -> &Habits {
        &self.habits
    }

    pub fn counts(&self) -> DraftCounts {
        self.counts
    }

    /// `token` joined the answer.
    pub fn push(&mut self, token: u32) {
        for &byte in self.vocabulary.piece(token) {
            self.answer.push(byte);
            match (&mut self.pending_habit, byte.is_ascii_whitespace()) {
                (Some((_, run)), true) => run.push(byte),
                (_, true) => {}
                (pending, false) => {
                    if let Some((after, run)) = pending.replace((byte, Vec::new())) {
                        self.habits.insert((after, byte), run);
                    }
                }
            }
        }
    }

    /// How likely the next token of the draft in flight is to be kept, once the one before
    /// it was: what the answer's drafts from the same source did so far.
    pub fn acceptance(&self) -> f64 {
        self.in_flight.map_or(0.0, |(source, _)| self.acceptance[source as usize])
    }

    /// Only the first `length` tokens of the draft in flight are decoded.
    pub fn cut(&mut self, length: usize) {
        if let Some((source, drafted)) = self.in_flight.as_mut() {
            *drafted = (*drafted).min(length);
            if length == 0 {
                // Not decoded, so not measured: the source's rate drifts back to its prior,
                // or a few early misses would stop its drafts for the rest of the answer.
                let rate = &mut self.acceptance[*source as usize];
                *rate += UNTRIED_DRIFT * (PRIOR_ACCEPTANCE[*source as usize] - *rate);
                self.in_flight = None;
            }
        }
    }

    /// How many tokens of the draft in flight the model kept.
    pub fn settle(&mut self, kept: usize) {
        let Some((source, drafted)) = self.in_flight.take() else { return };
        match source {
            Source::Forced => self.counts.forced += drafted as u64,
            Source::Copied | Source::Repeated => self.counts.copied += drafted as u64,
        }
        self.counts.accepted += kept as u64;
        // Each token reached is an outcome: the kept ones, and the first refused.
        let rate = &mut self.acceptance[source as usize];
        for outcome in std::iter::repeat_n(1.0, kept).chain((kept < drafted).then_some(0.0)) {
            *rate += ACCEPTANCE_WEIGHT * (outcome - *rate);
        }
        if let Some(lookup) = self.lookup(source) {
            lookup.settle(kept, drafted);
        }
    }

    fn lookup(&mut self, source: Source) -> Option<&mut Lookup> {
        let at = LOOKUPS.iter().position(|&lookup| lookup == source)?;
        Some(&mut self.lookups[at])
    }

    /// The draft to decode after the answer so far, at most `room` tokens: the grammar's forced
    /// bytes when there are some, else the longer of a copy from the prompt and a repeat of the
    /// answer (the prompt on a tie); empty when none offers one.
    pub fn propose(&mut self, constraint: Option<&mut OutputConstraint>, room: usize) -> Vec<u32> {
        let room = room.min(MAX_DRAFT);
        if room == 0 {
            return Vec::new();
        }
        let mut constraint = constraint;
        // Where the answer has not shown its habit yet: a member after a comma laid out as the
        // first one was; none before a colon or comma, a space after a colon, and none before
        // the answer's first byte, as JSON writers do.
        let habit = |after: u8, next: u8| {
            let seen = |after: u8| self.habits.get(&(after, next)).cloned();
            seen(after).or_else(|| match (after, next) {
                (b',', _) => seen(b'{').or_else(|| seen(b'[')),
                (b':', _) => Some(b" ".to_vec()),
                (ANSWER_START, _) => Some(Vec::new()),
                (_, b':' | b',') => Some(Vec::new()),
                // A closing brace one indent left of the first member.
                (_, b'}') => self.habits.get(&(b'{', b'"')).map(|layout| dedent(layout)),
                _ => None,
            })
        };
        let last = self.answer.last().copied().unwrap_or(ANSWER_START);
        let forced = constraint
            .as_deref()
            .and_then(OutputConstraint::grammar)
            .map(|grammar| grammar.forced_bytes(MAX_FORCED_BYTES, Some(last), &habit))
            .unwrap_or_default();
        let (source, draft) = if forced.is_empty() {
            let mut found: Option<Found> = None;
            for (at, source) in LOOKUPS.into_iter().enumerate() {
                let lookup = &mut self.lookups[at];
                if lookup.pause > 0 {
                    lookup.pause -= 1;
                    continue;
                }
                let candidate = match source {
                    Source::Repeated => self.repeat_of_answer(),
                    _ => self.copy_from_prompt(),
                };
                // A match whose clause ends at once offers nothing; the other source may.
                if let Some(candidate) = candidate.filter(|candidate| !candidate.bytes.is_empty()) {
                    if found.as_ref().is_none_or(|best| candidate.matched > best.matched) {
                        found = Some(candidate);
                    }
                }
            }
            let Some(Found { source, bytes, .. }) = found else { return Vec::new() };
            let budget = self.lookup(source).map_or(1, |lookup| lookup.budget);
            let mut draft = (self.tokenizer)(&bytes, room.min(budget));
            // A copy the constraint refuses at once would only cost compute.
            if let (Some(constraint), Some(&first)) = (constraint.as_deref_mut(), draft.first()) {
                if !constraint.is_allowed(first) {
                    draft.clear();
                }
            }
            (source, draft)
        } else {
            (Source::Forced, (self.tokenizer)(&forced, room))
        };
        if !draft.is_empty() {
            self.in_flight = Some((source, draft.len()));
        }
        draft
    }

    /// What follows, in the prompt, the longest end of the answer found there (see
    /// [`longest_match`]), or else where a prompt word starts as the answer's last word does
    /// (see [`value_start`]), up to the end of the prompt's clause.
    fn copy_from_prompt(&self) -> Option<Found> {
        let (from, matched) = longest_match(&self.prompt, &self.answer).or_else(|| value_start(&self.prompt, &self.answer))?;
        let copy = &self.prompt[from..(from + MAX_COPY_BYTES).min(self.prompt.len())];
        // A value copied into a structure ends where the prompt's clause does: at a quote or a
        // line end, or a comma, colon, semicolon or full stop before a space (`Lyon, France`
        // ends at the comma; `1,249.90`, `15:00` and `jane.doe@mail.co.uk` go on).
        let end = (0..copy.len())
            .find(|&at| match copy[at] {
                b'"' | b'\n' => true,
                b',' | b':' | b';' | b'.' => copy.get(at + 1).is_none_or(u8::is_ascii_whitespace),
                _ => false,
            })
            .unwrap_or(copy.len());
        Some(Found { source: Source::Copied, matched, bytes: copy[..end].to_vec() })
    }

    /// What followed the answer's end where the answer wrote it before, continued with the
    /// period of the repeat: after `x0000` found one byte back, `0000…`; after a key found in
    /// an earlier object, that object's next bytes.
    fn repeat_of_answer(&self) -> Option<Found> {
        // The answer's end itself is not an earlier occurrence.
        let earlier = &self.answer[..self.answer.len().checked_sub(1)?];
        let (from, matched) = longest_match(earlier, &self.answer)?;
        let period = self.answer.len() - from;
        let bytes = (0..MAX_COPY_BYTES).map(|i| self.answer[from + i % period]).collect();
        Some(Found { source: Source::Repeated, matched, bytes })
    }
}

/// Where, in `prompt`, the word the answer has begun goes on, when its first bytes are too few
/// for [`longest_match`] (`Oak` of `"Oakridge Ltd"`, `12` of `1249.90`): the first place the
/// prompt has them at the start of a word, and their length. The word is what follows the
/// answer's last quote, space or JSON separator, and starts with a letter or digit.
fn value_start(prompt: &[u8], answer: &[u8]) -> Option<(usize, usize)> {
    let start = answer
        .iter()
        .rposition(|&byte| matches!(byte, b'"' | b':' | b',' | b'[' | b'{') || byte.is_ascii_whitespace())
        .map_or(0, |at| at + 1);
    let value = &answer[start..];
    if !(MIN_VALUE_START..MIN_MATCH).contains(&value.len()) || !value[0].is_ascii_alphanumeric() {
        return None;
    }
    let at = prompt
        .windows(value.len())
        .enumerate()
        .position(|(at, window)| window == value && (at == 0 || !prompt[at - 1].is_ascii_alphanumeric()))?;
    Some((at + value.len(), value.len()))
}

/// Whitespace laid out one level less: its last line's indentation without its last level (an
/// indent of four spaces or one tab; a line without indentation stays as it is).
fn dedent(layout: &[u8]) -> Vec<u8> {
    let line_start = layout.iter().rposition(|&byte| byte == b'\n').map_or(0, |at| at + 1);
    let indent = &layout[line_start..];
    let cut = if indent.ends_with(b"\t") { 1 } else { indent.len().min(4) };
    layout[..layout.len() - cut].to_vec()
}

/// Where, in `text`, the longest end of `answer` (at least [`MIN_MATCH`], at most
/// [`MAX_MATCH`] bytes) ends, and its length; of equally long ones the last, the likeliest to
/// be the one being copied. One scan for the last [`MIN_MATCH`] bytes, each hit then extended
/// backwards.
fn longest_match(text: &[u8], answer: &[u8]) -> Option<(usize, usize)> {
    if answer.len() < MIN_MATCH {
        return None;
    }
    let end = &answer[answer.len() - MIN_MATCH..];
    let mut best: Option<(usize, usize)> = None;
    for (at, window) in text.windows(MIN_MATCH).enumerate() {
        if window != end {
            continue;
        }
        let longest = MAX_MATCH.min(answer.len()).min(at + MIN_MATCH);
        let matched = (MIN_MATCH..longest)
            .take_while(|&length| text[at + MIN_MATCH - 1 - length] == answer[answer.len() - 1 - length])
            .count()
            + MIN_MATCH;
        if best.is_none_or(|(_, length)| matched >= length) {
            best = Some((at + MIN_MATCH, matched));
        }
    }
    best
}

#[cfg(test)]
mod tests;
