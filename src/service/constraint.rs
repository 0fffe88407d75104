//! Structured output for every route: the request's schema, "any JSON" flag or GBNF text compiled
//! into a [`Constraint`], the tools it offers checked (and a forced call's grammar made), the
//! spec's refusals as 400s, and the daemon-wide `-grammar-file`.
//!
//! Resolving is two steps so that no compile runs on an HTTP worker: [`resolve_constraint`]
//! (cheap: conflicts, cache lookups) says what is left, and [`ConstraintWork::finish`] compiles
//! it, on the compile pool (`compile_pool.rs`) when anything missed the cache.
//!
//! Key items: [`ConstraintSources`] (what a shape found in its request), [`ToolSources`],
//! [`resolve_constraint`], [`ConstraintWork`], [`parse_formats`] (`llamay_formats`: whether a
//! schema's `format` is enforced), [`ConstraintCache`] (compiled grammars by the SHA-256 of
//! their source and format mode, bounded; a full cache is cleared and counted). Costs:
//! compiling a schema is milliseconds to seconds; repeats of the same schema, grammar or tool
//! list hit the cache. Sources over [`MAX_CACHED_SOURCE_BYTES`] are compiled but not kept (and
//! not read past that size to make a key), so the cache's memory stays bounded by small
//! grammars.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::lexicons::{ChosenLexicon, LexiconField, LEXICON_PARAM};
use crate::core::{Constraint, ConstraintCompileError, ConstraintKind, ConstraintSource, ToolChoice, ToolSpec};
use crate::error::{CoreError, ErrorCode};
use crate::grammar::automaton::CompiledGrammar;
use crate::grammar::limits::Limits;
use crate::grammar::schema::FormatMode;
use crate::grammar::Lexicon;

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

    /// The sources of a constraint compiled before, as a runner child gets it from its daemon.
    pub fn of(source: ConstraintSource) -> Self {
        match source {
            ConstraintSource::Gbnf { text } => ConstraintSources { grammar: Some((text, "grammar")), ..Default::default() },
            ConstraintSource::Schema { schema, enforce_formats } => ConstraintSources {
                schema: Some((schema, "schema")),
                formats: Some(if enforce_formats { FormatMode::Enforce } else { FormatMode::Ignore }),
                ..Default::default()
            },
            ConstraintSource::AnyJson => ConstraintSources { any_json: Some("format"), ..Default::default() },
        }
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

/// The tools a request offers and how it lets them be used: their schemas are checked and,
/// for a forced choice, made into the grammar of the call, on the compile pool.
#[derive(Debug, Clone)]
pub struct ToolSources {
    pub tools: Vec<ToolSpec>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

/// What a compile leaves for the next request with the same source: its grammar, or `None`
/// for tools offered without a forced call (their schemas were checked; there is no grammar).
type Compiled = Option<Arc<CompiledGrammar>>;

/// Compiled grammars by their source text. Bounded: when full it is cleared (and counted).
pub struct ConstraintCache {
    entries: Mutex<HashMap<String, Compiled>>,
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

    /// The compiled grammar kept under `key`, if any (counted as a hit or a miss).
    fn lookup(&self, key: Option<&str>) -> Option<Compiled> {
        let found = key.and_then(|key| {
            self.entries
                .lock()
                .ok()
                .and_then(|entries| entries.get(key).cloned())
        });
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn keep(&self, key: String, compiled: Compiled) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= self.capacity {
                entries.clear();
                self.clears.fetch_add(1, Ordering::Relaxed);
            }
            entries.insert(key, compiled);
        }
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

/// The cache key of a source: its SHA-256, or `None` when the source is too large to keep
/// (found out after at most [`MAX_CACHED_SOURCE_BYTES`] of it, so a huge schema costs the
/// HTTP worker nothing here).
fn cache_key(prefix: &str, body: KeyBody<'_>) -> Option<String> {
    let mut text = Bounded { bytes: prefix.as_bytes().to_vec(), limit: MAX_CACHED_SOURCE_BYTES + prefix.len() };
    match body {
        KeyBody::Text(source) => std::io::Write::write_all(&mut text, source.as_bytes()).ok()?,
        KeyBody::Json(value) => serde_json::to_writer(&mut text, value).ok()?,
        KeyBody::Tools(tools) => serde_json::to_writer(&mut text, tools).ok()?,
    }
    Some(hex::encode(Sha256::digest(&text.bytes)))
}

enum KeyBody<'a> {
    Text(&'a str),
    Json(&'a serde_json::Value),
    Tools(&'a [ToolSpec]),
}

/// A writer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(std::io::Error::other("larger than a cached source"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One source to compile, and what its grammar becomes.
enum Source {
    Own {
        kind: ConstraintKind,
        source: ConstraintSource,
        param: &'static str,
        /// The lexicon it compiles under (a forced call's grammar never has one).
        lexicon: Option<Arc<Lexicon>>,
    },
    Tools(ToolSources),
}

impl Source {
    /// The costly part: what the compile pool runs.
    fn compile(&self) -> Result<Compiled, CoreError> {
        match self {
            Source::Own { kind, source, param, lexicon } => {
                let limits = Limits::default();
                source
                    .compile(&limits, lexicon.as_ref())
                    .map(|grammar| Some(Arc::new(grammar)))
                    .map_err(|e| refusal(*kind, param, e))
            }
            Source::Tools(sources) => {
                let Some(grammar) = crate::tools::compile_tool_use(&sources.tools, &sources.choice, sources.parallel)?
                else {
                    return Ok(None);
                };
                let compiled = CompiledGrammar::new(grammar, &Limits::default())
                    .map_err(|e| CoreError::bad_request(format!("tools: the forced call's grammar: {e}")))?;
                Ok(Some(Arc::new(compiled)))
            }
        }
    }

    fn into_constraint(self, compiled: Compiled) -> Option<Constraint> {
        let grammar = compiled?;
        Some(match self {
            Source::Own { kind, source, .. } => Constraint { kind, grammar, source: Some(Arc::new(source)) },
            Source::Tools(_) => Constraint { kind: ConstraintKind::Tool, grammar, source: None },
        })
    }
}

/// A source with its cache key and, on a hit, its grammar.
struct Step {
    source: Source,
    key: Option<String>,
    found: Option<Compiled>,
}

impl Step {
    fn new(source: Source, key: Option<String>, cache: &ConstraintCache) -> Self {
        let found = cache.lookup(key.as_deref());
        Step { source, key, found }
    }

    fn finish(self, cache: &ConstraintCache) -> Result<Option<Constraint>, CoreError> {
        let compiled = match self.found {
            Some(found) => found,
            None => {
                let compiled = self.source.compile()?;
                if let Some(key) = self.key {
                    cache.keep(key, compiled.clone());
                }
                compiled
            }
        };
        Ok(self.source.into_constraint(compiled))
    }
}

/// A request's constraint: found in the cache, or compiles left to do ([`Self::needs_compile`]:
/// then on the compile pool, never an HTTP worker).
pub struct ConstraintWork {
    own: Option<Step>,
    tools: Option<Step>,
    default: Option<Constraint>,
}

impl ConstraintWork {
    /// Whether anything is left to compile (a cache miss).
    pub fn needs_compile(&self) -> bool {
        [&self.own, &self.tools].into_iter().flatten().any(|step| step.found.is_none())
    }

    /// The constraint the request runs under: a forced call's grammar, else its own, else the
    /// daemon's `-grammar-file`. Compiles what the cache did not have; the request's own
    /// constraint first, so its refusal is reported even when a forced call replaces it.
    pub fn finish(self, cache: &ConstraintCache) -> Result<Option<Constraint>, CoreError> {
        let own = match self.own {
            Some(step) => step.finish(cache)?,
            None => self.default,
        };
        let forced = match self.tools {
            Some(step) => step.finish(cache)?,
            None => None,
        };
        Ok(forced.or(own))
    }
}

/// What a request's constraint takes: its own if it sent one, else the daemon's
/// `-grammar-file`, replaced by the grammar of a forced tool call; compiled under `lexicon` when
/// one applies (see `lexicons.rs`; a forced call sets it aside). A grammar together with a
/// schema (or "any JSON") is refused here; compile refusals come from
/// [`ConstraintWork::finish`].
pub fn resolve_constraint(
    sources: ConstraintSources,
    tools: Option<ToolSources>,
    cache: &ConstraintCache,
    default_grammar: Option<&Constraint>,
    lexicon: Option<&ChosenLexicon>,
) -> Result<ConstraintWork, CoreError> {
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
    // A daemon lexicon lives as long as the cache: grammars under it are kept by its name. A
    // request's own list is not kept.
    let (lexicon_arc, lexicon_key) = match lexicon {
        None => (None, Some(String::new())),
        Some(ChosenLexicon { lexicon, daemon_name: Some(name) }) => {
            (Some(Arc::clone(lexicon)), Some(format!("lexicon\u{0}{name}\u{0}")))
        }
        Some(ChosenLexicon { lexicon, daemon_name: None }) => (Some(Arc::clone(lexicon)), None),
    };
    let own_step = |kind, source: ConstraintSource, param, key: Option<String>| {
        let key = lexicon_key.as_ref().and_then(|prefix| key.map(|key| format!("{prefix}{key}")));
        Step::new(Source::Own { kind, source, param, lexicon: lexicon_arc.clone() }, key, cache)
    };
    let own = if let Some((text, param)) = sources.grammar {
        let key = cache_key("gbnf\u{0}", KeyBody::Text(&text));
        Some(own_step(ConstraintKind::Grammar, ConstraintSource::Gbnf { text }, param, key))
    } else if let Some((schema, param)) = sources.schema {
        let formats = sources.formats.unwrap_or_default();
        // The same schema compiles to a different grammar when formats are enforced.
        let key = cache_key(&format!("schema\u{0}{formats:?}\u{0}"), KeyBody::Json(&schema));
        Some(own_step(ConstraintKind::Schema, ConstraintSource::schema(schema, formats), param, key))
    } else if let Some(param) = sources.any_json {
        let key = cache_key("json", KeyBody::Text(""));
        Some(own_step(ConstraintKind::Json, ConstraintSource::AnyJson, param, key))
    } else {
        // The daemon's grammar, compiled again under a lexicon when one applies.
        match (default_grammar.and_then(|default| default.source.as_deref()), lexicon) {
            (Some(ConstraintSource::Gbnf { text }), Some(_)) => {
                let key = cache_key("gbnf\u{0}", KeyBody::Text(text));
                Some(own_step(ConstraintKind::Grammar, ConstraintSource::Gbnf { text: text.clone() }, "grammar_file", key))
            }
            _ => None,
        }
    };
    let tools = tools.filter(|t| !t.tools.is_empty()).map(|tools| {
        let prefix = format!("tools\u{0}{}\u{0}{:?}\u{0}", tools.parallel, tools.choice);
        let key = cache_key(&prefix, KeyBody::Tools(&tools.tools));
        Step::new(Source::Tools(tools), key, cache)
    });
    Ok(ConstraintWork { own, tools, default: default_grammar.cloned() })
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

    /// Resolves and compiles inline, as the compile pool would.
    fn resolve(sources: ConstraintSources, cache: &ConstraintCache) -> Result<Option<Constraint>, CoreError> {
        resolve_constraint(sources, None, cache, None, None)?.finish(cache)
    }

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
                resolve(grammar("root ::= \"a\"".into()), &cache).unwrap();
            assert_eq!(constraint.map(|c| c.kind), Some(ConstraintKind::Grammar));
        }
        let large = format!(
            "# {}\nroot ::= \"b\"\n",
            "x".repeat(MAX_CACHED_SOURCE_BYTES)
        );
        for _ in 0..2 {
            assert!(resolve(grammar(large.clone()), &cache)
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
            resolve(schema, &cache).unwrap();
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
            resolve(both, &cache).unwrap_err().code,
            ErrorCode::ConstraintConflict
        );
        let refused = ConstraintSources {
            schema: Some((json!({"if": {"type": "string"}}), "llamay_schema")),
            ..Default::default()
        };
        let error = resolve(refused, &cache).unwrap_err();
        assert_eq!(
            (error.code, error.param.as_deref()),
            (ErrorCode::SchemaRefused, Some("llamay_schema"))
        );
        assert!(
            resolve(ConstraintSources::default(), &cache)
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
        let ignored = resolve(schema_with(uuid.clone(), None), &cache).unwrap().unwrap();
        let enforced = resolve(schema_with(uuid.clone(), Some(FormatMode::Enforce)), &cache)
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(&ignored.grammar, &enforced.grammar));
        let again = resolve(schema_with(uuid, Some(FormatMode::Enforce)), &cache).unwrap().unwrap();
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
        assert!(resolve(schema_with(both.clone(), Some(FormatMode::Ignore)), &cache).is_ok());
        let error = resolve(schema_with(both, Some(FormatMode::Enforce)), &cache).unwrap_err();
        assert_eq!(error.code, ErrorCode::SchemaRefused);
        assert!(error.message.contains("format"), "{}", error.message);
    }

    #[test]
    fn only_a_cache_miss_needs_the_compile_pool() {
        let cache = ConstraintCache::new(8);
        let schema = || ConstraintSources {
            schema: Some((json!({"type": "integer"}), "format")),
            ..Default::default()
        };
        let first = resolve_constraint(schema(), None, &cache, None, None).unwrap();
        assert!(first.needs_compile());
        first.finish(&cache).unwrap();
        let again = resolve_constraint(schema(), None, &cache, None, None).unwrap();
        assert!(!again.needs_compile());
        assert_eq!(again.finish(&cache).unwrap().map(|c| c.kind), Some(ConstraintKind::Schema));
        assert!(!resolve_constraint(ConstraintSources::default(), None, &cache, None, None).unwrap().needs_compile());
    }

    #[test]
    fn a_huge_schema_gets_no_key_and_is_compiled_uncached() {
        let huge = json!({"const": "x".repeat(4 * MAX_CACHED_SOURCE_BYTES)});
        assert!(cache_key("schema\u{0}", KeyBody::Json(&huge)).is_none());
        let cache = ConstraintCache::new(8);
        let sources = ConstraintSources { schema: Some((huge, "format")), ..Default::default() };
        let work = resolve_constraint(sources, None, &cache, None, None).unwrap();
        assert!(work.needs_compile());
        assert!(work.finish(&cache).unwrap().is_some());
        assert_eq!(cache.stats().entries, 0);
    }

    fn weather_tools(choice: ToolChoice) -> ToolSources {
        let tool = ToolSpec {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        };
        ToolSources { tools: vec![tool], choice, parallel: false }
    }

    #[test]
    fn a_forced_call_replaces_the_own_constraint_and_is_cached_with_its_tools() {
        let cache = ConstraintCache::new(8);
        let sources = || ConstraintSources { any_json: Some("format"), ..Default::default() };
        let forced = resolve_constraint(sources(), Some(weather_tools(ToolChoice::Required)), &cache, None, None)
            .unwrap()
            .finish(&cache)
            .unwrap()
            .unwrap();
        assert_eq!(forced.kind, ConstraintKind::Tool);
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        assert_eq!(crate::grammar::check_input(&forced.grammar, call.as_bytes()), crate::grammar::CheckOutcome::Match);
        let again = resolve_constraint(sources(), Some(weather_tools(ToolChoice::Required)), &cache, None, None).unwrap();
        assert!(!again.needs_compile(), "tools and choice hit the cache");
        // Offered without a forced call: checked (and cached), the request's own constraint stays.
        let auto = resolve_constraint(sources(), Some(weather_tools(ToolChoice::Auto)), &cache, None, None)
            .unwrap()
            .finish(&cache)
            .unwrap();
        assert_eq!(auto.map(|c| c.kind), Some(ConstraintKind::Json));
        assert!(!resolve_constraint(sources(), Some(weather_tools(ToolChoice::Auto)), &cache, None, None)
            .unwrap()
            .needs_compile());
        let mut bad = weather_tools(ToolChoice::Auto);
        bad.tools[0].parameters = json!({"type": "object", "properties": {"city": {"if": {}}}});
        let error = resolve_constraint(ConstraintSources::default(), Some(bad), &cache, None, None)
            .unwrap()
            .finish(&cache)
            .unwrap_err();
        assert_eq!(error.status(), 400);
        assert!(error.message.contains("get_weather"), "{}", error.message);
    }

    #[test]
    fn a_lexicon_drops_what_it_bans_and_only_daemon_lexicons_are_cached() {
        use crate::grammar::{Lexicon, LexiconKind, LexiconLimits};
        let cache = ConstraintCache::new(8);
        let lexicon = Arc::new(Lexicon::new(LexiconKind::Deny, None, &["cat"], &LexiconLimits::default()).unwrap());
        let daemon = ChosenLexicon { lexicon: Arc::clone(&lexicon), daemon_name: Some("pets".into()) };
        let pets = || grammar("root ::= \"cat\" | \"dog\"".into());
        let compiled = resolve_constraint(pets(), None, &cache, None, Some(&daemon)).and_then(|work| work.finish(&cache)).unwrap().unwrap();
        assert!(crate::grammar::check_input(&compiled.grammar, b"cat") != crate::grammar::CheckOutcome::Match);
        assert_eq!(crate::grammar::check_input(&compiled.grammar, b"dog"), crate::grammar::CheckOutcome::Match);
        resolve_constraint(pets(), None, &cache, None, Some(&daemon)).and_then(|work| work.finish(&cache)).unwrap();
        let request = ChosenLexicon { lexicon, daemon_name: None };
        resolve_constraint(pets(), None, &cache, None, Some(&request)).and_then(|work| work.finish(&cache)).unwrap();
        assert_eq!((cache.stats().entries, cache.stats().hits), (1, 1), "a request's own list is not kept");
        // The daemon's -grammar-file is compiled again under the lexicon.
        let default = Constraint::from_source(ConstraintSource::Gbnf { text: "root ::= \"cat\" | \"dog\"".into() }, &Limits::default()).unwrap();
        let under = resolve_constraint(ConstraintSources::default(), None, &cache, Some(&default), Some(&daemon)).and_then(|work| work.finish(&cache)).unwrap().unwrap();
        assert!(crate::grammar::check_input(&under.grammar, b"cat") != crate::grammar::CheckOutcome::Match);
        // Banning the only output is a 400 naming llamay_lexicon.
        let only_cat = grammar("root ::= \"cat\"".into());
        let error = resolve_constraint(only_cat, None, &cache, None, Some(&daemon)).and_then(|work| work.finish(&cache)).unwrap_err();
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
