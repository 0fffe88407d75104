//! Reranking: how relevant each document is to a query, by one of two scorers.
//!
//! - [`ScorerKind::Relevance`]: any chat model as a judge, the recipe Qwen3-Reranker uses. Each
//!   (query, document) pair is rendered with the model's chat template under a fixed judging
//!   instruction whose answer can only be "yes" or "no"; the score is the probability of "yes"
//!   against "no" at the first answer token (`sigmoid(logit yes - logit no)`, each side summed
//!   over its spellings). A [`RelevanceScorer`] is a thread owning its own small llama.cpp
//!   context on the chat model's weights (shared, not loaded again), started on first use.
//! - [`ScorerKind::Cosine`]: an embedding model as a bi-encoder, the cosine of the query's
//!   vector to each document's.
//!
//! A cross-encoder GGUF (llama.cpp's rank pooling) is not supported: no such model is
//! available here to test against.
//!
//! Key types: [`Reranker`], [`ScorerKind`], [`RelevanceScorer`], [`Scores`].
//! Cost: Relevance: one forward pass per ~[`SCORER_BATCH`] tokens of prompts (no sampling, no
//! KV kept between requests), a KV cache of [`SCORER_SEQUENCES`] x [`SCORER_CONTEXT`] tokens.
//! Cosine: one embedding request of 1 + documents inputs.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::embed::{EmbedInput, EmbeddingService};
use crate::error::{CoreError, ErrorCode};
use crate::llm::template::TemplateMessage;
use crate::llm::{BatchEntry, ContextParams, Model};

/// Tokens of one judged (query, document) prompt, template included; a longer document is cut.
pub const SCORER_CONTEXT: u32 = 1024;
/// Pairs judged in one forward pass at most.
pub const SCORER_SEQUENCES: u32 = 4;
/// Tokens one forward pass carries at most (all its pairs together).
pub const SCORER_BATCH: u32 = 1024;
/// Requests waiting for the scorer thread before new ones are refused as overloaded.
const SCORER_QUEUE_CAPACITY: usize = 64;

/// The judging instruction (Qwen3-Reranker's, verbatim in spirit: answer only yes or no).
const JUDGE_SYSTEM: &str = "Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".";
const JUDGE_INSTRUCT: &str =
    "Given a web search query, retrieve relevant passages that answer the query";
/// Spellings of each answer whose first token counts for it.
const YES: [&str; 3] = ["yes", "Yes", " yes"];
const NO: [&str; 3] = ["no", "No", " no"];

/// Which scorer a model gets, printed at start-up and in `/v1/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScorerKind {
    Relevance,
    Cosine,
}

impl ScorerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ScorerKind::Relevance => "relevance (chat model judges yes/no)",
            ScorerKind::Cosine => "cosine (bi-encoder embeddings)",
        }
    }
}

/// Scores for one request, one per document in order, each in [0, 1] (cosine in [-1, 1]).
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub scores: Vec<f32>,
    pub prompt_tokens: usize,
}

/// A model's way of scoring documents; cloning shares the thread behind it.
#[derive(Clone)]
pub enum Reranker {
    Relevance(RelevanceScorer),
    Cosine(EmbeddingService),
}

impl Reranker {
    pub fn kind(&self) -> ScorerKind {
        match self {
            Reranker::Relevance(_) => ScorerKind::Relevance,
            Reranker::Cosine(_) => ScorerKind::Cosine,
        }
    }

    /// How relevant each of `documents` is to `query`.
    pub async fn score(&self, query: String, documents: Vec<String>) -> Result<Scores, CoreError> {
        match self {
            Reranker::Relevance(scorer) => scorer.score(query, documents).await,
            Reranker::Cosine(service) => {
                let inputs = std::iter::once(query)
                    .chain(documents)
                    .map(EmbedInput::Text)
                    .collect();
                let mut embedded = service.embed(inputs, true).await.map_err(renumber)?;
                let query_vector = embedded.vectors.remove(0);
                let scores = embedded
                    .vectors
                    .iter()
                    .map(|v| cosine(&query_vector, v))
                    .collect();
                Ok(Scores {
                    scores,
                    prompt_tokens: embedded.prompt_tokens,
                })
            }
        }
    }
}

