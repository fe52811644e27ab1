//! A session budget, and a user budget, shared by two OS processes on Redis and
//! PostgreSQL: two replica processes draining one session (or, for the user budget, each
//! its own sessions of one user) never spend more than it, and a replica process killed
//! with SIGKILL while its request is in flight leaves the request charged.
//!
//! The replicas are this test binary re-run on [`budget_worker`] (see
//! `support::worker`); each has its own store client and its own lease.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rein::*;

use crate::session::store_agents::{Leased, config};
use crate::support::worker::{kill, worker};
use crate::support::{builder, session};

/// Which budget the replicas share.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    /// A session budget; every call on session `s`.
    Session,
    /// A user budget; user `s`, each call on a session of its own.
    User,
}

/// The worker's command: `calls` calls on session `s` of `engine` under `at` (a Redis
/// key prefix or a PostgreSQL table), with a session budget of `budget` model calls;
/// answer `i` takes the `i`-th of the comma-separated `delays_ms` (the last repeats).
fn command(engine: &str, at: &str, s: &str, calls: usize, budget: u64, delays_ms: &str) -> Command {
    command_for(Scope::Session, engine, at, s, calls, budget, delays_ms)
}

/// [`command`] for a budget of `scope`.
fn command_for(
    scope: Scope,
    engine: &str,
    at: &str,
    s: &str,
    calls: usize,
    budget: u64,
    delays_ms: &str,
) -> Command {
    let mut c = worker("session::budget_processes::budget_worker");
    if scope == Scope::User {
        c.env("REIN_BUDGET_USER", "1");
    }
    c.env("REIN_BUDGET_ENGINE", engine)
        .env("REIN_BUDGET_WHERE", at)
        .env("REIN_BUDGET_SESSION", s)
        .env("REIN_BUDGET_CALLS", calls.to_string())
        .env("REIN_BUDGET_LIMIT", budget.to_string())
        .env("REIN_BUDGET_DELAYS_MS", delays_ms);
    c
}

/// A replica process: prints `REQUEST <n>` as each model request goes out (after its
/// reservation is saved), then `OUTCOME <final|budget_exhausted|…>` per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the two-process budget tests"]
async fn budget_worker() {
    let Ok(engine) = std::env::var("REIN_BUDGET_ENGINE") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let (at, s) = (var("REIN_BUDGET_WHERE"), var("REIN_BUDGET_SESSION"));
    let calls: usize = var("REIN_BUDGET_CALLS").parse().unwrap();
    let limit: u64 = var("REIN_BUDGET_LIMIT").parse().unwrap();
    let delays: Vec<u64> = var("REIN_BUDGET_DELAYS_MS")
        .split(',')
        .map(|d| d.trim().parse().unwrap())
        .collect();
    let turns = (0..calls).map(|i| {
        let ms = delays[i.min(delays.len() - 1)];
        ScriptedTurn::text(format!("answer {i}")).with_delay(Duration::from_millis(ms))
    });
    let model = Announcing(ScriptedModel::new(turns));
    let user = std::env::var("REIN_BUDGET_USER").is_ok();
    let agent = match engine.as_str() {
        #[cfg(feature = "redis")]
        "redis" => replica(
            crate::session::store_redis::harness_in(&var("REIN_REDIS_URL"), &at)
                .client()
                .await,
            model,
            limit,
            user,
        ),
        #[cfg(feature = "postgres")]
        "postgres" => replica(
            crate::session::store_postgres::harness_in(&var("REIN_POSTGRES_URL"), &at)
                .client()
                .await,
            model,
            limit,
            user,
        ),
        other => panic!("unknown engine {other}"),
    };
    for i in 0..calls {
        let ctx = if user {
            let own = format!("{s}-{}-{i}", std::process::id());
            RunContext::new().with_user_id(&s).with_session_id(own)
        } else {
            session(&s)
        };
        let outcome = match agent.run(vec![Msg::user(format!("q{i}"))], ctx).await {
            Ok(out) => match out.reason {
                StopReason::Final => "final".to_owned(),
                StopReason::BudgetExhausted => "budget_exhausted".to_owned(),
                other => format!("{other:?}"),
            },
            Err(e) => format!("error:{:?}", e.kind()),
        };
        println!("OUTCOME {outcome}");
    }
}

