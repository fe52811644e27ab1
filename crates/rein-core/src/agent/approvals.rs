//! Decisions about tool calls waiting for a human (a call stopped for approval), as
//! the resuming call carries them in its run context. The approval hook
//! (`ApprovalHook` (`rein::hooks`)) applies them; the agent reads them to
//! tell a resume whose calls are no longer pending (another instance resumed them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use super::history::pending_tool_uses;
use crate::message::{Msg, ToolUse};

/// What an approver decided about one tool call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call as it is.
    Approve,
    /// Do not run it; the model receives this reason in an error result.
    Deny(String),
    /// Run it with these arguments instead (what memory records too). The tool's JSON
    /// Schema still validates them. On a resume of a call stored as waiting for a
    /// human, the runtime applies the edit before admission, so every `PreActing` hook
    /// sees the edited call.
    Edit(Value),
    /// For a call whose outcome is unknown (it started, and its result was never
    /// recorded: [`StopReason::OutcomeUnknown`](crate::StopReason::OutcomeUnknown)): run
    /// it again, with the same idempotency key
    /// ([`ToolContext::idempotency_key`](crate::ToolContext::idempotency_key)). For a
    /// call waiting for approval it means [`ApprovalDecision::Approve`].
    Retry,
    /// For a call whose outcome is unknown: do not run it; record this text as its
    /// result (what a human found out, e.g. "refund 4411 was paid"). For a call waiting
    /// for approval: do not run it, and record this text as its result.
    RecordOutcome(String),
}

impl ApprovalDecision {
    /// A short name for the journal, the trail and logs: `approve`, `deny`, `edit`,
    /// `retry`, `record_outcome`.
    pub fn label(&self) -> &'static str {
        match self {
            ApprovalDecision::Approve => "approve",
            ApprovalDecision::Deny(_) => "deny",
            ApprovalDecision::Edit(_) => "edit",
            ApprovalDecision::Retry => "retry",
            ApprovalDecision::RecordOutcome(_) => "record_outcome",
        }
    }

    /// Whether this decision resolves a call whose outcome is unknown (an approval
    /// does not: the approval that started the call must never start it again).
    pub(crate) fn resolves_unknown(&self) -> bool {
        matches!(
            self,
            ApprovalDecision::Retry
                | ApprovalDecision::RecordOutcome(_)
                | ApprovalDecision::Deny(_)
        )
    }
}

/// Decisions made out of band (by a human, after a call stopped for approval), to put
/// in the resuming call's run context:
///
/// ```
/// use rein::{RunContext, ToolUse};
/// use rein::hooks::ApprovalDecisions;
/// use serde_json::json;
///
/// // The call the stopped reply is waiting on (`rein::hooks::pending_approvals(&reply)`).
/// let waiting = ToolUse::new("call_0f3a", "refund", json!({"amount": 120}));
/// let ctx = RunContext::new().with_session_id("s1");
/// ctx.extensions().insert(ApprovalDecisions::new().approve_call(&waiting));
/// // agent.call_with(vec![], ctx) resumes the stopped call; the approved tool runs.
/// ```
///
/// # Binding and consumption
/// A decision made with [`ApprovalDecisions::approve_call`] (or `deny_call`,
/// `decide_call`) is bound to the call's id, tool name and arguments: if the call that
/// reaches the approval hook differs in any of them (a hook rewrote it after the human
/// saw it), the decision does not apply and the call is denied. A decision made with
/// [`ApprovalDecisions::approve`] (by id only) is bound to the id; the runtime gives
/// every tool call a fresh id, so an id names exactly one call.
///
/// Each decision is consumed by the first call it is applied to: it applies again only
/// to that same call (same id, name and arguments, as when the hooks re-check a call),
/// never to another one. Clones share what was consumed.
#[derive(Clone, Debug, Default)]
pub struct ApprovalDecisions {
    by_call: HashMap<String, Bound>,
    /// Who made these decisions (recorded with each in the trail and the audit).
    approver: Option<String>,
    /// Why, per call id, when the approver said.
    reasons: HashMap<String, String>,
    /// Calls each decision was applied to, by id: `(tool name, arguments)`.
    used: Arc<Mutex<HashMap<String, (String, Value)>>>,
}

