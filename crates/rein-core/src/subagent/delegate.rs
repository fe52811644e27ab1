//! The per-agent delegation state, the `agent_spawn` tool and the one function that
//! builds children.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::narrow::{self, Granted};
use super::plan::ChildPlan;
use super::registry::Registry;
use super::spec::{
    check_child_policy_entries, check_child_root, child_policy, isolated_root, nested_dir,
    read_agents_md, root_stamp,
};
use super::{GENERAL_PURPOSE, SPAWN_TOOL, SubagentDeclaration, SubagentFactory};
use crate::agent::DelegationStyle;
use crate::agent::{
    Agent, AgentBuilder, AgentEvent, CallOutcome, ChildBinding, Narrowing, PENDING_CALLS_KEY,
    SessionKey, StopReason, Template,
};
use crate::error::BuildError;
use crate::message::Msg;
use crate::model::GenerateOptions;
use crate::tool::policy::check_allowlist;
use crate::tool::{
    EffectClass, Tool, ToolCapabilities, ToolContext, ToolError, ToolSchema, expects,
};
use tokio::sync::mpsc::UnboundedSender;

/// Where a subagent comes from.
#[derive(Clone)]
pub(crate) enum Declared {
    Decl(Arc<SubagentDeclaration>),
    Factory(Arc<dyn SubagentFactory>),
    GeneralPurpose,
}

impl Declared {
    pub(crate) fn description(&self) -> String {
        match self {
            Declared::Decl(d) => d.description.clone(),
            Declared::Factory(f) => f.declaration().description.clone(),
            Declared::GeneralPurpose => GENERAL_PURPOSE_DESCRIPTION.to_owned(),
        }
    }

    fn allowlist(&self) -> Vec<String> {
        self.declaration()
            .map(|d| d.tools.clone())
            .unwrap_or_default()
    }

    /// The declaration, `None` for the built-in general-purpose subagent (always shared).
    fn declaration(&self) -> Option<&SubagentDeclaration> {
        match self {
            Declared::Decl(d) => Some(d),
            Declared::Factory(f) => Some(f.declaration()),
            Declared::GeneralPurpose => None,
        }
    }
}

pub(crate) const GENERAL_PURPOSE_DESCRIPTION: &str =
    "A general-purpose agent with the same tools as you, for a self-contained task.";

/// The delegation state of one agent: its template and its built children.
pub(crate) struct Delegation {
    pub(crate) registry: Arc<Registry>,
    template: Template,
    children: Mutex<HashMap<String, (u64, Agent)>>,
    /// Ids of delegation calls suspended because their subagent stopped with calls
    /// waiting for a human: when the parent's session resumes, the same call runs
    /// again and resumes the subagent instead of sending the task anew. Oldest first;
    /// bounded by [`MAX_SUSPENDED`].
    suspended: Mutex<std::collections::VecDeque<String>>,
}

/// Most suspended delegation calls remembered per delegating agent (a suspension
/// whose session never resumes is dropped first). A forgotten suspension is safe: the
/// resumed call then sends the task again, and the subagent's waiting calls are
/// marked not executed.
const MAX_SUSPENDED: usize = 4096;

impl Delegation {
    pub(crate) fn new(registry: Arc<Registry>, template: Template) -> Self {
        Self {
            registry,
            template,
            children: Mutex::new(HashMap::new()),
            suspended: Mutex::default(),
        }
    }

    /// How this agent offers delegation (its config's, inherited by its children).
    pub(crate) fn style(&self) -> DelegationStyle {
        self.template.config.delegation_style
    }

    /// Remembers a suspended delegation call.
    fn suspend(&self, tool_use_id: &str) {
        let mut s = self
            .suspended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if s.len() >= MAX_SUSPENDED {
            s.pop_front();
        }
        s.push_back(tool_use_id.to_owned());
    }

    /// Whether this delegation call was suspended (forgetting it).
    fn resumes(&self, tool_use_id: &str) -> bool {
        let mut s = self
            .suspended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match s.iter().position(|id| id == tool_use_id) {
            Some(i) => {
                s.remove(i);
                true
            }
            None => false,
        }
    }

