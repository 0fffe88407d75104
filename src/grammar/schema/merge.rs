//! Merging a conjunction of subschemas into one set of constraints: types intersect, bounds
//! tighten, properties and required lists combine, `enum`/`const` intersect. A contradiction
//! is reported as a reason (the caller decides whether that refuses the schema or drops an
//! `anyOf` alternative); a keyword llamay cannot enforce is a [`SchemaError`].
//!
//! Key types: [`Merged`], [`TypeSet`], [`ObjectPart`]. Cost: linear in the keywords merged.

use std::cmp::Ordering;
use std::rc::Rc;

use serde_json::{Map, Value};

use super::part::Part;
use super::keywords::child_location;
use super::numbers::{Bound, Decimal, MAX_INTEGER_DIGITS};
use super::SchemaError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeSet(pub u8);

impl TypeSet {
    pub const NULL: TypeSet = TypeSet(1);
    pub const BOOLEAN: TypeSet = TypeSet(2);
    pub const OBJECT: TypeSet = TypeSet(4);
    pub const ARRAY: TypeSet = TypeSet(8);
    pub const STRING: TypeSet = TypeSet(16);
    /// Non-integers; a set holding it always holds INTEGER too.
    pub const NUMBER: TypeSet = TypeSet(32);
    pub const INTEGER: TypeSet = TypeSet(64);
    pub const ALL: TypeSet = TypeSet(127);

    pub fn contains(self, other: TypeSet) -> bool {
        self.0 & other.0 == other.0
    }

    fn parse_one(name: &str) -> Option<TypeSet> {
        Some(match name {
            "null" => TypeSet::NULL,
            "boolean" => TypeSet::BOOLEAN,
            "object" => TypeSet::OBJECT,
            "array" => TypeSet::ARRAY,
            "string" => TypeSet::STRING,
            "number" => TypeSet(TypeSet::NUMBER.0 | TypeSet::INTEGER.0),
            "integer" => TypeSet::INTEGER,
            _ => return None,
        })
    }

    pub fn parse(value: &Value) -> Option<TypeSet> {
        match value {
            Value::String(name) => TypeSet::parse_one(name),
            Value::Array(names) => names.iter().try_fold(TypeSet(0), |set, name| {
                Some(TypeSet(set.0 | TypeSet::parse_one(name.as_str()?)?.0))
            }),
            _ => None,
        }
    }

    /// The type of a JSON value (integers are numbers with no fraction).
    pub fn of(value: &Value) -> TypeSet {
        match value {
            Value::Null => TypeSet::NULL,
            Value::Bool(_) => TypeSet::BOOLEAN,
            Value::Object(_) => TypeSet::OBJECT,
            Value::Array(_) => TypeSet::ARRAY,
            Value::String(_) => TypeSet::STRING,
            Value::Number(_) => match Decimal::from_json(value) {
                Some(d) if d.is_integer() => TypeSet::INTEGER,
                _ => TypeSet::NUMBER,
            },
        }
    }
}

/// What one part says about extra keys.
#[derive(Clone, Debug)]
pub enum Additional<'a> {
    Open,
    /// No `additionalProperties` beside `properties`: closed, but to the properties of the
    /// whole conjunction (so `allOf` parts can add properties to each other).
    Default,
    Closed,
    Schema(Part<'a>),
}

/// The object keywords of one part; kept per part because `additionalProperties` refers to
/// the properties of its own part only.
#[derive(Clone, Debug)]
pub struct ObjectPart<'a> {
    pub properties: Vec<(&'a str, Part<'a>)>,
    /// `patternProperties`: (pattern, schema of the values of keys it matches).
    pub patterns: Vec<(&'a str, Part<'a>)>,
    pub additional: Additional<'a>,
    pub location: Rc<str>,
}

/// A count bound and the location of the schema that set it.
#[derive(Clone, Debug, Default)]
pub struct Count {
    pub value: u64,
    pub location: Rc<str>,
}

/// The merged `multipleOf`: a whole step and/or a cap on fraction digits.
#[derive(Clone, Debug, Default)]
pub struct Step {
    pub whole: Option<u64>,
    pub fraction_digits: Option<usize>,
    pub location: Option<Rc<str>>,
}

