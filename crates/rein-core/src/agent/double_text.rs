//! Double texting: what a call on a session that is already answering another call
//! does ([`DoubleText`]), in one process and across replicas.
//!
//! Two levels order the calls on one session. In a process, the session's slot is a
//! FIFO lock; with leasing, the store's lease and its queue of waiters order the
//! processes ([`SessionLeases::acquire_queued_and_load`](crate::store::SessionLeases::acquire_queued_and_load)).
//! A call's policy decides how it takes them:
//!
//! | policy | a busy session | the running call | guarantees |
//! |---|---|---|---|
//! | [`Reject`](DoubleText::Reject) | fails at once with `Busy` | runs on | nothing of the new call ran or was stored |
//! | [`Enqueue`](DoubleText::Enqueue) (default) | waits its turn, FIFO | runs on | first come first served at the store; at most `max_waiting` waiters, else `QueueFull` |
//! | [`Interrupt`](DoubleText::Interrupt) | signals, then waits its turn | stops at its next safe point, keeps its partial turn | the new call sees everything so far |
//! | [`Rollback`](DoubleText::Rollback) | signals, then waits its turn | stops at its next safe point, drops its unsettled steps | settled effects stay, flagged |
//!
//! A **safe point** is the top of the reasoning loop after the first model turn: before
//! a model turn, when every tool the previous turn started has settled and its result
//! is recorded (a call that answers in one turn is never stopped). A call is
//! never stopped in the middle of a tool, so an interrupt never leaves a tool use
//! without a result and never runs an approved call twice; the running call saves and
//! releases the session as any call does, and the newer call loads what it saved. In a
//! process the signal is an atomic flag on the session's slot (created by the first call
//! that waits for the session) read at every safe point; across replicas it is
//! a store-side flag on the holder's lease ([`SessionLeases::signal`](crate::store::SessionLeases::signal)),
//! read at every safe point too (one round trip each).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde_json::Value;

use super::builder::AgentBuilder;
use super::memory::CallMemory;
use super::run::{Call, emit};
use super::stream::AgentEvent;
use super::{CallOutcome, StopReason};
pub use crate::context::DoubleText;
use crate::error::Error;
use crate::hook::{Decision, DecisionKind, EventKind};
use crate::message::{ContentBlock, Msg, Role};
use crate::store::SessionSignal;
use crate::tool::EffectClass;

/// Metadata key on the messages a rollback kept (the tool calls with an effect that
/// had run, their results, and the note): `true`.
pub const ROLLED_BACK_KEY: &str = "rein.rolled_back";

/// How many calls may wait for one session unless the builder says otherwise
/// ([`AgentBuilder::max_waiting`]).
pub const MAX_WAITING: usize = 1024;

impl<B> AgentBuilder<B> {
    /// What a call does when its session is already answering another call (default
    /// [`DoubleText::Enqueue`]); a call overrides it with
    /// [`RunContext::with_double_text`](crate::RunContext::with_double_text). `Interrupt` and `Rollback` across replicas
    /// need a leased store that carries signals
    /// ([`SessionLeases::orders_and_signals`](crate::store::SessionLeases::orders_and_signals)):
    /// `build()` fails with [`BuildErrorKind::InvalidConfig`](crate::BuildErrorKind::InvalidConfig)
    /// naming `double_text` otherwise. Subagents do not inherit it: the delegating
    /// call's session orders its tree.
    pub fn double_text(mut self, policy: DoubleText) -> Self {
        self.config.double_text = policy;
        self
    }

    /// How many calls may wait for one session (default [`MAX_WAITING`]): in this
    /// process, and at the store's queue under leasing (each bound holds on its own).
    /// One more fails at once with
    /// [`StoreErrorKind::QueueFull`](crate::store::StoreErrorKind::QueueFull). Zero:
    /// no call waits (as `Reject`, but with `QueueFull`).
    pub fn max_waiting(mut self, max: usize) -> Self {
        self.config.max_waiting = max;
        self
    }
}

/// The in-process side of a session's double texting: which call holds the slot, the
/// signal sent to it, and how many calls wait.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// The generation of the call that holds the slot (raised when a call takes it).
    run: AtomicU64,
    /// `generation << 2 | code` (1 interrupt, 2 rollback) of the last signal.
    signal: AtomicU64,
    /// Calls waiting for the slot.
    pub(crate) waiting: AtomicUsize,
}

