//! Fault injection at every step of a call: the model stream, tools, hooks (under each
//! failure policy), and the caller dropping the call future at every await point.
//!
//! After each fault: the call returned a typed error or a valid reply, memory is valid,
//! the next call on the same session succeeds, and — with a `FileSessionStore` — the
//! saved file is valid, matches memory, and a new agent on the same directory
//! continues the conversation.
//!
//! Every case runs the same plan, which reaches all twelve event kinds:
//! `go` → reasoning 1 (text + tool call) → tool → reasoning 2 (tool call) → tool →
//! `max_iters` (2) reached → summary → `PostCall`. The next call (`again`) is answered
//! `ok: again`. Print the figures with `cargo test --test it faults -- --nocapture`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rein::*;
use serde_json::json;

use crate::support::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModelFault {
    ErrorBeforeFirstChunk,
    ErrorMidText,
    ErrorMidToolCall,
    Panic,
    InvalidToolArguments,
}

/// A deterministic model that answers from the request alone (so an aborted call does
/// not shift a script), with one optional fault on a given request.
#[derive(Clone, Default)]
struct PlanModel {
    fault: Arc<Mutex<Option<(usize, ModelFault)>>>,
    requests: Arc<AtomicUsize>,
    chunk_delay: Option<Duration>,
}

impl PlanModel {
    fn with_fault(request: usize, fault: ModelFault) -> Self {
        let m = Self::default();
        *m.fault.lock().unwrap() = Some((request, fault));
        m
    }
    fn with_chunk_delay(mut self, d: Duration) -> Self {
        self.chunk_delay = Some(d);
        self
    }
}

fn text_chunks(text: &str) -> Vec<Result<ModelChunk, ModelError>> {
    let mid = text.len() / 2;
    vec![
        Ok(ModelChunk::Text(text[..mid].to_owned())),
        Ok(ModelChunk::Text(text[mid..].to_owned())),
    ]
}

fn tool_chunks(index: usize, id: &str, args: &str) -> Vec<Result<ModelChunk, ModelError>> {
    let mid = args.len() / 2;
    vec![
        Ok(ModelChunk::ToolCall {
            index,
            id: Some(id.to_owned()),
            name: Some("work".to_owned()),
            arguments: args[..mid].to_owned(),
        }),
        Ok(ModelChunk::ToolCall {
            index,
            id: None,
            name: None,
            arguments: args[mid..].to_owned(),
        }),
    ]
}

