//! Checking a JSON value against a conjunction of subschemas, with the same expansion and
//! merging the compiler uses; `enum`/`const` members another keyword rules out are dropped
//! with it. Only enforced keywords are checked, so this agrees with what the grammar accepts.
//!
//! Cost: proportional to the value's size times the schema keywords along its path.

use std::rc::Rc;

use serde_json::Value;

use super::compile::{Compiler, Part};
use super::keywords::child_location;
use super::merge::{compare_decimals, json_equal, Additional, Merged, TypeSet};
use super::numbers::Decimal;
use super::SchemaError;

/// Values nested deeper than this are not checked further (and count as not satisfying).
const MAX_CHECK_DEPTH: usize = 64;

impl<'a> Compiler<'a> {
    /// Whether `value` satisfies every enforced keyword of `merged`.
    pub fn value_satisfies(&self, merged: &Merged<'a>, value: &Value) -> Result<bool, SchemaError> {
        self.merged_accepts(merged, value, 0)
    }

    fn parts_accept(&self, parts: &[Part<'a>], value: &Value, depth: usize) -> Result<bool, SchemaError> {
        self.parts_accept_split(parts, &[], value, depth)
    }

    fn parts_accept_split(
        &self,
        parts: &[Part<'a>],
        consumed: &[(Rc<str>, u8)],
        value: &Value,
        depth: usize,
    ) -> Result<bool, SchemaError> {
        if depth > MAX_CHECK_DEPTH {
            return Ok(false);
        }
        let expansion = self.expand(parts, consumed)?;
        if expansion.unsatisfiable {
            return Ok(false);
        }
        if let Some((holder, bit, alternatives)) = &expansion.split {
            let mut now_consumed = consumed.to_vec();
            now_consumed.push((holder.location.clone(), *bit));
            for (index, alternative) in alternatives.iter().enumerate() {
                let mut next = parts.to_vec();
                let keyword = if *bit == 1 { "anyOf" } else { "oneOf" };
                let location = child_location(&child_location(&holder.location, keyword), &index.to_string());
                next.push(Part::new(alternative, location));
                if self.parts_accept_split(&next, &now_consumed, value, depth + 1)? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        match Merged::from_parts(&expansion.flat)? {
            Ok(merged) => self.merged_accepts(&merged, value, depth),
            Err(_) => Ok(false),
        }
    }

    fn merged_accepts(&self, merged: &Merged<'a>, value: &Value, depth: usize) -> Result<bool, SchemaError> {
        if let Some(members) = &merged.enumeration {
            if !members.iter().any(|m| json_equal(m, value)) {
                return Ok(false);
            }
        }
        let kind = TypeSet::of(value);
        if !merged.types.contains(kind) {
            return Ok(false);
        }
        match value {
            Value::String(text) => {
                let length = text.chars().count() as u64;
                if length < merged.min_length.value || merged.max_length.as_ref().is_some_and(|m| length > m.value) {
                    return Ok(false);
                }
                if let Some((pattern, _)) = &merged.pattern {
                    let rewritten = super::regex::re2_pattern(pattern).map_err(|refusal| SchemaError::new("pattern", "", refusal.0))?;
                    let matched = regex_automata::meta::Regex::new(&rewritten).map(|re| re.is_match(text.as_str()));
                    if !matches!(matched, Ok(true)) {
                        return Ok(false);
                    }
                }
            }
            Value::Number(_) => {
                let Some(number) = Decimal::from_json(value) else { return Ok(false) };
                if let Some(lower) = &merged.lower {
                    let order = compare_decimals(&number, &lower.value);
                    if order.is_lt() || (order.is_eq() && lower.exclusive) {
                        return Ok(false);
                    }
                }
                if let Some(upper) = &merged.upper {
                    let order = compare_decimals(&number, &upper.value);
                    if order.is_gt() || (order.is_eq() && upper.exclusive) {
                        return Ok(false);
                    }
                }
                if let Some(step) = merged.step.whole {
                    let remainder = number.int.iter().fold(0u128, |r, d| (r * 10 + *d as u128) % step as u128);
                    if !number.is_integer() || remainder != 0 {
                        return Ok(false);
                    }
                }
                if let Some(digits) = merged.step.fraction_digits {
                    if number.frac.len() > digits {
                        return Ok(false);
                    }
                }
            }
            Value::Array(elements) => {
                let length = elements.len() as u64;
                if length < merged.min_items.value || merged.max_items.as_ref().is_some_and(|m| length > m.value) {
                    return Ok(false);
                }
                if !merged.items.is_empty() {
                    for element in elements.iter().skip(merged.prefix_items) {
                        if !self.parts_accept(&merged.items, element, depth + 1)? {
                            return Ok(false);
                        }
                    }
                }
            }
            Value::Object(members) => {
                for (name, _) in &merged.required {
                    if !members.contains_key(name) {
                        return Ok(false);
                    }
                }
                for (name, member) in members {
                    let mut parts = Vec::new();
                    let declared = merged.property_names().contains(&name.as_str());
                    for object in &merged.objects {
                        let mut matched_any = false;
                        for (pattern, part) in &object.patterns {
                            let rewritten = super::regex::re2_pattern(pattern)
                                .map_err(|refusal| SchemaError::new("patternProperties", "", refusal.0))?;
                            let matched = regex_automata::meta::Regex::new(&rewritten).map(|re| re.is_match(name.as_str()));
                            if matches!(matched, Ok(true)) {
                                matched_any = true;
                                parts.push(part.clone());
                            }
                        }
                        match object.properties.iter().find(|(n, _)| n == name) {
                            Some((_, part)) => parts.push(part.clone()),
                            None if matched_any => {}
                            None => match &object.additional {
                                Additional::Open => {}
                                Additional::Default if declared => {}
                                Additional::Closed | Additional::Default => return Ok(false),
                                Additional::Schema(part) => parts.push(part.clone()),
                            },
                        }
                    }
                    if !parts.is_empty() && !self.parts_accept(&parts, member, depth + 1)? {
                        return Ok(false);
                    }
                }
            }
            _ => {}
        }
        Ok(true)
    }
}
