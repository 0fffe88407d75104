//! The spec's keyword table, and the walk that applies it to a schema: every keyword
//! occurrence reachable from the root (through enforced keywords and `$ref`) gets a verdict.
//!
//! Locations are dotted paths from the root: `properties.a`, `$defs.line.properties.qty`,
//! `anyOf.1`; the root itself is `(root)`. A keyword inside a `$ref` target is reported at the
//! target's own location (`$defs.line...`), once however many times it is referenced.
//! Keywords beneath an ignored keyword (`contains`, `propertyNames`, ...) are not visited:
//! their schema is not enforced, so nothing in it can be refused either.
//!
//! Key types: [`Verdict`], [`Occurrence`], [`SchemaReport`]. Cost: linear in the schema; the
//! walk is a loop over a list of what is left to visit, so its stack does not grow with how
//! deep subschemas nest or how long a chain of `$ref`s is.

use std::collections::HashSet;
use std::fmt;
use std::rc::Rc;

use serde_json::Value;

use super::SchemaError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Enforced,
    Ignored,
    Refused,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Enforced => "enforced",
            Verdict::Ignored => "ignored",
            Verdict::Refused => "refused",
        })
    }
}

/// One keyword at one place in the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    pub keyword: String,
    pub location: String,
    pub verdict: Verdict,
    /// Why, in a few words (for refusals: the full reason).
    pub note: String,
}

/// What `llamay schema check` prints: every keyword with its verdict, and the first refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaReport {
    pub occurrences: Vec<Occurrence>,
    /// `Some` when the schema is refused (by a keyword, or because compiling it failed).
    pub refusal: Option<SchemaError>,
    /// Rules in the compiled grammar, when it compiled.
    pub rule_count: Option<usize>,
}

impl SchemaReport {
    pub fn is_refused(&self) -> bool {
        self.refusal.is_some()
    }

    pub fn with_verdict(&self, verdict: Verdict) -> impl Iterator<Item = &Occurrence> {
        self.occurrences.iter().filter(move |o| o.verdict == verdict)
    }
}

impl fmt::Display for SchemaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for verdict in [Verdict::Enforced, Verdict::Ignored, Verdict::Refused] {
            let listed: Vec<&Occurrence> = self.with_verdict(verdict).collect();
            if listed.is_empty() {
                continue;
            }
            writeln!(f, "{verdict} ({}):", listed.len())?;
            for occurrence in listed {
                write!(f, "  {:<24} {}", occurrence.keyword, occurrence.location)?;
                if !occurrence.note.is_empty() {
                    write!(f, "  ({})", occurrence.note)?;
                }
                writeln!(f)?;
            }
        }
        match (&self.refusal, self.rule_count) {
            (Some(refusal), _) => writeln!(f, "refused: {refusal}"),
            (None, Some(rules)) => writeln!(f, "ok: compiles to {rules} grammar rules"),
            (None, None) => Ok(()),
        }
    }
}

/// `patternProperties` is enforced exactly, although the product page's table lists it as
/// refused: a deliberate extension, said where `schema check` lists it.
const PATTERN_PROPERTIES_NOTE: &str = "keys matching a pattern take its schema (an extension of the keyword table)";

pub const REFUSAL_TEXT: &str =
    "which llamay's constraint cannot honour; send a schema without it rather than one that is silently not enforced";