impl Control {
    /// A call took the slot: its generation (signals sent before it do not reach it).
    pub(crate) fn begin(&self) -> u64 {
        self.run.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation of the call that holds the slot now.
    pub(crate) fn current(&self) -> u64 {
        self.run.load(Ordering::Acquire)
    }

    /// Signals the call that holds the slot now (keeping the stronger signal).
    pub(crate) fn signal(&self, signal: SessionSignal) {
        let code = code(signal);
        let run = self.run.load(Ordering::Acquire);
        let _ = self
            .signal
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                let keep = if cur >> 2 == run { cur & 3 } else { 0 };
                Some(run << 2 | keep.max(code))
            });
    }

    /// The signal sent to the call of generation `run`, if any.
    pub(crate) fn signalled(&self, run: u64) -> Option<SessionSignal> {
        let cur = self.signal.load(Ordering::Acquire);
        if cur >> 2 != run {
            return None;
        }
        match cur & 3 {
            1 => Some(SessionSignal::Interrupt),
            2 => Some(SessionSignal::Rollback),
            _ => None,
        }
    }
}

fn code(signal: SessionSignal) -> u64 {
    match signal {
        SessionSignal::Rollback => 2,
        _ => 1,
    }
}

/// Counts a call waiting for a slot until it gets it (or gives up).
pub(crate) struct Waiting(pub(crate) Arc<Control>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The double-text state of one running call.
#[derive(Clone)]
pub(crate) struct Watch {
    pub(crate) control: Arc<Control>,
    pub(crate) run: u64,
}

impl Call<'_> {
    /// At a safe point after the first model turn: the signal a newer call sent this
    /// one, if any (the in-process flag; under a lease also the store's). The first
    /// safe point is after the first turn, so a call of one turn never looks.
    pub(super) async fn superseded(
        &self,
        memory: &mut CallMemory,
        iteration: u32,
    ) -> Result<Option<SessionSignal>, Error> {
        if iteration == 0 {
            return Ok(None);
        }
        if memory.watch().is_none() {
            // A waiter created the session's control after this call took the slot:
            // this call is the one it signals (no other call took the slot since).
            let watch = self
                .agent
                .sessions
                .existing_control(self.key)
                .map(|control| Watch {
                    run: control.current(),
                    control,
                });
            memory.set_watch(watch);
        }
        let local = memory.watch().and_then(|w| w.control.signalled(w.run));
        if local.is_some() {
            return Ok(local);
        }
        let Some(lease) = memory.lease() else {
            return Ok(None);
        };
        lease.signalled().await.map_err(Error::store)
    }

    /// Ends the call on a newer call's signal: an interrupt keeps everything with a
    /// note; a rollback puts the session back to where the call began, keeping the
    /// effects that ran (flagged) and a note listing them.
    pub(super) async fn stop_superseded(
        &mut self,
        memory: &mut CallMemory,
        signal: SessionSignal,
        start: usize,
    ) -> Result<CallOutcome, Error> {
        let (reply, reason, kept) = match signal {
            SessionSignal::Rollback => {
                let kept = self.kept_effects(memory, start);
                let names: Vec<String> = kept
                    .iter()
                    .flat_map(|m| m.tool_uses())
                    .map(|u| format!("`{}` ({})", u.name, u.id))
                    .collect();
                let text = if names.is_empty() {
                    "Rolled back: a newer message replaced this request before it was answered; \
                     nothing it did had an effect."
                        .to_owned()
                } else {
                    format!(
                        "Rolled back: a newer message replaced this request before it was \
                         answered. These tool calls had already taken effect and could not be \
                         undone: {}.",
                        names.join(", ")
                    )
                };
                let mut note = Msg::assistant(text).synthetic();
                note.metadata
                    .insert(ROLLED_BACK_KEY.to_owned(), Value::Bool(true));
                let mut tail = kept;
                tail.push(note.clone());
                memory.rewrite_from(start, tail);
                (note, StopReason::RolledBack, names)
            }
            _ => {
                let note = Msg::assistant(
                    "Interrupted: a newer message arrived before this request was answered; \
                     what was done so far is kept.",
                )
                .synthetic();
                memory.push(note.clone());
                (note, StopReason::Interrupted, Vec::new())
            }
        };
        memory.disarm();
        self.note_superseded(reason, &kept);
        emit(self.sink, || AgentEvent::Superseded {
            reason,
            kept_effects: kept.clone(),
        });
        self.finish(reply, reason).await
    }

    /// The messages a rollback keeps of `memory[start..]`: each assistant turn reduced
    /// to its tool calls with an effect that ran, and their results, flagged.
    fn kept_effects(&self, memory: &CallMemory, start: usize) -> Vec<Msg> {
        let messages = memory.messages();
        let tail = messages.get(start..).unwrap_or_default();
        let ran: std::collections::HashSet<&str> = tail
            .iter()
            .filter(|m| m.role == Role::Tool)
            .flat_map(|m| m.content.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolResult(r) => Some(r.id.as_str()),
                _ => None,
            })
            .collect();
        let mut kept_ids = std::collections::HashSet::new();
        let mut out = Vec::new();
        for msg in tail {
            match msg.role {
                Role::Assistant if msg.has_tool_uses() => {
                    let mut reduced = msg.clone();
                    reduced.content.retain(|b| match b {
                        ContentBlock::ToolUse(u) => {
                            let effect = ran.contains(u.id.as_str())
                                && self.effect_ran(memory, msg, &u.id, &u.name);
                            if effect {
                                kept_ids.insert(u.id.clone());
                            }
                            effect
                        }
                        _ => false,
                    });
                    if reduced.has_tool_uses() {
                        reduced
                            .metadata
                            .insert(ROLLED_BACK_KEY.to_owned(), Value::Bool(true));
                        out.push(reduced);
                    }
                }
                Role::Tool => {
                    let mut reduced = msg.clone();
                    reduced.content.retain(
                        |b| matches!(b, ContentBlock::ToolResult(r) if kept_ids.contains(&r.id)),
                    );
                    if !reduced.content.is_empty() {
                        reduced
                            .metadata
                            .insert(ROLLED_BACK_KEY.to_owned(), Value::Bool(true));
                        out.push(reduced);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Whether the call `id` of tool `name` (on `msg`) may have had an effect: with a
    /// journal, it has an entry (only calls of tools that are not read-only are
    /// journaled, and only once they were admitted to run); without one, its tool is
    /// not read-only.
    fn effect_ran(&self, memory: &CallMemory, msg: &Msg, id: &str, name: &str) -> bool {
        if memory.journaling() {
            return msg
                .metadata
                .get(super::journal::JOURNAL_KEY)
                .and_then(|j| j.get(id))
                .is_some();
        }
        self.agent
            .toolkit
            .get(name)
            .is_none_or(|t| t.effect_class() != EffectClass::ReadOnly)
    }

    fn note_superseded(&self, reason: StopReason, kept: &[String]) {
        tracing::info!(target: "rein::double_text", agent = %self.agent.info.name, ?reason, "stopped by a newer message");
        if !self.meta.mode.on {
            return;
        }
        let (kind, what) = match reason {
            StopReason::RolledBack => (DecisionKind::RolledBack, "rolled back"),
            _ => (DecisionKind::Interrupted, "interrupted"),
        };
        let d = Decision {
            hook: "<runtime>".to_owned(),
            priority: 0,
            event: EventKind::PreReasoning,
            kind,
            field: "call",
            before: "running".to_owned(),
            after: what.to_owned(),
            reason: Some(if kept.is_empty() {
                format!("{what} by a newer message on the session")
            } else {
                format!(
                    "{what} by a newer message on the session; effects kept: {}",
                    kept.join(", ")
                )
            }),
            agent_id: self.agent.info.id.clone(),
            tool_call_id: None,
            agent_path: self.agent.info.name.clone(),
            changes: Vec::new(),
        };
        self.keep_runtime(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_signal_reaches_only_the_call_that_held_the_slot_and_keeps_the_stronger() {
        let control = Control::default();
        let first = control.begin();
        assert_eq!(control.signalled(first), None);
        control.signal(SessionSignal::Rollback);
        control.signal(SessionSignal::Interrupt);
        assert_eq!(control.signalled(first), Some(SessionSignal::Rollback));
        let second = control.begin();
        assert_eq!(
            control.signalled(second),
            None,
            "a later call is not signalled"
        );
        control.signal(SessionSignal::Interrupt);
        assert_eq!(control.signalled(second), Some(SessionSignal::Interrupt));
        assert_eq!(control.signalled(first), None);
    }
}
