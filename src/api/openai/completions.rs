//! `POST /v1/completions`, OpenAI's (legacy) completions shape, as lm-evaluation-harness and
//! vLLM clients use it: `prompt` a string, an array of strings, an array of token ids or an
//! array of such arrays (token ids are evaluated exactly as given, no BOS added; a string gets
//! the model's own BOS rule); `n` choices per prompt (`choices[]` ordered prompt by prompt);
//! `echo` (the prompt comes back before the answer, with its log-probabilities when `logprobs`
//! is asked; `max_tokens: 0` then only scores the prompt); `logprobs` (0-20 alternatives per
//! position) in OpenAI's shape: `tokens`, `token_logprobs` (the first prompt token's `null`),
//! `top_logprobs` (a dict per position), `text_offset` (character offsets into the choice's
//! `text`). `stop`, `temperature`, `top_p`, `seed`, `stream` (SSE, the same chunk shape),
//! `user`, `response_format` and the `llamay_*` fields work as on chat.
//!
//! Bounds: at most [`MAX_CHOICES`] choices (prompts × n) per request, and at most
//! [`MAX_LOGPROB_COLUMNS`] log-probability columns (choices × (1 + logprobs)); a prompt scored
//! with echo holds at most `MAX_SCORED_PROMPT` tokens (the model worker's bound). Each choice
//! is one generation, queued like any other.
//!
//! Key items: [`completions`] (the handler), [`CompletionRequest`], [`convert`],
//! [`CompletionStream`]. Costs: one generation per choice, run concurrently.

use std::sync::{Arc, Mutex};

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::convert::{response_format_sources, SAMPLING};
use super::handlers::render_error;
use super::stream::{failure_frame, finish_reason, usage_body};
use super::types::{ResponseFormat, StopField, StreamOptions};
use crate::api::body::read_json;
use crate::api::common::{event_stream, random_id, sse_frame, sse_response, unix_now, StreamTranslator};
use crate::api::fields::{check_stops, context_request, SamplingFields};
use crate::api::AppState;
use crate::core::{
    Completion, PromptInput, StreamEvent, TokenLogprob,
    UncheckedGenerateRequest, Usage,
};
use crate::error::CoreError;
use crate::service::constraint::ConstraintSources;

/// Choices (prompts × n) one request may ask for.
pub const MAX_CHOICES: usize = 128;
/// Log-probability columns one request may ask for: each choice's token column and its
/// alternatives (choices × (1 + logprobs)), which bound the answer's size per position.
pub const MAX_LOGPROB_COLUMNS: usize = 1024;
/// `max_tokens` when a request names none, as OpenAI's completions default it.
const DEFAULT_MAX_TOKENS: u32 = 16;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Option<Value>,
    pub suffix: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub n: Option<u32>,
    pub best_of: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: bool,
    pub stop: Option<StopField>,
    pub seed: Option<i64>,
    /// Read and ignored: an end-user id for the operator's logs, as OpenAI takes it.
    #[allow(dead_code)]
    pub user: Option<String>,
    pub response_format: Option<ResponseFormat>,
    pub top_k: Option<i32>,
    pub min_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub grammar: Option<String>,
    #[serde(flatten)]
    pub llamay: crate::api::extensions::LlamayFields,
}

/// One prompt as the request gave it, with the text echo sends back for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

/// A converted completions request: one generation per choice.
#[derive(Debug)]
pub struct Converted {
    /// The request every choice starts from; its input is the first prompt's.
    pub request: UncheckedGenerateRequest,
    pub constraint: ConstraintSources,
    pub prompts: Vec<Prompt>,
    pub n: u32,
    pub echo: bool,
    /// Alternatives per position when log-probabilities are asked for.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
}

impl Converted {
    /// The generation of choice `index` (prompt `index / n`, its `index % n`-th sample): a
    /// seeded request gives each sample of a prompt its own seed, so that `n` samples differ
    /// and the same request gives the same choices again.
    pub fn choice(&self, index: usize) -> UncheckedGenerateRequest {
        let mut request = self.request.clone();
        request.input = match &self.prompts[index / self.n as usize] {
            Prompt::Text(text) => PromptInput::Raw { prompt: text.clone(), system: None, template: false },
            Prompt::Tokens(tokens) => PromptInput::Tokens(tokens.clone()),
        };
        let sample = (index % self.n as usize) as u32;
        request.sampling.seed = request.sampling.seed.map(|seed| seed.wrapping_add(sample));
        request
    }

