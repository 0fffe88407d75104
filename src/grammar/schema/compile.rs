//! From schema to rules: `$ref`/`allOf` expansion, `anyOf`/`oneOf` distribution, merging the
//! keywords of a conjunction, and lowering the merged form per JSON type.
//!
//! A schema position is compiled as a conjunction of [`Part`]s (subschemas that must all
//! hold). `$ref` and `allOf` add parts; an `anyOf` splits the conjunction into one conjunction
//! per alternative (so sibling keywords are merged into each). A conjunction with no split left
//! is merged keyword by keyword ([`super::merge`]) and lowered. Conjunctions are memoised by the
//! set of parts they contain, which is what makes recursive `$ref`s finite: the second visit
//! finds the rule the first one declared.
//!
//! Key type: [`Compiler`]. Cost: one rule set per distinct conjunction, and one per distinct
//! number spec, pattern with length bounds, and key automaton, however often a schema repeats
//! them; alternatives capped at [`MAX_ALTERNATIVES`], rules at [`MAX_SCHEMA_RULES`].

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde_json::Value;

use super::budget::{too_deep, too_large, MAX_SCHEMA_DEPTH, MAX_SCHEMA_SYMBOLS};
use super::formats::{format_pattern, FormatMode};
use super::keys::{KeyAutomaton, KeyPattern, ObjectPatterns};
use super::json::{byte, canonical_json_string, RuleSink};
use super::keywords::{child_location, display_location, resolve_reference};
use super::merge::{Additional, Merged, ObjectPart, TypeSet};
pub use super::part::Part;
use super::numbers::{number_rule, NumberSpec};
use super::regex::{pattern_rule, LengthBounds, PatternRefusal};
use super::union::{ObjectShape, ObjectUnions};
use super::SchemaError;
use crate::ir::{literal_symbols, RuleId, Symbol};

pub const MAX_ALTERNATIVES: usize = 256;
pub const MAX_PROPERTIES: usize = 64;
/// Objects with at most this many properties accept them in any order (one rule per subset
/// of properties written so far); larger ones take them in declared order.
pub const ANY_ORDER_MAX_PROPERTIES: usize = 6;
/// Largest count a length or item bound is expanded to; larger maxima are clamped (which only
/// rejects more) and larger minima refused.
pub const MAX_EXPANDED_COUNT: u64 = 4096;
pub const MAX_SCHEMA_RULES: usize = 100_000;
/// `$ref`s followed while expanding one position (guards against reference chains).
const MAX_REFERENCES_PER_POSITION: usize = 256;

/// Keywords that neither constrain nor need merging: a part made only of these (a bare
/// `$ref`, an `allOf` holder) is left out of the conjunction's identity.
const TRANSPARENT: &[&str] = &[
    "$ref", "allOf", "$defs", "definitions", "$schema", "$id", "$comment", "title", "description",
    "default", "examples", "deprecated", "readOnly", "writeOnly",
];

pub(crate) struct Expansion<'a> {
    pub flat: Vec<Part<'a>>,
    /// The first `anyOf`/`oneOf` still to split: holder, keyword bit, alternatives.
    pub split: Option<(Part<'a>, u8, &'a [Value])>,
    pub alternatives_product: usize,
    /// Location of an `allOf` (or `$ref` with siblings) that contributed parts.
    pub conjunction_origin: Option<Rc<str>>,
    pub unsatisfiable: bool,
}

pub(crate) struct Compiler<'a> {
    pub root: &'a Value,
    /// Whether `format` constrains strings.
    pub formats: FormatMode,
    pub sink: RuleSink,
    memo: HashMap<Vec<String>, Option<RuleId>>,
    /// Lowered numbers and patterns by what they constrain: real schemas repeat the same
    /// bounds and patterns on many properties, and each copy would otherwise cost its own
    /// digit automaton or pattern DFA (and its rules).
    numbers: HashMap<NumberSpec, Option<RuleId>>,
    patterns: HashMap<(String, u64, Option<u64>), Option<RuleId>>,
    /// Key automata by declared names and patterns, and their lowered rules by the value each
    /// matched set takes: objects of one shape (`inputs`, `outputs`... under one pattern) are
    /// read by one automaton, built once.
    key_automata: HashMap<(Vec<String>, Vec<String>), Rc<KeyAutomaton>>,
    keyed_pairs: HashMap<(Vec<String>, Vec<String>, Vec<(u64, Option<RuleId>)>), RuleId>,
    /// Closed objects lowered so far, so that a choice between them reads as one object.
    unions: ObjectUnions,
    /// Conjunctions being compiled, one inside the other (at most [`MAX_SCHEMA_DEPTH`]).
    depth: usize,
}