fn replica<S: Leased>(store: S, model: Announcing, limit: u64, user: bool) -> Agent {
    let b = builder(&ScriptedModel::new([]))
        .model(model)
        .leased_session_store(store, config(1_000, 20_000));
    let budget = Budget::new().model_calls(limit);
    let b = if user {
        b.user_budget(budget)
    } else {
        b.session_budget(budget)
    };
    b.build().unwrap()
}

/// A scripted model that prints `REQUEST <n>` when a request reaches it: with a session
/// budget, after the request's reservation was saved with the session.
struct Announcing(ScriptedModel);

impl Model for Announcing {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        println!("REQUEST {}", self.0.requests().len() + 1);
        self.0.stream(request)
    }
}

/// The `OUTCOME` and `REQUEST` lines of a worker's output.
fn lines(out: &str, tag: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag).map(|r| r.trim().to_owned()))
        .collect()
}

/// Two worker processes of [`command_for`] run at once; their output, together.
fn two_at_once(
    scope: Scope,
    engine: &str,
    at: &str,
    s: &str,
    calls: usize,
    budget: u64,
    delays_ms: &str,
) -> String {
    let spawn = || {
        command_for(scope, engine, at, s, calls, budget, delays_ms)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    format!(
        "{}{}",
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&b.stdout)
    )
}

/// Two replica processes call one session at the same time, three calls each, against a
/// session budget of four model calls: four calls answer, two stop for the budget, four
/// requests were sent in all.
fn two_processes_never_spend_more_than_the_session_budget(engine: &str, at: &str) {
    let s = format!("budget-procs-{}", std::process::id());
    let out = two_at_once(Scope::Session, engine, at, &s, 3, 4, "50");
    let outcomes = lines(&out, "OUTCOME");
    let count = |o: &str| outcomes.iter().filter(|x| *x == o).count();
    assert_eq!(outcomes.len(), 6, "{out}");
    assert_eq!((count("final"), count("budget_exhausted")), (4, 2), "{out}");
    assert_eq!(
        lines(&out, "REQUEST").len(),
        4,
        "never a fifth request: {out}"
    );
}

/// Two replica processes call at the same time for one user, twelve calls each on
/// sessions of their own, against a user budget of fifteen model calls: fifteen calls
/// answer, nine stop for the budget, fifteen requests were sent in all.
fn two_processes_never_spend_more_than_the_user_budget(engine: &str, at: &str) {
    let user = format!("budget-user-{}", std::process::id());
    let out = two_at_once(Scope::User, engine, at, &user, 12, 15, "0");
    let outcomes = lines(&out, "OUTCOME");
    let count = |o: &str| outcomes.iter().filter(|x| *x == o).count();
    assert_eq!(outcomes.len(), 24, "{out}");
    assert_eq!(
        (count("final"), count("budget_exhausted")),
        (15, 9),
        "{out}"
    );
    assert_eq!(
        lines(&out, "REQUEST").len(),
        15,
        "never a sixteenth request: {out}"
    );
}

/// A replica process is killed with SIGKILL while its first request for a user is in
/// flight; a second process calling for the same user on other sessions finds it
/// charged: of a budget of three, two calls answer and the third stops for it.
fn a_killed_process_leaves_its_charge_with_the_user(engine: &str, at: &str) {
    let user = format!("budget-user-kill-{}", std::process::id());
    let mut dying = command_for(Scope::User, engine, at, &user, 1, 3, "60000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(dying.stdout.take().unwrap()).lines();
    // The request goes out after its reservation is saved: kill it then.
    let first = reader
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("REQUEST") || l.starts_with("OUTCOME"));
    assert_eq!(first.as_deref(), Some("REQUEST 1"));
    assert!(!kill(&mut dying).success());
    let out = command_for(Scope::User, engine, at, &user, 3, 3, "0")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        lines(&out, "OUTCOME"),
        ["final", "final", "budget_exhausted"],
        "the killed request is charged to the user: {out}"
    );
    assert_eq!(lines(&out, "REQUEST").len(), 2, "{out}");
}