    pub fn choices(&self) -> usize {
        self.prompts.len() * self.n as usize
    }
}

/// The prompts of `value`: a string, strings, token ids, or arrays of token ids.
pub fn prompts(value: Option<Value>) -> Result<Vec<Prompt>, CoreError> {
    let bad = |message: String| CoreError::invalid(message).with_param("prompt");
    let ids = |items: &[Value], at: &str| -> Result<Vec<u32>, CoreError> {
        if items.is_empty() {
            return Err(bad(format!("{at} is an empty array of token ids")));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| bad(format!("{at}[{i}] is {item}, which is not a token id")))
            })
            .collect()
    };
    let text = |text: String, at: &str| {
        if text.is_empty() {
            Err(bad(format!("{at} is an empty string")))
        } else {
            Ok(Prompt::Text(text))
        }
    };
    match value {
        None | Some(Value::Null) => Err(bad("prompt is required: a string, strings, or token ids".into())),
        Some(Value::String(prompt)) => Ok(vec![text(prompt, "prompt")?]),
        Some(Value::Array(items)) if items.is_empty() => Err(bad("prompt is an empty array".into())),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => Ok(vec![Prompt::Tokens(ids(&items, "prompt")?)]),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(prompt) => text(prompt, &format!("prompt[{i}]")),
                Value::Array(tokens) => Ok(Prompt::Tokens(ids(&tokens, &format!("prompt[{i}]"))?)),
                other => Err(bad(format!("prompt[{i}] is {other}, not a string or an array of token ids"))),
            })
            .collect(),
        Some(other) => Err(bad(format!("prompt is {other}, not a string, strings or token ids"))),
    }
}

pub fn convert(mut body: CompletionRequest) -> Result<Converted, CoreError> {
    if body.model.trim().is_empty() {
        return Err(CoreError::invalid("model is required").with_param("model"));
    }
    if body.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(CoreError::invalid("suffix: fill-in-the-middle is not offered; send the whole prompt").with_param("suffix"));
    }
    let n = body.n.unwrap_or(1);
    if n == 0 {
        return Err(CoreError::invalid("n must be at least 1").with_param("n"));
    }
    if let Some(best_of) = body.best_of {
        if best_of != n {
            return Err(CoreError::invalid(format!(
                "best_of is {best_of} and n is {n}: llamay returns every choice it samples, so best_of, when sent, must equal n"
            ))
            .with_param("best_of"));
        }
    }
    let prompts = prompts(body.prompt.take())?;
    let choices = prompts.len().saturating_mul(n as usize);
    if choices > MAX_CHOICES {
        return Err(CoreError::invalid(format!(
            "{} prompts with n {n} ask for {choices} choices; at most {MAX_CHOICES} per request",
            prompts.len()
        ))
        .with_param("n"));
    }
    let logprobs = body.llamay.logprobs(body.logprobs.is_some(), body.logprobs, "logprobs", body.echo && body.logprobs.is_some())?;
    if let Some(asked) = logprobs {
        let columns = choices * (1 + asked.top);
        if columns > MAX_LOGPROB_COLUMNS {
            return Err(CoreError::invalid(format!(
                "{choices} choices with logprobs {} ask for {columns} log-probability columns; at most {MAX_LOGPROB_COLUMNS} per request (fewer prompts, a smaller n or fewer logprobs)",
                asked.top
            ))
            .with_param("logprobs"));
        }
    }
    let max_tokens = body.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 && !body.echo {
        return Err(CoreError::invalid("max_tokens is 0: that only scores the prompt, which needs echo: true").with_param("max_tokens"));
    }
    let context = context_request(body.llamay.llamay_context.take(), body.llamay.llamay_context_commit)?;
    if context.is_some() && logprobs.is_some_and(|asked| asked.prompt) {
        return Err(CoreError::invalid("echo with logprobs scores a whole prompt and does not run in a context").with_param("llamay_context"));
    }
    let CompletionRequest { temperature, top_p, min_p, repeat_penalty, top_k, seed, .. } = body;
    let mut sampling = SamplingFields { temperature, top_p, min_p, repeat_penalty, top_k, seed }.check(&SAMPLING)?;
    // max_tokens 0 is allowed here (echo only scores the prompt), so it was checked above.
    sampling.max_tokens = Some(max_tokens);
    let stop = check_stops("stop", StopField::list(body.stop))?;
    let response_format = body.response_format;
    let constraint = body.llamay.constraint_sources(body.grammar, || response_format_sources(response_format))?;
    let input = match &prompts[0] {
        Prompt::Text(text) => PromptInput::Raw { prompt: text.clone(), system: None, template: false },
        Prompt::Tokens(tokens) => PromptInput::Tokens(tokens.clone()),
    };
    // No tools: the prompt is raw text or token ids.
    let request = UncheckedGenerateRequest { sampling, stop, logprobs, ..body.llamay.generate_request(body.model, input, context) };
    Ok(Converted {
        request,
        constraint,
        prompts,
        n,
        echo: body.echo,
        logprobs: logprobs.map(|asked| asked.top),
        stream: body.stream,
        include_usage: body.stream_options.is_some_and(|o| o.include_usage),
    })
}