impl<'a> Compiler<'a> {
    pub fn new(root: &'a Value) -> Self {
        Compiler {
            root,
            formats: FormatMode::Ignore,
            sink: RuleSink::new(),
            memo: HashMap::new(),
            numbers: HashMap::new(),
            patterns: HashMap::new(),
            key_automata: HashMap::new(),
            keyed_pairs: HashMap::new(),
            unions: ObjectUnions::default(),
            depth: 0,
        }
    }

    /// Expands `$ref` and `allOf`, and finds the first `anyOf`/`oneOf` to split.
    /// `consumed` lists the `anyOf`/`oneOf` holders already split on the way here (location,
    /// keyword bit): a holder reached again through `$ref` or `allOf` stays split.
    #[inline(never)]
    pub fn expand(&self, parts: &[Part<'a>], consumed: &[(Rc<str>, u8)]) -> Result<Expansion<'a>, SchemaError> {
        let mut queue: Vec<Part<'a>> = parts.iter().rev().cloned().collect();
        let mut seen = HashSet::new();
        let mut expansion = Expansion {
            flat: Vec::new(),
            split: None,
            alternatives_product: 1,
            conjunction_origin: None,
            unsatisfiable: false,
        };
        let mut references = 0;
        while let Some(mut part) = queue.pop() {
            for (location, bit) in consumed {
                if *location == part.location {
                    part.consumed |= bit;
                }
            }
            if !seen.insert(part.key()) {
                continue;
            }
            let map = match part.schema {
                Value::Bool(true) => continue,
                Value::Bool(false) => {
                    expansion.unsatisfiable = true;
                    continue;
                }
                Value::Object(map) => map,
                _ => {
                    return Err(SchemaError::new(
                        "schema",
                        &part.location,
                        "which is neither an object nor a boolean, so it is not a schema",
                    ))
                }
            };
            if let Some(reference) = map.get("$ref") {
                references += 1;
                if references > MAX_REFERENCES_PER_POSITION {
                    return Err(SchemaError::new(
                        "$ref",
                        &part.location,
                        "which, with the references around it, follows more than 256 references for one value",
                    ));
                }
                let (target, location) = resolve_reference(self.root, reference)
                    .map_err(|reason| SchemaError::new("$ref", &part.location, reason))?;
                if map.keys().any(|k| !TRANSPARENT.contains(&k.as_str())) {
                    expansion.conjunction_origin.get_or_insert_with(|| part.location.clone());
                }
                queue.push(Part::new(target, location));
            }
            if let Some(list) = map.get("allOf") {
                let Value::Array(list) = list else {
                    return Err(SchemaError::new("allOf", &part.location, "which is not a list of schemas"));
                };
                let here: Rc<str> = child_location(&part.location, "allOf").into();
                expansion.conjunction_origin.get_or_insert_with(|| part.location.clone());
                for (index, subschema) in list.iter().enumerate().rev() {
                    queue.push(Part::new(subschema, child_location(&here, &index.to_string())));
                }
            }
            for (keyword, bit) in [("anyOf", 1u8), ("oneOf", 2u8)] {
                if part.consumed & bit != 0 {
                    continue;
                }
                if let Some(list) = map.get(keyword) {
                    let Value::Array(list) = list else {
                        return Err(SchemaError::new(keyword, &part.location, "which is not a list of schemas"));
                    };
                    expansion.alternatives_product = expansion.alternatives_product.saturating_mul(list.len().max(1));
                    if expansion.split.is_none() {
                        expansion.split = Some((part.clone(), bit, list.as_slice()));
                    }
                }
            }
            if map.keys().any(|k| !TRANSPARENT.contains(&k.as_str())) {
                expansion.flat.push(part);
            }
        }
        Ok(expansion)
    }

    /// The rule for the conjunction of `parts`, or `None` when nothing satisfies it.
    /// `strict`: an unsatisfiable `allOf` is refused rather than dropped (false inside
    /// `anyOf` alternatives, where dropping the alternative is the meaning).
    pub fn compile(&mut self, parts: Vec<Part<'a>>, strict: bool) -> Result<Option<RuleId>, SchemaError> {
        self.compile_split(parts, &[], strict)
    }

    /// [`Compiler::compile`] once the `anyOf`/`oneOf` holders in `consumed` are split; one
    /// level of [`MAX_SCHEMA_DEPTH`].
    fn compile_split(
        &mut self,
        parts: Vec<Part<'a>>,
        consumed: &[(Rc<str>, u8)],
        strict: bool,
    ) -> Result<Option<RuleId>, SchemaError> {
        self.depth += 1;
        let compiled = self.compile_conjunction(parts, consumed, strict);
        self.depth -= 1;
        compiled
    }

    fn compile_conjunction(
        &mut self,
        parts: Vec<Part<'a>>,
        consumed: &[(Rc<str>, u8)],
        strict: bool,
    ) -> Result<Option<RuleId>, SchemaError> {
        let expansion = self.expand(&parts, consumed)?;
        if expansion.unsatisfiable {
            if strict && expansion.conjunction_origin.is_some() {
                return Err(contradiction(&expansion, "one of its schemas is `false`"));
            }
            return Ok(None);
        }
        if expansion.flat.is_empty() {
            return Ok(Some(self.sink.any_value()));
        }
        let mut key: Vec<String> = expansion.flat.iter().map(Part::key).collect();
        key.sort();
        key.dedup();
        if let Some(found) = self.memo.get(&key) {
            return Ok(*found);
        }
        if self.depth >= MAX_SCHEMA_DEPTH {
            return Err(too_deep(&parts));
        }
        let built = self.sink.builder.symbol_count();
        if built > MAX_SCHEMA_SYMBOLS {
            return Err(too_large("schema", &expansion.flat[0].location, 0, built));
        }
        if self.sink.rule_count() > MAX_SCHEMA_RULES {
            return Err(SchemaError::new(
                "schema",
                "",
                format!("which compiles to more than {MAX_SCHEMA_RULES} rules; simplify it or split it"),
            ));
        }
        let name = display_location(&expansion.flat[0].location);
        let id = self.sink.builder.declare(name);
        self.memo.insert(key.clone(), Some(id));
        let alternatives = match &expansion.split {
            Some(split) => self.split_alternatives(&parts, consumed, split, expansion.alternatives_product, strict)?,
            None => self.merged_alternatives(&expansion, strict)?,
        };
        if alternatives.is_empty() {
            if strict && expansion.conjunction_origin.is_some() {
                return Err(contradiction(&expansion, "no JSON value satisfies all of its schemas together"));
            }
            self.memo.insert(key, None);
            return Ok(None);
        }
        self.sink.builder.define(id, alternatives);
        Ok(Some(id))
    }

    /// The alternatives of a conjunction split at an `anyOf`/`oneOf`: the conjunction with each
    /// alternative added, compiled one level deeper, closed objects among them merged.
    /// Not inlined, like [`Compiler::merged_alternatives`]: the recursion carries the frame of
    /// whichever of the two it goes through, not both.
    #[inline(never)]
    fn split_alternatives(
        &mut self,
        parts: &[Part<'a>],
        consumed: &[(Rc<str>, u8)],
        (holder, bit, list): &(Part<'a>, u8, &'a [Value]),
        alternatives_product: usize,
        strict: bool,
    ) -> Result<Vec<Vec<Symbol>>, SchemaError> {
        let keyword = if *bit == 1 { "anyOf" } else { "oneOf" };
        if alternatives_product > MAX_ALTERNATIVES {
            return Err(SchemaError::new(
                keyword,
                &holder.location,
                format!("which leads to more than {MAX_ALTERNATIVES} alternatives (counting those it is combined with)"),
            ));
        }
        let here = child_location(&holder.location, keyword);
        let mut alternatives = Vec::new();
        let mut now_consumed = consumed.to_vec();
        now_consumed.push((holder.location.clone(), *bit));
        for (index, alternative) in list.iter().enumerate() {
            let mut next = parts.to_vec();
            next.push(Part::new(alternative, child_location(&here, &index.to_string())));
            if let Some(rule) = self.compile_split(next, &now_consumed, false)? {
                if !alternatives.contains(&vec![Symbol::Rule(rule)]) {
                    alternatives.push(vec![Symbol::Rule(rule)]);
                }
            }
        }
        let alternatives = self.unions.merge(&mut self.sink, alternatives);
        if alternatives.is_empty() && strict {
            return Err(SchemaError::new(keyword, &holder.location, "which cannot be satisfied: no alternative is consistent with the keywords beside it"));
        }
        Ok(alternatives)
    }

    /// The alternatives of a conjunction with nothing left to split: its keywords merged and
    /// lowered per type (none when they contradict each other and that is not refused).
    #[inline(never)]
    fn merged_alternatives(&mut self, expansion: &Expansion<'a>, strict: bool) -> Result<Vec<Vec<Symbol>>, SchemaError> {
        match Merged::from_parts(&expansion.flat)? {
            Ok(merged) => self.lower(&merged),
            Err(reason) if strict && expansion.conjunction_origin.is_some() => Err(contradiction(expansion, &reason)),
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Refuses, naming `keyword` at `location`, when `symbols` more would take the grammar
    /// past [`MAX_SCHEMA_SYMBOLS`]: checked before what grows with the schema's text is built.
    fn afford(&self, symbols: usize, keyword: &str, location: &str) -> Result<(), SchemaError> {
        let built = self.sink.builder.symbol_count();
        if built.saturating_add(symbols) > MAX_SCHEMA_SYMBOLS {
            return Err(too_large(keyword, location, symbols, built));
        }
        Ok(())
    }

    fn lower(&mut self, merged: &Merged<'a>) -> Result<Vec<Vec<Symbol>>, SchemaError> {
        if let Some(members) = &merged.enumeration {
            let (keyword, location) = merged.enumeration_origin.clone().unwrap_or(("enum", "".into()));
            let mut alternatives = Vec::new();
            for member in members {
                if !self.value_satisfies(merged, member)? {
                    continue;
                }
                // Built only when its text fits what is left of the budget (or built already).
                let built = self.sink.builder.symbol_count();
                let literal = self
                    .sink
                    .literal_value_within(member, MAX_SCHEMA_SYMBOLS.saturating_sub(built))
                    .map_err(|length| too_large(keyword, &location, length, built))?;
                alternatives.push(vec![Symbol::Rule(literal)]);
            }
            return Ok(alternatives);
        }
        let types = merged.types;
        let mut alternatives = Vec::new();
        if types.contains(TypeSet::NULL) {
            alternatives.push(literal_symbols(b"null"));
        }
        if types.contains(TypeSet::BOOLEAN) {
            alternatives.push(literal_symbols(b"true"));
            alternatives.push(literal_symbols(b"false"));
        }
        if types.contains(TypeSet::STRING) {
            if let Some(rule) = self.lower_string(merged)? {
                alternatives.push(vec![Symbol::Rule(rule)]);
            }
        }
        if types.contains(TypeSet::INTEGER) {
            if let Some(rule) = self.lower_number(merged)? {
                alternatives.push(vec![Symbol::Rule(rule)]);
            }
        }
        if types.contains(TypeSet::OBJECT) {
            if let Some(rule) = self.lower_object(merged)? {
                alternatives.push(vec![Symbol::Rule(rule)]);
            }
        }
        if types.contains(TypeSet::ARRAY) {
            if let Some(rule) = self.lower_array(merged)? {
                alternatives.push(vec![Symbol::Rule(rule)]);
            }
        }
        Ok(alternatives)
    }

    #[inline(never)]
    fn lower_string(&mut self, merged: &Merged<'a>) -> Result<Option<RuleId>, SchemaError> {
        let (min, max) = (merged.min_length.value, merged.max_length.as_ref().map(|b| b.value));
        if min > MAX_EXPANDED_COUNT {
            return Err(SchemaError::new(
                "minLength",
                &merged.min_length.location,
                format!("which is above {MAX_EXPANDED_COUNT}, the longest length llamay expands"),
            ));
        }
        let max = max.map(|m| m.min(MAX_EXPANDED_COUNT));
        if max.is_some_and(|max| max < min) {
            return Ok(None);
        }
        let format = match &merged.format {
            Some((format, location)) if self.formats == FormatMode::Enforce => {
                format_pattern(format).map(|pattern| (pattern, location.clone()))
            }
            _ => None,
        };
        if let (Some((_, format_location)), Some((_, pattern_location))) = (&format, &merged.pattern) {
            return Err(SchemaError::new(
                "format",
                format_location,
                format!("which is enforced here, together with the pattern at {}; llamay does not intersect a format with a pattern, so drop one", display_location(pattern_location)),
            ));
        }
        if let Some((pattern, location)) = &format {
            return self
                .pattern_string(pattern, LengthBounds { min, max })
                .map_err(|refusal| SchemaError::new("format", location, refusal.0));
        }
        if let Some((pattern, location)) = &merged.pattern {
            return self
                .pattern_string(pattern, LengthBounds { min, max })
                .map_err(|refusal| SchemaError::new("pattern", location, refusal.0));
        }
        if let Some(allowed) = self.sink.allowed.as_mut() {
            let (keyword, location) = match &merged.max_length {
                Some(bound) => ("maxLength", &bound.location),
                None => ("minLength", &merged.min_length.location),
            };
            return allowed
                .string(&mut self.sink.builder, min, max)
                .map(Some)
                .map_err(|reason| SchemaError::new(keyword, location, reason));
        }
        if min == 0 && max.is_none() {
            return Ok(Some(self.sink.any_string()));
        }
        Ok(Some(self.sink.bounded_string(min, max)))
    }

    /// A quoted string whose value matches `pattern` within `lengths`, once per distinct
    /// pattern and bounds.
    fn pattern_string(&mut self, pattern: &str, lengths: LengthBounds) -> Result<Option<RuleId>, PatternRefusal> {
        let key = (pattern.to_string(), lengths.min, lengths.max);
        if let Some(found) = self.patterns.get(&key) {
            return Ok(*found);
        }
        let body = pattern_rule(&mut self.sink, pattern, lengths)?;
        let rule = body.map(|body| self.sink.add("pattern-string", vec![vec![byte(b'"'), Symbol::Rule(body)]]));
        self.patterns.insert(key, rule);
        Ok(rule)
    }

    #[inline(never)]
    fn lower_number(&mut self, merged: &Merged<'a>) -> Result<Option<RuleId>, SchemaError> {
        let spec = NumberSpec {
            integer: !merged.types.contains(TypeSet::NUMBER),
            lower: merged.lower.clone(),
            upper: merged.upper.clone(),
            step: merged.step.whole,
            fraction_digits: merged.step.fraction_digits,
        };
        if let Some(found) = self.numbers.get(&spec) {
            return Ok(*found);
        }
        let rule = number_rule(&mut self.sink, &spec).map_err(|too_complex| {
            let (step, bound) = (merged.step.location.clone(), merged.bound_location.clone());
            let location = if too_complex.keyword == "multipleOf" { step.or(bound) } else { bound.or(step) };
            let location = location.unwrap_or_else(|| "".into());
            SchemaError::new(too_complex.keyword, &location, format!("which cannot be enforced here: {}", too_complex.message))
        })?;
        self.numbers.insert(spec, rule);
        Ok(rule)
    }

    /// The parts constraining property `name`, or `None` when some part forbids it. In each
    /// object part, a declared name gets its own schema and those of the patterns it matches;
    /// any other name those of the patterns it matches, or else `additionalProperties`.
    fn property_parts(objects: &[ObjectPart<'a>], patterns: &ObjectPatterns<'a>, name: &str) -> Option<Vec<Part<'a>>> {
        let mut parts = Vec::new();
        for (object_index, object) in objects.iter().enumerate() {
            let declared = object.properties.iter().find(|(n, _)| *n == name);
            let mut matched_any = false;
            for (pattern, part) in patterns.of_object(object_index) {
                if pattern.matches(name) {
                    matched_any = true;
                    parts.push(part.clone());
                }
            }
            match declared {
                Some((_, part)) => parts.push(part.clone()),
                None if matched_any => {}
                None => match &object.additional {
                    Additional::Open | Additional::Default => {}
                    Additional::Closed => return None,
                    Additional::Schema(part) => parts.push(part.clone()),
                },
            }
        }
        Some(parts)
    }

    fn parts_rule(&mut self, parts: Vec<Part<'a>>) -> Result<Option<RuleId>, SchemaError> {
        if parts.is_empty() {
            return Ok(Some(self.sink.any_value()));
        }
        self.compile(parts, true)
    }

    #[inline(never)]
    fn lower_object(&mut self, merged: &Merged<'a>) -> Result<Option<RuleId>, SchemaError> {
        let names = merged.property_names();
        let location = merged.objects.first().map(|o| o.location.clone()).unwrap_or_else(|| "".into());
        if names.len() > MAX_PROPERTIES {
            return Err(SchemaError::new(
                "properties",
                &location,
                format!("which declares {} properties, above the limit of {MAX_PROPERTIES} per object", names.len()),
            ));
        }
        for (name, location) in &merged.required {
            if !names.contains(&name.as_str()) {
                return Err(SchemaError::new(
                    "required",
                    location,
                    format!("which names {name:?}, not one of the properties; declare it under properties or drop it from required"),
                ));
            }
        }
        // Each name is written out as a key, and again where a choice of objects is merged.
        self.afford(2 * names.iter().map(|name| name.len() + 2).sum::<usize>(), "properties", &location)?;
        let patterns = ObjectPatterns::new(&merged.objects)?;
        let mut properties: Vec<(&'a str, RuleId, bool)> = Vec::new();
        let mut values: Vec<(String, RuleId, bool)> = Vec::new();
        for name in names {
            let required = merged.required.iter().any(|(r, _)| r == name);
            let rule = match Self::property_parts(&merged.objects, &patterns, name) {
                Some(parts) => self.parts_rule(parts)?,
                None => None,
            };
            match rule {
                Some(rule) => {
                    let key = literal_symbols(canonical_json_string(name).as_bytes());
                    let mut pair = key;
                    pair.extend([Symbol::Whitespace, byte(b':'), Symbol::Whitespace, Symbol::Rule(rule)]);
                    let pair = self.sink.add(format!("property {name}"), vec![pair]);
                    properties.push((name, pair, required));
                    values.push((name.to_string(), rule, required));
                }
                None if required => return Ok(None),
                None => {}
            }
        }
        let extra = self.extra_pair(merged, &patterns)?;
        let any_order = properties.len() <= ANY_ORDER_MAX_PROPERTIES;
        let body = if any_order {
            self.any_order_body(&properties, extra)
        } else {
            self.declared_order_body(&properties, extra)
        };
        let mut alternatives = vec![vec![byte(b'{'), Symbol::Whitespace, Symbol::Rule(body), byte(b'}')]];
        if properties.iter().all(|(_, _, required)| !required) {
            alternatives.push(vec![byte(b'{'), Symbol::Whitespace, byte(b'}')]);
        }
        let object = self.sink.add("object", alternatives);
        if extra.is_none() {
            self.unions.record(object, ObjectShape { properties: values, any_order });
        }
        Ok(Some(object))
    }

    /// A pair with a key that is none of the declared names, when extra keys are allowed.
    #[inline(never)]
    fn extra_pair(&mut self, merged: &Merged<'a>, patterns: &ObjectPatterns<'a>) -> Result<Option<RuleId>, SchemaError> {
        // Declared names, even those whose schema forbids them, are never extra keys.
        let declared: Vec<&str> = merged.property_names();
        // Extra keys are read by a trie of the declared names, a rule or state per byte each
        // of up to a dozen symbols.
        let location = merged.objects.first().map(|o| o.location.clone()).unwrap_or_else(|| "".into());
        self.afford(16 * declared.iter().map(|name| name.len()).sum::<usize>(), "properties", &location)?;
        if !patterns.is_empty() {
            return self.pattern_keyed_pair(merged, patterns, &declared);
        }
        let mut parts = Vec::new();
        for object in &merged.objects {
            match &object.additional {
                Additional::Open => {}
                Additional::Closed | Additional::Default => return Ok(None),
                Additional::Schema(part) => parts.push(part.clone()),
            }
        }
        let Some(value) = self.parts_rule(parts)? else { return Ok(None) };
        let key = self.sink.key_other_than(&declared);
        Ok(Some(self.sink.add(
            "extra property",
            vec![vec![Symbol::Rule(key), Symbol::Whitespace, byte(b':'), Symbol::Whitespace, Symbol::Rule(value)]],
        )))
    }

    /// Extra pairs under `patternProperties`: the key is read by the product of the declared
    /// names and the patterns, and each set of patterns it can end matching picks the value:
    /// per object part, the schemas of its matched patterns, or its `additionalProperties`
    /// when none of its patterns matched.
    #[inline(never)]
    fn pattern_keyed_pair(&mut self, merged: &Merged<'a>, patterns: &ObjectPatterns<'a>, declared: &[&str]) -> Result<Option<RuleId>, SchemaError> {
        let shape = (
            declared.iter().map(|name| name.to_string()).collect::<Vec<_>>(),
            merged.objects.iter().flat_map(|o| o.patterns.iter().map(|(pattern, _)| pattern.to_string())).collect::<Vec<_>>(),
        );
        let automaton = match self.key_automata.get(&shape) {
            Some(automaton) => automaton.clone(),
            None => {
                let all: Vec<&KeyPattern> = patterns.entries.iter().map(|(_, pattern, _)| pattern).collect();
                let automaton = KeyAutomaton::build(declared, &all)
                    .map_err(|refusal| SchemaError::new("patternProperties", &patterns.location, refusal.0))?;
                let automaton = Rc::new(automaton);
                self.key_automata.insert(shape.clone(), automaton.clone());
                automaton
            }
        };
        let mut values: HashMap<u64, Option<RuleId>> = HashMap::new();
        for set in automaton.ending_sets() {
            let mut parts = Vec::new();
            let mut allowed = true;
            for (object_index, object) in merged.objects.iter().enumerate() {
                let mut matched_any = false;
                for (bit, (owner, _, part)) in patterns.entries.iter().enumerate() {
                    if *owner == object_index && set & (1 << bit) != 0 {
                        matched_any = true;
                        parts.push(part.clone());
                    }
                }
                if matched_any {
                    continue;
                }
                match &object.additional {
                    Additional::Open => {}
                    Additional::Closed | Additional::Default => allowed = false,
                    Additional::Schema(part) => parts.push(part.clone()),
                }
            }
            let value = if allowed { self.parts_rule(parts)? } else { None };
            values.insert(set, value);
        }
        if values.values().all(Option::is_none) {
            return Ok(None);
        }
        let mut by_set: Vec<(u64, Option<RuleId>)> = values.iter().map(|(set, value)| (*set, *value)).collect();
        by_set.sort_unstable();
        let key = (shape.0, shape.1, by_set);
        if let Some(found) = self.keyed_pairs.get(&key) {
            return Ok(Some(*found));
        }
        let pair = automaton.lower(&mut self.sink.builder, &values);
        self.keyed_pairs.insert(key, pair);
        Ok(Some(pair))
    }

    /// Properties in any order, each at most once: one rule per subset written so far.
    #[inline(never)]
    fn any_order_body(&mut self, properties: &[(&'a str, RuleId, bool)], extra: Option<RuleId>) -> RuleId {
        let required_mask: u32 = properties.iter().enumerate().filter(|(_, p)| p.2).fold(0, |m, (i, _)| m | (1 << i));
        let count = properties.len();
        let mut states: HashMap<u32, RuleId> = HashMap::new();
        let mut pending = Vec::new();
        let state_of = |mask: u32, states: &mut HashMap<u32, RuleId>, sink: &mut RuleSink, pending: &mut Vec<u32>| {
            *states.entry(mask).or_insert_with(|| {
                pending.push(mask);
                sink.builder.declare("object-after")
            })
        };
        let separator = [Symbol::Whitespace, byte(b','), Symbol::Whitespace];
        let mut first = Vec::new();
        for (index, (_, pair, _)) in properties.iter().enumerate() {
            let next = state_of(1 << index, &mut states, &mut self.sink, &mut pending);
            first.push(vec![Symbol::Rule(*pair), Symbol::Rule(next)]);
        }
        if let Some(extra) = extra {
            let next = state_of(0, &mut states, &mut self.sink, &mut pending);
            first.push(vec![Symbol::Rule(extra), Symbol::Rule(next)]);
        }
        while let Some(mask) = pending.pop() {
            let mut alternatives = Vec::new();
            if mask & required_mask == required_mask {
                alternatives.push(vec![Symbol::Whitespace]);
            }
            for index in 0..count {
                if mask & (1 << index) == 0 {
                    let next = state_of(mask | (1 << index), &mut states, &mut self.sink, &mut pending);
                    let mut sequence = separator.to_vec();
                    sequence.extend([Symbol::Rule(properties[index].1), Symbol::Rule(next)]);
                    alternatives.push(sequence);
                }
            }
            if let Some(extra) = extra {
                let mut sequence = separator.to_vec();
                sequence.extend([Symbol::Rule(extra), Symbol::Rule(states[&mask])]);
                alternatives.push(sequence);
            }
            self.sink.builder.define(states[&mask], alternatives);
        }
        self.sink.add("object-body", first)
    }

    /// Properties in declared order, optional ones skippable, extra keys after them.
    #[inline(never)]
    fn declared_order_body(&mut self, properties: &[(&'a str, RuleId, bool)], extra: Option<RuleId>) -> RuleId {
        let separator = [Symbol::Whitespace, byte(b','), Symbol::Whitespace];
        // After all declared properties: extra pairs, then the closing whitespace.
        let end_after_some = self.sink.builder.declare("object-end");
        let mut end_alternatives = vec![vec![Symbol::Whitespace]];
        if let Some(extra) = extra {
            let mut sequence = separator.to_vec();
            sequence.extend([Symbol::Rule(extra), Symbol::Rule(end_after_some)]);
            end_alternatives.push(sequence);
        }
        self.sink.builder.define(end_after_some, end_alternatives);
        let mut end_after_none = Vec::new();
        if let Some(extra) = extra {
            end_after_none.push(vec![Symbol::Rule(extra), Symbol::Rule(end_after_some)]);
        }
        let mut after_some = end_after_some;
        let mut after_none = self.sink.add("object-end-empty", end_after_none);
        for (_, pair, required) in properties.iter().rev() {
            let mut take_after_some = separator.to_vec();
            take_after_some.extend([Symbol::Rule(*pair), Symbol::Rule(after_some)]);
            let take_first = vec![Symbol::Rule(*pair), Symbol::Rule(after_some)];
            let (mut some, mut none) = (vec![take_after_some], vec![take_first]);
            if !required {
                some.push(vec![Symbol::Rule(after_some)]);
                none.push(vec![Symbol::Rule(after_none)]);
            }
            after_some = self.sink.add("object-next", some);
            after_none = self.sink.add("object-first", none);
        }
        after_none
    }

    #[inline(never)]
    fn lower_array(&mut self, merged: &Merged<'a>) -> Result<Option<RuleId>, SchemaError> {
        let min = merged.min_items.value;
        if min > MAX_EXPANDED_COUNT {
            return Err(SchemaError::new(
                "minItems",
                &merged.min_items.location,
                format!("which is above {MAX_EXPANDED_COUNT}, the most items llamay expands"),
            ));
        }
        let prefix = merged.prefix_items as u64;
        let mut max = merged.max_items.as_ref().map(|b| b.value.min(MAX_EXPANDED_COUNT));
        let item = if merged.items.is_empty() {
            Some(self.sink.any_value())
        } else {
            self.compile(merged.items.clone(), true)?
        };
        let any = self.sink.any_value();
        let item = match item {
            Some(item) => item,
            None => {
                max = Some(max.map_or(prefix, |m| m.min(prefix)));
                any
            }
        };
        if max.is_some_and(|max| max < min) {
            return Ok(None);
        }
        let element = |index: u64| if index < prefix { any } else { item };
        let separator = [Symbol::Whitespace, byte(b','), Symbol::Whitespace];
        let mut alternatives = Vec::new();
        if min == 0 {
            alternatives.push(vec![byte(b'['), Symbol::Whitespace, byte(b']')]);
        }
        if max != Some(0) {
            // tail(i): what may follow once i elements are written, built from the far end.
            let steady = prefix.max(min).max(1);
            let (mut tail, mut index) = match max {
                Some(max) => (self.sink.add("array-end", vec![vec![Symbol::Whitespace]]), max),
                None => {
                    let tail = self.sink.builder.declare("array-more");
                    let mut more = separator.to_vec();
                    more.extend([Symbol::Rule(item), Symbol::Rule(tail)]);
                    self.sink.builder.define(tail, vec![vec![Symbol::Whitespace], more]);
                    (tail, steady)
                }
            };
            while index > 1 {
                index -= 1;
                let mut more = separator.to_vec();
                more.extend([Symbol::Rule(element(index)), Symbol::Rule(tail)]);
                let mut options = vec![more];
                if index >= min {
                    options.push(vec![Symbol::Whitespace]);
                }
                tail = self.sink.add("array-next", options);
            }
            alternatives.push(vec![byte(b'['), Symbol::Whitespace, Symbol::Rule(element(0)), Symbol::Rule(tail), byte(b']')]);
        }
        Ok(Some(self.sink.add("array", alternatives)))
    }
}

/// The refusal of an `allOf` (or `$ref` with siblings) whose schemas contradict each other.
fn contradiction(expansion: &Expansion<'_>, reason: &str) -> SchemaError {
    let location = expansion.conjunction_origin.clone().unwrap_or_else(|| "".into());
    SchemaError::new("allOf", &location, format!("which cannot be satisfied: {reason}; remove the contradiction"))
}
