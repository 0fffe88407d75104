//! One decision per request about tools, so the three API shapes and the model actor apply
//! the spec's `tool_choice` table the same way: what the model is told, through which
//! template, and whether a grammar forces the answer to be calls.
//!
//! Two halves: [`compile_tool_use`], the costly one that needs no model (the validations, one
//! schema compilation per offered tool, since a refused keyword is refused whatever the
//! choice, and the forced grammar when forced), run by the API on its compile pool; and
//! [`plan_tool_use`], the cheap one the model worker runs with its template in hand.
//!
//! Key type: [`ToolPlan`]. Cost: see the halves.

use serde_json::Value;

use super::forced::{allows_several_calls, assemble_forced_grammar, compile_arguments_schema};
use super::output::ToolOutput;
use super::prompt::{messages_for_plain_template, tools_as_template_json};
use super::validate::{validate_choice, validate_tools};
use super::ToolError;
use crate::core::{ChatMessage, ToolChoice, ToolSpec};
use crate::grammar::ir::Grammar;

/// What to do with a chat request's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPlan {
    /// The conversation to render: unchanged for a template with its own tools section,
    /// rewritten into the Hermes convention otherwise.
    pub messages: Vec<ChatMessage>,
    /// The template's `tools` variable, when the model's own template describes the tools.
    pub template_tools: Option<Vec<Value>>,
    /// Whether the answer must be calls (`required` or a named tool): the grammar of
    /// [`compile_tool_use`] then replaces any other constraint on the request.
    pub forces_call: bool,
    /// The tools a forced call may name (empty when nothing is forced).
    pub forced_tools: Vec<String>,
    /// The answer keeps at most one call (`parallel_tool_calls: false`, or a named tool).
    pub single_call: bool,
    /// The tools calls may be read back for (none with `tool_choice: "none"`).
    pub offered: Vec<ToolSpec>,
}

impl ToolPlan {
    /// Whether the answer should be read for calls at all.
    pub fn reads_calls(&self) -> bool {
        !self.offered.is_empty()
    }

    /// How the answer is watched as the model writes it, when it is read for calls.
    pub fn output(&self) -> Option<ToolOutput> {
        self.reads_calls()
            .then(|| ToolOutput::new(self.offered.clone(), self.single_call, self.forced_tools.clone()))
    }

    /// When a forced call may name one of several tools: the shortest text that names one
    /// (the call's opening and the shortest name). A token budget that cannot hold it leaves
    /// no call to answer with, so the request is refused rather than answered empty.
    pub fn shortest_naming(&self) -> Option<String> {
        if self.forced_tools.len() < 2 {
            return None;
        }
        let shortest = self.forced_tools.iter().min_by_key(|name| name.len())?;
        Some(format!("{}\n{{\"name\": {}", super::markup::OPEN_TAG, Value::String(shortest.clone())))
    }
}

/// Checks the tools and the choice, compiles every tool's `parameters` (a refused keyword is
/// refused whatever the choice), and returns the grammar of a forced call (`required` or a
/// named tool: exactly one call; `required` with `parallel: false`: one call), or `None` when
/// nothing is forced.
pub fn compile_tool_use(tools: &[ToolSpec], choice: &ToolChoice, parallel: bool) -> Result<Option<Grammar>, ToolError> {
    validate_tools(tools)?;
    validate_choice(tools, choice)?;
    let compiled =
        tools.iter().map(|tool| Ok((tool, compile_arguments_schema(tool)?))).collect::<Result<Vec<_>, ToolError>>()?;
    // validate_choice has made sure a forced choice has tools, and a named one is offered.
    let several = allows_several_calls(choice, parallel);
    Ok(match choice {
        ToolChoice::Required => Some(assemble_forced_grammar(compiled, several)),
        ToolChoice::Named(name) => {
            let named = compiled.into_iter().filter(|(tool, _)| &tool.name == name).collect();
            Some(assemble_forced_grammar(named, several))
        }
        ToolChoice::Auto | ToolChoice::None => None,
    })
}

