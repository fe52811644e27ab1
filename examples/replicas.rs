//! Run with: cargo run --example replicas --features redis
//! Needs Redis at `REIN_REDIS_URL` (default redis://127.0.0.1:6379); if none runs: `apt-get install -y redis-server && redis-server --daemonize yes`.
//!
//! Two replicas of one service — two `Agent`s, each with its own `RedisSessionStore`
//! client, as two pods behind a load balancer would have — share one conversation
//! through Redis, with session leases (`AgentBuilder::leased_session_store`):
//!
//! 1. calls on one session alternate between replica A and replica B: each call takes
//!    the session's lease, loads what the other replica saved, and saves under the lease;
//! 2. on A the model asks for a refund: `ApprovalHook` in stop-for-human mode stops the
//!    call before the tool runs, and the pending call is saved with the session;
//! 3. a human approves it on B, which finds the pending call in the stored session, and
//!    B resumes: the refund runs once;
//! 4. a late duplicate of that approval reaching A (a retried webhook) fails with
//!    `Conflict` before anything runs: the refund still ran once;
//! 5. a replica is killed mid-refund (its runtime dies right after the payment, before
//!    the result is recorded): the other replica resumes the same approval after the
//!    lease's TTL, finds the refund claimed in the effect journal and stops with
//!    `StopReason::OutcomeUnknown` instead of paying again; a human checks the payment
//!    ledger and records the outcome; the refund was paid once.
//!
//! Prints each step, the refund counter of each replica and the stored history.
//! Offline apart from Redis (a ScriptedModel per replica). Its keys live under
//! `rein-example:replicas:`; the session is deleted before and after the run (the
//! lease's fence counter stays, as fences never repeat). Exits with status 2 and says
//! how to start Redis when none can be reached.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rein::hooks::{
    ApprovalConfig, ApprovalDecisions, ApprovalHook, ApprovalMode, pending_approvals,
    pending_approvals_in,
};
use rein::store::{RedisSessionStore, SessionAdmin};
use rein::*;
use serde_json::json;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
const SESSION: &str = "order-42";

/// One replica: its agent and how many refunds its `refund` tool paid.
struct Replica {
    name: &'static str,
    /// The session its `say` talks on.
    session: &'static str,
    agent: Agent,
    refunds: Arc<AtomicUsize>,
}

impl Replica {
    /// A replica on its own store client, with a scripted model, an order lookup tool and
    /// a `refund` tool every call of which waits for a human.
    fn new(
        name: &'static str,
        store: RedisSessionStore,
        script: Vec<ScriptedTurn>,
    ) -> Result<Self, Box<dyn Error>> {
        Self::with(name, SESSION, store, script, Duration::from_secs(30), false)
    }

