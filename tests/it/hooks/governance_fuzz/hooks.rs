//! The generated hooks, wrappers that record what library hooks saw, and the shared
//! observation log every hook, tool and the model write to.

use std::sync::{Arc, Mutex};

use rein::*;
use serde_json::{Value, json};

use super::case::{HookSpec, Kind};

/// One agent as its events showed it.
#[derive(Clone, Debug)]
pub struct AgentRec {
    pub name: String,
    pub parent: Option<String>,
    pub depth: u32,
}

/// A tool call as a `PreActing` hook was shown it, or as a tool received it.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRec {
    pub agent: String,
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// A recorded approval: by the approver (await) or by the human (stop-for-human).
#[derive(Clone, Debug)]
pub struct ApprovalRec {
    pub call: CallRec,
    /// `Some(args)` when it approved these arguments (an edit, or approval of the call
    /// as shown), `None` for approval by id only.
    pub approved: Option<Value>,
}

#[derive(Default)]
pub struct Obs {
    pub agents: std::collections::HashMap<String, AgentRec>,
    /// (hook label, call as shown).
    pub seen: Vec<(String, CallRec)>,
    /// (agent id, call id) of every call a hook denied.
    pub denied: Vec<(String, String)>,
    /// Tool calls that ran, with the tool instance's tag.
    pub executed: Vec<(CallRec, &'static str)>,
    pub approvals: Vec<ApprovalRec>,
    /// (child agent id, task) of every child run.
    pub child_runs: Vec<(String, String)>,
    /// (agent id, call ids) of every turn stopped for a human.
    pub stopped_for_human: Vec<(String, Vec<String>)>,
    /// (agent id, run id) of each `stopped_for_human` entry, by index.
    pub stopped_runs: Vec<(String, String)>,
    /// Tool calls the model emitted.
    pub emitted: usize,
    /// Ids the model put on the wire.
    pub model_ids: Vec<String>,
    /// Invariant violations seen where a panic would be caught by the runtime.
    pub violations: Vec<String>,
    /// Requests any model of the tree received, in total and by agent name.
    pub requests: usize,
    pub requests_by: std::collections::HashMap<String, usize>,
    /// Tool calls (by the runtime's id) the model made with an untrusted `lookup` result
    /// in its request, and without one, as later requests of the same history show.
    pub emitted_tainted: std::collections::HashSet<String>,
    pub emitted_clean: std::collections::HashSet<String>,
    /// `refund` and `note` calls the model emitted with such a result in its request.
    pub tainted_acting: usize,
}

pub type Shared = Arc<Mutex<Obs>>;

/// A generated hook with a unique label.
pub struct Gov {
    pub label: String,
    pub spec: HookSpec,
    pub obs: Shared,
}

pub fn interest_of(kind: &Kind) -> Interest {
    match kind {
        Kind::Probe => Interest::of([
            EventKind::PreCall,
            EventKind::PreActing,
            EventKind::PostReasoning,
            EventKind::Error,
        ]),
        Kind::DenyTool(_)
        | Kind::DenyArg
        | Kind::Rewrite
        | Kind::Flip
        | Kind::Rename(..)
        | Kind::Cap(_) => Interest::only(EventKind::PreActing),
        Kind::Goto | Kind::StopReasoning => Interest::only(EventKind::PostReasoning),
        Kind::StopActing(_) => Interest::only(EventKind::PostActing),
        Kind::Fail { on, .. } => Interest::only(*on),
    }
}

/// Valid arguments for `tool` (what a renaming hook writes).
pub fn canonical_args(tool: &str) -> Value {
    match tool {
        "refund" => json!({"amount": 5000}),
        "note" => json!({"text": "renamed"}),
        _ => json!({"q": "renamed"}),
    }
}

/// Records the call a `PreActing` hook is shown.
pub fn record_seen(obs: &Shared, label: &str, event: &HookEvent) {
    if let HookEvent::PreActing(e) = event {
        let u = e.tool_use();
        obs.lock().unwrap().seen.push((
            label.to_owned(),
            CallRec {
                agent: e.agent().id.clone(),
                id: u.id.clone(),
                name: u.name.clone(),
                input: u.input.clone(),
            },
        ));
    }
}

/// Records a denial after a hook ran.
pub fn record_denied(obs: &Shared, event: &HookEvent) {
    if let HookEvent::PreActing(e) = event
        && e.is_denied()
    {
        let key = (e.agent().id.clone(), e.tool_use().id.clone());
        let mut obs = obs.lock().unwrap();
        if !obs.denied.contains(&key) {
            obs.denied.push(key);
        }
    }
}

impl Gov {
    fn handle(&self, event: &mut HookEvent) -> Result<(), HookError> {
        record_seen(&self.obs, &self.label, event);
        let result = self.act(event);
        record_denied(&self.obs, event);
        result
    }

