//! What the crash tests' workers write, shared by each worker and the test that kills
//! it and checks what it left: the sessions `session::crash::crash_child_worker` saves,
//! and the audit records `hooks::audit_jsonl::audit_crash_child_worker` appends.

use rein::hooks::AuditRecord;
use rein::*;

/// Sessions the child saves round-robin.
pub const SESSIONS: usize = 4;

/// The key of session `i`.
pub fn crash_key(i: usize) -> SessionKey {
    SessionKey::new(Some("crash-user"), &format!("session/{i}"))
}

/// The exact conversation the child saves as `version` of session `i`: it grows and
/// shrinks with the version, and ends with a tool use and its result.
pub fn expected(i: usize, version: u64) -> Vec<Msg> {
    let n = 1 + (version % 7) as usize;
    let pad = "x".repeat(512 * (1 + (version % 5) as usize));
    let mut msgs = Vec::new();
    for j in 0..n {
        let mut m = Msg::user(format!("s{i} v{version} m{j} {pad}"));
        m.id = format!("m-{i}-{version}-{j}");
        msgs.push(m);
    }
    let mut call = Msg::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse(ToolUse {
            id: format!("t-{version}"),
            name: "save".into(),
            input: serde_json::json!({"v": version}),
        })],
    );
    call.id = format!("a-{i}-{version}");
    let mut result = Msg::tool([ToolResult::new(format!("t-{version}"), "save", "ok")]);
    result.id = format!("r-{i}-{version}");
    msgs.push(call);
    msgs.push(result);
    msgs
}

/// The exact JSON line of audit record number `seq` (a final answer; `ts_ms` holds the
/// sequence number, so the test can tell records apart and check their order).
pub fn record_line(seq: u64) -> String {
    format!(
        r#"{{"type":"final-answer","ts_ms":{seq},"agent":"a","agent_id":"a1","depth":0,"session_id":"s","run_id":"r{seq}","answer":"record {seq}"}}"#
    )
}

/// Audit record number `seq`, parsed from [`record_line`].
pub fn record(seq: u64) -> Result<AuditRecord, serde_json::Error> {
    serde_json::from_str(&record_line(seq))
}
