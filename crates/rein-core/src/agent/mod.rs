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
//!                [over the context window, ContextPolicy::Compact]
//!                  PreCompact ─► model (no tools, rolling) ─► PostCompact ─► store summary
//!                PreReasoning ─► [window check] ─► model.stream ─► ReasoningChunk* ─► PostReasoning
//!                  ├─ stop_agent()          → return (pending tool uses resumable)
//!                  ├─ goto_reasoning(msgs)  → store, append msgs, reason again (bounded)
//!                  ├─ no tool use + text    → final answer
//!                  ├─ no tool use, no text  → not stored; reason again with a one-off
//!                  │                          nudge (bounded: counts as an iteration)
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
//! An empty model answer (no visible text, no tool call) is never stored: the loop
//! reasons again, and that one request ends with a user-role nudge (marked
//! `"rein.synthetic": true`) asking for an answer from the conversation and the tool
//! results so far. The nudge is not stored either, so memory holds only what the model
//! said; each empty answer counts as an iteration (bounded by `max_iters`). A streaming
//! caller that was sent deltas of the empty turn (blank text, thinking) gets
//! [`AgentEvent::ReasoningRedone`].
//!
//! # Durable sessions
//! With a [`SessionStore`] ([`AgentBuilder::session_store`]) conversations outlive the
//! agent: each is loaded on first use and saved, with a version check, after every
//! call — completed, failed or cancelled. [`FileSessionStore`] keeps one file per
//! session with atomic replace; [`InMemorySessionStore`] shares sessions inside one
//! process.
//!
//! With [`AgentBuilder::leased_session_store`] the calls on one session are ordered
//! across every agent and process sharing the store: a call holds the session's
//! [`Lease`] from before anything runs until it is saved (fenced), so a second replica
//! waits, then fails with [`StoreErrorKind::Busy`] without running its model or tools.

mod acting;
mod approvals;
mod assemble;
mod budgets;
mod builder;
mod compact;
mod config;
mod connect;
mod delegation;
pub mod double_text;
mod effects;
mod execute;
mod fire;
mod history;
mod input;
mod journal;
mod leasing;
mod loop_limits;
mod memory;
mod model_turn;
mod opening;
mod packed;
pub mod quarantine;
mod run;
mod sessions;
mod stream;
mod summary;
mod typed;
mod user_budget;
mod window;

pub use builder::{AgentBuilder, McpPending, Ready};
pub(crate) use config::{AgentConfig, Narrowing};
pub(crate) use delegation::{
    ChildBinding, Delegating, DelegationPlan, HookToolFilter, Installed, PreparedDelegation,
    Template,
};
pub use delegation::{DelegationStyle, ModelResolver};
pub use double_text::{DoubleText, MAX_WAITING, ROLLED_BACK_KEY};

pub use crate::context::{AgentInfo, Extensions, RunContext, StopReason};
pub use acting::MAX_PRE_ACTING_PASSES;
pub use approvals::{ApprovalDecision, ApprovalDecisions};
pub use history::pending_tool_uses;
pub use journal::JOURNAL_KEY;
pub use loop_limits::LoopLimits;
// The session contract lives in `store`; these paths are kept for code written against them.
#[doc(no_inline)]
pub use crate::store::{
    FileSessionStore, InMemorySessionStore, Lease, LeaseConfig, SessionKey, SessionLeases,
    SessionStore, StoreError, StoreErrorKind, StoredSession,
};
pub use compact::COMPACTION_KEY;
pub use stream::{AgentEvent, AgentStream, StreamRelease};
pub use typed::{OUTPUT_REASKS, OUTPUT_TOOL, OutputMode, TypedOutcome};
pub use window::{ContextPolicy, PINNED_KEY, WINDOW_BYTES_PER_TOKEN};

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::{Error, ErrorKind};
use crate::hook::Decision;
use crate::hook::HookChain;
use crate::message::Msg;
use crate::model::{GenerateOptions, Model, Usage};
use crate::tool::{ToolSchema, Toolkit};
use sessions::Sessions;

/// A transform every stream of an agent goes through ([`AgentBuilder::stream_filter`]).
pub type StreamFilter = Arc<dyn Fn(AgentStream) -> AgentStream + Send + Sync>;

/// Metadata key on a stopped reply: the ids of the tool calls waiting for a decision,
/// anywhere in the delegation tree (a JSON array of strings).
pub const PENDING_CALL_IDS_KEY: &str = "rein.approval_pending";