    fn act(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match (&self.spec.kind, event) {
            (Kind::Probe, HookEvent::PreCall(e)) => {
                let a = e.agent().clone();
                let mut obs = self.obs.lock().unwrap();
                obs.agents.insert(
                    a.id.clone(),
                    AgentRec {
                        name: a.name.clone(),
                        parent: a.parent_id.clone(),
                        depth: a.depth,
                    },
                );
                if a.parent_id.is_some() {
                    let task = e.messages().first().map(Msg::text).unwrap_or_default();
                    obs.child_runs.push((a.id.clone(), task));
                }
            }
            (Kind::Probe, HookEvent::PostReasoning(e)) if e.is_stop_requested() => {
                if let Some(Value::Array(ids)) =
                    e.message().metadata.get(rein::agent::PENDING_CALL_IDS_KEY)
                {
                    let ids = ids.iter().filter_map(|v| v.as_str().map(str::to_owned));
                    let rec = (e.agent().id.clone(), ids.collect());
                    let run = (e.agent().id.clone(), e.context().run_id().to_owned());
                    let mut obs = self.obs.lock().unwrap();
                    obs.stopped_for_human.push(rec);
                    obs.stopped_runs.push(run);
                }
            }
            // A call that stopped for a human and then failed (an aborting hook at
            // `PostCall`) abandons its waiting calls: they are marked not executed, and
            // nothing waits any more.
            (Kind::Probe, HookEvent::Error(e)) => {
                let run = (e.agent().id.clone(), e.context().run_id().to_owned());
                let mut obs = self.obs.lock().unwrap();
                if let Some(i) = obs.stopped_runs.iter().position(|r| *r == run) {
                    obs.stopped_runs.remove(i);
                    obs.stopped_for_human.remove(i);
                }
            }
            (Kind::DenyTool(t), HookEvent::PreActing(e)) if e.tool_use().name == *t => {
                e.deny(format!("{} denies {t}", self.label));
            }
            (Kind::DenyArg, HookEvent::PreActing(e)) => {
                let u = e.tool_use();
                let amount = u.input["amount"].as_f64().unwrap_or(0.0);
                let q = u.input["q"].as_str().unwrap_or("");
                if (u.name == "refund" && amount > 100.0)
                    || (u.name == "lookup" && q.contains("secret"))
                {
                    e.deny(format!("{} denies these arguments", self.label));
                }
            }
            (Kind::Rewrite | Kind::Flip, HookEvent::PreActing(e))
                if e.tool_use().name == "lookup" =>
            {
                let mut u = e.tool_use().clone();
                u.input["q"] = match self.spec.kind {
                    Kind::Flip => json!(format!("{}!", u.input["q"].as_str().unwrap_or(""))),
                    _ => json!("rewritten"),
                };
                e.set_tool_use(u);
            }
            (Kind::Rename(from, to), HookEvent::PreActing(e)) if e.tool_use().name == *from => {
                let mut u = e.tool_use().clone();
                u.name = (*to).to_owned();
                u.input = canonical_args(to);
                e.set_tool_use(u);
            }
            (Kind::Cap(max), HookEvent::PreActing(e)) if e.tool_use().name == "refund" => {
                let amount = e.tool_use().input["amount"].as_f64().unwrap_or(0.0);
                if amount > f64::from(*max) {
                    let mut u = e.tool_use().clone();
                    u.input["amount"] = json!(max);
                    e.set_tool_use(u);
                }
            }
            (Kind::Goto, HookEvent::PostReasoning(e)) if e.message().text().contains("BAD") => {
                e.goto_reasoning(vec![Msg::user("Do not say BAD.")]);
            }
            (Kind::StopReasoning, HookEvent::PostReasoning(e)) if e.message().has_tool_uses() => {
                e.stop_agent();
            }
            (Kind::StopActing(t), HookEvent::PostActing(e)) if e.tool_use().name == *t => {
                e.stop_agent();
            }
            (Kind::Fail { panic, .. }, _) => {
                if *panic {
                    panic!("{} panics on purpose", self.label);
                }
                return Err(HookError::new(format!("{} fails on purpose", self.label)));
            }
            _ => {}
        }
        Ok(())
    }

