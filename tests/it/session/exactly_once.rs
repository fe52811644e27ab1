//! An approved (or started) side effect never runs twice: one test per way an
//! adversarial review made one approval run a `refund` twice, each named as the
//! guarantee (the crash-point injection across processes is in
//! `tests/it/session/exactly_once_crash.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::agent::ApprovalDecisions;
use rein::hooks::{
    ApprovalConfig, ApprovalHook, ApprovalMode, pending_approvals, pending_approvals_in,
};
use rein::*;
use serde_json::json;

use crate::session::store_agents::{Leased, config, per_engine_tests};
use crate::session::store_contract::Harness;
use crate::support::{FnHook, TempDir, assert_memory_valid, builder, key, session};

/// The refund service: every run of the tool, with its call id and idempotency key.
#[derive(Clone, Default)]
pub struct Refunds(Arc<Mutex<Vec<(String, String)>>>);

impl Refunds {
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The at-most-once `refund` tool; `block` makes it hold its thread (a synchronous
    /// client inside the tool).
    pub fn tool(&self, block: Option<Duration>) -> FunctionTool {
        let runs = self.clone();
        FunctionTool::with_context(
            "refund",
            "Refunds an amount.",
            json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
            move |_args, ctx| {
                let runs = runs.clone();
                async move {
                    if let Some(d) = block {
                        std::thread::sleep(d);
                    }
                    runs.0
                        .lock()
                        .unwrap()
                        .push((ctx.tool_use_id().to_owned(), ctx.idempotency_key()));
                    Ok("refund paid".to_owned())
                }
            },
        )
    }
}

/// The approval hook in stop-for-human mode on `refund`.
pub fn stop_for_human() -> ApprovalHook {
    ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["refund".into()],
            mode: ApprovalMode::StopForHuman,
            ..ApprovalConfig::default()
        },
        None,
    )
    .unwrap()
}

fn toolkit(tool: FunctionTool) -> Toolkit {
    let mut t = Toolkit::new();
    t.register(tool).unwrap();
    t
}

/// A replica: its own store client, the approval hook, the shared refund service.
fn replica<S: Leased>(
    store: S,
    turns: Vec<ScriptedTurn>,
    refunds: &Refunds,
    block: Option<Duration>,
    lease: LeaseConfig,
) -> Agent {
    let model = ScriptedModel::new(turns);
    builder(&model)
        .toolkit(toolkit(refunds.tool(block)))
        .hook(stop_for_human())
        .leased_session_store(store, lease)
        .build()
        .unwrap()
}

/// Runs `call` until `started()` says its tool runs (at most 10 s), then drops it: a
/// call cancelled mid-tool, however loaded the machine is.
async fn cancel_when<F: std::future::Future>(call: F, started: impl Fn() -> bool) {
    let mut call = std::pin::pin!(call);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        tokio::select! {
            _ = &mut call => panic!("the call finished before it was cancelled"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        if started() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool never started"
        );
    }
}

fn ask() -> Vec<ScriptedTurn> {
    vec![ScriptedTurn::tool_call("refund", json!({"amount": 5000}))]
}

fn done() -> Vec<ScriptedTurn> {
    vec![ScriptedTurn::text("done")]
}

/// Asks on `agent` until the refund waits for a human; the waiting call.
async fn stopped(agent: &Agent, s: &str) -> ToolUse {
    let out = agent
        .run(vec![Msg::user("refund my order")], session(s))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::ReasoningStopped);
    pending_approvals(&out.reply).remove(0)
}