    /// A replica with lease TTL `ttl`; with `dies`, its refund tool pays and then never
    /// returns (the process is killed right after the payment).
    fn with(
        name: &'static str,
        session: &'static str,
        store: RedisSessionStore,
        script: Vec<ScriptedTurn>,
        ttl: Duration,
        dies: bool,
    ) -> Result<Self, Box<dyn Error>> {
        let refunds = Arc::new(AtomicUsize::new(0));
        let paid = Arc::clone(&refunds);
        let mut tools = Toolkit::new();
        tools.register(FunctionTool::new(
            "lookup_order",
            "Looks an order up by number.",
            json!({"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}),
            |args| async move {
                Ok(format!(
                    "order {}: delivered 2026-11-28, 39.90 EUR",
                    args["order"]
                ))
            },
        ))?;
        tools.register(FunctionTool::new(
            "refund",
            "Refunds an order.",
            json!({
                "type": "object",
                "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
                "required": ["order", "amount"]
            }),
            move |args| {
                let paid = Arc::clone(&paid);
                async move {
                    paid.fetch_add(1, Ordering::SeqCst);
                    println!("    [{name}] refund tool runs: {args}");
                    if dies {
                        println!("    [{name}] ...and the replica dies before recording it");
                        std::future::pending::<()>().await;
                    }
                    Ok(format!("refunded {} EUR", args["amount"]))
                }
            },
        ))?;
        let approval = ApprovalHook::new(
            ApprovalConfig {
                enabled: true,
                guarded_tools: vec!["refund".into()],
                mode: ApprovalMode::StopForHuman,
                ..ApprovalConfig::default()
            },
            None,
        )?;
        let agent = Agent::builder()
            .name(format!("support-{name}"))
            .model(ScriptedModel::new(script))
            .without_global_hooks()
            .toolkit(tools)
            .hook(approval)
            .leased_session_store(
                store,
                LeaseConfig {
                    ttl,
                    wait: Duration::from_secs(10),
                },
            )
            .build()?;
        Ok(Self {
            name,
            session,
            agent,
            refunds,
        })
    }

    /// A user message on the shared session, printed with the reply.
    async fn say(&self, text: &str) -> Result<Msg, Box<dyn Error>> {
        println!("user -> replica {}: {text:?}", self.name);
        let ctx = RunContext::new().with_session_id(self.session);
        let reply = self.agent.call_with(vec![Msg::user(text)], ctx).await?;
        if pending_approvals(&reply).is_empty() {
            println!("  replica {} answers: {:?}", self.name, reply.text());
        } else {
            println!(
                "  replica {} stops: a tool call waits for a human",
                self.name
            );
        }
        Ok(reply)
    }
}

fn ctx() -> RunContext {
    RunContext::new().with_session_id(SESSION)
}

/// A run context that resumes the session with `calls` approved.
fn approving(calls: &[ToolUse]) -> RunContext {
    let decisions = calls
        .iter()
        .fold(ApprovalDecisions::new(), |d, c| d.approve_call(c));
    let ctx = ctx();
    ctx.extensions().insert(decisions);
    ctx
}

async fn connect(url: &str, prefix: &str) -> Result<RedisSessionStore, StoreError> {
    RedisSessionStore::builder()
        .url(url)
        .key_prefix(prefix)
        .connect_timeout(Duration::from_secs(2))
        .connect_retries(1)
        .connect()
        .await
}

/// One line per stored message: role, text, tool calls and results.
fn print_history(messages: &[Msg]) {
    for (i, m) in messages.iter().enumerate() {
        let role = format!("{:?}", m.role).to_lowercase();
        let mut line = format!("  {i:>2} {role:<9}");
        if !m.text().is_empty() {
            line.push_str(&format!(" {:?}", m.text()));
        }
        for u in m.tool_uses() {
            line.push_str(&format!(" calls {}({})", u.name, u.input));
        }
        for r in m.tool_results() {
            let error = if r.is_error { " (error)" } else { "" };
            line.push_str(&format!(" {} -> {:?}{error}", r.name, r.content));
        }
        println!("{line}");
    }
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REIN_REDIS_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let prefix = "rein-example:replicas:";
    // Two clients: one per replica, as two processes would have.
    let clients = match (connect(&url, prefix).await, connect(&url, prefix).await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("replicas: cannot use Redis at {}: {e}", redacted(&url));
            eprintln!(
                "Start a local Redis (`apt-get install -y redis-server && redis-server \
                 --daemonize yes`), or set REIN_REDIS_URL to a running one."
            );
            std::process::exit(2);
        }
    };
    let admin = clients.0.clone();
    let key = SessionKey::new(None, SESSION);
    // A fresh conversation (a run that was killed may have left one).
    let _ = admin.delete(&key).await;
    let second = (clients.0.clone(), clients.1.clone());
    let mut outcome = run(clients, &key).await;
    let killed = SessionKey::new(None, "order-43");
    let _ = admin.delete(&killed).await;
    if outcome.is_ok() {
        println!("\n== 5. a replica is killed mid-refund on session \"order-43\"");
        outcome = killed_mid_refund(second, &killed).await;
    }
    // The sessions go, whatever happened.
    let _ = admin.delete(&key).await;
    let _ = admin.delete(&killed).await;
    if let Err(e) = outcome {
        eprintln!("replicas: {e}");
        std::process::exit(1);
    }
}

/// The URL with its password hidden.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

async fn run(
    (client_a, client_b): (RedisSessionStore, RedisSessionStore),
    key: &SessionKey,
) -> Result<(), Box<dyn Error>> {
    let store = client_a.clone();
    let a = Replica::new(
        "A",
        client_a,
        vec![
            ScriptedTurn::tool_call("lookup_order", json!({"order": 42})),
            ScriptedTurn::text("Order 42 was delivered on 28 November (39.90 EUR)."),
            ScriptedTurn::tool_call("refund", json!({"order": 42, "amount": 39.90})),
        ],
    )?;
    let b = Replica::new(
        "B",
        client_b,
        vec![
            ScriptedTurn::text("I'm sorry it arrived damaged. I can refund the 39.90 EUR."),
            ScriptedTurn::text("Done: 39.90 EUR are on their way back to you."),
        ],
    )?;

    println!("== 1. calls on session {SESSION:?} alternate between the replicas");
    a.say("Where is my order 42?").await?;
    b.say("It arrived damaged.").await?;

    println!("\n== 2. on A the model asks for a refund: stopped for a human");
    let stopped = a.say("Yes, please refund it.").await?;
    let waiting = pending_approvals(&stopped);
    println!(
        "  waiting for approval: {} ({} refunds paid so far)",
        waiting
            .iter()
            .map(|c| format!("{}({})", c.name, c.input))
            .collect::<Vec<_>>()
            .join(", "),
        a.refunds.load(Ordering::SeqCst) + b.refunds.load(Ordering::SeqCst)
    );

    println!("\n== 3. a human approves on B, which reads the pending call from Redis");
    let stored = pending_approvals_in(&b.agent.messages(key).await);
    println!(
        "  B finds {} pending call(s) in the stored session",
        stored.len()
    );
    let reply = b.agent.call_with(vec![], approving(&stored)).await?;
    println!("  replica B answers: {:?}", reply.text());

    println!("\n== 4. a late duplicate of the approval reaches A");
    match a.agent.call_with(vec![], approving(&waiting)).await {
        Ok(reply) => return Err(format!("the duplicate ran: {:?}", reply.text()).into()),
        Err(e) => match e.store_error().map(StoreError::kind) {
            Some(StoreErrorKind::Conflict) => println!("  refused before running: {e}"),
            _ => return Err(e.into()),
        },
    }

    let (ra, rb) = (
        a.refunds.load(Ordering::SeqCst),
        b.refunds.load(Ordering::SeqCst),
    );
    println!(
        "\nrefund tool runs: replica A {ra}, replica B {rb}, total {}",
        ra + rb
    );
    let session = store.load(key).await?;
    println!(
        "stored session {SESSION:?} in Redis (version {}, {} messages):",
        session.version,
        session.messages.len()
    );
    print_history(&session.messages);
    if ra + rb != 1 {
        return Err(format!("the refund ran {} times, not once", ra + rb).into());
    }
    Ok(())
}

/// Step 5: replica C is killed mid-refund; replica D resumes; a human resolves.
async fn killed_mid_refund(
    (client_c, client_d): (RedisSessionStore, RedisSessionStore),
    key: &SessionKey,
) -> Result<(), Box<dyn Error>> {
    let ttl = Duration::from_secs(1);
    let asks = Replica::with(
        "C",
        "order-43",
        client_c.clone(),
        vec![ScriptedTurn::tool_call(
            "refund",
            json!({"order": 43, "amount": 12.5}),
        )],
        ttl,
        true,
    )?;
    let stopped = asks.say("Please refund order 43.").await?;
    let approval = ApprovalDecisions::new().approve_call(&pending_approvals(&stopped)[0]);
    println!("  a human approves; replica C resumes and is killed mid-refund");
    // C runs on a runtime of its own, which dies once the refund was paid: no renewal,
    // no save, no release — as a SIGKILL would leave it.
    let (c_agent, c_paid, c_key, c_approval) = (
        asks.agent.clone(),
        Arc::clone(&asks.refunds),
        key.clone(),
        approval.clone(),
    );
    std::thread::spawn(move || -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.spawn(async move {
            let _ = c_agent.resume(&c_key, c_approval).await;
        });
        rt.block_on(async {
            while c_paid.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        rt.shutdown_background();
        Ok(())
    })
    .join()
    .map_err(|_| "replica C's thread panicked")??;
    let d = Replica::with(
        "D",
        "order-43",
        client_d,
        vec![ScriptedTurn::text("Refunded: 12.50 EUR.")],
        ttl,
        false,
    )?;
    println!("  replica D resumes the same approval (after C's lease expires)");
    let out = d.agent.resume(key, approval).await?;
    if out.reason != StopReason::OutcomeUnknown {
        return Err(format!("expected an unknown outcome, got {:?}", out.reason).into());
    }
    let unknown = &out.reply.metadata[agent::PENDING_CALLS_KEY][0];
    println!(
        "  D stops: outcome unknown for {}({}) (class {}, key {}): not paid again",
        unknown["name"], unknown["input"], unknown["class"], unknown["idempotency_key"]
    );
    let paid = asks.refunds.load(Ordering::SeqCst) + d.refunds.load(Ordering::SeqCst);
    println!("  a human checks the ledger: {paid} payment(s) for order 43; records it");
    let id = unknown["id"].as_str().unwrap_or_default();
    let resolved =
        ApprovalDecisions::new().record_outcome(id, "refunded 12.5 EUR (checked in the ledger)");
    let done = d.agent.resume(key, resolved).await?;
    println!("  replica D answers: {:?}", done.reply.text());
    let paid = asks.refunds.load(Ordering::SeqCst) + d.refunds.load(Ordering::SeqCst);
    println!("refund tool runs for order 43: {paid}");
    print_history(&client_c.load(key).await?.messages);
    if paid != 1 {
        return Err(format!("the refund ran {paid} times, not once").into());
    }
    Ok(())
}
