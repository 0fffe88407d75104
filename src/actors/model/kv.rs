//! The model worker's KV bookkeeping (issue 11): which slot an admitted request decodes in and
//! what it reuses there ([`SlotKeeper::admit`]; a request sharing a long prefix with one still
//! prefilling waits for it, see `prefix::worth_waiting`), the tokens each slot's KV holds
//! ([`SlotKeeper::decoded`]), and what a finished request leaves behind ([`SlotKeeper::retire`]:
//! its prompt and answer stay for prefix reuse; a commit hands the slot to its context; a
//! request that ran inside a context's own slot gives the context its tokens back).
//! Also how a request's prompt continues a context ([`LlamaModelHandle::prepare_in_context`]).
//!
//! Key type: [`SlotKeeper`]. Cost per admission: one prefix comparison per slot, then one
//! sequence truncate, or a copy of the source sequence's cells into the slot's own KV stream
//! (tens of KiB per position; see `Context::copy_prefix`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use super::{end_live, next_waiting, Job, Live, LlamaModelHandle, Prepared, Shared, StateOp};
use crate::contexts::{tools_in_effect, ContextContent, ContextMode, ContextRecord, ContextUse, Residence};
use crate::actors::prefix::{self, Placement, Prefilling, SlotCache};
use crate::core::{CoreError, FinishReason, PromptInput, ValidGenerateRequest};
use crate::llm::Context;

/// The slot cache plus the contexts that own slots (held weakly: a deleted context's slot
/// becomes an ordinary cached prefix).
pub(super) struct SlotKeeper {
    cache: SlotCache,
    owners: HashMap<u64, Weak<ContextRecord>>,
}

impl SlotKeeper {
    pub(super) fn new(cache: SlotCache) -> Self {
        SlotKeeper {
            cache,
            owners: HashMap::new(),
        }
    }

    /// Tokens just decoded into `slot`; `prefill_kernels` when their decode had more rows than
    /// compute as alone (see `Context::exact_rows`).
    pub(super) fn decoded(&mut self, slot: usize, tokens: &[u32], prefill_kernels: bool) {
        self.cache.extend(slot, tokens, prefill_kernels);
    }

    /// Scores of `slot`'s rows `from..`, just computed by a scoring job.
    pub(super) fn add_scores(&mut self, slot: usize, from: usize, scores: Vec<crate::actors::prefix::PositionScore>) {
        self.cache.add_scores(slot, from, scores);
    }

    /// The rows among `rows` of `slot` that a waiting job wants scored for its own next token.
    pub(super) fn wanted_scores(&self, slot: usize, rows: std::ops::Range<usize>) -> Vec<(usize, u32)> {
        self.cache.wanted_scores(slot, rows)
    }

    /// Row `row` of `slot` scored for a wanted next token.
    pub(super) fn add_branch_score(&mut self, slot: usize, row: usize, score: crate::actors::prefix::PositionScore) {
        self.cache.add_branch_score(slot, row, score);
    }

    /// The slot's KV state is unknown or cleared.
    pub(super) fn forget(&mut self, slot: usize) {
        self.cache.forget(slot);
    }

    /// Moves waiting jobs into free slots, each starting from the longest prefix of its prompt
    /// that some slot's KV already holds. A job that shares a long prefix with a live job still
    /// prefilling it stays in the queue until that prefill has decoded it (see
    /// [`prefix::worth_waiting`]), and jobs behind it go first meanwhile.
    pub(super) fn admit(
        &mut self,
        context: &mut Context<'_>,
        live: &mut [Option<Live>],
        waiting: &mut VecDeque<Job>,
        shared: &Shared,
    ) {
        self.forget_deleted_owners();
        let mut held = Vec::new();
        self.admit_unheld(context, live, waiting, &mut held, shared);
        for job in held.into_iter().rev() {
            waiting.push_front(job);
        }
    }

