//! A prompt's log-probabilities (echo on `/v1/completions`): each prompt token's
//! log-probability under the model's distribution after the tokens before it, with the top
//! alternatives there. Rows decoded for the request are scored as they come (their prompt
//! chunks ask for logits at every row); rows its slot reused were scored by the request that
//! decoded them (see `actors::prefix`), and are taken from there. The first token has no
//! log-probability: nothing predicts it.
//!
//! Key type: [`PromptScores`]. Cost per scored row: two passes over its logits and a bounded
//! top-20 pass; the scores of a whole prompt are sent once, in one event.

use std::sync::Arc;

use crate::actors::prefix::PositionScore;
use crate::core::{StreamEvent, TokenLogprob, TopLogprob, MAX_TOP_LOGPROBS};
use crate::llm::sampling::log_probabilities;
use crate::llm::Vocabulary;

/// Prompt tokens a request may ask the log-probabilities of: each row keeps a summary in its
/// slot and the answer lists every alternative asked for.
pub const MAX_SCORED_PROMPT: usize = 8192;

/// What a scoring job has gathered of its prompt's log-probabilities.
pub(super) struct PromptScores {
    vocabulary: Arc<Vocabulary>,
    /// Alternatives reported per position.
    top: usize,
    /// One per prompt token so far, from the first.
    tokens: Vec<TokenLogprob>,
    sent: bool,
}

impl PromptScores {
    pub(super) fn new(top: usize, vocabulary: Arc<Vocabulary>) -> Self {
        PromptScores { vocabulary, top: top.min(MAX_TOP_LOGPROBS), tokens: Vec::new(), sent: false }
    }

    /// The prompt's tokens `..=reuse` scored from the slot's `cached` rows, which the placement
    /// made sure cover them.
    pub(super) fn start(&mut self, prompt: &[u32], cached: &[PositionScore], reuse: usize) {
        self.tokens.clear();
        if let Some(&first) = prompt.first() {
            let bytes = self.vocabulary.piece(first).to_vec();
            self.tokens.push(TokenLogprob { token: first, bytes, logprob: None, top: Vec::new() });
        }
        for score in cached.iter().take(reuse) {
            self.push(score);
        }
    }

    /// The next prompt token, scored by `score` (its row).
    pub(super) fn push(&mut self, score: &PositionScore) {
        let vocabulary = &self.vocabulary;
        let top = score
            .top
            .iter()
            .take(self.top)
            .map(|&(token, logprob)| TopLogprob { token, bytes: vocabulary.piece(token).to_vec(), logprob })
            .collect();
        self.tokens.push(TokenLogprob { token: score.next, bytes: vocabulary.piece(score.next).to_vec(), logprob: Some(score.logprob), top });
    }

    /// Rows scored so far (the next row to score is this one).
    pub(super) fn rows(&self) -> usize {
        self.tokens.len().saturating_sub(1)
    }

    /// Sends the scores once every prompt token has one; `true` when they went (or had gone).
    pub(super) fn send_when_complete(&mut self, prompt_len: usize, events: &tokio::sync::mpsc::Sender<StreamEvent>) -> bool {
        if !self.sent && self.tokens.len() >= prompt_len {
            self.sent = true;
            let tokens = std::mem::take(&mut self.tokens);
            let _ = events.blocking_send(StreamEvent::Logprobs { prompt: true, tokens });
        }
        self.sent
    }
}

/// Row `logits` summarised for the token `next` that follows it, with the top
/// [`MAX_TOP_LOGPROBS`] alternatives (what any later request may ask of this row).
pub(super) fn score_row(logits: &[f32], next: u32) -> PositionScore {
    let (logprob, top) = log_probabilities(logits, next, MAX_TOP_LOGPROBS, None);
    PositionScore { next, logprob, top }
}