impl Model for PlanModel {
    fn name(&self) -> &str {
        "plan"
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = {
            let mut f = self.fault.lock().unwrap();
            match *f {
                Some((at, fault)) if at == n => f.take().map(|_| fault),
                _ => None,
            }
        };
        let last = request.messages.last().cloned();
        let id = format!("call_{n}");
        let args = if fault == Some(ModelFault::InvalidToolArguments) {
            "{not json".to_owned()
        } else {
            json!({"n": n}).to_string()
        };
        let mut chunks = Vec::new();
        if request.tools.is_empty() {
            chunks.extend(text_chunks("summary of the work"));
        } else {
            match last {
                Some(m) if m.role == Role::User && m.text() == "go" => {
                    chunks.extend(text_chunks("let me work"));
                    chunks.extend(tool_chunks(0, &id, &args));
                }
                Some(m) if m.role == Role::Tool => chunks.extend(tool_chunks(0, &id, &args)),
                Some(m) => chunks.extend(text_chunks(&format!("ok: {}", m.text()))),
                None => chunks.extend(text_chunks("ok: nothing")),
            }
        }
        let err = |what: &str| Err(ModelError::new(ModelErrorKind::Stream, what.to_owned()));
        match fault {
            Some(ModelFault::ErrorBeforeFirstChunk) => {
                chunks = vec![Err(ModelError::new(ModelErrorKind::Server, "upstream 503"))];
            }
            Some(ModelFault::ErrorMidText) => {
                chunks.truncate(1);
                chunks.push(err("connection reset mid-text"));
            }
            Some(ModelFault::ErrorMidToolCall) => {
                let first_call = chunks
                    .iter()
                    .position(|c| matches!(c, Ok(ModelChunk::ToolCall { .. })))
                    .unwrap_or(0);
                chunks.truncate(first_call + 1);
                chunks.push(err("connection reset mid-tool-call"));
            }
            Some(ModelFault::Panic) => {
                return Box::pin(futures::stream::poll_fn(
                    |_| -> std::task::Poll<Option<Result<ModelChunk, ModelError>>> {
                        panic!("provider bug")
                    },
                ));
            }
            Some(ModelFault::InvalidToolArguments) | None => {
                chunks.push(Ok(ModelChunk::Finish(FinishReason::Stop)));
            }
        }
        let stream = futures::stream::iter(chunks);
        match self.chunk_delay {
            None => Box::pin(stream),
            Some(d) => Box::pin(stream.then(move |c| async move {
                tokio::time::sleep(d).await;
                c
            })),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolFault {
    Panic,
    HangPastTimeout,
    Error,
    InvalidOutput,
}

/// Output no tool should return, which memory and the file store must still carry.
fn garbage() -> String {
    let mut s = String::from("\u{0}\u{1}\u{7f}{\"unterminated\": [\u{202e}\u{feff}\r\n");
    s.push_str(&"\u{fffd}🦀".repeat(8 * 1024));
    s
}

/// The `work` tool: emits a progress chunk, waits `delay`, answers; or fails once with
/// `fault`.
fn work_tool(fault: Option<ToolFault>, delay: Duration) -> FunctionTool {
    let pending = Arc::new(Mutex::new(fault));
    FunctionTool::with_context(
        "work",
        "Works on step n.",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        move |args, ctx| {
            let fault = pending.lock().unwrap().take();
            async move {
                ctx.emit("working");
                tokio::time::sleep(delay).await;
                match fault {
                    Some(ToolFault::Panic) => panic!("tool exploded"),
                    Some(ToolFault::HangPastTimeout) => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok("too late".to_owned())
                    }
                    Some(ToolFault::Error) => Err(ToolError::new("backend down")),
                    Some(ToolFault::InvalidOutput) => Ok(garbage()),
                    None => Ok(format!("done {}", args["n"])),
                }
            }
        },
    )
    // Faults land at every step, the tool's included: an idempotent tool is run again
    // after a dropped call (an at-most-once one would stop for a human instead).
    .idempotent()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HookFault {
    Error,
    Panic,
    HangPastTimeout,
}

/// Fails once, on the first event of its kind.
struct FaultHook {
    kind: EventKind,
    fault: HookFault,
    policy: FailurePolicy,
    fired: AtomicBool,
}

impl Hook for FaultHook {
    fn name(&self) -> &str {
        "fault"
    }
    fn interest(&self) -> Interest {
        Interest::only(self.kind)
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }
    async fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
        if self.fired.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match self.fault {
            HookFault::Error => Err(HookError::new("policy store unreachable")),
            HookFault::Panic => panic!("hook exploded"),
            HookFault::HangPastTimeout => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
        }
    }
}

/// Counts every event kind it sees (after an optional delay).
fn kind_logger(log: &Log, delay: Option<Duration>) -> FnHook {
    let log = log.clone();
    let hook = FnHook::new("kinds", move |e| {
        log.push(e.kind().to_string());
        Ok(())
    })
    .priority(1)
    .policy(FailurePolicy::Ignore);
    match delay {
        Some(d) => hook.delay(d),
        None => hook,
    }
}

/// A store that takes `delay` (tokio clock) before each load and save, so a drop
/// can land while the session is being loaded or saved.
struct SlowStore {
    inner: FileSessionStore,
    delay: Duration,
}

impl SessionStore for SlowStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.load(key).await
    }
    async fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected: u64,
    ) -> Result<u64, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.save(key, messages, expected).await
    }
}

/// One scenario: an agent with the plan model, the work tool and extra hooks, with or
/// without a file store.
struct Rig {
    agent: Agent,
    model: PlanModel,
    store: Option<(TempDir, FileSessionStore)>,
    log: Log,
}

