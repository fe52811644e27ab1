//! Agents with leased sessions (`AgentBuilder::leased_session_store`): two agent
//! instances with separate store clients — two replicas — calling the same session.
//! One suite, run against `InMemorySessionStore` and, under `scripts/test-servers`,
//! against real Redis and PostgreSQL (the same `Harness` as the store contract).
//!
//! The instances run in one test process (separate agents, separate clients, one
//! server); a killed replica is simulated by forgetting its call's future mid-call
//! (no renewal, no release, no save — what a SIGKILL leaves).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rein::*;
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::session::store_contract::Harness;
use crate::support::{assert_memory_valid, builder, key, session};

/// What a store needs to back leased agents.
pub trait Leased: SessionStore + SessionLeases {}
impl<S: SessionStore + SessionLeases> Leased for S {}

/// A tool `work` that counts its runs, says when it started and waits until released
/// (or runs straight through when `open`).
#[derive(Clone, Default)]
pub struct Gate {
    pub runs: Arc<AtomicUsize>,
    pub finished: Arc<AtomicUsize>,
    pub started: Arc<Notify>,
    pub release: Arc<Notify>,
    pub open: Arc<AtomicBool>,
}

impl Gate {
    pub fn open() -> Self {
        let gate = Self::default();
        gate.open.store(true, Ordering::SeqCst);
        gate
    }

    pub fn tool(&self) -> FunctionTool {
        let gate = self.clone();
        FunctionTool::new("work", "does work", json!({"type": "object"}), move |_| {
            let gate = gate.clone();
            async move {
                gate.runs.fetch_add(1, Ordering::SeqCst);
                gate.started.notify_one();
                if !gate.open.load(Ordering::SeqCst) {
                    gate.release.notified().await;
                }
                gate.finished.fetch_add(1, Ordering::SeqCst);
                Ok("worked".to_owned())
            }
        })
        // These tests are about the lease: a read-only tool is not journaled, so a
        // taken-over call is simply run again (tests/it/session/exactly_once.rs covers tools
        // with effects).
        .read_only()
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

pub fn config(ttl_ms: u64, wait_ms: u64) -> LeaseConfig {
    LeaseConfig {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
    }
}

/// An agent on `store` with leases, the `work` tool of `gate` and a scripted model.
pub fn leased_agent<S: Leased>(
    store: S,
    turns: Vec<ScriptedTurn>,
    gate: &Gate,
    config: LeaseConfig,
) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new(turns);
    let mut tools = Toolkit::new();
    tools.register(gate.tool()).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .leased_session_store(store, config)
        .build()
        .unwrap();
    (agent, model)
}

/// Runs a call with one user message on session `s` on a task.
pub fn spawn_call(agent: &Agent, text: &str, s: &str) -> JoinHandle<Result<Msg, Error>> {
    let (agent, msg, ctx) = (agent.clone(), Msg::user(text), session(s));
    tokio::spawn(async move { agent.call_with(vec![msg], ctx).await })
}

/// Another instance (its own client) that answers `reply` and waits up to 10 s.
async fn next_instance<S: Leased>(h: &Harness<S>, reply: &str) -> (Agent, ScriptedModel) {
    let turns = vec![ScriptedTurn::text(reply)];
    leased_agent(
        h.client().await,
        turns,
        &Gate::open(),
        config(30_000, 10_000),
    )
}

fn work_then(text: &str) -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("work", json!({})),
        ScriptedTurn::text(text),
    ]
}

fn texts(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(Msg::text).collect()
}

fn store_kind(err: &Error) -> StoreErrorKind {
    err.store_error()
        .unwrap_or_else(|| panic!("not a store error: {err}"))
        .kind()
}

/// The stored history of session `s`, read with a fresh client.
async fn stored<S: Leased>(h: &Harness<S>, s: &str) -> StoredSession {
    h.client().await.load(&key(s)).await.unwrap()
}

