//! Double texting: a second message on a busy session is rejected, queued in arrival
//! order, or interrupts / rolls back the running call — in one process and across
//! replicas (two agents on two clients of one store), on every engine.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rein::store::{SessionSignal, WAITER_TTL};
use rein::*;
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::session::store_agents::{Gate, Leased, config, leased_agent, per_engine_tests};
use crate::session::store_contract::Harness;
use crate::support::{assert_memory_valid, builder, key, session};

fn texts(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(Msg::text).collect()
}

fn store_kind(err: &Error) -> StoreErrorKind {
    err.store_error()
        .map(StoreError::kind)
        .unwrap_or_else(|| panic!("not a store error: {err}"))
}

/// Waiters are served in the order they reached the store, not the order they retry.
pub async fn waiters_are_served_in_the_order_they_reached_the_store<S: Leased>(h: &Harness<S>) {
    let store = h.client().await;
    let k = key("fifo");
    let ttl = Duration::from_secs(30);
    let holder = store.acquire(&k, ttl, Duration::ZERO).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (client, order, k) = (h.client().await, Arc::clone(&order), k.clone());
        waiters.push(tokio::spawn(async move {
            let (lease, _) = client
                .acquire_queued_and_load(&k, ttl, Duration::from_secs(20), 16)
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            order.lock().await.push(i);
            // Held a moment: the next waiter must not pass while it is.
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.release(&lease).await.unwrap();
        }));
        // Each one reaches the store before the next starts.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    store.release(&holder).await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().await, vec![0, 1, 2, 3]);
}

