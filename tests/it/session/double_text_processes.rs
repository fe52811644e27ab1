//! Double texting between two OS processes (the test binary re-run as workers) on Redis
//! and PostgreSQL, with SIGKILL of either replica in between: the running replica
//! answers a first message with a slow payment; the other sends a second message with
//! the policy under test; one of them may be killed. Whatever happens, the payment ran
//! at most once, the stored session is valid, and the newer message is either answered
//! or refused with a reason the caller is told.

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rein::*;
use serde_json::json;

use crate::session::store_agents::{Leased, config};
use crate::session::store_contract::Harness;
use crate::support::worker::worker;
use crate::support::{assert_memory_valid, key};

/// Answers a user message by paying for it, and a tool result with a reply.
struct Payer;

impl Model for Payer {
    fn name(&self) -> &str {
        "payer"
    }

    fn stream(&self, request: model::ModelRequest) -> model::ModelStream {
        let messages = request.messages.to_vec();
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User && !m.text().is_empty())
            .map(Msg::text)
            .unwrap_or_default();
        let turn = match messages.last() {
            Some(m) if m.role == Role::User => {
                ScriptedTurn::tool_call("pay", json!({ "for": last_user }))
            }
            _ => ScriptedTurn::text(format!("answered: {last_user}")),
        };
        ScriptedModel::new([turn]).stream(request)
    }
}

fn policy_named(name: &str) -> DoubleText {
    match name {
        "interrupt" => DoubleText::Interrupt,
        "rollback" => DoubleText::Rollback,
        "reject" => DoubleText::Reject,
        _ => DoubleText::Enqueue,
    }
}

/// One replica, when run as a worker (`REIN_DT_ROLE=running|newer`): the running one
/// sends "first" (its payment prints `PAID first` and takes 1.5 s), the newer one
/// "second" with `REIN_DT_POLICY`; each prints `RESULT <role> <stop reason | error kind>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the double-text process tests"]
async fn double_text_worker() {
    let Ok(role) = std::env::var("REIN_DT_ROLE") else {
        return;
    };
    let ns = std::env::var("REIN_DT_NS").unwrap();
    match std::env::var("REIN_DT_ENGINE").unwrap().as_str() {
        #[cfg(feature = "redis")]
        "redis" => {
            let url = std::env::var("REIN_REDIS_URL").unwrap();
            replica(&role, crate::session::store_redis::harness_in(&url, &ns)).await;
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let url = std::env::var("REIN_POSTGRES_URL").unwrap();
            replica(&role, crate::session::store_postgres::harness_in(&url, &ns)).await;
        }
        other => panic!("unknown engine {other}"),
    }
}

async fn replica<S: Leased>(role: &str, h: Harness<S>) {
    let pay = FunctionTool::new(
        "pay",
        "pays",
        json!({"type": "object", "properties": {"for": {"type": "string"}}, "required": ["for"]}),
        |args| async move {
            let what = args["for"].as_str().unwrap_or_default().to_owned();
            println!("PAID {what}");
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            Ok(format!("paid for {what}"))
        },
    );
    let mut tools = Toolkit::new();
    tools.register(pay).unwrap();
    let agent = Agent::builder()
        .model(Payer)
        .without_global_hooks()
        .toolkit(tools)
        // A killed holder's lease expires after a second.
        .leased_session_store(h.client().await, config(1_000, 15_000))
        .build()
        .unwrap();
    let policy = policy_named(&std::env::var("REIN_DT_POLICY").unwrap_or_default());
    let (text, ctx) = match role {
        "running" => ("first", RunContext::new().with_session_id("dt")),
        _ => (
            "second",
            RunContext::new()
                .with_session_id("dt")
                .with_double_text(policy),
        ),
    };
    let outcome = match agent.run(vec![Msg::user(text)], ctx).await {
        Ok(o) => format!("{:?}", o.reason),
        Err(e) => match e.store_error() {
            Some(s) => format!("{:?}", s.kind()),
            None => format!("error:{e}"),
        },
    };
    println!("RESULT {role} {outcome}");
}

