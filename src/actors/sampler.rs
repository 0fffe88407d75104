//! The per-request sampler: one per live sequence. It applies the request's constraint,
//! samples, turns tokens into text, and decides when the generation is over.
//!
//! The constraint is told the tokens the budget (the request's `max_tokens`, or the context's
//! room) leaves at each step, so that it closes its document within them
//! (`llamay_close_on_budget`); a token it refuses for the budget is drawn again from the
//! narrowed mask, and an output so closed still ends with `Length`.
//!
//! Key types: [`SequenceSampler`], [`Step`], [`StopStrings`].
//! Each step costs one pass over the logits row (see `llm::sampling`), plus a constraint check
//! of the chosen token; when it is refused, a few more checks of the next best-ranked tokens,
//! and a full token mask only when none of those is allowed. Three clock reads a step time its
//! phases (sampling, constraint, detokenize) into the model's `StepSplit`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::{FinishReason, StepSplit};
use crate::grammar::lexicon::Constraint as OutputConstraint;
use crate::llm::detok::Utf8Stream;
use crate::llm::sampling::{Sampler, SamplingConfig, TokenConstraint};
use crate::llm::Vocabulary;

/// What one step produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `token` joins the sequence (decode it next); `text` is ready to send.
    Continue { token: u32, text: String },
    /// The generation is over; `text` is the last text to send.
    Finished { text: String, reason: FinishReason },
}

/// What [`SequenceSampler::choose`] decided.
enum Chosen {
    Token(u32),
    Over(Step),
}

/// Lets the sampler consult the constraint engine (which times itself, see `MaskStats`).
struct ConstraintAdapter<'a>(&'a mut OutputConstraint);

impl TokenConstraint for ConstraintAdapter<'_> {
    fn allows(&mut self, token: u32) -> bool {
        self.0.is_allowed(token)
    }

    fn allowed_words(&mut self) -> &[u64] {
        self.0.compute_mask().words()
    }
}

/// Stop strings, matched across token boundaries. Text that might be the start of a stop
/// string is held back until it is known not to be one, so a stop string never leaks out.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

