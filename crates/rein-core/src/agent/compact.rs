//! Compaction ([`ContextPolicy::Compact`]): when the next reasoning request would not
//! fit the context window, the oldest whole turns are summarized by one model call and
//! replaced, in the stored conversation, by the summary.
//!
//! It runs before `PreReasoning`, so every hook of the turn (masking, audit) sees the
//! conversation as it will be sent: the summary in place of the turns. `PreCompact` may
//! change what is summarized or veto it; `PostCompact` may rewrite the summary. The
//! summary call is a model call like any other for budgets (reserved, charged, refused
//! when a budget cannot pay for it), but its chunks reach no hook and no caller. The
//! compacted conversation is saved with the session, so every replica continues from
//! the same summary.

use std::sync::Arc;

use serde_json::json;

use super::fire::fire;
use super::memory::CallMemory;
use super::model_turn::Phase;
use super::run::Call;
use super::window::{ContextPolicy, cut_index, estimate, overflow, pinned, tokens_of};
use crate::budget::BUDGET_KEY;
use crate::error::Error;
use crate::hook::{EventKind, PostCompactEvent, PreCompactEvent};
use crate::label::Label;
use crate::message::{Msg, Role};
use crate::model::{GenerateOptions, Messages, ModelRequest};

/// Metadata key of the summary message a compaction stores: `{"messages": <how many
/// stored messages it replaced>}`.
pub const COMPACTION_KEY: &str = "rein.compaction";

/// The summary call's instructions.
const COMPACT_PROMPT: &str = "You compress conversations. Summarize the conversation you are \
     given for the assistant that continues it: keep every fact, number, name, decision, \
     tool result and open task; drop pleasantries. Write plain sentences, no preamble.";

/// The last message of the summary call.
const COMPACT_INSTRUCTION: &str =
    "Summarize the conversation above now, following your instructions.";

/// Tokens of a summary call besides its turns: the prompt, the instruction, template.
const FIXED_TOKENS: u64 = 160;

/// How many of `msgs` (whole turns: a cut only before a user message or at the end)
/// fit in `room` estimated tokens; 0 when the first turn alone does not.
fn fitting_turns(msgs: &[Msg], room: u64) -> usize {
    let mut used = 0u64;
    let mut fits = 0;
    for (i, m) in msgs.iter().enumerate() {
        if i > 0 && m.role == Role::User {
            fits = i;
        }
        used += tokens_of(m);
        if used > room {
            return fits;
        }
    }
    msgs.len()
}

/// How the summary is introduced in the conversation.
const SUMMARY_PREFIX: &str = "Summary of the earlier conversation (older turns were \
     compacted to fit the context window):";

/// What the assistant answers to the summary (it carries the session's budget record).
const SUMMARY_ACK: &str = "Understood; I will continue from this summary.";