/// Applies the `tool_choice` table to tools [`compile_tool_use`] accepted. `"none"`: tools are
/// not offered (earlier calls in the history are still rendered). `"auto"`: the tools are
/// described (by the model's template when `template_handles_tools`, else by the Hermes
/// block) and nothing is forced. Forced choices always describe the tools in the Hermes
/// convention, since that is what the grammar makes the model write.
pub fn plan_tool_use(
    messages: &[ChatMessage],
    tools: &[ToolSpec],
    choice: &ToolChoice,
    parallel: bool,
    template_handles_tools: bool,
) -> ToolPlan {
    let forced_tools: Vec<String> = match choice {
        ToolChoice::Required => tools.iter().map(|tool| tool.name.clone()).collect(),
        ToolChoice::Named(name) => vec![name.clone()],
        ToolChoice::Auto | ToolChoice::None => Vec::new(),
    };
    let forces_call = !forced_tools.is_empty();
    let single_call = !allows_several_calls(choice, parallel);
    let offered: Vec<ToolSpec> = match choice {
        ToolChoice::None => Vec::new(),
        _ => tools.to_vec(),
    };
    let native = template_handles_tools && !forces_call && !offered.is_empty();
    if native {
        ToolPlan {
            messages: messages.to_vec(),
            template_tools: Some(tools_as_template_json(&offered)),
            forces_call,
            forced_tools,
            single_call,
            offered,
        }
    } else {
        ToolPlan {
            messages: messages_for_plain_template(messages, &offered),
            template_tools: None,
            forces_call,
            forced_tools,
            single_call,
            offered,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::{Role, ToolCall};
    use crate::tools::hermes_tools_prompt;

    fn tools() -> Vec<ToolSpec> {
        serde_json::from_str(include_str!("../../testdata/tools/order_tools.json")).expect("fixture parses")
    }

    fn history() -> Vec<ChatMessage> {
        let mut assistant = ChatMessage::new(Role::Assistant, "");
        assistant.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "get_order_status".into(),
            arguments: json!({"order_id": "A-1"}),
        }];
        let mut result = ChatMessage::new(Role::Tool, "{\"status\": \"in_transit\"}");
        result.tool_call_id = Some("call_1".into());
        vec![ChatMessage::new(Role::User, "Where is A-1?"), assistant, result]
    }

    #[test]
    fn auto_uses_the_models_template_when_it_has_a_tools_section() {
        assert!(matches!(compile_tool_use(&tools(), &ToolChoice::Auto, true), Ok(None)));
        let plan = plan_tool_use(&history(), &tools(), &ToolChoice::Auto, true, true);
        assert_eq!(plan.messages, history());
        assert_eq!(plan.template_tools.as_ref().map(Vec::len), Some(2));
        assert!(!plan.forces_call);
        assert!(plan.reads_calls());
    }

    #[test]
    fn auto_without_a_tools_section_uses_the_hermes_convention() {
        let plan = plan_tool_use(&history(), &tools(), &ToolChoice::Auto, true, false);
        assert_eq!(plan.template_tools, None);
        assert_eq!(plan.messages[0].role, Role::System);
        assert_eq!(plan.messages[0].content, hermes_tools_prompt(&tools()));
        assert!(plan.messages.iter().all(|m| m.role != Role::Tool && m.tool_calls.is_empty()));
        assert!(!plan.forces_call);
    }

    #[test]
    fn forced_choices_describe_hermes_and_carry_a_grammar() {
        use crate::grammar::automaton::CompiledGrammar;
        use crate::grammar::check::{check_input, CheckOutcome};
        use crate::grammar::limits::Limits;

        let status =
            "<tool_call>\n{\"name\": \"get_order_status\", \"arguments\": {\"order_id\": \"A-1\"}}\n</tool_call>";
        for (choice, status_allowed) in
            [(ToolChoice::Required, true), (ToolChoice::Named("issue_refund".into()), false)]
        {
            let plan = plan_tool_use(&history(), &tools(), &choice, false, true);
            assert_eq!(plan.template_tools, None);
            assert!(plan.forces_call);
            assert!(plan.messages[0].content.contains("<tool_call>"));
            let grammar = compile_tool_use(&tools(), &choice, false).expect("compiles").expect("a forced grammar");
            let grammar = CompiledGrammar::new(grammar, &Limits::default()).expect("compiles");
            let outcome = check_input(&grammar, status.as_bytes());
            assert_eq!(outcome == CheckOutcome::Match, status_allowed, "{choice:?}: {outcome:?}");
        }
    }

    #[test]
    fn a_named_choice_keeps_one_call_and_knows_its_tool() {
        let named = plan_tool_use(&[], &tools(), &ToolChoice::Named("issue_refund".into()), true, false);
        assert!(named.single_call);
        assert_eq!(named.forced_tools, ["issue_refund"]);
        assert_eq!(named.shortest_naming(), None, "one tool: a cut call still names it");
        let required = plan_tool_use(&[], &tools(), &ToolChoice::Required, true, false);
        assert!(!required.single_call);
        assert_eq!(required.forced_tools, ["get_order_status", "issue_refund"]);
        assert_eq!(required.shortest_naming().as_deref(), Some("<tool_call>\n{\"name\": \"issue_refund\""));
        let auto = plan_tool_use(&[], &tools(), &ToolChoice::Auto, false, false);
        assert!(auto.single_call && auto.forced_tools.is_empty() && auto.shortest_naming().is_none());
    }

    #[test]
    fn none_offers_nothing_but_keeps_the_history_readable() {
        let plan = plan_tool_use(&history(), &tools(), &ToolChoice::None, true, true);
        assert!(!plan.reads_calls());
        assert!(!plan.forces_call && plan.template_tools.is_none());
        assert_eq!(plan.messages.len(), 3);
        assert_eq!(plan.messages[0].role, Role::User);
        assert!(plan.messages[1].content.contains("<tool_call>"));
        assert!(plan.messages[2].content.contains("<tool_response>"));
    }

    #[test]
    fn refusals_come_before_any_work() {
        let mut bad = tools();
        bad[1].parameters = json!({"type": "object", "properties": {"reason": {"if": {}}}});
        for choice in [ToolChoice::Auto, ToolChoice::None, ToolChoice::Required] {
            let error = compile_tool_use(&bad, &choice, true).unwrap_err();
            assert!(
                matches!(&error, ToolError::SchemaRefused { tool, keyword, .. } if tool == "issue_refund" && keyword == "if"),
                "{choice:?}: {error:?}"
            );
        }
        let error = compile_tool_use(&tools(), &ToolChoice::Named("cancel".into()), true).unwrap_err();
        assert!(matches!(error, ToolError::UnknownChoice { .. }));
    }
}
