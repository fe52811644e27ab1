//! The production hook library: what an agent needs before it talks to customers.
//!
//! | hook | priority | events | default |
//! |---|---|---|---|
//! | [`ToolGuardHook`] | 20 | `PreActing`: inject missing params, clamp numeric caps, deny `NaN` | off |
//! | [`LatencyHook`] | 50 | e2e, reasoning, tool, TTFT, summary; p50/p95/p99 | **on** |
//! | [`DynamicOptionsHook`] | 70 | `PreReasoning`: keyword → precise options (merged) | off |
//! | [`ApprovalHook`] | 100 | `PreActing`: guarded tools wait for a decision *before* running | off |
//! | [`SelfCorrectionHook`] | 200 | `PostReasoning`: payment promise → `goto_reasoning` | off |
//! | [`AuditHook`] | 850 | tool calls, denials, redos, final answers, errors → [`AuditSink`] | off |
//! | [`MaskingHook`] | 900 | `PostCall` (and optionally tool results, streamed deltas) | off |
//!
//! Configure them all with one [`HooksConfig`] (serde, any format; or a file with
//! [`HooksConfig::from_path`]), build the enabled ones with [`HooksConfig::build`] (or
//! [`HooksConfig::build_with`] to pass an [`Approver`] or an [`AuditSink`]) and add them
//! to an agent with [`Hooks::install`]. Every tool name the configuration holds is
//! checked against the agent's tools when the agent is built ([`Hook::validate_on`](rein_core::Hook::validate_on)):
//!
//! ```
//! use rein::*;
//! use rein::hooks::{HooksConfig, HookServices, MemoryAuditSink};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config: HooksConfig = serde_json::from_value(serde_json::json!({
//!     "masking": { "enabled": true },
//!     "audit": { "enabled": true }
//! }))?;
//! let sink = MemoryAuditSink::new();
//! let hooks = config.build_with(HookServices::new().audit_sink(sink.clone()))?;
//! let model = ScriptedModel::new([ScriptedTurn::text("好的，已登记联系电话 13800138000")]);
//! let agent = hooks.install(Agent::builder().model(model)).build()?;
//!
//! let reply = agent.call(Msg::user("请登记我的电话")).await?;
//! assert_eq!(reply.text(), "好的，已登记联系电话 ***");
//! if let Some(audit) = hooks.audit() {
//!     audit.flush().await?;
//! }
//! assert_eq!(sink.records().len(), 1); // the final answer, masked too
//! # Ok(()) }
//! ```
//!
//! # Shared rules
//! - **Per-call state lives in the call.** Hooks that pair events keep their state in
//!   the call's [`CallState`](rein_core::hook::CallState) (`event.state()`), keyed by the
//!   hook instance's [`StateKey`](rein_core::hook::StateKey) and taken out on `PostCall`
//!   and `Error`: nothing accumulates in the hooks however calls end, and concurrent calls
//!   never share state. A hook of your own does it the same way.
//! - **Built on the public API.** This crate uses only what `rein` offers every user; a
//!   hook you write can do anything these do.
//! - **Failure policy.** Observers (latency, audit, dynamic options) never fail a call.
//!   Guards (masking, tool guard) fail closed by default ([`OnError`]); approval denies
//!   when in doubt.
//! - **Disabled means inert.** A hook whose config says `enabled = false` subscribes to
//!   no event.
//! - **Flags.** Hooks mark messages they let through with a caveat in the message
//!   metadata under [`FLAGS_KEY`] (an array of strings); the audit hook records them.
//! - **No personal data in logs.** Hooks log tool names, ids and outcomes; arguments
//!   and texts only reach the audit sink, masked.

mod approval;
mod audit;
#[doc(hidden)]
pub mod bench_support;
mod condition;
mod config;
mod dynamic_options;
mod extract;
mod flow;
mod latency;
mod masking;
mod phrases;
mod redactor;
mod self_correction;
mod template_leak;
mod tool_guard;
mod util;

#[allow(deprecated)]
pub use approval::{APPROVAL_PENDING_CALLS_KEY, APPROVAL_PENDING_KEY};
pub use approval::{
    ApprovalConfig, ApprovalDecision, ApprovalDecisions, ApprovalHook, ApprovalMode,
    ApprovalRequest, Approver, SharedApprover, pending_approvals, pending_approvals_in,
};
pub use audit::{
    AuditConfig, AuditHook, AuditKind, AuditRecord, AuditSink, AuditSinkConfig, AuditSinkError,
    AuditStats, AuditStatus, Durability, JsonlAuditSink, MemoryAuditSink, QueueFull,
    TracingAuditSink,
};
pub use condition::ArgCondition;
pub use config::{AgentSection, BudgetsConfig, HookServices, Hooks, HooksConfig};
pub use dynamic_options::{DynamicOptionsConfig, DynamicOptionsHook};
pub use extract::{ExtractTool, MAX_CHOICES, MAX_TEXT_CHARS};
pub use flow::{FlowAction, InformationFlowConfig, InformationFlowPolicy, ToolFlowDeclaration};
pub use latency::{
    LatencyAgent, LatencyConfig, LatencyHook, LatencySeries, LatencySnapshot, Outcome, Segment,
    TtftMode,
};
// The masker is the `rein-pii` crate; its types are part of this configuration surface.
pub use masking::{MaskedStream, MaskingConfig, MaskingHook, OnError, SubagentBoundary};
pub use redactor::{PiiRedactor, SECRET_PATTERNS};
#[doc(no_inline)]
pub use rein_pii::{
    DEFAULT_REPLACEMENT, MaskStyle, MaskerBuilder, MaskerConfig, MaskerError, NamedPattern,
    SensitiveDataMasker, SensitiveKind, SensitiveMatch,
};
pub use self_correction::{
    CorrectionRole, FLAG_CORRECTED, FLAG_CORRECTION_EXHAUSTED, SelfCorrectionConfig,
    SelfCorrectionHook,
};
pub use template_leak::{FLAG_TEMPLATE_STRIPPED, TemplateLeakConfig, TemplateLeakHook};
pub use tool_guard::{
    CapBounds, CapSpec, StringNumbers, ToolGuardConfig, ToolGuardHook, ToolRules,
};

use serde_json::Value;

use rein_core::Msg;

/// Metadata key under which hooks flag a message (a JSON array of strings), e.g.
/// [`FLAG_CORRECTION_EXHAUSTED`].
pub const FLAGS_KEY: &str = "rein.flags";

/// Metadata key naming the hook that wrote a message (e.g. a correction), so other
/// hooks can tell it from user input.
pub const HOOK_KEY: &str = "rein.hook";

/// The flags of a message (see [`FLAGS_KEY`]).
pub fn msg_flags(msg: &Msg) -> Vec<String> {
    match msg.metadata.get(FLAGS_KEY) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// Adds `flag` to the message's flags (once).
pub fn add_flag(msg: &mut Msg, flag: &str) {
    let entry = msg
        .metadata
        .entry(FLAGS_KEY.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    if let Value::Array(items) = entry
        && !items.iter().any(|v| v.as_str() == Some(flag))
    {
        items.push(Value::String(flag.to_owned()));
    }
}
