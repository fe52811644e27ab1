//! Load: many concurrent calls across many sessions on one `Agent` carrying the
//! production hook set built from a `HooksConfig` (latency, tool guard, dynamic
//! options, approval with a fast approver, self-correction, audit to a
//! `JsonlAuditSink`, masking), with random injected faults (seeded). Asserts no
//! deadlock, per-session FIFO order, valid (and saved) memory in every session, every
//! audit record in the JSONL file exactly once and in call order per session, latency
//! samples for every call and tool call, and no per-call hook state left behind.
//!
//! Ignored by default. Full size (10,000 calls, 1,000 sessions):
//! `REIN_LOAD_CALLS=10000 REIN_LOAD_SESSIONS=1000 cargo test --all-features --test it load:: -- --ignored --nocapture`.
//! `.ci/run` runs a quick mode through the environment: `REIN_LOAD_CALLS`,
//! `REIN_LOAD_SESSIONS`, `REIN_LOAD_SEED`, `REIN_LOAD_TIMEOUT_SECS`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rein::hooks::{
    ApprovalDecision, ApprovalRequest, AuditKind, AuditRecord, HookServices, Hooks, HooksConfig,
    Outcome, QueueFull, Segment,
};
use rein::*;
use serde_json::json;

use crate::support::rng::XorShift;
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
        // Half the healthy first answers promise a refund (the self-correction hook
        // redoes them); every answer carries a phone number (masked in the audit file).
        let promise = fault == Fault::None
            && last_is_user
            && request
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .and_then(|m| call_id(&m.text()))
                .is_some_and(|(_, c)| c.is_multiple_of(2));
        let answer = if promise {
            "已退款, call 13812345678"
        } else {
            "done, call 13812345678"
        };
        // Tool-fault calls ask for more than the guard's cap (and the approval
        // threshold): the guard caps them and the approver edits them.
        let amount = if fault == Fault::Tool { 5000 } else { 3 };
        let text = |t: &str| {
            let mid = t
                .char_indices()
                .nth(t.chars().count() / 2)
                .map_or(t.len(), |(i, _)| i);
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
                    arguments: json!({"mode": fault.tag(), "amount": amount}).to_string(),
                })]
            }
            _ => text(answer),
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
        json!({"type": "object", "properties": {
            "mode": {"type": "string"},
            "amount": {"type": "number"}
        }}),
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
    // Calls are dropped mid-tool on purpose: an idempotent tool is run again by the
    // session's next call (an at-most-once one would stop it as outcome unknown).
    .idempotent()
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

/// The identity of one audit record: (run id, kind, tool-call id).
type RecordKey = (String, AuditKind, Option<String>);

/// Runs after the audit hook (850) on the events it records and notes which record
/// each must have produced: the expected trail, independent of the sink.
struct ExpectedTrail {
    keys: Arc<Mutex<Vec<RecordKey>>>,
    /// Tool calls by how they ended (`PostActing`): what the latency hook must time.
    tools: Arc<Mutex<HashMap<Outcome, u64>>>,
    /// The (run, tool call) pairs whose `PreActing` this hook saw: a result the runtime
    /// replays from the effect journal (the call that ran it was dropped after it
    /// settled) reaches `PostActing` in a later run that never started it, and is not
    /// timed.
    started: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
}

