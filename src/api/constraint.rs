//! Structured output for every route: the request's schema, "any JSON" flag or GBNF text compiled
//! into a [`Constraint`], the spec's refusals as 400s, and the daemon-wide `-grammar-file`.
//!
//! Key items: [`ConstraintSources`] (what a shape found in its request), [`resolve_constraint`],
//! [`parse_formats`] (`llamay_formats`: whether a schema's `format` is enforced),
//! [`ConstraintCache`] (compiled grammars by the SHA-256 of their source and format mode,
//! bounded; a full cache is cleared and counted). Costs: compiling a schema is milliseconds; repeats of the same schema or
//! grammar hit the cache. Sources over [`MAX_CACHED_SOURCE_BYTES`] are compiled but not kept, so
//! the cache's memory stays bounded by small grammars.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::lexicon::{ChosenLexicon, LexiconField, LEXICON_PARAM};
use crate::core::{Constraint, ConstraintCompileError, ConstraintKind, ConstraintSource};
use crate::error::{CoreError, ErrorCode};
use crate::grammar::automaton::CompiledGrammar;
use crate::grammar::limits::Limits;
use crate::grammar::schema::FormatMode;

/// The request field that turns `format` enforcement on or off for one request.
pub const FORMATS_PARAM: &str = "llamay_formats";

/// Largest source whose compiled grammar is kept for reuse.
pub const MAX_CACHED_SOURCE_BYTES: usize = 64 * 1024;

