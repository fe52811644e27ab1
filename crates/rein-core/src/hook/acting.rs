//! The acting events: before, during and after each tool call.

use std::sync::Arc;

use super::decision::DecisionKind;
use crate::label::Label;
use crate::message::{ToolResult, ToolUse};
use crate::tool::ToolCapabilities;

use super::EventKind;
use super::meta::EventMeta;

/// Why and by whom a tool call was denied.
#[derive(Clone, Debug)]
pub(crate) struct Denial {
    pub(crate) reason: String,
    pub(crate) hook: Option<Arc<str>>,
}

/// What a human decided about a tool call, as the runtime applied it: on the call's
/// `PreActing` ([`PreActingEvent::human_decision`]) and `PostActing`
/// ([`PostActingEvent::human_decision`]) events, so a hook (the audit) records who
/// decided what about which call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HumanDecision {
    /// The decision: `approve`, `deny`, `edit`, `retry`, `record_outcome`.
    pub decision: String,
    /// Who decided, when the decisions said ([`ApprovalDecisions::by`](crate::agent::ApprovalDecisions::by)).
    pub approver: Option<String>,
    /// Why, when the approver said.
    pub reason: Option<String>,
}

/// Fires once per tool call, in call order, before any tool of the turn runs.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreActingEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) denial: Option<Denial>,
    /// Set when a hook changed the call (so memory is updated without comparing).
    pub(crate) changed: bool,
    /// The chain entry of the hook that last changed the call in the current pass
    /// (`None` for the runtime or no change): the hooks before it have not seen the
    /// call's final form and run again.
    pub(crate) changed_by: Option<u16>,
    /// The call as admitted, before the first rewrite (set on the first change only).
    pub(crate) original: Option<Box<ToolUse>>,
    /// A human's decision the runtime applied to the call before any hook.
    pub(crate) human: Option<Box<HumanDecision>>,
    /// A hook asked to stop the call for a human ([`PreActingEvent::stop_for_human`]).
    pub(crate) wait: bool,
    /// The label of the model turn that made the call.
    pub(crate) label: Label,
    /// The join of the labels of the quarantined documents the arguments name (kept
    /// current by the runtime between passes).
    pub(crate) argument_label: Label,
    /// The capabilities of the tool the call names now.
    pub(crate) capabilities: ToolCapabilities,
    /// Why a hook stopped the call for a human.
    pub(crate) wait_reason: Option<Box<str>>,
}

impl PreActingEvent {
    /// A `PreActing` event for a call as admitted.
    pub(crate) fn new(meta: EventMeta, tool_use: ToolUse) -> Self {
        Self {
            meta,
            tool_use,
            denial: None,
            changed: false,
            changed_by: None,
            original: None,
            human: None,
            wait: false,
            label: Label::BOTTOM,
            argument_label: Label::BOTTOM,
            capabilities: ToolCapabilities::default(),
            wait_reason: None,
        }
    }

    /// The label of the model turn that made this call: the join of the labels of
    /// everything in the session when the model answered (see [`crate::label`]). An
    /// untrusted label means content an attacker could have written was in the model's
    /// context, so it may have chosen this call.
    #[inline]
    pub fn label(&self) -> Label {
        self.label
    }

    /// The join of the labels of the quarantined documents (`$docN`) the call's
    /// arguments name: what flows into the tool when the runtime substitutes them after
    /// `PreActing`. [`Label::BOTTOM`] when the arguments name none. Follows rewrites.
    #[inline]
    pub fn argument_label(&self) -> Label {
        self.argument_label
    }

    /// What the tool this call names declares ([`Tool::capabilities`](crate::Tool::capabilities)),
    /// with `changes_state` resolved against its effect class. Follows renames.
    #[inline]
    pub fn tool_capabilities(&self) -> ToolCapabilities {
        self.capabilities
    }

    /// Stops the call for a human instead of running this tool call: nothing of this
    /// turn runs, the call is stored (in the form it has now, after every rewrite the
    /// `PreActing` hooks made) as waiting for a decision, and the reply lists it under
    /// [`PENDING_CALLS_KEY`](crate::agent::PENDING_CALLS_KEY) with the model's original
    /// form, so what a human approves is exactly what would run. The call ends with
    /// [`StopReason::ReasoningStopped`](crate::StopReason::ReasoningStopped); a resume
    /// with a decision runs it ([`Agent::resume`](crate::Agent::resume)). Taken back if a
    /// later hook changes the call (the hooks then see the new form again, and decide
    /// again), and ignored once the call was denied.
    pub fn stop_for_human(&mut self) {
        if self.denial.is_none() {
            self.wait = true;
        }
    }