/// Metadata key on a stopped reply: the tool calls waiting for a decision, anywhere in
/// the delegation tree, in full: a JSON array of objects with `id`, `name`, `input`
/// (the call, deserializable as a [`ToolUse`](crate::ToolUse)), `agent` (the path of
/// agent names from this agent down to the one that waits, `/`-separated) and
/// `agent_id`.
pub const PENDING_CALLS_KEY: &str = "rein.approval_pending_calls";

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
    /// The decisions hooks (and the runtime) made, in order, including those of the
    /// subagents it delegated to, with their agent path (empty unless the call
    /// recorded them: see [`crate::observe`]).
    pub decisions: Vec<Decision>,
    /// What the call spent against its budgets, its subagents' spending included (see
    /// [`crate::budget`]); `None` for an agent without budgets.
    pub spend: Option<crate::budget::Spend>,
    /// [`CallOutcome::spend`] by agent path (`support`, `support/billing`): the call's
    /// own agent first (what it spent itself), then each subagent charged, in the
    /// order they were first charged (a subagent's entry excludes its own subagents').
    /// Empty for an agent without budgets. (Boxed and listed, not mapped, to keep the
    /// outcome small: it travels in every stream's `Final` event.)
    pub spend_by_agent: Vec<(String, crate::budget::Spend)>,
    /// What the call could still spend when it ended: for each limit set on its
    /// budgets (the call's, the session's, and those of the calls that delegated to
    /// it), the least left of it. `None` for an agent without budgets. The reply's
    /// [`SPEND_KEY`](crate::budget::SPEND_KEY) record carries the same.
    pub remaining: Option<Box<crate::budget::Budget>>,
    /// For a structured-output call: the answer as the model gave it and the loop
    /// accepted it, before `PostCall` hooks (masking) changed its text — what
    /// [`Agent::run_typed`] validates and decodes.
    pub(crate) answer: Option<Box<Msg>>,
}

/// Bounds on what one model turn can make the runtime do (see the builder's
/// [`AgentBuilder::max_tool_calls_per_turn`], [`AgentBuilder::tool_concurrency`] and
/// [`AgentBuilder::max_tool_result_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) max_tool_calls_per_turn: usize,
    pub(crate) tool_concurrency: usize,
    pub(crate) max_tool_result_bytes: usize,
}

impl Limits {
    /// Each limit the smaller of the two (a child's limits never exceed its parent's).
    pub(crate) fn at_most(&self, parent: &Limits) -> Limits {
        Limits {
            max_tool_calls_per_turn: self
                .max_tool_calls_per_turn
                .min(parent.max_tool_calls_per_turn),
            tool_concurrency: self.tool_concurrency.min(parent.tool_concurrency),
            max_tool_result_bytes: self.max_tool_result_bytes.min(parent.max_tool_result_bytes),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_tool_calls_per_turn: 64,
            tool_concurrency: 16,
            max_tool_result_bytes: 1 << 20,
        }
    }
}