/// What one request asked for, each with the parameter name it came in (for messages).
#[derive(Debug, Default, Clone)]
pub struct ConstraintSources {
    pub schema: Option<(serde_json::Value, &'static str)>,
    pub any_json: Option<&'static str>,
    pub grammar: Option<(String, &'static str)>,
    /// `llamay_formats` when the request sent it; otherwise the daemon's `formats` applies.
    pub formats: Option<FormatMode>,
    /// `llamay_lexicon` when the request sent it; otherwise the daemon's `-lexicon` applies.
    pub lexicon: Option<LexiconField>,
}

impl ConstraintSources {
    pub fn is_empty(&self) -> bool {
        self.schema.is_none() && self.any_json.is_none() && self.grammar.is_none()
    }
}

/// `llamay_formats`: `"enforce"` or `"ignore"`; anything else is a 400 naming the field.
pub fn parse_formats(value: Option<String>) -> Result<Option<FormatMode>, CoreError> {
    match value.as_deref() {
        None => Ok(None),
        Some("enforce") => Ok(Some(FormatMode::Enforce)),
        Some("ignore") => Ok(Some(FormatMode::Ignore)),
        Some(other) => Err(CoreError::invalid(format!(
            "{FORMATS_PARAM} is {other:?}; it must be \"enforce\" (format constrains strings) or \"ignore\" (the default: format is an annotation)"
        ))
        .with_param(FORMATS_PARAM)),
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
        source: String,
        compile: impl FnOnce() -> Result<CompiledGrammar, CoreError>,
    ) -> Result<Arc<CompiledGrammar>, CoreError> {
        if source.len() > MAX_CACHED_SOURCE_BYTES {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return compile().map(Arc::new);
        }
        let key = hex::encode(Sha256::digest(source.as_bytes()));
        if let Some(found) = self
            .entries
            .lock()
            .ok()
            .and_then(|entries| entries.get(&key).cloned())
        {
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

/// The constraint for a request: its own if it sent one, else the daemon's `-grammar-file`;
/// compiled under `lexicon` when one applies (see `api::lexicon`). A grammar together with a
/// schema (or "any JSON") is refused.
pub fn resolve_constraint(
    sources: ConstraintSources,
    cache: &ConstraintCache,
    default_grammar: Option<&Constraint>,
    lexicon: Option<&ChosenLexicon>,
) -> Result<Option<Constraint>, CoreError> {
    let schema_param = sources
        .schema
        .as_ref()
        .map(|(_, p)| *p)
        .or(sources.any_json);
    if let (Some((_, grammar_param)), Some(schema_param)) = (&sources.grammar, schema_param) {
        return Err(CoreError::new(
            ErrorCode::ConstraintConflict,
            format!("{grammar_param} and {schema_param} are both set: a grammar and a JSON schema on one request are refused; send one of them"),
        )
        .with_param(*grammar_param));
    }
    let limits = Limits::default();
    let (kind, source, param, key) = if let Some((text, param)) = sources.grammar {
        let key = format!("gbnf\u{0}{text}");
        (ConstraintKind::Grammar, ConstraintSource::Gbnf { text }, param, key)
    } else if let Some((schema, param)) = sources.schema {
        let formats = sources.formats.unwrap_or_default();
        // The same schema compiles to a different grammar when formats are enforced.
        let key = format!("schema\u{0}{formats:?}\u{0}{schema}");
        (ConstraintKind::Schema, ConstraintSource::schema(schema, formats), param, key)
    } else if let Some(param) = sources.any_json {
        (ConstraintKind::Json, ConstraintSource::AnyJson, param, "json".into())
    } else {
        // The daemon's grammar, compiled again under a lexicon when one applies.
        match (default_grammar.and_then(|default| default.source.as_deref()), lexicon) {
            (Some(ConstraintSource::Gbnf { text }), Some(_)) => {
                let key = format!("gbnf\u{0}{text}");
                (ConstraintKind::Grammar, ConstraintSource::Gbnf { text: text.clone() }, "grammar_file", key)
            }
            _ => return Ok(default_grammar.cloned()),
        }
    };
    let compile = || source.compile(&limits, lexicon.map(|chosen| &chosen.lexicon)).map_err(|e| refusal(kind, param, e));
    let grammar = match lexicon {
        None => cache.get_or_compile(key, compile)?,
        // A daemon lexicon lives as long as the cache: its grammars are kept by its name.
        Some(ChosenLexicon { daemon_name: Some(name), .. }) => {
            cache.get_or_compile(format!("{key}\u{0}lexicon\u{0}{name}"), compile)?
        }
        Some(ChosenLexicon { daemon_name: None, .. }) => Arc::new(compile()?),
    };
    Ok(Some(Constraint {
        kind,
        grammar,
        source: Some(Arc::new(source)),
    }))
}

/// The error a request gets when its constraint does not compile: a grammar's or a schema's
/// own refusal names the field it came in; "any JSON" failing is the daemon's fault.
fn refusal(kind: ConstraintKind, param: &'static str, error: ConstraintCompileError) -> CoreError {
    match (kind, error) {
        (ConstraintKind::Json, e) => CoreError::internal(format!("{param}: the JSON grammar failed to compile: {e}")),
        (_, ConstraintCompileError::Schema(e)) => CoreError::new(ErrorCode::SchemaRefused, e).with_param(param),
        (_, ConstraintCompileError::Lexicon(e)) => {
            CoreError::new(ErrorCode::LexiconRefused, format!("{LEXICON_PARAM}: {e}")).with_param(LEXICON_PARAM)
        }
        (ConstraintKind::Schema, e) => {
            CoreError::new(ErrorCode::SchemaRefused, format!("{param}: {e}")).with_param(param)
        }
        (_, e) => CoreError::new(ErrorCode::GrammarRefused, format!("{param}: {e}")).with_param(param),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grammar(text: String) -> ConstraintSources {
        ConstraintSources {
            grammar: Some((text, "grammar")),
            ..Default::default()
        }
    }

    #[test]
    fn repeats_hit_the_cache_and_large_sources_are_not_kept() {
        let cache = ConstraintCache::new(4);
        for _ in 0..2 {
            let constraint =
                resolve_constraint(grammar("root ::= \"a\"".into()), &cache, None, None).unwrap();
            assert_eq!(constraint.map(|c| c.kind), Some(ConstraintKind::Grammar));
        }
        let large = format!(
            "# {}\nroot ::= \"b\"\n",
            "x".repeat(MAX_CACHED_SOURCE_BYTES)
        );
        for _ in 0..2 {
            assert!(resolve_constraint(grammar(large.clone()), &cache, None, None)
                .unwrap()
                .is_some());
        }
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.hits, stats.misses), (1, 1, 3));
    }

    #[test]
    fn a_full_cache_is_cleared_and_counted() {
        let cache = ConstraintCache::new(2);
        for n in 0..3 {
            let schema = ConstraintSources {
                schema: Some((json!({"type": "integer", "minimum": n}), "format")),
                ..Default::default()
            };
            resolve_constraint(schema, &cache, None, None).unwrap();
        }
        assert_eq!(cache.stats().clears, 1);
        assert_eq!(cache.stats().entries, 1);
    }

    #[test]
    fn conflicts_and_refusals_carry_their_codes() {
        let cache = ConstraintCache::new(2);
        let both = ConstraintSources {
            any_json: Some("format"),
            grammar: Some(("root ::= \"a\"".into(), "grammar")),
            ..Default::default()
        };
        assert_eq!(
            resolve_constraint(both, &cache, None, None).unwrap_err().code,
            ErrorCode::ConstraintConflict
        );
        let refused = ConstraintSources {
            schema: Some((json!({"if": {"type": "string"}}), "llamay_schema")),
            ..Default::default()
        };
        let error = resolve_constraint(refused, &cache, None, None).unwrap_err();
        assert_eq!(
            (error.code, error.param.as_deref()),
            (ErrorCode::SchemaRefused, Some("llamay_schema"))
        );
        assert!(
            resolve_constraint(ConstraintSources::default(), &cache, None, None)
                .unwrap()
                .is_none()
        );
    }
    fn schema_with(schema: serde_json::Value, formats: Option<FormatMode>) -> ConstraintSources {
        ConstraintSources {
            schema: Some((schema, "llamay_schema")),
            formats,
            ..Default::default()
        }
    }

    #[test]
    fn the_format_mode_is_part_of_the_cache_key() {
        let cache = ConstraintCache::new(8);
        let uuid = json!({"type": "string", "format": "uuid"});
        let ignored = resolve_constraint(schema_with(uuid.clone(), None), &cache, None, None).unwrap().unwrap();
        let enforced = resolve_constraint(schema_with(uuid.clone(), Some(FormatMode::Enforce)), &cache, None, None)
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(&ignored.grammar, &enforced.grammar));
        let again = resolve_constraint(schema_with(uuid, Some(FormatMode::Enforce)), &cache, None, None).unwrap().unwrap();
        assert!(Arc::ptr_eq(&enforced.grammar, &again.grammar));
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.hits, stats.misses), (2, 1, 2));
        assert!(crate::grammar::check_input(&enforced.grammar, b"\"not a uuid\"") != crate::grammar::CheckOutcome::Match);
        assert_eq!(
            crate::grammar::check_input(&ignored.grammar, b"\"not a uuid\""),
            crate::grammar::CheckOutcome::Match
        );
    }

    #[test]
    fn enforcing_refuses_a_format_with_a_pattern_and_ignoring_does_not() {
        let cache = ConstraintCache::new(8);
        let both = json!({"type": "string", "format": "email", "pattern": "^a"});
        assert!(resolve_constraint(schema_with(both.clone(), Some(FormatMode::Ignore)), &cache, None, None).is_ok());
        let error = resolve_constraint(schema_with(both, Some(FormatMode::Enforce)), &cache, None, None).unwrap_err();
        assert_eq!(error.code, ErrorCode::SchemaRefused);
        assert!(error.message.contains("format"), "{}", error.message);
    }

    #[test]
    fn a_lexicon_drops_what_it_bans_and_only_daemon_lexicons_are_cached() {
        use crate::grammar::{Lexicon, LexiconKind, LexiconLimits};
        let cache = ConstraintCache::new(8);
        let lexicon = Arc::new(Lexicon::new(LexiconKind::Deny, &["cat"], &LexiconLimits::default()).unwrap());
        let daemon = ChosenLexicon { lexicon: Arc::clone(&lexicon), daemon_name: Some("pets".into()) };
        let pets = || grammar("root ::= \"cat\" | \"dog\"".into());
        let compiled = resolve_constraint(pets(), &cache, None, Some(&daemon)).unwrap().unwrap();
        assert!(crate::grammar::check_input(&compiled.grammar, b"cat") != crate::grammar::CheckOutcome::Match);
        assert_eq!(crate::grammar::check_input(&compiled.grammar, b"dog"), crate::grammar::CheckOutcome::Match);
        resolve_constraint(pets(), &cache, None, Some(&daemon)).unwrap();
        let request = ChosenLexicon { lexicon, daemon_name: None };
        resolve_constraint(pets(), &cache, None, Some(&request)).unwrap();
        assert_eq!((cache.stats().entries, cache.stats().hits), (1, 1), "a request's own list is not kept");
        // The daemon's -grammar-file is compiled again under the lexicon.
        let default = Constraint::from_source(ConstraintSource::Gbnf { text: "root ::= \"cat\" | \"dog\"".into() }, &Limits::default()).unwrap();
        let under = resolve_constraint(ConstraintSources::default(), &cache, Some(&default), Some(&daemon)).unwrap().unwrap();
        assert!(crate::grammar::check_input(&under.grammar, b"cat") != crate::grammar::CheckOutcome::Match);
        // Banning the only output is a 400 naming llamay_lexicon.
        let only_cat = grammar("root ::= \"cat\"".into());
        let error = resolve_constraint(only_cat, &cache, None, Some(&daemon)).unwrap_err();
        assert_eq!((error.code, error.param.as_deref()), (ErrorCode::LexiconRefused, Some(LEXICON_PARAM)));
    }

    #[test]
    fn llamay_formats_takes_enforce_or_ignore() {
        assert_eq!(parse_formats(None).unwrap(), None);
        assert_eq!(parse_formats(Some("enforce".into())).unwrap(), Some(FormatMode::Enforce));
        assert_eq!(parse_formats(Some("ignore".into())).unwrap(), Some(FormatMode::Ignore));
        let error = parse_formats(Some("strict".into())).unwrap_err();
        assert_eq!(error.param.as_deref(), Some(FORMATS_PARAM));
    }
}