/// A worker of `role` and the channel its stdout lines arrive on.
fn spawn(role: &str, engine: &str, ns: &str, policy: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = worker("session::double_text_processes::double_text_worker")
        .env("REIN_DT_ROLE", role)
        .env("REIN_DT_ENGINE", engine)
        .env("REIN_DT_NS", ns)
        .env("REIN_DT_POLICY", policy)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Lines of `rx` until one starts with `prefix` (within 30 s); all lines seen.
fn until(rx: &mpsc::Receiver<String>, prefix: &str, seen: &mut Vec<String>) -> Option<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// Who is SIGKILLed in a round.
#[derive(Clone, Copy, Debug)]
enum Kill {
    Nobody,
    /// The running replica, in the middle of its payment.
    Running,
    /// The newer replica, while it waits for the session.
    Newer,
}

async fn round<S: Leased>(engine: &str, ns: &str, h: &Harness<S>, policy: &str, kill: Kill) {
    let what = format!("{engine} {policy} kill {kill:?}");
    let (mut running, running_rx) = spawn("running", engine, ns, policy);
    let mut seen = Vec::new();
    until(&running_rx, "PAID first", &mut seen)
        .unwrap_or_else(|| panic!("{what}: the running replica never paid: {seen:?}"));
    let (mut newer, newer_rx) = spawn("newer", engine, ns, policy);
    tokio::time::sleep(Duration::from_millis(150)).await;
    match kill {
        Kill::Running => crate::support::worker::kill(&mut running),
        Kill::Newer => crate::support::worker::kill(&mut newer),
        Kill::Nobody => running.wait().unwrap(),
    };
    let mut newer_seen = Vec::new();
    let newer_result = match kill {
        Kill::Newer => None,
        _ => until(&newer_rx, "RESULT newer", &mut newer_seen),
    };
    let running_result = match kill {
        Kill::Running => None,
        _ => until(&running_rx, "RESULT running", &mut seen),
    };
    let _ = running.wait();
    let _ = newer.wait();
    let stored = h.client().await.load(&key("dt")).await.unwrap().messages;
    let texts: Vec<String> = stored.iter().map(Msg::text).collect();
    let paid_first = seen.iter().filter(|l| *l == "PAID first").count();
    assert_eq!(
        paid_first, 1,
        "{what}: the first payment ran once: {seen:?}"
    );
    let paid_second = newer_seen.iter().filter(|l| *l == "PAID second").count();
    assert!(paid_second <= 1, "{what}: {newer_seen:?}");
    match kill {
        Kill::Newer => {
            // The survivor answered; the killed newer call left nothing behind.
            let r = running_result.unwrap_or_else(|| panic!("{what}: {seen:?}"));
            assert!(!texts.iter().any(|t| t == "second"), "{what}: {texts:?}");
            assert!(
                r.ends_with("Final") || r.ends_with("Interrupted") || r.ends_with("RolledBack"),
                "{what}: {r}"
            );
            assert_memory_valid(&stored);
        }
        Kill::Running => {
            // The newer call got the session after the dead holder's TTL: its payment
            // was claimed and never recorded, so the newer call stops for a human
            // instead of paying again (its message is not taken, and it says so).
            let r = newer_result.unwrap_or_else(|| panic!("{what}: {newer_seen:?}"));
            assert!(r.ends_with("OutcomeUnknown"), "{what}: {r}");
            assert!(!texts.iter().any(|t| t == "second"), "{what}: {texts:?}");
        }
        Kill::Nobody => {
            let r = running_result.unwrap_or_else(|| panic!("{what}: {seen:?}"));
            let n = newer_result.unwrap_or_else(|| panic!("{what}: {newer_seen:?}"));
            assert_memory_valid(&stored);
            let expected = match policy {
                "interrupt" => "Interrupted",
                "rollback" => "RolledBack",
                _ => "Final",
            };
            assert!(r.ends_with(expected), "{what}: {r}");
            assert!(n.ends_with("Final"), "{what}: {n}");
            assert_eq!(
                texts.last().map(String::as_str),
                Some("answered: second"),
                "{what}"
            );
            let firsts = texts.iter().filter(|t| *t == "first").count();
            assert_eq!(
                firsts,
                usize::from(policy != "rollback"),
                "{what}: {texts:?}"
            );
        }
    }
}

async fn every_policy_and_kill<S: Leased>(engine: &str, fresh: impl Fn() -> (String, Harness<S>)) {
    for policy in ["enqueue", "interrupt", "rollback"] {
        for kill in [Kill::Nobody, Kill::Running, Kill::Newer] {
            let (ns, h) = fresh();
            round(engine, &ns, &h, policy, kill).await;
        }
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_texts_between_two_processes_keep_every_guarantee_when_either_is_killed_on_redis() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    every_policy_and_kill("redis", || {
        let ns = crate::session::store_redis::fresh_prefix();
        let h = crate::session::store_redis::harness_in(&url, &ns);
        (ns, h)
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_texts_between_two_processes_keep_every_guarantee_when_either_is_killed_on_postgres()
{
    let Some(url) = crate::session::store_postgres::postgres_url() else {
        return;
    };
    every_policy_and_kill("postgres", || {
        let ns = crate::session::store_postgres::fresh_table();
        let h = crate::session::store_postgres::harness_in(&url, &ns);
        (ns, h)
    })
    .await;
}