/// OpenAI's completions `logprobs` object for `tokens`, whose texts start at character
/// `offset` of the choice's text: `tokens`, `token_logprobs`, `top_logprobs` (a dict of
/// alternatives per position, `null` where there is no log-probability) and `text_offset`.
/// Returns it with the offset after the last token.
pub fn completion_logprobs(tokens: &[TokenLogprob], mut offset: usize) -> (Value, usize) {
    let mut texts = Vec::with_capacity(tokens.len());
    let mut logprobs = Vec::with_capacity(tokens.len());
    let mut tops = Vec::with_capacity(tokens.len());
    let mut offsets = Vec::with_capacity(tokens.len());
    for scored in tokens {
        let text = scored.text();
        offsets.push(offset);
        offset += text.chars().count();
        logprobs.push(scored.logprob.map_or(Value::Null, |l| json!(l)));
        tops.push(match scored.logprob {
            None => Value::Null,
            Some(_) => {
                let mut top = Map::new();
                for alternative in &scored.top {
                    top.entry(alternative.text()).or_insert(json!(alternative.logprob));
                }
                Value::Object(top)
            }
        });
        texts.push(text);
    }
    let object = json!({"tokens": texts, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets});
    (object, offset)
}

/// Appends `more`'s columns to a completions `logprobs` object.
fn extend_logprobs(object: &mut Value, more: Value) {
    for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        if let (Some(Value::Array(into)), Value::Array(from)) = (object.get_mut(key), more[key].clone()) {
            into.extend(from);
        }
    }
}

fn add_usage(total: &mut Usage, usage: Usage) {
    total.prompt_tokens += usage.prompt_tokens;
    total.completion_tokens += usage.completion_tokens;
    total.cached_tokens += usage.cached_tokens;
}

pub async fn completions(state: web::Data<AppState>, request: HttpRequest, payload: web::Payload) -> HttpResponse {
    answer(&state, &request, payload).await.unwrap_or_else(|error| render_error(&error))
}