/// Keywords whose value is one subschema that is enforced.
const ENFORCED_SINGLE: &[&str] = &["additionalProperties"];
/// Keywords whose value maps names to enforced subschemas.
const ENFORCED_MAP: &[&str] = &["properties", "patternProperties"];
/// Keywords whose value lists enforced subschemas.
const ENFORCED_LIST: &[&str] = &["anyOf", "oneOf", "allOf"];
const ENFORCED_VALUES: &[&str] = &[
    "type", "required", "minItems", "maxItems", "enum", "const", "minLength", "maxLength", "pattern",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
];
const IGNORED: &[(&str, &str)] = &[
    ("format", "parsed, not enforced unless formats are enforced on request"),
    ("uniqueItems", "parsed, not enforced"),
    ("prefixItems", "parsed, not enforced; `items` applies after its positions"),
    ("contains", "parsed, not enforced"),
    ("minContains", "ignored with contains"),
    ("maxContains", "ignored with contains"),
    ("minProperties", "parsed, not enforced"),
    ("maxProperties", "parsed, not enforced"),
    ("propertyNames", "parsed, not enforced"),
    ("dependentRequired", "parsed, not enforced"),
    ("title", "annotation"),
    ("description", "annotation"),
    ("default", "annotation"),
    ("examples", "annotation"),
    ("$schema", "metadata"),
    ("$id", "metadata"),
    ("$comment", "metadata"),
    ("$vocabulary", "metadata"),
    ("deprecated", "metadata"),
    ("readOnly", "metadata"),
    ("writeOnly", "metadata"),
    ("contentEncoding", "metadata"),
    ("contentMediaType", "metadata"),
    ("contentSchema", "metadata"),
    ("additionalItems", "no effect: it applies only beside a list of schemas under items, which is refused"),
    ("nullable", "OpenAPI annotation; write \"type\": [\"...\", \"null\"] to allow null"),
    ("discriminator", "OpenAPI annotation"),
];
/// Keywords the spec refuses, and assertions it does not name that would otherwise go
/// silently unenforced.
const REFUSED: &[&str] = &[
    "not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems",
    "dependentSchemas", "$dynamicRef", "$dynamicAnchor",
    "$recursiveRef", "$recursiveAnchor", "$anchor",
];

/// Walks the schema from the root; returns every occurrence in visiting order (depth first,
/// each keyword's subschemas before the next keyword).
pub fn scan(root: &Value) -> Vec<Occurrence> {
    let mut walk = Walk { root, occurrences: Vec::new(), visited: HashSet::new(), only_refusals: false };
    walk.run();
    walk.occurrences
}

/// The first refusal [`scan`] would list, as an error; the walk stops there, and records
/// nothing else on the way (compiling needs only this).
pub fn first_refusal(root: &Value) -> Option<SchemaError> {
    let mut walk = Walk { root, occurrences: Vec::new(), visited: HashSet::new(), only_refusals: true };
    walk.run();
    walk.occurrences.into_iter().next().map(|o| SchemaError { keyword: o.keyword, location: o.location, message: o.note })
}

/// What the walk has still to visit: a subschema at its location, or one keyword of one.
enum Visit<'a> {
    Schema(&'a Value, String),
    Keyword(&'a str, &'a Value, Rc<str>),
}

/// `parent.key`, with the root spelled `(root)` only when standing alone.
pub fn child_location(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

pub fn display_location(location: &str) -> String {
    if location.is_empty() {
        "(root)".to_string()
    } else {
        location.to_string()
    }
}

struct Walk<'a> {
    root: &'a Value,
    occurrences: Vec<Occurrence>,
    visited: HashSet<String>,
    /// Record refusals only, and stop at the first.
    only_refusals: bool,
}

impl<'a> Walk<'a> {
    /// Visits everything reachable from the root, keeping its own list of what is still to
    /// visit, so a `$ref` chain thousands of schemas long costs memory, not stack.
    fn run(&mut self) {
        let mut pending = vec![Visit::Schema(self.root, String::new())];
        let mut children = Vec::new();
        while let Some(visit) = pending.pop() {
            match visit {
                Visit::Schema(schema, location) => self.schema(schema, location, &mut children),
                Visit::Keyword(keyword, value, location) => self.keyword(keyword, value, &location, &mut children),
            }
            if self.only_refusals && !self.occurrences.is_empty() {
                return;
            }
            // Pushed in reverse so that the first is visited next, as a recursive walk would.
            pending.extend(children.drain(..).rev());
        }
    }

    fn push(&mut self, keyword: &str, location: &str, verdict: Verdict, note: impl Into<String>) {
        if self.only_refusals && verdict != Verdict::Refused {
            return;
        }
        self.occurrences.push(Occurrence {
            keyword: keyword.to_string(),
            location: display_location(location),
            verdict,
            note: note.into(),
        });
    }

    /// Queues the keywords of the subschema at `location`, unless it was visited before.
    fn schema(&mut self, schema: &'a Value, location: String, next: &mut Vec<Visit<'a>>) {
        let Value::Object(map) = schema else { return };
        if !self.visited.insert(location.clone()) {
            return;
        }
        let location: Rc<str> = location.into();
        next.extend(map.iter().map(|(keyword, value)| Visit::Keyword(keyword, value, location.clone())));
    }

