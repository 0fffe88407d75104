//! Checks of the wire fields every chat shape shares, naming the field a refusal is about:
//! the sampling fields (each in its shape's range, over its shape's defaults), bounded stop
//! strings, and `llamay_context` with `llamay_context_commit`. Used by each shape's `convert.rs`.
//!
//! Key items: [`SamplingFields`] with a shape's [`SamplingRules`], [`check_stops`],
//! [`context_request`]. Costs: linear in the (bounded) fields.

use crate::core::SamplingParams;
use crate::error::CoreError;

/// The sampling fields the API shapes share, as a request sends them (`None`: not sent). A
/// shape without one of them (Anthropic has no `seed`) leaves it `None`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    /// Negative: 0 (no top-k cut).
    pub top_k: Option<i32>,
    /// Kept to its low 32 bits, llama.cpp's seed (so -1 is `u32::MAX`).
    pub seed: Option<i64>,
}

/// How one API shape names and bounds its sampling fields, and what it samples with where a
/// field is not sent. `top_p` and `min_p` are 0 to 1 on every shape.
#[derive(Debug, Clone, Copy)]
pub struct SamplingRules {
    /// What a refusal puts before the field's name (`options.` for Ollama's).
    pub prefix: &'static str,
    pub max_temperature: f64,
    pub max_repeat_penalty: f64,
    pub defaults: fn() -> SamplingParams,
}

/// OpenAI's defaults, which Anthropic's API shares: temperature and top_p 1, no repeat
/// penalty; the rest as [`SamplingParams::default`].
pub fn openai_defaults() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        repeat_penalty: 1.0,
        ..SamplingParams::default()
    }
}

impl SamplingFields {
    /// The shape's defaults with the sent fields, each range-checked under its own name.
    pub fn check(self, rules: &SamplingRules) -> Result<SamplingParams, CoreError> {
        let mut sampling = (rules.defaults)();
        let name = |field: &str| format!("{}{field}", rules.prefix);
        if let Some(t) = check_range(&name("temperature"), self.temperature, 0.0, rules.max_temperature)? {
            sampling.temperature = t;
        }
        if let Some(p) = check_range(&name("top_p"), self.top_p, 0.0, 1.0)? {
            sampling.top_p = p;
        }
        if let Some(p) = check_range(&name("min_p"), self.min_p, 0.0, 1.0)? {
            sampling.min_p = p;
        }
        if let Some(p) = check_range(&name("repeat_penalty"), self.repeat_penalty, 0.0, rules.max_repeat_penalty)? {
            sampling.repeat_penalty = p;
        }
        if let Some(k) = self.top_k {
            sampling.top_k = k.max(0);
        }
        sampling.seed = self.seed.map(|seed| (seed as u64 & u64::from(u32::MAX)) as u32);
        Ok(sampling)
    }
}

/// The text of a message's parts, as `(type, text)`, joined; any part but a text one is refused
/// with `refuse(its type)`.
pub fn joined_text(
    parts: impl IntoIterator<Item = (String, Option<String>)>,
    refuse: impl Fn(&str) -> CoreError,
) -> Result<String, CoreError> {
    let mut text = String::new();
    for (kind, piece) in parts {
        match (kind.as_str(), piece) {
            ("text", Some(piece)) => text.push_str(&piece),
            (kind, _) => return Err(refuse(kind)),
        }
    }
    Ok(text)
}

/// Checks a sampling number is finite and in range, naming the parameter otherwise.
fn check_range(
    name: &str,
    value: Option<f64>,
    low: f64,
    high: f64,
) -> Result<Option<f32>, CoreError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= low && v <= high => Ok(Some(v as f32)),
        Some(v) => Err(CoreError::invalid(format!(
            "{name} is {v}; it must be between {low} and {high}"
        ))
        .with_param(name)),
    }
}

/// Most stop strings a request may carry, and the longest one; the sampler rescans held text
/// against each, so both are bounded.
pub const MAX_STOP_SEQUENCES: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

pub fn check_stops(name: &str, stops: Vec<String>) -> Result<Vec<String>, CoreError> {
    if stops.len() > MAX_STOP_SEQUENCES {
        return Err(CoreError::invalid(format!(
            "{name} has {} strings; at most {MAX_STOP_SEQUENCES}",
            stops.len()
        ))
        .with_param(name));
    }
    if stops.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(CoreError::invalid(format!(
            "a {name} string is longer than {MAX_STOP_BYTES} bytes"
        ))
        .with_param(name));
    }
    Ok(stops.into_iter().filter(|s| !s.is_empty()).collect())
}

/// `llamay_context` / `llamay_context_commit` as every chat route reads them (issue 11).
pub fn context_request(
    id: Option<String>,
    commit: bool,
) -> Result<Option<crate::core::ContextRequest>, CoreError> {
    match id {
        Some(id) if id.trim().is_empty() => Err(CoreError::invalid(
            "llamay_context is empty; send a context id (ctx_...) or leave it out",
        )
        .with_param("llamay_context")),
        Some(id) => Ok(Some(crate::core::ContextRequest::Named { id, commit })),
        None if commit => Err(CoreError::invalid(
            "llamay_context_commit needs llamay_context: the id of the context to append to",
        )
        .with_param("llamay_context_commit")),
        None => Ok(None),
    }
}
