//! Crash-point injection: a replica process resuming an approved refund is SIGKILLed at
//! every point between its store operations and its tools (lease, load, claim, tool,
//! settle, save, release); another process then resumes the same session with the same
//! decision, as a second replica would. Over every kill, on the file store, Redis and
//! PostgreSQL: the at-most-once `refund` ran at most once per call (exactly once after a
//! human resolved an unknown outcome), the idempotent `credit` re-ran only with the
//! same key, every stored history loads and is valid, and every call whose outcome was
//! unknown was surfaced as such. Then the same at random moments under load: rounds of
//! concurrent replica processes, each SIGKILLed after a random delay
//! (`REIN_EFFECT_RANDOM_ROUNDS`, default 3).
//!
//! The replicas are this test binary run as a worker (`effect_worker`, ignored), like
//! `tests/it/session/replicas.rs`. Kills per engine: `REIN_EFFECT_KILLS` (default: each point
//! once; the figure is 200). Print the counts with `--nocapture`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rein::hooks::pending_approvals_in;
use rein::*;
use serde_json::json;

use crate::session::exactly_once::stop_for_human;
use crate::session::store_agents::Leased;
use crate::support::{assert_memory_valid, builder, key, session};

/// Counts the points a worker passes; kills the process (SIGKILL, no destructor, no
/// flush) at point `REIN_EFFECT_KILL_AT` (1-based; 0 never).
static POINTS: AtomicUsize = AtomicUsize::new(0);

fn point(what: &str) {
    let n = POINTS.fetch_add(1, Ordering::SeqCst) + 1;
    let at: usize = std::env::var("REIN_EFFECT_KILL_AT").map_or(0, |v| v.parse().unwrap());
    if n == at {
        println!("KILLED {n} {what}");
        let _ = std::io::stdout().flush();
        crate::support::worker::kill_self();
    }
}

/// A slow tool (`REIN_EFFECT_SLOW_MS`), so random kills land inside the tool too.
async fn slow() {
    if let Some(ms) = std::env::var("REIN_EFFECT_SLOW_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// The outside world the tools change: one line per effect, appended and synced.
fn effect(log: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    // One write call per line: replicas append to this file at once (O_APPEND keeps a
    // single write whole; `writeln!` would write the pieces separately and interleave).
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    f.sync_all().unwrap();
}

fn tools(log: &str) -> Toolkit {
    let (l1, l2) = (log.to_owned(), log.to_owned());
    let refund = FunctionTool::with_context(
        "refund",
        "Refunds an amount.",
        json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
        move |_args, ctx| {
            let log = l1.clone();
            async move {
                point("refund:start");
                slow().await;
                effect(
                    &log,
                    &format!("REFUND {} {}", ctx.tool_use_id(), ctx.idempotency_key()),
                );
                slow().await;
                point("refund:end");
                Ok("refund 5000 paid".to_owned())
            }
        },
    );
    let credit = FunctionTool::with_context(
        "credit",
        "Credits loyalty points (deduplicated by the idempotency key).",
        json!({"type": "object", "properties": {"points": {"type": "integer"}}}),
        move |_args, ctx| {
            let log = l2.clone();
            async move {
                point("credit:start");
                effect(
                    &log,
                    &format!("CREDIT {} {}", ctx.tool_use_id(), ctx.idempotency_key()),
                );
                point("credit:end");
                Ok("10 points credited".to_owned())
            }
        },
    )
    .idempotent();
    let mut t = Toolkit::new();
    t.register(refund).unwrap();
    t.register(credit).unwrap();
    t
}

/// A store that passes every operation through, marking a point before and after each.
#[derive(Clone)]
struct Killing<S>(S);

impl<S: SessionStore> SessionStore for Killing<S> {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        point("load:start");
        let r = self.0.load(key).await;
        point("load:end");
        r
    }
    async fn save(&self, key: &SessionKey, m: &[Msg], v: u64) -> Result<u64, StoreError> {
        point("save:start");
        let r = self.0.save(key, m, v).await;
        point("save:end");
        r
    }
}

impl<S: Leased> SessionLeases for Killing<S> {
    async fn acquire(
        &self,
        k: &SessionKey,
        ttl: Duration,
        w: Duration,
    ) -> Result<Lease, StoreError> {
        point("acquire:start");
        let r = self.0.acquire(k, ttl, w).await;
        point("acquire:end");
        r
    }
    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        self.0.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        point("release:start");
        let r = self.0.release(lease).await;
        point("release:end");
        r
    }
    async fn save_fenced(&self, lease: &Lease, m: &[Msg], v: u64) -> Result<u64, StoreError> {
        point("save:start");
        let r = self.0.save_fenced(lease, m, v).await;
        point("save:end");
        r
    }
}