/// Scenario 2: a tool that blocks its thread longer than the lease TTL; another replica
/// resumes the same approved call meanwhile.
pub async fn a_tool_that_blocks_its_thread_past_the_lease_ttl_never_runs_twice<S: Leased>(
    h: &Harness<S>,
) {
    let refunds = Refunds::default();
    let asker = replica(h.client().await, ask(), &refunds, None, config(300, 0));
    let call = stopped(&asker, "block").await;
    let a = replica(
        h.client().await,
        done(),
        &refunds,
        Some(Duration::from_millis(1500)),
        config(300, 0),
    );
    let decided = ApprovalDecisions::new().approve_call(&call);
    let running = {
        let (a, d) = (a.clone(), decided.clone());
        tokio::spawn(async move { a.resume(&key("block"), d).await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let b = replica(h.client().await, done(), &refunds, None, config(300, 5_000));
    let second = b.resume(&key("block"), decided).await;
    let first = running.await.unwrap();
    assert_eq!(
        refunds.count(),
        1,
        "one approval, one refund ({first:?} / {second:?})"
    );
    if let Ok(o) = &second {
        assert_ne!(
            o.reason,
            StopReason::Final,
            "the second resume did not finish the refund again"
        );
    }
    assert_memory_valid(&b.try_messages(&key("block")).await.unwrap());
}

/// "Also seen": a second agent without the approval hook, sharing the store, resumes a
/// session stopped for approval.
pub async fn a_session_stopped_for_approval_runs_the_call_only_with_a_decision_whatever_hooks_the_resuming_agent_has<
    S: Leased,
>(
    h: &Harness<S>,
) {
    let refunds = Refunds::default();
    let asker = replica(
        h.client().await,
        ask(),
        &refunds,
        None,
        config(30_000, 5_000),
    );
    let call = stopped(&asker, "nohook").await;
    let model = ScriptedModel::new([ScriptedTurn::text("done"), ScriptedTurn::text("done")]);
    let bare = builder(&model)
        .toolkit(toolkit(refunds.tool(None)))
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    bare.run(vec![], session("nohook")).await.unwrap();
    assert_eq!(
        refunds.count(),
        0,
        "no decision, no refund, whatever the hooks"
    );
    let history = bare.try_messages(&key("nohook")).await.unwrap();
    let result = history
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap();
    assert!(
        result.is_error && result.content.contains("needs approval"),
        "{}",
        result.content
    );
    // The human's decision, given to an agent without the hook, is what lets it run.
    let asker = replica(
        h.client().await,
        ask(),
        &refunds,
        None,
        config(30_000, 5_000),
    );
    let call2 = stopped(&asker, "nohook2").await;
    let bare2 = builder(&ScriptedModel::new([ScriptedTurn::text("done")]))
        .toolkit(toolkit(refunds.tool(None)))
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    let out = bare2
        .resume(
            &key("nohook2"),
            ApprovalDecisions::new().approve_call(&call2),
        )
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::Final);
    assert_eq!(refunds.count(), 1);
    let _ = call;
}

/// "Also seen" and durable resume: a call cancelled while its tool runs is never
/// called "not executed"; the next call finds its outcome unknown, lists it, and a
/// human's decision resolves it.
pub async fn a_call_cancelled_while_its_refund_runs_stops_the_next_call_as_outcome_unknown<
    S: Leased,
>(
    h: &Harness<S>,
) {
    let refunds = Refunds::default();
    let slow = {
        let r = refunds.clone();
        FunctionTool::new("refund", "Refunds.", json!({"type": "object"}), move |_| {
            let r = r.clone();
            async move {
                r.0.lock().unwrap().push(("?".into(), "?".into()));
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok("refund paid".to_owned())
            }
        })
    };
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit(slow))
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    let call = agent.run(vec![Msg::user("refund")], session("cancel"));
    cancel_when(call, || refunds.count() == 1).await;
    assert_eq!(refunds.count(), 1, "the tool had started");
    // The next call (any replica, here a fresh one) stops before anything runs.
    let next_model = ScriptedModel::new([ScriptedTurn::text("done")]);
    let next = builder(&next_model)
        .toolkit(toolkit(refunds.tool(None)))
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    let mut out = None;
    for _ in 0..100 {
        match next
            .run(vec![Msg::user("and now?")], session("cancel"))
            .await
        {
            Ok(o) => {
                out = Some(o);
                break;
            }
            // The cancelled call's lease is released by a background task.
            Err(e)
                if e.store_error()
                    .is_some_and(|s| s.kind() == StoreErrorKind::Busy) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let out = out.unwrap();
    assert_eq!(out.reason, StopReason::OutcomeUnknown);
    let listed = out.reply.metadata[agent::PENDING_CALLS_KEY]
        .as_array()
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "outcome_unknown");
    assert_eq!(listed[0]["class"], "at_most_once");
    assert!(next_model.requests().is_empty(), "the model was not asked");
    let history = next.try_messages(&key("cancel")).await.unwrap();
    assert!(
        !history
            .iter()
            .flat_map(|m| m.tool_results())
            .any(|r| r.content.contains("not executed")),
        "{history:?}"
    );
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let resolved = next
        .resume(
            &key("cancel"),
            ApprovalDecisions::new().record_outcome(&id, "paid, checked by a human"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.reason, StopReason::Final);
    assert_eq!(refunds.count(), 1, "resolving did not run it again");
    let history = next.try_messages(&key("cancel")).await.unwrap();
    assert_memory_valid(&history);
    let result = history
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap();
    assert_eq!(result.content, "paid, checked by a human");
}

per_engine_tests!(exactly_once:
    a_tool_that_blocks_its_thread_past_the_lease_ttl_never_runs_twice,
    a_session_stopped_for_approval_runs_the_call_only_with_a_decision_whatever_hooks_the_resuming_agent_has,
    a_call_cancelled_while_its_refund_runs_stops_the_next_call_as_outcome_unknown,
);

/// Scenario 6: a `PostReasoning` hook that re-issues the last tool call with the same
/// id ("retry the refund") gets a new call, which the earlier approval does not cover.
#[tokio::test]
async fn a_hook_that_reissues_an_approved_call_with_its_id_cannot_run_it_twice() {
    let refunds = Refunds::default();
    let seen: Arc<Mutex<Option<ToolUse>>> = Arc::default();
    let retried = Arc::new(Mutex::new(false));
    let (s1, s2, r2) = (seen.clone(), seen.clone(), retried.clone());
    let remember = FnHook::new("remember", move |event| {
        if let HookEvent::PreActing(e) = event {
            s1.lock()
                .unwrap()
                .get_or_insert_with(|| e.tool_use().clone());
        }
        Ok(())
    })
    .on(EventKind::PreActing);
    let retry = FnHook::new("retry", move |event| {
        if let HookEvent::PostReasoning(e) = event
            && !e.message().has_tool_uses()
            && let Some(call) = s2.lock().unwrap().clone()
            && !std::mem::replace(&mut *r2.lock().unwrap(), true)
        {
            let mut m = Msg::assistant("let me retry that");
            m.content.push(ContentBlock::ToolUse(call));
            e.set_message(m);
        }
        Ok(())
    })
    .priority(10)
    .on(EventKind::PostReasoning);
    let dir = TempDir::new("reissue");
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({"amount": 100})),
        ScriptedTurn::text("refunded"),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit(refunds.tool(None)))
        .hook(stop_for_human())
        .hook(remember)
        .hook(retry)
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    let call = stopped(&agent, "retry").await;
    let out = agent
        .resume(&key("retry"), ApprovalDecisions::new().approve_call(&call))
        .await
        .unwrap();
    assert!(*retried.lock().unwrap(), "the hook re-issued the call");
    assert_eq!(refunds.count(), 1, "one approval, one refund: {out:?}");
    // Memory stays loadable everywhere: a fresh agent on the same directory loads it.
    let fresh = builder(&ScriptedModel::new([]))
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    let history = fresh.try_messages(&key("retry")).await.unwrap();
    let ids: Vec<&str> = history
        .iter()
        .flat_map(|m| m.tool_uses())
        .map(|u| u.id.as_str())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "the re-issued call got a new id");
}