#[derive(Clone, Debug)]
struct Bound {
    decision: ApprovalDecision,
    /// The call the decision was made for, when bound to more than the id.
    call: Option<(String, Value)>,
}

impl ApprovalDecisions {
    /// No decisions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a decision for the tool call with this id (bound to the id only).
    #[must_use]
    pub fn decide(mut self, tool_call_id: impl Into<String>, decision: ApprovalDecision) -> Self {
        self.by_call.insert(
            tool_call_id.into(),
            Bound {
                decision,
                call: None,
            },
        );
        self
    }

    /// Approves the tool call with this id.
    #[must_use]
    pub fn approve(self, tool_call_id: impl Into<String>) -> Self {
        self.decide(tool_call_id, ApprovalDecision::Approve)
    }

    /// Denies the tool call with this id.
    #[must_use]
    pub fn deny(self, tool_call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.decide(tool_call_id, ApprovalDecision::Deny(reason.into()))
    }

    /// Records a decision for exactly this call: it applies only while the call has
    /// this id, tool name and arguments.
    #[must_use]
    pub fn decide_call(mut self, call: &ToolUse, decision: ApprovalDecision) -> Self {
        self.by_call.insert(
            call.id.clone(),
            Bound {
                decision,
                call: Some((call.name.clone(), call.input.clone())),
            },
        );
        self
    }

    /// Approves exactly this call (see [`ApprovalDecisions::decide_call`]).
    #[must_use]
    pub fn approve_call(self, call: &ToolUse) -> Self {
        self.decide_call(call, ApprovalDecision::Approve)
    }

    /// Denies exactly this call (see [`ApprovalDecisions::decide_call`]).
    #[must_use]
    pub fn deny_call(self, call: &ToolUse, reason: impl Into<String>) -> Self {
        self.decide_call(call, ApprovalDecision::Deny(reason.into()))
    }

    /// Resolves a call whose outcome is unknown by running it again with the same
    /// idempotency key ([`ApprovalDecision::Retry`], bound to the id).
    #[must_use]
    pub fn retry(self, tool_call_id: impl Into<String>) -> Self {
        self.decide(tool_call_id, ApprovalDecision::Retry)
    }

    /// Resolves a call whose outcome is unknown by recording what a human found out as
    /// its result, without running it ([`ApprovalDecision::RecordOutcome`]).
    #[must_use]
    pub fn record_outcome(
        self,
        tool_call_id: impl Into<String>,
        result: impl Into<String>,
    ) -> Self {
        self.decide(tool_call_id, ApprovalDecision::RecordOutcome(result.into()))
    }

    /// Resolves a call whose outcome is unknown by abandoning it: it is not run again,
    /// and its result says it was abandoned, with `reason` (an
    /// [`ApprovalDecision::Deny`]).
    #[must_use]
    pub fn abandon(self, tool_call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.deny(tool_call_id, reason)
    }

    /// Names who made these decisions (a user id, an e-mail, a service): recorded with
    /// every decision the runtime applies — in the decision trail
    /// ([`DecisionKind::HumanDecision`](crate::hook::DecisionKind::HumanDecision)), on
    /// the call's `PreActing`/`PostActing` events
    /// ([`PostActingEvent::human_decision`](crate::PostActingEvent::human_decision)) and
    /// so in the audit.
    #[must_use]
    pub fn by(mut self, approver: impl Into<String>) -> Self {
        self.approver = Some(approver.into());
        self
    }

    /// Records why the decision for this tool call id was made (kept with it like the
    /// approver).
    #[must_use]
    pub fn with_reason(
        mut self,
        tool_call_id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        self.reasons.insert(tool_call_id.into(), reason.into());
        self
    }

