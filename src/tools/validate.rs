//! Checks shared by the three API shapes before a request with tools reaches a model: names
//! present and unique, `parameters` describing an object, no hosted tool types, and a
//! `tool_choice` that names a tool actually offered.
//!
//! Cost: linear in the number of tools (names are compared through a hash map).

use std::collections::HashMap;

use serde_json::Value;

use super::ToolError;
use crate::core::{ToolChoice, ToolSpec};

/// Most tools one request may offer (OpenAI's own limit). Each costs its schema's grammar in a
/// forced call and its description in the prompt.
pub const MAX_TOOLS: usize = 128;

/// Tool types a client declares and runs itself: OpenAI and Ollama `function`, Anthropic
/// `custom` (what an Anthropic client tool's absent `type` means).
const CLIENT_TOOL_TYPES: &[&str] = &["function", "custom"];

/// Families of hosted tools. A type is hosted when it is one of these or one of these followed
/// by `_` and a version (`web_search_20250305`, `text_editor_20250728`, `computer_use_preview`).
const HOSTED_TOOL_FAMILIES: &[&str] = &[
    "web_search",
    "web_fetch",
    "file_search",
    "code_interpreter",
    "code_execution",
    "computer",
    "bash",
    "text_editor",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "memory",
    "tool_search",
];

/// Refuses a tool `type` llamay cannot honour: hosted tools by name, anything else unknown.
/// The APIs call this on each tool's `type` field when the tool has one.
pub fn check_hosted_type(type_name: &str) -> Result<(), ToolError> {
    if CLIENT_TOOL_TYPES.contains(&type_name) {
        return Ok(());
    }
    let lowered = type_name.to_ascii_lowercase();
    let hosted = HOSTED_TOOL_FAMILIES
        .iter()
        .any(|family| lowered == *family || lowered.strip_prefix(family).is_some_and(|rest| rest.starts_with('_')));
    if hosted {
        Err(ToolError::HostedTool { type_name: type_name.to_string() })
    } else {
        Err(ToolError::UnknownToolType { type_name: type_name.to_string() })
    }
}

/// Names present and unique, at most [`MAX_TOOLS`], each `parameters` an object schema (or
/// absent, i.e. `null`: a tool without arguments). Schemas are not compiled here; see
/// [`super::forced_call_grammar`] for refused keywords.
pub fn validate_tools(tools: &[ToolSpec]) -> Result<(), ToolError> {
    if tools.len() > MAX_TOOLS {
        return Err(ToolError::TooManyTools { count: tools.len(), max: MAX_TOOLS });
    }
    let mut first_index: HashMap<&str, usize> = HashMap::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        if tool.name.trim().is_empty() {
            return Err(ToolError::MissingName { index });
        }
        if let Some(&first) = first_index.get(tool.name.as_str()) {
            return Err(ToolError::DuplicateName { name: tool.name.clone(), first, index });
        }
        first_index.insert(tool.name.as_str(), index);
        check_parameters(tool)?;
    }
    Ok(())
}

/// `Required` and `Named` need tools to choose from, and a named tool must be one offered.
pub fn validate_choice(tools: &[ToolSpec], choice: &ToolChoice) -> Result<(), ToolError> {
    match choice {
        ToolChoice::Auto | ToolChoice::None => Ok(()),
        ToolChoice::Required if tools.is_empty() => Err(ToolError::NoToolsToChoose { choice: "required".to_string() }),
        ToolChoice::Required => Ok(()),
        ToolChoice::Named(name) if tools.is_empty() => Err(ToolError::NoToolsToChoose { choice: name.clone() }),
        ToolChoice::Named(name) => {
            if tools.iter().any(|tool| &tool.name == name) {
                Ok(())
            } else {
                let offered: Vec<String> = tools.iter().map(|tool| format!("{:?}", tool.name)).collect();
                Err(ToolError::UnknownChoice { name: name.clone(), offered: offered.join(", ") })
            }
        }
    }
}

fn check_parameters(tool: &ToolSpec) -> Result<(), ToolError> {
    let refuse = |found: String| Err(ToolError::ParametersNotObject { name: tool.name.clone(), found });
    let schema = match &tool.parameters {
        Value::Null => return Ok(()),
        Value::Object(schema) => schema,
        other => return refuse(describe_kind(other)),
    };
    match schema.get("type") {
        None => Ok(()),
        Some(Value::String(kind)) if kind == "object" => Ok(()),
        Some(Value::Array(kinds)) if kinds.len() == 1 && kinds.first().is_some_and(|k| k == "object") => Ok(()),
        Some(other) => refuse(format!("a schema with \"type\": {other}")),
    }
}