struct Setup {
    model: PlanModel,
    tool: Option<ToolFault>,
    tool_delay: Duration,
    hooks: Vec<FaultHook>,
    hook_delay: Option<Duration>,
    store_delay: Option<Duration>,
    file_store: bool,
}

impl Setup {
    fn new(model: PlanModel) -> Self {
        Self {
            model,
            tool: None,
            tool_delay: Duration::ZERO,
            hooks: Vec::new(),
            hook_delay: None,
            store_delay: None,
            file_store: true,
        }
    }

    fn agent(&self, store: Option<&FileSessionStore>, log: &Log, hooks: Vec<FaultHook>) -> Agent {
        let mut b = Agent::builder()
            .model(self.model.clone())
            .without_global_hooks()
            .max_iters(2)
            .tool_timeout(Duration::from_secs(1))
            .toolkit(toolkit_with(vec![work_tool(self.tool, self.tool_delay)]))
            .hook(kind_logger(log, self.hook_delay));
        for h in hooks {
            b = b.hook(h);
        }
        match (store, self.store_delay) {
            (Some(s), Some(delay)) => {
                b = b.session_store(SlowStore {
                    inner: s.clone(),
                    delay,
                });
            }
            (Some(s), None) => b = b.session_store(s.clone()),
            (None, _) => {}
        }
        b.build().unwrap()
    }

    fn build(mut self) -> Rig {
        let store = self.file_store.then(|| {
            let dir = TempDir::new("faults");
            let store = FileSessionStore::open(dir.path()).unwrap();
            (dir, store)
        });
        let log = Log::default();
        let hooks = std::mem::take(&mut self.hooks);
        let agent = self.agent(store.as_ref().map(|(_, s)| s), &log, hooks);
        Rig {
            agent,
            model: self.model.clone(),
            store,
            log,
        }
    }
}

impl Rig {
    async fn go(&self) -> Result<Msg, Error> {
        self.agent
            .call_with(vec![Msg::user("go")], session("f"))
            .await
    }

    /// The post-conditions every fault must leave.
    async fn assert_recovers(&self) {
        let k = key("f");
        assert_memory_valid(&self.agent.messages(&k).await);
        if let Some((_, store)) = &self.store {
            assert_saved(&self.agent, store, &k).await;
        }
        let reply = self
            .agent
            .call_with(vec![Msg::user("again")], session("f"))
            .await
            .unwrap_or_else(|e| panic!("the call after the fault failed: {e}"));
        assert_eq!(reply.text(), "ok: again");
        let memory = self.agent.messages(&k).await;
        assert_memory_valid(&memory);
        if let Some((dir, store)) = &self.store {
            assert_eq!(assert_saved(&self.agent, store, &k).await, memory);
            // A new agent on the directory (a restarted process) continues.
            let restarted = Setup::new(self.model.clone()).agent(
                Some(&FileSessionStore::open(dir.path()).unwrap()),
                &Log::default(),
                Vec::new(),
            );
            assert_eq!(restarted.messages(&k).await, memory);
            let reply = restarted
                .call_with(vec![Msg::user("after restart")], session("f"))
                .await
                .unwrap();
            assert_eq!(reply.text(), "ok: after restart");
            assert_memory_valid(&restarted.messages(&k).await);
        }
    }
}

/// The event kinds the plan's call fires: all but compaction's, which fire only over a
/// context window (`agent::context_window` covers them).
fn loop_kinds() -> impl Iterator<Item = EventKind> {
    EventKind::ALL
        .into_iter()
        .filter(|k| !matches!(k, EventKind::PreCompact | EventKind::PostCompact))
}

#[tokio::test(start_paused = true)]
async fn the_fault_free_plan_fires_every_event_kind_but_error() {
    let rig = Setup::new(PlanModel::default()).build();
    let reply = rig.go().await.unwrap();
    assert_eq!(reply.text(), "summary of the work");
    let seen: BTreeSet<String> = rig.log.entries().into_iter().collect();
    let all: BTreeSet<String> = loop_kinds()
        .filter(|k| *k != EventKind::Error)
        .map(|k| k.to_string())
        .collect();
    assert_eq!(seen, all);
    rig.assert_recovers().await;
}

