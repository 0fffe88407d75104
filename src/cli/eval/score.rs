//! `llamay eval -score`: each item's choices scored as continuations of prefix + prompt, as
//! lm-evaluation-harness scores a `loglikelihood` request.
//!
//! Tokenisation follows lm-evaluation-harness: whitespace that ends the prompt moves to the
//! front of each choice; the context is the (trimmed) prompt's tokens, and a choice's tokens
//! are those of the whole text (prompt + choice) after as many tokens as the context has. Where
//! the whole text merges the prompt's last token with the choice's first characters, the
//! context keeps its own tokens and the choice gets the whole text's tokens past that count,
//! so every choice of an item shares the context's tokens exactly (and its scored prefix). The
//! prefix's tokens (with the model's BOS) come first, then the context's, then the choice's.
//!
//! Each choice is one scoring request ([`Backend::score`]), one after another: the first
//! decodes the item's prompt and its choice, the others reuse the prompt's scored positions
//! and decode their own tokens (and the prompt's last position again). A choice's
//! log-likelihood is the sum of its tokens' log-probabilities; it `is_greedy` when each of its
//! tokens is the most likely one at its position (ties count).
//!
//! Key items: [`score_item`], [`ItemScores`], [`Accuracy`]. Cost per item: one tokenisation of
//! the prompt and of each choice, one scoring request per choice.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::backend::Backend;
use super::items::{Item, ItemInput};
use crate::cli::CliError;

/// One choice scored.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceScore {
    pub logprob_sum: f64,
    pub tokens: usize,
    pub is_greedy: bool,
}

impl ChoiceScore {
    pub fn per_token(&self) -> f64 {
        self.logprob_sum / self.tokens.max(1) as f64
    }
}

/// One item's choices scored, with what it cost.
#[derive(Debug, Clone)]
pub struct ItemScores {
    pub choices: Vec<ChoiceScore>,
    /// Tokens of every choice's scoring request, and how many of them were reused.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub elapsed: Duration,
}

/// The prompt without its trailing whitespace, and that whitespace (which each choice starts
/// with), as lm-evaluation-harness splits a context from its continuation.
fn split_trailing_whitespace(prompt: &str) -> (&str, &str) {
    let trimmed = prompt.trim_end();
    (trimmed, &prompt[trimmed.len()..])
}

/// Index of the highest value; the first among equals.
fn first_max(values: impl Iterator<Item = f64>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (index, value) in values.enumerate() {
        if best.map_or(true, |(_, high)| value > high) {
            best = Some((index, value));
        }
    }
    best.map(|(index, _)| index)
}

/// Scores every choice of `item` after `prefix` (the prefix's token ids).
pub fn score_item(backend: &Backend, prefix: &[u32], item: &Item) -> Result<ItemScores, CliError> {
    let ItemInput::Prompt(prompt) = &item.input else {
        return Err(CliError::Usage(format!(
            "item {}: -score takes prompt items",
            item.id
        )));
    };
    let started = Instant::now();
    let (context, _) = split_trailing_whitespace(prompt);
    let context_tokens = backend.tokenize(context, false)?;
    let from = prefix.len() + context_tokens.len();
    let mut scores = ItemScores {
        choices: Vec::with_capacity(item.choices.len()),
        prompt_tokens: 0,
        cached_tokens: 0,
        elapsed: Duration::ZERO,
    };
    for (index, choice) in item.choices.iter().enumerate() {
        let whole = backend.tokenize(&format!("{prompt}{choice}"), false)?;
        let continuation = whole
            .get(context_tokens.len()..)
            .filter(|tokens| !tokens.is_empty())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "item {}: choices[{index}] ({choice:?}) adds no token after the prompt's {} tokens (the prompt and the choice tokenize into {} together)",
                    item.id,
                    context_tokens.len(),
                    whole.len()
                ))
            })?;
        let mut sequence = Vec::with_capacity(from + continuation.len());
        sequence.extend_from_slice(prefix);
        sequence.extend_from_slice(&context_tokens);
        sequence.extend_from_slice(continuation);
        let scored = backend
            .score(sequence)
            .map_err(|e| CliError::Model(format!("choices[{index}]: {e}")))?;
        let mut choice_score = ChoiceScore {
            logprob_sum: 0.0,
            tokens: continuation.len(),
            is_greedy: true,
        };
        for at in from..from + continuation.len() {
            let position = scored.positions.get(at).copied().flatten().ok_or_else(|| {
                CliError::Model(format!(
                    "choices[{index}]: no log-probability for token {at} of {}",
                    scored.positions.len()
                ))
            })?;
            choice_score.logprob_sum += position.logprob;
            choice_score.is_greedy &= position.logprob >= position.best;
        }
        scores.prompt_tokens += u64::from(scored.prompt_tokens);
        scores.cached_tokens += u64::from(scored.cached_tokens);
        scores.choices.push(choice_score);
    }
    scores.elapsed = started.elapsed();
    Ok(scores)
}

