//! JSON pointers to every node of a value, for the fuzzers that pick a node to mutate
//! (`tests/http_fuzz.rs` on request bodies, `benches/fuzz_constraints.rs` on schemas).
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
