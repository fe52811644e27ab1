//! The decision trail's record: what a hook did to the run (see [`crate::observe`]).
//!
//! Decisions are recorded by the event payloads of this module's parent when a hook
//! mutates them, so the types live with the hooks; `rein::observe` re-exports them.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::{Number, Value};

use super::{FailurePolicy, HookError, HookEvent, HookSite, Interest, SyncHook};
use crate::context::{DecisionSink, EventKind};
use crate::message::ToolUse;

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
    /// The runtime applied a human's decision to a call stored as waiting for one, or
    /// to a call whose outcome was unknown (`before` holds the decision: `approve`,
    /// `deny`, `edit`, `retry`, `record_outcome`).
    HumanDecision,
    /// The runtime replayed a call's result from the session's effect journal instead
    /// of running its tool again (an earlier attempt settled it, then stopped).
    EffectReplayed,
    /// The runtime found a call that an earlier attempt started and never settled, and
    /// whose tool must not run twice: the call stopped for a human (`before` holds the
    /// tool's effect class).
    OutcomeUnknown,
    /// A budget ran out ([`crate::budget`]): `before` names the budget (scope and kind),
    /// `after` what was used against its limit; the call stopped before the spending.
    BudgetExhausted,
    /// A newer call on the session ([`DoubleText::Interrupt`](crate::agent::DoubleText::Interrupt))
    /// stopped this call at a safe point; what it did is kept.
    Interrupted,
    /// A newer call on the session ([`DoubleText::Rollback`](crate::agent::DoubleText::Rollback))
    /// rolled this call back at a safe point; `reason` lists the effects that stayed.
    RolledBack,
    /// A `PreActing` hook stopped a tool call for a human and said why
    /// ([`PreActingEvent::stop_for_human_because`](crate::PreActingEvent::stop_for_human_because));
    /// `reason` holds it (an information-flow policy names the label).
    ApprovalRequired,
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
            DecisionKind::HumanDecision => "human_decision",
            DecisionKind::EffectReplayed => "effect_replayed",
            DecisionKind::OutcomeUnknown => "outcome_unknown",
            DecisionKind::BudgetExhausted => "budget_exhausted",
            DecisionKind::Interrupted => "interrupted",
            DecisionKind::RolledBack => "rolled_back",
            DecisionKind::ApprovalRequired => "approval_required",
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
    /// The agent that made the decision, as the path of agent names from the agent
    /// whose outcome holds it down to that agent, `/`-separated — the format of the
    /// `agent` field of [`PENDING_CALLS_KEY`](crate::agent::PENDING_CALLS_KEY) entries.
    /// A decision of the called agent itself holds its own name (`"support"`); one of a
    /// subagent it delegated to, through `agent_spawn` at any depth, holds the path
    /// (`"support/refunder"`, `"support/refunder/ledger"`). See [`Decision::agent_path`].
    pub agent_path: String,
    /// Readable before/after values of the numeric argument fields the operator opted
    /// into with [`RevealNumbers`] (for [`DecisionKind::ToolInputRewritten`] only; empty
    /// otherwise, and always empty without the opt-in: `before`/`after` stay digests).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
}

impl Decision {
    /// The agent that made the decision (see the field [`Decision::agent_path`]): the
    /// called agent's own name for its own decisions, `parent/child/…` for a
    /// subagent's.
    pub fn agent_path(&self) -> &str {
        &self.agent_path
    }
}

/// One numeric argument field a rewrite changed, shown readable because the operator
/// opted into it with [`RevealNumbers`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FieldChange {
    /// The field, as a JSON pointer into the tool's arguments (e.g. `/amount`).
    pub pointer: String,
    /// Its value before the rewrite; `None` when absent or not a number.
    pub before: Option<Number>,
    /// Its value after the rewrite; `None` when absent or not a number.
    pub after: Option<Number>,
}

/// Opt-in: shows the numeric argument fields listed here readable in the decision
/// trail ([`Decision::changes`]) when a hook rewrites a call — e.g. a refund cap's
/// `/amount` 5000 → 1000. Everything else stays a digest (the default: values may be
/// personal data), and only JSON numbers are ever shown (a string at a listed field
/// is not).
///
/// Install it as a hook on the agent (`AgentBuilder::hook`); it is inherited by
/// subagents. At build time every listed tool must be a tool the agent can call and
/// every pointer a property of its argument schema (else `BuildError` naming the
/// entry). When a call records decisions it puts itself in the run context's
/// [`Extensions`](crate::Extensions) (`PreCall`, priority `i32::MIN`); a caller may
/// also insert one there directly for a single call. Costs nothing while the call does
/// not record decisions.
///
/// ```
/// use rein::observe::RevealNumbers;
/// let reveal = RevealNumbers::new().field("refund", "/amount");
/// assert_eq!(reveal.fields().len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevealNumbers {
    fields: Arc<[(String, String)]>,
}

impl RevealNumbers {
    /// Nothing revealed (add fields with [`RevealNumbers::field`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Also reveals the numeric field at JSON pointer `pointer` (e.g. `/amount`) of
    /// calls to `tool`.
    #[must_use]
    pub fn field(self, tool: impl Into<String>, pointer: impl Into<String>) -> Self {
        let mut fields = self.fields.to_vec();
        fields.push((tool.into(), pointer.into()));
        Self {
            fields: fields.into(),
        }
    }

