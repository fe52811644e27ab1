//! Internals exposed for the workspace's benchmarks only. Not part of the public API: no
//! stability promise, hidden from the docs.

use rein_core::{AgentInfo, RunContext};

/// Hands `record` to `hook`'s audit queue as an event would (waiting for room when the
/// queue is full and `on_full = wait`): the audit pipeline without an agent.
pub async fn audit_submit(hook: &crate::AuditHook, record: crate::AuditRecord) {
    hook.submit(record).await;
}

/// A typical tool-call audit record (about 400 bytes of JSON), numbered `n`.
pub fn audit_record(n: u64) -> crate::AuditRecord {
    use crate::{AuditKind, AuditRecord, AuditStatus};
    let info = AgentInfo {
        id: "agent-7f3a".to_owned(),
        name: "support".to_owned(),
        parent_id: None,
        depth: 0,
    };
    let ctx = RunContext::new().with_session_id(format!("session-{}", n % 64));
    let mut r = AuditRecord::new(AuditKind::ToolCall, 1_764_547_200_000 + n, &info, &ctx);
    r.tool_call_id = Some(format!("call_{n}"));
    r.tool = Some("refund".to_owned());
    r.args = Some(serde_json::json!({"order": format!("A-{n}"), "amount": 120.5, "note": "***"}));
    r.status = Some(AuditStatus::Ok);
    r.duration_ms = Some(1.25);
    r.stop_requested = Some(false);
    r
}