fn describe_kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean schema {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec { name: name.to_string(), description: None, parameters }
    }

    fn weather() -> ToolSpec {
        tool("get_weather", json!({"type": "object", "properties": {"city": {"type": "string"}}}))
    }

    #[test]
    fn accepts_well_formed_tools() {
        let tools = vec![weather(), tool("no_args", Value::Null), tool("implied", json!({"properties": {}}))];
        assert_eq!(validate_tools(&tools), Ok(()));
    }

    #[test]
    fn refuses_a_tool_without_a_name() {
        let tools = vec![weather(), tool("  ", json!({"type": "object"}))];
        let error = validate_tools(&tools).unwrap_err();
        assert_eq!(error, ToolError::MissingName { index: 1 });
        assert!(error.to_string().contains("tools[1] has no name"), "{error}");
    }

    #[test]
    fn refuses_duplicate_names_naming_both_positions() {
        let tools = vec![weather(), tool("other", Value::Null), weather()];
        let error = validate_tools(&tools).unwrap_err();
        assert_eq!(error, ToolError::DuplicateName { name: "get_weather".into(), first: 0, index: 2 });
        assert!(error.to_string().contains("\"get_weather\""), "{error}");
    }

    #[test]
    fn refuses_parameters_that_are_not_an_object_schema() {
        for (parameters, expect) in [
            (json!({"type": "string"}), "\"type\": \"string\""),
            (json!({"type": ["object", "null"]}), "\"type\": [\"object\",\"null\"]"),
            (json!("object"), "a string"),
            (json!([{"type": "object"}]), "an array"),
            (json!(true), "boolean schema true"),
        ] {
            let error = validate_tools(&[tool("t", parameters.clone())]).unwrap_err();
            assert!(matches!(error, ToolError::ParametersNotObject { ref name, .. } if name == "t"), "{parameters}");
            assert!(error.to_string().contains(expect), "{parameters}: {error}");
        }
    }

    #[test]
    fn refuses_too_many_tools() {
        let tools: Vec<ToolSpec> = (0..=MAX_TOOLS).map(|i| tool(&format!("t{i}"), Value::Null)).collect();
        assert_eq!(validate_tools(&tools), Err(ToolError::TooManyTools { count: MAX_TOOLS + 1, max: MAX_TOOLS }));
        assert_eq!(validate_tools(&tools[..MAX_TOOLS]), Ok(()));
    }

    #[test]
    fn hosted_types_are_refused_by_name() {
        for hosted in [
            "web_search",
            "web_search_preview",
            "code_interpreter",
            "file_search",
            "computer_use_preview",
            "web_search_20250305",
            "bash_20250124",
            "text_editor_20250728",
            "code_execution_20250522",
            "computer_20241022",
            "mcp",
        ] {
            let error = check_hosted_type(hosted).unwrap_err();
            assert_eq!(error, ToolError::HostedTool { type_name: hosted.to_string() });
            assert!(error.to_string().contains(hosted), "{error}");
        }
        assert_eq!(check_hosted_type("function"), Ok(()));
        assert_eq!(check_hosted_type("custom"), Ok(()));
        assert!(matches!(check_hosted_type("bashful"), Err(ToolError::UnknownToolType { .. })));
        assert!(matches!(check_hosted_type("retrieval"), Err(ToolError::UnknownToolType { .. })));
    }

    #[test]
    fn choice_must_name_an_offered_tool() {
        let tools = vec![weather(), tool("get_time", Value::Null)];
        assert_eq!(validate_choice(&tools, &ToolChoice::Named("get_time".into())), Ok(()));
        let error = validate_choice(&tools, &ToolChoice::Named("get_news".into())).unwrap_err();
        assert_eq!(error.param(), "tool_choice");
        let text = error.to_string();
        assert!(text.contains("\"get_news\"") && text.contains("\"get_weather\", \"get_time\""), "{text}");
        assert_eq!(validate_choice(&tools, &ToolChoice::Required), Ok(()));
        assert_eq!(validate_choice(&[], &ToolChoice::Auto), Ok(()));
        assert_eq!(validate_choice(&[], &ToolChoice::None), Ok(()));
        assert!(matches!(validate_choice(&[], &ToolChoice::Required), Err(ToolError::NoToolsToChoose { .. })));
        assert!(matches!(
            validate_choice(&[], &ToolChoice::Named("get_weather".into())),
            Err(ToolError::NoToolsToChoose { .. })
        ));
    }

    #[test]
    fn errors_map_to_400_rows_of_the_table() {
        let core: crate::core::CoreError = ToolError::MissingName { index: 0 }.into();
        assert_eq!(core.status(), 400);
        assert_eq!(core.param.as_deref(), Some("tools"));
        let refused = ToolError::SchemaRefused {
            tool: "t".into(),
            keyword: "not".into(),
            location: "properties.a".into(),
            message: "properties.a uses \"not\"".into(),
        };
        assert_eq!(refused.code(), crate::core::ErrorCode::SchemaRefused);
        assert_eq!(crate::core::CoreError::from(refused).status(), 400);
    }
}