/// A replica process is killed with SIGKILL while its request number `dies_at` (1: the
/// session's very first, 2: its second) is in flight; a second process on the same
/// session finds that request charged. Of a budget of three model calls, the dead
/// process used `dies_at` (answered the ones before, reserved the last), so the
/// survivor's three calls answer `3 - dies_at` times and then stop for the budget.
fn a_killed_process_leaves_its_charge_with_the_session(engine: &str, at: &str, dies_at: usize) {
    let s = format!("budget-kill-{dies_at}-{}", std::process::id());
    // Every request before the dying one answers at once; the dying one never does.
    let mut delays = vec!["0"; dies_at - 1];
    delays.push("60000");
    let delays = delays.join(",");
    let mut dying = command(engine, at, &s, dies_at, 3, &delays)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(dying.stdout.take().unwrap()).lines();
    let started = Instant::now();
    let mut seen = Vec::new();
    // A request goes out after its reservation is saved: kill it then.
    let last = format!("REQUEST {dies_at}");
    while let Some(Ok(line)) = reader.next() {
        if line.starts_with("REQUEST") || line.starts_with("OUTCOME") {
            seen.push(line.clone());
        }
        if line == last {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{seen:?}");
    }
    let mut expected: Vec<String> = (1..dies_at)
        .flat_map(|n| [format!("REQUEST {n}"), "OUTCOME final".to_owned()])
        .collect();
    expected.push(last);
    assert_eq!(seen, expected);
    assert!(!kill(&mut dying).success());
    // The survivor waits out the dead process's lease (1 s), then answers what is left
    // of the budget and stops for it after.
    let out = command(engine, at, &s, 3, 3, "0").output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let left = 3 - dies_at;
    let mut outcomes = vec!["final"; left];
    outcomes.extend(vec!["budget_exhausted"; 3 - left]);
    assert_eq!(
        lines(&out, "OUTCOME"),
        outcomes,
        "the killed request is charged: {out}"
    );
    assert_eq!(lines(&out, "REQUEST").len(), left, "{out}");
}

/// Every test of this file on one engine: `$at` gives the server's URL and a fresh
/// place on it (or skips, visibly; under `CI=true` it fails).
macro_rules! on_engine {
    ($engine:literal, $at:expr) => {
        use super::*;

        fn at() -> Option<(String, String)> {
            $at
        }

        #[test]
        fn two_processes_draining_one_session_budget_never_spend_more_than_it() {
            let Some((_, at)) = at() else { return };
            two_processes_never_spend_more_than_the_session_budget($engine, &at);
        }

        #[test]
        fn a_process_killed_mid_request_leaves_its_charge_with_the_session() {
            let Some((_, at)) = at() else { return };
            a_killed_process_leaves_its_charge_with_the_session($engine, &at, 2);
        }

        #[test]
        fn a_process_killed_during_a_new_sessions_first_request_leaves_it_charged() {
            let Some((_, at)) = at() else { return };
            a_killed_process_leaves_its_charge_with_the_session($engine, &at, 1);
        }

        #[test]
        fn two_processes_calling_for_one_user_never_spend_more_than_its_budget() {
            let Some((_, at)) = at() else { return };
            two_processes_never_spend_more_than_the_user_budget($engine, &at);
        }

        #[test]
        fn a_process_killed_mid_request_leaves_its_charge_with_the_user() {
            let Some((_, at)) = at() else { return };
            a_killed_process_leaves_its_charge_with_the_user($engine, &at);
        }
    };
}

#[cfg(feature = "redis")]
mod redis {
    on_engine!(
        "redis",
        crate::session::store_redis::redis_url()
            .map(|u| (u, crate::session::store_redis::fresh_prefix()))
    );
}

#[cfg(feature = "postgres")]
mod postgres {
    on_engine!(
        "postgres",
        crate::session::store_postgres::postgres_url()
            .map(|u| (u, crate::session::store_postgres::fresh_table()))
    );
}