    /// Records the verdict on `keyword` and queues the subschemas it holds.
    fn keyword(&mut self, keyword: &'a str, value: &'a Value, location: &str, next: &mut Vec<Visit<'a>>) {
        let here = location;
        if REFUSED.contains(&keyword) {
            return self.push(keyword, here, Verdict::Refused, REFUSAL_TEXT);
        }
        if let Some((_, note)) = IGNORED.iter().find(|(k, _)| *k == keyword) {
            return self.push(keyword, here, Verdict::Ignored, *note);
        }
        if keyword.starts_with("x-") {
            return self.push(keyword, here, Verdict::Ignored, "extension metadata");
        }
        match keyword {
            "items" => match value {
                Value::Array(_) => self.push(
                    keyword,
                    here,
                    Verdict::Refused,
                    "as a list of schemas (the tuple form), which llamay's constraint cannot honour; use one schema under items",
                ),
                _ => {
                    self.push(keyword, here, Verdict::Enforced, "");
                    next.push(Visit::Schema(value, child_location(location, "items")));
                }
            },
            "$ref" => self.reference(value, location, next),
            // Draft 7's `dependencies`: lists of names are `dependentRequired` (ignored),
            // schemas are `dependentSchemas` (refused).
            "dependencies" => match value {
                Value::Object(members) if members.values().all(Value::is_array) => {
                    self.push(keyword, here, Verdict::Ignored, "lists of names, as dependentRequired: parsed, not enforced")
                }
                _ => self.push(keyword, here, Verdict::Refused, REFUSAL_TEXT),
            },
            "$defs" | "definitions" => {
                self.push(keyword, here, Verdict::Enforced, "definitions, checked where a $ref uses them")
            }
            _ if ENFORCED_SINGLE.contains(&keyword) => {
                self.push(keyword, here, Verdict::Enforced, "");
                next.push(Visit::Schema(value, child_location(location, keyword)));
            }
            _ if ENFORCED_MAP.contains(&keyword) => {
                let note = if keyword == "patternProperties" { PATTERN_PROPERTIES_NOTE } else { "" };
                self.push(keyword, here, Verdict::Enforced, note);
                if let Value::Object(members) = value {
                    let holder = child_location(location, keyword);
                    next.extend(members.iter().map(|(name, subschema)| Visit::Schema(subschema, child_location(&holder, name))));
                }
            }
            _ if ENFORCED_LIST.contains(&keyword) => {
                let note = if keyword == "oneOf" { "as anyOf: exclusivity is not enforced" } else { "" };
                self.push(keyword, here, Verdict::Enforced, note);
                if let Value::Array(items) = value {
                    let holder = child_location(location, keyword);
                    next.extend(
                        items.iter().enumerate().map(|(index, subschema)| Visit::Schema(subschema, child_location(&holder, &index.to_string()))),
                    );
                }
            }
            _ if ENFORCED_VALUES.contains(&keyword) => self.push(keyword, here, Verdict::Enforced, ""),
            _ => self.push(keyword, here, Verdict::Ignored, "not a keyword llamay knows; annotations are ignored"),
        }
    }

    fn reference(&mut self, value: &'a Value, location: &str, next: &mut Vec<Visit<'a>>) {
        match resolve_reference(self.root, value) {
            Ok((target, target_location)) => {
                self.push("$ref", location, Verdict::Enforced, format!("-> {}", display_location(&target_location)));
                next.push(Visit::Schema(target, target_location));
            }
            Err(reason) => self.push("$ref", location, Verdict::Refused, reason),
        }
    }
}

/// Resolves a local `$ref` to its target and the target's location.
pub fn resolve_reference<'a>(root: &'a Value, reference: &Value) -> Result<(&'a Value, String), String> {
    let Some(text) = reference.as_str() else {
        return Err("which is not a string".into());
    };
    let Some(fragment) = text.strip_prefix('#') else {
        return Err(format!(
            "points outside this schema ({text:?}); only local references such as \"#/$defs/name\" are honoured, so inline the referenced schema"
        ));
    };
    if !fragment.is_empty() && !fragment.starts_with('/') {
        return Err(format!("names an anchor ({text:?}), which llamay does not resolve; use a JSON pointer such as \"#/$defs/name\""));
    }
    let pointer = percent_decode(fragment);
    let target = root
        .pointer(&pointer)
        .ok_or_else(|| format!("points at {text:?}, which does not exist in this schema"))?;
    let location = pointer
        .split('/')
        .skip(1)
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".");
    Ok((target, location))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(decoded) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(decoded);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}