const TTL_MS: u64 = 250;

fn agent_on<S: Leased + Clone>(
    store: S,
    leased: bool,
    log: &str,
    turns: Vec<ScriptedTurn>,
) -> Agent {
    let model = ScriptedModel::new(turns);
    let b = builder(&model).toolkit(tools(log)).hook(stop_for_human());
    let b = if leased {
        b.leased_session_store(
            store,
            LeaseConfig {
                ttl: Duration::from_millis(TTL_MS),
                wait: Duration::from_secs(10),
            },
        )
    } else {
        b.session_store(store)
    };
    b.build().unwrap()
}

/// The engine's store, as a worker opens it (`REIN_EFFECT_ENGINE`, `REIN_EFFECT_WHERE`).
async fn open(engine: &str, at: &str) -> Box<dyn FnOnce(&str, Vec<ScriptedTurn>, bool) -> Agent> {
    match engine {
        "file" => {
            let store = FileSessionStore::open(at).unwrap();
            Box::new(move |log, turns, kill| {
                let model = ScriptedModel::new(turns);
                let b = builder(&model).toolkit(tools(log)).hook(stop_for_human());
                if kill {
                    b.session_store(Killing(store)).build().unwrap()
                } else {
                    b.session_store(store).build().unwrap()
                }
            })
        }
        #[cfg(feature = "redis")]
        "redis" => {
            let url = std::env::var("REIN_REDIS_URL").unwrap();
            let store = crate::session::store_redis::harness_in(&url, at)
                .client()
                .await;
            Box::new(move |log, turns, kill| {
                if kill {
                    agent_on(Killing(store), true, log, turns)
                } else {
                    agent_on(store, true, log, turns)
                }
            })
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let url = std::env::var("REIN_POSTGRES_URL").unwrap();
            let store = crate::session::store_postgres::harness_in(&url, at)
                .client()
                .await;
            Box::new(move |log, turns, kill| {
                if kill {
                    agent_on(Killing(store), true, log, turns)
                } else {
                    agent_on(store, true, log, turns)
                }
            })
        }
        other => panic!("unknown engine {other}"),
    }
}