    /// [`PreActingEvent::stop_for_human`], with the reason a human is needed: recorded
    /// in the decision trail ([`DecisionKind::ApprovalRequired`]) and readable by later
    /// hooks (the audit) through [`PreActingEvent::stop_reason`]. The first reason is
    /// kept.
    pub fn stop_for_human_because(&mut self, reason: impl Into<String>) {
        if self.denial.is_some() {
            return;
        }
        self.wait = true;
        if self.wait_reason.is_none() {
            let reason = reason.into();
            if self.meta.recording() {
                let id = self.tool_use.id.clone();
                self.meta.note(
                    super::EventKind::PreActing,
                    DecisionKind::ApprovalRequired,
                    "approval",
                    "false".into(),
                    "true".into(),
                    Some(reason.clone()),
                    Some(&id),
                );
            }
            self.wait_reason = Some(reason.into_boxed_str());
        }
    }

    /// Why a hook stopped this call for a human, when it said
    /// ([`PreActingEvent::stop_for_human_because`]).
    pub fn stop_reason(&self) -> Option<&str> {
        self.wait_reason.as_deref()
    }

    /// Whether a hook asked to stop for a human on this call in the current pass.
    #[inline]
    pub fn is_stopped_for_human(&self) -> bool {
        self.wait
    }

    /// Whether a human decided about this call: it was stored as waiting for a decision
    /// (a stop for approval), and the resuming call carried one, which the runtime
    /// applied before admission (an approval lets it run, an edit is the call hooks now
    /// see). An approval hook does not ask again.
    #[inline]
    pub fn decided_by_human(&self) -> bool {
        self.human.is_some()
    }

    /// The human's decision the runtime applied to this call (see
    /// [`PreActingEvent::decided_by_human`]), with who decided and why.
    #[inline]
    pub fn human_decision(&self) -> Option<&HumanDecision> {
        self.human.as_deref()
    }

    /// The call as the model asked for it (after the runtime's admission, before any
    /// hook rewrote it). Equal to [`PreActingEvent::tool_use`] while no hook changed
    /// the call.
    #[inline]
    pub fn original_tool_use(&self) -> &ToolUse {
        self.original.as_deref().unwrap_or(&self.tool_use)
    }

    /// Whether a hook changed the call's name or arguments.
    #[inline]
    pub fn was_rewritten(&self) -> bool {
        self.changed
    }

    /// The tool call as it will run (after earlier hooks' rewrites).
    #[inline]
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// Rewrites the call: the new name and input are what runs *and* what memory
    /// records. The id is kept (a changed id is ignored) so the result still pairs.
    /// Ignored, with a warning, once the call was denied.
    pub fn set_tool_use(&mut self, tool_use: ToolUse) {
        if self.denial.is_some() {
            tracing::warn!(
                hook = self.meta.current_hook().map(|h| &*h.name),
                tool = %self.tool_use.name,
                "set_tool_use ignored: the tool call was already denied"
            );
            return;
        }
        if self.meta.recording()
            && (tool_use.name != self.tool_use.name || tool_use.input != self.tool_use.input)
        {
            let b = self
                .meta
                .digest(&(&self.tool_use.name, &self.tool_use.input));
            let a = self.meta.digest(&(&tool_use.name, &tool_use.input));
            let id = self.tool_use.id.clone();
            self.meta.note(
                EventKind::PreActing,
                DecisionKind::ToolInputRewritten,
                "tool_use",
                b,
                a,
                None,
                Some(&id),
            );
            self.meta.reveal_changes(&self.tool_use, &tool_use);
        }
        if tool_use.name != self.tool_use.name || tool_use.input != self.tool_use.input {
            if self.original.is_none() {
                self.original = Some(Box::new(self.tool_use.clone()));
            }
            self.changed = true;
            self.changed_by = self.meta.current.or(Some(u16::MAX));
            self.tool_use.name = tool_use.name;
            self.tool_use.input = tool_use.input;
            // A stop for a human was decided on the old form; the hooks decide again.
            self.wait = false;
            self.wait_reason = None;
        }
    }

