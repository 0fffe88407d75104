//! The items file of `llamay eval`: JSON Lines, one item a line, all of one kind (raw prompts
//! or conversations), ids unique; and which items a results file has not answered yet. Under
//! `-score` every item is a raw prompt with `choices` (non-empty strings, at most
//! [`MAX_CHOICES`]) and an optional `answer` (the index of the right choice).
//!
//! Key types: [`Item`], [`ItemInput`]. Entry point: [`read_items`]. Cost: one read of the file.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::cli::CliError;

/// What an item asks.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemInput {
    Prompt(String),
    /// (role, content) pairs, as written.
    Messages(Vec<(String, String)>),
}

/// Choices one item may have under `-score` (each is one scoring request).
pub const MAX_CHOICES: usize = 128;

/// One line of the items file.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The id as written (a string or an integer), echoed into its result line.
    pub id: Value,
    pub input: ItemInput,
    /// The continuations `-score` scores (empty without `-score`).
    pub choices: Vec<String>,
    /// The index of the right choice, when the item says.
    pub answer: Option<usize>,
}

/// The key two equal ids share (`"1"` and `1` differ, as in JSON).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

fn bad_line(path: &Path, line: usize, what: impl std::fmt::Display) -> CliError {
    CliError::Usage(format!("{}:{line}: {what}", path.display()))
}

/// `choices` and `answer` of a `-score` item (named by its id), or their absence elsewhere.
fn parse_choices(
    path: &Path,
    line: usize,
    object: &serde_json::Map<String, Value>,
    id: &Value,
    score: bool,
) -> Result<(Vec<String>, Option<usize>), CliError> {
    let bad = |what: String| bad_line(path, line, format!("item {id}: {what}"));
    if !score {
        return match ["choices", "answer"]
            .into_iter()
            .find(|key| object.contains_key(*key))
        {
            Some(key) => Err(bad(format!("{key} is for scoring; run with -score"))),
            None => Ok((Vec::new(), None)),
        };
    }
    let Some(Value::Array(listed)) = object.get("choices") else {
        return Err(bad(
            "-score needs choices: an array of strings, each a continuation of the prompt".into(),
        ));
    };
    if listed.is_empty() {
        return Err(bad("choices is empty; give at least one".into()));
    }
    if listed.len() > MAX_CHOICES {
        return Err(bad(format!(
            "choices has {}; at most {MAX_CHOICES} per item",
            listed.len()
        )));
    }
    let mut choices = Vec::with_capacity(listed.len());
    for (index, choice) in listed.iter().enumerate() {
        match choice {
            Value::String(text) if !text.is_empty() => choices.push(text.clone()),
            Value::String(_) => return Err(bad(format!("choices[{index}] is empty"))),
            other => return Err(bad(format!("choices[{index}] is {other}, not a string"))),
        }
    }
    let answer = match object.get("answer") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64().and_then(|a| usize::try_from(a).ok()) {
            Some(answer) if answer < choices.len() => Some(answer),
            _ => {
                return Err(bad(format!(
                    "answer is {n}; it is the index of the right choice, 0 to {}",
                    choices.len() - 1
                )))
            }
        },
        Some(other) => {
            return Err(bad(format!(
                "answer is {other}; it is the index of the right choice, 0 to {}",
                choices.len() - 1
            )))
        }
    };
    Ok((choices, answer))
}

fn parse_item(path: &Path, line: usize, text: &str, score: bool) -> Result<Item, CliError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad_line(path, line, format!("not JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(bad_line(
            path,
            line,
            "an item is a JSON object with id and prompt or messages",
        ));
    };
    let id = match object.get("id") {
        Some(id @ Value::String(_)) => id.clone(),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => id.clone(),
        Some(other) => {
            return Err(bad_line(
                path,
                line,
                format!("id is {other}; use a string or an integer"),
            ))
        }
        None => return Err(bad_line(path, line, "no id")),
    };
    let input = match (object.get("prompt"), object.get("messages")) {
        (Some(_), Some(_)) => {
            return Err(bad_line(path, line, "give prompt or messages, not both"))
        }
        (Some(Value::String(prompt)), None) => ItemInput::Prompt(prompt.clone()),
        (Some(_), None) => return Err(bad_line(path, line, "prompt must be a string")),
        (None, Some(Value::Array(messages))) if !messages.is_empty() => {
            let mut pairs = Vec::with_capacity(messages.len());
            for (index, message) in messages.iter().enumerate() {
                let role = message.get("role").and_then(Value::as_str);
                let content = message.get("content").and_then(Value::as_str);
                let (Some(role), Some(content)) = (role, content) else {
                    return Err(bad_line(
                        path,
                        line,
                        format!("messages[{index}] needs a string role and a string content"),
                    ));
                };
                if !["system", "user", "assistant"].contains(&role) {
                    return Err(bad_line(
                        path,
                        line,
                        format!(
                            "messages[{index}].role is {role:?}; use system, user or assistant"
                        ),
                    ));
                }
                pairs.push((role.to_string(), content.to_string()));
            }
            ItemInput::Messages(pairs)
        }
        (None, Some(_)) => return Err(bad_line(path, line, "messages must be a non-empty array")),
        (None, None) => return Err(bad_line(path, line, "no prompt and no messages")),
    };
    if score && matches!(input, ItemInput::Messages(_)) {
        return Err(bad_line(
            path,
            line,
            format!("item {id}: -score takes prompt items (raw text the choices continue), not messages"),
        ));
    }
    let (choices, answer) = parse_choices(path, line, &object, &id, score)?;
    Ok(Item {
        id,
        input,
        choices,
        answer,
    })
}

