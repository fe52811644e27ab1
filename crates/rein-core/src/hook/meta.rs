//! The header every event carries: the call's identity, the hook being called, the
//! decision trail and the timestamp.

use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::decision::{Decision, DecisionKind, RevealNumbers, TrailMode, digest};
use crate::context::{AgentInfo, RunContext};
use crate::message::{Msg, ToolUse};
use crate::model::{GenerateOptions, Messages};

/// A hook's name and priority, as the chain knows them (indexed like its entries).
#[derive(Debug)]
pub(crate) struct HookLabel {
    pub(crate) name: Arc<str>,
    pub(crate) priority: i32,
}

/// What every event of one call shares: built once per call.
#[derive(Debug)]
pub(crate) struct CallInfo {
    pub(crate) agent: Arc<AgentInfo>,
    pub(crate) ctx: RunContext,
    pub(crate) hooks: Arc<[HookLabel]>,
    /// Per-call state of the hooks that pair events (latency timers, audit
    /// durations, budgets), by hook instance: see `crate::hooks::state`. Dropped with
    /// the call, so a finished or cancelled call leaves nothing behind.
    pub(crate) states: CallStates,
}

/// The per-call hook states of one call: `(hook instance id, state)`. A call holds a
/// handful (one per stateful hook), so a linear scan beats hashing.
#[derive(Default)]
pub(crate) struct CallStates(
    pub(crate) std::sync::Mutex<Vec<(u64, Box<dyn std::any::Any + Send>)>>,
);

impl std::fmt::Debug for CallStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallStates")
    }
}

/// What every event carries: who is running, in which call, and which hook is being
/// called. Cloning it for an event costs one reference count.
#[derive(Debug)]
pub(crate) struct EventMeta {
    pub(crate) call: Arc<CallInfo>,
    /// Index of the hook currently being called (set by the chain).
    pub(crate) current: Option<u16>,
    /// Whether (and how) decisions are recorded in this call.
    pub(crate) mode: TrailMode,
    /// Decisions made during this dispatch; drained by the loop afterwards.
    pub(crate) trail: Vec<Decision>,
    /// The event's timestamp, read from the clock on first request; reset by the
    /// chain at the start of every dispatch.
    pub(crate) stamp: OnceLock<Instant>,
}

impl Clone for EventMeta {
    /// A header for a new event of the same call: no hook running, no decisions, no
    /// timestamp yet.
    fn clone(&self) -> Self {
        Self {
            call: Arc::clone(&self.call),
            current: None,
            mode: self.mode,
            trail: Vec::new(),
            stamp: OnceLock::new(),
        }
    }
}

impl EventMeta {
    pub(crate) fn new(
        agent: &Arc<AgentInfo>,
        ctx: &RunContext,
        hooks: Arc<[HookLabel]>,
        mode: TrailMode,
    ) -> Self {
        Self {
            call: Arc::new(CallInfo {
                agent: Arc::clone(agent),
                ctx: ctx.clone(),
                hooks,
                states: CallStates::default(),
            }),
            current: None,
            mode,
            trail: Vec::new(),
            stamp: OnceLock::new(),
        }
    }

    /// Clears the timestamp of an event object that is dispatched again (a chunk
    /// event reused for the next chunk, another `PreActing` pass): the next request
    /// reads the clock. A new event starts without one.
    #[inline]
    pub(crate) fn restamp(&mut self) {
        if self.stamp.get().is_some() {
            self.stamp = OnceLock::new();
        }
    }

    /// The event's timestamp (see [`HookEvent::timestamp`]).
    #[inline]
    pub(crate) fn timestamp(&self) -> Instant {
        *self.stamp.get_or_init(Instant::now)
    }

    /// The hook currently being called.
    pub(crate) fn current_hook(&self) -> Option<&HookLabel> {
        self.current
            .and_then(|i| self.call.hooks.get(usize::from(i)))
    }

    /// Whether decisions are recorded (check before computing digests).
    #[inline]
    pub(crate) fn recording(&self) -> bool {
        self.mode.on
    }

    /// Digest of a value for a decision record.
    pub(crate) fn digest<T: serde::Serialize + ?Sized>(&self, value: &T) -> String {
        digest(value, self.mode.reveal)
    }

    /// Records a decision by the current hook.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note(
        &mut self,
        event: super::EventKind,
        kind: DecisionKind,
        field: &'static str,
        before: String,
        after: String,
        reason: Option<String>,
        tool_call_id: Option<&str>,
    ) {
        let (hook, priority) = match self.current_hook() {
            Some(h) => (h.name.to_string(), h.priority),
            None => ("<runtime>".to_owned(), 0),
        };
        self.trail.push(Decision {
            hook,
            priority,
            event,
            kind,
            field,
            before,
            after,
            reason,
            agent_id: self.call.agent.id.clone(),
            tool_call_id: tool_call_id.map(str::to_owned),
            agent_path: self.call.agent.name.clone(),
            changes: Vec::new(),
        });
    }

    /// Adds to the decision just recorded the readable changes of the numeric fields
    /// the operator opted into ([`RevealNumbers`] in the run context), if any.
    pub(crate) fn reveal_changes(&mut self, before: &ToolUse, after: &ToolUse) {
        let Some(reveal) = self.call.ctx.extensions().get::<RevealNumbers>() else {
            return;
        };
        if let Some(d) = self.trail.last_mut() {
            d.changes = reveal.changes(before, after);
        }
    }

    /// Replaces a messages list (`PreReasoning`, `PreSummary`), recording the change.
    pub(crate) fn replace_messages(
        &mut self,
        event: super::EventKind,
        slot: &mut Messages,
        messages: Vec<Msg>,
    ) {
        if self.recording() && *slot != messages {
            let (b, a) = (self.digest(&*slot), self.digest(&messages));
            self.note(
                event,
                DecisionKind::MessagesReplaced,
                "messages",
                b,
                a,
                None,
                None,
            );
        }
        *slot = messages.into();
    }

    /// Replaces generate options, recording the change (options in full: they hold no
    /// user data).
    pub(crate) fn replace_options(
        &mut self,
        event: super::EventKind,
        slot: &mut GenerateOptions,
        options: GenerateOptions,
    ) {
        if self.recording() && options != *slot {
            let (b, a) = (options_text(slot), options_text(&options));
            self.note(
                event,
                DecisionKind::OptionsSet,
                "generate_options",
                b,
                a,
                None,
                None,
            );
        }
        *slot = options;
    }

    /// Replaces a model message (`PostReasoning`, `PostSummary`), recording the change.
    pub(crate) fn replace_message(
        &mut self,
        event: super::EventKind,
        slot: &mut Msg,
        message: Msg,
    ) {
        if self.recording() && message != *slot {
            let (b, a) = (self.digest(&*slot), self.digest(&message));
            self.note(
                event,
                DecisionKind::MessageReplaced,
                "message",
                b,
                a,
                None,
                None,
            );
        }
        *slot = message;
    }
}

/// Options shown in full in decision records: they hold no user data.
fn options_text(o: &GenerateOptions) -> String {
    serde_json::to_string(o).unwrap_or_default()
}