/// Two plain calls, then a refund that stops for a human, so the session's saved fence
/// is above 1; the waiting call.
async fn stopped_after_two_calls<S: Leased>(h: &Harness<S>, refunds: &Refunds, s: &str) -> ToolUse {
    let model = ScriptedModel::new([
        ScriptedTurn::text("hello"),
        ScriptedTurn::text("hello again"),
        ScriptedTurn::tool_call("refund", json!({"amount": 5000})),
    ]);
    let asker = builder(&model)
        .toolkit(toolkit(refunds.tool(None)))
        .hook(stop_for_human())
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    asker.run(vec![Msg::user("hi")], session(s)).await.unwrap();
    asker.run(vec![Msg::user("hi")], session(s)).await.unwrap();
    stopped(&asker, s).await
}

/// Two fresh replicas resume `call` at once with the same approval: the refund runs
/// once, and the session is not stuck (one of them finishes).
async fn two_replicas_resume_once<S: Leased>(
    h: &Harness<S>,
    refunds: &Refunds,
    s: &str,
    call: &ToolUse,
) {
    let d = ApprovalDecisions::new().approve_call(call);
    let b = replica(
        h.client().await,
        done(),
        refunds,
        None,
        config(30_000, 5_000),
    );
    let c = replica(
        h.client().await,
        done(),
        refunds,
        None,
        config(30_000, 5_000),
    );
    let k = key(s);
    let (rb, rc) = tokio::join!(b.resume(&k, d.clone()), c.resume(&k, d));
    assert_eq!(refunds.count(), 1, "{rb:?} / {rc:?}");
    assert!(
        [&rb, &rc]
            .iter()
            .any(|r| r.as_ref().is_ok_and(|o| o.reason == StopReason::Final)),
        "the session is not stuck: one resume finished ({rb:?} / {rc:?})"
    );
}

