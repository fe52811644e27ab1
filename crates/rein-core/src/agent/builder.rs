//! The agent builder: a typed front for an [`AgentConfig`]. Its methods set fields
//! of the config; `build()` (in `assemble`) turns it into an agent. Children are built
//! with the same builder, from their parent's inherited config (see `config`).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::config::AgentConfig;
use super::delegation::ChildBinding;
use super::{Agent, AgentStream, SessionStore, StreamRelease};
use crate::error::BuildError;
#[cfg(doc)]
use crate::error::BuildErrorKind;
use crate::hook::{HookRegistry, IntoHook};
use crate::mcp::McpServerConfig;
use crate::model::{GenerateOptions, Model};
use crate::tool::Toolkit;

/// Builds an [`Agent`]. Cloning a builder and building twice gives agents with
/// identical hooks and tools (and distinct ids): `build()` never accumulates state.
///
/// The type parameter is the builder's build state, so that building an agent whose
/// MCP servers are not connected yet cannot be written: a builder is [`Ready`] (it has
/// [`AgentBuilder::build`]) until [`AgentBuilder::mcp_server`] declares a server, which
/// turns it into an `AgentBuilder<McpPending>` that only
/// `build_async` (`rein::mcp`) (which connects the servers) can build. Every other
/// method is available in both states.
///
/// ```
/// use rein::*;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tools = Toolkit::new();
/// tools.register(FunctionTool::new(
///     "lookup_order",
///     "Looks up an order.",
///     serde_json::json!({"type": "object", "properties": {"id": {"type": "string"}}}),
///     |args| async move { Ok(format!("order {} shipped", args["id"])) },
/// ))?;
/// let builder = Agent::builder()
///     .name("support")
///     .sys_prompt("You help customers with their orders.")
///     .model(ScriptedModel::new([ScriptedTurn::text("hello")]))
///     .toolkit(tools)
///     .max_iters(5)
///     .tool_timeout(Duration::from_secs(30));
/// let first = builder.clone().build()?;
/// let second = builder.build()?; // same settings, another id
/// assert_ne!(first.info().id, second.info().id);
/// assert_eq!(first.tool_names(), ["lookup_order"]);
/// # Ok(()) }
/// ```
#[must_use]
pub struct AgentBuilder<S = Ready> {
    pub(crate) config: AgentConfig,
    /// Set only when the delegation layer builds a child.
    pub(crate) child: Option<ChildBinding>,
    /// MCP servers declared in code, in declaration order (only in `McpPending`).
    pub(crate) mcp_servers: Vec<(String, McpServerConfig)>,
    state: PhantomData<fn() -> S>,
}

/// Build state of an [`AgentBuilder`] with nothing to connect: [`AgentBuilder::build`]
/// builds it (and, with feature `mcp`, `build_async` (`rein::mcp`), which also
/// connects MCP servers a workspace `tools.json` declares).
#[derive(Clone, Copy, Debug)]
pub enum Ready {}

/// Build state of an [`AgentBuilder`] that declares MCP servers in code
/// ([`AgentBuilder::mcp_server`]): only `build_async` (`rein::mcp`) builds it, after
/// connecting them.
#[derive(Clone, Copy, Debug)]
pub enum McpPending {}

impl<S> Clone for AgentBuilder<S> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            child: self.child.clone(),
            mcp_servers: self.mcp_servers.clone(),
            state: PhantomData,
        }
    }
}

impl Default for AgentBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> std::fmt::Debug for AgentBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.config.name)
            .field("tools", &self.config.toolkit.names())
            .field("hooks", &self.config.hooks.len())
            .field("delegation", &self.config.delegation)
            .field("workspace", &self.config.workspace)
            .field(
                "mcp_servers",
                &self
                    .mcp_servers
                    .iter()
                    .map(|(id, _)| id)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// See [`Agent::builder`].
    pub fn new() -> Self {
        Self::from_config(AgentConfig::default())
    }

    /// A builder holding `config` (how children are built).
    pub(crate) fn from_config(config: AgentConfig) -> Self {
        Self {
            config,
            child: None,
            mcp_servers: Vec::new(),
            state: PhantomData,
        }
    }
}

impl<S> AgentBuilder<S> {
    /// The agent's name (default `"agent"`); set on its assistant messages.
    pub fn name(mut self, s: impl Into<String>) -> Self {
        self.config.name = s.into();
        self
    }