    /// The revealed `(tool, pointer)` pairs, in the order added.
    pub fn fields(&self) -> &[(String, String)] {
        &self.fields
    }

    /// The listed numeric fields whose value differs between `before` and `after`
    /// (a field listed for either call's tool).
    pub(crate) fn changes(&self, before: &ToolUse, after: &ToolUse) -> Vec<FieldChange> {
        let number = |tu: &ToolUse, p: &str| match tu.input.pointer(p) {
            Some(Value::Number(n)) => Some(n.clone()),
            _ => None,
        };
        let mut out = Vec::new();
        for (tool, pointer) in self.fields.iter() {
            if *tool != before.name && *tool != after.name {
                continue;
            }
            let b = (*tool == before.name)
                .then(|| number(before, pointer))
                .flatten();
            let a = (*tool == after.name)
                .then(|| number(after, pointer))
                .flatten();
            if b != a && !out.iter().any(|c: &FieldChange| c.pointer == *pointer) {
                out.push(FieldChange {
                    pointer: pointer.clone(),
                    before: b,
                    after: a,
                });
            }
        }
        out
    }
}

impl SyncHook for RevealNumbers {
    fn name(&self) -> &str {
        "RevealNumbers"
    }

    fn priority(&self) -> i32 {
        i32::MIN
    }

    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreCall)
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }

    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        for (i, (tool, pointer)) in self.fields.iter().enumerate() {
            site.expect_tool(&format!("RevealNumbers.fields[{i}].tool"), tool)?;
            let key = format!("RevealNumbers.fields[{i}].pointer");
            if !pointer.starts_with('/') {
                return Err(HookError::new(format!(
                    "{key}: `{pointer}` is not a JSON pointer (it must start with `/`, e.g. `/amount`)"
                )));
            }
            if let Some(schema) = site.schema(tool)
                && !schema_has(schema, pointer)
            {
                return Err(HookError::new(format!(
                    "{key}: the arguments of tool `{tool}` have no field `{pointer}`"
                )));
            }
        }
        Ok(())
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreCall(e) = event
            && e.meta.recording()
        {
            e.meta.call.ctx.extensions().insert(self.clone());
        }
        Ok(())
    }
}

/// Whether `pointer` names a property the schema declares, walking `properties` (a
/// level without `properties` — free-form objects, arrays — accepts anything below).
fn schema_has(schema: &Value, pointer: &str) -> bool {
    let mut at = schema;
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        let Some(props) = at.get("properties").and_then(Value::as_object) else {
            return true;
        };
        match props.get(&seg) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

/// A delegating call's forwarder for one acting step: the decisions of the subagents
/// its tool calls run arrive here as they are recorded, get the delegating agent's
/// name prefixed to their path, are passed on up the tree at once (so an ancestor
/// holds them even if this call is cancelled) and wait here until the delegating call
/// merges them into its trail when each tool call returns.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The delegating agent's name.
    name: String,
    received: Mutex<Vec<Decision>>,
    /// The delegating call's own sink (it is itself a subagent), if any.
    up: Option<DecisionSink>,
}

impl Forward {
    /// A forwarder for the subagents of the agent `name`, whose own call forwards to
    /// `up`.
    pub(crate) fn new(name: &str, up: Option<&DecisionSink>) -> Self {
        Self {
            name: name.to_owned(),
            received: Mutex::new(Vec::new()),
            up: up.cloned(),
        }
    }

    fn deliver(&self, d: &Decision) {
        let mut d = d.clone();
        d.agent_path.insert(0, '/');
        d.agent_path.insert_str(0, &self.name);
        forward(self.up.as_ref(), &d);
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(d);
    }

    /// The decisions received since the last call, in order.
    pub(crate) fn take(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.received.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Forwards a decision a call recorded to the sink of its run context (a no-op
/// without one: top-level calls, or a delegating call that does not record).
pub(crate) fn forward(sink: Option<&DecisionSink>, d: &Decision) {
    if let Some(f) = sink.and_then(DecisionSink::get::<Forward>) {
        f.deliver(d);
    }
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
        agent.path = %d.agent_path,
        tool.call.id = d.tool_call_id.as_deref(),
        changes = changes_text(&d.changes).as_deref(),
        "hook decision"
    );
}

/// `"/amount: 5000 -> 1000, …"`, or `None` without revealed changes.
fn changes_text(changes: &[FieldChange]) -> Option<String> {
    if changes.is_empty() {
        return None;
    }
    let show = |n: &Option<Number>| n.as_ref().map_or("-".to_owned(), Number::to_string);
    let parts: Vec<String> = changes
        .iter()
        .map(|c| format!("{}: {} -> {}", c.pointer, show(&c.before), show(&c.after)))
        .collect();
    Some(parts.join(", "))
}

/// Counts a hook failure (feature `metrics`).
#[cfg(feature = "metrics")]
pub(crate) fn hook_error_metric(hook: &str, event: &'static str) {
    metrics::counter!("rein_hook_errors_total", "hook" => hook.to_owned(), "event" => event)
        .increment(1);
}
