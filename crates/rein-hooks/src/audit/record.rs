//! The audit record: its kinds, fields and JSON line form, and the wall clock that
//! stamps it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use rein_core::agent::{AgentInfo, RunContext};

/// What an [`AuditRecord`] is about. Serialized as the record's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditKind {
    /// A tool call that ran (`tool-call`), with its status and duration.
    ToolCall,
    /// A tool call a `PreActing` hook denied before it ran (`tool-denied`).
    ToolDenied,
    /// A hook made the model reason again (`reasoning-redone`), e.g. a self-correction.
    ReasoningRedone,
    /// The reply of a successful call (`final-answer`).
    FinalAnswer,
    /// A `PreActing` hook stopped a tool call for a human and said why
    /// (`approval-required`; the reason in `reason`, e.g. the information-flow rule and
    /// label that needs the human).
    ApprovalRequired,
    /// A failed call (`error`).
    Error,
}

impl AuditKind {
    /// The serialized name, e.g. `tool-call`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::ToolCall => "tool-call",
            AuditKind::ToolDenied => "tool-denied",
            AuditKind::ReasoningRedone => "reasoning-redone",
            AuditKind::FinalAnswer => "final-answer",
            AuditKind::ApprovalRequired => "approval-required",
            AuditKind::Error => "error",
        }
    }
}

/// How an audited tool call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditStatus {
    /// The tool returned a result.
    Ok,
    /// The tool failed (invalid arguments, tool error, panic, timeout).
    Error,
    /// A hook denied the call; the tool did not run.
    Denied,
    /// The runtime refused the call before any hook saw it (or after a hook renamed
    /// it): the agent has no tool of that name. The tool did not run.
    UnknownTool,
    /// The runtime refused the call: its arguments are not a JSON object or fail the
    /// tool's JSON Schema. The tool did not run.
    InvalidArguments,
    /// The runtime refused the call: the model asked for more calls in one turn than
    /// the agent allows. The tool did not run.
    TooManyCalls,
}

/// One audit record: who, in which call, did what. Serialized as one JSON object;
/// fields that do not apply to the record's kind are omitted.
///
/// Personal data is masked per [`AuditConfig`](super::AuditConfig): `args` with `mask_args`, `answer`
/// with `mask_answer`; `reason` and `error` always.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// The record kind (serialized as `type`).
    #[serde(rename = "type")]
    pub kind: AuditKind,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The agent's name.
    pub agent: String,
    /// The agent's id.
    pub agent_id: String,
    /// The delegating agent's id, for subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// 0 for a top-level agent.
    pub depth: u32,
    /// The session id.
    pub session_id: String,
    /// The run id of the call.
    pub run_id: String,
    /// The user id, if the call has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Tool records: the tool-call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool records: the tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Tool records: the arguments as JSON, as they ran (after guard rewrites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Tool records of a call a hook rewrote: the arguments the model asked for
    /// (before any rewrite), masked like `args`. `None` when no hook changed the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_args: Option<Value>,
    /// Tool records of a call a hook renamed: the tool the model asked for (`tool`
    /// holds the one that ran). `None` when the name was not changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_tool: Option<String>,
    /// Tool records of a rewritten call: the names of the hooks that changed it, in
    /// the order they first did (empty when no hook changed the call). See
    /// [`AuditHook`](super::AuditHook) for which rewriters are named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewritten_by: Vec<String>,
    /// Tool records: how the call ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AuditStatus>,
    /// `tool-call`: milliseconds from the call's `PreActing` (as seen by the audit hook)
    /// to its `PostActing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// `tool-call`: whether a hook (before the audit hook) asked to stop the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_requested: Option<bool>,
    /// `tool-denied`: the denial reason; `tool-call` refused by the runtime (statuses
    /// `unknown_tool`, `invalid_arguments`, `too_many_calls`): the error the model
    /// received; `reasoning-redone`: the messages the redo
    /// appended to the conversation, if any (a system-role self-correction is placed in
    /// the requests instead, and the turn carries the `self_corrected` flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `tool-denied`: the hook that denied the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_by: Option<String>,
    /// `final-answer`: the reply text; `reasoning-redone`: the text of the turn that
    /// was redone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// `final-answer`: why the loop ended (`final`, `reasoning_stopped`,
    /// `acting_stopped`, `max_iterations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// `error`: the error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `error`: the error kind (e.g. `Model`, `Hook`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// `final-answer`: flags hooks set on the reply (e.g. `self_correction_exhausted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Tool records of a call a human decided on: the decision (`approve`, `deny`,
    /// `edit`, `retry`, `record_outcome`), as the runtime applied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_decision: Option<String>,
    /// Tool records of a call a human decided on: who decided, when the decisions named
    /// them (`ApprovalDecisions::by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Tool records of a call a human decided on: why, when the approver said (masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_reason: Option<String>,
    /// `final-answer` of a call that stopped for a human (approval, unknown outcome, a
    /// waiting subagent): the calls that wait, each `{id, tool, agent, status}` (the
    /// link from the stop to the decisions that later resolve them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Value>,
}

