//! Reranking: how relevant each document is to a query, by one of two scorers.
//!
//! - [`ScorerKind::Relevance`]: any chat model, by query likelihood (unsupervised passage
//!   reranking, Sachan et al. 2022): each document is framed as a passage the model is asked to
//!   write a question about, and the score is how likely the model finds the query as that
//!   question (the geometric mean of its tokens' probabilities, in (0, 1]). It asks nothing a
//!   small model cannot do: on testdata/embeddings/retrieval.json SmolLM2-135M ranks the
//!   answer first for every query, where asking it to judge "yes" or "no" ranked below chance.
//!   A [`RelevanceScorer`] is a thread owning its own small llama.cpp context on the chat
//!   model's weights (shared, not loaded again), started on first use.
//! - [`ScorerKind::Cosine`]: an embedding model as a bi-encoder, the cosine of the query's
//!   vector to each document's.
//!
//! A cross-encoder GGUF (llama.cpp's rank pooling) is not supported: no such model is
//! available here to test against.
//!
//! Key types: [`Reranker`], [`ScorerKind`], [`RelevanceScorer`], [`Scores`].
//! Cost: Relevance: one forward pass per ~[`SCORER_BATCH`] tokens of prompts (no sampling, no
//! KV kept between requests), a log-softmax over the vocabulary per query token and document,
//! a KV cache of [`SCORER_SEQUENCES`] x [`SCORER_CONTEXT`] tokens.
//! Cosine: one embedding request of 1 + documents inputs.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{EmbedInput, EmbeddingService};
use crate::error::{CoreError, ErrorCode};
use crate::llm::{BatchEntry, ContextParams, Model};

/// Tokens of one scored (document, query) prompt; a longer document is cut.
pub const SCORER_CONTEXT: u32 = 1024;
/// Pairs scored in one forward pass at most.
pub const SCORER_SEQUENCES: u32 = 4;
/// Tokens one forward pass carries at most (all its pairs together).
pub const SCORER_BATCH: u32 = 1024;
/// Requests waiting for the scorer thread before new ones are refused as overloaded.
const SCORER_QUEUE_CAPACITY: usize = 64;

/// Which scorer a model gets, printed at start-up and in `/v1/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScorerKind {
    Relevance,
    Cosine,
}

impl ScorerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ScorerKind::Relevance => "relevance (chat model: query likelihood after each document)",
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

/// A handle on a chat model's scoring thread.
#[derive(Clone)]
pub struct RelevanceScorer {
    sender: std_mpsc::SyncSender<Job>,
}

impl RelevanceScorer {
    /// Starts the scoring thread with its own context on `model`, with the chat model's
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
            .spawn(move || scorer_loop(&owned_name, &model, &params, jobs, ready_sender))
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

fn scorer_loop(
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
    let scorer = QueryLikelihood { model };
    if ready.send(Ok(())).is_err() {
        return;
    }
    while let Ok(job) = jobs.recv() {
        if job.reply.is_closed() {
            continue;
        }
        let result = scorer
            .prompts(&job.query, &job.documents)
            .and_then(|prompts| scorer.score_all(&mut context, &prompts));
        let _ = job.reply.send(result);
    }
}

struct QueryLikelihood<'m> {
    model: &'m Model,
}

/// One document's scoring prompt: the passage frame then the query, and where the query starts.
struct Scored {
    tokens: Vec<u32>,
    query_start: usize,
}