/// Scenario 3: the Redis fence counter is evicted (or cleaned up) while a session waits
/// for approval; two fresh replicas resume at once.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_redis_fence_counter_cannot_make_an_approval_run_twice() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    let prefix = crate::session::store_redis::fresh_prefix();
    let h = crate::session::store_redis::harness_in(&url, &prefix);
    let refunds = Refunds::default();
    let call = stopped_after_two_calls(&h, &refunds, "fence").await;
    let k = json!([null, "fence"]).to_string();
    let mut conn = ::redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let removed: i64 = ::redis::cmd("DEL")
        .arg(format!("{prefix}fence:{k}"))
        .arg(format!("{prefix}lease:{k}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(removed >= 1, "the fence counter was there to evict");
    two_replicas_resume_once(&h, &refunds, "fence", &call).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_stored_version_fails_the_resume_before_any_tool_runs() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    let prefix = crate::session::store_redis::fresh_prefix();
    let h = crate::session::store_redis::harness_in(&url, &prefix);
    for (i, forged) in ["01", "+1", " 1", "1 "].into_iter().enumerate() {
        let s = format!("version-{i}");
        let refunds = Refunds::default();
        let asker = replica(
            h.client().await,
            ask(),
            &refunds,
            None,
            config(30_000, 5_000),
        );
        let call = stopped(&asker, &s).await;
        let store = h.client().await;
        let mut conn = ::redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = ::redis::cmd("HSET")
            .arg(store.data_key(&key(&s)))
            .arg("version")
            .arg(forged)
            .query_async(&mut conn)
            .await
            .unwrap();
        let b = replica(store, done(), &refunds, None, config(30_000, 5_000));
        let err = b
            .resume(&key(&s), ApprovalDecisions::new().approve_call(&call))
            .await
            .unwrap_err();
        assert_eq!(
            err.store_error().unwrap().kind(),
            StoreErrorKind::Corrupt,
            "{err}"
        );
        assert!(err.to_string().contains("version"), "{err}");
        assert_eq!(refunds.count(), 0, "`{forged}`: nothing ran");
    }
}

/// Scenario 4: a cleanup job deletes expired (and released) PostgreSQL lease rows while
/// a session waits for approval; two replicas resume at once.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_postgres_lease_rows_cannot_make_an_approval_run_twice() {
    let Some(url) = crate::session::store_postgres::postgres_url() else {
        return;
    };
    let table = crate::session::store_postgres::fresh_table();
    let h = crate::session::store_postgres::harness_in(&url, &table);
    let refunds = Refunds::default();
    let call = stopped_after_two_calls(&h, &refunds, "rows").await;
    let n = crate::session::store_postgres::raw(&url)
        .await
        .execute(
            &format!("DELETE FROM {table}_leases WHERE expires_at < now()"),
            &[],
        )
        .await
        .unwrap();
    assert!(n >= 1, "the released lease row was there to delete");
    two_replicas_resume_once(&h, &refunds, "rows", &call).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_approval_survives_a_change_of_replica() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    let h =
        crate::session::store_redis::harness_in(&url, &crate::session::store_redis::fresh_prefix());
    let refunds = Refunds::default();
    let billing = || crate::support::subagents::decl("billing", &["refund"]);
    let model_a = ScriptedModel::new([
        crate::support::subagents::spawn("billing", "refund 5000 for order 7"),
        ScriptedTurn::tool_call("refund", json!({"amount": 5000})),
    ]);
    let a = builder(&model_a)
        .toolkit(toolkit(refunds.tool(None)))
        .hook(stop_for_human())
        .subagent(billing())
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    let out = a
        .run(vec![Msg::user("refund order 7")], session("tree"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::SubagentStopped);
    // Replica B knows nothing in memory: what waits comes from the store.
    let model_b = ScriptedModel::new([ScriptedTurn::text("refunded"), ScriptedTurn::text("done")]);
    let b = builder(&model_b)
        .toolkit(toolkit(refunds.tool(None)))
        .hook(stop_for_human())
        .subagent(billing())
        .leased_session_store(h.client().await, config(30_000, 5_000))
        .build()
        .unwrap();
    let waiting = pending_approvals_in(&b.try_messages(&key("tree")).await.unwrap());
    assert_eq!(
        waiting.len(),
        1,
        "the child's call is listed from the store"
    );
    assert_eq!(waiting[0].name, "refund");
    let done = b
        .resume(
            &key("tree"),
            ApprovalDecisions::new().approve_call(&waiting[0]),
        )
        .await
        .unwrap();
    assert_eq!(done.reason, StopReason::Final, "{done:?}");
    assert_eq!(done.reply.text(), "done");
    assert_eq!(refunds.count(), 1);
    // A duplicate resume (A, with the same decision) runs nothing.
    let again = a
        .resume(
            &key("tree"),
            ApprovalDecisions::new().approve_call(&waiting[0]),
        )
        .await;
    assert_eq!(refunds.count(), 1, "{again:?}");
}

/// "Also seen": `Agent::messages` on a session the store cannot load is empty (and
/// `try_messages` says why), never a stale cached copy.
#[tokio::test]
async fn the_messages_of_a_session_that_cannot_load_are_never_a_stale_copy() {
    #[derive(Clone, Default)]
    struct Failing {
        inner: InMemorySessionStore,
        broken: Arc<Mutex<bool>>,
    }
    impl SessionStore for Failing {
        async fn load(&self, k: &SessionKey) -> Result<StoredSession, StoreError> {
            if *self.broken.lock().unwrap() {
                return Err(StoreError::with_kind(
                    StoreErrorKind::Corrupt,
                    k,
                    "broken (test)",
                ));
            }
            self.inner.load(k).await
        }
        async fn save(&self, k: &SessionKey, m: &[Msg], v: u64) -> Result<u64, StoreError> {
            self.inner.save(k, m, v).await
        }
    }
    impl SessionLeases for Failing {
        async fn acquire(
            &self,
            k: &SessionKey,
            t: Duration,
            w: Duration,
        ) -> Result<Lease, StoreError> {
            self.inner.acquire(k, t, w).await
        }
        async fn renew(&self, l: &Lease) -> Result<(), StoreError> {
            self.inner.renew(l).await
        }
        async fn release(&self, l: &Lease) -> Result<bool, StoreError> {
            self.inner.release(l).await
        }
        async fn save_fenced(&self, l: &Lease, m: &[Msg], v: u64) -> Result<u64, StoreError> {
            self.inner.save_fenced(l, m, v).await
        }
    }
    let store = Failing::default();
    let refunds = Refunds::default();
    let agent = replica(store.clone(), ask(), &refunds, None, config(30_000, 0));
    stopped(&agent, "stale").await;
    assert_eq!(agent.messages(&key("stale")).await.len(), 2);
    *store.broken.lock().unwrap() = true;
    assert!(
        agent.messages(&key("stale")).await.is_empty(),
        "no stale pending approval"
    );
    let err = agent.try_messages(&key("stale")).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
}

/// A forged or malformed journal entry fails the call closed, naming the session and
/// the field, before any tool runs.
#[tokio::test]
async fn a_forged_journal_entry_fails_closed_before_any_tool_runs() {
    let dir = TempDir::new("forged");
    let store = FileSessionStore::open(dir.path()).unwrap();
    let refunds = Refunds::default();
    let mut call = Msg::assistant("");
    call.content.push(ContentBlock::ToolUse(ToolUse::new(
        "call_1",
        "refund",
        json!({"amount": 1}),
    )));
    call.metadata.insert(
        agent::JOURNAL_KEY.to_owned(),
        json!({"call_1": {"state": "settled", "class": "at_most_once", "attempt": 1,
                          "result": {"id": "call_2", "name": "refund", "content": "x", "is_error": false}}}),
    );
    store
        .save(&key("forged"), &[Msg::user("refund"), call], 0)
        .await
        .unwrap();
    let agent = builder(&ScriptedModel::new([ScriptedTurn::text("done")]))
        .toolkit(toolkit(refunds.tool(None)))
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    let err = agent.run(vec![], session("forged")).await.unwrap_err();
    let store_err = err.store_error().unwrap();
    assert_eq!(store_err.kind(), StoreErrorKind::Corrupt);
    assert_eq!(store_err.session(), Some("forged"));
    assert!(err.to_string().contains("rein.effects.call_1"), "{err}");
    assert_eq!(refunds.count(), 0);
}

/// An idempotent tool whose call was interrupted runs again on resume with the same
/// idempotency key, and knows it is a retry.
#[tokio::test]
async fn an_interrupted_idempotent_call_is_retried_with_the_same_key() {
    let keys: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let first = Arc::new(Mutex::new(true));
    let (k, f) = (keys.clone(), first.clone());
    let tool = FunctionTool::with_context(
        "charge",
        "Charges.",
        json!({"type": "object"}),
        move |_, ctx| {
            let (k, f) = (k.clone(), f.clone());
            async move {
                k.lock()
                    .unwrap()
                    .push((ctx.idempotency_key(), ctx.is_retry()));
                if std::mem::replace(&mut *f.lock().unwrap(), false) {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok("charged".to_owned())
            }
        },
    )
    .idempotent();
    let store = InMemorySessionStore::new();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("charge", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit(tool))
        .session_store(store.clone())
        .build()
        .unwrap();
    let call = agent.run(vec![Msg::user("charge")], session("idem"));
    cancel_when(call, || !keys.lock().unwrap().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let out = agent.run(vec![], session("idem")).await.unwrap();
    assert_eq!(out.reason, StopReason::Final);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0].0, keys[1].0, "the same key on the retry");
    assert_eq!((keys[0].1, keys[1].1), (false, true));
    assert!(keys[0].0.starts_with("rein-"), "{}", keys[0].0);
}

/// Without a store, a call cancelled while its tool runs leaves "outcome unknown" in
/// memory, never "not executed".
#[tokio::test]
async fn without_a_store_a_started_tool_is_never_recorded_as_not_executed() {
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = started.clone();
    let slow = FunctionTool::new("refund", "Refunds.", json!({"type": "object"}), move |_| {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok("paid".to_owned())
        }
    });
    let model = ScriptedModel::new([ScriptedTurn::tool_call("refund", json!({}))]);
    let agent = builder(&model).toolkit(toolkit(slow)).build().unwrap();
    let call = agent.run(vec![Msg::user("refund")], session("mem"));
    cancel_when(call, || started.load(std::sync::atomic::Ordering::SeqCst)).await;
    let history = agent.messages(&key("mem")).await;
    let r = history
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap();
    assert!(r.content.starts_with("outcome unknown"), "{}", r.content);
    assert!(!r.content.contains("not executed"));
}