    /// A fixed agent id (default: generated, unique per build).
    pub fn id(mut self, s: impl Into<String>) -> Self {
        self.config.id = Some(s.into());
        self
    }

    /// The system prompt, prepended to every model request (never stored). A blank
    /// prompt means none.
    pub fn sys_prompt(mut self, s: impl Into<String>) -> Self {
        self.config.sys_prompt = Some(s.into());
        self
    }

    /// The label of the call input (user messages and the results the application
    /// supplies) that carries none of its own ([`Msg::with_label`](crate::Msg::with_label)).
    /// Default [`Label::BOTTOM`](crate::Label::BOTTOM): the user is trusted and their
    /// input public. Set [`Label::UNTRUSTED`](crate::Label::UNTRUSTED) for an agent whose
    /// input comes from outside (an inbound e-mail, a public chat). See [`crate::label`].
    pub fn input_label(mut self, label: crate::label::Label) -> Self {
        self.config.input_label = label;
        self
    }

    /// The model (required).
    pub fn model(mut self, m: impl Model) -> Self {
        self.config.model = Some(Arc::new(m));
        self
    }

    /// The tools. The agent takes its own copy at `build()` (instances are shared).
    pub fn toolkit(mut self, t: Toolkit) -> Self {
        self.config.toolkit = t;
        self
    }

    /// The toolkit set so far. In a [`SubagentFactory::configure`](crate::SubagentFactory::configure), these are the tools
    /// the child inherits: narrow them with [`Toolkit::filtered`] (which shares the
    /// instances) and pass the result to [`AgentBuilder::toolkit`]; a different instance
    /// under a name the parent can call fails the spawn.
    pub fn current_toolkit(&self) -> &Toolkit {
        &self.config.toolkit
    }

    /// Adds a hook — a [`Hook`](crate::Hook) or [`SyncHook`](crate::SyncHook) value, or an
    /// `Arc` of one (the same `Arc` added twice, here or through a registry, runs once
    /// per event).
    pub fn hook<M>(mut self, h: impl IntoHook<M>) -> Self {
        self.config.hooks.push(h.into_registered().0);
        self
    }

    /// Also takes the hooks of this registry, read at `build()`.
    pub fn hooks_from(mut self, registry: &HookRegistry) -> Self {
        self.config.registries.push(registry.clone());
        self
    }

    /// Does not take the hooks of [`HookRegistry::global`] (taken by default).
    pub fn without_global_hooks(mut self) -> Self {
        self.config.global_hooks = false;
        self
    }

    /// Maximum reasoning steps per call before the summary step (default 10, at
    /// least 1).
    pub fn max_iters(mut self, n: u32) -> Self {
        self.config.max_iters = n;
        self
    }

    /// How structured-output calls ([`Agent::run_typed`](crate::Agent::run_typed)) ask
    /// for their answer (default [`OutputMode::Auto`](super::OutputMode::Auto): chosen
    /// per call from the model's capabilities and whether the agent offers tools).
    pub fn output_mode(mut self, mode: super::OutputMode) -> Self {
        self.config.output_mode = mode;
        self
    }