    /// The hooks known to have rewritten this call so far in this `PreActing` pass, in
    /// the order they did: every hook whose `ToolInputRewritten` decision for this call
    /// is in the pass's trail (when the agent records decisions), and always the hook
    /// that changed the call last. Empty while no hook changed it.
    pub fn rewritten_by(&self) -> Vec<&str> {
        let id = self.tool_use.id.as_str();
        let mut names: Vec<&str> = self
            .meta
            .trail
            .iter()
            .filter(|d| {
                d.kind == DecisionKind::ToolInputRewritten && d.tool_call_id.as_deref() == Some(id)
            })
            .map(|d| d.hook.as_str())
            .collect();
        let last = self
            .changed_by
            .and_then(|i| self.meta.call.hooks.get(usize::from(i)))
            .map(|h| &*h.name);
        if let Some(last) = last
            && !names.contains(&last)
        {
            names.push(last);
        }
        names
    }

    /// Denies the call: the tool does not run and the model receives an error result
    /// with `reason`. Cannot be undone by a later hook; the first reason is kept.
    pub fn deny(&mut self, reason: impl Into<String>) {
        if self.denial.is_none() {
            let reason = reason.into();
            if self.meta.recording() {
                let id = self.tool_use.id.clone();
                self.meta.note(
                    EventKind::PreActing,
                    DecisionKind::ToolDenied,
                    "denied",
                    "false".into(),
                    "true".into(),
                    Some(reason.clone()),
                    Some(&id),
                );
            }
            self.denial = Some(Denial {
                reason,
                hook: self.meta.current_hook().map(|h| Arc::clone(&h.name)),
            });
        }
    }

    /// Whether the call was denied.
    #[inline]
    pub fn is_denied(&self) -> bool {
        self.denial.is_some()
    }

    /// The denial reason, if denied.
    #[inline]
    pub fn denial_reason(&self) -> Option<&str> {
        self.denial.as_ref().map(|d| d.reason.as_str())
    }

    /// The name of the hook that denied the call, if denied.
    #[inline]
    pub fn denied_by(&self) -> Option<&str> {
        self.denial.as_ref().and_then(|d| d.hook.as_deref())
    }
}

/// Fires for each progress chunk a running tool emits. Read-only; never sent to the
/// model.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct ActingChunkEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) chunk: String,
}

impl ActingChunkEvent {
    /// The running call.
    #[inline]
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The progress text.
    #[inline]
    pub fn chunk(&self) -> &str {
        &self.chunk
    }
}

/// Fires once per tool call, in call order, after the turn's tools ran and before the
/// result is stored.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostActingEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) result: ToolResult,
    pub(crate) denied: bool,
    pub(crate) stop: bool,
    /// What a human decided about the call, when one did.
    pub(crate) human: Option<Box<HumanDecision>>,
}

impl PostActingEvent {
    /// What a human decided about this call (approved, edited, denied, retried or
    /// recorded its outcome), with who and why; `None` when no human decided on it.
    #[inline]
    pub fn human_decision(&self) -> Option<&HumanDecision> {
        self.human.as_deref()
    }

    /// The call that ran (or was denied).
    #[inline]
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The result (after earlier hooks' rewrites).
    #[inline]
    pub fn tool_result(&self) -> &ToolResult {
        &self.result
    }

    /// Replaces the result: what is set is what memory records and the model reads. The
    /// id and name are kept so the result still pairs with its call.
    pub fn set_tool_result(&mut self, mut result: ToolResult) {
        result.id.clone_from(&self.result.id);
        result.name.clone_from(&self.result.name);
        if self.meta.recording() && result != self.result {
            let b = self
                .meta
                .digest(&(&self.result.content, self.result.is_error));
            let a = self.meta.digest(&(&result.content, result.is_error));
            let id = self.result.id.clone();
            self.meta.note(
                EventKind::PostActing,
                DecisionKind::ToolResultReplaced,
                "tool_result",
                b,
                a,
                None,
                Some(&id),
            );
        }
        self.result = result;
    }

    /// Whether a `PreActing` hook denied this call (the tool did not run).
    #[inline]
    pub fn was_denied(&self) -> bool {
        self.denied
    }

    /// Stop the loop once every result of this turn is stored. Honoured on any event of
    /// the turn, not only the last. The call returns the turn's tool message; a later
    /// call continues with reasoning.
    pub fn stop_agent(&mut self) {
        if self.meta.recording() && !self.stop {
            let id = self.tool_use.id.clone();
            self.meta.note(
                EventKind::PostActing,
                DecisionKind::Stop,
                "stop",
                "false".into(),
                "true".into(),
                None,
                Some(&id),
            );
        }
        self.stop = true;
    }

    /// Whether some hook requested a stop on this event.
    #[inline]
    pub fn is_stop_requested(&self) -> bool {
        self.stop
    }
}
