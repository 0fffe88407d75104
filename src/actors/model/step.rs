//! One step of the model worker: the batch it decodes (each generating sequence's sampled
//! token and the part of its draft worth its rows, then prompt chunks), the decode, and what
//! the rows settle (see `verify.rs`).
//!
//! Key type: [`WorkerState`], what a step works on. Cost: one `llama_decode` of the planned rows
//! (one for the generating rows and one per prompt chunk where decodes are kept exact, see
//! [`WorkerState::step`]), and per generation step one [`RowCosts`] record of its decode time
//! and what it settled.

use std::time::Instant;

use super::{kv, verify, Live, Shared};
use crate::actors::drafts::{GenerationStep, PaceVerdict, RowCosts};
use crate::core::{FinishReason, StepSplit};
use crate::llm::{BatchEntry, Context};

/// Rows of one sequence in a decode: its slot, where in its prompt they start (`None`: a
/// generated token and its draft), how many.
type Planned = (usize, Option<usize>, usize);

/// What a step works on: the worker's context and sequences, what it keeps of their KV and
/// what its decodes cost, borrowed from the worker loop for one step.
pub(super) struct WorkerState<'w, 'm> {
    pub context: &'w mut Context<'m>,
    pub live: &'w mut [Option<Live>],
    pub cache: &'w mut kv::SlotKeeper,
    pub costs: &'w mut RowCosts,
    /// Rows one decode holds while each computes as alone (see `Context::exact_rows`).
    pub exact_rows: usize,
    pub shared: &'w Shared,
}

impl WorkerState<'_, '_> {
    /// One step of all live sequences: one token each (and its draft) for generating ones, and
    /// as much prompt as fits for the others (generating sequences go first so a long prompt
    /// never stalls them), in one decode, or one for the generating rows and one per prompt
    /// chunk where decodes are kept exact.
    pub(super) fn step(&mut self) {
        let capacity = self.context.batch_capacity();
        let now = Instant::now();
        for entry in self.live.iter_mut().flatten() {
            if entry.next_token.is_none() && !entry.job.prefill_only && entry.prompt_done + 1 == entry.job.prompt.len() {
                begin_answer(entry, now);
            }
        }
        let generating_slots: Vec<usize> = (0..self.live.len())
            .filter(|&index| self.live[index].as_ref().is_some_and(|entry| entry.next_token.is_some()))
            .collect();
        let sequences_generating = generating_slots.len();
        // While the sequences' own rows compute as each would alone, drafts stay within the rows
        // that do too, so the answer is plain decoding's bit for bit. Where no batch does (or
        // the sequences alone are past it), drafts are costed only: rows differ in rounding
        // either way.
        let exact = self.exact_rows > 1 && sequences_generating <= self.exact_rows;
        let exact_limit = if exact { self.exact_rows } else { usize::MAX };
        let mut budget = capacity;
        let mut rows = sequences_generating;
        let mut generating: Vec<Planned> = Vec::new();
        // Each sequence has its own KV stream, and llama.cpp computes sequences of consecutive
        // ids in one pass over the weights only while each brings as many rows: drafts of 2, 0,
        // 2 and 0 tokens next to four sampled tokens would be two passes, the second nearly a
        // step's cost for two rows. So the sequences of such a run draft one length.
        for run in generating_slots.chunk_by(|a, b| b == &(a + 1)) {
            let drafts: Vec<(usize, f64)> = run
                .iter()
                .filter_map(|&index| self.live[index].as_ref())
                .map(|entry| entry.job.drafter.as_ref().map_or((0, 0.0), |drafter| (entry.draft.len(), drafter.acceptance())))
                .collect();
            // The sampled token, then what of the draft is worth its rows and fits.
            let length = self
                .costs
                .worth(&drafts, sequences_generating, rows)
                .min(exact_limit.saturating_sub(rows) / run.len())
                .min(budget.saturating_sub(run.len()) / run.len());
            for &index in run {
                let Some(entry) = self.live[index].as_mut() else { continue };
                if budget == 0 {
                    break;
                }
                entry.draft.truncate(length.min(budget - 1));
                if let Some(drafter) = entry.job.drafter.as_mut() {
                    drafter.cut(entry.draft.len());
                }
                rows += entry.draft.len();
                let count = 1 + entry.draft.len();
                generating.push((index, None, count));
                budget -= count;
            }
        }
        let mut prompts: Vec<Planned> = Vec::new();
        for (index, slot) in self.live.iter().enumerate() {
            if let Some(entry) = slot {
                let remaining = entry.job.prompt.len() - entry.prompt_done;
                // The prompt's last token is left for `begin_answer`.
                let before_last = if entry.job.prefill_only { remaining } else { remaining.saturating_sub(1) };
                // A chunk decoded on its own has the whole batch.
                let room = if exact { capacity } else { budget };
                if entry.next_token.is_none() && before_last > 0 && room > 0 {
                    let take = before_last.min(room);
                    prompts.push((index, Some(entry.prompt_done), take));
                    budget = room - take;
                }
            }
        }
        if exact {
            // As drafts stay within exact rows, each prompt chunk is a decode of its own. llama.cpp
            // takes as many rows from each sequence into one pass: joined to others, a chunk
            // would leave its tail, or its first row, to a pass of a few rows, which rounds as
            // a generating step does and not as the prefill that another time decodes it alone,
            // so an answer would depend on whether another request arrived meanwhile. That
            // costs a pass over the weights per prompt chunk beyond the first.
            self.decode_planned(generating);
            for chunk in prompts {
                self.decode_planned(vec![chunk]);
            }
        } else {
            generating.append(&mut prompts);
            self.decode_planned(generating);
        }
    }