/// Milliseconds since the Unix epoch, now.
fn wall_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Turns event timestamps (monotonic, already read once per event for every hook)
/// into wall-clock milliseconds without reading the wall clock per record: a
/// (wall, monotonic) anchor, re-read when an event is more than a second away from it
/// so wall-clock adjustments are followed within a second.
#[derive(Default)]
pub(super) struct WallClock {
    anchor: Mutex<Option<(u64, Instant)>>,
}

impl WallClock {
    pub(super) fn ms_at(&self, at: Instant) -> u64 {
        let mut anchor = self.anchor.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((wall, mono)) = *anchor {
            let (ahead, behind) = (
                at.saturating_duration_since(mono),
                mono.saturating_duration_since(at),
            );
            if ahead < Duration::from_secs(1) && behind < Duration::from_secs(1) {
                let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                return wall.saturating_add(ms(ahead)).saturating_sub(ms(behind));
            }
        }
        let wall = wall_ms_now();
        *anchor = Some((wall, at));
        wall
    }
}

impl AuditRecord {
    pub(crate) fn new(kind: AuditKind, ts_ms: u64, agent: &AgentInfo, ctx: &RunContext) -> Self {
        Self {
            kind,
            ts_ms,
            agent: agent.name.clone(),
            agent_id: agent.id.clone(),
            parent_id: agent.parent_id.clone(),
            depth: agent.depth,
            session_id: ctx.session_id().to_owned(),
            run_id: ctx.run_id().to_owned(),
            user_id: ctx.user_id().map(str::to_owned),
            tool_call_id: None,
            tool: None,
            args: None,
            original_args: None,
            original_tool: None,
            rewritten_by: Vec::new(),
            status: None,
            duration_ms: None,
            stop_requested: None,
            reason: None,
            denied_by: None,
            answer: None,
            stop_reason: None,
            error: None,
            error_kind: None,
            flags: Vec::new(),
            human_decision: None,
            approved_by: None,
            human_reason: None,
            pending: Vec::new(),
        }
    }

    /// The record as one line of JSON (newlines and control characters escaped).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"type\":\"{}\",\"serialization_error\":{}}}",
                self.kind.as_str(),
                Value::String(e.to_string())
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_times_become_wall_clock_milliseconds_from_one_anchor() {
        let clock = WallClock::default();
        let start = Instant::now();
        let before = wall_ms_now();
        let t0 = clock.ms_at(start);
        assert!(t0 >= before && t0 <= wall_ms_now(), "{before} {t0}");
        // Within a second of the anchor: pure arithmetic, in both directions.
        assert_eq!(clock.ms_at(start + Duration::from_millis(300)), t0 + 300);
        assert_eq!(clock.ms_at(start + Duration::from_millis(999)), t0 + 999);
        // Further away: the wall clock is read again (and becomes the anchor).
        let far = start + Duration::from_secs(5);
        let t1 = clock.ms_at(far);
        assert!(t1 >= before && t1 <= wall_ms_now(), "{t1}");
        assert_eq!(clock.ms_at(far + Duration::from_millis(10)), t1 + 10);
    }
}