/// A second instance's call on a session the first is running a call on waits, then
/// fails with `Busy` before its model or its tool runs.
pub async fn a_second_instance_waits_then_gets_busy_without_running_anything<S: Leased>(
    h: &Harness<S>,
) {
    let (gate_a, gate_b) = (Gate::default(), Gate::open());
    let (a, _) = leased_agent(
        h.client().await,
        work_then("a done"),
        &gate_a,
        config(30_000, 5_000),
    );
    let (b, model_b) = leased_agent(
        h.client().await,
        work_then("b done"),
        &gate_b,
        config(30_000, 300),
    );
    let running = spawn_call(&a, "from a", "s");
    gate_a.started.notified().await;
    let started = Instant::now();
    let err = b
        .call_with(vec![Msg::user("from b")], session("s"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store, "{err}");
    assert_eq!(store_kind(&err), StoreErrorKind::Busy, "{err}");
    assert!(err.to_string().contains("`s`"), "names the session: {err}");
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    assert_eq!(gate_b.runs(), 0, "no tool ran for the Busy call");
    assert!(
        model_b.requests().is_empty(),
        "no model call for the Busy call"
    );
    gate_a.release.notify_one();
    running.await.unwrap().unwrap();
    let history = stored(h, "s").await.messages;
    assert_memory_valid(&history);
    assert_eq!(texts(&history)[0], "from a");
    assert!(!texts(&history).iter().any(|t| t == "from b"));
}

/// Calls alternating between two instances all land, in order, each once; each
/// instance sees the other's turns (it reloads under the lease).
pub async fn alternating_calls_across_two_instances_land_in_order<S: Leased>(h: &Harness<S>) {
    let n = 6;
    let turns = |parity: usize| -> Vec<ScriptedTurn> {
        (0..n)
            .filter(|i| i % 2 == parity)
            .map(|i| ScriptedTurn::text(format!("reply {i}")))
            .collect()
    };
    let gate = Gate::open();
    let (a, model_a) = leased_agent(h.client().await, turns(0), &gate, config(30_000, 5_000));
    let (b, _) = leased_agent(h.client().await, turns(1), &gate, config(30_000, 5_000));
    for i in 0..n {
        let agent = if i % 2 == 0 { &a } else { &b };
        agent
            .call_with(vec![Msg::user(format!("turn {i}"))], session("alt"))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
    }
    let expected: Vec<String> = (0..n)
        .flat_map(|i| [format!("turn {i}"), format!("reply {i}")])
        .collect();
    let history = stored(h, "alt").await;
    assert_eq!(texts(&history.messages), expected);
    assert_eq!(history.version, n as u64);
    // A's second call was made on a history holding B's first turn.
    let seen: Vec<String> = model_a.requests()[1]
        .messages
        .iter()
        .map(Msg::text)
        .collect();
    assert!(seen.contains(&"reply 1".to_owned()), "{seen:?}");
    assert_eq!(texts(&a.messages(&key("alt")).await), expected);
}

/// A holder that dies mid-call (no renewal, no release, no save) keeps the session
/// only until its lease's TTL; the next call then succeeds on the last saved history.
pub async fn a_killed_holder_loses_the_session_after_the_ttl<S: Leased>(h: &Harness<S>) {
    let gate = Gate::default();
    let mut turns = vec![ScriptedTurn::text("first done")];
    turns.extend(work_then("never"));
    let (a, _) = leased_agent(h.client().await, turns, &gate, config(600, 5_000));
    a.call_with(vec![Msg::user("first")], session("kill"))
        .await
        .unwrap();
    // The replica runs the call on a runtime of its own, which dies (every task of it
    // stops at once, its lease renewals included) once the tool has started.
    let (a2, gate2) = (a.clone(), gate.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let started = gate2.started.clone();
        rt.spawn(async move {
            let r = a2.call_with(vec![Msg::user("dies")], session("kill")).await;
            panic!("the call finished: {r:?}");
        });
        rt.block_on(started.notified());
        rt.shutdown_background();
    })
    .join()
    .unwrap();
    let (b, _) = next_instance(h, "after done").await;
    let started = Instant::now();
    b.call_with(vec![Msg::user("after")], session("kill"))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let history = stored(h, "kill").await.messages;
    assert_memory_valid(&history);
    assert_eq!(
        texts(&history),
        ["first", "first done", "after", "after done"]
    );
}

