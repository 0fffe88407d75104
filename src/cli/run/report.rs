//! How `llamay run -stats` reports a finished answer, one-shot or in a chat: timings and token
//! rates, and the drafts kept.
//!
//! Entry points: [`stats_line`], [`drafts_line`]. Cost: formatting one line.

use std::time::Duration;

use llamay::core::{Completion, FinishReason};

/// `prompt 25 tokens in 175ms (142.5 tok/s) · generated 90 in 7.357s (12.2 tok/s) · stop: length`
pub fn stats_line(completion: &Completion) -> String {
    let usage = completion.usage;
    let timings = completion.timings;
    let stop = match completion.finish_reason {
        FinishReason::Length => "length",
        FinishReason::StopSequence(_) => "stop",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error(_) => "error",
        FinishReason::Stop | FinishReason::ToolCalls => "eog",
    };
    format!(
        "prompt {} tokens in {} ({} tok/s) · generated {} in {} ({} tok/s) · stop: {stop}",
        usage.prompt_tokens,
        format_duration(timings.prompt_eval),
        rate(usage.prompt_tokens, timings.prompt_eval),
        usage.completion_tokens,
        format_duration(timings.eval),
        rate(usage.completion_tokens, timings.eval),
    )
}

/// `drafts: 20 tokens (14 forced, 6 copied) · 12 kept, each a decode step saved`, when any
/// were drafted.
pub fn drafts_line(completion: &Completion) -> Option<String> {
    let drafts = completion.drafts;
    (drafts.drafted() > 0).then(|| {
        format!(
            "drafts: {} tokens ({} forced, {} copied) · {} kept, each a decode step saved",
            drafts.drafted(),
            drafts.forced,
            drafts.copied,
            drafts.accepted
        )
    })
}

fn format_duration(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:.3}s", duration.as_secs_f64())
    }
}

fn rate(tokens: u32, duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds <= 0.0 {
        return "-".into();
    }
    format!("{:.1}", tokens as f64 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llamay::core::{Timings, Usage};

    #[test]
    fn the_stats_line_has_the_spec_shape() {
        let completion = Completion {
            finish_reason: FinishReason::Length,
            usage: Usage { prompt_tokens: 25, completion_tokens: 90, cached_tokens: 0 },
            timings: Timings {
                prompt_eval: Duration::from_millis(175),
                eval: Duration::from_millis(7357),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            stats_line(&completion),
            "prompt 25 tokens in 175ms (142.9 tok/s) · generated 90 in 7.357s (12.2 tok/s) · stop: length"
        );
    }
}
