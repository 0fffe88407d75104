//! The model worker's KV bookkeeping (issue 11): which slot an admitted request decodes in and
//! what it reuses there ([`SlotKeeper::admit`]), the tokens each slot's KV holds
//! ([`SlotKeeper::decoded`]), and what a finished request leaves behind ([`SlotKeeper::retire`]:
//! its prompt and answer stay for prefix reuse; a commit hands the slot to its context; a
//! request that ran inside a context's own slot gives the context its tokens back).
//! Also how a request's prompt continues a context ([`LlamaModelHandle::prepare_in_context`]).
//!
//! Key type: [`SlotKeeper`]. Cost per admission: one prefix comparison per slot, then one
//! sequence truncate or copy (no tensor copies: cells are shared in the unified KV cache).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use super::{end_live, next_waiting, Job, Live, LlamaModelHandle, Prepared, Shared};
use crate::actors::contexts::{ContextContent, ContextMode, ContextRecord, ContextUse, Residence};
use crate::actors::prefix::{Placement, SlotCache};
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

    /// Tokens just decoded into `slot`, in a decode call of `batch` tokens.
    pub(super) fn decoded(&mut self, slot: usize, tokens: &[u32], batch: usize) {
        self.cache.extend(slot, tokens, batch > 1);
    }

    /// Moves waiting jobs into free slots, each starting from the longest prefix of its prompt
    /// that some slot's KV already holds.
    pub(super) fn admit(
        &mut self,
        context: &mut Context<'_>,
        live: &mut [Option<Live>],
        waiting: &mut VecDeque<Job>,
        shared: &Shared,
    ) {
        self.forget_deleted_owners();
        loop {
            let free: Vec<bool> = live.iter().map(Option::is_none).collect();
            if !free.contains(&true) {
                return;
            }
            let Some(mut job) = next_waiting(waiting, shared) else {
                return;
            };
            let key = job.context.as_ref().map(|c| c.record.key);
            let Some(placement) = self.cache.place(&job.prompt, &free, !job.prefill_only, key)
            else {
                waiting.push_front(job);
                return;
            };
            let reuse = self.apply(context, placement, &job.prompt);
            job.cached = reuse;
            let index = placement.slot;
            let entry = Live {
                job,
                prompt_done: reuse,
                next_token: None,
                position: reuse as u32,
                prompt_started: None,
                prompt_finished: None,
            };
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
                self.evict_owner(owner);
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

    /// A context loses its slot to another request; its tokens remain the truth, so its next
    /// use prefills them again.
    fn evict_owner(&mut self, key: u64) {
        if let Some(record) = self.owners.remove(&key).and_then(|weak| weak.upgrade()) {
            record.set_residence(Residence::Cold);
        }
        self.cache.release(key);
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
        if let Some(length) = self.cache.owned_length(index) {
            // A request that ran inside a context's slot leaves the context as it was.
            if self.cache.tokens(index).len() > length {
                let kept = context
                    .seq(index)
                    .is_some_and(|seq| context.truncate(seq, length as u32));
                if kept {
                    self.cache.truncate(index, length);
                } else if let Some(owner) = self.cache.owner(index) {
                    self.evict_owner(owner);
                    self.cache.forget(index);
                }
            }
        }
        end_live(entry, reason, text, shared);
    }
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
        match (&body.content, &request.input) {
            (
                ContextContent::Chat { messages, tools },
                PromptInput::Chat {
                    messages: more,
                    tools: own_tools,
                },
            ) => {
                let mut continued = request.clone();
                let mut all = messages.clone();
                all.extend(more.iter().cloned());
                let tools = if own_tools.is_empty() {
                    tools.clone()
                } else {
                    own_tools.clone()
                };
                continued.input = PromptInput::Chat {
                    messages: all,
                    tools,
                };
                self.prepare(&continued)
            }
            (
                ContextContent::Chat { messages, tools },
                PromptInput::Raw {
                    prompt,
                    template: true,
                    ..
                },
            ) => {
                let mut continued = request.clone();
                let mut all = messages.clone();
                all.push(crate::core::ChatMessage::new(
                    crate::core::Role::User,
                    prompt.clone(),
                ));
                continued.input = PromptInput::Chat {
                    messages: all,
                    tools: tools.clone(),
                };
                self.prepare(&continued)
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
