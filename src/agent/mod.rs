//! Agents: the ReAct loop, its builder, and conversation memory.
//!
//! An [`Agent`] owns a model, its own copy of a toolkit, a built hook chain, and the
//! conversations of its sessions. A call appends the input to the session's
//! conversation and loops: reason (one model call), then act (run the requested
//! tools), until the model answers with text, a hook stops the loop, or `max_iters`
//! reasoning steps have run (then a final summary call without tools answers).
//!
//! ```text
//! call(msgs, ctx)
//!   PreCall ─► [iteration i < max_iters]
//!                PreReasoning ─► model.stream ─► ReasoningChunk* ─► PostReasoning
//!                  ├─ stop_agent()          → return (pending tool uses resumable)
//!                  ├─ goto_reasoning(msgs)  → store, append msgs, reason again (bounded)
//!                  ├─ no tool use + text    → final answer
//!                  └─ tool uses: PreActing* ─► execute (concurrent where safe)
//!                                ─► ActingChunk* ─► PostActing*
//!                                any stop_agent() → return; else next iteration
//!              [i == max_iters] PreSummary ─► model (no tools) ─► SummaryChunk* ─► PostSummary
//!   PostCall ─► reply
//!   (Error fires on any call-level error, then the error is returned)
//! ```
//!
//! # Memory
//! Each (user, session) has one conversation. Calls on the same session wait for each
//! other in arrival order; different sessions run concurrently on one `Agent`. The
//! system prompt is prepended to every model request and never stored. Every tool use
//! stored has exactly one result: denied, redone, cancelled, failed and dropped calls
//! all leave synthetic error results where no real result exists — except that
//! `stop_agent()` in `PostReasoning` deliberately leaves the turn's tool uses pending.
//! The next call then decides: no input resumes (runs them), input made only of tool
//! results supplies them, and any other input marks them "not executed" and moves on.
//!
//! An empty model answer (no text, no tool call) appends a synthetic reminder and
//! reasons again (bounded by `max_iters`).

mod context;
mod memory;
mod run;
mod stream;

pub use context::{AgentInfo, Extensions, RunContext};
pub use memory::{SessionKey, SessionStore, StoreError};
pub use stream::{AgentEvent, AgentStream};

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::error::{BuildError, BuildErrorKind, Error};
use crate::hook::{HookChain, HookRegistry, IntoHook, RegisteredHook};
use crate::message::Msg;
use crate::model::{GenerateOptions, Model, Usage};
use crate::tool::{ToolSchema, Toolkit};
use crate::util::new_id;
use memory::Sessions;

/// Why a call's loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered with text and no tool call.
    Final,
    /// A `PostReasoning` hook called `stop_agent()`; the reply's tool uses are pending.
    ReasoningStopped,
    /// A `PostActing` hook called `stop_agent()`; the reply is the turn's tool message.
    ActingStopped,
    /// `max_iters` was reached; the reply is the summary.
    MaxIterations,
}

/// The result of a call, with what it cost.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallOutcome {
    /// The reply (after `PostCall` hooks).
    pub reply: Msg,
    /// Why the loop ended.
    pub reason: StopReason,
    /// Token usage summed over the call's model calls.
    pub usage: Usage,
    /// How many model calls the call made.
    pub model_calls: u32,
}

/// Everything an agent is, shared by its clones.
pub(crate) struct AgentInner {
    pub(crate) info: Arc<AgentInfo>,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) toolkit: Toolkit,
    pub(crate) tool_names: Arc<[String]>,
    pub(crate) tool_schemas: Vec<ToolSchema>,
    pub(crate) chain: HookChain,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) options: GenerateOptions,
    pub(crate) max_iters: u32,
    pub(crate) max_gotos: u32,
    pub(crate) tool_timeout: Duration,
    pub(crate) sessions: Sessions,
    pub(crate) store: Option<Arc<dyn SessionStore>>,
}

