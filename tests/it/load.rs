//! Load: many concurrent calls across many sessions on one `Agent`, with random
//! injected faults (seeded), asserting no deadlock, per-session FIFO order, every
//! audit record accounted for, and valid (and saved) memory in every session.
//!
//! Ignored by default. Full size (10,000 calls, 1,000 sessions):
//! `cargo test --release --test it load -- --ignored --nocapture`.
//! `.ci/run` runs a quick mode through the environment: `REIN_LOAD_CALLS`,
//! `REIN_LOAD_SESSIONS`, `REIN_LOAD_SEED`, `REIN_LOAD_TIMEOUT_SECS`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rein::*;
use serde_json::json;

use crate::crash::XorShift;
use crate::support::*;

/// What a call asks for; the model, the tool and the hooks read it from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Fault {
    None,
    Tool,
    ModelErrorBeforeFirstChunk,
    ModelErrorMidText,
    ToolPanic,
    ToolTimeout,
    HookAbortError,
    HookAbortPanic,
    HookIgnoredError,
    StopAgent,
    CallerDrops,
}

impl Fault {
    const ALL: [Fault; 11] = [
        Fault::None,
        Fault::Tool,
        Fault::ModelErrorBeforeFirstChunk,
        Fault::ModelErrorMidText,
        Fault::ToolPanic,
        Fault::ToolTimeout,
        Fault::HookAbortError,
        Fault::HookAbortPanic,
        Fault::HookIgnoredError,
        Fault::StopAgent,
        Fault::CallerDrops,
    ];

    fn tag(self) -> String {
        format!("{self:?}")
    }

    fn from_input(text: &str) -> Fault {
        let tag = text.rsplit(' ').next().unwrap_or("");
        Fault::ALL
            .into_iter()
            .find(|f| f.tag() == tag)
            .unwrap_or(Fault::None)
    }

    /// Seeded choice: mostly healthy calls, every fault well represented.
    fn pick(rng: &mut XorShift) -> Fault {
        match rng.below(100) {
            0..=29 => Fault::None,
            30..=49 => Fault::Tool,
            n => Fault::ALL[2 + (n as usize - 50) % 9],
        }
    }
}

/// The fault of the call a request belongs to: the last real user message.
fn fault_of(messages: &rein::model::Messages) -> Fault {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User && m.metadata.get("rein.synthetic").is_none())
        .map_or(Fault::None, |m| Fault::from_input(&m.text()))
}

struct LoadModel;

impl Model for LoadModel {
    fn name(&self) -> &str {
        "load"
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let fault = fault_of(&request.messages);
        let last_is_user = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::User);
        let wants_tool = matches!(
            fault,
            Fault::Tool
                | Fault::ToolPanic
                | Fault::ToolTimeout
                | Fault::HookAbortError
                | Fault::HookAbortPanic
                | Fault::HookIgnoredError
                | Fault::StopAgent
                | Fault::CallerDrops
        );
        let text = |t: &str| {
            let mid = t.len() / 2;
            vec![
                Ok(ModelChunk::Text(t[..mid].to_owned())),
                Ok(ModelChunk::Text(t[mid..].to_owned())),
            ]
        };
        let chunks: Vec<Result<ModelChunk, ModelError>> = match fault {
            Fault::ModelErrorBeforeFirstChunk => {
                vec![Err(ModelError::new(ModelErrorKind::Server, "503"))]
            }
            Fault::ModelErrorMidText => {
                let mut c = text("half an answer");
                c.truncate(1);
                c.push(Err(ModelError::new(ModelErrorKind::Stream, "reset")));
                c
            }
            _ if wants_tool && last_is_user && !request.tools.is_empty() => {
                vec![Ok(ModelChunk::ToolCall {
                    index: 0,
                    id: None,
                    name: Some("work".into()),
                    arguments: json!({"mode": fault.tag()}).to_string(),
                })]
            }
            _ => text("done"),
        };
        Box::pin(futures::stream::iter(chunks).then(|c| async {
            tokio::task::yield_now().await;
            c
        }))
    }
}

fn load_tool() -> FunctionTool {
    FunctionTool::new(
        "work",
        "works",
        json!({"type": "object", "properties": {"mode": {"type": "string"}}}),
        |args| async move {
            match args["mode"].as_str().unwrap_or("") {
                "ToolPanic" => panic!("tool exploded under load"),
                "ToolTimeout" => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok("never".into())
                }
                "CallerDrops" => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok("slow".into())
                }
                _ => {
                    tokio::task::yield_now().await;
                    Ok("worked".into())
                }
            }
        },
    )
    .with_timeout(Duration::from_millis(50))
}

