//! Finishing tool answers: whole calls, calls cut off by the budget (forced and auto, one
//! and several), and blocks that are not calls.

use serde_json::json;

use super::*;

fn weather() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../../testdata/tools/get_weather.json"))
        .expect("fixture parses")
}

fn order_tools() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../../testdata/tools/order_tools.json"))
        .expect("fixture parses")
}

/// The tools a `required` grammar lets the answer name: all of them.
fn all_of(tools: &[ToolSpec]) -> Vec<String> {
    tools.iter().map(|tool| tool.name.clone()).collect()
}

const TWO_CALLS: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                         <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>";

#[test]
fn whole_calls_end_the_answer_as_tool_calls() {
    let answer = finish_tool_answer(TWO_CALLS, &weather(), false, &all_of(&weather()), FinishReason::Stop);
    assert_eq!((answer.content.as_str(), answer.calls.len()), ("", 2));
    assert_eq!(answer.reason, FinishReason::ToolCalls);
    assert_eq!(answer.cut_off_arguments, None);
}

#[test]
fn the_issue_case_a_forced_call_cut_inside_a_string_argument() {
    let held = "<tool_call>\n{\"name\": \"get_order_status\", \"arguments\": {\"order_id\": \"1234567890123";
    let answer = finish_tool_answer(held, &order_tools(), true, &all_of(&order_tools()), FinishReason::Length);
    assert_eq!(answer.reason, FinishReason::Length);
    assert_eq!(answer.content, "");
    assert_eq!(answer.calls.len(), 1);
    assert_eq!(answer.calls[0].name, "get_order_status");
    assert_eq!(
        answer.calls[0].arguments,
        json!({"order_id": "1234567890123"})
    );
    assert!(answer.calls[0].id.starts_with("call_"));
    assert_eq!(
        answer.cut_off_arguments.as_deref(),
        Some("{\"order_id\": \"1234567890123")
    );
}

#[test]
fn a_cut_after_whole_calls_keeps_them_and_the_partial_one() {
    let held = format!(
        "{TWO_CALLS}\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Li"
    );
    let answer = finish_tool_answer(&held, &weather(), false, &all_of(&weather()), FinishReason::Length);
    let cities: Vec<&serde_json::Value> =
        answer.calls.iter().map(|c| &c.arguments["city"]).collect();
    assert_eq!(cities, [&json!("Paris"), &json!("Tokyo"), &json!("Li")]);
    assert_eq!(answer.reason, FinishReason::Length);
    assert_eq!(answer.cut_off_arguments.as_deref(), Some("{\"city\": \"Li"));
    // One call allowed: the first whole call is the answer, and it is whole.
    let single = finish_tool_answer(&held, &weather(), true, &all_of(&weather()), FinishReason::Length);
    assert_eq!(
        (single.calls.len(), single.reason, single.cut_off_arguments),
        (1, FinishReason::ToolCalls, None)
    );
}

#[test]
fn a_forced_call_cut_before_its_name_is_a_call_to_the_one_tool_it_could_name() {
    for held in ["<tool_call>\n{\"na", "<tool_call>\n{\"name\": \"", "<tool_call>", "<tool_", ""] {
        // Named (or required with one tool): the call can only be to that tool.
        let answer = finish_tool_answer(held, &order_tools(), false, &["issue_refund".into()], FinishReason::Length);
        assert_eq!(answer.calls.len(), 1, "{held}: {answer:?}");
        assert_eq!((answer.calls[0].name.as_str(), &answer.calls[0].arguments), ("issue_refund", &json!({})));
        assert_eq!(answer.cut_off_arguments.as_deref(), Some(""), "{held}");
        assert_eq!((answer.content.as_str(), answer.reason.clone()), ("", FinishReason::Length), "{held}");
        // Several tools it could name, none told apart: an error, never an empty success.
        let answer = finish_tool_answer(held, &order_tools(), false, &all_of(&order_tools()), FinishReason::Length);
        assert!(answer.calls.is_empty(), "{held}: {answer:?}");
        assert!(matches!(&answer.reason, FinishReason::Error(message) if message.contains("max_tokens")), "{held}");
    }
    // A name cut part way is told apart among the tools the choice allows, not all offered.
    let held = "<tool_call>\n{\"name\": \"get_order_st";
    let named = finish_tool_answer(held, &order_tools(), false, &["get_order_status".into()], FinishReason::Length);
    assert_eq!(named.calls[0].name, "get_order_status");
}

