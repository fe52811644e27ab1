//! What the audit crash test's child writes, shared by the child binary
//! (`tests/bin/audit_crash_child.rs`) and the tests that check it
//! (`tests/it/audit_jsonl.rs`).

use rein::hooks::AuditRecord;

/// The exact JSON line of audit record number `seq` (a final answer; `ts_ms` holds the
/// sequence number, so the test can tell records apart and check their order).
pub(crate) fn record_line(seq: u64) -> String {
    format!(
        r#"{{"type":"final-answer","ts_ms":{seq},"agent":"a","agent_id":"a1","depth":0,"session_id":"s","run_id":"r{seq}","answer":"record {seq}"}}"#
    )
}

/// Audit record number `seq`, parsed from [`record_line`].
pub(crate) fn record(seq: u64) -> Result<AuditRecord, serde_json::Error> {
    serde_json::from_str(&record_line(seq))
}