/// The (session, seq) of a call, from its input text `s{session} c{seq} {fault}`.
fn call_id(text: &str) -> Option<(usize, usize)> {
    let mut parts = text.split(' ');
    let s = parts.next()?.strip_prefix('s')?.parse().ok()?;
    let c = parts.next()?.strip_prefix('c')?.parse().ok()?;
    Some((s, c))
}

/// Records the order in which calls start, per session.
struct FifoRecorder(Arc<Mutex<HashMap<usize, Vec<usize>>>>);

impl Hook for FifoRecorder {
    fn priority(&self) -> i32 {
        0
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreCall)
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreCall(e) = event
            && let Some((s, c)) = e.messages().first().and_then(|m| call_id(&m.text()))
        {
            self.0.lock().unwrap().entry(s).or_default().push(c);
        }
        Ok(())
    }
}

/// Fails calls that asked for a hook fault, under the policy that fault names.
struct FaultyGovernance {
    policy: FailurePolicy,
}

impl Hook for FaultyGovernance {
    fn name(&self) -> &str {
        match self.policy {
            FailurePolicy::Abort => "governance",
            _ => "observer",
        }
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing).with(EventKind::PostReasoning)
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PreActing(e) => match (e.tool_use().input["mode"].as_str(), self.policy) {
                (Some("HookAbortError"), FailurePolicy::Abort) => {
                    Err(HookError::new("policy store unreachable"))
                }
                (Some("HookAbortPanic"), FailurePolicy::Abort) => panic!("governance exploded"),
                (Some("HookIgnoredError"), FailurePolicy::Ignore) => {
                    Err(HookError::new("observer hiccup"))
                }
                _ => Ok(()),
            },
            HookEvent::PostReasoning(e) => {
                if self.policy == FailurePolicy::Abort
                    && e.message()
                        .tool_uses()
                        .iter()
                        .any(|u| u.input["mode"] == "StopAgent")
                {
                    e.stop_agent();
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// An audit hook writing one record per tool result, final answer and error into a
/// bounded channel; a full channel counts the record as dropped.
struct AuditRecorder {
    tx: tokio::sync::mpsc::Sender<EventKind>,
    produced: Arc<Mutex<HashMap<EventKind, u64>>>,
    dropped: Arc<AtomicU64>,
}

impl Hook for AuditRecorder {
    fn priority(&self) -> i32 {
        850
    }
    fn interest(&self) -> Interest {
        Interest::of([EventKind::PostActing, EventKind::PostCall, EventKind::Error])
    }
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        *self
            .produced
            .lock()
            .unwrap()
            .entry(event.kind())
            .or_default() += 1;
        if self.tx.try_send(event.kind()).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test; run with --ignored (size via REIN_LOAD_CALLS / REIN_LOAD_SESSIONS)"]
async fn ten_thousand_concurrent_calls_on_a_thousand_sessions_keep_every_invariant() {
    let calls: usize = env_or("REIN_LOAD_CALLS", 10_000);
    let sessions: usize = env_or("REIN_LOAD_SESSIONS", 1_000).clamp(1, calls.max(1));
    let seed: u64 = env_or("REIN_LOAD_SEED", 0x5eed_1234);
    let bound = Duration::from_secs(env_or("REIN_LOAD_TIMEOUT_SECS", 300));
    let mut rng = XorShift::new(seed);

    let fifo = Arc::new(Mutex::new(HashMap::new()));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<EventKind>(1024);
    let produced = Arc::new(Mutex::new(HashMap::<EventKind, u64>::new()));
    let dropped = Arc::new(AtomicU64::new(0));
    let written = Arc::new(Mutex::new(HashMap::<EventKind, u64>::new()));
    let writer = {
        let written = written.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(kind) = rx.recv().await {
                *written.lock().unwrap().entry(kind).or_default() += 1;
                n += 1;
                if n.is_multiple_of(256) {
                    // A slow sink: some records will find the channel full.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
        })
    };
    let store = InMemorySessionStore::new();
    let agent = Agent::builder()
        .model(LoadModel)
        .without_global_hooks()
        .max_iters(3)
        .toolkit(toolkit_with(vec![load_tool()]))
        .hook(FifoRecorder(fifo.clone()))
        .hook(FaultyGovernance {
            policy: FailurePolicy::Abort,
        })
        .hook(FaultyGovernance {
            policy: FailurePolicy::Ignore,
        })
        .hook(AuditRecorder {
            tx,
            produced: produced.clone(),
            dropped: dropped.clone(),
        })
        .session_store(store.clone())
        .build()
        .unwrap();

    // Per session, its calls in order; faults chosen by the seeded generator.
    let mut plan: Vec<Vec<Fault>> = vec![Vec::new(); sessions];
    for i in 0..calls {
        plan[i % sessions].push(Fault::pick(&mut rng));
    }
    let mut injected: HashMap<Fault, u64> = HashMap::new();
    for f in plan.iter().flatten() {
        *injected.entry(*f).or_default() += 1;
    }

    let started = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for (s, faults) in plan.iter().cloned().enumerate() {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            // `join_all` polls the calls in order at once: they queue on the session in
            // this order, and all of them (across all sessions) are in flight together.
            let calls = faults.iter().enumerate().map(|(c, fault)| {
                let agent = agent.clone();
                let fault = *fault;
                async move {
                    let input = Msg::user(format!("s{s} c{c} {}", fault.tag()));
                    let call = agent.call_with(vec![input], session(&format!("load-{s}")));
                    if fault == Fault::CallerDrops {
                        match tokio::time::timeout(Duration::from_millis(20), call).await {
                            Ok(result) => (fault, Some(result.is_ok())),
                            Err(_) => (fault, None),
                        }
                    } else {
                        (fault, Some(call.await.is_ok()))
                    }
                }
            });
            futures::future::join_all(calls).await
        }));
    }
    let outcomes = tokio::time::timeout(bound, futures::future::join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("deadlock: {calls} calls not done after {bound:?}"));
    let elapsed = started.elapsed();

    let (mut ok, mut failed, mut cancelled) = (0u64, 0u64, 0u64);
    for (fault, result) in outcomes.into_iter().flat_map(Result::unwrap) {
        match result {
            Some(true) => ok += 1,
            Some(false) => failed += 1,
            None => cancelled += 1,
        }
        let expect_error = matches!(
            fault,
            Fault::ModelErrorBeforeFirstChunk
                | Fault::ModelErrorMidText
                | Fault::HookAbortError
                | Fault::HookAbortPanic
        );
        if fault != Fault::CallerDrops {
            assert_eq!(result, Some(!expect_error), "{fault:?}");
        }
    }
    assert_eq!(ok + failed + cancelled, calls as u64);

    // Every session takes one more healthy call (this also resolves tool uses a
    // `StopAgent` call left pending on purpose); then: FIFO order kept, memory valid,
    // and the store holds it.
    let closing = (0..sessions).map(|s| {
        let agent = agent.clone();
        let c = plan[s].len();
        async move {
            let input = Msg::user(format!("s{s} c{c} None"));
            agent
                .call_with(vec![input], session(&format!("load-{s}")))
                .await
                .unwrap_or_else(|e| panic!("session {s} is unusable after the load: {e}"))
        }
    });
    tokio::time::timeout(bound, futures::future::join_all(closing))
        .await
        .expect("closing calls finished");
    ok += sessions as u64;
    let mut checked = 0;
    let fifo = fifo.lock().unwrap().clone();
    for s in 0..sessions {
        let started = fifo.get(&s).cloned().unwrap_or_default();
        assert!(
            started.windows(2).all(|w| w[0] < w[1]),
            "session {s} started its calls out of order: {started:?}"
        );
        let k = key(&format!("load-{s}"));
        let stored = tokio::time::timeout(bound, assert_saved(&agent, &store, &k))
            .await
            .unwrap_or_else(|_| panic!("session {s} never settled"));
        let seqs: Vec<usize> = stored
            .iter()
            .filter(|m| m.role == Role::User)
            .filter_map(|m| call_id(&m.text()).map(|(_, c)| c))
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "session {s}: {seqs:?}"
        );
        checked += 1;
    }