#[tokio::test(start_paused = true)]
async fn model_stream_faults_give_a_typed_model_error_and_the_session_recovers() {
    let cases = [
        (1, ModelFault::ErrorBeforeFirstChunk),
        (1, ModelFault::ErrorMidText),
        (1, ModelFault::ErrorMidToolCall),
        (2, ModelFault::ErrorBeforeFirstChunk),
        (2, ModelFault::ErrorMidToolCall),
        (3, ModelFault::ErrorBeforeFirstChunk),
        (3, ModelFault::ErrorMidText),
        (1, ModelFault::Panic),
        (2, ModelFault::Panic),
    ];
    let mut injected = 0;
    for file_store in [false, true] {
        for (at, fault) in cases {
            let mut setup = Setup::new(PlanModel::with_fault(at, fault));
            setup.file_store = file_store;
            let rig = setup.build();
            let err = rig.go().await.expect_err("a model fault fails the call");
            assert_eq!(err.kind(), ErrorKind::Model, "{fault:?}@{at}: {err}");
            injected += 1;
            rig.assert_recovers().await;
        }
    }
    eprintln!("faults injected: model stream = {injected}");
}

#[tokio::test(start_paused = true)]
async fn tool_faults_become_error_results_and_the_call_still_answers() {
    let mut injected = 0;
    for file_store in [false, true] {
        for fault in [
            ToolFault::Panic,
            ToolFault::HangPastTimeout,
            ToolFault::Error,
            ToolFault::InvalidOutput,
        ] {
            let mut setup = Setup::new(PlanModel::default());
            setup.tool = Some(fault);
            setup.file_store = file_store;
            let rig = setup.build();
            let reply = rig.go().await.unwrap();
            assert_eq!(reply.text(), "summary of the work");
            let stored = rig.agent.messages(&key("f")).await;
            let first = stored
                .iter()
                .flat_map(|m| m.tool_results())
                .next()
                .cloned()
                .unwrap();
            let expect = match fault {
                ToolFault::Panic => "panicked: tool exploded",
                ToolFault::HangPastTimeout => "timed out after 1s",
                ToolFault::Error => "failed: backend down",
                ToolFault::InvalidOutput => "\u{202e}",
            };
            assert!(
                first.content.contains(expect),
                "{fault:?}: {}",
                first.content
            );
            assert_eq!(
                first.is_error,
                fault != ToolFault::InvalidOutput,
                "{fault:?}"
            );
            injected += 1;
            rig.assert_recovers().await;
        }
        // The model sends arguments that are not JSON: an error result, not a crash.
        let mut setup = Setup::new(PlanModel::with_fault(1, ModelFault::InvalidToolArguments));
        setup.file_store = file_store;
        let rig = setup.build();
        rig.go().await.unwrap();
        let stored = rig.agent.messages(&key("f")).await;
        let first = stored.iter().flat_map(|m| m.tool_results()).next().cloned();
        let first = first.unwrap();
        assert!(
            first.is_error && first.content.contains("Invalid arguments"),
            "{first:?}"
        );
        injected += 1;
        rig.assert_recovers().await;
    }
    eprintln!("faults injected: tool = {injected}");
}

