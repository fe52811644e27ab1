//! The audit crash test's child process (`tests/it/audit_jsonl.rs`): appends audit
//! records to the JSONL file given as its only argument through a [`JsonlAuditSink`]
//! with `EveryRecord` durability, numbering on from the file's last complete record, in
//! batches of 1 to 7 records (`AuditSink::write_batch`: one write and one sync each),
//! forever, printing `ack <seq>` for each record once its batch resolved. The test kills
//! it with SIGKILL at random moments.
//!
//! A `[[bin]]` with `test = false` (not a `#[test]` that passes by doing nothing): Cargo
//! builds it for the integration tests and hands them its path as
//! `CARGO_BIN_EXE_rein-audit-crash-child`.

use std::io::Write;

use rein::hooks::{AuditRecord, AuditSink, Durability, JsonlAuditSink};

#[path = "audit_crash_shared.rs"]
mod audit_crash_shared;
use audit_crash_shared::record;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: rein-audit-crash-child <audit.jsonl>")?;
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let last = text
        .lines()
        .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
        .map(|r| r.ts_ms)
        .max()
        .unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let sink = JsonlAuditSink::open_with(&path, Durability::EveryRecord)?;
    let mut out = std::io::stdout().lock();
    let mut seq = last + 1;
    loop {
        let batch: Vec<u64> = (seq..seq + 1 + seq % 7).collect();
        seq += batch.len() as u64;
        let records = batch.iter().map(|&n| record(n)).collect::<Result<_, _>>()?;
        let results = rt.block_on(sink.write_batch(records));
        if results.len() != batch.len() {
            return Err(format!("{} results for {} records", results.len(), batch.len()).into());
        }
        for (n, result) in batch.iter().zip(results) {
            result?;
            writeln!(out, "ack {n}")?;
        }
        out.flush()?;
    }
}