#[derive(Clone, Debug)]
pub struct Merged<'a> {
    pub types: TypeSet,
    explicit_type: bool,
    implied_types: TypeSet,
    pub objects: Vec<ObjectPart<'a>>,
    pub required: Vec<(String, Rc<str>)>,
    pub items: Vec<Part<'a>>,
    pub prefix_items: usize,
    pub min_items: Count,
    pub max_items: Option<Count>,
    pub min_length: Count,
    pub max_length: Option<Count>,
    pub pattern: Option<(&'a str, Rc<str>)>,
    /// The `format` named for strings, and where (enforced only on request).
    pub format: Option<(&'a str, Rc<str>)>,
    pub lower: Option<Bound>,
    pub upper: Option<Bound>,
    pub step: Step,
    /// Location of the schema that set the last numeric bound, for messages.
    pub bound_location: Option<Rc<str>>,
    pub enumeration: Option<Vec<&'a Value>>,
    /// The keyword (`enum` or `const`) and location of the last member list merged.
    pub enumeration_origin: Option<(&'static str, Rc<str>)>,
}

fn count(map: &Map<String, Value>, keyword: &str, location: &str) -> Result<Option<Count>, SchemaError> {
    let Some(value) = map.get(keyword) else { return Ok(None) };
    let parsed = value.as_u64().or_else(|| value.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f.min(u64::MAX as f64) as u64));
    match parsed {
        Some(value) => Ok(Some(Count { value, location: location.into() })),
        None => Err(SchemaError::new(keyword, location, "whose value is not a non-negative integer")),
    }
}

/// JSON equality as JSON Schema defines it (1 == 1.0; object key order does not matter).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => Decimal::from_json(a) == Decimal::from_json(b),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

pub fn compare_decimals(a: &Decimal, b: &Decimal) -> Ordering {
    let is_zero = |x: &Decimal| x.int == [0] && x.frac.is_empty();
    let sign = |x: &Decimal| if is_zero(x) { 0 } else if x.negative { -1 } else { 1 };
    match sign(a).cmp(&sign(b)) {
        Ordering::Equal => {}
        other => return other,
    }
    let by_magnitude = a.int.len().cmp(&b.int.len()).then_with(|| a.int.cmp(&b.int)).then_with(|| a.frac.cmp(&b.frac));
    if a.negative { by_magnitude.reverse() } else { by_magnitude }
}

fn bound(map: &Map<String, Value>, keyword: &str, location: &str, exclusive: bool) -> Result<Option<Bound>, SchemaError> {
    let Some(value) = map.get(keyword) else { return Ok(None) };
    match Decimal::from_json(value) {
        Some(value) => Ok(Some(Bound { value, exclusive })),
        None => Err(SchemaError::new(keyword, location, "whose value is not a finite number")),
    }
}

/// Keeps the tighter of two lower (`is_lower`) or upper bounds.
fn tighter(current: Option<Bound>, candidate: Bound, is_lower: bool) -> Option<Bound> {
    let Some(current) = current else { return Some(candidate) };
    let order = compare_decimals(&candidate.value, &current.value);
    let candidate_wins = match order {
        Ordering::Equal => candidate.exclusive && !current.exclusive,
        Ordering::Greater => is_lower,
        Ordering::Less => !is_lower,
    };
    Some(if candidate_wins { candidate } else { current })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl<'a> Merged<'a> {
    /// The constraints of `parts` together, or why nothing satisfies them. Boxed: the
    /// compiler recurses through the frame that holds it, once per level of nesting.
    pub fn from_parts(parts: &[Part<'a>]) -> Result<Result<Box<Merged<'a>>, String>, SchemaError> {
        let mut merged = Box::new(Merged {
            types: TypeSet::ALL,
            explicit_type: false,
            implied_types: TypeSet::ALL,
            objects: Vec::new(),
            required: Vec::new(),
            items: Vec::new(),
            prefix_items: 0,
            min_items: Count::default(),
            max_items: None,
            min_length: Count::default(),
            max_length: None,
            pattern: None,
            format: None,
            lower: None,
            upper: None,
            step: Step::default(),
            bound_location: None,
            enumeration: None,
            enumeration_origin: None,
        });
        for part in parts {
            let Some(map) = part.schema.as_object() else { continue };
            if let Err(reason) = merged.add(part, map)? {
                return Ok(Err(reason));
            }
        }
        if !merged.explicit_type {
            merged.types = merged.implied_types;
        }
        if merged.types.0 == 0 {
            return Ok(Err("the types allowed by its schemas have nothing in common".into()));
        }
        if let (Some(lower), Some(upper)) = (&merged.lower, &merged.upper) {
            let order = compare_decimals(&lower.value, &upper.value);
            let empty = order == Ordering::Greater || (order == Ordering::Equal && (lower.exclusive || upper.exclusive));
            if empty {
                // Only numbers are ruled out; other types stay possible.
                merged.types = TypeSet(merged.types.0 & !(TypeSet::NUMBER.0 | TypeSet::INTEGER.0));
                if merged.types.0 == 0 {
                    return Ok(Err("its minimum is above its maximum".into()));
                }
            }
        }
        Ok(Ok(merged))
    }

    fn add(&mut self, part: &Part<'a>, map: &'a Map<String, Value>) -> Result<Result<(), String>, SchemaError> {
        let location: &str = &part.location;
        // An explicit `type` anywhere in the conjunction wins; `properties`/`items` without
        // one imply object/array only when no part names a type (so `allOf: [{type: array},
        // {properties: ...}]` stays an array, as in JSON Schema).
        match map.get("type") {
            Some(value) => {
                let types = TypeSet::parse(value).ok_or_else(|| {
                    SchemaError::new("type", location, "whose value is not a type name or a list of type names")
                })?;
                self.types = TypeSet(self.types.0 & types.0);
                self.explicit_type = true;
            }
            None => {
                let mut implied = 0;
                if map.contains_key("properties") || map.contains_key("patternProperties") {
                    implied |= TypeSet::OBJECT.0;
                }
                if map.contains_key("items") {
                    implied |= TypeSet::ARRAY.0;
                }
                if implied != 0 {
                    self.implied_types = TypeSet(self.implied_types.0 & implied);
                }
            }
        }

        let properties = match map.get("properties") {
            Some(Value::Object(members)) => members
                .iter()
                .map(|(name, schema)| {
                    let here = child_location(&child_location(location, "properties"), name);
                    (name.as_str(), Part::new(schema, here))
                })
                .collect(),
            Some(_) => return Err(SchemaError::new("properties", location, "whose value is not an object")),
            None => Vec::new(),
        };
        let patterns: Vec<(&'a str, Part<'a>)> = match map.get("patternProperties") {
            Some(Value::Object(members)) => {
                let mut patterns = Vec::new();
                for (pattern, schema) in members {
                    let here = child_location(&child_location(location, "patternProperties"), pattern);
                    super::regex::check_pattern(pattern)
                        .map_err(|refusal| SchemaError::new("patternProperties", location, refusal.0))?;
                    patterns.push((pattern.as_str(), Part::new(schema, here)));
                }
                patterns
            }
            Some(_) => return Err(SchemaError::new("patternProperties", location, "whose value is not an object")),
            None => Vec::new(),
        };
        let additional = match map.get("additionalProperties") {
            None if map.contains_key("properties") || map.contains_key("patternProperties") => Additional::Default,
            None => Additional::Open,
            Some(Value::Bool(true)) => Additional::Open,
            Some(Value::Bool(false)) => Additional::Closed,
            Some(_) => Additional::Schema(part.child("additionalProperties").unwrap_or_else(|| part.clone())),
        };
        if !properties.is_empty() || !patterns.is_empty() || !matches!(additional, Additional::Open) {
            self.objects.push(ObjectPart { properties, patterns, additional, location: part.location.clone() });
        }
        if let Some(required) = map.get("required") {
            let Value::Array(names) = required else {
                return Err(SchemaError::new("required", location, "whose value is not a list of names"));
            };
            for name in names {
                let Some(name) = name.as_str() else {
                    return Err(SchemaError::new("required", location, "which lists something that is not a name"));
                };
                if !self.required.iter().any(|(n, _)| n == name) {
                    self.required.push((name.to_string(), location.into()));
                }
            }
        }

        if let Some(items) = part.child("items") {
            self.items.push(items);
        }
        if let Some(Value::Array(prefix)) = map.get("prefixItems") {
            self.prefix_items = self.prefix_items.max(prefix.len());
        }
        if let Some(min) = count(map, "minItems", location)? {
            if min.value > self.min_items.value {
                self.min_items = min;
            }
        }
        if let Some(max) = count(map, "maxItems", location)? {
            if self.max_items.as_ref().is_none_or(|m| max.value < m.value) {
                self.max_items = Some(max);
            }
        }
        if let Some(min) = count(map, "minLength", location)? {
            if min.value > self.min_length.value {
                self.min_length = min;
            }
        }
        if let Some(max) = count(map, "maxLength", location)? {
            if self.max_length.as_ref().is_none_or(|m| max.value < m.value) {
                self.max_length = Some(max);
            }
        }
        if let Some(pattern) = map.get("pattern") {
            let Some(pattern) = pattern.as_str() else {
                return Err(SchemaError::new("pattern", location, "whose value is not a string"));
            };
            super::regex::check_pattern(pattern).map_err(|refusal| SchemaError::new("pattern", location, refusal.0))?;
            match &self.pattern {
                Some((existing, _)) if *existing != pattern => {
                    return Err(SchemaError::new(
                        "pattern",
                        location,
                        format!("which must hold together with another pattern ({existing:?}); llamay does not intersect two patterns, so write them as one"),
                    ))
                }
                _ => self.pattern = Some((pattern, location.into())),
            }
        }
        if let Some(Value::String(format)) = map.get("format") {
            self.format = Some((format.as_str(), location.into()));
        }
        for (keyword, is_lower, exclusive) in [
            ("minimum", true, false),
            ("exclusiveMinimum", true, true),
            ("maximum", false, false),
            ("exclusiveMaximum", false, true),
        ] {
            if let Some(candidate) = bound(map, keyword, location, exclusive)? {
                self.bound_location = Some(location.into());
                if is_lower {
                    self.lower = tighter(self.lower.take(), candidate, true);
                } else {
                    self.upper = tighter(self.upper.take(), candidate, false);
                }
            }
        }
        if let Some(step) = map.get("multipleOf") {
            self.add_step(step, location)?;
        }
        for keyword in ["enum", "const"] {
            let Some(value) = map.get(keyword) else { continue };
            let members: Vec<&'a Value> = match (keyword, value) {
                ("enum", Value::Array(members)) => members.iter().collect(),
                ("enum", _) => return Err(SchemaError::new("enum", location, "whose value is not a list")),
                _ => vec![value],
            };
            if members.len() > 64 {
                return Err(SchemaError::new(keyword, location, format!("which lists {} members, above the limit of 64", members.len())));
            }
            self.enumeration_origin = Some((if keyword == "enum" { "enum" } else { "const" }, location.into()));
            self.enumeration = Some(match self.enumeration.take() {
                None => members,
                Some(existing) => existing.into_iter().filter(|v| members.iter().any(|m| json_equal(v, m))).collect(),
            });
        }
        Ok(Ok(()))
    }

    fn add_step(&mut self, step: &Value, location: &str) -> Result<(), SchemaError> {
        let refuse = |message: &str| SchemaError::new("multipleOf", location, message.to_string());
        let decimal = Decimal::from_json(step).ok_or_else(|| refuse("whose value is not a number"))?;
        if decimal.negative || (decimal.int == [0] && decimal.frac.is_empty()) {
            return Err(refuse("whose value is not a positive number"));
        }
        self.step.location = Some(location.into());
        if decimal.is_integer() {
            if decimal.int.len() > MAX_INTEGER_DIGITS {
                return Err(refuse("whose step has more than 18 digits"));
            }
            let value: u64 = decimal.int.iter().fold(0u64, |v, d| v * 10 + *d as u64);
            let merged = match self.step.whole {
                None => value,
                Some(existing) => {
                    let lcm = (existing / gcd(existing, value)).checked_mul(value);
                    lcm.filter(|l| *l < 10u64.pow(MAX_INTEGER_DIGITS as u32))
                        .ok_or_else(|| refuse("whose combined step has more than 18 digits"))?
                }
            };
            self.step.whole = Some(merged);
            return Ok(());
        }
        let is_power_of_ten = decimal.int == [0] && decimal.frac.last() == Some(&1) && decimal.frac[..decimal.frac.len() - 1].iter().all(|d| *d == 0);
        if !is_power_of_ten {
            return Err(refuse(
                "whose step is neither a whole number nor a power of ten such as 0.01; on numbers only those can be enforced, so round the step",
            ));
        }
        let digits = decimal.frac.len();
        self.step.fraction_digits = Some(self.step.fraction_digits.map_or(digits, |d| d.min(digits)));
        Ok(())
    }

    /// Declared property names across parts, first mention first.
    pub fn property_names(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = Vec::new();
        for object in &self.objects {
            for (name, _) in &object.properties {
                if !names.contains(name) {
                    names.push(name);
                }
            }
        }
        names
    }
}
