//! Test doubles for route tests: a catalog of two models and a model whose "generation" is a
//! fixed script, so every route, stream and error path runs without llama.cpp.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;

use crate::actors::messages::{Generate, Generation, LoadedModel, ModelLoader};
use crate::actors::supervisor::Supervisor;
use crate::api::{AppState, RouteSettings};
use crate::contexts::ContextRegistry;
use crate::core::{
    CatalogEntry, Completion, FinishReason, ModelCatalog, ModelDescription, ModelInfo, ModelTotals,
    PromptInput, StreamEvent, Timings, ToolCall, ToolChoice, Usage, ValidGenerateRequest,
};
use crate::error::CoreError;
use crate::service::{GenerationPolicy, GenerationService};

/// The app's state over `supervisor` and the fake catalog, as route tests mount it.
pub fn app_state(supervisor: Addr<Supervisor>, policy: GenerationPolicy, settings: RouteSettings) -> AppState {
    let generation = GenerationService::new(supervisor, Arc::new(ContextRegistry::new()), policy);
    AppState::new(generation, Arc::new(FakeCatalog), settings)
}

/// What `convert` makes of `value`, read as its route reads a body (`api::body::parse_json`).
pub fn from_wire<T: serde::de::DeserializeOwned, C>(
    convert: impl FnOnce(T) -> Result<C, CoreError>,
    value: serde_json::Value,
) -> Result<C, CoreError> {
    convert(crate::api::body::parse_json(value.to_string().as_bytes())?)
}

pub const KNOWN_MODELS: [&str; 2] = ["tiny:1m", "other:2m"];

pub struct FakeCatalog;

impl ModelCatalog for FakeCatalog {
    fn list(&self) -> Result<Vec<CatalogEntry>, CoreError> {
        Ok(KNOWN_MODELS.iter().map(|name| entry(name)).collect())
    }
    fn describe(&self, name: &str) -> Result<ModelDescription, CoreError> {
        crate::core::ModelName::parse(name)?;
        if !KNOWN_MODELS.contains(&name) {
            return Err(CoreError::model_not_found(name));
        }
        Ok(ModelDescription {
            defaults: Default::default(),
            entry: entry(name),
            parameter_count: 1_000_000,
            context_length: 2048,
            template: Some("{{ messages }}".into()),
            metadata: serde_json::Map::new(),
        })
    }
}

fn entry(name: &str) -> CatalogEntry {
    CatalogEntry {
        name: name.into(),
        size_bytes: 1234,
        digest: "sha256:abcd".into(),
        modified_at: None,
        family: "llama".into(),
        parameter_size: "1M".into(),
        quantization_level: "Q8_0".into(),
        capabilities: crate::core::capabilities_of(false),
    }
}

/// What the fake model says: the words of `script`, one delta each. A prompt containing
/// `TOO LONG` is refused at submit; `SLOW` streams a word every 50 ms until cancelled;
/// `FAIL` ends in an error after one word. A constrained request answers `{"ok":true}`. A
/// forced tool choice answers as the model worker does: one call to the named (or first) tool,
/// or two when the prompt says `TWO` and parallel calls are allowed (the worker drops extra
/// calls itself, see actors::model); `CUT` ends it as the worker ends a call the token budget
/// cut off: `Length`, the call's arguments closed into an object and their text as far as it
/// got.
pub struct ScriptedModel {
    info: ModelInfo,
    in_use: Arc<AtomicUsize>,
}

pub struct ScriptedLoader {
    pub in_use: Arc<AtomicUsize>,
}