/// Dropping a call's future releases its lease at once (from a spawned task, after
/// saving its repaired conversation): the next instance does not wait for the TTL.
pub async fn a_dropped_call_releases_its_lease_and_saves_repaired_memory<S: Leased>(
    h: &Harness<S>,
) {
    let gate = Gate::default();
    let (a, _) = leased_agent(
        h.client().await,
        work_then("never"),
        &gate,
        config(30_000, 5_000),
    );
    let running = spawn_call(&a, "dropped", "drop");
    gate.started.notified().await;
    running.abort();
    let _ = running.await;
    let (b, _) = next_instance(h, "next done").await;
    let started = Instant::now();
    b.call_with(vec![Msg::user("next")], session("drop"))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "not the 30 s TTL"
    );
    let history = stored(h, "drop").await.messages;
    assert_memory_valid(&history);
    assert_eq!(texts(&history)[0], "dropped");
    let result = history
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .expect("the dropped call's tool use has a result")
        .clone();
    assert!(
        result.is_error && result.text().contains("cancelled"),
        "{result:?}"
    );
    assert_eq!(texts(&history)[history.len() - 2..], ["next", "next done"]);
}

/// Leases of `S` whose renewals can be stalled (succeed without renewing: a paused
/// process) or failed (the store reports the lease gone).
pub struct Flaky<S> {
    inner: Arc<S>,
    stall: Arc<AtomicBool>,
    fail: Arc<AtomicBool>,
}

impl<S> Clone for Flaky<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            stall: Arc::clone(&self.stall),
            fail: Arc::clone(&self.fail),
        }
    }
}

impl<S> Flaky<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner: Arc::new(inner),
            stall: Arc::default(),
            fail: Arc::default(),
        }
    }
}

impl<S: Leased> SessionStore for Flaky<S> {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        self.inner.load(key).await
    }

    async fn save(&self, key: &SessionKey, messages: &[Msg], v: u64) -> Result<u64, StoreError> {
        self.inner.save(key, messages, v).await
    }
}

impl<S: Leased> SessionLeases for Flaky<S> {
    async fn acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        self.inner.acquire(key, ttl, wait).await
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                lease.key(),
                "gone (test)",
            ));
        }
        if self.stall.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        self.inner.release(lease).await
    }

    async fn save_fenced(
        &self,
        lease: &Lease,
        messages: &[Msg],
        v: u64,
    ) -> Result<u64, StoreError> {
        self.inner.save_fenced(lease, messages, v).await
    }
}

/// An instance on a [`Flaky`] client (TTL `ttl_ms`) whose call `text` on session `s`
/// is inside its `work` tool (of `gate`) when this returns.
async fn flaky_holder<S: Leased>(
    h: &Harness<S>,
    gate: &Gate,
    ttl_ms: u64,
    text: &str,
    s: &str,
) -> (Flaky<S>, JoinHandle<Result<Msg, Error>>) {
    let flaky = Flaky::new(h.client().await);
    let turns = work_then("a done");
    let (a, _) = leased_agent(flaky.clone(), turns, gate, config(ttl_ms, 5_000));
    let running = spawn_call(&a, text, s);
    gate.started.notified().await;
    (flaky, running)
}

/// A holder that stalls past its TTL while another instance takes the session over
/// cannot save when it wakes: its call fails with `LeaseLost` and only the other
/// instance's turn is stored.
pub async fn a_stalled_holder_whose_lease_was_taken_over_saves_nothing<S: Leased>(h: &Harness<S>) {
    let gate = Gate::default();
    let (flaky, running) = flaky_holder(h, &gate, 400, "stalled", "stall").await;
    flaky.stall.store(true, Ordering::SeqCst);
    let (b, _) = next_instance(h, "b done").await;
    b.call_with(vec![Msg::user("took over")], session("stall"))
        .await
        .unwrap();
    gate.release.notify_one();
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(store_kind(&err), StoreErrorKind::LeaseLost, "{err}");
    let history = stored(h, "stall").await.messages;
    assert_eq!(texts(&history), ["took over", "b done"]);
}

