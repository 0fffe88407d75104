//! JSON pointers to every node of a value, and removing the node one names, for the fuzzers
//! that mutate a node (`tests/it/http_fuzz.rs` on request bodies, `benches/fuzz_constraints.rs` on
//! schemas).
//! Cost: one string per node.

use serde_json::Value;

/// Every node of `value`, depth first, as RFC 6901 pointers ("" is the root).
pub fn all_pointers(value: &Value) -> Vec<String> {
    let mut into = Vec::new();
    collect(value, String::new(), &mut into);
    into
}

fn collect(value: &Value, at: String, into: &mut Vec<String>) {
    into.push(at.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                collect(child, format!("{at}/{escaped}"), into);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                collect(child, format!("{at}/{index}"), into);
            }
        }
        _ => {}
    }
}

/// Removes the node `pointer` names (a key of an object or an item of an array); the root and
/// pointers to nothing are left alone.
pub fn remove_at(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = last.parse::<usize>() {
                if index < items.len() {
                    items.remove(index);
                }
            }
        }
        _ => {}
    }
}