/// A built agent. Cheap to clone (clones share sessions); `Send + Sync`.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("info", &self.inner.info)
            .field("model", &self.inner.model.name())
            .field("tools", &self.inner.tool_names)
            .field("hooks", &self.inner.chain)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// A builder with the defaults: name `"agent"`, `max_iters` 10, `max_gotos` 3,
    /// tool timeout 300 s, no hook timeout, global hooks included.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::new()
    }

    /// Sends one message on the default session with a fresh [`RunContext`] and
    /// returns the reply.
    ///
    /// # Errors
    /// See [`Agent::run`].
    pub async fn call(&self, msg: Msg) -> Result<Msg, Error> {
        self.call_with(vec![msg], RunContext::new()).await
    }

    /// Sends messages in the given context and returns the reply.
    ///
    /// # Errors
    /// See [`Agent::run`].
    pub async fn call_with(&self, msgs: Vec<Msg>, ctx: RunContext) -> Result<Msg, Error> {
        self.run(msgs, ctx).await.map(|o| o.reply)
    }

    /// Sends messages in the given context and returns the reply with why the loop
    /// ended and what it cost.
    ///
    /// # Errors
    /// A model failure ([`ErrorKind::Model`](crate::ErrorKind::Model)), a failing hook
    /// with the abort policy ([`ErrorKind::Hook`](crate::ErrorKind::Hook)), too many
    /// consecutive redos ([`ErrorKind::GotoLimit`](crate::ErrorKind::GotoLimit)),
    /// invalid input such as a system-role message or a result for a call that is not
    /// pending ([`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)), or a
    /// session store failure. Tool failures are not errors. The `Error` event fires
    /// before the error is returned, and memory stays valid.
    pub async fn run(&self, msgs: Vec<Msg>, ctx: RunContext) -> Result<CallOutcome, Error> {
        self.inner.run_call(msgs, ctx, None).await
    }

    /// Runs a call and streams what happens: text and thinking deltas, tool calls,
    /// progress and results, then [`AgentEvent::Final`] or [`AgentEvent::Error`]. Hooks
    /// behave exactly as for [`Agent::run`]. Dropping the stream cancels the call.
    pub fn stream(&self, msgs: Vec<Msg>, ctx: RunContext) -> AgentStream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::clone(&self.inner);
        let call = async move { inner.run_call(msgs, ctx, Some(tx)).await }.boxed();
        AgentStream::new(call, rx)
    }

    /// The agent's identity.
    pub fn info(&self) -> &AgentInfo {
        &self.inner.info
    }

    /// The tool names offered to the model, in order.
    pub fn tool_names(&self) -> &[String] {
        &self.inner.tool_names
    }

    /// Hook names in dispatch order.
    pub fn hook_names(&self) -> Vec<String> {
        self.inner
            .chain
            .entries()
            .iter()
            .map(|e| e.name.to_string())
            .collect()
    }

    /// A snapshot of a session's conversation. Waits for a call in progress on that
    /// session to finish.
    pub async fn messages(&self, key: &SessionKey) -> Vec<Msg> {
        let slot = self.inner.sessions.slot(key);
        let conv = slot.lock().await;
        conv.messages.clone()
    }

    /// Forgets a session held in memory (a configured store is not touched). Returns
    /// whether it was present.
    pub fn forget_session(&self, key: &SessionKey) -> bool {
        self.inner.sessions.remove(key)
    }
}

/// Builds an [`Agent`]. Reusable: `build()` does not consume hooks or tools
/// cumulatively, so building twice gives identical agents (with distinct ids).
#[must_use]
pub struct AgentBuilder {
    id: Option<String>,
    name: String,
    sys_prompt: Option<String>,
    model: Option<Arc<dyn Model>>,
    toolkit: Toolkit,
    hooks: Vec<RegisteredHook>,
    registries: Vec<HookRegistry>,
    global_hooks: bool,
    max_iters: u32,
    max_gotos: u32,
    options: GenerateOptions,
    tool_timeout: Duration,
    hook_timeout: Option<Duration>,
    store: Option<Arc<dyn SessionStore>>,
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
            store: self.store.clone(),
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
            store: None,
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

    /// Adds a hook: a value, or an `Arc` of one (the same `Arc` added twice, here or
    /// through a registry, runs once per event).
    pub fn hook(mut self, h: impl IntoHook) -> Self {
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

    /// Timeout for one tool call unless the tool sets its own (default 300 s; at least
    /// 1 ms).
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.tool_timeout = d;
        self
    }

    /// Timeout for one hook invocation unless the hook sets its own (default none).
    pub fn hook_timeout(mut self, d: Duration) -> Self {
        self.hook_timeout = Some(d);
        self
    }

    /// Persists conversations in this store (default: in memory only).
    pub fn session_store(mut self, store: impl SessionStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Builds the agent.
    ///
    /// # Errors
    /// [`BuildErrorKind::MissingModel`] without a model;
    /// [`BuildErrorKind::InvalidConfig`] for `max_iters(0)` or a zero tool timeout;
    /// [`BuildErrorKind::InvalidHook`] when a hook's `validate()` fails;
    /// [`BuildErrorKind::Tool`] when a hook contributes a tool whose name is taken or
    /// whose schema is invalid.
    pub fn build(self) -> Result<Agent, BuildError> {
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
        if self.tool_timeout.is_zero() {
            return Err(BuildError::new(
                BuildErrorKind::InvalidConfig,
                "tool_timeout must be greater than zero",
            ));
        }
        let mut registered = self.hooks.clone();
        for registry in &self.registries {
            registered.extend(registry.snapshot());
        }
        if self.global_hooks {
            registered.extend(HookRegistry::global().snapshot());
        }
        let chain = HookChain::build(registered, self.hook_timeout)?;
        let mut toolkit = self.toolkit.copy();
        for entry in chain.entries() {
            for tool in entry.hook().tools() {
                let tool_name = tool.name().to_owned();
                toolkit.register(tool).map_err(|e| {
                    BuildError::tool(
                        &format!("hook `{}` contributes tool `{tool_name}`", entry.name),
                        e,
                    )
                })?;
            }
        }
        let tool_names: Arc<[String]> = toolkit.names().into();
        let info = AgentInfo {
            id: self.id.clone().unwrap_or_else(|| new_id("agent")),
            name: self.name.clone(),
            parent_id: None,
            depth: 0,
        };
        Ok(Agent {
            inner: Arc::new(AgentInner {
                info: Arc::new(info),
                model,
                tool_schemas: toolkit.schemas(),
                toolkit,
                tool_names,
                chain,
                sys_prompt: self.sys_prompt,
                options: self.options,
                max_iters: self.max_iters,
                max_gotos: self.max_gotos,
                tool_timeout: self.tool_timeout,
                sessions: Sessions::default(),
                store: self.store,
            }),
        })
    }
}