impl Hook for ExpectedTrail {
    fn priority(&self) -> i32 {
        860
    }
    fn interest(&self) -> Interest {
        Interest::of([
            EventKind::PostReasoning,
            EventKind::PreActing,
            EventKind::PostActing,
            EventKind::PostCall,
            EventKind::Error,
        ])
    }
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let run = event.context().run_id().to_owned();
        let key = match event {
            HookEvent::PostReasoning(e) if e.goto_requested().is_some() => {
                (run, AuditKind::ReasoningRedone, None)
            }
            HookEvent::PreActing(e) => {
                let id = e.tool_use().id.clone();
                self.started.lock().unwrap().insert((run, id));
                return Ok(());
            }
            HookEvent::PostActing(e) => {
                let (kind, outcome) = if e.was_denied() {
                    (AuditKind::ToolDenied, Outcome::Denied)
                } else if e.tool_result().is_error {
                    (AuditKind::ToolCall, Outcome::Error)
                } else {
                    (AuditKind::ToolCall, Outcome::Ok)
                };
                let ran_here = self
                    .started
                    .lock()
                    .unwrap()
                    .contains(&(run.clone(), e.tool_use().id.clone()));
                if ran_here {
                    *self.tools.lock().unwrap().entry(outcome).or_default() += 1;
                }
                (run, kind, Some(e.tool_use().id.clone()))
            }
            HookEvent::PostCall(_) => (run, AuditKind::FinalAnswer, None),
            HookEvent::Error(_) => (run, AuditKind::Error, None),
            _ => return Ok(()),
        };
        self.keys.lock().unwrap().push(key);
        Ok(())
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The production hook set, auditing to `path` with `on_full` and `queue_capacity`.
fn production_hooks(path: &std::path::Path, on_full: QueueFull, queue_capacity: usize) -> Hooks {
    let on_full = match on_full {
        QueueFull::Drop => "drop",
        _ => "wait",
    };
    let config: HooksConfig = serde_json::from_value(json!({
        "latency": {"enabled": true},
        "tool_guard": {"enabled": true, "tools": ["work"], "numeric_caps": {"amount": 1000}},
        "dynamic_options": {"enabled": true},
        "approval": {
            "enabled": true,
            "mode": "await",
            "guarded_tools": ["work"],
            "when": {"work": {"path": "/amount", "gt": 10}}
        },
        "self_correction": {"enabled": true},
        "audit": {
            "enabled": true,
            "on_full": on_full,
            "queue_capacity": queue_capacity,
            "sink": {"type": "jsonl", "path": path, "durability": "none"}
        },
        "masking": {"enabled": true}
    }))
    .unwrap();
    // A fast approver: every guarded call (the capped tool-fault calls) is edited down.
    let approver = |req: ApprovalRequest| async move {
        let mut input = req.tool_use.input.clone();
        input["amount"] = json!(7);
        ApprovalDecision::Edit(input)
    };
    config
        .build_with(HookServices::new().approver(approver))
        .unwrap()
}

/// What one load run observed.
struct LoadRun {
    produced: u64,
    written: u64,
    dropped: u64,
    lines: Vec<AuditRecord>,
    expected: Vec<RecordKey>,
    /// Run id → (session, call).
    runs: HashMap<String, (usize, usize)>,
}

/// Runs `calls` calls over `sessions` sessions through the production hooks, checks
/// the call-level invariants (outcomes, FIFO, memory, latency samples, no per-call
/// state left), and returns the audit trail for the caller to check.
async fn load_run(calls: usize, sessions: usize, on_full: QueueFull, capacity: usize) -> LoadRun {
    let sessions = sessions.clamp(1, calls.max(1));
    let seed: u64 = env_or("REIN_LOAD_SEED", 0x5eed_1234);
    let bound = Duration::from_secs(env_or("REIN_LOAD_TIMEOUT_SECS", 300));
    let mut rng = XorShift::new(seed);
    let dir = TempDir::new("load");
    let path = dir.path().join("audit.jsonl");

    let fifo = Arc::new(Mutex::new(HashMap::new()));
    let expected = Arc::new(Mutex::new(Vec::new()));
    let tools = Arc::new(Mutex::new(HashMap::new()));
    let hooks = production_hooks(&path, on_full, capacity);
    let store = InMemorySessionStore::new();
    let agent = hooks
        .install(
            Agent::builder()
                .model(LoadModel)
                .without_global_hooks()
                .max_iters(3)
                .toolkit(toolkit_with(vec![load_tool()])),
        )
        .hook(FifoRecorder(fifo.clone()))
        .hook(FaultyGovernance {
            policy: FailurePolicy::Abort,
        })
        .hook(FaultyGovernance {
            policy: FailurePolicy::Ignore,
        })
        .hook(ExpectedTrail {
            keys: expected.clone(),
            tools: tools.clone(),
            started: Arc::default(),
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
    let runs = Arc::new(Mutex::new(HashMap::new()));
    // One context per call, kept by the test: after the call it must hold no hook state.
    let call = |s: usize, c: usize, fault: Fault| {
        // Every fourth call mentions a refund: the dynamic-options hook switches profile.
        let refund = if c.is_multiple_of(4) { " 退款" } else { "" };
        let input = Msg::user(format!("s{s} c{c}{refund} {}", fault.tag()));
        let ctx = session(&format!("load-{s}"));
        runs.lock().unwrap().insert(ctx.run_id().to_owned(), (s, c));
        let agent = agent.clone();
        let kept = ctx.clone();
        async move { (agent.call_with(vec![input], ctx).await, kept) }
    };

    let started = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for (s, faults) in plan.iter().cloned().enumerate() {
        let calls: Vec<_> = faults
            .iter()
            .enumerate()
            .map(|(c, fault)| {
                let fault = *fault;
                let call = call(s, c, fault);
                async move {
                    if fault == Fault::CallerDrops {
                        match tokio::time::timeout(Duration::from_millis(20), call).await {
                            Ok((result, ctx)) => (fault, Some(result.is_ok()), Some(ctx)),
                            Err(_) => (fault, None, None),
                        }
                    } else {
                        let (result, ctx) = call.await;
                        (fault, Some(result.is_ok()), Some(ctx))
                    }
                }
            })
            .collect();
        // `join_all` polls the calls in order at once: they queue on the session in
        // this order, and all of them (across all sessions) are in flight together.
        tasks.push(tokio::spawn(futures::future::join_all(calls)));
    }
    let outcomes = tokio::time::timeout(bound, futures::future::join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("deadlock: {calls} calls not done after {bound:?}"));
    let elapsed = started.elapsed();

    let (mut ok, mut failed, mut cancelled) = (0u64, 0u64, 0u64);
    let mut finished_contexts = Vec::new();
    for (fault, result, ctx) in outcomes.into_iter().flat_map(Result::unwrap) {
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
        finished_contexts.extend(ctx);
    }
    assert_eq!(ok + failed + cancelled, calls as u64);

    // Every session takes one more healthy call (this also resolves tool uses a
    // `StopAgent` call left pending on purpose); then: FIFO order kept, memory valid,
    // and the store holds it.
    let closing = (0..sessions).map(|s| {
        let call = call(s, plan[s].len(), Fault::None);
        async move {
            let (result, ctx) = call.await;
            result.unwrap_or_else(|e| panic!("session {s} is unusable after the load: {e}"));
            ctx
        }
    });
    let closing = tokio::time::timeout(bound, futures::future::join_all(closing))
        .await
        .expect("closing calls finished");
    finished_contexts.extend(closing);
    ok += sessions as u64;
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
    }

    // No per-call hook state retained: the hooks keep theirs in the call's context
    // (taken out on `PostCall` / `Error`) and the approval hook its pending edits.
    for ctx in &finished_contexts {
        assert!(
            ctx.extensions().is_empty(),
            "run {} kept {:?} after it finished",
            ctx.run_id(),
            ctx.extensions()
        );
    }
    let approval = hooks.approval().unwrap();
    assert_eq!(approval.edits_in_flight(), 0, "edited calls left behind");

    // The cancelled calls' contexts are gone: their latency timers closed as cancelled.
    drop(agent);
    let expected = std::mem::take(&mut *expected.lock().unwrap());
    let tool_calls = expected
        .iter()
        .filter(|(_, kind, _)| matches!(kind, AuditKind::ToolCall | AuditKind::ToolDenied))
        .count() as u64;
    let latency = hooks.latency().unwrap().snapshot();
    assert_eq!(
        latency.count_outcome(Segment::E2e, Outcome::Ok),
        ok,
        "e2e ok"
    );
    assert_eq!(
        latency.count_outcome(Segment::E2e, Outcome::Error),
        failed,
        "e2e error"
    );
    // A call cancelled while it waited for its session never started (no `PreCall`,
    // no timer); one cancelled after it started is timed as cancelled.
    let started_calls: u64 = fifo.values().map(|c| c.len() as u64).sum();
    let cancelled_after_start = started_calls - ok - failed;
    assert!(cancelled_after_start <= cancelled);
    assert_eq!(
        latency.count_outcome(Segment::E2e, Outcome::Cancelled),
        cancelled_after_start,
        "e2e cancelled"
    );
    // One tool sample per tool call that ended; a call failed by a hook after the
    // latency hook timed it (an aborting governance hook) adds an `error` sample.
    let tools = tools.lock().unwrap().clone();
    let ended = |o: Outcome| tools.get(&o).copied().unwrap_or(0);
    assert_eq!(
        latency.count_outcome(Segment::Tool, Outcome::Ok),
        ended(Outcome::Ok)
    );
    assert_eq!(
        latency.count_outcome(Segment::Tool, Outcome::Denied),
        ended(Outcome::Denied)
    );
    assert!(latency.count_outcome(Segment::Tool, Outcome::Error) >= ended(Outcome::Error));
    assert!(ended(Outcome::Ok) > 0);

    let audit = hooks.audit().unwrap();
    tokio::time::timeout(bound, audit.flush())
        .await
        .expect("the audit queue drained")
        .unwrap();
    let stats = audit.stats();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
    assert!(
        !text.contains("13812345678"),
        "unmasked personal data in the audit file"
    );
    let lines: Vec<AuditRecord> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("line {} does not parse ({e}): {line}", i + 1))
        })
        .collect();
    let mut kinds: Vec<_> = injected.into_iter().collect();
    kinds.sort();
    eprintln!(
        "load ({on_full:?}, queue {capacity}): seed {seed:#x}, {calls} calls on {sessions} \
         sessions in {elapsed:?}: {ok} ok, {failed} typed errors, {cancelled} dropped by the \
         caller; faults injected {kinds:?}; audit records: {} produced, {} written, {} dropped, \
         {} lines in the file; {tool_calls} tool calls timed",
        expected.len(),
        stats.written,
        stats.dropped,
        lines.len()
    );
    let runs = std::mem::take(&mut *runs.lock().unwrap());
    LoadRun {
        produced: expected.len() as u64,
        written: stats.written,
        dropped: stats.dropped,
        lines,
        expected,
        runs,
    }
}