impl StopStrings {
    pub fn new(stops: Vec<String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Adds `text`; returns the text safe to emit, and the stop string if one matched
    /// (everything from the stop string on is dropped).
    pub fn push(&mut self, text: &str) -> (String, Option<String>) {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return (std::mem::take(&mut self.held), None);
        }
        let first_match = self
            .stops
            .iter()
            .filter_map(|stop| self.held.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = first_match {
            let stop = stop.clone();
            let emit = self.held[..at].to_string();
            self.held.clear();
            return (emit, Some(stop));
        }
        // Keep the longest suffix that is a prefix of some stop string.
        let mut keep_from = self.held.len();
        for (index, _) in self.held.char_indices().rev() {
            let suffix = &self.held[index..];
            if self.stops.iter().any(|stop| stop.starts_with(suffix)) {
                keep_from = index;
            }
        }
        let emit = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        (emit, None)
    }

    /// What is still held back when the generation ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Everything one sequence needs between decode steps.
pub struct SequenceSampler {
    sampler: Sampler,
    /// The request's grammar, lexicon, or both.
    constraint: Option<OutputConstraint>,
    vocabulary: Arc<Vocabulary>,
    text: Utf8Stream,
    stops: StopStrings,
    generated: u32,
    max_tokens: u32,
    /// The last token sampled into the answer (Ollama's `context` ends with it).
    last_token: Option<u32>,
    /// Whether the constraint is told the tokens left, to close its document within them.
    close_on_budget: bool,
}

impl SequenceSampler {
    pub fn new(
        config: SamplingConfig,
        constraint: Option<OutputConstraint>,
        vocabulary: Arc<Vocabulary>,
        stops: Vec<String>,
        max_tokens: u32,
    ) -> Self {
        Self {
            sampler: Sampler::new(config),
            constraint,
            vocabulary,
            text: Utf8Stream::new(),
            stops: StopStrings::new(stops),
            generated: 0,
            max_tokens,
            last_token: None,
            close_on_budget: true,
        }
    }

    /// Whether the constraint closes its document within the budget (on unless told).
    pub fn closing_on_budget(mut self, on: bool) -> Self {
        self.close_on_budget = on;
        self
    }

    /// Whether the budget made the constraint close its document early.
    pub fn closed_on_budget(&self) -> bool {
        self.constraint.as_ref().is_some_and(OutputConstraint::closed_on_budget)
    }

    /// Why an output that the model or its constraint ended is over: `Length` where the
    /// budget closed the document early, as it would have cut it.
    fn natural_end(&self) -> FinishReason {
        match self.closed_on_budget() {
            true => FinishReason::Length,
            false => FinishReason::Stop,
        }
    }

    /// Feeds the prompt to the repeat penalty's memory.
    pub fn remember_prompt(&mut self, prompt: &[u32]) {
        for token in prompt {
            self.sampler.remember(*token);
        }
    }

    pub fn generated(&self) -> u32 {
        self.generated
    }

    /// Tokens the budget still allows.
    pub fn remaining(&self) -> u32 {
        self.max_tokens.saturating_sub(self.generated)
    }

    pub fn constraint_mut(&mut self) -> Option<&mut OutputConstraint> {
        self.constraint.as_mut()
    }

    pub fn last_token(&self) -> Option<u32> {
        self.last_token
    }

    pub fn constraint(&self) -> Option<&OutputConstraint> {
        self.constraint.as_ref()
    }

    /// Chooses the next token from `logits` and reports what it means, adding the time its
    /// phases took (sampling, constraint, detokenize) to `split`.
    pub fn step(&mut self, logits: &[f32], split: &mut StepSplit) -> Step {
        let started = Instant::now();
        let constraint_before = self.constraint_time();
        let step = self.choose(logits);
        let chosen_at = Instant::now();
        let constraint = self.constraint_time().saturating_sub(constraint_before);
        split.constraint += constraint;
        split.sampling += chosen_at.duration_since(started).saturating_sub(constraint);
        let step = match step {
            Chosen::Token(token) => self.emit(token),
            Chosen::Over(step) => step,
        };
        split.detokenize += chosen_at.elapsed();
        step
    }

    /// Time the constraint engine has spent on this sequence so far.
    fn constraint_time(&self) -> Duration {
        self.constraint.as_ref().map_or(Duration::ZERO, |c| Duration::from_nanos(c.mask_time_ns()))
    }

    /// The sampled token, committed to the constraint; or the step that ends the generation.
    fn choose(&mut self, logits: &[f32]) -> Chosen {
        if self.generated >= self.max_tokens {
            return Chosen::Over(self.finish(FinishReason::Length));
        }
        let chosen = match self.constraint.as_mut() {
            Some(constraint) => {
                // The output is cut after the budget's last token: a lexicon must be able to
                // end there.
                if self.generated + 1 == self.max_tokens {
                    constraint.next_token_is_last();
                }
                if self.close_on_budget {
                    constraint.set_tokens_left(self.max_tokens - self.generated);
                }
                let chosen = self.sampler.sample(logits, Some(&mut ConstraintAdapter(&mut *constraint)));
                match chosen {
                    // Refused for the budget: the constraint's masks are narrowed to the
                    // tokens that fit, and the token is drawn again from them.
                    Ok(token) if !constraint.fits_budget(token) => {
                        self.sampler.sample(logits, Some(&mut ConstraintAdapter(constraint)))
                    }
                    chosen => chosen,
                }
            }
            None => self.sampler.sample(logits, None),
        };
        let token = match chosen {
            Ok(token) => token,
            Err(error) => {
                // A grammar and a lexicon that together leave no token say where.
                let message = match self.constraint.as_ref().and_then(OutputConstraint::dead_end) {
                    Some(dead_end) => dead_end.to_string(),
                    None => error.to_string(),
                };
                return Chosen::Over(self.finish(FinishReason::Error(message)));
            }
        };
        if self.vocabulary.is_end_of_generation(token) {
            return Chosen::Over(self.finish(self.natural_end()));
        }
        if let Some(constraint) = self.constraint.as_mut() {
            if let Err(error) = constraint.commit(token) {
                return Chosen::Over(self.finish(FinishReason::Error(error.to_string())));
            }
        }
        Chosen::Token(token)
    }

    /// Adds the chosen `token` to the answer and its text to what is sent.
    fn emit(&mut self, token: u32) -> Step {
        self.generated += 1;
        self.last_token = Some(token);
        self.sampler.remember(token);
        let text = self.text.push(self.vocabulary.piece(token));
        let (text, stop) = self.stops.push(&text);
        if let Some(stop) = stop {
            return Step::Finished { text, reason: FinishReason::StopSequence(stop) };
        }
        // A constraint that is complete and admits nothing more ends the output here rather
        // than waiting for the model to pick an end-of-generation token.
        if let Some(constraint) = self.constraint.as_ref() {
            if constraint.is_accepting() && !constraint.can_continue() {
                let mut rest = self.text.finish();
                rest.push_str(&self.stops.finish());
                return Step::Finished { text: format!("{text}{rest}"), reason: self.natural_end() };
            }
        }
        if self.generated >= self.max_tokens {
            let mut rest = self.text.finish();
            rest = format!("{text}{}{}", rest, self.stops.finish());
            return Step::Finished { text: rest, reason: FinishReason::Length };
        }
        Step::Continue { token, text }
    }

    /// Ends the generation for `reason`, flushing held-back text.
    pub fn finish(&mut self, reason: FinishReason) -> Step {
        let mut text = self.text.finish();
        let (emit, stop) = self.stops.push(&text);
        text = emit;
        if let Some(stop) = stop {
            return Step::Finished { text, reason: FinishReason::StopSequence(stop) };
        }
        text.push_str(&self.stops.finish());
        Step::Finished { text, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_split_across_pushes_are_caught_and_never_emitted() {
        let mut stops = StopStrings::new(vec!["END".into()]);
        assert_eq!(stops.push("hello E"), ("hello ".into(), None));
        assert_eq!(stops.push("N"), (String::new(), None));
        assert_eq!(stops.push("D tail"), (String::new(), Some("END".into())));
    }

    #[test]
    fn a_false_start_of_a_stop_string_is_released() {
        let mut stops = StopStrings::new(vec!["\n\n".into()]);
        assert_eq!(stops.push("a\n"), ("a".into(), None));
        assert_eq!(stops.push("b"), ("\nb".into(), None));
        assert_eq!(stops.finish(), "");
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let mut stops = StopStrings::new(vec!["yz".into(), "x".into()]);
        assert_eq!(stops.push("abxyz"), ("ab".into(), Some("x".into())));
    }

    fn vocabulary() -> Arc<Vocabulary> {
        let mut pieces: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
        pieces.push(Vec::new()); // 26: end of generation
        Arc::new(Vocabulary::from_parts(pieces, vec![26]))
    }

    fn greedy() -> SamplingConfig {
        SamplingConfig { temperature: 0.0, ..Default::default() }
    }

    fn logits_favouring(token: usize) -> Vec<f32> {
        let mut logits = vec![0.0; 27];
        logits[token] = 10.0;
        logits
    }

    #[test]
    fn the_token_budget_ends_with_length_and_eog_ends_with_stop() {
        let mut split = StepSplit::default();
        let mut sequence = SequenceSampler::new(greedy(), None, vocabulary(), vec![], 2);
        assert_eq!(sequence.step(&logits_favouring(0), &mut split), Step::Continue { token: 0, text: "a".into() });
        assert_eq!(
            sequence.step(&logits_favouring(1), &mut split),
            Step::Finished { text: "b".into(), reason: FinishReason::Length }
        );
        let mut sequence = SequenceSampler::new(greedy(), None, vocabulary(), vec![], 10);
        assert_eq!(
            sequence.step(&logits_favouring(26), &mut split),
            Step::Finished { text: String::new(), reason: FinishReason::Stop }
        );
    }
}