/// Reads and checks the items file: every line an item, ids unique, all of one kind; with
/// `score`, every item a prompt with choices.
pub fn read_items(path: &Path, score: bool) -> Result<Vec<Item>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let mut items = Vec::new();
    let mut first_line_of: std::collections::HashMap<String, usize> = Default::default();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let item = parse_item(path, number, line, score)?;
        if let Some(first) = first_line_of.insert(id_key(&item.id), number) {
            return Err(bad_line(
                path,
                number,
                format!("id {} repeats the id of line {first}", item.id),
            ));
        }
        if let Some(first) = items.first() {
            let same_kind = |a: &Item| matches!(a.input, ItemInput::Prompt(_));
            if same_kind(first) != same_kind(&item) {
                return Err(bad_line(
                    path,
                    number,
                    "mixes prompt and messages items; one file holds one kind",
                ));
            }
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(CliError::Usage(format!("{}: no items", path.display())));
    }
    Ok(items)
}

/// The items whose id no result line holds yet, in file order.
pub fn pending<'a>(items: &'a [Item], done: &HashSet<String>) -> Vec<&'a Item> {
    items
        .iter()
        .filter(|item| !done.contains(&id_key(&item.id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items_from(text: &str) -> Result<Vec<Item>, CliError> {
        read_from(text, false)
    }

    fn read_from(text: &str, score: bool) -> Result<Vec<Item>, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("items.jsonl");
        std::fs::write(&path, text).unwrap();
        read_items(&path, score)
    }

    #[test]
    fn scoring_items_have_choices_and_an_answer_in_range() {
        let items = read_from(
            "{\"id\": 1, \"prompt\": \"The sky is\", \"choices\": [\" blue\", \" green\"], \"answer\": 0}\n{\"id\": 2, \"prompt\": \"x\", \"choices\": [\" y\"]}",
            true,
        )
        .unwrap();
        assert_eq!(
            items[0].choices,
            vec![" blue".to_string(), " green".to_string()]
        );
        assert_eq!((items[0].answer, items[1].answer), (Some(0), None));
        let refused = |line: &str| read_from(line, true).unwrap_err().to_string();
        let error = refused("{\"id\": \"q\", \"prompt\": \"x\"}");
        assert!(
            error.contains(":1: item \"q\": -score needs choices"),
            "{error}"
        );
        let error = refused("{\"id\": 3, \"prompt\": \"x\", \"choices\": []}");
        assert!(error.contains("item 3: choices is empty"), "{error}");
        let error = refused("{\"id\": 3, \"prompt\": \"x\", \"choices\": [\"a\", \"\"]}");
        assert!(error.contains("item 3: choices[1] is empty"), "{error}");
        let error = refused("{\"id\": 3, \"prompt\": \"x\", \"choices\": [\"a\", 7]}");
        assert!(error.contains("choices[1] is 7, not a string"), "{error}");
        let error =
            refused("{\"id\": 3, \"prompt\": \"x\", \"choices\": [\"a\", \"b\"], \"answer\": 2}");
        assert!(
            error.contains("item 3: answer is 2; it is the index of the right choice, 0 to 1"),
            "{error}"
        );
        let error =
            refused("{\"id\": 3, \"prompt\": \"x\", \"choices\": [\"a\"], \"answer\": \"a\"}");
        assert!(error.contains("item 3: answer is \"a\""), "{error}");
        let error = refused("{\"id\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"choices\": [\"a\"]}");
        assert!(
            error.contains("item 4: -score takes prompt items"),
            "{error}"
        );
        let error = items_from("{\"id\": 5, \"prompt\": \"x\", \"choices\": [\"a\"]}")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("item 5: choices is for scoring; run with -score"),
            "{error}"
        );
    }

    #[test]
    fn both_kinds_of_item_parse_and_blank_lines_are_skipped() {
        let items =
            items_from("{\"id\": \"a\", \"prompt\": \"x\"}\n\n{\"id\": 2, \"prompt\": \"y\"}\n")
                .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].id, json!(2));
        let chat =
            items_from("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
                .unwrap();
        assert_eq!(
            chat[0].input,
            ItemInput::Messages(vec![("user".into(), "hi".into())])
        );
    }

    #[test]
    fn bad_lines_are_named_by_number() {
        let error = items_from("{\"id\": 1, \"prompt\": \"x\"}\n{not json\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("items.jsonl:2: not JSON"), "{error}");
        let error =
            items_from("{\"id\": 1, \"prompt\": \"x\"}\n\n{\"id\": 1, \"prompt\": \"y\"}\n")
                .unwrap_err()
                .to_string();
        assert!(
            error.contains(":3: id 1 repeats the id of line 1"),
            "{error}"
        );
        let error = items_from("{\"prompt\": \"x\"}").unwrap_err().to_string();
        assert!(error.contains(":1: no id"), "{error}");
        let error = items_from("{\"id\": 1.5, \"prompt\": \"x\"}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("use a string or an integer"), "{error}");
        let mixed = "{\"id\": 1, \"prompt\": \"x\"}\n{\"id\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"y\"}]}";
        assert!(items_from(mixed)
            .unwrap_err()
            .to_string()
            .contains(":2: mixes prompt and messages"));
        assert!(items_from("\n\n")
            .unwrap_err()
            .to_string()
            .contains("no items"));
    }

    #[test]
    fn string_and_number_ids_differ_and_answered_ones_are_skipped() {
        let items =
            items_from("{\"id\": \"1\", \"prompt\": \"x\"}\n{\"id\": 1, \"prompt\": \"y\"}\n")
                .unwrap();
        let done: HashSet<String> = [id_key(&json!("1"))].into_iter().collect();
        let left: Vec<&Value> = pending(&items, &done).iter().map(|i| &i.id).collect();
        assert_eq!(left, vec![&json!(1)]);
    }
}
