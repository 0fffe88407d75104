//! The grammar of a forced tool call (`tool_choice` `required` or a named tool): one or more
//! `<tool_call>\n{"name": "<tool>", "arguments": <args>}\n</tool_call>` blocks separated by
//! `\n` (exactly one when parallel calls are off, or when the choice names the tool: OpenAI's
//! "call exactly one specific function"), where `<tool>` is an offered name and
//! `<args>` matches that tool's own `parameters` schema. Each schema is compiled on its own by
//! the JSON Schema front end and embedded as sub-rules ([`embed_grammar`]), so the arguments of
//! every call are constrained by the schema of the tool it names.
//!
//! Cost: one schema compilation per selected tool plus six wrapper rules and one per tool (128
//! two-property tools: about 10 ms to build and 10 ms to compile, release build); the structural
//! whitespace budget is the schema front end's, shared by all calls of an answer.

use serde_json::{Map, Value};

use super::validate::validate_choice;
use super::ToolError;
use crate::core::{ToolChoice, ToolSpec};
use crate::grammar::ir::{literal_symbols, ByteSet, Grammar, GrammarBuilder, RuleId, Symbol};
use crate::grammar::schema::{compile_schema, WHITESPACE_BUDGET};

/// Copies every rule of `grammar` into `builder`, renumbering its rule references, and
/// returns where its root now is. Rule names get `prefix` so messages say which part failed.
pub fn embed_grammar(builder: &mut GrammarBuilder, grammar: Grammar, prefix: &str) -> RuleId {
    // An offset past u32 leaves references that CompiledGrammar refuses as dangling; no
    // grammar within Limits comes near it.
    let offset = u32::try_from(builder.rule_count()).unwrap_or(u32::MAX);
    let shift = |id: RuleId| RuleId(id.0.saturating_add(offset));
    for rule in grammar.rules {
        let alternatives = rule
            .alternatives
            .into_iter()
            .map(|sequence| {
                sequence
                    .into_iter()
                    .map(|symbol| match symbol {
                        Symbol::Rule(id) => Symbol::Rule(shift(id)),
                        other => other,
                    })
                    .collect()
            })
            .collect();
        builder.add(format!("{prefix}{}", rule.name), alternatives);
    }
    shift(grammar.root)
}

/// The grammar for a forced call. `choice` picks the tools (`Required`, or `Auto`: all of them;
/// `Named`: that one, called once); `parallel: false` allows exactly one call. Refuses a choice
/// naming a tool not offered, and a tool whose schema the constraint cannot honour (naming the
/// tool, the keyword and where it is in `parameters`).
pub fn forced_call_grammar(tools: &[ToolSpec], choice: &ToolChoice, parallel: bool) -> Result<Grammar, ToolError> {
    let selected = selected_tools(tools, choice)?;
    let compiled = selected
        .into_iter()
        .map(|tool| Ok((tool, compile_arguments_schema(tool)?)))
        .collect::<Result<Vec<_>, ToolError>>()?;
    Ok(assemble_forced_grammar(compiled, allows_several_calls(choice, parallel)))
}

/// Whether an answer under `choice` may hold more than one call: not when parallel calls are
/// off, and not when the choice names the tool, which asks for that one call.
pub(crate) fn allows_several_calls(choice: &ToolChoice, parallel: bool) -> bool {
    parallel && !matches!(choice, ToolChoice::Named(_))
}

/// The tools a forced `choice` lets the model call, after checking the choice.
fn selected_tools<'a>(tools: &'a [ToolSpec], choice: &ToolChoice) -> Result<Vec<&'a ToolSpec>, ToolError> {
    validate_choice(tools, choice)?;
    let selected: Vec<&ToolSpec> = match choice {
        ToolChoice::Named(name) => tools.iter().filter(|tool| &tool.name == name).collect(),
        ToolChoice::Required | ToolChoice::Auto => tools.iter().collect(),
        ToolChoice::None => Vec::new(),
    };
    if selected.is_empty() {
        return Err(ToolError::NoToolsToChoose { choice: choice_label(choice) });
    }
    Ok(selected)
}