/// The embedding service numbers the query as input 0; the client numbers documents from 0.
fn renumber(error: CoreError) -> CoreError {
    let message = &error.message;
    let renamed = if message.starts_with("input 0 ") {
        message.replacen("input 0", "the query", 1)
    } else if let Some(rest) = message.strip_prefix("input ") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<usize>() {
            Ok(index) => format!("document {}{}", index - 1, &rest[digits.len()..]),
            Err(_) => message.clone(),
        }
    } else {
        message.clone()
    };
    CoreError::new(error.code, renamed).with_param("documents")
}

/// Cosine similarity (vectors of an encoder that normalizes are unit already).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let denominator = norm(a) * norm(b);
    if denominator > 0.0 {
        (dot / denominator) as f32
    } else {
        0.0
    }
}

struct Job {
    query: String,
    documents: Vec<String>,
    reply: oneshot::Sender<Result<Scores, CoreError>>,
}

/// A handle on a chat model's judging thread.
#[derive(Clone)]
pub struct RelevanceScorer {
    sender: std_mpsc::SyncSender<Job>,
}

impl RelevanceScorer {
    /// Starts the judging thread with its own context on `model`, with the chat model's
    /// threads, KV type and attention settings; returns once the context exists.
    pub fn start(name: &str, model: Arc<Model>, chat: &ContextParams) -> Result<Self, CoreError> {
        let params = ContextParams {
            n_ctx: SCORER_CONTEXT * SCORER_SEQUENCES,
            batch: SCORER_BATCH,
            sequences: SCORER_SEQUENCES,
            ..chat.clone()
        };
        let (sender, jobs) = std_mpsc::sync_channel::<Job>(SCORER_QUEUE_CAPACITY);
        let (ready_sender, ready) = std_mpsc::channel::<Result<(), CoreError>>();
        let owned_name = name.to_string();
        std::thread::Builder::new()
            .name(format!("rerank {name}"))
            .spawn(move || judge_loop(&owned_name, &model, &params, jobs, ready_sender))
            .map_err(|e| CoreError::internal(format!("cannot start the rerank thread: {e}")))?;
        ready
            .recv()
            .map_err(|_| CoreError::internal("the rerank thread stopped while starting"))??;
        Ok(Self { sender })
    }

    pub async fn score(&self, query: String, documents: Vec<String>) -> Result<Scores, CoreError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .try_send(Job {
                query,
                documents,
                reply,
            })
            .map_err(|e| match e {
                std_mpsc::TrySendError::Full(_) => CoreError::new(
                    ErrorCode::Overloaded,
                    "the rerank queue is full; retry shortly",
                ),
                std_mpsc::TrySendError::Disconnected(_) => {
                    CoreError::internal("the rerank thread has stopped")
                }
            })?;
        answer
            .await
            .map_err(|_| CoreError::internal("the rerank thread dropped the request"))?
    }
}

/// The first token of each spelling, without duplicates.
fn answer_tokens(model: &Model, spellings: &[&str]) -> Vec<u32> {
    let mut tokens: Vec<u32> = spellings
        .iter()
        .filter_map(|s| model.tokenize(s, false, false).ok()?.first().copied())
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens
}

fn judge_loop(
    name: &str,
    model: &Model,
    params: &ContextParams,
    jobs: std_mpsc::Receiver<Job>,
    ready: std_mpsc::Sender<Result<(), CoreError>>,
) {
    let mut context = match model.new_context(params) {
        Ok(context) => context,
        Err(e) => {
            let _ = ready.send(Err(CoreError::new(
                ErrorCode::ModelLoadFailed,
                format!("model {name}: no context for reranking: {e}"),
            )));
            return;
        }
    };
    let judge = Judge {
        model,
        yes: answer_tokens(model, &YES),
        no: answer_tokens(model, &NO),
    };
    if judge.yes.is_empty() || judge.no.is_empty() {
        let _ = ready.send(Err(CoreError::bad_request(format!(
            "model {name} cannot rerank: its vocabulary has no token for \"yes\" or \"no\""
        ))));
        return;
    }
    if ready.send(Ok(())).is_err() {
        return;
    }
    while let Ok(job) = jobs.recv() {
        if job.reply.is_closed() {
            continue;
        }
        let result = judge
            .prompts(&job.query, &job.documents)
            .and_then(|prompts| judge.score_all(&mut context, &prompts));
        let _ = job.reply.send(result);
    }
}

struct Judge<'m> {
    model: &'m Model,
    yes: Vec<u32>,
    no: Vec<u32>,
}

