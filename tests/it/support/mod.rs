//! The one support module of the integration tests; test modules import helpers from
//! here (or from their group's folder), never from a sibling test module.
//!
//! - this file: a recording hook, closure hooks, a few tools, agent builders, memory
//!   checks, and the one temporary directory ([`TempDir`]);
//! - [`server`]: the one "needs a server" check — a missing server prints a visible
//!   `SKIPPED: <test> needs <service> (…)` line, and fails the test under `CI=true`;
//! - [`worker`]: the one child-process mechanism — re-running this test binary on exactly
//!   one (usually `#[ignore]`d) worker test, and killing children with SIGKILL;
//! - [`subagents`], [`capture`], [`rng`], [`crash`], `mcp`: declarations and delegation
//!   calls, captured tracing output, a tiny deterministic PRNG, what the crash tests'
//!   workers write, the hostile MCP server;
//! - [`refund`]: the refund scenario of the recorded real run (shared with
//!   `examples/record_refund.rs`, which records it).
//!
//! Property tests keep proptest's default failure persistence (`SourceParallel`): the
//! seeds of `tests/it/<group>/<file>.rs` are in `tests/proptest-regressions/<group>/
//! <file>.txt`, the one regressions folder.

pub mod capture;
pub mod crash;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod refund;
pub mod rng;
pub mod server;
pub mod subagents;
pub mod worker;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::hooks::{ToolGuardConfig, ToolGuardHook};
use rein::*;
use serde_json::{Value, json};

/// A shared, ordered log.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn count(&self, s: &str) -> usize {
        self.entries().iter().filter(|e| e.as_str() == s).count()
    }
}

/// Records `"{label}:{EventKind}"` for every event it receives.
pub struct Recorder {
    pub label: String,
    pub priority: i32,
    pub interest: Interest,
    pub log: Log,
}

impl Recorder {
    pub fn new(label: &str, priority: i32, log: &Log) -> Self {
        Self {
            label: label.to_owned(),
            priority,
            interest: Interest::ALL,
            log: log.clone(),
        }
    }

    pub fn interest(mut self, interest: Interest) -> Self {
        self.interest = interest;
        self
    }
}

impl Hook for Recorder {
    fn name(&self) -> &str {
        &self.label
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn interest(&self) -> Interest {
        self.interest
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        self.log.push(format!("{}:{}", self.label, event.kind()));
        Ok(())
    }
}

type HookFn = dyn Fn(&mut HookEvent) -> Result<(), HookError> + Send + Sync;

/// A hook from a synchronous closure, with configurable settings.
pub struct FnHook {
    pub name: String,
    pub priority: i32,
    pub interest: Interest,
    pub policy: FailurePolicy,
    pub timeout: Option<Duration>,
    pub delay: Option<Duration>,
    pub f: Box<HookFn>,
}

impl FnHook {
    pub fn new(
        name: &str,
        f: impl Fn(&mut HookEvent) -> Result<(), HookError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_owned(),
            priority: 100,
            interest: Interest::ALL,
            policy: FailurePolicy::Abort,
            timeout: None,
            delay: None,
            f: Box::new(f),
        }
    }
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }
    pub fn on(mut self, kind: EventKind) -> Self {
        self.interest = Interest::only(kind);
        self
    }
    pub fn policy(mut self, p: FailurePolicy) -> Self {
        self.policy = p;
        self
    }
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
    /// Sleeps this long before running the closure.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }
}

impl Hook for FnHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn interest(&self) -> Interest {
        self.interest
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        (self.f)(event)
    }
}

pub fn add_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"]
    })
}

/// `add(a, b)`; logs `"add:{a}+{b}"` when it runs.
pub fn add_tool(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new("add", "Adds two numbers.", add_schema(), move |args| {
        let log = log.clone();
        async move {
            let a = args["a"].as_f64().unwrap_or_default();
            let b = args["b"].as_f64().unwrap_or_default();
            log.push(format!("add:{a}+{b}"));
            Ok(format!("{}", a + b))
        }
    })
}

pub fn toolkit_with(tools: Vec<FunctionTool>) -> Toolkit {
    let mut t = Toolkit::new();
    for tool in tools {
        t.register(tool).unwrap();
    }
    t
}

/// A builder without global hooks, so tests never see each other's state. Delegation
/// is offered as `agent_spawn` ([`DelegationStyle::Spawn`]): the scripted delegation
/// calls of the tests name it (the default style is tested in
/// `subagent::tool_per_subagent`).
pub fn builder(model: &ScriptedModel) -> AgentBuilder {
    Agent::builder()
        .model(model.clone())
        .without_global_hooks()
        .delegation_style(DelegationStyle::Spawn)
}

pub fn session(key: &str) -> RunContext {
    RunContext::new().with_session_id(key)
}

pub fn key(session: &str) -> SessionKey {
    SessionKey::new(None, session)
}