impl Call<'_> {
    /// Compacts the conversation when the next reasoning request would not fit the
    /// window under [`ContextPolicy::Compact`]. `Ok(false)`: nothing to do, or done;
    /// `Ok(true)`: a budget refused the summary call (the call stops for it).
    ///
    /// # Errors
    /// [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow) when the current
    /// turn alone does not fit, the turns to summarize do not fit the window either, or
    /// a `PreCompact` hook vetoed; the errors of a model call.
    pub(super) async fn compact_if_needed(
        &mut self,
        memory: &mut CallMemory,
    ) -> Result<bool, Error> {
        let Some((window, ContextPolicy::Compact)) = self.agent.window else {
            return Ok(false);
        };
        let window = u64::from(window);
        let next = ModelRequest {
            messages: Messages::from_parts(
                self.system.clone(),
                memory.shared(),
                self.retracted.clone(),
            ),
            tools: Arc::clone(&self.agent.tool_schemas),
            options: self.request_options(false),
        };
        let needed = estimate(&next);
        if needed <= window {
            return Ok(false);
        }
        // Room for the summary and its acknowledgement; the summary itself is asked for
        // in half of it (the estimate counts its text generously).
        let reserve = (window / 4).min(1024);
        let history = memory.messages();
        // What is kept fits half the window where it can, so the next turns fit beside
        // the summary: a cut to just under the window would compact again every turn.
        let cut = cut_index(history, needed, window / 2)
            .or_else(|| cut_index(history, needed, window.saturating_sub(reserve)));
        let Some(cut) = cut else {
            return Err(overflow(
                needed,
                window,
                &next,
                "Compact (the current turn alone does not fit)",
            ));
        };
        let kept_pins: Vec<Msg> = history[..cut]
            .iter()
            .filter(|m| pinned(m))
            .cloned()
            .collect();
        let compacted: Vec<Msg> = history[..cut]
            .iter()
            .filter(|m| !pinned(m))
            .cloned()
            .collect();
        // The newest record of what it replaces (on an assistant message, or on the
        // first call's input while that call had no answer yet).
        let budget_record = history[..cut]
            .iter()
            .rev()
            .find_map(|m| m.metadata.get(BUDGET_KEY))
            .cloned();
        let replaced = compacted.len();
        // The summary is derived from what it replaces: it carries their labels, and
        // the quarantined documents they held stay in the session (by handle).
        let replaced_label = Label::join_all(compacted.iter().map(Msg::label));
        let documents = super::quarantine::collect(&compacted);
        let mut to_summarize: Messages = compacted.into();
        if self.wants(EventKind::PreCompact) {
            let (messages, veto) = fire!(self, PreCompact(PreCompactEvent {
                meta: self.meta.clone(),
                messages: to_summarize,
                veto: None,
            }) => { messages, veto });
            if let Some(reason) = veto {
                return Err(Error::context_window(format!(
                    "the conversation needs compacting to fit the context window of {window} \
                     tokens, and a PreCompact hook vetoed it: {reason}"
                )));
            }
            to_summarize = messages;
        }
        // A rolling summary: the turns in order, as many whole turns per call as fit
        // the window with the summary so far.
        let turns = to_summarize.to_vec();
        let max_tokens = u32::try_from(reserve / 2).unwrap_or(u32::MAX);
        let mut so_far: Option<String> = None;
        let mut from = 0;
        while from < turns.len() {
            let head = so_far
                .as_ref()
                .map(|s| Msg::user(format!("{SUMMARY_PREFIX}\n{s}")).synthetic());
            let room =
                window.saturating_sub(reserve + FIXED_TOKENS + head.as_ref().map_or(0, tokens_of));
            let take = fitting_turns(&turns[from..], room);
            if take == 0 {
                return Err(Error::context_window(format!(
                    "the conversation needs compacting to fit the context window of {window} \
                     tokens, but one of its turns alone does not fit a summary call"
                )));
            }
            let mut input: Vec<Msg> = head.into_iter().collect();
            input.extend_from_slice(&turns[from..from + take]);
            let request = ModelRequest {
                messages: Messages::from_parts(
                    Some(Arc::new(Msg::system(COMPACT_PROMPT))),
                    Arc::new(input),
                    vec![Msg::user(COMPACT_INSTRUCTION).synthetic()],
                ),
                tools: Arc::default(),
                options: GenerateOptions {
                    max_tokens: Some(max_tokens),
                    response_format: None,
                    ..self.agent.options.clone()
                },
            };
            let summary = if self.ledgers.is_none() {
                self.stream_model(request, Phase::Compaction).await?
            } else {
                match Box::pin(self.model_call(memory, request, Phase::Compaction)).await? {
                    Some(summary) => summary,
                    None => return Ok(true),
                }
            };
            so_far = Some(summary.text().trim().to_owned());
            from += take;
        }
        let summary = so_far.unwrap_or_default();
        let mut message = Msg::user(format!("{SUMMARY_PREFIX}\n{summary}")).synthetic();
        message
            .metadata
            .insert(COMPACTION_KEY.to_owned(), json!({ "messages": replaced }));
        if self.wants(EventKind::PostCompact) {
            message = fire!(self, PostCompact(PostCompactEvent {
                meta: self.meta.clone(),
                message,
                compacted: replaced,
            }) => { message });
        }
        // After the hooks: a hook rewrites the summary, not where it came from.
        message.raise_label(replaced_label);
        if let Some(documents) = documents {
            message
                .metadata
                .insert(super::quarantine::QUARANTINE_KEY.to_owned(), documents);
        }
        let mut ack = Msg::assistant(SUMMARY_ACK)
            .synthetic()
            .with_name(self.agent.info.name.clone());
        if let Some(record) = budget_record {
            ack.metadata.insert(BUDGET_KEY.to_owned(), record);
        }
        let rest = memory.messages()[cut..].to_vec();
        let mut compacted_history = kept_pins;
        compacted_history.push(message);
        compacted_history.push(ack);
        compacted_history.extend(rest);
        tracing::debug!(
            agent = %self.agent.info.name,
            replaced,
            window,
            "oldest turns compacted into a summary to fit the context window"
        );
        memory.conversation().replace(compacted_history);
        Ok(false)
    }
}