    /// Forgets, in every child built so far, the conversation a spawn from the parent
    /// session `key` used (`<child id>@<session>`, same user), and — through
    /// [`Agent::forget_session`] — every conversation below it, down the whole tree.
    pub(crate) fn forget_children(&self, key: &SessionKey) {
        let children: Vec<(String, Agent)> = self
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, (_, agent))| (id.clone(), agent.clone()))
            .collect();
        for (id, child) in children {
            let child_key = SessionKey {
                user_id: key.user_id.clone(),
                session_id: child_session(&id, &key.session_id),
            };
            child.forget_session(&child_key);
        }
    }

    /// Checks that no known declaration's allowlist names a tool this agent cannot call,
    /// and that every isolated workspace declared in code or a static file has a
    /// readable, valid `tools.json` (or none) and `AGENTS.md`, and valid nested
    /// declarations (see [`check_child_root`]).
    pub(crate) fn validate(&self) -> Result<(), BuildError> {
        let t = &self.template;
        let mut seen = HashSet::new();
        for (id, declared) in self.registry.all() {
            check_allowlist(&id, &declared.allowlist(), &t.callable)?;
            let Some(decl) = declared.declaration() else {
                continue;
            };
            if let Some(root) = isolated_root(&id, decl.workspace.as_ref(), t.workspace.as_deref())?
            {
                // The child sits at depth + 1 and delegates while below the maximum.
                let levels = t.config.max_depth.saturating_sub(t.info.depth + 1);
                check_child_root(&id, &root, &decl.tools, levels, &mut seen)?;
                let own = child_policy(&id, &root)?;
                check_child_policy_entries(
                    &root,
                    own.as_deref(),
                    &t.callable,
                    t.policy.as_deref(),
                )?;
            }
        }
        Ok(())
    }

    /// The schemas to offer this step: the delegation tool's description lists the
    /// subagents known now.
    pub(crate) fn schemas(&self, base: &[ToolSchema]) -> Vec<ToolSchema> {
        self.registry.refresh();
        let listing = self.registry.listing();
        base.iter()
            .map(|s| {
                if s.name != SPAWN_TOOL {
                    return s.clone();
                }
                let mut description = SPAWN_DESCRIPTION.to_owned();
                description.push_str("\n\nAvailable subagents:");
                for (id, desc) in &listing {
                    let _ = write!(description, "\n- {id}: {desc}");
                }
                ToolSchema {
                    description,
                    parameters: offered_parameters(&s.parameters, &listing),
                    ..s.clone()
                }
            })
            .collect()
    }

    /// What `agent_spawn` expects, with the subagents known now as the choices of
    /// `agent_id` (the text every error result of the tool ends with).
    fn expects(&self) -> String {
        let listing = self.registry.listing();
        expects(
            SPAWN_TOOL,
            &offered_parameters(&spawn_parameters(), &listing),
        )
    }

    /// The child for `id`, built on first use and rebuilt when its file changed.
    /// The child `id`, built (or reused) exactly as a delegation to it would: for
    /// [`Agent::subagent`](crate::Agent::subagent).
    pub(crate) fn built_child(&self, id: &str) -> Result<Agent, ToolError> {
        self.child(id)
    }

    fn child(&self, id: &str) -> Result<Agent, ToolError> {
        let declared = match self.registry.lookup(id) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                return Err(ToolError::new(format!(
                    "subagent `{id}` cannot be spawned: its declaration is invalid: {e}. \
                     Choose another subagent: {}",
                    self.expects()
                )));
            }
            None => {
                let ids: Vec<String> = self
                    .registry
                    .listing()
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                return Err(ToolError::new(format!(
                    "unknown subagent `{id}`; valid agent ids: [{}]. {}",
                    ids.join(", "),
                    self.expects()
                )));
            }
        };
        let (declared, version) = declared;
        // A child built from an isolated root is rebuilt when that root's policy or
        // prompt changed, so it never runs on a policy that no longer holds.
        let root = declared.declaration().and_then(|d| {
            isolated_root(id, d.workspace.as_ref(), self.template.workspace.as_deref())
                .ok()
                .flatten()
        });
        let version = root_stamp(version, root.as_deref());
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((v, agent)) = children.get(id)
            && *v == version
        {
            return Ok(agent.clone());
        }
        let agent = self
            .build_child(id, &declared)
            .map_err(|e| ToolError::new(format!("subagent `{id}` could not be built: {e}")))?;
        children.insert(id.to_owned(), (version, agent.clone()));
        Ok(agent)
    }

    /// The one function that builds every child, whatever declared it: the parent's
    /// inheritable config, narrowed by the declaration (and a factory), bound by the
    /// allowlist, `tools.json` and the parent's tools.
    fn build_child(&self, id: &str, declared: &Declared) -> Result<Agent, BuildError> {
        let t = &self.template;
        let inherited = &t.config;
        let general;
        let (decl, factory): (&SubagentDeclaration, Option<&Arc<dyn SubagentFactory>>) =
            match declared {
                Declared::Decl(d) => (d, None),
                Declared::Factory(f) => (f.declaration(), Some(f)),
                Declared::GeneralPurpose => {
                    general = SubagentDeclaration {
                        name: GENERAL_PURPOSE.to_owned(),
                        description: GENERAL_PURPOSE_DESCRIPTION.to_owned(),
                        tools: Vec::new(),
                        sys_prompt: inherited.sys_prompt.clone(),
                        steps: inherited.max_iters,
                        model: None,
                        temperature: None,
                        top_p: None,
                        hooks: Vec::new(),
                        workspace: None,
                        budget: None,
                    };
                    (&general, None)
                }
            };
        check_allowlist(id, &decl.tools, &t.callable)?;
        let model = decl.model.as_ref().and_then(|name| {
            let resolved = inherited.model_resolver.as_ref().and_then(|r| r(name));
            if resolved.is_none() {
                tracing::warn!(subagent = id, model = %name, "model name did not resolve; using the parent's model");
            }
            resolved
        });
        let root = isolated_root(id, decl.workspace.as_ref(), t.workspace.as_deref())?;
        let own_dir = nested_dir(root.as_deref(), &decl.tools);
        let own_policy = match &root {
            Some(root) => {
                let own = child_policy(id, root)?;
                check_child_policy_entries(root, own.as_deref(), &t.callable, t.policy.as_deref())?;
                own
            }
            None => None,
        };
        let agents_md = match &root {
            Some(root) => read_agents_md(root)?,
            None => None,
        };
        let mut prompt = agents_md
            .or_else(|| decl.sys_prompt.clone())
            .unwrap_or_default();
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        let _ = write!(
            prompt,
            "You are the subagent `{id}`, working on a task delegated by `{}`. \
             Complete the task and reply with its result.",
            t.info.name
        );
        let config = inherited.clone().narrow_to(Narrowing {
            name: id.to_owned(),
            sys_prompt: prompt,
            model,
            options: GenerateOptions {
                temperature: decl.temperature,
                top_p: decl.top_p,
                ..Default::default()
            },
            max_iters: decl.steps,
            hooks: decl.hooks.clone(),
            budget: decl.budget.clone(),
        });
        let binding = ChildBinding {
            parent: Arc::clone(&t.info),
            path: Arc::from(format!("{}/{id}", t.path)),
            allow: decl.tools.clone(),
            callable: Arc::clone(&t.callable),
            policy: t.policy.clone(),
            own_policy,
            workspace: root.or_else(|| t.workspace.clone()),
        };
        let mut b = AgentBuilder::child(config, binding);
        if let Some(f) = factory {
            let granted = Granted::of(&b);
            b = f.configure(b);
            narrow::enforce(id, granted, inherited, &t.callable, &mut b)?;
        }
        b.config.delegation = Some(Arc::new(ChildPlan::new(
            Arc::clone(&self.registry),
            own_dir,
        )));
        b.build()
    }
}

