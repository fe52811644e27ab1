//! `PostgresAuditSink` against a real PostgreSQL server (under `scripts/test-servers`):
//! the records of two agents (two replicas) land in one table, batched; a table the
//! sink cannot write counts records as dropped and never fails a call.

use std::sync::Arc;

use rein::hooks::{AuditConfig, AuditHook, SensitiveDataMasker};
use rein::store::PostgresAuditSink;
use rein::*;
use serde_json::json;

use crate::session::store_postgres::{fresh_table, postgres_url, raw};
use crate::support::*;

async fn sink(url: &str, table: &str) -> PostgresAuditSink {
    PostgresAuditSink::builder()
        .url(url)
        .table(table)
        .connect()
        .await
        .unwrap()
}

fn audited_agent(sink: PostgresAuditSink, log: &Log) -> (Agent, Arc<AuditHook>) {
    let hook = Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        Arc::new(sink),
    ));
    let model = tool_then_text("queryOrder", json!({"order_id": "A-1"}), "shipped");
    let agent = builder_with_tools(&model, vec![query_tool(log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    (agent, hook)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_of_two_replicas_lands_in_one_postgres_table() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let log = Log::default();
    let (a, hook_a) = audited_agent(sink(&url, &table).await, &log);
    // The second replica runs the (idempotent) migration again.
    let (b, hook_b) = audited_agent(sink(&url, &table).await, &log);
    a.call_with(vec![Msg::user("where is A-1")], session("from-a"))
        .await
        .unwrap();
    b.call_with(vec![Msg::user("where is A-1")], session("from-b"))
        .await
        .unwrap();
    hook_a.flush().await.unwrap();
    hook_b.flush().await.unwrap();
    assert_eq!(hook_a.stats().dropped + hook_b.stats().dropped, 0);
    let rows = raw(&url)
        .await
        .query(
            &format!("SELECT session_id, kind, tool, record FROM \"{table}\" ORDER BY id"),
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(String, String, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    for s in ["from-a", "from-b"] {
        let mine: Vec<_> = got.iter().filter(|(sess, _, _)| sess == s).collect();
        assert_eq!(mine.len(), 2, "{got:?}");
        assert_eq!(mine[0].1, "tool-call");
        assert_eq!(mine[0].2.as_deref(), Some("queryOrder"));
        assert_eq!(mine[1].1, "final-answer");
    }
    let record: String = rows[0].get(3);
    let parsed: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(parsed["tool"], "queryOrder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_audit_table_that_cannot_be_written_drops_records_without_failing_calls() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let log = Log::default();
    let (agent, hook) = audited_agent(sink(&url, &table).await, &log);
    raw(&url)
        .await
        .batch_execute(&format!("DROP TABLE \"{table}\""))
        .await
        .unwrap();
    let reply = agent.call(Msg::user("where is A-1")).await.unwrap();
    assert_eq!(reply.text(), "shipped");
    hook.flush().await.unwrap();
    let stats = hook.stats();
    assert_eq!((stats.written, stats.dropped), (0, 2), "{stats:?}");
}

#[tokio::test]
async fn an_invalid_audit_table_name_is_a_config_error() {
    let err = PostgresAuditSink::builder()
        .url("postgres://nobody@127.0.0.1:1/none")
        .table("Audit; DROP TABLE x")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
}