    /// The model's context window in tokens, for this agent (default: the model's
    /// [`ModelCapabilities::context_window`](crate::ModelCapabilities::context_window),
    /// usually unknown: no check). Every request is then checked against it before it
    /// is sent; see [`ContextPolicy`](super::ContextPolicy). Inherited by subagents. A
    /// window of 0 fails the build.
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.config.context_window = Some(tokens);
        self
    }

    /// What happens to a request over the context window (default
    /// [`ContextPolicy::Fail`](super::ContextPolicy::Fail)). Inherited by subagents.
    pub fn context_policy(mut self, policy: super::ContextPolicy) -> Self {
        self.config.context_policy = policy;
        self
    }

    /// How delegation to subagents is offered to the model (default
    /// [`DelegationStyle::ToolPerSubagent`](super::DelegationStyle::ToolPerSubagent):
    /// an `ask_<id>` tool per subagent; [`DelegationStyle::Spawn`](super::DelegationStyle::Spawn)
    /// is the one `agent_spawn` tool). Inherited by subagents that delegate.
    pub fn delegation_style(mut self, style: super::DelegationStyle) -> Self {
        self.config.delegation_style = style;
        self
    }

    /// Maximum consecutive `goto_reasoning` redos (default 3). One more fails the call
    /// with [`ErrorKind::GotoLimit`](crate::ErrorKind::GotoLimit).
    pub fn max_gotos(mut self, n: u32) -> Self {
        self.config.max_gotos = n;
        self
    }

    /// Default generation options, shown to `PreReasoning` hooks as the effective
    /// options.
    pub fn generate_options(mut self, o: GenerateOptions) -> Self {
        self.config.options = o;
        self
    }

    /// Timeout for one tool call unless the tool sets its own (default 300 s; must be
    /// greater than zero).
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.config.tool_timeout = d;
        self
    }

    /// Most tool calls of one model turn that run (default 64, at least 1). Calls past
    /// the limit are refused before any hook sees them: each gets an error result
    /// telling the model to call fewer tools at once, recorded in the decision trail
    /// as [`DecisionKind::ToolCallRejected`](crate::DecisionKind::ToolCallRejected).
    pub fn max_tool_calls_per_turn(mut self, n: usize) -> Self {
        self.config.limits.max_tool_calls_per_turn = n;
        self
    }

    /// Most concurrency-safe tool calls of one turn that run at the same time (default
    /// 16, at least 1); the others wait for a slot, results stay in call order.
    pub fn tool_concurrency(mut self, n: usize) -> Self {
        self.config.limits.tool_concurrency = n;
        self
    }

    /// Largest tool result, in bytes, that reaches memory and the model (default
    /// 1 MiB, at least 1). A longer result is cut on a character boundary and ends
    /// with a marker saying how many bytes the tool returned; `PostActing` hooks see
    /// the cut result, and the cut is recorded in the decision trail as
    /// [`DecisionKind::ToolResultTruncated`](crate::DecisionKind::ToolResultTruncated).
    pub fn max_tool_result_bytes(mut self, n: usize) -> Self {
        self.config.limits.max_tool_result_bytes = n;
        self
    }

    /// When [`Agent::stream`] callers see a model turn's text: as it streams (default)
    /// or only once the post-hooks accepted the turn. See [`StreamRelease`].
    pub fn stream_release(mut self, release: StreamRelease) -> Self {
        self.config.stream_release = release;
        self
    }

    /// Adds a transform every stream of this agent goes through ([`Agent::stream`]), in
    /// the order added: e.g. masking, which
    /// `MaskingHook::install` (`rein::hooks`) adds with its hook.
    /// [`Agent::stream_raw`] skips them. Default: none.
    pub fn stream_filter(
        mut self,
        filter: impl Fn(AgentStream) -> AgentStream + Send + Sync + 'static,
    ) -> Self {
        self.config.stream_filters.push(Arc::new(filter));
        self
    }

    /// How many recently opened sessions keep their conversation unpacked (default
    /// 16,384; 0: never pack). An agent holds every session's conversation in memory
    /// until [`Agent::forget_session`]; a conversation that no call, [`Agent::messages`]
    /// or [`Agent::set_messages`] opened during the last `n` openings of sessions is
    /// packed into one buffer: a few bytes per message beyond its text instead of a few
    /// hundred (`bench_report` measures both). The next call on a packed session
    /// unpacks it, which costs about what building its messages did: lower `n` to hold many idle sessions in less memory, raise it when more than `n`
    /// sessions take turns. Packing is lossless and invisible to hooks and stores:
    /// every reader sees the same messages. With a session store, an idle
    /// conversation that does not mirror the store (under leasing, after every call)
    /// is dropped instead: its next call reloads it anyway.
    pub fn hot_sessions(mut self, n: usize) -> Self {
        self.config.hot_sessions = n;
        self
    }

    /// Timeout for one hook invocation unless the hook sets its own (default none).
    pub fn hook_timeout(mut self, d: Duration) -> Self {
        self.config.hook_timeout = Some(d);
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
        self.config.store = Some(Arc::new(store));
        self.config.leasing = None;
        self
    }

    /// A predicate every hook-contributed tool name must pass before it is installed,
    /// on this agent and on its subagents (before the allowlist and `tools.json`
    /// checks). Default: accept all.
    pub fn hook_tool_filter(mut self, f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.config.hook_tool_filter = Some(Arc::new(f));
        self
    }

    /// Resolves subagent `model` names to models (default: none resolve, so children
    /// use this agent's model).
    pub fn model_resolver(
        mut self,
        f: impl Fn(&str) -> Option<Arc<dyn Model>> + Send + Sync + 'static,
    ) -> Self {
        self.config.model_resolver = Some(Arc::new(f));
        self
    }

    /// Maximum delegation depth (default 3): an agent at this depth gets no delegation
    /// tool.
    pub fn max_depth(mut self, n: u32) -> Self {
        self.config.max_depth = n;
        self
    }

    /// Records the decision trail of every call on
    /// [`CallOutcome::decisions`](crate::CallOutcome) (default off; calls also record
    /// while a `tracing` subscriber listens to target `rein::decision`). Inherited by
    /// subagents.
    pub fn decision_trail(mut self, on: bool) -> Self {
        self.config.trail = on;
        self
    }

    /// Records message contents, tool arguments and results on spans, and previews in
    /// decision digests (default off: they may hold personal data). Inherited by
    /// subagents.
    pub fn record_content(mut self, on: bool) -> Self {
        self.config.record_content = on;
        self
    }

    /// With feature `metrics`: tool names reported as metric labels as they are;
    /// every other tool is reported as `other` (default: all names as they are).
    pub fn metric_tool_labels<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.config.tool_labels = Some(Arc::new(names.into_iter().map(Into::into).collect()));
        self
    }

    /// Declares an MCP server in code (feature `mcp`): its tools join this agent's base
    /// tools as `mcp__<id>__<tool>` (see [`crate::mcp`]) when the agent is built, and are
    /// bounded like every other tool. The builder becomes an
    /// `AgentBuilder<McpPending>`: only `build_async` (`rein::mcp`), which connects
    /// the servers, builds it — a synchronous `build()` of unconnected servers does not
    /// compile.
    ///
    /// The id must be 1-32 characters from `[A-Za-z0-9_.-]`, without `__`, not ending in
    /// `_`, and unique among this builder's and `tools.json`'s servers; otherwise
    /// `build_async` fails with [`BuildErrorKind::Mcp`].
    ///
    /// ```no_run
    /// use rein::mcp::McpServerConfig;
    /// use rein::*;
    ///
    /// # async fn run() -> Result<(), BuildError> {
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new([ScriptedTurn::text("done")]))
    ///     .mcp_server("files", McpServerConfig::stdio("mcp-files"))
    ///     .build_async() // connects `files`, then builds
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Building it synchronously does not compile:
    ///
    /// ```compile_fail,E0599
    /// use rein::mcp::McpServerConfig;
    /// use rein::*;
    ///
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new([ScriptedTurn::text("done")]))
    ///     .mcp_server("files", McpServerConfig::stdio("mcp-files"))
    ///     .build(); // no `build` on `AgentBuilder<McpPending>`
    /// ```
    #[cfg(feature = "mcp")]
    pub fn mcp_server(
        mut self,
        id: impl Into<String>,
        config: McpServerConfig,
    ) -> AgentBuilder<McpPending> {
        self.mcp_servers.push((id.into(), config));
        AgentBuilder {
            config: self.config,
            child: self.child,
            mcp_servers: self.mcp_servers,
            state: PhantomData,
        }
    }
}

