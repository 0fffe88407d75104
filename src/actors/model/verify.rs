//! What one decode settles for one sequence: its logits rows are sampled in order, as plain
//! decoding would sample them one step at a time. The first row follows the token sampled last
//! step; each further row follows a drafted token (see `actors::drafts`), and is used only while
//! every draft token before it equals what was sampled in its place. The first token that
//! differs from the draft becomes the next step's token, and the KV cells of the drafts after it
//! are dropped. So the output is the one plain decoding gives (greedy or seeded: one draw per
//! token either way), and it never leaves the constraint, which sees only sampled tokens.
//!
//! Cost: one sampling step per row used; a cut of the sequence's KV cells when a draft is
//! refused part way.

use std::time::Instant;

use super::{kv, Live, Shared};
use crate::actors::sampler::Step;
use crate::core::{FinishReason, StepSplit, StreamEvent};
use crate::llm::{Context, LogitsRow};

/// Samples `rows` of the sequence in slot `index`, whose decode this step held `decoded` (the
/// token sampled last step and its draft; empty when the rows follow a prompt), delivers the
/// text, keeps in the KV what was confirmed, and proposes the next draft. Returns the rows
/// sampled: the tokens this decode gave the sequence.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
    index: usize,
    decoded: &[u32],
    rows: &[LogitsRow],
    prefill_kernels: bool,
    live: &mut [Option<Live>],
    cache: &mut kv::SlotKeeper,
    context: &mut Context<'_>,
    shared: &Shared,
    split: &mut StepSplit,
) -> usize {
    let Some(entry) = live[index].as_mut() else { return 0 };
    let mut confirmed = 0;
    let mut ended = None;
    let mut sampled = 0;
    for (at, row) in rows.iter().enumerate() {
        sampled += 1;
        let step = match context.logits(*row) {
            Ok(logits) => entry.job.sampler.step(logits, split),
            Err(error) => Step::Finished { text: String::new(), reason: FinishReason::Error(error.to_string()) },
        };
        // Before the token's text, so a client reads each token's log-probability with it.
        if let Some(scored) = entry.job.sampler.take_logprob() {
            let _ = entry.job.events.blocking_send(StreamEvent::Logprobs { prompt: false, tokens: vec![scored] });
        }
        match step {
            Step::Continue { token, text } => {
                if let Some(drafter) = entry.job.drafter.as_mut() {
                    drafter.push(token);
                }
                if deliver(entry, text, split) {
                    ended = Some((FinishReason::Stop, String::new()));
                    break;
                }
                // The draft token decoded after this row is the one just sampled: its row is
                // the next step of plain decoding, already computed.
                if decoded.get(at + 1) == Some(&token) {
                    confirmed += 1;
                    continue;
                }
                entry.next_token = Some(token);
                break;
            }
            Step::Finished { text, reason } => {
                ended = Some((reason, text));
                break;
            }
        }
    }
    if !decoded.is_empty() {
        let kept = 1 + confirmed;
        cache.decoded(index, &decoded[..kept], prefill_kernels);
        entry.position += kept as u32;
        if let Some(drafter) = entry.job.drafter.as_mut() {
            drafter.settle(confirmed);
        }
        if kept < decoded.len() {
            let cut = context.seq(index).is_some_and(|seq| context.truncate(seq, entry.position));
            if !cut {
                // A memory that cannot drop its last cells (a recurrent model) holds nothing now.
                cache.forget(index);
                ended = Some((FinishReason::Error("the model's memory could not take back drafted tokens; retry with llamay_accelerate false".into()), String::new()));
            }
        }
    }
    if let Some((reason, text)) = ended {
        if let Some(entry) = live[index].take() {
            cache.retire(index, entry, reason, text, context, shared);
        }
        return sampled;
    }
    propose_draft(entry);
    sampled
}

/// The draft to decode after the sequence's next token, if it drafts.
pub(super) fn propose_draft(entry: &mut Live) {
    // Each draft token's row samples one more token: no draft runs past the budget (or past
    // the context, which the budget never exceeds).
    let room = entry.job.sampler.remaining().saturating_sub(1) as usize;
    entry.draft = match entry.job.drafter.as_mut() {
        Some(drafter) => drafter.propose(entry.job.sampler.constraint_mut(), room),
        None => Vec::new(),
    };
}

/// Sends a sampled token's text to the client: kept in the transcript, held while it may still
/// be a tool call, the call markup taken out. `true` when a call repeats one already made,
/// which ends the calls.
fn deliver(entry: &mut Live, text: String, split: &mut StepSplit) -> bool {
    if let Some(transcript) = entry.job.transcript.as_mut() {
        transcript.push_str(&text);
    }
    let filtered_at = Instant::now();
    let (text, repeated_call) = match (entry.job.tools.as_mut(), entry.job.markup.as_mut()) {
        (Some(tools), _) => {
            let pushed = tools.push(&text);
            (pushed.text, pushed.stop)
        }
        (None, Some(filter)) => (filter.push(&text), false),
        (None, None) => (text, false),
    };
    let sent_at = Instant::now();
    split.detokenize += sent_at.duration_since(filtered_at);
    // A failed send means the client is gone; the next step sees the closed channel and frees
    // the slot.
    if !text.is_empty() {
        let _ = entry.job.events.blocking_send(StreamEvent::Delta { text });
    }
    split.deliver += sent_at.elapsed();
    repeated_call
}
