//! Run with: cargo run --example double_text --features redis,postgres
//! Uses Redis at `REIN_REDIS_URL` and PostgreSQL at `REIN_POSTGRES_URL` when they are set
//! (`scripts/test-servers` starts both), and the in-memory store always.
//!
//! Double texting across replicas: two `Agent`s (replica A and replica B, each with its
//! own store client, as two pods would have) share sessions through one store with
//! session leases. On each of 200 sessions, A answers a first message that calls a slow
//! `pay` tool (an effect: at most once); while it runs, at a random moment, B receives a
//! second message on the same session with the policy under test:
//!
//! - `Reject`: B fails at once with `Busy`; A answers.
//! - `Enqueue`: B waits its turn and answers after A (first come, first served).
//! - `Interrupt`: A stops after its tool settles, keeping its partial turn; B answers
//!   with everything so far.
//! - `Rollback`: A stops after its tool settles and its steps are discarded, except the
//!   payment that ran (kept, flagged); B answers from the state before A's call.
//!
//! Prints one interrupted session's history, then per engine and policy: calls
//! answered, rejected, interrupted, rolled back, and the invariants checked over every
//! stored session — no tool use without a result (torn), no accepted message missing
//! (lost), no payment run twice (duplicated), and for `Enqueue` the arrival order kept.
//! Exits with status 1 when an invariant fails. Offline (a rule-based model per replica).

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use rein::model::{ModelRequest, ModelStream};
use rein::store::{PostgresSessionStore, RedisSessionStore};
use rein::*;
use serde_json::json;
use tokio::sync::Notify;

const SESSIONS: usize = 200;

/// Answers a user message by calling `pay` for it, and a tool result with a reply
/// naming the last user message (so a reply shows which message it answered).
struct Teller;

