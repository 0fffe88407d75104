//! Watching tool answers as they are written: what streams at once and what is held, a call
//! after streamed text, a repeated call stopping the answer, and the pieces of any answer
//! adding up to what reading it whole gives.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::tools::finish_tool_answer;

fn weather() -> Vec<ToolSpec> {
    serde_json::from_str(include_str!("../../../testdata/tools/get_weather.json")).expect("fixture parses")
}

fn auto() -> ToolOutput {
    ToolOutput::new(weather(), false, Vec::new())
}

fn call(city: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\", \"unit\": \"c\"}}}}\n</tool_call>")
}

/// Pushes `pieces` one by one: the text each gave, and whether any asked to stop.
fn push_all(output: &mut ToolOutput, pieces: &[&str]) -> (Vec<String>, bool) {
    let mut stop = false;
    let sent = pieces
        .iter()
        .map(|piece| {
            let pushed = output.push(piece);
            stop |= pushed.stop;
            pushed.text
        })
        .collect();
    (sent, stop)
}

#[test]
fn text_streams_from_the_first_piece_that_cannot_open_a_call() {
    let mut output = auto();
    let (sent, stop) = push_all(&mut output, &["The", " sea", " is", " wide", "."]);
    assert_eq!(sent, ["The", " sea", " is", " wide", "."]);
    assert!(!stop);
    let answer = output.finish("", FinishReason::Stop);
    assert_eq!((answer.content.as_str(), answer.calls.len(), answer.reason), ("", 0, FinishReason::Stop));
}

#[test]
fn only_a_start_of_the_call_tag_and_the_blank_before_it_are_held() {
    let mut output = auto();
    let (sent, _) = push_all(&mut output, &["\n", "<", "tool", "s", " are", " fun", "\n", "\n", "<tool_", "x"]);
    // "\n" and "<tool" might open a call; "<tools" cannot; a blank run waits for what follows.
    assert_eq!(sent, ["", "", "", "\n<tools", " are", " fun", "", "", "", "\n\n<tool_x"]);
    assert_eq!(output.finish(" ", FinishReason::Stop).content, " ");
}

#[test]
fn an_answer_that_begins_as_json_or_a_json_fence_is_held_whole() {
    for pieces in [
        &["{\"name\": \"get_weather\",", " \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}"][..],
        &["```", "json\n", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}]", "\n```"],
    ] {
        let mut output = auto();
        let (sent, _) = push_all(&mut output, pieces);
        assert!(sent.iter().all(String::is_empty), "{pieces:?}: {sent:?}");
        let answer = output.finish("", FinishReason::Stop);
        assert_eq!((answer.calls.len(), answer.content.as_str()), (1, ""), "{pieces:?}");
    }
    // A fence around code that is not JSON streams once that is clear.
    let mut output = auto();
    let (sent, _) = push_all(&mut output, &["``", "`", "j", "s", "x\nlet a = 1;"]);
    assert_eq!(sent, ["", "", "", "", "```jsx\nlet a = 1;"]);
}

#[test]
fn a_call_after_streamed_text_is_held_and_read_at_the_end() {
    let mut output = auto();
    let block = call("Oslo");
    let (sent, stop) = push_all(&mut output, &["Let me check.", "\n", &block[..5], &block[5..], "\nIt is sunny."]);
    assert_eq!(sent.concat(), "Let me check.");
    assert!(!stop);
    let answer = output.finish("", FinishReason::Stop);
    assert_eq!(answer.reason, FinishReason::ToolCalls);
    assert_eq!(answer.calls.len(), 1);
    assert_eq!(answer.calls[0].arguments, json!({"city": "Oslo", "unit": "c"}));
    assert_eq!(format!("{}{}", sent.concat(), answer.content), "Let me check.\nIt is sunny.");
}

#[test]
fn a_repeated_call_stops_the_answer_and_is_dropped() {
    let forced = || ToolOutput::new(weather(), false, vec!["get_weather".into()]);
    let mut output = forced();
    let (sent, stop) = push_all(&mut output, &[&call("Paris"), "\n", &call("Tokyo")]);
    assert!(sent.iter().all(String::is_empty));
    assert!(!stop, "two different calls are no repeat");
    let pushed = output.push(&format!("\n{}", call("Paris")));
    assert!(pushed.stop, "the third repeats the first");
    let answer = output.finish("", FinishReason::Stop);
    let cities: Vec<_> = answer.calls.iter().map(|c| c.arguments["city"].clone()).collect();
    assert_eq!(cities, [json!("Paris"), json!("Tokyo")]);
    assert_eq!(answer.reason, FinishReason::ToolCalls);

    // Arguments compare as JSON: the same members in another order and spacing repeat.
    let mut output = forced();
    output.push(&call("Lima"));
    let reordered = "\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"unit\":\"c\",\"city\":\"Lima\"}}\n</tool_call>";
    assert!(output.push(reordered).stop);
    assert_eq!(output.finish("", FinishReason::Stop).calls.len(), 1);
}

#[test]
fn a_closing_tag_inside_an_argument_is_no_repeat() {
    let mut output = ToolOutput::new(weather(), false, vec!["get_weather".into()]);
    output.push(&call("Paris"));
    let pushed = output.push("\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"</tool_call>");
    assert!(!pushed.stop);
    assert!(!output.push("\", \"unit\": \"c\"}}\n</tool_call>").stop);
    assert!(output.push(&format!("\n{}", call("Paris"))).stop);
}

#[test]
fn a_forced_answer_sends_nothing_until_it_ends() {
    let mut output = ToolOutput::new(weather(), true, vec!["get_weather".into()]);
    let (sent, _) = push_all(&mut output, &["Sure", "<tool_call>"]);
    assert!(sent.iter().all(String::is_empty));
}

proptest! {
    /// However an answer is cut into pieces, what streams plus what finishing gives is the
    /// text reading the whole answer gives (but for the blanks around calls, which reading it
    /// whole tidies), the calls are the same, and no markup streams.
    #[test]
    fn pieces_add_up_to_the_whole_answer(
        parts in prop::collection::vec(prop_oneof![
            Just(call("Oslo")),
            Just("<tool_call>".to_string()),
            Just("</tool_call>".to_string()),
            Just("<tool_".to_string()),
            "[a-z]{1,4}",
            Just(" ".to_string()),
            Just("\n".to_string()),
            Just("<".to_string()),
        ], 0..10),
        cuts in prop::collection::vec(0usize..200, 0..8),
    ) {
        let text: String = parts.concat();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).filter(|c| text.is_char_boundary(*c)).collect();
        cuts.sort_unstable();
        let mut output = auto();
        let mut sent = String::new();
        let mut start = 0;
        for cut in cuts {
            sent.push_str(&output.push(&text[start..cut]).text);
            start = cut;
        }
        let answer = output.finish(&text[start..], FinishReason::Stop);
        let whole = finish_tool_answer(&text, &weather(), false, &[], FinishReason::Stop);
        let names = |calls: &[crate::core::ToolCall]| calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect::<Vec<_>>();
        prop_assert_eq!(names(&answer.calls), names(&whole.calls));
        let words = |text: &str| text.split_whitespace().collect::<String>();
        prop_assert_eq!(words(&format!("{sent}{}", answer.content)), words(&whole.content));
        prop_assert!(!sent.contains("<tool_call>") && !sent.contains("</tool_call>"), "{:?}", sent);
    }
}
