//! The agent builder: the one place agents — top-level and subagents — are assembled.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::delegation::{ChildBinding, DelegationPlan, HookToolFilter, ModelResolver, Template};
use super::memory::Sessions;
use super::{Agent, AgentInfo, AgentInner, Limits, SessionStore, StreamRelease};
use crate::error::{BuildError, BuildErrorKind};
use crate::hook::{HookChain, HookRegistry, HookSite, IntoHook, RegisteredHook};
use crate::model::{GenerateOptions, Model};
use crate::tool::Toolkit;
use crate::tool::mcp_config::McpServerConfig;
use crate::tool::policy::{
    Bound, DELEGATION_TOOL as SPAWN_TOOL, ToolsPolicy, check_allowlist, load_policy,
};
use crate::util::new_id;

/// Builds an [`Agent`]. Cloning a builder and building twice gives agents with
/// identical hooks and tools (and distinct ids): `build()` never accumulates state.
#[must_use]
pub struct AgentBuilder {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) model: Option<Arc<dyn Model>>,
    pub(crate) toolkit: Toolkit,
    pub(crate) hooks: Vec<RegisteredHook>,
    pub(crate) registries: Vec<HookRegistry>,
    pub(crate) global_hooks: bool,
    pub(crate) max_iters: u32,
    pub(crate) max_gotos: u32,
    pub(crate) options: GenerateOptions,
    pub(crate) tool_timeout: Duration,
    pub(crate) hook_timeout: Option<Duration>,
    pub(crate) limits: Limits,
    pub(crate) stream_release: StreamRelease,
    pub(crate) store: Option<Arc<dyn super::store::DynSessionStore>>,
    pub(crate) leasing: Option<super::lease::Leasing>,
    pub(crate) workspace: Option<PathBuf>,
    /// What the delegation layer declared (subagents, factories, the general-purpose
    /// subagent, a workspace's `subagents/`; for a child, its parent's registry).
    pub(crate) delegation: Option<Box<dyn DelegationPlan>>,
    pub(crate) hook_tool_filter: Option<HookToolFilter>,
    pub(crate) model_resolver: Option<ModelResolver>,
    pub(crate) max_depth: u32,
    pub(crate) child: Option<ChildBinding>,
    pub(crate) trail: bool,
    pub(crate) record_content: bool,
    pub(crate) tool_labels: Option<Arc<HashSet<String>>>,
    /// MCP servers declared in code, in declaration order.
    pub(crate) mcp_servers: Vec<(String, McpServerConfig)>,
}

impl Clone for AgentBuilder {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            name: self.name.clone(),
            sys_prompt: self.sys_prompt.clone(),
            model: self.model.clone(),
            toolkit: self.toolkit.copy(),
            hooks: self.hooks.clone(),
            registries: self.registries.clone(),
            global_hooks: self.global_hooks,
            max_iters: self.max_iters,
            max_gotos: self.max_gotos,
            options: self.options.clone(),
            tool_timeout: self.tool_timeout,
            hook_timeout: self.hook_timeout,
            limits: self.limits,
            stream_release: self.stream_release,
            store: self.store.clone(),
            leasing: self.leasing.clone(),
            workspace: self.workspace.clone(),
            delegation: self.delegation.as_ref().map(|p| p.clone_plan()),
            hook_tool_filter: self.hook_tool_filter.clone(),
            model_resolver: self.model_resolver.clone(),
            max_depth: self.max_depth,
            child: self.child.clone(),
            trail: self.trail,
            record_content: self.record_content,
            tool_labels: self.tool_labels.clone(),
            mcp_servers: self.mcp_servers.clone(),
        }
    }
}

