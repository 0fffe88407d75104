//! Structured output for every route: the request's schema, "any JSON" flag or GBNF text compiled
//! into a [`Constraint`], the spec's refusals as 400s, and the daemon-wide `-grammar-file`.
//!
//! Key items: [`ConstraintSources`] (what a shape found in its request), [`resolve_constraint`],
//! [`ConstraintCache`] (compiled grammars by source, bounded; a full cache is cleared and counted).
//! Costs: compiling a schema is milliseconds; repeats of the same schema or grammar hit the cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::core::{Constraint, ConstraintKind};
use crate::error::{CoreError, ErrorCode};
use crate::grammar::automaton::CompiledGrammar;
use crate::grammar::limits::Limits;

/// What one request asked for, each with the parameter name it came in (for messages).
#[derive(Debug, Default, Clone)]
pub struct ConstraintSources {
    pub schema: Option<(serde_json::Value, &'static str)>,
    pub any_json: Option<&'static str>,
    pub grammar: Option<(String, &'static str)>,
}

impl ConstraintSources {
    pub fn is_empty(&self) -> bool {
        self.schema.is_none() && self.any_json.is_none() && self.grammar.is_none()
    }
}

/// Compiled grammars by their source text. Bounded: when full it is cleared (and counted).
pub struct ConstraintCache {
    entries: Mutex<HashMap<String, Arc<CompiledGrammar>>>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    clears: AtomicU64,
}

/// The cache's counters, for `/v1/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct ConstraintCacheStats {
    pub entries: usize,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
    pub clears: u64,
}

impl ConstraintCache {
    pub fn new(capacity: usize) -> Self {
        ConstraintCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            clears: AtomicU64::new(0),
        }
    }

    fn get_or_compile(
        &self,
        key: String,
        compile: impl FnOnce() -> Result<CompiledGrammar, CoreError>,
    ) -> Result<Arc<CompiledGrammar>, CoreError> {
        if let Some(found) = self.entries.lock().ok().and_then(|entries| entries.get(&key).cloned()) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let compiled = Arc::new(compile()?);
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= self.capacity {
                entries.clear();
                self.clears.fetch_add(1, Ordering::Relaxed);
            }
            entries.insert(key, compiled.clone());
        }
        Ok(compiled)
    }

    pub fn stats(&self) -> ConstraintCacheStats {
        ConstraintCacheStats {
            entries: self.entries.lock().map(|e| e.len()).unwrap_or(0),
            capacity: self.capacity,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            clears: self.clears.load(Ordering::Relaxed),
        }
    }
}

/// The constraint for a request: its own if it sent one, else the daemon's `-grammar-file`.
/// A grammar together with a schema (or "any JSON") is refused.
pub fn resolve_constraint(
    sources: ConstraintSources,
    cache: &ConstraintCache,
    default_grammar: Option<&Arc<CompiledGrammar>>,
) -> Result<Option<Constraint>, CoreError> {
    let schema_param = sources.schema.as_ref().map(|(_, p)| *p).or(sources.any_json);
    if let (Some((_, grammar_param)), Some(schema_param)) = (&sources.grammar, schema_param) {
        return Err(CoreError::new(
            ErrorCode::ConstraintConflict,
            format!("{grammar_param} and {schema_param} are both set: a grammar and a JSON schema on one request are refused; send one of them"),
        )
        .with_param(*grammar_param));
    }
    let limits = Limits::default();
    if let Some((text, param)) = sources.grammar {
        let grammar = cache.get_or_compile(format!("gbnf\u{0}{text}"), || {
            crate::grammar::gbnf::compile_gbnf(text.as_bytes(), &limits)
                .map_err(|e| CoreError::new(ErrorCode::GrammarRefused, format!("{param}: {e}")).with_param(param))
        })?;
        return Ok(Some(Constraint { kind: ConstraintKind::Grammar, grammar }));
    }
    if let Some((schema, param)) = sources.schema {
        let key = format!("schema\u{0}{schema}");
        let grammar = cache.get_or_compile(key, || {
            let ir = crate::grammar::schema::compile_schema(&schema)
                .map_err(|e| CoreError::new(ErrorCode::SchemaRefused, e.to_string()).with_param(param))?;
            CompiledGrammar::new(ir, &limits)
                .map_err(|e| CoreError::new(ErrorCode::SchemaRefused, format!("{param}: {e}")).with_param(param))
        })?;
        return Ok(Some(Constraint { kind: ConstraintKind::Schema, grammar }));
    }
    if let Some(param) = sources.any_json {
        let grammar = cache.get_or_compile("json".into(), || {
            CompiledGrammar::new(crate::grammar::schema::any_json(), &limits)
                .map_err(|e| CoreError::internal(format!("{param}: the JSON grammar failed to compile: {e}")))
        })?;
        return Ok(Some(Constraint { kind: ConstraintKind::Json, grammar }));
    }
    Ok(default_grammar.map(|grammar| Constraint { kind: ConstraintKind::Grammar, grammar: grammar.clone() }))
}
