//! Finishing tool answers: whole calls, calls cut off by the budget (forced and auto, one
//! and several), and blocks that are not calls.

use serde_json::json;

use super::*;

fn weather() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../testdata/tools/get_weather.json"))
        .expect("fixture parses")
}

fn order_tools() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../testdata/tools/order_tools.json"))
        .expect("fixture parses")
}

const TWO_CALLS: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                         <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>";

#[test]
fn whole_calls_end_the_answer_as_tool_calls() {
    let answer = finish_tool_answer(TWO_CALLS, &weather(), false, true, FinishReason::Stop);
    assert_eq!((answer.content.as_str(), answer.calls.len()), ("", 2));
    assert_eq!(answer.reason, FinishReason::ToolCalls);
    assert_eq!(answer.cut_off_arguments, None);
}

#[test]
fn the_issue_case_a_forced_call_cut_inside_a_string_argument() {
    let held = "<tool_call>\n{\"name\": \"get_order_status\", \"arguments\": {\"order_id\": \"1234567890123";
    let answer = finish_tool_answer(held, &order_tools(), true, true, FinishReason::Length);
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
    let answer = finish_tool_answer(&held, &weather(), false, true, FinishReason::Length);
    let cities: Vec<&serde_json::Value> =
        answer.calls.iter().map(|c| &c.arguments["city"]).collect();
    assert_eq!(cities, [&json!("Paris"), &json!("Tokyo"), &json!("Li")]);
    assert_eq!(answer.reason, FinishReason::Length);
    assert_eq!(answer.cut_off_arguments.as_deref(), Some("{\"city\": \"Li"));
    // One call allowed: the first whole call is the answer, and it is whole.
    let single = finish_tool_answer(&held, &weather(), true, true, FinishReason::Length);
    assert_eq!(
        (single.calls.len(), single.reason, single.cut_off_arguments),
        (1, FinishReason::ToolCalls, None)
    );
}

#[test]
fn a_cut_before_the_name_is_known_leaves_no_call_and_no_markup() {
    for held in [
        "<tool_call>\n{\"na",
        "<tool_call>\n{\"name\": \"",
        "<tool_call>",
        "<tool_",
    ] {
        let answer = finish_tool_answer(held, &order_tools(), false, true, FinishReason::Length);
        assert!(answer.calls.is_empty(), "{held}: {answer:?}");
        assert_eq!(answer.content, "", "{held}");
        assert_eq!(answer.reason, FinishReason::Length);
    }
}

#[test]
fn a_name_cut_part_way_is_kept_when_only_one_tool_begins_so() {
    let held = "<tool_call>\n{\"name\": \"issue_re";
    let answer = finish_tool_answer(held, &order_tools(), false, true, FinishReason::Length);
    assert_eq!(answer.calls[0].name, "issue_refund");
    assert_eq!(answer.calls[0].arguments, json!({}));
    assert_eq!(answer.cut_off_arguments.as_deref(), Some(""));
}

#[test]
fn auto_keeps_the_text_before_a_cut_off_call() {
    let held = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": ";
    let answer = finish_tool_answer(held, &weather(), false, false, FinishReason::Length);
    assert_eq!(answer.content, "Let me check.");
    assert_eq!(answer.calls[0].arguments, json!({"city": "Oslo"}));
    assert_eq!(answer.reason, FinishReason::Length);
}

#[test]
fn a_block_that_is_not_a_call_loses_its_tags() {
    let held = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>";
    let answer = finish_tool_answer(held, &weather(), false, false, FinishReason::Stop);
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
        false,
        FinishReason::Stop,
    );
    assert_eq!(unclosed.content, "{\"name\": \"get_wea");
    assert_eq!(unclosed.reason, FinishReason::Stop);
}

#[test]
fn prose_without_calls_is_the_answer() {
    let answer = finish_tool_answer("It is sunny.", &weather(), false, false, FinishReason::Stop);
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
            let answer = finish_tool_answer(&text, &weather(), false, forced, reason);
            prop_assert!(!answer.content.contains("<tool_call>") && !answer.content.contains("</tool_call>"), "{:?}", answer.content);
            prop_assert!(answer.calls.iter().all(|c| c.name == "get_weather" && c.arguments.is_object()));
            prop_assert_eq!(answer.cut_off_arguments.is_some(), answer.reason == FinishReason::Length && !answer.calls.is_empty());
        }
    }
}