/// A worker (`REIN_EFFECT_MODE`):
/// - `ask`: the customer asks; the refund stops for a human (nothing is killed);
/// - `approve`: a replica resumes with the human's approval of the stored refund call
///   (killed at `REIN_EFFECT_KILL_AT`);
/// - `record` / `retry`: a human resolves the refund's unknown outcome.
///
/// Prints `OUTCOME <final|outcome_unknown|reasoning_stopped|conflict|error:…>` and
/// `POINTS <n>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the crash-point injection tests"]
async fn effect_worker() {
    let Ok(mode) = std::env::var("REIN_EFFECT_MODE") else {
        return;
    };
    let engine = std::env::var("REIN_EFFECT_ENGINE").unwrap();
    let at = std::env::var("REIN_EFFECT_WHERE").unwrap();
    let log = std::env::var("REIN_EFFECT_LOG").unwrap();
    let s = std::env::var("REIN_EFFECT_SESSION").unwrap();
    let make = open(&engine, &at).await;
    let turns = match mode.as_str() {
        "ask" => vec![ScriptedTurn::tool_calls(vec![
            ("refund", json!({"amount": 5000})),
            ("credit", json!({"points": 10})),
        ])],
        _ => vec![ScriptedTurn::text("done")],
    };
    let agent = make(&log, turns, mode == "approve");
    let result = match mode.as_str() {
        "ask" => {
            agent
                .run(vec![Msg::user("refund my order")], session(&s))
                .await
        }
        "approve" => {
            // The human approved the refund as it was listed when the session stopped;
            // every replica resumes with that same decision (a duplicate resume finds
            // the call claimed or answered).
            let history = agent.try_messages(&key(&s)).await.unwrap();
            let refund = history
                .iter()
                .flat_map(|m| m.tool_uses())
                .find(|u| u.name == "refund")
                .cloned()
                .unwrap();
            if std::env::var("REIN_EFFECT_KILL_AT").as_deref() != Ok("0") {
                // The first replica to resume reads what waits from the store alone.
                assert_eq!(
                    pending_approvals_in(&history),
                    std::slice::from_ref(&refund)
                );
            }
            let decisions = agent::ApprovalDecisions::new().approve_call(&refund);
            agent.resume(&key(&s), decisions).await
        }
        "record" | "retry" => {
            let history = agent.try_messages(&key(&s)).await.unwrap();
            let id = history
                .iter()
                .flat_map(|m| m.tool_uses())
                .find(|u| u.name == "refund")
                .unwrap()
                .id
                .clone();
            let d = agent::ApprovalDecisions::new();
            let d = if mode == "record" {
                d.record_outcome(&id, "refund 5000 was paid (checked by a human)")
            } else {
                d.retry(&id)
            };
            agent.resume(&key(&s), d).await
        }
        other => panic!("unknown mode {other}"),
    };
    let outcome = match result {
        Ok(o) => match o.reason {
            StopReason::Final => "final".to_owned(),
            StopReason::OutcomeUnknown => "outcome_unknown".to_owned(),
            StopReason::ReasoningStopped => "reasoning_stopped".to_owned(),
            other => format!("{other:?}"),
        },
        Err(e) => match e.store_error().map(StoreError::kind) {
            Some(StoreErrorKind::Conflict) => "conflict".to_owned(),
            _ => format!("error:{e}"),
        },
    };
    println!("OUTCOME {outcome}");
    println!("POINTS {}", POINTS.load(Ordering::SeqCst));
}

/// The command of a worker process.
fn worker_command(
    engine: &str,
    at: &str,
    log: &str,
    s: &str,
    mode: &str,
    kill_at: usize,
) -> std::process::Command {
    let mut c = crate::support::worker::worker("session::exactly_once_crash::effect_worker");
    c.env("REIN_EFFECT_MODE", mode)
        .env("REIN_EFFECT_ENGINE", engine)
        .env("REIN_EFFECT_WHERE", at)
        .env("REIN_EFFECT_LOG", log)
        .env("REIN_EFFECT_SESSION", s)
        .env("REIN_EFFECT_KILL_AT", kill_at.to_string());
    c
}

/// Runs a worker; returns its stdout (the process may have been killed).
fn worker(engine: &str, at: &str, log: &str, s: &str, mode: &str, kill_at: usize) -> String {
    let out = worker_command(engine, at, log, s, mode, kill_at)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let killed = stdout.contains("KILLED ");
    assert!(
        killed || out.status.success(),
        "worker {mode} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The value after `tag` on the worker's output (libtest may print its test name
/// before the first line).
fn field(stdout: &str, tag: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let at = l.find(tag)?;
        l[at + tag.len()..]
            .split_whitespace()
            .next()
            .map(str::to_owned)
    })
}

fn outcome(stdout: &str) -> Option<String> {
    field(stdout, "OUTCOME ")
}

#[derive(Debug, Default)]
struct Counts {
    kills: usize,
    ran_before_kill: usize,
    replayed_or_done: usize,
    unknown_surfaced: usize,
    resolved_recorded: usize,
    resolved_retried: usize,
    conflicts: usize,
}