impl Default for AgentBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field("tools", &self.toolkit.names())
            .field("hooks", &self.hooks.len())
            .field("delegation", &self.delegation)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// See [`Agent::builder`].
    pub fn new() -> Self {
        Self {
            id: None,
            name: "agent".to_owned(),
            sys_prompt: None,
            model: None,
            toolkit: Toolkit::new(),
            hooks: Vec::new(),
            registries: Vec::new(),
            global_hooks: true,
            max_iters: 10,
            max_gotos: 3,
            options: GenerateOptions::default(),
            tool_timeout: Duration::from_secs(300),
            hook_timeout: None,
            limits: Limits::default(),
            stream_release: StreamRelease::Immediate,
            store: None,
            leasing: None,
            workspace: None,
            delegation: None,
            hook_tool_filter: None,
            model_resolver: None,
            max_depth: 3,
            child: None,
            trail: false,
            record_content: false,
            tool_labels: None,
            mcp_servers: Vec::new(),
        }
    }

    /// The agent's name (default `"agent"`); set on its assistant messages.
    pub fn name(mut self, s: impl Into<String>) -> Self {
        self.name = s.into();
        self
    }

    /// A fixed agent id (default: generated, unique per build).
    pub fn id(mut self, s: impl Into<String>) -> Self {
        self.id = Some(s.into());
        self
    }

    /// The system prompt, prepended to every model request (never stored). A blank
    /// prompt means none.
    pub fn sys_prompt(mut self, s: impl Into<String>) -> Self {
        self.sys_prompt = Some(s.into());
        self
    }

    /// The model (required).
    pub fn model(mut self, m: impl Model) -> Self {
        self.model = Some(Arc::new(m));
        self
    }

    /// The tools. The agent takes its own copy at `build()` (instances are shared).
    pub fn toolkit(mut self, t: Toolkit) -> Self {
        self.toolkit = t;
        self
    }

    /// The toolkit set so far. In a [`SubagentFactory::configure`](crate::SubagentFactory::configure), these are the tools
    /// the child inherits: narrow them with [`Toolkit::filtered`] (which shares the
    /// instances) and pass the result to [`AgentBuilder::toolkit`]; a different instance
    /// under a name the parent can call fails the spawn.
    pub fn current_toolkit(&self) -> &Toolkit {
        &self.toolkit
    }

    /// Adds a hook — a [`Hook`](crate::Hook) or [`SyncHook`](crate::SyncHook) value, or an
    /// `Arc` of one (the same `Arc` added twice, here or through a registry, runs once
    /// per event).
    pub fn hook<M>(mut self, h: impl IntoHook<M>) -> Self {
        self.hooks.push(h.into_registered().0);
        self
    }

    /// Also takes the hooks of this registry, read at `build()`.
    pub fn hooks_from(mut self, registry: &HookRegistry) -> Self {
        self.registries.push(registry.clone());
        self
    }

    /// Does not take the hooks of [`HookRegistry::global`] (taken by default).
    pub fn without_global_hooks(mut self) -> Self {
        self.global_hooks = false;
        self
    }

    /// Maximum reasoning steps per call before the summary step (default 10, at
    /// least 1).
    pub fn max_iters(mut self, n: u32) -> Self {
        self.max_iters = n;
        self
    }

    /// Maximum consecutive `goto_reasoning` redos (default 3). One more fails the call
    /// with [`ErrorKind::GotoLimit`](crate::ErrorKind::GotoLimit).
    pub fn max_gotos(mut self, n: u32) -> Self {
        self.max_gotos = n;
        self
    }

    /// Default generation options, shown to `PreReasoning` hooks as the effective
    /// options.
    pub fn generate_options(mut self, o: GenerateOptions) -> Self {
        self.options = o;
        self
    }

    /// Timeout for one tool call unless the tool sets its own (default 300 s; must be
    /// greater than zero).
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.tool_timeout = d;
        self
    }

    /// Most tool calls of one model turn that run (default 64, at least 1). Calls past
    /// the limit are refused before any hook sees them: each gets an error result
    /// telling the model to call fewer tools at once, recorded in the decision trail
    /// as [`DecisionKind::ToolCallRejected`](crate::DecisionKind::ToolCallRejected).
    pub fn max_tool_calls_per_turn(mut self, n: usize) -> Self {
        self.limits.max_tool_calls_per_turn = n;
        self
    }

    /// Most concurrency-safe tool calls of one turn that run at the same time (default
    /// 16, at least 1); the others wait for a slot, results stay in call order.
    pub fn tool_concurrency(mut self, n: usize) -> Self {
        self.limits.tool_concurrency = n;
        self
    }

    /// Largest tool result, in bytes, that reaches memory and the model (default
    /// 1 MiB, at least 1). A longer result is cut on a character boundary and ends
    /// with a marker saying how many bytes the tool returned; `PostActing` hooks see
    /// the cut result, and the cut is recorded in the decision trail as
    /// [`DecisionKind::ToolResultTruncated`](crate::DecisionKind::ToolResultTruncated).
    pub fn max_tool_result_bytes(mut self, n: usize) -> Self {
        self.limits.max_tool_result_bytes = n;
        self
    }

    /// When [`Agent::stream`] callers see a model turn's text: as it streams (default)
    /// or only once the post-hooks accepted the turn. See [`StreamRelease`].
    pub fn stream_release(mut self, release: StreamRelease) -> Self {
        self.stream_release = release;
        self
    }

    /// Timeout for one hook invocation unless the hook sets its own (default none).
    pub fn hook_timeout(mut self, d: Duration) -> Self {
        self.hook_timeout = Some(d);
        self
    }

    /// Persists conversations in this store (default: none, conversations live in the
    /// agent's memory only). Pass an `Arc` to share one store between agents.
    ///
    /// - **Load**: a session is loaded on the first call on it in this agent (or by
    ///   [`Agent::messages`]); the agent then works on its cached copy.
    /// - **Save**: after every call — completed, failed (after the `Error` event) or
    ///   cancelled — including tool uses left pending by `stop_agent()`, so a new agent
    ///   on the same store (e.g. after a restart) resumes where this one stopped.
    /// - **Cancelled calls**: when a call's future is dropped, its memory guard gives
    ///   dangling tool uses error results and hands the save to a task spawned on the
    ///   current tokio runtime; the task waits for the session and saves unless a call
    ///   queued on it saved first. Without a runtime, the conversation stays marked
    ///   unsaved and the next call on the session saves it before it proceeds.
    /// - **Errors**: a load failure fails the call with
    ///   [`ErrorKind::Store`](crate::ErrorKind::Store) before any hook runs. A save
    ///   failure after an otherwise successful call fails it with `ErrorKind::Store` (the
    ///   conversation, reply included, stays in memory and is saved by the next call);
    ///   after a failed call the original error is returned and the save error logged.
    ///   A version conflict (another writer saved the session) is never overwritten: the
    ///   next call reloads the stored session.
    ///
    /// Replaces an earlier [`AgentBuilder::leased_session_store`] (leasing is then
    /// off).
    pub fn session_store(mut self, store: impl SessionStore) -> Self {
        self.store = Some(Arc::new(store));
        self.leasing = None;
        self
    }

    /// A predicate every hook-contributed tool name must pass before it is installed,
    /// on this agent and on its subagents (before the allowlist and `tools.json`
    /// checks). Default: accept all.
    pub fn hook_tool_filter(mut self, f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.hook_tool_filter = Some(Arc::new(f));
        self
    }

    /// Resolves subagent `model` names to models (default: none resolve, so children
    /// use this agent's model).
    pub fn model_resolver(
        mut self,
        f: impl Fn(&str) -> Option<Arc<dyn Model>> + Send + Sync + 'static,
    ) -> Self {
        self.model_resolver = Some(Arc::new(f));
        self
    }

    /// Maximum delegation depth (default 3): an agent at this depth gets no delegation
    /// tool.
    pub fn max_depth(mut self, n: u32) -> Self {
        self.max_depth = n;
        self
    }

    /// Records the decision trail of every call on
    /// [`CallOutcome::decisions`](crate::CallOutcome) (default off; calls also record
    /// while a `tracing` subscriber listens to target `rein::decision`). Inherited by
    /// subagents.
    pub fn decision_trail(mut self, on: bool) -> Self {
        self.trail = on;
        self
    }

    /// Records message contents, tool arguments and results on spans, and previews in
    /// decision digests (default off: they may hold personal data). Inherited by
    /// subagents.
    pub fn record_content(mut self, on: bool) -> Self {
        self.record_content = on;
        self
    }

    /// With feature `metrics`: tool names reported as metric labels as they are;
    /// every other tool is reported as `other` (default: all names as they are).
    pub fn metric_tool_labels<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.tool_labels = Some(Arc::new(names.into_iter().map(Into::into).collect()));
        self
    }

    /// Declares an MCP server in code (feature `mcp`): its tools join this agent's base
    /// tools as `mcp__<id>__<tool>` (see [`crate::mcp`]) when the agent is built with
    /// [`AgentBuilder::build_async`], and are bounded like every other tool.
    ///
    /// The id must be 1-32 characters from `[A-Za-z0-9_.-]`, without `__`, not ending in
    /// `_`, and unique among this builder's and `tools.json`'s servers; otherwise
    /// `build_async` fails with [`BuildErrorKind::Mcp`].
    #[cfg(feature = "mcp")]
    pub fn mcp_server(mut self, id: impl Into<String>, config: McpServerConfig) -> Self {
        self.mcp_servers.push((id.into(), config));
        self
    }

    /// Builds the agent.
    ///
    /// An agent whose builder or workspace `tools.json` declares MCP servers must be built
    /// with `build_async()` (feature `mcp`), which connects them first.
    ///
    /// # Errors
    /// - [`BuildErrorKind::MissingModel`] without a model;
    /// - [`BuildErrorKind::InvalidConfig`] for `max_iters(0)` or a zero tool timeout;
    /// - [`BuildErrorKind::InvalidHook`] when a hook's `validate()` fails;
    /// - [`BuildErrorKind::Tool`] when a surviving hook tool's name is taken, its schema
    ///   is invalid, or a tool is named like the delegation tool;
    /// - [`BuildErrorKind::Workspace`] for a workspace folder that does not exist, a
    ///   dangling, unreadable or malformed `tools.json`, or a broken subagent file
    ///   (naming file, line and key);
    /// - [`BuildErrorKind::InvalidDeclaration`] for duplicate subagent ids or an
    ///   allowlist naming a tool this agent cannot call;
    /// - [`BuildErrorKind::Mcp`] when MCP servers are declared: without the feature `mcp`
    ///   (the message says it is off), or with it (the message points to `build_async`);
    /// - [`BuildErrorKind::InvalidConfig`] when a subagent's builder (through a
    ///   [`SubagentFactory`](crate::SubagentFactory)) declares MCP servers: only the top-level agent can.
    pub fn build(self) -> Result<Agent, BuildError> {
        self.build_with(None, false)
    }

    /// `build()`; `preloaded` is the already-loaded workspace policy, `mcp_ready` says the
    /// declared MCP servers are connected and their tools are in the toolkit.
    /// Builds with the workspace policy already loaded (`preloaded`) and MCP tools
    /// already registered (`mcp_ready`), as `build_async` does.
    pub(crate) fn build_with(
        self,
        preloaded: Option<Option<Arc<ToolsPolicy>>>,
        mcp_ready: bool,
    ) -> Result<Agent, BuildError> {
        let Some(model) = self.model.clone() else {
            return Err(BuildError::new(
                BuildErrorKind::MissingModel,
                format!(
                    "agent `{}` has no model: call AgentBuilder::model",
                    self.name
                ),
            ));
        };
        if self.max_iters == 0 {
            return Err(BuildError::new(
                BuildErrorKind::InvalidConfig,
                "max_iters must be at least 1",
            ));
        }
        for (value, what) in [
            (
                self.limits.max_tool_calls_per_turn,
                "max_tool_calls_per_turn",
            ),
            (self.limits.tool_concurrency, "tool_concurrency"),
            (self.limits.max_tool_result_bytes, "max_tool_result_bytes"),
        ] {
            if value == 0 {
                return Err(BuildError::new(
                    BuildErrorKind::InvalidConfig,
                    format!("{what} must be at least 1"),
                ));
            }
        }
        if self.tool_timeout.is_zero() {
            return Err(BuildError::new(
                BuildErrorKind::InvalidConfig,
                "tool_timeout must be greater than zero",
            ));
        }
        if let Some(l) = &self.leasing {
            l.check()?;
        }

        // The bound: workspace policy, and for a child its allowlist and its parent's
        // tools.
        let (policy, prepared) = match &self.child {
            Some(c) => {
                let prepared = match &self.delegation {
                    Some(plan) => plan.prepare(None)?,
                    None => None,
                };
                (c.policy.clone(), prepared)
            }
            None => {
                let policy = match (preloaded, &self.workspace) {
                    (Some(policy), _) => policy,
                    (None, Some(ws)) => load_policy(ws)?,
                    (None, None) => None,
                };
                if !mcp_ready {
                    check_no_mcp(&self.mcp_servers, policy.as_deref())?;
                }
                let dir = self.workspace.as_ref().map(|ws| ws.join("subagents"));
                let prepared = match &self.delegation {
                    Some(plan) => plan.prepare(dir)?,
                    None => None,
                };
                (policy, prepared)
            }
        };
        let bound = Bound {
            own_policy: self.child.as_ref().and_then(|c| c.own_policy.as_deref()),
            allow: self
                .child
                .as_ref()
                .map(|c| c.allow.as_slice())
                .unwrap_or_default(),
            policy: policy.as_deref(),
            callable: self.child.as_ref().map(|c| &*c.callable),
        };
        if let Some(c) = &self.child {
            check_allowlist(&self.name, &c.allow, &c.callable)?;
            if !self.mcp_servers.is_empty() {
                return Err(BuildError::new(
                    BuildErrorKind::InvalidConfig,
                    format!(
                        "subagent `{}` declares MCP servers; only the top-level agent can \
                         (its MCP tools are inherited through the bound)",
                        self.name
                    ),
                ));
            }
        }

        // Base tools: filtered into a new registry, never removed, so a toolkit that
        // forbids deletion is bounded all the same.
        let base_tools = self.toolkit.filtered(|name| bound.permits(name));
        let mut toolkit = base_tools.copy();

        // Hooks.
        let mut registered = self.hooks.clone();
        for registry in &self.registries {
            registered.extend(registry.snapshot());
        }
        if self.global_hooks {
            registered.extend(HookRegistry::global().snapshot());
        }
        let chain = HookChain::build(registered, self.hook_timeout)?;

        // Hook tools: collected apart, filtered, and only the survivors installed.
        for entry in chain.entries() {
            for tool in entry.hook().tools() {
                let tool_name = tool.name().to_owned();
                let filter_ok = self.hook_tool_filter.as_ref().is_none_or(|f| f(&tool_name));
                if !filter_ok || !bound.permits(&tool_name) || tool_name == SPAWN_TOOL {
                    tracing::debug!(
                        hook = &*entry.name,
                        tool = %tool_name,
                        agent = %self.name,
                        "hook-contributed tool rejected by the tool bound; not installed"
                    );
                    continue;
                }
                toolkit.register(tool).map_err(|e| {
                    BuildError::tool(
                        &format!("hook `{}` contributes tool `{tool_name}`", entry.name),
                        e,
                    )
                })?;
            }
        }

        let depth = self.child.as_ref().map_or(0, |c| c.parent.depth + 1);
        let info = Arc::new(AgentInfo {
            id: self.id.clone().unwrap_or_else(|| new_id("agent")),
            name: self.name.clone(),
            parent_id: self.child.as_ref().map(|c| c.parent.id.clone()),
            depth,
        });
        let path: Arc<str> = match &self.child {
            Some(c) => Arc::clone(&c.path),
            None => Arc::from(self.name.as_str()),
        };

        // Delegation: a top-level agent with declarations, or a child whose allowlist
        // names the delegation tool; never at the maximum depth, never against policy.
        let wants_spawn = match &self.child {
            None => true,
            Some(c) => c.allow.iter().any(|t| t == SPAWN_TOOL),
        };
        let delegation = match prepared {
            Some(prepared)
                if wants_spawn && depth < self.max_depth && bound.permits(SPAWN_TOOL) =>
            {
                if toolkit.contains(SPAWN_TOOL) {
                    return Err(BuildError::new(
                        BuildErrorKind::Tool,
                        format!(
                            "tool name `{SPAWN_TOOL}` is reserved for delegation on agents with subagents"
                        ),
                    ));
                }
                let mut callable: HashSet<String> = toolkit.names().into_iter().collect();
                callable.insert(SPAWN_TOOL.to_owned());
                let template = Template {
                    info: Arc::clone(&info),
                    path: Arc::clone(&path),
                    sys_prompt: self.sys_prompt.clone(),
                    model: Arc::clone(&model),
                    resolver: self.model_resolver.clone(),
                    base_tools,
                    callable: Arc::new(callable),
                    hooks: chain
                        .entries()
                        .iter()
                        .filter(|e| e.propagate)
                        .map(|e| e.registered.clone())
                        .collect(),
                    options: self.options.clone(),
                    policy: policy.clone(),
                    workspace: match &self.child {
                        Some(c) => c.workspace.clone(),
                        None => self.workspace.clone(),
                    },
                    hook_tool_filter: self.hook_tool_filter.clone(),
                    max_depth: self.max_depth,
                    max_iters_default: self.max_iters,
                    max_gotos: self.max_gotos,
                    tool_timeout: self.tool_timeout,
                    hook_timeout: self.hook_timeout,
                    trail: self.trail,
                    record_content: self.record_content,
                    tool_labels: self.tool_labels.clone(),
                    limits: self.limits,
                    stream_release: self.stream_release,
                };
                let (delegation, spawn) = prepared.install(template, self.child.is_none())?;
                toolkit
                    .register(spawn)
                    .map_err(|e| BuildError::tool("the delegation tool", e))?;
                Some(delegation)
            }
            _ => None,
        };

        let tool_names: Arc<[String]> = toolkit.names().into();
        let tool_schemas = toolkit.schemas();
        if self.child.is_none() {
            // Subagents' tools are a subset of these (the bound): checking here covers
            // every agent of the tree.
            let mut tools = tool_schemas.clone();
            if let Some(d) = &delegation {
                tools = d.schemas(&tools);
            }
            let site = HookSite {
                agent: &info,
                tools: &tools,
            };
            for entry in chain.entries() {
                entry
                    .hook()
                    .validate_on(&site)
                    .map_err(|e| BuildError::invalid_hook(&entry.name, e.to_string()))?;
            }
        }
        Ok(Agent {
            inner: Arc::new(AgentInner {
                info,
                model,
                tool_schemas,
                toolkit,
                tool_names,
                chain,
                sys_prompt: self.sys_prompt,
                options: self.options,
                max_iters: self.max_iters,
                max_gotos: self.max_gotos,
                tool_timeout: self.tool_timeout,
                limits: self.limits,
                hold_deltas: self.stream_release == StreamRelease::AfterAcceptance,
                sessions: Sessions::default(),
                store: self.store,
                leasing: self.leasing,
                delegation,
                trail: self.trail,
                record_content: self.record_content,
                tool_labels: self.tool_labels,
            }),
        })
    }
}

/// Fails when MCP servers are declared but not connected (sync `build()`, or no `mcp`
/// feature): they are never silently ignored.
fn check_no_mcp(
    code: &[(String, McpServerConfig)],
    policy: Option<&ToolsPolicy>,
) -> Result<(), BuildError> {
    let mut ids: Vec<&str> = code.iter().map(|(id, _)| id.as_str()).collect();
    if let Some(p) = policy {
        ids.extend(p.mcp_servers.keys().map(String::as_str));
    }
    if ids.is_empty() {
        return Ok(());
    }
    let list = ids
        .iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = if cfg!(feature = "mcp") {
        format!(
            "MCP servers {list} are declared: build the agent with `AgentBuilder::build_async()`, \
             which connects them (the synchronous `build()` cannot)"
        )
    } else {
        format!(
            "MCP servers {list} are declared, but rein was built without the `mcp` feature: \
             enable it (features = [\"mcp\"]) or remove the servers"
        )
    };
    Err(BuildError::new(BuildErrorKind::Mcp, message))
}