    /// Decodes the planned rows and settles what they decided.
    fn decode_planned(&mut self, mut plan: Vec<Planned>) {
        if plan.is_empty() {
            return;
        }
        // Each sequence has its own KV stream, and llama.cpp puts sequences in one pass only
        // while their ids rise one by one through the batch (and takes as many rows from each):
        // in slot order, sequences of consecutive slots share passes.
        plan.sort_by_key(|(index, _, _)| *index);
        let step_started = Instant::now();
        let generating = plan.iter().any(|(_, from, _)| from.is_none());
        let prompting = plan.iter().any(|(_, from, _)| from.is_some());
        // Per generating sequence: the token sampled last step and the draft after it.
        let mut generated_tokens: Vec<Vec<u32>> = Vec::with_capacity(plan.len());
        for (index, from, _) in &plan {
            let tokens = match (from, &self.live[*index]) {
                (None, Some(entry)) => entry.next_token.into_iter().chain(entry.draft.iter().copied()).collect(),
                _ => Vec::new(),
            };
            generated_tokens.push(tokens);
        }
        let now = Instant::now();
        for (index, from, _) in &plan {
            if let (Some(_), Some(entry)) = (from, self.live[*index].as_mut()) {
                entry.prompt_started.get_or_insert(now);
            }
        }
        let mut entries = Vec::with_capacity(plan.len());
        for (i, (index, from, count)) in plan.iter().enumerate() {
            let Some(entry) = self.live[*index].as_ref() else { continue };
            let Some(seq) = self.context.seq(*index) else { continue };
            let tokens: &[u32] = match from {
                Some(start) => &entry.job.prompt[*start..*start + *count],
                None => &generated_tokens[i],
            };
            let logits = match from {
                // Every row: each is sampled, the drafts verified against it.
                None => tokens.len(),
                // Every row of a prompt whose log-probabilities are asked for (echo).
                Some(_) if entry.job.prompt_scores.is_some() => tokens.len(),
                // A prompt's last token is decoded as a generated one (`begin_answer`).
                Some(_) => 0,
            };
            entries.push(BatchEntry { seq, tokens, first_pos: entry.position, logits });
        }
        let batch: usize = plan.iter().map(|(_, _, count)| count).sum();
        // Rows past those that compute as alone went through the batched kernels a cold prefill
        // uses: only those are reused as a prompt's prefix.
        let prefill_kernels = batch > self.exact_rows.max(1);
        let mut split = StepSplit::default();
        let decode_started = Instant::now();
        let decoded = self.context.decode(&entries);
        split.decode = decode_started.elapsed();
        let rows = match decoded {
            Ok(rows) => rows,
            Err(error) => {
                // A failed decode leaves the KV state of every sequence in it unknown: end them all.
                for (index, _, _) in &plan {
                    if let Some(entry) = self.live[*index].take() {
                        self.cache.retire(*index, entry, FinishReason::Error(error.to_string()), String::new(), self.context, self.shared);
                    }
                }
                return;
            }
        };
        drop(entries);
        let decoded_at = Instant::now();
        let mut settled_tokens = 0;
        for (((index, from, count), rows), generated) in plan.iter().zip(rows).zip(&generated_tokens) {
            let Some(entry) = self.live[*index].as_mut() else { continue };
            let Some(start) = from else {
                settled_tokens += verify::settle(*index, generated, &rows, prefill_kernels, self.live, self.cache, self.context, self.shared, &mut split);
                continue;
            };
            self.cache.decoded(*index, &entry.job.prompt[*start..*start + *count], prefill_kernels);
            if let Some(scores) = entry.job.prompt_scores.as_mut() {
                score_prompt_rows(scores, &entry.job.prompt, *start, &rows, self.context, self.cache, *index);
                scores.send_when_complete(entry.job.prompt.len(), &entry.job.events);
            }
            entry.position += *count as u32;
            entry.prompt_done += count;
            // Only a prefill decodes its prompt to the end here; it is done then.
            if entry.prompt_done == entry.job.prompt.len() {
                entry.prompt_finished = Some(decoded_at);
                if let Some(entry) = self.live[*index].take() {
                    self.cache.retire(*index, entry, FinishReason::Stop, String::new(), self.context, self.shared);
                }
            }
        }
        let spent = step_started.elapsed();
        if !prompting {
            let sequences = plan.len();
            let step = GenerationStep {
                sequences,
                rows: batch,
                tokens: settled_tokens,
                decode_seconds: split.decode.as_secs_f64(),
                seconds: spent.as_secs_f64(),
            };
            match self.costs.generation_step(step) {
                Some(PaceVerdict::Pauses(share, steps)) => {
                    tracing::debug!(sequences, share, steps, "drafts pause: their tokens cost more than plain steps' tokens")
                }
                Some(PaceVerdict::Pays(share)) => tracing::debug!(sequences, share, "drafted tokens cost this share of plain ones"),
                None => {}
            }
        }
        // Wall-clock time of the model's steps, so tok/s in /v1/stats is what the model delivers
        // in aggregate rather than an average over sequences that overlapped.
        if let Ok(mut totals) = self.shared.totals.lock() {
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
}

/// Scores the rows of a prompt chunk decoded from position `start` (row `k` predicts prompt
/// token `k + 1`; a prefill's last row predicts nothing) for the job and for its slot, so that
/// a later request scoring the same prefix reuses them.
fn score_prompt_rows(
    scores: &mut super::scores::PromptScores,
    prompt: &[u32],
    start: usize,
    rows: &[crate::llm::LogitsRow],
    context: &Context<'_>,
    cache: &mut kv::SlotKeeper,
    slot: usize,
) {
    if scores.rows() != start {
        return;
    }
    let mut scored = Vec::with_capacity(rows.len());
    for (k, row) in rows.iter().enumerate() {
        let (Some(&next), Ok(logits)) = (prompt.get(start + k + 1), context.logits(*row)) else { break };
        scored.push(super::scores::score_row(logits, next));
    }
    for score in &scored {
        scores.push(score);
    }
    cache.add_scores(slot, start, scored);
    // Rows that requests waiting for this prefill share, scored for their own next tokens.
    for (row, next) in cache.wanted_scores(slot, start..start + rows.len()) {
        if let Ok(logits) = context.logits(rows[row - start]) {
            cache.add_branch_score(slot, row, super::scores::score_row(logits, next));
        }
    }
}

/// Makes the prompt's last token, whose logits pick the first answer token, the sequence's
/// next token, decoded as a generated one is: on its own or with rows that compute as alone,
/// as a prompt found in the cache has it decoded, so that the same prompt gives the same answer
/// fresh or reused (on a CPU a row's arithmetic depends on how many rows its batch has); and
/// with the answer's first draft after it (a JSON answer's opening `{"name": "`, forced before
/// the model chose anything, is then confirmed by the decode that picks the first token).
fn begin_answer(entry: &mut Live, now: Instant) {
    entry.next_token = Some(entry.job.prompt[entry.prompt_done]);
    entry.prompt_done += 1;
    entry.prompt_started.get_or_insert(now);
    entry.prompt_finished = Some(now);
    verify::propose_draft(entry);
}