/// The whole experiment on one engine; `store` is the parent's own client, for its checks.
async fn run_engine<S: SessionStore>(engine: &str, at: &str, store: S) {
    let dir = crate::support::TempDir::new("effects");
    let log = dir.path().join("effects.log");
    let log = log.to_str().unwrap().to_owned();
    // How many points one resume passes through, from a dry run.
    worker(engine, at, &log, "dry", "ask", 0);
    let dry = worker(engine, at, &log, "dry", "approve", 0);
    assert_eq!(outcome(&dry).as_deref(), Some("final"), "{dry}");
    let points: usize = field(&dry, "POINTS ").unwrap().parse().unwrap();
    assert!(
        points >= 8,
        "a resume passes the lease, load, claim, tools, settle and save: {dry}"
    );
    let kills: usize = std::env::var("REIN_EFFECT_KILLS").map_or(points, |v| v.parse().unwrap());
    let mut c = Counts::default();
    for n in 0..kills {
        let k = 1 + n % points;
        let s = format!("k{n}");
        worker(engine, at, &log, &s, "ask", 0);
        let first = worker(engine, at, &log, &s, "approve", k);
        assert!(
            first.contains("KILLED "),
            "point {k} of {points} reached: {first}"
        );
        c.kills += 1;
        let effects = |what: &str| -> Vec<String> {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with(what))
                .filter(|l| {
                    // Lines of this session's calls only: their key names the session.
                    let lk = rein_key_session(l);
                    lk == session_digest(&s)
                })
                .map(str::to_owned)
                .collect()
        };
        if !effects("REFUND").is_empty() {
            c.ran_before_kill += 1;
        }
        // Another replica resumes with the same approval.
        let second = worker(engine, at, &log, &s, "approve", 0);
        match outcome(&second).as_deref() {
            Some("final") => c.replayed_or_done += 1,
            Some("conflict") => c.conflicts += 1,
            Some("outcome_unknown") => {
                c.unknown_surfaced += 1;
                // A human looks at the refund service (the log) and resolves.
                let mode = if effects("REFUND").is_empty() {
                    c.resolved_retried += 1;
                    "retry"
                } else {
                    c.resolved_recorded += 1;
                    "record"
                };
                let third = worker(engine, at, &log, &s, mode, 0);
                assert_eq!(outcome(&third).as_deref(), Some("final"), "{third}");
            }
            other => panic!("point {k}: the second replica gave {other:?}: {second}"),
        }
        let refunds = effects("REFUND");
        assert_eq!(
            refunds.len(),
            1,
            "point {k}: the refund ran exactly once: {refunds:?}"
        );
        let credits = effects("CREDIT");
        assert!(!credits.is_empty(), "point {k}: the credit ran");
        let keys: std::collections::HashSet<&str> = credits
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(
            keys.len(),
            1,
            "point {k}: the credit re-ran only with its key: {credits:?}"
        );
        let stored = store.load(&key(&s)).await.unwrap();
        assert_memory_valid(&stored.messages);
        assert_eq!(stored.messages.last().unwrap().text(), "done", "point {k}");
    }
    eprintln!(
        "{engine}: {points} points per resume, {kills} SIGKILLs; refund ran before the kill in \
         {}, the second replica finished (replayed or ran it) in {}, conflict in {}, outcome \
         unknown surfaced in {} (resolved: {} recorded, {} retried); refunds per call: exactly 1 \
         in every round; credit keys per call: 1",
        c.ran_before_kill,
        c.replayed_or_done,
        c.conflicts,
        c.unknown_surfaced,
        c.resolved_recorded,
        c.resolved_retried
    );
    assert_eq!(c.kills, kills);
}