    /// Who made these decisions, if named ([`ApprovalDecisions::by`]).
    pub fn approver(&self) -> Option<&str> {
        self.approver.as_deref()
    }

    /// Why the decision for this call id was made, if the approver said.
    pub fn reason(&self, tool_call_id: &str) -> Option<&str> {
        self.reasons.get(tool_call_id).map(String::as_str)
    }

    /// The record of the decision `label` for call `id`, as the runtime applies it.
    pub(crate) fn human(&self, id: &str, label: &str) -> crate::hook::HumanDecision {
        crate::hook::HumanDecision {
            decision: label.to_owned(),
            approver: self.approver.clone(),
            reason: self
                .reasons
                .get(id)
                .cloned()
                .or_else(|| match self.get(id) {
                    Some(ApprovalDecision::Deny(r)) => Some(r.clone()),
                    _ => None,
                }),
        }
    }

    /// The decision recorded for this tool call id (whether or not it still applies).
    pub fn get(&self, tool_call_id: &str) -> Option<&ApprovalDecision> {
        self.by_call.get(tool_call_id).map(|b| &b.decision)
    }

    /// Whether a decision was recorded for this id (whether or not it still applies).
    pub fn has(&self, tool_call_id: &str) -> bool {
        self.by_call.contains_key(tool_call_id)
    }

    /// Why a resume (a call with no input) carrying these decisions has nothing to do
    /// on `history`, or `None` when it does: no decided call is pending, and either
    /// nothing is pending at all or a decided call already has its result — another
    /// call (another instance) resumed them first.
    ///
    /// Decisions for calls that do not appear in `history` while something else is
    /// pending (a subagent's calls, below a pending delegation) do not count as stale.
    pub(crate) fn stale_on(&self, history: &[Msg]) -> Option<String> {
        if self.by_call.is_empty() {
            return None;
        }
        let pending = pending_tool_uses(history);
        if pending.iter().any(|u| self.has(&u.id)) {
            return None;
        }
        let mut answered: Vec<&str> = history
            .iter()
            .flat_map(|m| m.tool_results())
            .map(|r| r.id.as_str())
            .filter(|id| self.has(id))
            .collect();
        answered.sort_unstable();
        if answered.is_empty() && !pending.is_empty() {
            return None;
        }
        Some(if answered.is_empty() {
            "nothing is pending on the session, so this resume (no input, with approval \
             decisions) has nothing to run; nothing ran"
                .to_owned()
        } else {
            format!(
                "the tool calls this resume has decisions for ({}) already have results: \
                 another call (or another instance) resumed them first; nothing ran. Read \
                 what is pending now from the stored session",
                answered.join(", ")
            )
        })
    }

    /// The decision that applies to `call`, consuming it (a decision applies to one
    /// execution of one call): `None` without a decision for its id; a denial when the
    /// decision was bound to another form of the call (its name or arguments changed
    /// since the human decided) or was already used for another call. What an approval
    /// hook calls on `PreActing`; the runtime applies stored decisions the same way.
    pub fn apply(&self, call: &ToolUse) -> Option<ApprovalDecision> {
        let bound = self.by_call.get(&call.id)?;
        if let Some((name, input)) = &bound.call
            && (name != &call.name || input != &call.input)
        {
            return Some(ApprovalDecision::Deny(format!(
                "the decision for call `{}` was made for `{name}` with other arguments; the \
                 call changed after it was decided, so it was not run",
                call.id
            )));
        }
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        match used.get(&call.id) {
            Some((name, input)) if name != &call.name || input != &call.input => {
                Some(ApprovalDecision::Deny(format!(
                    "the decision for call `{}` was already used for another call",
                    call.id
                )))
            }
            Some(_) => Some(bound.decision.clone()),
            None => {
                used.insert(call.id.clone(), (call.name.clone(), call.input.clone()));
                Some(bound.decision.clone())
            }
        }
    }
}
