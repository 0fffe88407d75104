//! The extraction prompts of issue 50 (testdata/extraction/prompts.json): orders, tickets,
//! invoices and contacts, each a short text and a closed object schema asking for its fields.
//! The accelerate tests and the extraction bench send the same messages.

use serde_json::Value;

/// One extraction task.
#[derive(Debug, Clone)]
pub struct ExtractionPrompt {
    pub name: String,
    pub text: String,
    pub schema: Value,
}

impl ExtractionPrompt {
    /// The user message: the instruction, then the text.
    pub fn message(&self) -> String {
        format!("Extract the fields of this text as JSON.\n\n{}", self.text)
    }
}

/// Every prompt, in file order.
pub fn extraction_prompts() -> Vec<ExtractionPrompt> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/extraction/prompts.json");
    let text = std::fs::read_to_string(path).expect("testdata/extraction/prompts.json");
    let entries: Vec<Value> = serde_json::from_str(&text).expect("the prompts are JSON");
    entries
        .into_iter()
        .map(|entry| ExtractionPrompt {
            name: entry["name"].as_str().expect("name").to_string(),
            text: entry["text"].as_str().expect("text").to_string(),
            schema: entry["schema"].clone(),
        })
        .collect()
}