impl Judge<'_> {
    fn render(&self, query: &str, document: &str) -> Result<Vec<u32>, CoreError> {
        let user =
            format!("<Instruct>: {JUDGE_INSTRUCT}\n<Query>: {query}\n<Document>: {document}");
        let messages = [
            TemplateMessage::new("system", JUDGE_SYSTEM),
            TemplateMessage::new("user", user),
        ];
        self.model.tokenize_chat(&messages, None).map_err(|e| {
            CoreError::bad_request(format!("the judging prompt would not render: {e}"))
        })
    }

    /// One token prompt per document; a document too long for the judging context is cut to fit.
    fn prompts(&self, query: &str, documents: &[String]) -> Result<Vec<Vec<u32>>, CoreError> {
        let frame = self.render(query, "")?.len();
        if frame >= SCORER_CONTEXT as usize - 8 {
            return Err(CoreError::bad_request(format!(
                "the query is {frame} tokens with the judging prompt, over the {SCORER_CONTEXT} a reranked pair may take"
            ))
            .with_param("query"));
        }
        let room = SCORER_CONTEXT as usize - frame - 4;
        documents
            .iter()
            .map(|document| {
                let prompt = self.render(query, document)?;
                if prompt.len() <= SCORER_CONTEXT as usize {
                    return Ok(prompt);
                }
                let tokens = self.model.tokenize(document, false, false).map_err(|e| {
                    CoreError::bad_request(format!("a document would not tokenize: {e}"))
                        .with_param("documents")
                })?;
                let vocabulary = self.model.vocabulary();
                let cut: Vec<u8> = tokens
                    .iter()
                    .take(room)
                    .flat_map(|t| vocabulary.piece(*t).to_vec())
                    .collect();
                let prompt = self.render(query, &String::from_utf8_lossy(&cut))?;
                Ok(prompt.into_iter().take(SCORER_CONTEXT as usize).collect())
            })
            .collect()
    }

    /// Decodes prompts packed into as few passes as the batch allows; each pass starts empty.
    fn score_all(
        &self,
        context: &mut crate::llm::Context<'_>,
        prompts: &[Vec<u32>],
    ) -> Result<Scores, CoreError> {
        let mut scores = Vec::with_capacity(prompts.len());
        let mut start = 0;
        while start < prompts.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < prompts.len()
                && end - start < SCORER_SEQUENCES as usize
                && tokens + prompts[end].len() <= SCORER_BATCH as usize
            {
                tokens += prompts[end].len();
                end += 1;
            }
            let pass = &prompts[start..end];
            let mut entries = Vec::with_capacity(pass.len());
            for (index, prompt) in pass.iter().enumerate() {
                let seq = context.seq(index).ok_or_else(|| {
                    CoreError::internal("the rerank context has too few sequences")
                })?;
                context.clear(seq);
                entries.push(BatchEntry {
                    seq,
                    tokens: prompt,
                    first_pos: 0,
                    want_logits: true,
                });
            }
            let rows = context
                .decode(&entries)
                .map_err(|e| CoreError::internal(format!("reranking failed: {e}")))?;
            for row in rows {
                let row = row.ok_or_else(|| CoreError::internal("reranking gave no logits"))?;
                scores.push(sigmoid(self.yes_margin(context.logits(row))));
            }
            start = end;
        }
        Ok(Scores {
            scores,
            prompt_tokens: prompts.iter().map(Vec::len).sum(),
        })
    }

    /// log P(yes) - log P(no) at the first answer token (sigmoid of it is P(yes | yes or no)).
    fn yes_margin(&self, logits: &[f32]) -> f32 {
        let log_sum = |tokens: &[u32]| {
            let values: Vec<f64> = tokens
                .iter()
                .filter_map(|t| logits.get(*t as usize))
                .map(|v| *v as f64)
                .collect();
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            max + values.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
        };
        (log_sum(&self.yes) - log_sum(&self.no)) as f32
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_parallel_orthogonal_and_zero_vectors() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn embedding_errors_are_renamed_to_the_query_and_documents() {
        let error = renumber(CoreError::bad_request("input 0 is empty"));
        assert_eq!(error.message, "the query is empty");
        let error = renumber(CoreError::bad_request("input 3 is empty"));
        assert_eq!(error.message, "document 2 is empty");
    }
}