/// The session of the child `id` spawned from the parent session `parent_session`.
fn child_session(id: &str, parent_session: &str) -> String {
    format!("{id}@{parent_session}")
}

const SPAWN_DESCRIPTION: &str = "Delegate a self-contained task to a subagent and wait for its \
     reply. Give `agent_id` (one of the subagents below) and `task` (everything the subagent \
     needs to know; it does not see this conversation). Optional `timeout_seconds` cancels the \
     subagent after that many seconds. Other properties are ignored.";

/// The declared arguments of `agent_spawn`. Unknown properties are accepted and ignored
/// (no `additionalProperties: false`): admission enforces the declared schema, and small
/// models add fields such as `parameters` and then retry a rejected call unchanged.
fn spawn_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "agent_id": {"type": "string", "description": "The subagent to delegate to."},
            "task": {"type": "string", "description": "The task, self-contained."},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 3600,
                                "description": "Cancel the subagent after this many seconds."}
        },
        "required": ["agent_id", "task"]
    })
}

/// The parameters offered to the model: `agent_id` enumerates the subagents known now
/// (the tool itself checks the id, naming the valid ones, so a subagent added since the
/// tool was registered is accepted).
fn offered_parameters(base: &Value, listing: &[(String, String)]) -> Value {
    let mut parameters = base.clone();
    if let Some(agent_id) = parameters
        .get_mut("properties")
        .and_then(|p| p.get_mut("agent_id"))
        .and_then(Value::as_object_mut)
    {
        let ids = listing.iter().map(|(id, _)| Value::String(id.clone()));
        agent_id.insert("enum".to_owned(), Value::Array(ids.collect()));
    }
    parameters
}