async fn answer(state: &AppState, http: &HttpRequest, payload: web::Payload) -> Result<HttpResponse, CoreError> {
    let body: CompletionRequest = read_json(http, payload, state.max_body_bytes).await?;
    let converted = convert(body)?;
    let model = converted.request.model.clone();
    // Echo sends each prompt's text back: a prompt of token ids is read back through the
    // model's tokenizer.
    let mut echoed = Vec::with_capacity(converted.prompts.len());
    for prompt in converted.prompts.iter().filter(|_| converted.echo) {
        echoed.push(match prompt {
            Prompt::Text(text) => text.clone(),
            Prompt::Tokens(tokens) => state.generation.detokenize(Some(&model), tokens.clone()).await?,
        });
    }
    let mut started = Vec::with_capacity(converted.choices());
    for index in 0..converted.choices() {
        started.push(state.generation.generate(converted.choice(index), converted.constraint.clone()).await?);
    }
    let id = format!("cmpl-{}", random_id(24));
    let created = unix_now();
    let echo_of = |index: usize| echoed.get(index / converted.n as usize).cloned();
    if converted.stream {
        let usage = Arc::new(Mutex::new(Usage::default()));
        let streams = started.into_iter().enumerate().map(|(index, started)| {
            let translator = CompletionStream {
                id: id.clone(),
                created,
                model: model.clone(),
                index,
                echo: echo_of(index),
                logprobs: converted.logprobs.is_some(),
                offset: 0,
                pending: Vec::new(),
                usage: Arc::clone(&usage),
                finished: false,
            };
            Box::pin(event_stream(started, translator))
        });
        let frames = futures_util::stream::select_all(streams);
        let include_usage = converted.include_usage;
        let closing = futures_util::stream::once(async move {
            let mut frames = Vec::new();
            if include_usage {
                let total = usage.lock().map(|u| *u).unwrap_or_default();
                frames.push(sse_frame(
                    None,
                    &json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": [], "usage": usage_body(total)}),
                ));
            }
            frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
            futures_util::stream::iter(frames.into_iter().map(Ok::<Bytes, std::convert::Infallible>))
        })
        .flatten();
        return Ok(sse_response(frames.chain(closing)));
    }
    let collected = futures_util::future::join_all(started.into_iter().map(crate::service::collect)).await;
    let mut total = Usage::default();
    let mut choices = Vec::with_capacity(collected.len());
    for (index, collected) in collected.into_iter().enumerate() {
        let collected = collected?;
        add_usage(&mut total, collected.completion.usage);
        let echo = echo_of(index);
        let text = format!("{}{}", echo.as_deref().unwrap_or(""), collected.text);
        let logprobs = converted.logprobs.map(|_| {
            let (mut object, offset) = completion_logprobs(&collected.prompt_logprobs, 0);
            let (answer, _) = completion_logprobs(&collected.logprobs, offset);
            extend_logprobs(&mut object, answer);
            object
        });
        choices.push(json!({
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason(&collected.completion.finish_reason).unwrap_or("stop"),
        }));
    }
    Ok(HttpResponse::Ok().json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": "llamay",
        "choices": choices,
        "usage": usage_body(total),
    })))
}

/// One choice's SSE chunks: the echoed prompt first (with its log-probabilities, when asked,
/// once they arrive), a chunk per piece of answer text (with its tokens' log-probabilities),
/// and a last one with the finish reason. The request's closing usage chunk and `[DONE]` follow
/// every choice's stream (see [`completions`]).
pub struct CompletionStream {
    id: String,
    created: i64,
    model: String,
    index: usize,
    /// The prompt's text, until it is sent.
    echo: Option<String>,
    logprobs: bool,
    /// Characters of this choice's text sent so far (`text_offset`).
    offset: usize,
    /// Log-probabilities of answer tokens whose text has not gone out yet.
    pending: Vec<TokenLogprob>,
    usage: Arc<Mutex<Usage>>,
    finished: bool,
}

impl CompletionStream {
    fn chunk(&self, text: &str, logprobs: Value, finish_reason: Option<&str>) -> Bytes {
        sse_frame(
            None,
            &json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": "llamay",
                "choices": [{"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
            }),
        )
    }

    /// A chunk of `text` with the pending (or `scored`) tokens' log-probabilities.
    fn text_chunk(&mut self, text: &str, scored: Option<Vec<TokenLogprob>>) -> Bytes {
        let logprobs = if self.logprobs {
            let tokens = scored.unwrap_or_else(|| std::mem::take(&mut self.pending));
            let (object, offset) = completion_logprobs(&tokens, self.offset);
            self.offset = offset;
            object
        } else {
            self.offset += text.chars().count();
            Value::Null
        };
        self.chunk(text, logprobs, None)
    }
}

impl StreamTranslator for CompletionStream {
    fn start(&mut self) -> Vec<Bytes> {
        // Without log-probabilities the echo needs nothing from the model.
        if self.logprobs {
            return Vec::new();
        }
        match self.echo.take() {
            Some(echo) => vec![self.text_chunk(&echo, None)],
            None => Vec::new(),
        }
    }

    fn event(&mut self, event: StreamEvent) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        match event {
            StreamEvent::Logprobs { prompt: true, tokens } => match self.echo.take() {
                Some(echo) => vec![self.text_chunk(&echo, Some(tokens))],
                None => Vec::new(),
            },
            StreamEvent::Logprobs { prompt: false, tokens } => {
                self.pending.extend(tokens);
                Vec::new()
            }
            StreamEvent::Delta { text } if text.is_empty() => Vec::new(),
            StreamEvent::Delta { text } => vec![self.text_chunk(&text, None)],
            StreamEvent::Done(completion) => self.done(completion),
        }
    }
}