impl QueryLikelihood<'_> {
    fn tokenize(&self, text: &str, add_bos: bool, what: &str) -> Result<Vec<u32>, CoreError> {
        self.model
            .tokenize(text, add_bos, false)
            .map_err(|e| CoreError::bad_request(format!("{what} would not tokenize: {e}")))
    }

    /// One prompt per document: the passage, an instruction to ask about it, then the query.
    /// A document too long for the scoring context is cut to fit.
    fn prompts(&self, query: &str, documents: &[String]) -> Result<Vec<Scored>, CoreError> {
        let query_tokens = self.tokenize(&format!(" {}", query.trim()), false, "the query")?;
        let frame = self.tokenize(&passage_prompt(""), true, "the scoring prompt")?.len();
        if query_tokens.is_empty() || frame + query_tokens.len() + 8 >= SCORER_CONTEXT as usize {
            return Err(CoreError::bad_request(format!(
                "the query is {} tokens, with the scoring prompt over the {SCORER_CONTEXT} a reranked pair may take, or empty",
                query_tokens.len()
            ))
            .with_param("query"));
        }
        let room = SCORER_CONTEXT as usize - frame - query_tokens.len() - 4;
        documents
            .iter()
            .map(|document| {
                let mut passage = self.tokenize(&passage_prompt(document), true, "a document")?;
                if passage.len() + query_tokens.len() > SCORER_CONTEXT as usize {
                    let tokens = self.tokenize(document, false, "a document")?;
                    let vocabulary = self.model.vocabulary();
                    let cut: Vec<u8> = tokens
                        .iter()
                        .take(room)
                        .flat_map(|t| vocabulary.piece(*t).to_vec())
                        .collect();
                    passage = self.tokenize(&passage_prompt(&String::from_utf8_lossy(&cut)), true, "a document")?;
                    passage.truncate(SCORER_CONTEXT as usize - query_tokens.len());
                }
                let query_start = passage.len();
                passage.extend_from_slice(&query_tokens);
                Ok(Scored { tokens: passage, query_start })
            })
            .collect::<Result<Vec<_>, CoreError>>()
            .map_err(|e| e.with_param("documents"))
    }

    /// Decodes prompts packed into as few passes as the batch allows; each pass starts empty.
    /// A document's score is the geometric mean of the probabilities of the query's tokens
    /// after it: in (0, 1], higher when the document makes the query likelier.
    fn score_all(&self, context: &mut crate::llm::Context<'_>, prompts: &[Scored]) -> Result<Scores, CoreError> {
        let mut scores = Vec::with_capacity(prompts.len());
        let mut start = 0;
        while start < prompts.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < prompts.len()
                && end - start < SCORER_SEQUENCES as usize
                && tokens + prompts[end].tokens.len() <= SCORER_BATCH as usize
            {
                tokens += prompts[end].tokens.len();
                end += 1;
            }
            let pass = &prompts[start..end];
            let mut entries = Vec::with_capacity(pass.len());
            for (index, prompt) in pass.iter().enumerate() {
                let seq = context
                    .seq(index)
                    .ok_or_else(|| CoreError::internal("the rerank context has too few sequences"))?;
                context.clear(seq);
                // The last token's logits would predict past the query: not decoded.
                entries.push(BatchEntry {
                    seq,
                    tokens: &prompt.tokens[..prompt.tokens.len() - 1],
                    first_pos: 0,
                    logits: 0,
                });
            }
            let from: Vec<usize> = pass.iter().map(|prompt| prompt.query_start - 1).collect();
            let rows = context
                .decode_scoring(&entries, &from)
                .map_err(|e| CoreError::internal(format!("reranking failed: {e}")))?;
            for (prompt, rows) in pass.iter().zip(rows) {
                let query = &prompt.tokens[prompt.query_start..];
                if rows.len() != query.len() {
                    return Err(CoreError::internal("reranking gave too few logits"));
                }
                let mut log_likelihood = 0.0f64;
                for (row, token) in rows.iter().zip(query) {
                    let logits = context
                        .logits(*row)
                        .map_err(|e| CoreError::internal(format!("reranking failed: {e}")))?;
                    log_likelihood += log_probability(logits, *token);
                }
                scores.push((log_likelihood / query.len() as f64).exp() as f32);
            }
            start = end;
        }
        Ok(Scores {
            scores,
            prompt_tokens: prompts.iter().map(|prompt| prompt.tokens.len()).sum(),
        })
    }
}

/// The frame a document is scored in (the prompt of unsupervised passage reranking, Sachan et
/// al. 2022): the query is then read as the question the passage prompts.
fn passage_prompt(document: &str) -> String {
    format!("Passage: {document}\nPlease write a question based on this passage.\nQuestion:")
}

/// log P(token) under `logits` (log-softmax at one entry).
fn log_probability(logits: &[f32], token: u32) -> f64 {
    let Some(&chosen) = logits.get(token as usize) else {
        return f64::NEG_INFINITY;
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|l| (*l as f64 - max).exp()).sum();
    chosen as f64 - max - sum.ln()
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