/// The delegation tool offered to an agent that has subagents.
pub(crate) struct SpawnTool {
    delegation: Arc<Delegation>,
}

impl SpawnTool {
    pub(crate) fn new(delegation: Arc<Delegation>) -> Self {
        Self { delegation }
    }

    async fn spawn(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let id = input["agent_id"].as_str().unwrap_or_default();
        let delegation = &self.delegation;
        delegate(delegation, id, &input, ctx, || delegation.expects()).await
    }
}

/// The argument `task` and the optional `timeout_seconds` of a delegation call.
fn task_of(input: &Value) -> (String, Option<Duration>) {
    let task = input["task"].as_str().unwrap_or_default().to_owned();
    let timeout = input
        .get("timeout_seconds")
        .and_then(Value::as_u64)
        .map(Duration::from_secs);
    (task, timeout)
}

/// One delegation: the task sent to the subagent `id` (built or reused), its events
/// forwarded to a streaming caller, its result (or its waiting calls) as the tool's
/// result. The one body behind `agent_spawn` and every `ask_<id>` tool; `expects` is
/// what the calling tool accepts, for its error results.
pub(super) async fn delegate(
    delegation: &Delegation,
    id: &str,
    input: &Value,
    ctx: ToolContext,
    expects: impl Fn() -> String,
) -> Result<String, ToolError> {
    let (task, timeout) = task_of(input);
    if task.trim().is_empty() {
        return Err(ToolError::new(format!(
            "`task` must not be empty. {}",
            expects()
        )));
    }
    let child = delegation.child(id)?;
    let parent = ctx.run();
    let session = child_session(id, parent.session_id());
    // The caller's context values (e.g. approval decisions) reach the subagent;
    // the parent run's own state does not.
    let mut child_ctx = parent.child_context(&session);
    // While this call records decisions, the subagent's reach it as they are made.
    if let Some(sink) = &ctx.decisions {
        child_ctx.forward_decisions_to(sink.clone());
    }
    // A call suspended on the subagent's waiting calls resumes the subagent.
    // Recorded in this process, or in the session's journal (by any replica).
    let resumes = delegation.resumes(ctx.tool_use_id());
    // The task was written by a model turn with the call's label: the subagent's
    // context starts from it.
    let input = if resumes || ctx.resume_child {
        Vec::new()
    } else {
        vec![Msg::user(task).with_label(ctx.call_label())]
    };
    let path = format!("{}/{id}", delegation.template.path);
    let run = async {
        match ctx
            .events
            .as_ref()
            .and_then(|s| s.get::<UnboundedSender<AgentEvent>>())
        {
            None => child.run_internal(input, child_ctx, None).await,
            Some(parent_tx) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let forward = async {
                    while let Some(event) = rx.recv().await {
                        let event = match event {
                            nested @ AgentEvent::Subagent { .. } => nested,
                            other => AgentEvent::Subagent {
                                path: path.clone(),
                                event: Box::new(other),
                            },
                        };
                        let _ = parent_tx.send(event);
                    }
                };
                let (result, ()) =
                    tokio::join!(child.run_internal(input, child_ctx, Some(tx)), forward);
                result
            }
        }
    };
    let result = match timeout {
        None => run.await,
        Some(limit) => match tokio::time::timeout(limit, run).await {
            Ok(r) => r,
            Err(_) => {
                return Err(ToolError::new(format!(
                    "status: timeout\nagent_id: {id}\nsubagent `{id}` did not finish within {}s and was cancelled",
                    limit.as_secs()
                )));
            }
        },
    };
    match result {
        Ok(outcome) => {
            // Everything the subagent saw shaped its reply.
            ctx.raise_result_label(outcome.reply.label());
            if let Some(waiting) = waiting_calls(delegation, &outcome)
                && ctx.suspend(waiting)
            {
                delegation.suspend(ctx.tool_use_id());
                return Ok(format!(
                    "status: waiting\nagent_id: {id}\nsession_id: {session}\n\nwaiting for a decision"
                ));
            }
            let status = match outcome.reason {
                StopReason::Final => "completed",
                StopReason::MaxIterations => "max_iterations",
                StopReason::BudgetExhausted => "budget_exhausted",
                _ => "stopped",
            };
            Ok(format!(
                "status: {status}\nagent_id: {id}\nsession_id: {session}\n\n{}",
                outcome.reply.text()
            ))
        }
        Err(e) => Err(ToolError::new(format!(
            "status: failed\nagent_id: {id}\nsubagent `{id}` failed: {e}"
        ))),
    }
}

