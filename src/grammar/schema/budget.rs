//! What one schema may cost to compile, and the refusals naming each bound: how deep
//! subschemas nest ([`MAX_SCHEMA_DEPTH`]), how deep the schema document itself nests
//! ([`MAX_DOCUMENT_DEPTH`]), and how many grammar symbols it may expand into
//! ([`MAX_SCHEMA_SYMBOLS`]).
//!
//! The symbol budget is charged while the grammar is built, not after: the builder counts every
//! symbol it is given, the compiler checks the count before each subschema, and what grows
//! with the input text (an `enum` or `const` value written out, property names) is measured and
//! checked before it is built. So a schema too large to compile is refused having allocated
//! about its own size, not the hundreds of megabytes its expansion would take.
//!
//! Cost: one pass over the schema document for its depth (no recursion); each `enum`/`const`
//! member's JSON text is written once (the compiler keys its rules by it) before it is built.

use serde_json::Value;

use super::keywords::child_location;
use super::part::Part;
use super::SchemaError;

/// Deepest nesting of subschemas compiled inside one another: a property's schema inside its
/// object's, an item's, an `anyOf`/`oneOf` alternative's, each one level, counted through
/// `$ref` (a chain `d0 -> d1 -> ...` nests as deep as it is long). Each level is a few frames
/// of the compiler's recursion (about 1.5 KiB of stack), so this bounds the stack one schema
/// can use. A recursive `$ref` compiles once however deep documents nest through it: that
/// depth is the automaton's bound on open rules (`Limits::max_stack_depth`).
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// Deepest nesting of arrays and objects in the schema document itself: serde_json's own
/// parsing limit, so no schema parsed from text is refused by it. It bounds the walks over
/// `enum`/`const` values that follow their nesting.
pub const MAX_DOCUMENT_DEPTH: usize = 128;

/// Most grammar symbols one schema may expand into: the automaton's default
/// `Limits::max_symbols`, which it would refuse anyway, reached here while building.
pub const MAX_SCHEMA_SYMBOLS: usize = 2_000_000;

/// The refusal of a conjunction nested past [`MAX_SCHEMA_DEPTH`], at the part that nested it
/// (the last one added: a property's schema, an item's, an alternative, a `$ref`).
pub(crate) fn too_deep(parts: &[Part<'_>]) -> SchemaError {
    let Some(part) = parts.last() else {
        return SchemaError::new("schema", "", format!("which nests subschemas more than {MAX_SCHEMA_DEPTH} deep"));
    };
    let keyword = if part.schema.get("$ref").is_some() {
        "$ref"
    } else {
        let mut segments = part.location.rsplit('.');
        let (last, before) = (segments.next().unwrap_or(""), segments.next().unwrap_or(""));
        match (last, before) {
            ("items" | "additionalProperties", _) => last,
            (_, "properties" | "patternProperties" | "anyOf" | "oneOf" | "allOf") => before,
            _ => "schema",
        }
    };
    SchemaError::new(
        keyword,
        &part.location,
        format!(
            "which nests subschemas more than {MAX_SCHEMA_DEPTH} deep (each property, item, anyOf/oneOf alternative and \
             $ref target inside another counts one level); flatten the schema, or make a repeated shape one recursive $ref"
        ),
    )
}

/// The refusal of a schema whose grammar would pass [`MAX_SCHEMA_SYMBOLS`]: with `adding`
/// symbols measured before they are built (an `enum` value, property names), or, when
/// `adding` is 0, found at a check between subschemas with `built` symbols already built.
pub(crate) fn too_large(keyword: &str, location: &str, adding: usize, built: usize) -> SchemaError {
    let what = if adding > 0 {
        format!("which would add {adding} grammar symbols to the {built} already built")
    } else {
        format!("which expands into {built} grammar symbols")
    };
    SchemaError::new(
        keyword,
        location,
        format!(
            "{what}; a schema compiles to at most {MAX_SCHEMA_SYMBOLS} (about one per byte of literal text), so it is \
             refused before it is built: make its values shorter or fewer, or its bounds smaller"
        ),
    )
}

/// Refuses a schema document nested deeper than [`MAX_DOCUMENT_DEPTH`], naming where.
pub(crate) fn check_document_depth(schema: &Value) -> Result<(), SchemaError> {
    enum Children<'a> {
        Members(serde_json::map::Iter<'a>),
        Elements(std::iter::Enumerate<std::slice::Iter<'a, Value>>),
    }
    fn children(value: &Value) -> Option<Children<'_>> {
        match value {
            Value::Object(members) => Some(Children::Members(members.iter())),
            Value::Array(elements) => Some(Children::Elements(elements.iter().enumerate())),
            _ => None,
        }
    }
    let Some(root) = children(schema) else { return Ok(()) };
    let mut open = vec![root];
    // The location of each open container below the root.
    let mut path: Vec<String> = Vec::new();
    while let Some(top) = open.last_mut() {
        let next = match top {
            Children::Members(members) => members.next().map(|(name, child)| (name.clone(), child)),
            Children::Elements(elements) => elements.next().map(|(index, child)| (index.to_string(), child)),
        };
        let Some((key, child)) = next else {
            open.pop();
            path.pop();
            continue;
        };
        let Some(grandchildren) = children(child) else { continue };
        let location = child_location(path.last().map_or("", String::as_str), &key);
        if open.len() >= MAX_DOCUMENT_DEPTH {
            return Err(SchemaError::new(
                "schema",
                &location,
                format!("which nests arrays and objects more than {MAX_DOCUMENT_DEPTH} deep; JSON parsers refuse deeper documents"),
            ));
        }
        path.push(location);
        open.push(grandchildren);
    }
    Ok(())
}
