//! The `llamay_*` request fields, and llama-server's `cache_prompt`, read once for every
//! generation route (OpenAI, Anthropic, Ollama): [`LlamayFields`] is flattened into each route's
//! request type, so a new extension is added here once. A misspelt `llamay_*` field is refused
//! with a 400 naming it ([`LlamayFields::refuse_unknown`]); other unknown fields stay ignored, as
//! clients send fields this daemon has no use for.
//!
//! Cost: the names of a request's unknown fields are kept while it is read.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::service::constraint::{parse_formats, ConstraintSources};
use crate::service::lexicons::parse_lexicon;
use crate::core::{
    ContextRequest, LogprobMode, LogprobsRequest, PromptInput, UncheckedGenerateRequest, MAX_TOP_LOGPROBS,
};
use crate::error::CoreError;

/// Every `llamay_*` field a generation route takes.
const KNOWN: &[&str] = &[
    "llamay_schema",
    "llamay_format",
    "llamay_grammar",
    "llamay_formats",
    "llamay_lexicon",
    "llamay_context",
    "llamay_context_commit",
    "llamay_accelerate",
    "llamay_close_on_budget",
    "llamay_logprobs",
];

#[derive(Debug, Default, Deserialize)]
pub struct LlamayFields {
    pub llamay_schema: Option<Value>,
    pub llamay_format: Option<String>,
    pub llamay_grammar: Option<String>,
    /// Whether a schema's `format` constrains strings (`"enforce"` or `"ignore"`).
    pub llamay_formats: Option<String>,
    /// Words allowed or banned (see `service::lexicons`).
    pub llamay_lexicon: Option<Value>,
    /// llamay's contexts (issue 11): continue a named context, and append to it.
    pub llamay_context: Option<String>,
    #[serde(default)]
    pub llamay_context_commit: bool,
    /// Drafts verified with each sampled token; `false` decodes one token per step.
    pub llamay_accelerate: Option<bool>,
    /// Whether a constraint closes its document within the token budget; `false` lets the
    /// budget cut it where it falls.
    pub llamay_close_on_budget: Option<bool>,
    /// Which distribution log-probabilities come from: `"model"` (the default) or
    /// `"constrained"`.
    pub llamay_logprobs: Option<String>,
    /// llama-server's switch for prefix reuse (default true): `false` decodes the whole prompt.
    pub cache_prompt: Option<bool>,
    /// The names of the request's other fields, to find a misspelt `llamay_*` one.
    #[serde(flatten)]
    others: BTreeMap<String, IgnoredAny>,
}

impl LlamayFields {
    /// What the request asks its output to follow: `llamay_schema` or `llamay_format` when sent
    /// (they win over the route's own field), else what `native` reads from the route's own
    /// field (`response_format`, `format`); `llamay_grammar`, else llama.cpp's `grammar`; then
    /// `llamay_formats` and `llamay_lexicon`. A misspelt `llamay_*` field is refused first.
    pub fn constraint_sources(
        &mut self,
        grammar: Option<String>,
        native: impl FnOnce() -> Result<ConstraintSources, CoreError>,
    ) -> Result<ConstraintSources, CoreError> {
        self.refuse_unknown()?;
        let mut sources = ConstraintSources::default();
        if let Some(format) = self.llamay_format.take() {
            if format != "json" {
                return Err(CoreError::invalid(format!(
                    "llamay_format {format:?} is not offered; the one value is \"json\""
                ))
                .with_param("llamay_format"));
            }
            sources.any_json = Some("llamay_format");
        }
        if let Some(schema) = self.llamay_schema.take() {
            sources.schema = Some((schema, "llamay_schema"));
            sources.any_json = None;
        } else if sources.any_json.is_none() {
            sources = native()?;
        }
        sources.grammar = match self.llamay_grammar.take() {
            Some(text) => Some((text, "llamay_grammar")),
            None => grammar.map(|text| (text, "grammar")),
        };
        sources.formats = parse_formats(self.llamay_formats.take())?;
        sources.lexicon = parse_lexicon(self.llamay_lexicon.take())?;
        Ok(sources)
    }

    /// The log-probabilities a route's own fields ask for (`answer`: of each answer token; `top`:
    /// alternatives per position, checked against [`MAX_TOP_LOGPROBS`] under the route's name
    /// `top_field`; `prompt`: of the prompt's tokens), in the distribution `llamay_logprobs`
    /// names. `None` when nothing is asked; `llamay_logprobs` alone asks for nothing.
    pub fn logprobs(
        &self,
        answer: bool,
        top: Option<i64>,
        top_field: &str,
        prompt: bool,
    ) -> Result<Option<LogprobsRequest>, CoreError> {
        let mode = match self.llamay_logprobs.as_deref() {
            None | Some("model") => LogprobMode::Model,
            Some("constrained") => LogprobMode::Constrained,
            Some(other) => {
                return Err(CoreError::invalid(format!(
                    "llamay_logprobs {other:?} is not offered; use \"model\" (the model's own distribution) or \"constrained\" (after the constraint's mask, renormalised)"
                ))
                .with_param("llamay_logprobs"))
            }
        };
        let top = match top {
            None => 0,
            Some(n) if (0..=MAX_TOP_LOGPROBS as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(CoreError::invalid(format!("{top_field} is {n}; it must be between 0 and {MAX_TOP_LOGPROBS}"))
                    .with_param(top_field))
            }
        };
        Ok((answer || prompt).then_some(LogprobsRequest { answer, top, mode, prompt }))
    }

    /// A request for `model` with `input`, the switches every route reads alike
    /// (`llamay_accelerate`, `llamay_close_on_budget`, `cache_prompt`) and `context` (read
    /// first, with `api::fields::context_request`); the route sets what its own shape says over it.
    pub fn generate_request(
        &self,
        model: String,
        input: PromptInput,
        context: Option<ContextRequest>,
    ) -> UncheckedGenerateRequest {
        UncheckedGenerateRequest {
            context,
            accelerate: self.llamay_accelerate,
            close_on_budget: self.llamay_close_on_budget,
            cold_prompt: self.cache_prompt == Some(false),
            ..UncheckedGenerateRequest::new(model, input)
        }
    }

    /// A 400 naming the first `llamay_*` field that is not one of llamay's.
    pub fn refuse_unknown(&self) -> Result<(), CoreError> {
        match self.others.keys().find(|name| name.starts_with("llamay_")) {
            None => Ok(()),
            Some(name) => Err(CoreError::invalid(format!(
                "{name} is not a llamay field; the llamay_* fields are {}",
                KNOWN.join(", ")
            ))
            .with_param(name.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Wire {
        #[allow(dead_code)]
        model: String,
        #[serde(flatten)]
        llamay: LlamayFields,
    }

    fn read(body: Value) -> LlamayFields {
        serde_json::from_value::<Wire>(body).expect("reads").llamay
    }

    #[test]
    fn a_misspelt_llamay_field_is_named_and_other_unknown_fields_pass() {
        let fields = read(serde_json::json!({"model": "m", "llamay_grammar": "root ::= \"a\"", "user": "u", "store": true}));
        assert_eq!(fields.llamay_grammar.as_deref(), Some("root ::= \"a\""));
        assert!(fields.refuse_unknown().is_ok());
        let error = read(serde_json::json!({"model": "m", "llamay_shcema": {}})).refuse_unknown().unwrap_err();
        assert_eq!(error.param.as_deref(), Some("llamay_shcema"));
        assert!(error.message.contains("llamay_schema"), "{}", error.message);
    }
}