    /// [`SlotKeeper::admit`], leaving in `held` the jobs that wait for a shared prefill.
    fn admit_unheld(
        &mut self,
        context: &mut Context<'_>,
        live: &mut [Option<Live>],
        waiting: &mut VecDeque<Job>,
        held: &mut Vec<Job>,
        shared: &Shared,
    ) {
        loop {
            let free: Vec<bool> = live.iter().map(Option::is_none).collect();
            if !free.contains(&true) {
                return;
            }
            let Some(mut job) = next_waiting(waiting, shared) else {
                return;
            };
            let key = job.context.as_ref().map(|c| c.record.key);
            let scoring = job.prompt_scores.is_some();
            let placement = if job.cold_prompt {
                self.cache.place_cold(&free)
            } else {
                self.cache.place_scoring(&job.prompt, &free, !job.prefill_only, key, scoring)
            };
            let Some(placement) = placement else {
                waiting.push_front(job);
                return;
            };
            if let Some(wait) = shared_prefill_to_wait_for(&job, placement.reuse, live) {
                if let Some((row, next)) = wait.branch {
                    self.cache.want_score(wait.slot, row, next);
                }
                held.push(job);
                continue;
            }
            let reuse = self.apply(context, placement, &job.prompt);
            let index = placement.slot;
            let (reuse, restore_failed) = match self.write_back(context, index, &job, reuse) {
                Ok(reuse) => (reuse, None),
                Err(message) => (0, Some(message)),
            };
            job.cached = reuse;
            if let Some(scores) = job.prompt_scores.as_mut() {
                scores.start(&job.prompt, self.cache.scores(index), reuse);
                scores.send_when_complete(job.prompt.len(), &job.events);
            }
            let entry = Live {
                job,
                prompt_done: reuse,
                next_token: None,
                draft: Vec::new(),
                position: reuse as u32,
                prompt_started: None,
                prompt_finished: None,
            };
            if let Some(message) = restore_failed {
                self.retire(
                    index,
                    entry,
                    FinishReason::Error(message),
                    String::new(),
                    context,
                    shared,
                );
                continue;
            }
            if entry.job.prefill_only && reuse == entry.job.prompt.len() {
                // Everything is in the cache already (a context made from a prompt another
                // holds): nothing to decode.
                self.retire(
                    index,
                    entry,
                    FinishReason::Stop,
                    String::new(),
                    context,
                    shared,
                );
                continue;
            }
            live[index] = Some(entry);
        }
    }

    /// Makes the slot's KV hold the placement's reused prefix; returns how much it holds.
    fn apply(&mut self, context: &mut Context<'_>, placement: Placement, prompt: &[u32]) -> usize {
        let Some(seq) = context.seq(placement.slot) else {
            return 0;
        };
        if let Some(owner) = self.cache.owner(placement.slot) {
            let keeps_owner = self
                .cache
                .owned_length(placement.slot)
                .is_some_and(|length| placement.reuse >= length)
                && placement.source.is_none();
            if !keeps_owner {
                self.evict_owner(owner, Some(placement.slot), context);
            }
        }
        let reuse = match placement.source.and_then(|source| context.seq(source)) {
            Some(source) => match context.copy_prefix(source, seq, placement.reuse as u32) {
                Ok(()) => placement.reuse,
                Err(_) => {
                    context.clear(seq);
                    0
                }
            },
            None if placement.reuse == 0 => {
                context.clear(seq);
                0
            }
            None if context.truncate(seq, placement.reuse as u32) => placement.reuse,
            None => 0,
        };
        self.cache.admit(Placement { reuse, ..placement }, prompt);
        reuse
    }

