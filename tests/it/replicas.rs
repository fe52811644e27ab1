//! Replicas: agent instances with separate store clients sharing one store (in one
//! test process). A stop for a human on one instance is approved and resumed on
//! another; the approved tool runs once, also when both resume at the same time.

use rein::hooks::{
    ApprovalConfig, ApprovalDecisions, ApprovalHook, ApprovalMode, pending_approvals,
    pending_approvals_in,
};
use rein::*;
use serde_json::json;

use crate::store_agents::{Gate, Leased, config};
use crate::store_contract::Harness;
use crate::support::{assert_memory_valid, builder, key, session};

fn stop_for_human() -> ApprovalHook {
    ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["work".into()],
            mode: ApprovalMode::StopForHuman,
            ..ApprovalConfig::default()
        },
        None,
    )
    .unwrap()
}

/// An instance: its own store client, the approval hook in stop-for-human mode, the
/// shared `work` tool.
fn replica<S: Leased>(store: S, turns: Vec<ScriptedTurn>, gate: &Gate) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new(turns);
    let mut tools = Toolkit::new();
    tools.register(gate.tool()).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .hook(stop_for_human())
        .leased_session_store(store, config(30_000, 10_000))
        .build()
        .unwrap();
    (agent, model)
}

fn approving(calls: &[ToolUse]) -> RunContext {
    let ctx = session("approval");
    let mut decisions = ApprovalDecisions::new();
    for c in calls {
        decisions = decisions.approve_call(c);
    }
    ctx.extensions().insert(decisions);
    ctx
}

fn store_kind(err: &Error) -> StoreErrorKind {
    err.store_error()
        .unwrap_or_else(|| panic!("not a store error: {err}"))
        .kind()
}

/// A stops for a human; B (another client) finds the pending call in the stored
/// session, approves it and resumes: the tool runs once, on B. A's own later resume
/// with the same decision fails with `Conflict` without running anything.
pub async fn an_approval_stopped_on_one_instance_is_resumed_on_another_and_runs_once<S: Leased>(
    h: &Harness<S>,
) {
    let gate = Gate::open();
    let (a, model_a) = replica(
        h.client().await,
        vec![
            ScriptedTurn::tool_call("work", json!({"amount": 5})),
            ScriptedTurn::text("a finished"),
        ],
        &gate,
    );
    let (b, _) = replica(
        h.client().await,
        vec![ScriptedTurn::text("b finished")],
        &gate,
    );
    let reply = a
        .call_with(vec![Msg::user("please work")], session("approval"))
        .await
        .unwrap();
    let waiting = pending_approvals(&reply);
    assert_eq!(waiting.len(), 1);
    assert_eq!(gate.runs(), 0, "stopped before the tool ran");

    let stored = pending_approvals_in(&b.messages(&key("approval")).await);
    assert_eq!(
        stored, waiting,
        "B reads what waits from the stored session"
    );
    let resumed = b.call_with(vec![], approving(&stored)).await.unwrap();
    assert_eq!(resumed.text(), "b finished");
    assert_eq!(gate.runs(), 1);

    let err = a.call_with(vec![], approving(&waiting)).await.unwrap_err();
    assert_eq!(store_kind(&err), StoreErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains(&waiting[0].id), "{err}");
    assert_eq!(gate.runs(), 1, "the approved call ran once");
    assert_eq!(
        model_a.requests().len(),
        1,
        "the stale resume made no model call"
    );

    let history = b.messages(&key("approval")).await;
    assert_memory_valid(&history);
    assert!(pending_approvals_in(&history).is_empty());
    let results: Vec<&ToolResult> = history.iter().flat_map(|m| m.tool_results()).collect();
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error, "{:?}", results[0]);
}

/// A and B resume the same approval at the same time: one runs the tool, the other
/// waits for the lease, then fails with `Conflict`; the tool ran once.
pub async fn concurrent_resumes_of_one_approval_run_the_tool_once<S: Leased>(h: &Harness<S>) {
    let gate = Gate::default();
    let turns = || {
        vec![
            ScriptedTurn::tool_call("work", json!({"amount": 5})),
            ScriptedTurn::text("finished"),
        ]
    };
    let (a, _) = replica(h.client().await, turns(), &gate);
    let (b, _) = replica(
        h.client().await,
        vec![ScriptedTurn::text("finished")],
        &gate,
    );
    let reply = a
        .call_with(vec![Msg::user("please work")], session("approval"))
        .await
        .unwrap();
    let waiting = pending_approvals(&reply);
    assert_eq!(waiting.len(), 1);
    let spawn = |agent: &Agent| {
        let (agent, ctx) = (agent.clone(), approving(&waiting));
        tokio::spawn(async move { agent.call_with(vec![], ctx).await })
    };
    let (ra, rb) = (spawn(&a), spawn(&b));
    gate.started.notified().await;
    gate.release.notify_one();
    let results = [ra.await.unwrap(), rb.await.unwrap()];
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert_eq!(store_kind(e), StoreErrorKind::Conflict, "{e}");
        }
    }
    assert_eq!(
        gate.runs(),
        1,
        "the approved call ran once across instances"
    );
    let history = a.messages(&key("approval")).await;
    assert_memory_valid(&history);
    assert_eq!(history.iter().flat_map(|m| m.tool_results()).count(), 1);
}

macro_rules! replica_tests {
    ($harness:expr) => {
        replica_tests!(@one $harness, an_approval_stopped_on_one_instance_is_resumed_on_another_and_runs_once);
        replica_tests!(@one $harness, concurrent_resumes_of_one_approval_run_the_tool_once);
    };
    (@one $harness:expr, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(h) = $harness else { return };
            crate::replicas::$name(&h).await;
        }
    };
}

mod in_memory {
    use crate::store_contract::Harness;
    use rein::InMemorySessionStore;

    fn harness() -> Option<Harness<InMemorySessionStore>> {
        let store = InMemorySessionStore::new();
        Some(Harness::new(move || std::future::ready(store.clone())))
    }

    replica_tests!(harness());
}

#[cfg(feature = "redis")]
mod redis {
    replica_tests!(crate::store_redis::redis_url().map(|u| crate::store_redis::harness(&u)));
}

#[cfg(feature = "postgres")]
mod postgres {
    replica_tests!(
        crate::store_postgres::postgres_url().map(|u| crate::store_postgres::harness(&u))
    );
}
