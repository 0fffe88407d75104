//! Embeddings and reranking. The embedding worker: a dedicated thread owning one embedding
//! model and its llama.cpp context, taking whole requests (many inputs each) from a bounded
//! queue and answering each on a oneshot channel. Tokenizing, the empty/over-long checks and
//! truncation happen here, so the API sends only text or token ids and gets vectors or a
//! [`CoreError`] naming the input. Reranking (`rerank.rs`) scores documents with an embedding
//! model's vectors or a chat model's likelihoods.
//!
//! How the supervisor holds an embedding model is `actors::embedding_model`; this room knows
//! nothing of the supervisor.
//!
//! Key types: [`EmbeddingService`], [`EmbedInput`], [`Embedded`], [`EmbeddingModelInfo`],
//! [`rerank::Reranker`].
//! Cost: one thread and one context per embedding model; requests run one at a time, each as
//! few forward passes as its inputs need.

use std::path::Path;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::core::ModelTotals;

pub mod rerank;
use crate::error::{CoreError, ErrorCode};
use crate::llm::embed::EmbedderParams;
use crate::llm::Model;

/// Requests waiting for the embedding thread before new ones are refused as overloaded.
pub const EMBED_QUEUE_CAPACITY: usize = 64;

/// One input of a request: text, or token ids already tokenized by the client.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// The answer to one request: one vector per input, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
    pub compute_ms: f64,
}

/// What the API may say about the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingModelInfo {
    pub name: String,
    pub dimensions: usize,
    pub max_input_tokens: usize,
    pub normalizes: bool,
}

struct Job {
    inputs: Vec<EmbedInput>,
    truncate: bool,
    reply: oneshot::Sender<Result<Embedded, CoreError>>,
}

/// A handle on the embedding thread; cloning shares the thread.
#[derive(Clone)]
pub struct EmbeddingService {
    sender: std_mpsc::SyncSender<Job>,
    info: EmbeddingModelInfo,
    totals: Arc<Mutex<ModelTotals>>,
}

impl EmbeddingService {
    /// Loads the model at `path` on a new thread and returns once it is ready (or failed).
    /// A model that is not an embedding model is refused here, by name.
    pub fn start(name: &str, path: &Path, params: EmbedderParams) -> Result<Self, CoreError> {
        let model = Model::load(path).map_err(|e| {
            CoreError::new(ErrorCode::ModelLoadFailed, format!("model {name:?} would not load: {e}"))
        })?;
        Self::start_loaded(name, Arc::new(model), params)
    }

    /// Starts the embedding thread on a model already in memory.
    pub fn start_loaded(name: &str, model: Arc<Model>, params: EmbedderParams) -> Result<Self, CoreError> {
        let (sender, jobs) = std_mpsc::sync_channel::<Job>(EMBED_QUEUE_CAPACITY);
        let (ready_sender, ready) = std_mpsc::channel::<Result<EmbeddingModelInfo, CoreError>>();
        let name = name.to_string();
        let thread_name = format!("embed {name}");
        let totals = Arc::new(Mutex::new(ModelTotals::default()));
        let thread_totals = Arc::clone(&totals);
        std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || run(&name, &model, &params, jobs, ready_sender, &thread_totals))
            .map_err(|e| CoreError::internal(format!("cannot start the embedding thread: {e}")))?;
        let info = ready
            .recv()
            .map_err(|_| CoreError::internal("the embedding thread stopped while loading"))??;
        Ok(Self { sender, info, totals })
    }

    /// Requests, input tokens and compute time since the thread started.
    pub fn totals(&self) -> ModelTotals {
        self.totals.lock().map(|t| t.clone()).unwrap_or_default()
    }

    pub fn info(&self) -> &EmbeddingModelInfo {
        &self.info
    }

    /// Embeds `inputs`. With `truncate`, an input over the model's limit is cut to it (its
    /// final separator kept); without, it is a 400 naming the input.
    pub async fn embed(
        &self,
        inputs: Vec<EmbedInput>,
        truncate: bool,
    ) -> Result<Embedded, CoreError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .try_send(Job {
                inputs,
                truncate,
                reply,
            })
            .map_err(|e| match e {
                std_mpsc::TrySendError::Full(_) => CoreError::new(
                    ErrorCode::Overloaded,
                    "the embedding queue is full; retry shortly",
                ),
                std_mpsc::TrySendError::Disconnected(_) => {
                    CoreError::internal("the embedding thread has stopped")
                }
            })?;
        answer
            .await
            .map_err(|_| CoreError::internal("the embedding thread dropped the request"))?
    }
}

