//! [`Part`]: one subschema that must hold at a position, with where it is in the schema. The
//! compiler (`compile.rs`) builds conjunctions of parts; merging (`merge.rs`) reads them; both
//! depend on this module and merging does not depend on the compiler.
//!
//! Cost: a reference into the schema plus a shared location string.

use std::rc::Rc;

use serde_json::Value;

use super::keywords::child_location;

/// One subschema that must hold, with where it is.
#[derive(Clone, Debug)]
pub struct Part<'a> {
    pub schema: &'a Value,
    pub location: Rc<str>,
    /// Bit 1: its `anyOf` was already split; bit 2: its `oneOf`.
    pub consumed: u8,
}

impl<'a> Part<'a> {
    pub fn new(schema: &'a Value, location: impl Into<Rc<str>>) -> Self {
        Part {
            schema,
            location: location.into(),
            consumed: 0,
        }
    }

    pub(crate) fn key(&self) -> String {
        format!("{}#{}", self.location, self.consumed)
    }

    pub fn child(&self, keyword: &str) -> Option<Part<'a>> {
        let schema = self.schema.as_object()?.get(keyword)?;
        Some(Part::new(schema, child_location(&self.location, keyword)))
    }
}