#[tokio::test(start_paused = true)]
async fn hook_faults_follow_the_failure_policy_at_every_event_kind() {
    let mut injected = 0;
    for file_store in [false, true] {
        for kind in loop_kinds() {
            for fault in [
                HookFault::Error,
                HookFault::Panic,
                HookFault::HangPastTimeout,
            ] {
                for policy in [FailurePolicy::Abort, FailurePolicy::Ignore] {
                    // The Error event needs an error: the model fails on its first call.
                    let model = if kind == EventKind::Error {
                        PlanModel::with_fault(1, ModelFault::ErrorBeforeFirstChunk)
                    } else {
                        PlanModel::default()
                    };
                    let mut setup = Setup::new(model);
                    setup.file_store = file_store;
                    setup.hooks.push(FaultHook {
                        kind,
                        fault,
                        policy,
                        fired: AtomicBool::new(false),
                    });
                    let rig = setup.build();
                    let result = rig.go().await;
                    let what = format!("{fault:?} in {kind} under {policy:?}");
                    if kind == EventKind::Error {
                        let err = result.expect_err(&what);
                        assert_eq!(err.kind(), ErrorKind::Model, "{what}: the original error");
                    } else if policy == FailurePolicy::Abort && !kind.is_notification() {
                        let err = result.expect_err(&what);
                        assert_eq!(err.kind(), ErrorKind::Hook, "{what}");
                        assert_eq!(err.event_kind(), Some(kind), "{what}");
                        let expected = match fault {
                            HookFault::Error => HookFailureKind::Error,
                            HookFault::Panic => HookFailureKind::Panic,
                            HookFault::HangPastTimeout => HookFailureKind::Timeout,
                        };
                        assert_eq!(err.hook_failure(), Some(expected), "{what}");
                    } else {
                        let reply = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(reply.text(), "summary of the work", "{what}");
                    }
                    injected += 1;
                    rig.assert_recovers().await;
                }
            }
        }
    }
    eprintln!("faults injected: hook = {injected}");
}

/// What a call had done when it was dropped: the last event its hooks finished, or
/// `start` (loading the session, or in the first hook). `after PostCall` is a drop
/// while the session is being saved.
fn phase(log: &Log) -> String {
    log.entries()
        .last()
        .map_or_else(|| "start".to_owned(), |k| format!("after {k}"))
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_at_every_await_point_leaves_a_valid_saved_session() {
    let mut phases = BTreeSet::new();
    let mut drops = 0;
    let mut completed = false;
    for file_store in [true, false] {
        for polls in 1.. {
            let mut setup =
                Setup::new(PlanModel::default().with_chunk_delay(Duration::from_millis(3)));
            setup.tool_delay = Duration::from_millis(5);
            setup.hook_delay = Some(Duration::from_millis(2));
            setup.store_delay = Some(Duration::from_millis(3));
            setup.file_store = file_store;
            let rig = setup.build();
            let mut call = Box::pin(rig.go());
            let mut done = false;
            for i in 0..polls {
                if futures::poll!(call.as_mut()).is_ready() {
                    done = true;
                    break;
                }
                if i + 1 < polls {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            if done {
                completed = true;
                break;
            }
            phases.insert(phase(&rig.log));
            drop(call);
            drops += 1;
            rig.assert_recovers().await;
            assert!(polls < 2000, "the plan never completed");
        }
    }
    assert!(completed);
    let mut expected: BTreeSet<String> = loop_kinds()
        .filter(|k| *k != EventKind::Error)
        .map(|k| format!("after {k}"))
        .collect();
    expected.insert("start".to_owned());
    assert_eq!(phases, expected, "a drop landed after every step");
    eprintln!(
        "faults injected: dropped call = {drops} (phases: {})",
        phases.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_queued_behind_another_never_touches_the_session() {
    let dir = TempDir::new("queued");
    let store = FileSessionStore::open(dir.path()).unwrap();
    let model = PlanModel::default();
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .max_iters(2)
        .toolkit(toolkit_with(vec![work_tool(
            None,
            Duration::from_millis(50),
        )]))
        .session_store(store.clone())
        .build()
        .unwrap();
    let mut first = Box::pin(agent.call_with(vec![Msg::user("go")], session("q")));
    assert!(futures::poll!(first.as_mut()).is_pending());
    let mut queued = Box::pin(agent.call_with(vec![Msg::user("queued")], session("q")));
    assert!(futures::poll!(queued.as_mut()).is_pending());
    drop(queued);
    first.await.unwrap();
    let stored = assert_saved(&agent, &store, &key("q")).await;
    assert!(stored.iter().all(|m| m.text() != "queued"));
    let reply = agent
        .call_with(vec![Msg::user("next")], session("q"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "ok: next");
}
