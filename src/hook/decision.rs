//! The decision trail's record: what a hook did to the run (see [`crate::observe`]).
//!
//! Decisions are recorded by the event payloads of this module's parent when a hook
//! mutates them, so the types live with the hooks; `rein::observe` re-exports them.

use std::fmt::Write as _;

use serde::Serialize;

use crate::context::EventKind;

/// What a hook did to the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionKind {
    /// Generation options replaced (`PreReasoning`, `PreSummary`).
    OptionsSet,
    /// Messages replaced (`PreCall` input, `PreReasoning`/`PreSummary` model input).
    MessagesReplaced,
    /// The call's system prompt replaced (`PreCall`).
    SystemPromptReplaced,
    /// A model or summary message replaced (`PostReasoning`, `PostSummary`).
    MessageReplaced,
    /// A tool call's name or input rewritten (`PreActing`).
    ToolInputRewritten,
    /// A tool call denied (`PreActing`).
    ToolDenied,
    /// A tool result replaced (`PostActing`).
    ToolResultReplaced,
    /// Reasoning redone with extra messages (`PostReasoning`).
    Goto,
    /// The loop stopped (`PostReasoning`, `PostActing`).
    Stop,
    /// The caller's reply replaced (`PostCall`).
    FinalMessageReplaced,
    /// The runtime refused a tool call before any hook saw it: arguments that are not
    /// a JSON object or fail the tool's schema, an unknown tool, or more calls in one
    /// turn than the agent allows (`before` holds the status, e.g. `unknown_tool`).
    ToolCallRejected,
    /// The runtime cut a tool result longer than the agent's maximum (`before` holds
    /// the original length in bytes).
    ToolResultTruncated,
}

impl DecisionKind {
    /// The snake_case name, e.g. `"tool_denied"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::OptionsSet => "options_set",
            DecisionKind::MessagesReplaced => "messages_replaced",
            DecisionKind::SystemPromptReplaced => "system_prompt_replaced",
            DecisionKind::MessageReplaced => "message_replaced",
            DecisionKind::ToolInputRewritten => "tool_input_rewritten",
            DecisionKind::ToolDenied => "tool_denied",
            DecisionKind::ToolResultReplaced => "tool_result_replaced",
            DecisionKind::Goto => "goto",
            DecisionKind::Stop => "stop",
            DecisionKind::FinalMessageReplaced => "final_message_replaced",
            DecisionKind::ToolCallRejected => "tool_call_rejected",
            DecisionKind::ToolResultTruncated => "tool_result_truncated",
        }
    }
}

/// One recorded hook action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Decision {
    /// The hook's name.
    pub hook: String,
    /// The hook's priority.
    pub priority: i32,
    /// The event during which it acted.
    pub event: EventKind,
    /// What it did.
    pub kind: DecisionKind,
    /// The field it changed, e.g. `"tool_use.input"`.
    pub field: &'static str,
    /// Digest of the value before.
    pub before: String,
    /// Digest of the value after.
    pub after: String,
    /// The reason given (denials), if any.
    pub reason: Option<String>,
    /// The agent whose run it changed.
    pub agent_id: String,
    /// The tool call concerned, for tool decisions.
    pub tool_call_id: Option<String>,
}

/// How a call records decisions (decided once per call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TrailMode {
    pub(crate) on: bool,
    pub(crate) reveal: bool,
}

impl TrailMode {
    /// Records when asked to, or when a subscriber listens to `rein::decision`.
    pub(crate) fn decide(trail: bool, reveal: bool) -> Self {
        let on = trail || tracing::enabled!(target: "rein::decision", tracing::Level::INFO);
        Self { on, reveal }
    }
}

/// A digest of `value`'s JSON form: `"{len}B#{fnv64}"`, or a preview when `reveal`.
pub(crate) fn digest<T: Serialize + ?Sized>(value: &T, reveal: bool) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    digest_str(&json, reveal)
}

fn digest_str(text: &str, reveal: bool) -> String {
    if reveal {
        return crate::util::truncate(text, 120);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut out = String::with_capacity(32);
    let _ = write!(out, "{}B#{hash:016x}", text.len());
    out
}

/// Emits a decision as a `tracing` event on the current span.
pub(crate) fn emit_decision(d: &Decision) {
    tracing::info!(
        target: "rein::decision",
        hook = %d.hook,
        priority = d.priority,
        event = d.event.as_str(),
        kind = d.kind.as_str(),
        field = d.field,
        before = %d.before,
        after = %d.after,
        reason = d.reason.as_deref(),
        agent.id = %d.agent_id,
        tool.call.id = d.tool_call_id.as_deref(),
        "hook decision"
    );
}

/// Counts a hook failure (feature `metrics`).
#[cfg(feature = "metrics")]
pub(crate) fn hook_error_metric(hook: &str, event: &'static str) {
    metrics::counter!("rein_hook_errors_total", "hook" => hook.to_owned(), "event" => event)
        .increment(1);
}