/// Everything an agent is, shared by its clones.
pub(crate) struct AgentInner {
    pub(crate) info: Arc<AgentInfo>,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) toolkit: Toolkit,
    pub(crate) tool_names: Arc<[String]>,
    pub(crate) tool_schemas: Arc<[ToolSchema]>,
    pub(crate) chain: HookChain,
    pub(crate) sys_prompt: Option<Arc<str>>,
    /// The system message of a call whose prompt no hook changed, built once (`None`
    /// for no or a blank prompt): a call shares it instead of building its own.
    pub(crate) system: Option<Arc<Msg>>,
    pub(crate) options: GenerateOptions,
    pub(crate) max_iters: u32,
    pub(crate) max_gotos: u32,
    pub(crate) tool_timeout: Duration,
    pub(crate) limits: Limits,
    /// [`StreamRelease::AfterAcceptance`]: deltas are sent after the post-hooks.
    pub(crate) hold_deltas: bool,
    pub(crate) sessions: Sessions,
    pub(crate) store: Option<Arc<dyn crate::store::DynSessionStore>>,
    /// Present when calls lease their session ([`AgentBuilder::leased_session_store`]).
    pub(crate) leasing: Option<leasing::Leasing>,
    /// Load sessions at the start of every call (see `AgentConfig::reload`).
    pub(crate) reload: bool,
    /// What a call on a busy session does, unless the call says.
    pub(crate) double_text: DoubleText,
    /// How many calls may wait for one session.
    pub(crate) max_waiting: usize,
    /// Applied, in order, to every stream ([`AgentBuilder::stream_filter`]).
    pub(crate) stream_filters: Vec<StreamFilter>,
    /// Present when the agent can delegate (it then has the `agent_spawn` tool).
    pub(crate) delegation: Option<Arc<dyn Delegating>>,
    /// Record decisions on every call (also recorded when a subscriber listens).
    pub(crate) trail: bool,
    /// Record message contents on spans and previews in decision digests.
    pub(crate) record_content: bool,
    /// Tool names used as metric labels as-is; others are reported as `other`.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) tool_labels: Option<Arc<std::collections::HashSet<String>>>,
    /// This agent's counter keys, built once each (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) metric_keys: crate::observe::metrics_impl::Keys,
    /// Every call's budget and whose it is ([`AgentBuilder::call_budget`]).
    pub(crate) call_budget: Option<(crate::budget::Budget, crate::budget::BudgetScope)>,
    /// The session's budget ([`AgentBuilder::session_budget`]).
    pub(crate) session_budget: Option<crate::budget::Budget>,
    /// Each user's budget and the store its records live in (the agent's, else one
    /// of its own) ([`AgentBuilder::user_budget`]).
    pub(crate) user_budget: Option<(
        crate::budget::Budget,
        Arc<dyn crate::store::DynSessionStore>,
    )>,
    /// Model prices ([`AgentBuilder::prices`]).
    pub(crate) prices: Option<Arc<crate::budget::Prices>>,
    /// How structured-output calls ask for their answer ([`AgentBuilder::output_mode`]).
    pub(crate) output_mode: OutputMode,
    /// The label of unlabelled call input ([`AgentBuilder::input_label`]).
    pub(crate) input_label: crate::label::Label,
    /// The context window in tokens and what happens to a request over it.
    pub(crate) window: Option<(u32, ContextPolicy)>,
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
    /// A model failure ([`ErrorKind::Model`]), a failing hook
    /// with the abort policy ([`ErrorKind::Hook`]), too many
    /// consecutive redos ([`ErrorKind::GotoLimit`]),
    /// invalid input such as a system-role message or a result for a call that is not
    /// pending ([`ErrorKind::InvalidInput`]), or a
    /// session store failure. Tool failures are not errors. The `Error` event fires
    /// before the error is returned, and memory stays valid.
    pub async fn run(&self, msgs: Vec<Msg>, ctx: RunContext) -> Result<CallOutcome, Error> {
        self.inner.run_call(msgs, ctx, None, None).await
    }

    /// Resumes a session stopped for a human — calls waiting for approval
    /// ([`StopReason::ReasoningStopped`] with pending calls), a subagent waiting
    /// ([`StopReason::SubagentStopped`]), calls whose outcome is unknown
    /// ([`StopReason::OutcomeUnknown`]) — with the human's `decisions`, and runs on from
    /// there. The same as [`Agent::run`] with no input and the decisions in the run
    /// context's extensions (which keeps working).
    ///
    /// Each decision is consumed by the durable claim of the call it applies to, so a
    /// duplicate resume (another replica, a retried request) never runs an approved call
    /// twice: it finds the call claimed or answered, and fails with
    /// [`StoreErrorKind::Conflict`] when nothing it decided is pending any more.
    ///
    /// ```
    /// use rein::*;
    /// use rein::hooks::{ApprovalConfig, ApprovalHook, ApprovalMode, pending_approvals};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let refund = FunctionTool::new("refund", "Refunds.", json!({"type": "object"}),
    ///     |_| async { Ok("refunded".to_owned()) });
    /// let mut tools = Toolkit::new();
    /// tools.register(refund)?;
    /// let guard = ApprovalHook::new(ApprovalConfig {
    ///     enabled: true,
    ///     guarded_tools: vec!["refund".into()],
    ///     mode: ApprovalMode::StopForHuman,
    ///     ..ApprovalConfig::default()
    /// }, None)?;
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new([
    ///         ScriptedTurn::tool_call("refund", json!({})),
    ///         ScriptedTurn::text("Refunded."),
    ///     ]))
    ///     .toolkit(tools)
    ///     .hook(guard)
    ///     .build()?;
    /// let key = SessionKey::new(None, "s1");
    /// let stopped = agent.run(vec![Msg::user("refund me")], RunContext::new().with_session_id("s1")).await?;
    /// let waiting = pending_approvals(&stopped.reply);
    /// let done = agent.resume(&key, agent::ApprovalDecisions::new().approve_call(&waiting[0])).await?;
    /// assert_eq!(done.reply.text(), "Refunded.");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Agent::run`]; a [`StoreErrorKind::Conflict`] when none of the decided calls
    /// is pending any more (another call resumed them first).
    pub async fn resume(
        &self,
        session: &SessionKey,
        decisions: ApprovalDecisions,
    ) -> Result<CallOutcome, Error> {
        let mut ctx = RunContext::new().with_session_id(session.session_id.clone());
        if let Some(user) = &session.user_id {
            ctx = ctx.with_user_id(user.clone());
        }
        self.resume_with(ctx, decisions).await
    }

    /// [`Agent::resume`] in a run context of the caller's (its session and user, and
    /// any other extensions the hooks read).
    ///
    /// # Errors
    /// As [`Agent::resume`].
    pub async fn resume_with(
        &self,
        ctx: RunContext,
        decisions: ApprovalDecisions,
    ) -> Result<CallOutcome, Error> {
        ctx.extensions().insert(decisions);
        self.run(Vec::new(), ctx).await
    }

    /// Runs a call and streams what happens: text and thinking deltas, tool calls,
    /// progress and results, then [`AgentEvent::Final`] or [`AgentEvent::Error`]. Hooks
    /// behave exactly as for [`Agent::run`]. Dropping the stream cancels the call.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use rein::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new([ScriptedTurn::text("Your order shipped.")]))
    ///     .build()?;
    /// let mut stream = agent.stream(vec![Msg::user("Where is my order?")], RunContext::new());
    /// let mut shown = String::new();
    /// while let Some(event) = stream.next().await {
    ///     match event {
    ///         AgentEvent::TextDelta(delta) => shown.push_str(&delta), // show as it arrives
    ///         AgentEvent::Final(outcome) => assert_eq!(outcome.reply.text(), shown),
    ///         AgentEvent::Error(e) => return Err(e.into()),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(shown, "Your order shipped.");
    /// # Ok(()) }
    /// ```
    ///
    /// The stream goes through the agent's stream filters
    /// ([`AgentBuilder::stream_filter`]): with a masking hook installed by
    /// `HooksConfig::install` (`rein::hooks`) or
    /// `MaskingHook::install` (`rein::hooks`), it is masked.
    /// [`Agent::stream_raw`] is the explicit opt-out for trusted internal consumers.
    pub fn stream(&self, msgs: Vec<Msg>, ctx: RunContext) -> AgentStream {
        let mut stream = self.stream_raw(msgs, ctx);
        for filter in &self.inner.stream_filters {
            stream = filter(stream);
        }
        stream
    }

    /// [`Agent::stream`] without the agent's stream filters: what the call emits, as
    /// it emits it — raw, also with a masking hook installed. For trusted internal
    /// consumers only.
    pub fn stream_raw(&self, msgs: Vec<Msg>, ctx: RunContext) -> AgentStream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::clone(&self.inner);
        let call = async move { inner.run_call(msgs, ctx, Some(tx), None).await }.boxed();
        AgentStream::new(call, rx)
    }

    /// Runs a call with an optional event sink (used for subagents).
    pub(crate) async fn run_internal(
        &self,
        msgs: Vec<Msg>,
        ctx: RunContext,
        sink: Option<UnboundedSender<AgentEvent>>,
    ) -> Result<CallOutcome, Error> {
        self.inner.run_call(msgs, ctx, sink, None).await
    }

    /// The ids of the subagents this agent can delegate to now (code declarations,
    /// then valid workspace files), with their descriptions. Empty without delegation.
    pub fn subagents(&self) -> Vec<(String, String)> {
        match &self.inner.delegation {
            Some(d) => d.listing(),
            None => Vec::new(),
        }
    }

    /// The declared subagent `id` as a delegation to it would run it — built with its
    /// bound, hooks and tools (or the instance already built) — to inspect it, e.g. its
    /// effective tools with [`Agent::tool_names`]. `None` when this agent cannot
    /// delegate to `id` (no such subagent, or its declaration is invalid: the text says
    /// why).
    ///
    /// # Errors
    /// The text a delegation would get: an unknown id (listing the known ones) or an
    /// invalid declaration.
    pub fn subagent(&self, id: &str) -> Result<Agent, String> {
        match &self.inner.delegation {
            Some(d) => d.built_child(id),
            None => Err(format!(
                "agent `{}` delegates to no subagent",
                self.inner.info.name
            )),
        }
    }

    /// The effective tools of this agent and of every declared subagent, as
    /// `(agent path, tool names)`: this agent's first (`name`), then each subagent's
    /// (`name/id`), in the order [`Agent::subagents`] lists them — what each can call
    /// after every bound (allowlists, `tools.json`, hook-tool filters). A subagent whose
    /// declaration is invalid is listed with its error instead of tools.
    pub fn effective_tools(&self) -> Vec<(String, Result<Vec<String>, String>)> {
        let me = self.inner.info.name.clone();
        let mut out = vec![(me.clone(), Ok(self.tool_names().to_vec()))];
        for (id, _) in self.subagents() {
            let tools = self.subagent(&id).map(|a| a.tool_names().to_vec());
            out.push((format!("{me}/{id}"), tools));
        }
        out
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
    /// session to finish. With a session store, a session this agent has not loaded yet
    /// is loaded first; with leasing ([`AgentBuilder::leased_session_store`]) the stored
    /// session is read every time (other replicas may have saved it), unless this
    /// agent holds an unsaved replacement ([`Agent::set_messages`]).
    ///
    /// A session the store cannot load gives an **empty** snapshot (logged), never a
    /// copy cached earlier that may be stale; [`Agent::try_messages`] returns the error.
    pub async fn messages(&self, key: &SessionKey) -> Vec<Msg> {
        match self.try_messages(key).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(session = %key, error = %e, "loading the session failed");
                Vec::new()
            }
        }
    }

    /// [`Agent::messages`], with the store's error when the session cannot be loaded.
    ///
    /// # Errors
    /// The [`StoreError`] of the load (e.g. [`StoreErrorKind::Corrupt`] for a stored
    /// session that is not a valid history, [`StoreErrorKind::Unavailable`]).
    pub async fn try_messages(&self, key: &SessionKey) -> Result<Vec<Msg>, StoreError> {
        let slot = self.inner.sessions.slot(key);
        let mut conv = slot.lock().await;
        self.inner.sessions.touch(&slot, &mut conv);
        if (self.inner.leasing.is_some() || self.inner.reload) && !conv.dirty {
            // Leased sessions are shared with other replicas: read the stored one.
            conv.loaded = false;
        }
        match &self.inner.store {
            Some(store) => conv.load_if_needed(&**store, key).await?,
            None => conv.unpack(key)?,
        }
        Ok(conv.messages.to_vec())
    }

    /// Replaces a session's conversation (waits for a call in progress on it), e.g.
    /// to import a history kept elsewhere. A configured store is not written until the
    /// next call on the session, which saves the replacement (over the stored version)
    /// before it proceeds.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when `messages` hold
    /// a system-role message, or a tool use without exactly one later result (except
    /// pending uses in the last assistant message, which the next call resumes or
    /// marks as not executed); [`ErrorKind::Store`] when a
    /// configured store cannot load the session (its version is needed to replace it).
    pub async fn set_messages(&self, key: &SessionKey, messages: Vec<Msg>) -> Result<(), Error> {
        history::check_history(&messages).map_err(Error::invalid_input)?;
        let slot = self.inner.sessions.slot(key);
        let mut conv = slot.lock().await;
        self.inner.sessions.touch(&slot, &mut conv);
        if let Some(store) = &self.inner.store {
            conv.load_if_needed(&**store, key)
                .await
                .map_err(Error::store)?;
        }
        conv.replace(messages);
        conv.loaded = true;
        conv.dirty = true;
        Ok(())
    }

    /// Forgets a session held in memory (a configured store is not touched: the next
    /// call on the session loads it again). Returns whether it was present.
    ///
    /// Forgetting cascades down the delegation tree: the conversations subagents held
    /// for this session (`<child id>@<session>`, and their own children's, at every
    /// depth) are forgotten too, so a later spawn in this session starts fresh. Child
    /// conversations have no other eviction: each subagent holds at most one per parent
    /// session that spawned it, until that session is forgotten, the child is rebuilt
    /// (its declaration file changed) or the agent is dropped.
    pub fn forget_session(&self, key: &SessionKey) -> bool {
        if let Some(delegation) = &self.inner.delegation {
            delegation.forget_children(key);
        }
        self.inner.sessions.remove(key)
    }
}

/// The call error's store-specific parts live with the store types (the error module
/// sits below this layer and does not name them).
impl Error {
    pub(crate) fn store(err: StoreError) -> Self {
        Error::with_source(ErrorKind::Store, err.to_string(), Box::new(err))
    }

    /// The store error, for [`ErrorKind::Store`].
    pub fn store_error(&self) -> Option<&StoreError> {
        self.source_ref()
            .and_then(|e| e.downcast_ref::<StoreError>())
    }
}