/// A renewal that finds the lease gone cancels the running call (its tool does not
/// finish) with `LeaseLost`; nothing is saved.
pub async fn a_lost_lease_cancels_the_call_and_saves_nothing<S: Leased>(h: &Harness<S>) {
    let gate = Gate::default();
    let (flaky, running) = flaky_holder(h, &gate, 300, "lost", "lost").await;
    flaky.fail.store(true, Ordering::SeqCst);
    let err = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the lost lease ends the call")
        .unwrap()
        .unwrap_err();
    assert_eq!(store_kind(&err), StoreErrorKind::LeaseLost, "{err}");
    assert_eq!(
        gate.finished.load(Ordering::SeqCst),
        0,
        "the tool was cancelled"
    );
    assert_eq!(stored(h, "lost").await.version, 0, "nothing saved");
}

/// A harness on a fresh `InMemorySessionStore` (always available).
pub fn in_memory_harness() -> Option<Harness<InMemorySessionStore>> {
    let store = InMemorySessionStore::new();
    Some(Harness::new(move || std::future::ready(store.clone())))
}

/// Stamps the generic tests `crate::session::<suite>::<name>(&Harness)` out as `#[tokio::test]`s
/// in modules `in_memory`, `redis` and `postgres` (without a server: skipped outside
/// CI, failed under `CI=true`).
macro_rules! per_engine_tests {
    ($suite:ident: $($name:ident),+ $(,)?) => {
        mod in_memory {
            $(crate::session::store_agents::per_engine_tests!(@one crate::session::store_agents::in_memory_harness(), $suite, $name);)+
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(crate::session::store_agents::per_engine_tests!(@one crate::session::store_redis::redis_url().map(|u| crate::session::store_redis::harness(&u)), $suite, $name);)+
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(crate::session::store_agents::per_engine_tests!(@one crate::session::store_postgres::postgres_url().map(|u| crate::session::store_postgres::harness(&u)), $suite, $name);)+
        }
    };
    (@one $harness:expr, $suite:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(h) = $harness else { return };
            crate::session::$suite::$name(&h).await;
        }
    };
}
pub(crate) use per_engine_tests;

per_engine_tests!(store_agents:
    a_second_instance_waits_then_gets_busy_without_running_anything,
    alternating_calls_across_two_instances_land_in_order,
    a_killed_holder_loses_the_session_after_the_ttl,
    a_dropped_call_releases_its_lease_and_saves_repaired_memory,
    a_stalled_holder_whose_lease_was_taken_over_saves_nothing,
    a_lost_lease_cancels_the_call_and_saves_nothing,
);

#[test]
fn a_lease_ttl_out_of_range_fails_the_build_naming_the_key() {
    for ttl in [Duration::ZERO, Duration::from_secs(25 * 3600)] {
        let err = builder(&ScriptedModel::new([]))
            .leased_session_store(
                InMemorySessionStore::new(),
                LeaseConfig {
                    ttl,
                    ..LeaseConfig::default()
                },
            )
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
        assert!(err.to_string().contains("session_leases.ttl"), "{err}");
    }
}

#[tokio::test]
async fn a_later_session_store_turns_leasing_off() {
    let store = InMemorySessionStore::new();
    let gate = Gate::default();
    let model = ScriptedModel::new(work_then("done"));
    let mut tools = Toolkit::new();
    tools.register(gate.tool()).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .leased_session_store(store.clone(), config(30_000, 0))
        .session_store(store.clone())
        .build()
        .unwrap();
    let running = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.call_with(vec![Msg::user("x")], session("off")).await })
    };
    gate.started.notified().await;
    // No lease is held on the session: another holder gets it at once.
    let lease = store
        .acquire(&key("off"), Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap();
    store.release(&lease).await.unwrap();
    gate.release.notify_one();
    running.await.unwrap().unwrap();
}