/// Starts a worker (with a slow tool); the caller kills it.
fn spawn_worker(engine: &str, at: &str, log: &str, s: &str, mode: &str) -> std::process::Child {
    worker_command(engine, at, log, s, mode, 0)
        .env("REIN_EFFECT_SLOW_MS", "40")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Random moments under load: rounds of `SESSIONS` approved refunds resumed by as many
/// replica processes at once, each SIGKILLed after a random delay (or finishing first);
/// then another replica resumes each session and a human resolves what is unknown. The
/// refund of every session ran exactly once.
async fn random_kills_under_load<S: SessionStore>(engine: &str, at: &str, store: S) {
    const SESSIONS: usize = 6;
    let dir = crate::support::TempDir::new("effects-random");
    let log = dir.path().join("effects.log").to_str().unwrap().to_owned();
    let rounds: usize =
        std::env::var("REIN_EFFECT_RANDOM_ROUNDS").map_or(3, |v| v.parse().unwrap());
    let mut rng = crate::support::rng::XorShift::new(0x5eed_0000 + rounds as u64);
    // How long one slow resume takes on this machine now: kills are spread over it.
    worker(engine, at, &log, "r-dry", "ask", 0);
    let t = std::time::Instant::now();
    spawn_worker(engine, at, &log, "r-dry", "approve")
        .wait()
        .unwrap();
    let span = (t.elapsed().as_millis() as u64 * 5 / 4).max(50);
    let (mut kills, mut unknown) = (0, 0);
    for round in 0..rounds {
        let names: Vec<String> = (0..SESSIONS).map(|i| format!("r{round}-{i}")).collect();
        for s in &names {
            worker(engine, at, &log, s, "ask", 0);
        }
        let mut children: Vec<_> = names
            .iter()
            .map(|s| {
                (
                    spawn_worker(engine, at, &log, s, "approve"),
                    rng.below(span),
                )
            })
            .collect();
        let started = std::time::Instant::now();
        for (child, after_ms) in &mut children {
            let wait = Duration::from_millis(*after_ms).saturating_sub(started.elapsed());
            std::thread::sleep(wait);
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
                kills += 1;
            }
            child.wait().unwrap();
        }
        for s in &names {
            let before = store
                .load(&key(s))
                .await
                .map(|st| format!("{:?}", st.messages));
            let second = worker(engine, at, &log, s, "approve", 0);
            if outcome(&second).as_deref() == Some("outcome_unknown") {
                unknown += 1;
                let paid = std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.starts_with("REFUND") && rein_key_session(l) == session_digest(s));
                let third = worker(
                    engine,
                    at,
                    &log,
                    s,
                    if paid { "record" } else { "retry" },
                    0,
                );
                assert_eq!(outcome(&third).as_deref(), Some("final"), "{s}: {third}");
            }
            let refunds = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("REFUND") && rein_key_session(l) == session_digest(s))
                .count();
            assert_eq!(
                refunds,
                1,
                "{s}: the refund ran exactly once; second replica: {:?}; stored before it: {before:?}",
                outcome(&second)
            );
            let stored = store.load(&key(s)).await.unwrap();
            assert_memory_valid(&stored.messages);
            assert_eq!(stored.messages.last().unwrap().text(), "done", "{s}");
        }
    }
    eprintln!(
        "{engine}: {rounds} rounds of {SESSIONS} concurrent replica processes, {kills} SIGKILLed \
         at random moments, {unknown} outcomes unknown (resolved by a human); every refund ran \
         exactly once"
    );
}

/// The digest part of an idempotency key in an effect line (`… rein-<digest>-<id>`).
fn rein_key_session(line: &str) -> String {
    let k = line.rsplit(' ').next().unwrap_or("");
    k.split('-').nth(1).unwrap_or("").to_owned()
}

/// The session digest a key of session `s` (no user) carries: read from a key the
/// runtime derives the same way for any call id.
fn session_digest(s: &str) -> String {
    // The key format is documented (`rein-<16 hex of the session>-<call id>`); the test
    // computes the digest with the same FNV-1a the documentation names.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"-\0".iter().chain(s.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_refund_runs_exactly_once_whatever_point_a_replica_dies_at_on_the_file_store() {
    let dir = crate::support::TempDir::new("effect-file");
    let at = dir.path().to_str().unwrap().to_owned();
    run_engine("file", &at, FileSessionStore::open(&at).unwrap()).await;
    random_kills_under_load("file", &at, FileSessionStore::open(&at).unwrap()).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_refund_runs_exactly_once_whatever_point_a_replica_dies_at_on_redis() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    let ns = crate::session::store_redis::fresh_prefix();
    let store = crate::session::store_redis::harness_in(&url, &ns)
        .client()
        .await;
    run_engine("redis", &ns, store.clone()).await;
    random_kills_under_load("redis", &ns, store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_refund_runs_exactly_once_whatever_point_a_replica_dies_at_on_postgres() {
    let Some(url) = crate::session::store_postgres::postgres_url() else {
        return;
    };
    let table = crate::session::store_postgres::fresh_table();
    let store = crate::session::store_postgres::harness_in(&url, &table)
        .client()
        .await;
    run_engine("postgres", &table, store.clone()).await;
    random_kills_under_load("postgres", &table, store).await;
}