    // Every audit record accounted for: written or counted as dropped.
    drop(agent);
    tokio::time::timeout(bound, writer)
        .await
        .expect("the audit writer finished")
        .unwrap();
    let written: u64 = written.lock().unwrap().values().sum();
    let produced = produced.lock().unwrap().clone();
    let produced_total: u64 = produced.values().sum();
    let dropped = dropped.load(Ordering::SeqCst);
    assert_eq!(produced_total, written + dropped, "records lost");
    let finals = produced.get(&EventKind::PostCall).copied().unwrap_or(0);
    let errors = produced.get(&EventKind::Error).copied().unwrap_or(0);
    assert_eq!(finals, ok, "one PostCall record per successful call");
    assert_eq!(errors, failed, "one Error record per failed call");

    let mut kinds: Vec<_> = injected.into_iter().collect();
    kinds.sort();
    eprintln!(
        "load: seed {seed:#x}, {calls} calls on {sessions} sessions in {elapsed:?}: \
         {ok} ok, {failed} typed errors, {cancelled} dropped by the caller; faults injected \
         {kinds:?}; {checked} sessions checked (FIFO, memory valid, saved); audit records: \
         {produced_total} produced = {written} written + {dropped} dropped \
         ({finals} PostCall, {errors} Error)"
    );
}