    /// Writes saved state into the slot of a just-placed job when that saves prefill: a
    /// snapshot being restored, or its context's parked state. Returns the prompt tokens the
    /// slot now holds; an error only when a snapshot's state does not fit this model.
    fn write_back(
        &mut self,
        context: &mut Context<'_>,
        slot: usize,
        job: &Job,
        reuse: usize,
    ) -> Result<usize, String> {
        let Some(seq) = context.seq(slot) else {
            return Ok(reuse);
        };
        if let StateOp::Restore(state) = &job.state_op {
            if reuse >= job.prompt.len() {
                return Ok(reuse);
            }
            if let Err(error) = context.restore_sequence(seq, state) {
                self.cache.forget(slot);
                return Err(error.to_string());
            }
            self.cache.restored(slot, &job.prompt);
            return Ok(job.prompt.len());
        }
        let Some(record) = job.context.as_ref().map(|used| &used.record) else {
            return Ok(reuse);
        };
        let Some(parked) = record.parked_state() else {
            return Ok(reuse);
        };
        let tokens = record.tokens();
        let covered = &tokens[..parked.covers.min(tokens.len())];
        let limit = if job.prefill_only {
            job.prompt.len()
        } else {
            job.prompt.len().saturating_sub(1)
        };
        let common = covered
            .iter()
            .zip(&job.prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(limit);
        if common <= reuse {
            return Ok(reuse);
        }
        let written = context.restore_sequence(seq, &parked.bytes).is_ok()
            && context.truncate(seq, common as u32);
        if !written {
            // The slot is empty now; the parked state is no use, and the tokens remain.
            record.drop_parked();
            record.set_residence(Residence::Cold);
            self.cache.forget(slot);
            return Ok(0);
        }
        self.cache.restored(slot, &job.prompt[..common]);
        Ok(common)
    }

    /// A context loses its slot `slot` to another request: its state is parked in memory when
    /// the slot still holds it, else it goes cold (its tokens remain the truth, so its next
    /// use prefills them again).
    fn evict_owner(&mut self, key: u64, slot: Option<usize>, context: &mut Context<'_>) {
        if let Some(record) = self.owners.remove(&key).and_then(|weak| weak.upgrade()) {
            let parked = slot.is_some_and(|slot| self.park(&record, slot, context));
            if !parked {
                record.set_residence(Residence::Cold);
            }
        }
        self.cache.release(key);
    }

    /// Copies the batch-decoded part of the context's slot into the context's record.
    fn park(&mut self, record: &Arc<ContextRecord>, slot: usize, context: &mut Context<'_>) -> bool {
        let Some(seq) = context.seq(slot) else {
            return false;
        };
        // Only batch-decoded tokens: a restored state then matches a cold prefill bit for bit.
        let covers = self
            .cache
            .reusable(slot)
            .min(self.cache.owned_length(slot).unwrap_or(0))
            .min(record.tokens().len());
        if covers == 0 {
            return false;
        }
        if self.cache.tokens(slot).len() > covers {
            if !context.truncate(seq, covers as u32) {
                self.cache.forget(slot);
                return false;
            }
            self.cache.truncate(slot, covers);
        }
        match context.save_sequence(seq) {
            Ok(bytes) => {
                record.park(Arc::new(bytes), covers);
                true
            }
            Err(_) => false,
        }
    }

    /// The worker is stopping (its model unloads): every context holding a slot is parked, so
    /// it works again, without prefill, once the model is back.
    pub(super) fn park_all(&mut self, context: &mut Context<'_>) {
        for (slot, key) in self.cache.owners() {
            if let Some(record) = self.owners.remove(&key).and_then(|weak| weak.upgrade()) {
                if !self.park(&record, slot, context) {
                    record.set_residence(Residence::Cold);
                }
            }
        }
    }

    fn forget_deleted_owners(&mut self) {
        let dead: Vec<u64> = self
            .owners
            .iter()
            .filter(|(_, weak)| weak.strong_count() == 0)
            .map(|(key, _)| *key)
            .collect();
        for key in dead {
            self.owners.remove(&key);
            self.cache.release(key);
        }
    }

    /// The job's prompt and answer as tokens: what its slot decoded, and the last sampled
    /// token when the answer ended before decoding it.
    fn answer_tokens(&self, index: usize, entry: &Live) -> Vec<u32> {
        let mut tokens = self.cache.tokens(index).to_vec();
        let decoded_answer = tokens.len().saturating_sub(entry.job.prompt.len());
        if (entry.job.sampler.generated() as usize) > decoded_answer {
            tokens.extend(entry.job.sampler.last_token());
        }
        tokens
    }

    /// Ends a live job: settles what its slot holds, then sends its completion.
    pub(super) fn retire(
        &mut self,
        index: usize,
        mut entry: Live,
        reason: FinishReason,
        text: String,
        context: &mut Context<'_>,
        shared: &Shared,
    ) {
        let failed = matches!(reason, FinishReason::Error(_));
        entry.job.context_tokens = self.answer_tokens(index, &entry);
        if failed {
            // The KV state of a failed decode is unknown.
            if let Some(seq) = context.seq(index) {
                context.clear(seq);
            }
            self.cache.forget(index);
        }
        let succeeded = !failed && reason != FinishReason::Cancelled;
        if let (Some(drafter), true) = (entry.job.drafter.as_ref(), succeeded) {
            if !drafter.habits().is_empty() {
                if let Ok(mut habits) = shared.habits.lock() {
                    habits.clone_from(drafter.habits());
                }
            }
        }
        if let (Some(used), true) = (entry.job.context.as_ref(), succeeded) {
            match used.mode {
                ContextMode::Create | ContextMode::Commit => {
                    let answer = entry.job.transcript.take().map(|mut answer| {
                        answer.push_str(&text);
                        answer
                    });
                    let appended = if used.mode == ContextMode::Commit {
                        used.appended.as_slice()
                    } else {
                        &[]
                    };
                    used.record.commit(
                        self.cache.tokens(index).to_vec(),
                        appended,
                        answer.as_deref(),
                    );
                    self.cache.give(index, used.record.key);
                    self.owners
                        .insert(used.record.key, Arc::downgrade(&used.record));
                    used.record.set_residence(Residence::Hot);
                }
                ContextMode::Read => {}
            }
        }
        if let StateOp::Save(sender) = std::mem::replace(&mut entry.job.state_op, StateOp::None) {
            let saved = match (succeeded, context.seq(index)) {
                (true, Some(seq)) => context.save_sequence(seq).map_err(|e| e.to_string()),
                _ => Err(format!("the context could not be put in a sequence ({reason:?})")),
            };
            let _ = sender.send(saved);
        }
        if let Some(length) = self.cache.owned_length(index) {
            // A request that ran inside a context's slot leaves the context as it was.
            if self.cache.tokens(index).len() > length {
                let kept = context
                    .seq(index)
                    .is_some_and(|seq| context.truncate(seq, length as u32));
                if kept {
                    self.cache.truncate(index, length);
                } else if let Some(owner) = self.cache.owner(index) {
                    self.evict_owner(owner, None, context);
                    self.cache.forget(index);
                }
            }
        }
        end_live(entry, reason, text, shared);
    }
}

/// The live job, arrived before `job`, whose prefill of the prefix they share `job` should
/// rather wait for than be placed now with `reuse` prompt tokens reused. Only a plain request
/// waits: one in a named context or with state to save or restore has a slot of its own. A
/// `cache_prompt: false` job reuses nothing, so it neither waits nor is waited for.
fn shared_prefill_to_wait_for(job: &Job, reuse: usize, live: &[Option<Live>]) -> Option<prefix::Wait> {
    if job.context.is_some() || !matches!(job.state_op, StateOp::None) || job.cold_prompt {
        return None;
    }
    let prefilling = live
        .iter()
        .enumerate()
        .filter_map(|(slot, entry)| Some((slot, entry.as_ref()?)))
        .filter(|(_, entry)| entry.next_token.is_none() && entry.job.arrival < job.arrival && !entry.job.cold_prompt)
        .map(|(slot, entry)| Prefilling {
            slot,
            prompt: &entry.job.prompt,
            done: entry.prompt_done,
            batched: entry.job.prompt.len() - usize::from(!entry.job.prefill_only),
            scoring: entry.job.prompt_scores.is_some(),
        });
    prefix::worth_waiting(&job.prompt, !job.prefill_only, job.prompt_scores.is_some(), reuse, prefilling)
}

impl LlamaModelHandle {
    /// The prompt of a request that creates or continues a context. A conversation continues
    /// by rendering the context's messages followed by the request's (the worker then reuses
    /// the longest prefix the context's KV holds); raw text continues after the context's
    /// tokens.
    pub(super) fn prepare_in_context(
        &self,
        request: &ValidGenerateRequest,
        used: &ContextUse,
    ) -> Result<Prepared, CoreError> {
        if used.mode == ContextMode::Create {
            return self.prepare(request);
        }
        let body = used.record.body();
        match (&body.content, request.input()) {
            (ContextContent::Chat { messages, .. }, PromptInput::Chat { messages: more, .. }) => {
                let mut all = messages.clone();
                all.extend(more.iter().cloned());
                let tools = tools_in_effect(request.input(), Some(used));
                self.prepare(&request.continued(PromptInput::Chat { messages: all, tools }))
            }
            (
                ContextContent::Chat { messages, .. },
                PromptInput::Raw {
                    prompt,
                    template: true,
                    ..
                },
            ) => {
                let mut all = messages.clone();
                all.push(crate::core::ChatMessage::new(crate::core::Role::User, prompt.clone()));
                let tools = tools_in_effect(request.input(), Some(used));
                self.prepare(&request.continued(PromptInput::Chat { messages: all, tools }))
            }
            _ => {
                let vocabulary = self.model.vocabulary();
                if let Some((at, token)) = body
                    .tokens
                    .iter()
                    .enumerate()
                    .find(|(_, token)| **token as usize >= vocabulary.len())
                {
                    return Err(CoreError::bad_request(format!(
                        "context[{at}] is {token}, which is not a token of {} ({} tokens)",
                        self.info.name,
                        vocabulary.len()
                    )));
                }
                let mut own = self.prepare(request)?;
                let bos = self.model.vocabulary().bos();
                let skip = usize::from(bos.is_some() && own.prompt.first().copied() == bos);
                let mut prompt = body.tokens.as_ref().clone();
                prompt.extend_from_slice(&own.prompt[skip..]);
                own.prompt = prompt;
                Ok(own)
            }
        }
    }
}
