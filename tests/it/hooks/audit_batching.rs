//! AuditHook hand-over: the records of a call reach the writer together, once per
//! call, and a cancelled call's records are not stranded.

use std::sync::Arc;

use rein::hooks::{AuditConfig, AuditHook, AuditKind, MemoryAuditSink, SensitiveDataMasker};
use rein::*;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::*;

/// A tool `wait` that signals `started` and then waits for a permit of `gate`.
fn wait() -> ScriptedTurn {
    ScriptedTurn::tool_call("wait", json!({}))
}

fn gated_tool(started: Arc<Semaphore>, gate: Arc<Semaphore>) -> FunctionTool {
    FunctionTool::new(
        "wait",
        "waits",
        json!({"type": "object", "properties": {}}),
        move |_| {
            let (started, gate) = (started.clone(), gate.clone());
            async move {
                started.add_permits(1);
                // Each permit lets exactly one call through.
                gate.acquire().await.unwrap().forget();
                Ok("done".to_owned())
            }
        },
    )
}

/// An audited agent whose model plays `turns` (`wait` calls and answers).
fn waiting_agent(
    sink: &MemoryAuditSink,
    turns: Vec<ScriptedTurn>,
) -> (Agent, Arc<Semaphore>, Arc<Semaphore>) {
    let (started, gate) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let mut tools = Toolkit::new();
    tools
        .register(gated_tool(started.clone(), gate.clone()))
        .unwrap();
    let hook = Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        Arc::new(sink.clone()),
    ));
    let agent = builder(&ScriptedModel::new(turns))
        .toolkit(tools)
        .hook(hook)
        .build()
        .unwrap();
    (agent, started, gate)
}

#[tokio::test]
async fn a_calls_records_reach_the_writer_together_when_the_call_ends() {
    let sink = MemoryAuditSink::new();
    let (agent, started, gate) =
        waiting_agent(&sink, vec![wait(), wait(), ScriptedTurn::text("ok")]);
    let call = agent.call(Msg::user("go"));
    let watch = async {
        // The first tool call finished (its record is queued); the second is running.
        gate.add_permits(1);
        started.acquire_many(2).await.unwrap().forget();
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let mid_call = sink.len();
        gate.add_permits(1);
        mid_call
    };
    let (reply, mid_call) = tokio::join!(call, watch);
    assert_eq!(reply.unwrap().text(), "ok");
    assert_eq!(
        mid_call, 0,
        "a record was handed to the writer before its call ended (a wake-up per record)"
    );
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let kinds: Vec<AuditKind> = sink.records().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            AuditKind::ToolCall,
            AuditKind::ToolCall,
            AuditKind::FinalAnswer
        ],
        "the call's records, in call order, without a flush"
    );
}

#[tokio::test]
async fn a_cancelled_calls_records_are_handed_over_when_the_next_call_starts() {
    let sink = MemoryAuditSink::new();
    // The first call is dropped in its second tool call; the second waits in one.
    let turns = vec![wait(), wait(), wait(), ScriptedTurn::text("ok")];
    let (agent, started, gate) = waiting_agent(&sink, turns);
    {
        let call = agent.call_with(vec![Msg::user("go")], session("a"));
        tokio::pin!(call);
        gate.add_permits(1);
        tokio::select! {
            _ = &mut call => panic!("the call cannot finish: its second tool waits"),
            p = started.acquire_many(2) => p.unwrap().forget(),
        }
        // Dropped mid-call: one tool-call record queued, no final record.
    }
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(sink.len(), 0, "nothing woke the writer yet");
    let next = agent.call_with(vec![Msg::user("go")], session("b"));
    let watch = async {
        // The next call started and waits in its tool: no record of its own yet.
        started.acquire().await.unwrap().forget();
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let records = sink.records();
        gate.add_permits(1);
        records
    };
    let (reply, records) = tokio::join!(next, watch);
    assert_eq!(reply.unwrap().text(), "ok");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].session_id, "a");
    assert_eq!(records[0].kind, AuditKind::ToolCall);
}
