//! One step of the model worker: the batch it decodes (each generating sequence's sampled
//! token and the part of its draft worth its rows, then prompt chunks), the decode, and what
//! the rows settle (see `verify.rs`).
//!
//! Cost: one `llama_decode` of the planned rows, and one [`RowCosts`] record per generation step.

use std::time::Instant;

use super::{kv, verify, Live, Shared};
use crate::actors::drafts::RowCosts;
use crate::core::{FinishReason, StepSplit};
use crate::llm::{BatchEntry, Context};

/// One decode of all live sequences: one token each for generating ones, and as much prompt as
/// fits for the others (generating sequences go first so a long prompt never stalls them).
pub(super) fn step(
    context: &mut Context<'_>,
    live: &mut [Option<Live>],
    cache: &mut kv::SlotKeeper,
    costs: &mut RowCosts,
    exact_rows: usize,
    shared: &Shared,
) {
    let capacity = context.batch_capacity();
    let mut budget = capacity;
    // (slot, start index in prompt or None for a generated token, token count)
    let mut plan: Vec<(usize, Option<usize>, usize)> = Vec::new();
    let sequences_generating = live.iter().flatten().filter(|entry| entry.next_token.is_some()).count();
    let mut rows = sequences_generating;
    // While the sequences' own rows compute as each would alone, drafts stay within the rows
    // that do too, so the answer is plain decoding's bit for bit. Where no batch does (or the
    // sequences alone are past it), drafts are costed only: rows differ in rounding either way.
    let exact_limit = if exact_rows > 1 && sequences_generating <= exact_rows { exact_rows } else { usize::MAX };
    for (index, slot) in live.iter_mut().enumerate() {
        if let Some(entry) = slot {
            if entry.next_token.is_some() && budget > 0 {
                // The sampled token, then what of its draft is worth its rows and fits.
                if let Some(drafter) = entry.job.drafter.as_mut() {
                    let worth = costs.worth(entry.draft.len(), drafter.acceptance(), sequences_generating, rows);
                    entry.draft.truncate(worth.min(budget - 1).min(exact_limit.saturating_sub(rows)));
                    drafter.cut(entry.draft.len());
                }
                rows += entry.draft.len();
                let count = 1 + entry.draft.len();
                plan.push((index, None, count));
                budget -= count;
            }
        }
    }
    for (index, slot) in live.iter().enumerate() {
        if let Some(entry) = slot {
            let remaining = entry.job.prompt.len() - entry.prompt_done;
            if entry.next_token.is_none() && remaining > 0 && budget > 0 {
                // The prompt's last token, whose logits pick the first answer token, is decoded
                // on its own, as a prompt found in the cache has it decoded: the same prompt
                // gives the same answer fresh or reused (on a CPU a row's arithmetic depends on
                // how many rows its batch has).
                let before_last = if entry.job.prefill_only { remaining } else { remaining - 1 };
                let take = if before_last > 0 { before_last.min(budget) } else { 1 };
                plan.push((index, Some(entry.prompt_done), take));
                budget -= take;
            }
        }
    }
    if plan.is_empty() {
        return;
    }
    // Each sequence has its own KV stream, and llama.cpp puts sequences in one compute only
    // while their ids rise one by one through the batch: in slot order, a prompt joining
    // sequences that generate is one compute with them, not one more.
    plan.sort_by_key(|(index, _, _)| *index);
    let step_started = Instant::now();
    let generating = plan.iter().any(|(_, from, _)| from.is_none());
    let prompting = plan.iter().any(|(_, from, _)| from.is_some());
    // Per generating sequence: the token sampled last step and the draft after it.
    let mut generated_tokens: Vec<Vec<u32>> = Vec::with_capacity(plan.len());
    for (index, from, _) in &plan {
        let tokens = match (from, &live[*index]) {
            (None, Some(entry)) => entry.next_token.into_iter().chain(entry.draft.iter().copied()).collect(),
            _ => Vec::new(),
        };
        generated_tokens.push(tokens);
    }
    let now = Instant::now();
    for (index, from, _) in &plan {
        if let (Some(_), Some(entry)) = (from, live[*index].as_mut()) {
            entry.prompt_started.get_or_insert(now);
        }
    }
    let mut entries = Vec::with_capacity(plan.len());
    for (i, (index, from, count)) in plan.iter().enumerate() {
        let Some(entry) = live[*index].as_ref() else { continue };
        let Some(seq) = context.seq(*index) else { continue };
        let tokens: &[u32] = match from {
            Some(start) => &entry.job.prompt[*start..*start + *count],
            None => &generated_tokens[i],
        };
        let completes_prompt = from.is_some_and(|start| start + count == entry.job.prompt.len());
        let logits = match from {
            // Every row: each is sampled, the drafts verified against it.
            None => tokens.len(),
            Some(_) => usize::from(completes_prompt && !entry.job.prefill_only),
        };
        entries.push(BatchEntry { seq, tokens, first_pos: entry.position, logits });
    }
    let batch: usize = plan.iter().map(|(_, _, count)| count).sum();
    let mut split = StepSplit::default();
    let decode_started = Instant::now();
    let decoded = context.decode(&entries);
    split.decode = decode_started.elapsed();
    if !prompting {
        costs.record(batch, split.decode.as_secs_f64());
    }
    let rows = match decoded {
        Ok(rows) => rows,
        Err(error) => {
            // A failed decode leaves the KV state of every sequence in it unknown: end them all.
            for (index, _, _) in &plan {
                if let Some(entry) = live[*index].take() {
                    cache.retire(*index, entry, FinishReason::Error(error.to_string()), String::new(), context, shared);
                }
            }
            return;
        }
    };
    drop(entries);
    let decoded_at = Instant::now();
    for (((index, from, count), rows), generated) in plan.iter().zip(rows).zip(&generated_tokens) {
        let Some(entry) = live[*index].as_mut() else { continue };
        if let Some(start) = from {
            cache.decoded(*index, &entry.job.prompt[*start..*start + *count], batch);
            entry.position += *count as u32;
            entry.prompt_done += count;
            if entry.prompt_done == entry.job.prompt.len() {
                entry.prompt_finished = Some(decoded_at);
                if entry.job.prefill_only {
                    if let Some(entry) = live[*index].take() {
                        cache.retire(*index, entry, FinishReason::Stop, String::new(), context, shared);
                    }
                    continue;
                }
            }
        }
        if !rows.is_empty() {
            verify::settle(*index, generated, &rows, batch, live, cache, context, shared, &mut split);
        }
    }
    // Wall-clock time of the model's steps, so tok/s in /v1/stats is what the model delivers
    // in aggregate rather than an average over sequences that overlapped.
    if let Ok(mut totals) = shared.totals.lock() {
        let spent = step_started.elapsed();
        split.steps = spent;
        totals.step_split.add(&split);
        if generating {
            totals.generation_time += spent;
        }
        if prompting {
            totals.prompt_eval_time += spent;
        }
    }
}