impl Model for Teller {
    fn name(&self) -> &str {
        "teller"
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
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

/// Every payment made, by the message it was for; and who waits for a payment to start.
#[derive(Default)]
struct Ledger {
    paid: Mutex<HashMap<String, u32>>,
    started: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Ledger {
    fn started(&self, what: &str) -> Arc<Notify> {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(started.entry(what.to_owned()).or_default())
    }
}

/// A small deterministic generator (the runs are reproducible).
struct Rng(AtomicU64);

impl Rng {
    fn below(&self, n: u64) -> u64 {
        let mut x = self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (x ^ (x >> 31)) % n
    }
}

fn replica<S: SessionStore + SessionLeases>(
    store: S,
    ledger: &Arc<Ledger>,
    rng: &Arc<Rng>,
) -> Result<Agent, Box<dyn Error>> {
    let (ledger, rng) = (Arc::clone(ledger), Arc::clone(rng));
    let mut tools = Toolkit::new();
    tools.register(FunctionTool::new(
        "pay",
        "Pays what the message asks for.",
        json!({"type": "object", "properties": {"for": {"type": "string"}}, "required": ["for"]}),
        move |args| {
            let (ledger, rng) = (Arc::clone(&ledger), Arc::clone(&rng));
            async move {
                let what = args["for"].as_str().unwrap_or_default().to_owned();
                *ledger
                    .paid
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(what.clone())
                    .or_default() += 1;
                ledger.started(&what).notify_one();
                tokio::time::sleep(Duration::from_millis(5 + rng.below(20))).await;
                Ok(format!("paid for {what}"))
            }
        },
    ))?;
    Ok(Agent::builder()
        .model(Teller)
        .toolkit(tools)
        .without_global_hooks()
        .leased_session_store(
            store,
            LeaseConfig {
                ttl: Duration::from_secs(10),
                wait: Duration::from_secs(20),
            },
        )
        .build()?)
}

/// What one policy's run counted.
#[derive(Default, Debug)]
struct Tally {
    answered: usize,
    rejected: usize,
    interrupted: usize,
    rolled_back: usize,
    errors: Vec<String>,
    torn: usize,
    lost: usize,
    duplicated: usize,
    out_of_order: usize,
}

async fn run_policy<S: SessionStore + SessionLeases + Clone>(
    store: &S,
    policy: DoubleText,
    tag: &str,
    show: bool,
) -> Result<Tally, Box<dyn Error>> {
    let ledger = Arc::new(Ledger::default());
    let rng = Arc::new(Rng(AtomicU64::new(42)));
    let a = replica(store.clone(), &ledger, &rng)?;
    let b = replica(store.clone(), &ledger, &rng)?;
    let calls = (0..SESSIONS).map(|i| {
        let (a, b, ledger, rng) = (a.clone(), b.clone(), Arc::clone(&ledger), Arc::clone(&rng));
        let session = format!("{tag}-{i}");
        async move {
            let first = format!("first {session}");
            let second = format!("second {session}");
            let ctx = RunContext::new().with_session_id(&session);
            let started = ledger.started(&first);
            let running = {
                let (a, first, ctx) = (a.clone(), first.clone(), ctx.clone());
                tokio::spawn(async move { a.run(vec![Msg::user(first)], ctx).await })
            };
            // B's message arrives while A's payment runs, or just after.
            let _ = tokio::time::timeout(Duration::from_secs(5), started.notified()).await;
            tokio::time::sleep(Duration::from_millis(rng.below(25))).await;
            let newer = b
                .run(
                    vec![Msg::user(second.clone())],
                    ctx.with_double_text(policy),
                )
                .await;
            let older = running.await;
            (session, first, second, older, newer)
        }
    });
    let results = join_all(calls).await;
    let mut tally = Tally::default();
    for (session, first, second, older, newer) in results {
        let older = older.map_err(|e| format!("{session}: the task failed: {e}"))?;
        let mut rolled_back = false;
        match older {
            Ok(o) if o.reason == StopReason::Interrupted => tally.interrupted += 1,
            Ok(o) if o.reason == StopReason::RolledBack => {
                tally.rolled_back += 1;
                rolled_back = true;
            }
            Ok(_) => tally.answered += 1,
            Err(e) => tally.errors.push(format!("{session} (A): {e}")),
        }
        let mut rejected = false;
        match newer {
            Ok(_) => tally.answered += 1,
            Err(e)
                if e.store_error()
                    .is_some_and(|s| s.kind() == StoreErrorKind::Busy)
                    && policy == DoubleText::Reject =>
            {
                tally.rejected += 1;
                rejected = true;
            }
            Err(e) => tally.errors.push(format!("{session} (B): {e}")),
        }
        let stored = store.load(&SessionKey::new(None, &session)).await?.messages;
        if show
            && (std::env::var("DT_DEBUG").is_ok()
                || (policy == DoubleText::Interrupt && !rolled_back && tally.interrupted == 1))
        {
            println!("  one interrupted session ({session}), as stored:");
            for (i, m) in stored.iter().enumerate() {
                println!("    {i:>2} {:<9} {}", format!("{:?}", m.role), describe(m));
            }
        }
        if !rein::agent::pending_tool_uses(&stored).is_empty() || unanswered(&stored) {
            tally.torn += 1;
        }
        let count = |text: &str| stored.iter().filter(|m| m.text() == text).count();
        let first_ok = if rolled_back {
            count(&first) == 0
        } else {
            count(&first) == 1
        };
        let second_ok = if rejected {
            count(&second) == 0
        } else {
            count(&second) == 1
        };
        if !first_ok || !second_ok {
            tally.lost += 1;
        }
        let paid = ledger.paid.lock().unwrap_or_else(|e| e.into_inner());
        if paid.get(&first).is_some_and(|n| *n > 1) || paid.get(&second).is_some_and(|n| *n > 1) {
            tally.duplicated += 1;
        }
        if policy == DoubleText::Enqueue {
            let at = |text: &str| stored.iter().position(|m| m.text() == text);
            if !matches!((at(&first), at(&second)), (Some(f), Some(s)) if f < s) {
                tally.out_of_order += 1;
            }
        }
    }
    Ok(tally)
}

/// A tool use whose id has no result anywhere after it.
fn unanswered(messages: &[Msg]) -> bool {
    messages.iter().enumerate().any(|(i, m)| {
        m.tool_uses().iter().any(|u| {
            !messages[i + 1..]
                .iter()
                .any(|r| r.tool_results().iter().any(|t| t.id == u.id))
        })
    })
}

fn describe(m: &Msg) -> String {
    let mut parts = vec![m.text()];
    parts.extend(
        m.tool_uses()
            .iter()
            .map(|u| format!("calls {}({})", u.name, u.input)),
    );
    parts.extend(
        m.tool_results()
            .iter()
            .map(|r| format!("result: {}", r.content)),
    );
    if m.metadata.contains_key(rein::agent::ROLLED_BACK_KEY) {
        parts.push("[rolled back: kept]".to_owned());
    }
    parts.retain(|p| !p.is_empty());
    parts.join(" | ")
}

async fn run_engine<S: SessionStore + SessionLeases + Clone>(
    engine: &str,
    store: S,
    failed: &mut bool,
) -> Result<(), Box<dyn Error>> {
    println!("\n== {engine}: 2 replicas x {SESSIONS} sessions, a double text on each ==");
    println!(
        "  {:<10} {:>8} {:>8} {:>11} {:>11} {:>6} {:>5} {:>5} {:>10} {:>8}",
        "policy",
        "answered",
        "rejected",
        "interrupted",
        "rolled back",
        "errors",
        "torn",
        "lost",
        "duplicated",
        "FIFO"
    );
    let run = std::process::id();
    for (policy, name) in [
        (DoubleText::Reject, "Reject"),
        (DoubleText::Enqueue, "Enqueue"),
        (DoubleText::Interrupt, "Interrupt"),
        (DoubleText::Rollback, "Rollback"),
    ] {
        let tag = format!("dt-{run}-{engine}-{name}");
        let t = run_policy(&store, policy, &tag, engine == "in-memory").await?;
        let fifo = if policy == DoubleText::Enqueue {
            format!("{} bad", t.out_of_order)
        } else {
            "-".to_owned()
        };
        println!(
            "  {:<10} {:>8} {:>8} {:>11} {:>11} {:>6} {:>5} {:>5} {:>10} {:>8}",
            name,
            t.answered,
            t.rejected,
            t.interrupted,
            t.rolled_back,
            t.errors.len(),
            t.torn,
            t.lost,
            t.duplicated,
            fifo
        );
        for e in t.errors.iter().take(3) {
            println!("    error: {e}");
        }
        if !t.errors.is_empty() || t.torn + t.lost + t.duplicated + t.out_of_order > 0 {
            *failed = true;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut failed = false;
    run_engine("in-memory", InMemorySessionStore::new(), &mut failed).await?;
    match std::env::var("REIN_REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            let store = RedisSessionStore::builder()
                .url(&url)
                .key_prefix("rein-example:double-text:")
                .connect()
                .await?;
            run_engine("redis", store, &mut failed).await?;
        }
        _ => println!("\n(REIN_REDIS_URL is not set: Redis skipped)"),
    }
    match std::env::var("REIN_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let store = PostgresSessionStore::builder()
                .url(&url)
                .table("rein_example_double_text")
                .connect()
                .await?;
            run_engine("postgres", store, &mut failed).await?;
        }
        _ => println!("\n(REIN_POSTGRES_URL is not set: PostgreSQL skipped)"),
    }
    if failed {
        eprintln!("an invariant failed (see the table)");
        std::process::exit(1);
    }
    Ok(())
}