impl ScriptedLoader {
    pub fn new() -> Self {
        ScriptedLoader {
            in_use: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl ModelLoader for ScriptedLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        if !KNOWN_MODELS.contains(&name) {
            return Err(CoreError::model_not_found(name));
        }
        let info = ModelInfo {
            name: name.into(),
            architecture: "llama".into(),
            parameter_count: 1_000_000,
            quantization: "Q8_0".into(),
            context_length: 2048,
            trained_context_length: 2048,
            size_bytes: 1234,
            digest: "sha256:abcd".into(),
            parallel: 4,
        };
        Ok(Arc::new(ScriptedModel {
            info,
            in_use: self.in_use.clone(),
        }))
    }
}

fn prompt_text(input: &PromptInput) -> String {
    match input {
        PromptInput::Chat { messages, .. } => messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        PromptInput::Raw { prompt, .. } => prompt.clone(),
        PromptInput::Tokens(tokens) => format!("{tokens:?}"),
    }
}

fn forced_call(request: &ValidGenerateRequest) -> Option<ToolCall> {
    let PromptInput::Chat { tools, .. } = request.input() else {
        return None;
    };
    let name = match request.tool_choice() {
        ToolChoice::Required => tools.first()?.name.clone(),
        ToolChoice::Named(name) => name.clone(),
        ToolChoice::Auto | ToolChoice::None => return None,
    };
    Some(ToolCall {
        id: "call_0123456789ab".into(),
        name,
        arguments: serde_json::json!({"city": "Paris", "unit": "c"}),
    })
}

impl LoadedModel for ScriptedModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn sequences_in_use(&self) -> usize {
        self.in_use.load(Ordering::SeqCst)
    }

    fn totals(&self) -> ModelTotals {
        ModelTotals::default()
    }

    fn generator(&self) -> Option<&dyn Generate> {
        Some(self)
    }
}

impl Generate for ScriptedModel {
    fn submit(&self, request: ValidGenerateRequest) -> Result<Generation, CoreError> {
        let prompt = prompt_text(request.input());
        if prompt.contains("TOO LONG") {
            return Err(CoreError::prompt_too_long(5000, 2048));
        }
        if let Some(mut call) = forced_call(&request) {
            let cut = prompt.contains("CUT");
            if cut {
                call.arguments = serde_json::json!({"city": "Par"});
            }
            let calls = if prompt.contains("TWO") && request.parallel_tool_calls() {
                vec![call.clone(), call]
            } else {
                vec![call]
            };
            let (generation, sender, _cancel) = Generation::channel();
            std::thread::spawn(move || {
                let completion = Completion {
                    finish_reason: if cut { FinishReason::Length } else { FinishReason::ToolCalls },
                    tool_calls: calls,
                    cut_off_arguments: cut.then(|| "{\"city\": \"Par".to_string()),
                    ..Completion::default()
                };
                let _ = sender.blocking_send(StreamEvent::Done(completion));
            });
            return Ok(generation);
        }
        let words: Vec<String> = if request.constraint().is_some() {
            vec!["{\"ok\":".into(), "true}".into()]
        } else {
            vec!["Hello".into(), " there".into(), ", friend".into()]
        };
        let slow = prompt.contains("SLOW");
        let fail = prompt.contains("FAIL");
        let limit = request.sampling().max_tokens.unwrap_or(u32::MAX) as usize;
        let (generation, sender, cancel) = Generation::channel();
        let in_use = self.in_use.clone();
        in_use.fetch_add(1, Ordering::SeqCst);
        std::thread::spawn(move || {
            let mut sent = 0u32;
            let mut finish = FinishReason::Stop;
            let mut index = 0;
            loop {
                if cancel.is_cancelled() {
                    finish = FinishReason::Cancelled;
                    break;
                }
                if fail && sent == 1 {
                    finish = FinishReason::Error("the fake decode failed".into());
                    break;
                }
                if sent as usize >= limit {
                    finish = FinishReason::Length;
                    break;
                }
                let word = if slow {
                    " tick".to_string()
                } else if let Some(word) = words.get(index) {
                    word.clone()
                } else {
                    break;
                };
                index += 1;
                if sender
                    .blocking_send(StreamEvent::Delta { text: word })
                    .is_err()
                {
                    finish = FinishReason::Cancelled;
                    break;
                }
                sent += 1;
                if slow {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            in_use.fetch_sub(1, Ordering::SeqCst);
            let completion = Completion {
                finish_reason: finish,
                usage: Usage {
                    prompt_tokens: prompt.split_whitespace().count() as u32,
                    completion_tokens: sent,
                    ..Usage::default()
                },
                timings: Timings {
                    total: Duration::from_millis(3),
                    ..Timings::default()
                },
                ..Completion::default()
            };
            let _ = sender.blocking_send(StreamEvent::Done(completion));
        });
        Ok(generation)
    }
}