/// The calls a subagent stopped on (waiting for a human), with their agent path
/// extended by this agent's name; `None` when it did not stop for that.
fn waiting_calls(delegation: &Delegation, outcome: &CallOutcome) -> Option<Vec<Value>> {
    if !matches!(
        outcome.reason,
        StopReason::ReasoningStopped | StopReason::SubagentStopped | StopReason::OutcomeUnknown
    ) {
        return None;
    }
    let Some(Value::Array(entries)) = outcome.reply.metadata.get(PENDING_CALLS_KEY) else {
        return None;
    };
    if entries.is_empty() {
        return None;
    }
    let me = &delegation.template.info.name;
    Some(
        entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(obj) = e.as_object_mut() {
                    let below = obj.get("agent").and_then(Value::as_str).unwrap_or("");
                    let path = format!("{me}/{below}");
                    obj.insert("agent".to_owned(), Value::String(path));
                }
                e
            })
            .collect(),
    )
}

impl Tool for SpawnTool {
    fn name(&self) -> &str {
        SPAWN_TOOL
    }

    fn description(&self) -> &str {
        SPAWN_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        spawn_parameters()
    }

    /// A delegation is journaled like any call with an effect: its subagent may run
    /// tools that must not run twice, and sending its task again would start them
    /// anew. A delegation whose outcome is unknown stops for a human; one suspended on
    /// its subagent's waiting calls resumes that subagent.
    /// Neither changes state nor sends anything out itself: the subagent's own calls
    /// are judged inside it, where its context starts from this call's label (its
    /// task carries it) and the inherited policy hooks run. Its result carries the
    /// label of everything the subagent saw.
    fn capabilities(&self) -> ToolCapabilities {
        ToolCapabilities::new().changes_state(false)
    }

    fn effect_class(&self) -> EffectClass {
        EffectClass::AtMostOnce
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        self.spawn(input, ctx).await
    }
}
