//! Checks of the wire fields every chat shape shares, naming the field a refusal is about:
//! sampling numbers in range, bounded stop strings, and `llamay_context` with
//! `llamay_context_commit`. Used by each shape's `convert.rs`.
//!
//! Key items: [`check_range`], [`check_stops`], [`context_request`]. Costs: linear in the
//! (bounded) fields.

use crate::error::CoreError;

/// Checks a sampling number is finite and in range, naming the parameter otherwise.
pub fn check_range(
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