#[test]
fn a_call_identical_to_an_earlier_one_ends_the_calls() {
    let paris = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
    let paris_again = "<tool_call>{\"arguments\": {\"unit\": \"c\", \"city\": \"Paris\"}, \"name\": \"get_weather\"}</tool_call>";
    let held = format!("{paris}\n{TWO_CALLS}\n{paris_again}\n{TWO_CALLS}\n<tool_call>\n{{\"name\": \"get_wea");
    for (forced, reason) in [(all_of(&weather()), FinishReason::Stop), (Vec::new(), FinishReason::Length)] {
        let answer = finish_tool_answer(&held, &weather(), false, &forced, reason);
        let cities: Vec<&serde_json::Value> = answer.calls.iter().map(|c| &c.arguments["city"]).collect();
        assert_eq!(cities, [&json!("Paris"), &json!("Paris"), &json!("Tokyo")], "only the unit tells the first two apart");
        assert_eq!((answer.reason, answer.cut_off_arguments), (FinishReason::ToolCalls, None));
    }
}

#[test]
fn a_name_cut_part_way_is_kept_when_only_one_tool_begins_so() {
    let held = "<tool_call>\n{\"name\": \"issue_re";
    let answer = finish_tool_answer(held, &order_tools(), false, &all_of(&order_tools()), FinishReason::Length);
    assert_eq!(answer.calls[0].name, "issue_refund");
    assert_eq!(answer.calls[0].arguments, json!({}));
    assert_eq!(answer.cut_off_arguments.as_deref(), Some(""));
}

#[test]
fn auto_keeps_the_text_before_a_cut_off_call() {
    let held = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": ";
    let answer = finish_tool_answer(held, &weather(), false, &[], FinishReason::Length);
    assert_eq!(answer.content, "Let me check.");
    assert_eq!(answer.calls[0].arguments, json!({"city": "Oslo"}));
    assert_eq!(answer.reason, FinishReason::Length);
}

#[test]
fn a_block_that_is_not_a_call_loses_its_tags() {
    let held = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>";
    let answer = finish_tool_answer(held, &weather(), false, &[], FinishReason::Stop);
    assert!(answer.calls.is_empty());
    assert!(
        !answer.content.contains("tool_call>"),
        "{:?}",
        answer.content
    );
    assert!(answer.content.starts_with("Sure."), "{:?}", answer.content);
    let unclosed = finish_tool_answer(
        "<tool_call>\n{\"name\": \"get_wea",
        &weather(),
        false,
        &[],
        FinishReason::Stop,
    );
    assert_eq!(unclosed.content, "{\"name\": \"get_wea");
    assert_eq!(unclosed.reason, FinishReason::Stop);
}

#[test]
fn prose_without_calls_is_the_answer() {
    let answer = finish_tool_answer("It is sunny.", &weather(), false, &[], FinishReason::Stop);
    assert_eq!(
        (answer.content.as_str(), answer.calls.len(), answer.reason),
        ("It is sunny.", 0, FinishReason::Stop)
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn no_answer_carries_markup(
            text in "(<tool_call>|</tool_call>|<tool_|\\{\"name\": \"get_weather\", \"arguments\": \\{|\"city\": \"|[a-z ,:\"{}]){0,30}",
            forced in any::<bool>(),
            cut in any::<bool>(),
        ) {
            let reason = if cut { FinishReason::Length } else { FinishReason::Stop };
            let forced = if forced { all_of(&weather()) } else { Vec::new() };
            let answer = finish_tool_answer(&text, &weather(), false, &forced, reason);
            prop_assert!(!answer.content.contains("<tool_call>") && !answer.content.contains("</tool_call>"), "{:?}", answer.content);
            prop_assert!(answer.calls.iter().all(|c| c.name == "get_weather" && c.arguments.is_object()));
            prop_assert_eq!(answer.cut_off_arguments.is_some(), answer.reason == FinishReason::Length && !answer.calls.is_empty());
        }
    }
}