/// The result line of a scored item.
pub fn score_line(item: &Item, scores: &ItemScores) -> String {
    let choices: Vec<Value> = scores
        .choices
        .iter()
        .map(|choice| {
            json!({
                "logprob_sum": choice.logprob_sum,
                "logprob_per_token": choice.per_token(),
                "tokens": choice.tokens,
                "is_greedy": choice.is_greedy,
            })
        })
        .collect();
    let argmax = first_max(scores.choices.iter().map(|c| c.logprob_sum));
    let argmax_per_token = first_max(scores.choices.iter().map(ChoiceScore::per_token));
    let mut line = json!({
        "id": item.id,
        "choices": choices,
        "argmax": argmax,
        "argmax_per_token": argmax_per_token,
    });
    if let Some(answer) = item.answer {
        line["answer"] = json!(answer);
        line["correct"] = json!(argmax == Some(answer));
        line["correct_per_token"] = json!(argmax_per_token == Some(answer));
    }
    line["prompt_tokens"] = json!(scores.prompt_tokens);
    line["cached_tokens"] = json!(scores.cached_tokens);
    line["ms"] = json!(scores.elapsed.as_millis() as u64);
    line.to_string()
}

/// Accuracy over the items of a results file that name their answer.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Accuracy {
    pub answered: usize,
    pub correct: usize,
    pub correct_per_token: usize,
}

impl Accuracy {
    /// Counts the whole results file, so a resumed run reports the accuracy of every item.
    pub fn of_file(path: &Path) -> Result<Accuracy, CliError> {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut accuracy = Accuracy::default();
        for line in text.lines() {
            let Ok(result) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(correct) = result["correct"].as_bool() {
                accuracy.answered += 1;
                accuracy.correct += usize::from(correct);
                accuracy.correct_per_token +=
                    usize::from(result["correct_per_token"] == json!(true));
            }
        }
        Ok(accuracy)
    }

    /// `accuracy 3/4 = 0.750 (by the per-token mean 2/4 = 0.500) over the 4 items with an answer`
    pub fn describe(&self) -> String {
        if self.answered == 0 {
            return "no item names its answer".into();
        }
        let share = |n: usize| n as f64 / self.answered as f64;
        format!(
            "accuracy {}/{} = {:.3} (by the per-token mean {}/{} = {:.3}) over the {} items with an answer",
            self.correct,
            self.answered,
            share(self.correct),
            self.correct_per_token,
            self.answered,
            share(self.correct_per_token),
            self.answered
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_whitespace_moves_to_the_choices() {
        assert_eq!(split_trailing_whitespace("Answer: \n"), ("Answer:", " \n"));
        assert_eq!(split_trailing_whitespace("Answer:"), ("Answer:", ""));
        assert_eq!(split_trailing_whitespace("  "), ("", "  "));
    }

    #[test]
    fn the_argmax_is_the_first_of_the_highest() {
        assert_eq!(first_max([-3.0, -1.0, -1.0, -2.0].into_iter()), Some(1));
        assert_eq!(first_max(std::iter::empty()), None);
    }

    #[test]
    fn a_line_names_argmax_and_correctness_only_with_an_answer() {
        let item = |answer| Item {
            id: json!("q"),
            input: ItemInput::Prompt("The sky is".into()),
            choices: vec![" blue".into(), " a deep green".into()],
            answer,
        };
        let scores = ItemScores {
            choices: vec![
                ChoiceScore {
                    logprob_sum: -2.0,
                    tokens: 1,
                    is_greedy: true,
                },
                ChoiceScore {
                    logprob_sum: -3.0,
                    tokens: 4,
                    is_greedy: false,
                },
            ],
            prompt_tokens: 20,
            cached_tokens: 8,
            elapsed: Duration::from_millis(5),
        };
        let line: Value = serde_json::from_str(&score_line(&item(Some(1)), &scores)).unwrap();
        assert_eq!(line["argmax"], json!(0));
        assert_eq!(line["argmax_per_token"], json!(1));
        assert_eq!(line["choices"][1]["logprob_per_token"], json!(-0.75));
        assert_eq!(
            (line["correct"].clone(), line["correct_per_token"].clone()),
            (json!(false), json!(true))
        );
        let line: Value = serde_json::from_str(&score_line(&item(None), &scores)).unwrap();
        assert!(
            line.get("correct").is_none() && line.get("answer").is_none(),
            "{line}"
        );
    }

    #[test]
    fn accuracy_counts_the_lines_with_an_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(
            &path,
            "{\"id\": 1, \"correct\": true, \"correct_per_token\": false}\n{\"id\": 2, \"argmax\": 0}\n{\"id\": 3, \"correct\": false, \"correct_per_token\": true}\n",
        )
        .unwrap();
        let accuracy = Accuracy::of_file(&path).unwrap();
        assert_eq!(
            accuracy,
            Accuracy {
                answered: 2,
                correct: 1,
                correct_per_token: 1
            }
        );
        assert!(accuracy
            .describe()
            .starts_with("accuracy 1/2 = 0.500 (by the per-token mean 1/2 = 0.500)"));
    }
}