impl AgentBuilder<Ready> {
    /// Builds the agent.
    ///
    /// Only a [`Ready`] builder has `build()`: one that declares MCP servers in code is
    /// built with `build_async` (`rein::mcp`). A workspace `tools.json` is data, read
    /// here: when it declares MCP servers, `build()` fails (see below) and
    /// `build_async()` connects them.
    ///
    /// # Errors
    /// - [`BuildErrorKind::MissingModel`] without a model;
    /// - [`BuildErrorKind::InvalidConfig`] for `max_iters(0)`, a zero tool timeout, a
    ///   zero turn limit or an invalid lease TTL;
    /// - [`BuildErrorKind::InvalidHook`] when a hook's `validate()` fails;
    /// - [`BuildErrorKind::Tool`] when a surviving hook tool's name is taken, its schema
    ///   is invalid, or a tool is named like the delegation tool;
    /// - [`BuildErrorKind::Workspace`] for a workspace folder that does not exist, a
    ///   dangling, unreadable or malformed `tools.json`, or a broken subagent file
    ///   (naming file, line and key);
    /// - [`BuildErrorKind::InvalidDeclaration`] for duplicate subagent ids or an
    ///   allowlist naming a tool this agent cannot call;
    /// - [`BuildErrorKind::Mcp`] when the workspace `tools.json` declares MCP servers:
    ///   without the feature `mcp` the message says it is off, with it the message
    ///   points to `build_async`.
    pub fn build(self) -> Result<Agent, BuildError> {
        self.build_with(None, false)
    }
}