/// The grammar of one tool's arguments, or the refusal naming the tool and the keyword.
pub fn compile_arguments_schema(tool: &ToolSpec) -> Result<Grammar, ToolError> {
    compile_schema(&arguments_schema(&tool.parameters)).map_err(|error| ToolError::SchemaRefused {
        tool: tool.name.clone(),
        keyword: error.keyword.clone(),
        location: error.location.clone(),
        message: format!("parameters: {error}"),
    })
}

/// The wrapper around each selected tool's compiled arguments grammar.
pub(crate) fn assemble_forced_grammar(selected: Vec<(&ToolSpec, Grammar)>, parallel: bool) -> Grammar {
    let mut builder = GrammarBuilder::new();
    let mut bodies = Vec::with_capacity(selected.len());
    for (tool, arguments) in selected {
        let arguments_root = embed_grammar(&mut builder, arguments, &format!("{}.arguments.", tool.name));
        // `"<name>", "arguments": <args>` where <args> carries its own surrounding whitespace.
        let quoted_name = Value::String(tool.name.clone()).to_string();
        let mut body = literal_symbols(quoted_name.as_bytes());
        body.extend(punctuation(b','));
        body.extend(literal_symbols(b"\"arguments\""));
        // No whitespace after the colon: the arguments root begins with its own, and two
        // whitespace runs in a row would only split one parse into several.
        body.extend([Symbol::Whitespace, Symbol::Bytes(ByteSet::single(b':'))]);
        body.push(Symbol::Rule(arguments_root));
        let body = builder.add(format!("{}.call", tool.name), vec![body]);
        bodies.push(vec![Symbol::Rule(body)]);
    }
    let body = builder.add("tool call", bodies);

    let mut call = literal_symbols(b"<tool_call>\n{");
    call.push(Symbol::Whitespace);
    call.extend(literal_symbols(b"\"name\""));
    call.extend(punctuation(b':'));
    call.push(Symbol::Rule(body));
    call.extend(literal_symbols(b"}\n</tool_call>"));
    let call = builder.add("tool call block", vec![call]);

    let root = if parallel {
        // more ::= "" | "\n" call more — right-recursive, one open frame per extra call.
        let more = builder.declare("more tool calls");
        let mut another = literal_symbols(b"\n");
        another.extend([Symbol::Rule(call), Symbol::Rule(more)]);
        builder.define(more, vec![Vec::new(), another]);
        builder.add("root", vec![vec![Symbol::Rule(call), Symbol::Rule(more)]])
    } else {
        builder.add("root", vec![vec![Symbol::Rule(call)]])
    };
    builder.finish(root, WHITESPACE_BUDGET)
}

/// `byte` with structural whitespace either side, as JSON punctuation is written.
fn punctuation(byte: u8) -> [Symbol; 3] {
    [Symbol::Whitespace, Symbol::Bytes(ByteSet::single(byte)), Symbol::Whitespace]
}

/// The schema a call's arguments are held to: a tool without parameters takes `{}`; a schema
/// that leaves the type open is an object schema (arguments are always an object).
fn arguments_schema(parameters: &Value) -> Value {
    match parameters {
        Value::Object(schema) if schema.contains_key("type") => parameters.clone(),
        Value::Object(schema) => {
            let mut schema = schema.clone();
            schema.insert("type".to_string(), Value::String("object".to_string()));
            Value::Object(schema)
        }
        _ => {
            let mut schema = Map::new();
            schema.insert("type".to_string(), Value::String("object".to_string()));
            schema.insert("properties".to_string(), Value::Object(Map::new()));
            Value::Object(schema)
        }
    }
}

fn choice_label(choice: &ToolChoice) -> String {
    match choice {
        ToolChoice::Auto => "auto".to_string(),
        ToolChoice::None => "none".to_string(),
        ToolChoice::Required => "required".to_string(),
        ToolChoice::Named(name) => name.clone(),
    }
}

#[cfg(test)]
mod tests;