impl CompletionStream {
    fn done(&mut self, completion: Completion) -> Vec<Bytes> {
        self.finished = true;
        if let Ok(mut total) = self.usage.lock() {
            add_usage(&mut total, completion.usage);
        }
        let mut frames = Vec::new();
        if !self.pending.is_empty() {
            frames.push(self.text_chunk("", None));
        }
        match finish_reason(&completion.finish_reason) {
            Some(reason) => frames.push(self.chunk("", Value::Null, Some(reason))),
            None => frames.push(failure_frame(&completion.finish_reason)),
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::support::from_wire;
    use crate::core::TopLogprob;

    #[test]
    fn prompts_are_strings_or_token_ids_in_every_nesting_openai_takes() {
        assert_eq!(prompts(Some(json!("hi"))).unwrap(), [Prompt::Text("hi".into())]);
        assert_eq!(prompts(Some(json!([1, 2]))).unwrap(), [Prompt::Tokens(vec![1, 2])]);
        assert_eq!(
            prompts(Some(json!(["a", [3]]))).unwrap(),
            [Prompt::Text("a".into()), Prompt::Tokens(vec![3])]
        );
        for (bad, named) in [
            (json!([]), "prompt is an empty array"),
            (json!(""), "prompt is an empty string"),
            (json!([[1, -2]]), "prompt[0][1] is -2"),
            (json!([{"x": 1}]), "prompt[0] is"),
            (json!(3), "prompt is 3"),
        ] {
            let error = prompts(Some(bad)).unwrap_err();
            assert!(error.message.starts_with(named), "{}", error.message);
            assert_eq!(error.param.as_deref(), Some("prompt"));
        }
    }

    #[test]
    fn what_completions_refuse_is_named() {
        let base = json!({"model": "m", "prompt": "x"});
        let refused = |extra: Value| {
            let mut body = base.clone();
            for (key, value) in extra.as_object().unwrap() {
                body[key] = value.clone();
            }
            from_wire(convert, body).unwrap_err().param
        };
        assert_eq!(refused(json!({"suffix": "y"})).as_deref(), Some("suffix"));
        assert_eq!(refused(json!({"best_of": 3})).as_deref(), Some("best_of"));
        assert_eq!(refused(json!({"n": 0})).as_deref(), Some("n"));
        assert_eq!(refused(json!({"max_tokens": 0})).as_deref(), Some("max_tokens"));
        assert_eq!(refused(json!({"logprobs": 21})).as_deref(), Some("logprobs"));
        assert_eq!(refused(json!({"n": 129})).as_deref(), Some("n"));
        assert_eq!(refused(json!({"n": 100, "logprobs": 20})).as_deref(), Some("logprobs"));
        assert_eq!(refused(json!({"echo": true, "logprobs": 1, "llamay_context": "ctx_1"})).as_deref(), Some("llamay_context"));
        let scored = from_wire(convert, json!({"model": "m", "prompt": [[1, 2], [1, 3]], "echo": true, "logprobs": 2, "max_tokens": 0, "n": 2, "seed": 7})).unwrap();
        let asked = scored.request.logprobs.unwrap();
        assert!(asked.prompt && asked.answer);
        assert_eq!(asked.top, 2);
        assert_eq!(scored.choices(), 4);
        let third = scored.choice(2);
        assert_eq!(third.input, PromptInput::Tokens(vec![1, 3]));
        assert_eq!((scored.choice(0).sampling.seed, scored.choice(1).sampling.seed), (Some(7), Some(8)));
    }

    #[test]
    fn logprobs_follow_openai_completions_shape() {
        let token = |text: &str, logprob: Option<f32>| TokenLogprob {
            token: 0,
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: logprob
                .map(|l| vec![TopLogprob { token: 0, bytes: text.as_bytes().to_vec(), logprob: l }, TopLogprob { token: 1, bytes: b"z".to_vec(), logprob: -9.0 }])
                .unwrap_or_default(),
        };
        let (object, offset) = completion_logprobs(&[token("Hé", None), token(" you", Some(-0.5))], 0);
        assert_eq!(offset, 6);
        assert_eq!(object["tokens"], json!(["Hé", " you"]));
        assert_eq!(object["token_logprobs"], json!([null, -0.5]));
        assert_eq!(object["top_logprobs"], json!([null, {" you": -0.5, "z": -9.0}]));
        assert_eq!(object["text_offset"], json!([0, 2]));
    }
}
