//! Tool handling the three API shapes share: a declared client tool as a [`ToolSpec`]
//! ([`client_tool`]), the declared tools with the choice among them checked together
//! ([`checked_tools`]: the pure checks of `crate::tools`, before a request reaches a model, so a
//! bad tool list is a 400 in the route's own error shape without loading anything), an earlier
//! turn's calls with their ids ([`earlier_calls`]), and reading an OpenAI-style `tool_choice`
//! value (the OpenAI routes, and the Ollama route's llamay extension of the same name).
//!
//! Cost: linear in the number of tools; no schema is compiled here (the model worker's
//! `plan_tool_use` compiles them and refuses a schema keyword by the tool's name).

use serde_json::{json, Value};

use crate::core::{ToolCall, ToolChoice, ToolSpec};
use crate::error::CoreError;
use crate::tools::{check_hosted_type, validate_choice, validate_tools};

/// `"auto"`, `"none"`, `"required"`, or `{"type": "function", "function": {"name": …}}` (chat)
/// or `{"type": "function", "name": …}` (Responses); absent or `null` means `"auto"`.
pub fn openai_style_choice(choice: Option<&Value>) -> Result<ToolChoice, CoreError> {
    let bad = || {
        CoreError::invalid(
            "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        )
        .with_param("tool_choice")
    };
    match choice {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(text)) => match text.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(bad()),
        },
        Some(object) => {
            if let Some(kind) = object.get("type").and_then(Value::as_str).filter(|kind| *kind != "function") {
                check_tool_type(kind).map_err(|error| error.with_param("tool_choice"))?;
            }
            let name = object
                .pointer("/function/name")
                .or_else(|| object.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            Ok(ToolChoice::Named(name.to_string()))
        }
    }
}

/// A client tool as a request declares it; absent `parameters` take any object.
pub fn client_tool(name: String, description: Option<String>, parameters: Option<Value>) -> ToolSpec {
    ToolSpec { name, description, parameters: parameters.unwrap_or_else(|| json!({"type": "object"})) }
}

/// The tools a request declares, each read by `read` (which refuses a hosted type by name with
/// [`check_tool_type`]), then the choice among them that `choice` reads, checked together.
pub fn checked_tools<T>(
    declared: impl IntoIterator<Item = T>,
    read: impl FnMut(T) -> Result<ToolSpec, CoreError>,
    choice: impl FnOnce() -> Result<ToolChoice, CoreError>,
) -> Result<(Vec<ToolSpec>, ToolChoice), CoreError> {
    let tools = declared.into_iter().map(read).collect::<Result<Vec<_>, _>>()?;
    let choice = choice()?;
    check_tools(&tools, &choice)?;
    Ok((tools, choice))
}

/// The calls an earlier assistant turn made, as `(id, name, arguments)`; a call sent without
/// an id gets `fallback_id(its index)`, so a tool result can name it.
pub fn earlier_calls(
    calls: impl IntoIterator<Item = (Option<String>, String, Value)>,
    fallback_id: impl Fn(usize) -> String,
) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, (id, name, arguments))| ToolCall { id: id.unwrap_or_else(|| fallback_id(i)), name, arguments })
        .collect()
}

/// Refuses a declared tool `type` that is not a client tool (hosted types by name).
pub fn check_tool_type(type_name: &str) -> Result<(), CoreError> {
    check_hosted_type(type_name).map_err(CoreError::from)
}

/// Names present and unique, object schemas, and a `tool_choice` naming an offered tool.
fn check_tools(tools: &[ToolSpec], choice: &ToolChoice) -> Result<(), CoreError> {
    validate_tools(tools)?;
    validate_choice(tools, choice)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_each_choice_form() {
        assert_eq!(openai_style_choice(None).unwrap(), ToolChoice::Auto);
        assert_eq!(
            openai_style_choice(Some(&json!("none"))).unwrap(),
            ToolChoice::None
        );
        assert_eq!(
            openai_style_choice(Some(&json!("required"))).unwrap(),
            ToolChoice::Required
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(
            openai_style_choice(Some(&named)).unwrap(),
            ToolChoice::Named("get_weather".into())
        );
        let flat = json!({"type": "function", "name": "get_weather"});
        assert_eq!(openai_style_choice(Some(&flat)).unwrap(), ToolChoice::Named("get_weather".into()));
        let hosted = openai_style_choice(Some(&json!({"type": "web_search_preview"}))).unwrap_err();
        assert!(hosted.message.contains("web_search_preview"), "{}", hosted.message);
        assert!(openai_style_choice(Some(&json!("sometimes"))).is_err());
        assert!(openai_style_choice(Some(&json!({"type": "function"}))).is_err());
    }

    #[test]
    fn unknown_named_tool_and_hosted_types_are_400s_naming_them() {
        let tools = vec![ToolSpec {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object"}),
        }];
        let error = check_tools(&tools, &ToolChoice::Named("get_news".into())).unwrap_err();
        assert_eq!(error.status(), 400);
        assert!(error.message.contains("get_news"), "{}", error.message);
        let error = check_tool_type("code_interpreter").unwrap_err();
        assert_eq!(error.status(), 400);
        assert!(
            error.message.contains("code_interpreter"),
            "{}",
            error.message
        );
    }
}