/// One waiter more than the bound fails at once with `QueueFull`; a caller that does not
/// queue never passes a waiter, even on a lease just released.
pub async fn a_full_queue_refuses_at_once_and_a_plain_acquire_never_passes_a_waiter<S: Leased>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let k = key("full");
    let ttl = Duration::from_secs(30);
    let holder = store.acquire(&k, ttl, Duration::ZERO).await.unwrap();
    let waiter = {
        let (client, k) = (h.client().await, k.clone());
        tokio::spawn(async move {
            client
                .acquire_queued_and_load(&k, ttl, Duration::from_secs(10), 1)
                .await
                .map(|(lease, _)| lease)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let err = store
        .acquire_queued_and_load(&k, ttl, Duration::from_secs(10), 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::QueueFull, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
    store.release(&holder).await.unwrap();
    // The lease is free, but the waiter is ahead (or already holds it).
    let err = store.acquire(&k, ttl, Duration::ZERO).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    let lease = waiter.await.unwrap().unwrap();
    store.release(&lease).await.unwrap();
    // A waiter that gave up left the queue: a plain acquire gets the free lease.
    let held = store.acquire(&k, ttl, Duration::ZERO).await.unwrap();
    let gave_up = store
        .acquire_queued_and_load(&k, ttl, Duration::from_millis(150), 4)
        .await
        .unwrap_err();
    assert_eq!(gave_up.kind(), StoreErrorKind::Busy, "{gave_up}");
    store.release(&held).await.unwrap();
    assert!(WAITER_TTL > Duration::from_millis(150));
    store.acquire(&k, ttl, Duration::ZERO).await.unwrap();
}

/// A signal reaches the holder it was sent to, keeps the stronger of two, and never
/// reaches the next holder.
pub async fn a_signal_reaches_only_the_holder_it_was_sent_to<S: Leased>(h: &Harness<S>) {
    let store = h.client().await;
    let other = h.client().await;
    let k = key("signal");
    let ttl = Duration::from_secs(30);
    assert!(store.orders_and_signals());
    assert!(
        !other.signal(&k, SessionSignal::Interrupt).await.unwrap(),
        "no holder"
    );
    let a = store.acquire(&k, ttl, Duration::ZERO).await.unwrap();
    assert_eq!(store.signalled(&a).await.unwrap(), None);
    assert!(other.signal(&k, SessionSignal::Interrupt).await.unwrap());
    assert_eq!(
        store.signalled(&a).await.unwrap(),
        Some(SessionSignal::Interrupt)
    );
    assert!(other.signal(&k, SessionSignal::Rollback).await.unwrap());
    assert!(other.signal(&k, SessionSignal::Interrupt).await.unwrap());
    assert_eq!(
        store.signalled(&a).await.unwrap(),
        Some(SessionSignal::Rollback)
    );
    store.release(&a).await.unwrap();
    let b = other.acquire(&k, ttl, Duration::ZERO).await.unwrap();
    assert_eq!(
        other.signalled(&b).await.unwrap(),
        None,
        "the next holder is not signalled"
    );
}

/// A tool with an effect (not read-only) that counts its runs and waits for `gate`.
fn pay_tool(gate: &Gate) -> FunctionTool {
    let gate = gate.clone();
    FunctionTool::new("pay", "pays", json!({"type": "object"}), move |_| {
        let gate = gate.clone();
        async move {
            gate.runs.fetch_add(1, Ordering::SeqCst);
            gate.started.notify_one();
            gate.release.notified().await;
            Ok("paid".to_owned())
        }
    })
}

fn paying_agent<S: Leased>(
    store: S,
    turns: Vec<ScriptedTurn>,
    gate: &Gate,
) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new(turns);
    let mut tools = Toolkit::new();
    tools.register(pay_tool(gate)).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .leased_session_store(store, config(30_000, 10_000))
        .build()
        .unwrap();
    (agent, model)
}

fn run_on(
    agent: &Agent,
    text: &str,
    ctx: RunContext,
) -> tokio::task::JoinHandle<Result<CallOutcome, Error>> {
    let (agent, msg) = (agent.clone(), Msg::user(text));
    tokio::spawn(async move { agent.run(vec![msg], ctx).await })
}

/// A `Reject` call on a session another replica is running fails at once with `Busy`,
/// and nothing of it is stored.
pub async fn reject_fails_at_once_while_another_replica_runs_and_stores_nothing<S: Leased>(
    h: &Harness<S>,
) {
    let gate = Gate::default();
    let (a, _) = leased_agent(
        h.client().await,
        vec![
            ScriptedTurn::tool_call("work", json!({})),
            ScriptedTurn::text("a done"),
        ],
        &gate,
        config(30_000, 10_000),
    );
    let (b, model_b) = leased_agent(
        h.client().await,
        vec![ScriptedTurn::text("b done")],
        &Gate::open(),
        config(30_000, 10_000),
    );
    let running = run_on(&a, "from a", session("rj"));
    gate.started.notified().await;
    let started = Instant::now();
    let err = b
        .run(
            vec![Msg::user("from b")],
            session("rj").with_double_text(DoubleText::Reject),
        )
        .await
        .unwrap_err();
    assert_eq!(store_kind(&err), StoreErrorKind::Busy, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, not after the wait"
    );
    assert!(model_b.requests().is_empty());
    gate.release.notify_one();
    assert_eq!(running.await.unwrap().unwrap().reason, StopReason::Final);
    let stored = h.client().await.load(&key("rj")).await.unwrap().messages;
    assert!(
        !texts(&stored).iter().any(|t| t == "from b"),
        "{:?}",
        texts(&stored)
    );
}

/// An `Interrupt` from another replica stops the running call once its tool settled: its
/// partial turn stays, and the newer message is answered with everything so far.
pub async fn interrupt_from_another_replica_stops_the_running_call_after_its_tool_settles<
    S: Leased,
>(
    h: &Harness<S>,
) {
    let gate = Gate::default();
    let (a, model_a) = leased_agent(
        h.client().await,
        vec![
            ScriptedTurn::tool_call("work", json!({})),
            ScriptedTurn::text("a done"),
        ],
        &gate,
        config(30_000, 10_000),
    );
    let (b, model_b) = leased_agent(
        h.client().await,
        vec![ScriptedTurn::text("b done")],
        &Gate::open(),
        config(30_000, 10_000),
    );
    let running = run_on(&a, "from a", session("int"));
    gate.started.notified().await;
    let newer = run_on(
        &b,
        "from b",
        session("int").with_double_text(DoubleText::Interrupt),
    );
    // The signal is sent before the newer call waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.release.notify_one();
    let first = running.await.unwrap().unwrap();
    assert_eq!(first.reason, StopReason::Interrupted);
    assert_eq!(
        model_a.requests().len(),
        1,
        "no model turn after the safe point"
    );
    assert_eq!(gate.runs(), 1);
    let second = newer.await.unwrap().unwrap();
    assert_eq!(second.reply.text(), "b done");
    let seen = model_b.requests()[0].messages.to_vec();
    let results: Vec<&str> = seen
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["worked"], "the newer call saw the tool result");
    let stored = h.client().await.load(&key("int")).await.unwrap().messages;
    assert_memory_valid(&stored);
    let t = texts(&stored);
    assert_eq!(t[0], "from a");
    assert!(t[3].starts_with("Interrupted"), "{t:?}");
    assert_eq!(&t[4..], ["from b", "b done"]);
}

/// A `Rollback` from another replica puts the session back to before the running call,
/// except the effect that ran: it stays, flagged, and the note names it; it ran once.
pub async fn rollback_from_another_replica_keeps_only_the_effect_that_ran_flagged<S: Leased>(
    h: &Harness<S>,
) {
    let gate = Gate::default();
    let (a, _) = paying_agent(
        h.client().await,
        vec![
            ScriptedTurn::tool_call("pay", json!({})),
            ScriptedTurn::text("a done"),
        ],
        &gate,
    );
    let (b, model_b) = leased_agent(
        h.client().await,
        vec![ScriptedTurn::text("b done")],
        &Gate::open(),
        config(30_000, 10_000),
    );
    // An earlier exchange the rollback must keep.
    let (warm, _) = leased_agent(
        h.client().await,
        vec![ScriptedTurn::text("hello")],
        &Gate::open(),
        config(30_000, 10_000),
    );
    warm.call_with(vec![Msg::user("hi")], session("rb"))
        .await
        .unwrap();
    let running = run_on(&a, "from a", session("rb"));
    gate.started.notified().await;
    let newer = run_on(
        &b,
        "from b",
        session("rb").with_double_text(DoubleText::Rollback),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.release.notify_one();
    let first = running.await.unwrap().unwrap();
    assert_eq!(first.reason, StopReason::RolledBack);
    assert!(
        first.reply.text().contains("`pay`"),
        "{}",
        first.reply.text()
    );
    newer.await.unwrap().unwrap();
    assert_eq!(gate.runs(), 1, "the effect ran once");
    let seen = texts(&model_b.requests()[0].messages.to_vec());
    assert!(
        !seen.iter().any(|t| t == "from a"),
        "the rolled-back input is gone: {seen:?}"
    );
    let stored = h.client().await.load(&key("rb")).await.unwrap().messages;
    assert_memory_valid(&stored);
    let t = texts(&stored);
    assert_eq!(&t[..2], ["hi", "hello"]);
    assert!(!t.iter().any(|t| t == "from a"), "{t:?}");
    let flagged: Vec<&Msg> = stored
        .iter()
        .filter(|m| m.metadata.get(rein::agent::ROLLED_BACK_KEY) == Some(&json!(true)))
        .collect();
    assert_eq!(flagged.len(), 3, "the call, its result and the note: {t:?}");
    assert_eq!(flagged[0].tool_uses()[0].name, "pay");
    assert_eq!(&t[t.len() - 2..], ["from b", "b done"]);
}

/// Enqueued calls from two replicas are answered in the order they reached the store:
/// a call waiting in one process behind its own replica's running call does not pass a
/// call of the other replica that reached the store first.
pub async fn enqueued_calls_from_two_replicas_are_answered_in_arrival_order<S: Leased>(
    h: &Harness<S>,
) {
    let gate = Gate::default();
    let (a, _) = leased_agent(
        h.client().await,
        vec![
            ScriptedTurn::tool_call("work", json!({})),
            ScriptedTurn::text("a1 done"),
            ScriptedTurn::text("a2 done"),
        ],
        &gate,
        config(30_000, 10_000),
    );
    let (b, _) = leased_agent(
        h.client().await,
        vec![ScriptedTurn::text("b1 done")],
        &Gate::open(),
        config(30_000, 10_000),
    );
    let a1 = run_on(&a, "a1", session("q"));
    gate.started.notified().await;
    let b1 = run_on(&b, "b1", session("q"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a2 = run_on(&a, "a2", session("q"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.release.notify_one();
    for call in [a1, b1, a2] {
        assert_eq!(call.await.unwrap().unwrap().reason, StopReason::Final);
    }
    let stored = h.client().await.load(&key("q")).await.unwrap().messages;
    let users: Vec<String> = stored
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Msg::text)
        .collect();
    assert_eq!(users, ["a1", "b1", "a2"]);
}

per_engine_tests!(double_text:
    waiters_are_served_in_the_order_they_reached_the_store,
    a_full_queue_refuses_at_once_and_a_plain_acquire_never_passes_a_waiter,
    a_signal_reaches_only_the_holder_it_was_sent_to,
    reject_fails_at_once_while_another_replica_runs_and_stores_nothing,
    interrupt_from_another_replica_stops_the_running_call_after_its_tool_settles,
    rollback_from_another_replica_keeps_only_the_effect_that_ran_flagged,
    enqueued_calls_from_two_replicas_are_answered_in_arrival_order,
);

/// Without a store: an interrupt in one process stops the running call at its next safe
/// point; the stream shows it before the outcome, and `PostCall` hooks and the audit
/// file name the reason.
#[tokio::test]
async fn an_interrupt_in_one_process_stops_the_running_call_and_its_stream_post_call_and_audit_say_so()
 {
    use futures::StreamExt;
    let gate = Gate::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("work", json!({})),
        ScriptedTurn::text("b done"),
    ]);
    let mut tools = Toolkit::new();
    tools.register(gate.tool()).unwrap();
    // The audit trail and a PostCall hook see why each call stopped.
    let dir = crate::support::TempDir::new("double-text-audit");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(rein::hooks::AuditHook::new(
        rein::hooks::AuditConfig {
            enabled: true,
            ..rein::hooks::AuditConfig::default()
        },
        rein::hooks::SensitiveDataMasker::default(),
        Arc::new(rein::hooks::JsonlAuditSink::open(&path).unwrap()),
    ));
    let reasons = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reasons);
    let post_call = crate::support::FnHook::new("post-call", move |event| {
        if let HookEvent::PostCall(e) = event {
            seen.lock().unwrap().push(e.reason());
        }
        Ok(())
    })
    .on(EventKind::PostCall);
    let agent = builder(&model)
        .toolkit(tools)
        .hook(Arc::clone(&audit))
        .hook(post_call)
        .build()
        .unwrap();
    let mut stream = agent.stream(vec![Msg::user("from a")], session("p"));
    let events = Arc::new(Mutex::new(Vec::new()));
    let collected = {
        let events = Arc::clone(&events);
        tokio::spawn(async move {
            while let Some(e) = stream.next().await {
                events.lock().await.push(e);
            }
        })
    };
    gate.started.notified().await;
    let newer = run_on(
        &agent,
        "from b",
        session("p").with_double_text(DoubleText::Interrupt),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.release.notify_one();
    collected.await.unwrap();
    let events = events.lock().await;
    let superseded = events.iter().position(|e| {
        matches!(
            e,
            AgentEvent::Superseded {
                reason: StopReason::Interrupted,
                ..
            }
        )
    });
    let last = events.last();
    assert!(superseded.is_some(), "{events:?}");
    assert!(
        matches!(last, Some(AgentEvent::Final(o)) if o.reason == StopReason::Interrupted),
        "{last:?}"
    );
    assert_eq!(newer.await.unwrap().unwrap().reply.text(), "b done");
    assert_memory_valid(&agent.messages(&key("p")).await);
    assert_eq!(
        *reasons.lock().unwrap(),
        [StopReason::Interrupted, StopReason::Final],
        "PostCall sees the interrupted call's reason"
    );
    audit.flush().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let stops: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<rein::hooks::AuditRecord>(l).ok())
        .filter_map(|r| r.stop_reason)
        .collect();
    assert_eq!(stops, ["interrupted", "final"], "{text}");
}

/// Without a store: one waiter more than `max_waiting` fails at once with `QueueFull`, a
/// `Reject` call with `Busy`; the waiter within the bound is answered.
#[tokio::test]
async fn a_bounded_queue_refuses_one_more_waiter_and_reject_refuses_at_once() {
    let gate = Gate::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("work", json!({})),
        ScriptedTurn::text("first"),
        ScriptedTurn::text("second"),
    ]);
    let mut tools = Toolkit::new();
    tools.register(gate.tool()).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .max_waiting(1)
        .build()
        .unwrap();
    let first = run_on(&agent, "one", session("b"));
    gate.started.notified().await;
    let second = run_on(&agent, "two", session("b"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let full = agent
        .run(vec![Msg::user("three")], session("b"))
        .await
        .unwrap_err();
    assert_eq!(store_kind(&full), StoreErrorKind::QueueFull, "{full}");
    let busy = agent
        .run(
            vec![Msg::user("four")],
            session("b").with_double_text(DoubleText::Reject),
        )
        .await
        .unwrap_err();
    assert_eq!(store_kind(&busy), StoreErrorKind::Busy, "{busy}");
    gate.release.notify_one();
    first.await.unwrap().unwrap();
    assert_eq!(second.await.unwrap().unwrap().reply.text(), "second");
    let users: Vec<String> = agent
        .messages(&key("b"))
        .await
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Msg::text)
        .collect();
    assert_eq!(users, ["one", "two"]);
}