/// Asserts the conversation invariant: every tool use has exactly one result, after
/// it; no result without a use.
pub fn assert_memory_valid(messages: &[Msg]) {
    let mut open: Vec<String> = Vec::new();
    let mut seen_results = std::collections::HashSet::new();
    for m in messages {
        assert_ne!(m.role, Role::System, "system message stored in memory");
        for r in m.tool_results() {
            assert!(
                seen_results.insert(r.id.clone()),
                "two results for {}",
                r.id
            );
            let pos = open.iter().position(|id| *id == r.id);
            assert!(pos.is_some(), "result {} without a preceding use", r.id);
            open.remove(pos.unwrap());
        }
        for u in m.tool_uses() {
            open.push(u.id.clone());
        }
    }
    // Calls the effect journal holds (started, or settled and not yet recorded) stay
    // open at the end on purpose: the next call on the session replays, re-runs or
    // surfaces them.
    if let Some(last) = messages.iter().rev().find(|m| m.role == Role::Assistant) {
        let journal = last.metadata.get(rein::agent::JOURNAL_KEY);
        open.retain(|id| journal.and_then(|j| j.get(id)).is_none());
    }
    assert!(
        open.is_empty(),
        "tool uses without results: {open:?} in {messages:?}"
    );
}

/// The tool results (id, is_error, text) the model was sent in request `n`.
pub fn results_in_request(model: &ScriptedModel, n: usize) -> Vec<(String, bool, String)> {
    model.requests()[n]
        .messages
        .iter()
        .flat_map(|m| m.tool_results().into_iter().cloned().collect::<Vec<_>>())
        .map(|r| (r.id.clone(), r.is_error, r.content.clone()))
        .collect()
}

/// `submitRefund(amount, order_id?, channel?, ...)`: logs `"refund:{args}"` (the JSON
/// it received) and returns a ticket. `amount` may be a number or a numeric string.
pub fn refund_tool(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "submitRefund",
        "Files a refund request for human review.",
        json!({
            "type": "object",
            "properties": {
                "amount": {"type": ["number", "string"]},
                "order_id": {"type": "string"}
            },
            "required": ["amount"]
        }),
        move |args| {
            let log = log.clone();
            async move {
                log.push(format!("refund:{args}"));
                Ok("refund request R-1 filed for review".to_string())
            }
        },
    )
}

/// `queryOrder(order_id)`: logs `"query:{order_id}"`; the result holds a phone number.
pub fn query_tool(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "queryOrder",
        "Looks an order up.",
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
        move |args| {
            let log = log.clone();
            async move {
                let id = args["order_id"].as_str().unwrap_or("?").to_owned();
                log.push(format!("query:{id}"));
                Ok(format!("order {id}: shipped; contact 13800138000"))
            }
        },
    )
}

/// `slow(ms)`: sleeps `ms` milliseconds on the tokio clock.
pub fn slow_tool() -> FunctionTool {
    FunctionTool::new(
        "slow",
        "Sleeps.",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
        |args| async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(format!("slept {ms}"))
        },
    )
}

/// The last message of a stored conversation.
pub async fn last_stored(agent: &Agent, session: &str) -> Msg {
    agent.messages(&key(session)).await.last().cloned().unwrap()
}

/// A model that calls `tool` with `args` once, then answers `text`.
pub fn tool_then_text(tool: &str, args: Value, text: &str) -> ScriptedModel {
    ScriptedModel::new([
        ScriptedTurn::tool_call(tool, args),
        ScriptedTurn::text(text),
    ])
}

/// [`builder`] with these tools.
pub fn builder_with_tools(model: &ScriptedModel, tools: Vec<FunctionTool>) -> AgentBuilder {
    builder(model).toolkit(toolkit_with(tools))
}

/// A fresh directory under the system temp dir, removed on drop (`tempfile`): the one
/// temporary directory of the tests.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A fresh, empty directory named after `label`.
    pub fn new(label: &str) -> Self {
        Self(
            tempfile::Builder::new()
                .prefix(&format!("rein-{label}-"))
                .tempdir()
                .unwrap(),
        )
    }
    /// A scratch workspace: a fresh directory with an empty `subagents/` folder.
    pub fn workspace(label: &str) -> Self {
        let dir = Self::new(label);
        std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
        dir
    }
    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
    /// Writes `text` to `rel` (relative to the directory); returns the file's path.
    pub fn write(&self, rel: &str, text: &str) -> std::path::PathBuf {
        let path = self.path().join(rel);
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// A tool guard capping the `amount` argument at `max`.
pub fn refund_cap(max: u64) -> ToolGuardHook {
    let config: ToolGuardConfig = serde_json::from_value(json!({
        "enabled": true,
        "numeric_caps": {"amount": max}
    }))
    .unwrap();
    ToolGuardHook::new(config).unwrap()
}

/// Waits (bounded) until the store holds exactly the agent's in-memory conversation
/// of `key` — a cancelled call's save runs in a background task — then asserts the
/// stored conversation is valid and returns it.
pub async fn assert_saved(agent: &Agent, store: &impl SessionStore, key: &SessionKey) -> Vec<Msg> {
    let mut last = (Vec::new(), Vec::new());
    for _ in 0..2000 {
        let memory = agent.messages(key).await;
        let stored = store.load(key).await.unwrap();
        if stored.messages == memory && (stored.version > 0 || memory.is_empty()) {
            assert_memory_valid(&stored.messages);
            return stored.messages;
        }
        last = (memory, stored.messages);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "the store never caught up with memory for {key}:\nmemory: {:?}\nstored: {:?}",
        last.0, last.1
    );
}