fn record_key(r: &AuditRecord) -> RecordKey {
    (r.run_id.clone(), r.kind, r.tool_call_id.clone())
}

/// Records of one session appear in the order of its calls.
fn assert_session_order(run: &LoadRun) {
    let mut last: HashMap<usize, usize> = HashMap::new();
    for r in &run.lines {
        let (s, c) = *run
            .runs
            .get(&r.run_id)
            .unwrap_or_else(|| panic!("a record of an unknown run: {r:?}"));
        assert_eq!(r.session_id, format!("load-{s}"));
        let prev = last.insert(s, c).unwrap_or(0);
        assert!(
            c >= prev,
            "session {s}: a record of call {c} after one of call {prev}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test; run with --ignored (size via REIN_LOAD_CALLS / REIN_LOAD_SESSIONS)"]
async fn ten_thousand_calls_through_the_production_hooks_keep_every_audit_record_in_wait_mode() {
    let calls: usize = env_or("REIN_LOAD_CALLS", 10_000);
    let sessions: usize = env_or("REIN_LOAD_SESSIONS", 1_000);
    let run = load_run(calls, sessions, QueueFull::Wait, 1024).await;
    assert_eq!(run.dropped, 0, "wait mode never drops a record");
    assert_eq!(run.written, run.produced, "every record written");
    // Exactly once: the file's records are the expected ones, no more, no fewer.
    let mut seen: HashSet<RecordKey> = HashSet::new();
    for r in &run.lines {
        assert!(seen.insert(record_key(r)), "written twice: {r:?}");
    }
    let expected: HashSet<RecordKey> = run.expected.iter().cloned().collect();
    assert_eq!(
        expected.len(),
        run.expected.len(),
        "a record expected twice"
    );
    assert_eq!(seen, expected, "the file differs from the records produced");
    assert_session_order(&run);
    // The rewrites were audited: what the model asked for, and the approver's edit.
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for r in &run.lines {
        *by_kind.entry(r.kind.as_str().to_owned()).or_default() += 1;
        if r.kind == AuditKind::ToolCall && r.args.as_ref().is_some_and(|a| a["mode"] == "Tool") {
            // Without the decision trail, the last rewriter of the pass is named.
            assert_eq!(r.rewritten_by, ["ApprovalHook"], "{r:?}");
            assert_eq!(r.args.as_ref().unwrap()["amount"], 7, "{r:?}");
            assert_eq!(r.original_args.as_ref().unwrap()["amount"], 5000, "{r:?}");
        }
    }
    assert!(
        by_kind.get("reasoning-redone").copied().unwrap_or(0) > 0,
        "{by_kind:?}"
    );
    eprintln!("audit records by kind: {by_kind:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test; run with --ignored (size via REIN_LOAD_CALLS / REIN_LOAD_SESSIONS)"]
async fn in_drop_mode_written_plus_dropped_is_exactly_the_records_produced() {
    // A third of the size, and a queue of 8 so records are dropped.
    let calls: usize = env_or("REIN_LOAD_CALLS", 10_000) / 3;
    let sessions: usize = env_or("REIN_LOAD_SESSIONS", 1_000) / 3;
    let run = load_run(calls.max(1), sessions.max(1), QueueFull::Drop, 8).await;
    assert_eq!(
        run.written + run.dropped,
        run.produced,
        "records unaccounted for"
    );
    assert_eq!(
        run.lines.len() as u64,
        run.written,
        "the file holds what was written"
    );
    let expected: HashSet<RecordKey> = run.expected.iter().cloned().collect();
    let mut seen: HashSet<RecordKey> = HashSet::new();
    for r in &run.lines {
        assert!(seen.insert(record_key(r)), "written twice: {r:?}");
        assert!(expected.contains(&record_key(r)), "never produced: {r:?}");
    }
    assert_session_order(&run);
}
