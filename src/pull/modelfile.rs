//! Ollama's Modelfile, the subset that needs no conversion: `FROM` (a model name, a GGUF path
//! or a URL), `PARAMETER`, `SYSTEM`, `TEMPLATE`, `LICENSE`, `#` comments, and `"""` blocks
//! spanning lines. `ADAPTER` and `MESSAGE` are refused by name rather than ignored.
//!
//! Key items: [`parse_modelfile`] -> [`CreateModel`]. Cost: one pass over the text.

use std::collections::BTreeMap;

use crate::core::CreateModel;

/// Why a Modelfile was refused, with its line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Modelfile line {line}: {reason}")]
pub struct ModelfileError {
    pub line: usize,
    pub reason: String,
}

/// A `PARAMETER` value as JSON: numbers and booleans typed, everything else a string.
pub fn parameter_value(text: &str) -> serde_json::Value {
    let unquoted = text.trim();
    if let Some(inner) = unquoted.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        return serde_json::Value::String(inner.to_string());
    }
    if let Ok(integer) = unquoted.parse::<i64>() {
        return integer.into();
    }
    if let Ok(float) = unquoted.parse::<f64>() {
        return float.into();
    }
    match unquoted {
        "true" => true.into(),
        "false" => false.into(),
        _ => serde_json::Value::String(unquoted.to_string()),
    }
}

/// Adds `key value` to `parameters`; `stop` may repeat and collects into a list, as in Ollama.
pub fn add_parameter(parameters: &mut BTreeMap<String, serde_json::Value>, key: &str, value: &str) {
    let value = parameter_value(value);
    if key == "stop" {
        let stops = parameters
            .entry(key.to_string())
            .or_insert_with(|| serde_json::json!([]));
        if let Some(list) = stops.as_array_mut() {
            list.push(value);
        }
    } else {
        parameters.insert(key.to_string(), value);
    }
}

/// Parses `text` into a create request for `name`.
pub fn parse_modelfile(name: &str, text: &str) -> Result<CreateModel, ModelfileError> {
    let mut request = CreateModel {
        name: name.to_string(),
        allow_paths: true,
        ..Default::default()
    };
    let mut lines = text.lines().enumerate();
    while let Some((index, raw)) = lines.next() {
        let line_number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (command, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let error = |reason: String| ModelfileError {
            line: line_number,
            reason,
        };
        let mut argument = rest.trim().to_string();
        if let Some(opened) = argument.strip_prefix("\"\"\"") {
            // A block: up to the closing """, possibly on a later line.
            let mut block = opened.to_string();
            loop {
                if let Some(end) = block.find("\"\"\"") {
                    block.truncate(end);
                    break;
                }
                let Some((_, next)) = lines.next() else {
                    return Err(error("a \"\"\" block is not closed".to_string()));
                };
                block.push('\n');
                block.push_str(next);
            }
            argument = block;
        }
        match command.to_ascii_uppercase().as_str() {
            "FROM" if argument.is_empty() => return Err(error("FROM needs a model".into())),
            "FROM" => request.from = argument,
            "PARAMETER" => {
                let (key, value) = argument
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| error("PARAMETER needs a name and a value".into()))?;
                add_parameter(&mut request.parameters, key.trim(), value);
            }
            "SYSTEM" => request.system = Some(argument),
            "TEMPLATE" => request.template = Some(argument),
            "LICENSE" => request.license.push(argument),
            other @ ("ADAPTER" | "MESSAGE" | "REQUIRES") => {
                return Err(error(format!("{other} is not supported by llamay")))
            }
            other => return Err(error(format!("unknown instruction '{other}'"))),
        }
    }
    if request.from.is_empty() {
        return Err(ModelfileError {
            line: 0,
            reason: "it has no FROM line".to_string(),
        });
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_modelfile() {
        let text = "# a comment\nFROM smollm2:135m\nPARAMETER temperature 0.2\nPARAMETER num_ctx 512\n\
                    PARAMETER stop <|im_end|>\nPARAMETER stop \"User:\"\nSYSTEM \"\"\"You are terse.\nVery.\"\"\"\n\
                    LICENSE MIT\n";
        let request = parse_modelfile("terse", text).unwrap();
        assert_eq!(request.from, "smollm2:135m");
        assert_eq!(request.parameters["temperature"], serde_json::json!(0.2));
        assert_eq!(request.parameters["num_ctx"], serde_json::json!(512));
        assert_eq!(
            request.parameters["stop"],
            serde_json::json!(["<|im_end|>", "User:"])
        );
        assert_eq!(request.system.as_deref(), Some("You are terse.\nVery."));
        assert_eq!(request.license, ["MIT"]);
        assert!(request.allow_paths);
    }

    #[test]
    fn refusals_name_the_line() {
        let error = parse_modelfile("x", "FROM a\nADAPTER ./lora.gguf\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.reason.contains("ADAPTER"));
        assert_eq!(
            parse_modelfile("x", "SYSTEM hi\n").unwrap_err().reason,
            "it has no FROM line"
        );
        assert!(parse_modelfile("x", "FROM a\nSYSTEM \"\"\"open\n")
            .unwrap_err()
            .reason
            .contains("not closed"));
        assert!(parse_modelfile("x", "FROM a\nFOO b\n")
            .unwrap_err()
            .reason
            .contains("FOO"));
    }
}