    fn policy(&self) -> FailurePolicy {
        match self.spec.kind {
            Kind::Fail { policy, .. } => policy,
            _ => FailurePolicy::Abort,
        }
    }
}

/// A generated hook dispatched synchronously.
pub struct SyncGov(pub Gov);
/// A generated hook dispatched as a future (it yields once first).
pub struct AsyncGov(pub Gov);

/// The settings both dispatch flavours take from the spec.
macro_rules! gov_settings {
    () => {
        fn name(&self) -> &str {
            &self.0.label
        }
        fn priority(&self) -> i32 {
            self.0.spec.priority
        }
        fn interest(&self) -> Interest {
            interest_of(&self.0.spec.kind)
        }
        fn failure_policy(&self) -> FailurePolicy {
            self.0.policy()
        }
        fn propagate_to_subagents(&self) -> bool {
            self.0.spec.propagate
        }
    };
}

impl SyncHook for SyncGov {
    gov_settings!();
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        self.0.handle(event)
    }
}

impl Hook for AsyncGov {
    gov_settings!();
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        tokio::task::yield_now().await;
        self.0.handle(event)
    }
}

/// A library hook (approval, masking) that also records what it was shown.
pub struct LibGov<H> {
    pub label: String,
    pub inner: H,
    pub obs: Shared,
}

impl<H: Hook> Hook for LibGov<H> {
    fn name(&self) -> &str {
        &self.label
    }
    fn priority(&self) -> i32 {
        self.inner.priority()
    }
    fn interest(&self) -> Interest {
        self.inner.interest()
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.inner.failure_policy()
    }
    fn timeout(&self) -> Option<std::time::Duration> {
        self.inner.timeout()
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        record_seen(&self.obs, &self.label, event);
        let result = self.inner.on_event(event).await;
        record_denied(&self.obs, event);
        result
    }
}

/// The sync library hook (masking), recording likewise.
impl SyncHook for LibGov<rein::hooks::MaskingHook> {
    fn name(&self) -> &str {
        &self.label
    }
    fn priority(&self) -> i32 {
        self.inner.priority()
    }
    fn interest(&self) -> Interest {
        self.inner.interest()
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.inner.failure_policy()
    }
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        record_seen(&self.obs, &self.label, event);
        let result = self.inner.on_event(event);
        record_denied(&self.obs, event);
        result
    }
}

/// A builder that takes hooks (an agent's or a declaration's).
pub trait Hooked: Sized {
    fn with_hook<M>(self, h: impl IntoHook<M>) -> Self;
}

impl Hooked for AgentBuilder {
    fn with_hook<M>(self, h: impl IntoHook<M>) -> Self {
        self.hook(h)
    }
}

impl Hooked for SubagentDeclarationBuilder {
    fn with_hook<M>(self, h: impl IntoHook<M>) -> Self {
        self.hook(h)
    }
}

/// Adds the hook for `spec`, labelled `label`, sync or async as the spec says.
pub fn install<B: Hooked>(b: B, label: String, spec: &HookSpec, obs: &Shared) -> B {
    let gov = Gov {
        label,
        spec: spec.clone(),
        obs: Arc::clone(obs),
    };
    if spec.sync {
        b.with_hook(SyncGov(gov))
    } else {
        b.with_hook(AsyncGov(gov))
    }
}