fn run(
    name: &str,
    model: &Model,
    params: &EmbedderParams,
    jobs: std_mpsc::Receiver<Job>,
    ready: std_mpsc::Sender<Result<EmbeddingModelInfo, CoreError>>,
    totals: &Mutex<ModelTotals>,
) {
    let load_failed = |reason: String| CoreError::new(ErrorCode::ModelLoadFailed, reason);
    if !model.is_embedding_model() {
        let _ = ready.send(Err(CoreError::bad_request(format!(
            "model {name:?} ({}) is a chat model, not an embedding model; give -embed a sentence encoder such as all-minilm:l6-v2",
            model.architecture()
        ))));
        return;
    }
    let mut embedder = match model.new_embedder(params) {
        Ok(embedder) => embedder,
        Err(e) => {
            let _ = ready.send(Err(load_failed(format!("model {name:?}: {e}"))));
            return;
        }
    };
    let info = EmbeddingModelInfo {
        name: name.to_string(),
        dimensions: embedder.dimensions(),
        max_input_tokens: embedder.max_input_tokens(),
        normalizes: embedder.normalizes(),
    };
    if ready.send(Ok(info.clone())).is_err() {
        return;
    }
    while let Ok(job) = jobs.recv() {
        if job.reply.is_closed() {
            continue;
        }
        let started = Instant::now();
        let result = prepare(model, &info, job.inputs, job.truncate).and_then(|tokens| {
            let prompt_tokens = tokens.iter().map(Vec::len).sum();
            let vectors = embedder
                .embed(&tokens)
                .map_err(|e| CoreError::internal(format!("embedding failed: {e}")))?;
            Ok(Embedded {
                vectors,
                prompt_tokens,
                compute_ms: started.elapsed().as_secs_f64() * 1000.0,
            })
        });
        if let (Ok(embedded), Ok(mut totals)) = (&result, totals.lock()) {
            totals.requests += 1;
            totals.prompt_tokens += embedded.prompt_tokens as u64;
            totals.prompt_eval_time += started.elapsed();
        }
        let _ = job.reply.send(result);
    }
}

/// Token ids per input, checked and (when asked) truncated to the model's limit.
fn prepare(
    model: &Model,
    info: &EmbeddingModelInfo,
    inputs: Vec<EmbedInput>,
    truncate: bool,
) -> Result<Vec<Vec<u32>>, CoreError> {
    let vocabulary = model.vocabulary().len();
    inputs
        .into_iter()
        .enumerate()
        .map(|(index, input)| {
            let mut tokens = match input {
                EmbedInput::Text(text) if text.is_empty() => {
                    return Err(CoreError::bad_request(format!("input {index} is empty")).with_param("input"))
                }
                EmbedInput::Text(text) => model
                    .tokenize(&text, true, false)
                    .map_err(|e| CoreError::bad_request(format!("input {index}: {e}")).with_param("input"))?,
                EmbedInput::Tokens(tokens) => {
                    if tokens.is_empty() {
                        return Err(CoreError::bad_request(format!("input {index} has no tokens")).with_param("input"));
                    }
                    if let Some(bad) = tokens.iter().find(|&&t| t as usize >= vocabulary) {
                        return Err(CoreError::bad_request(format!(
                            "input {index}: token {bad} is outside the vocabulary of {vocabulary}"
                        ))
                        .with_param("input"));
                    }
                    tokens
                }
            };
            if tokens.len() > info.max_input_tokens {
                if !truncate {
                    return Err(CoreError::bad_request(format!(
                        "input {index} is {} tokens, over the {} this model embeds; shorten it or set truncate",
                        tokens.len(),
                        info.max_input_tokens
                    ))
                    .with_param("input"));
                }
                // Keep the closing separator an encoder was trained to see last.
                let last = tokens[tokens.len() - 1];
                tokens.truncate(info.max_input_tokens - 1);
                tokens.push(last);
            }
            Ok(tokens)
        })
        .collect()
}

/// How long a request's inputs took on the embedding thread.
pub fn compute_time(embedded: &Embedded) -> Duration {
    Duration::from_secs_f64(embedded.compute_ms / 1000.0)
}
