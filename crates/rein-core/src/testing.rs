//! Unit-test hooks without an agent (in the spirit of `tower-test`).
//!
//! A [`HookHarness`] holds hooks in a chain built exactly as an agent builds its own
//! (validated, deduplicated, sorted by priority, filtered by interest) and makes the
//! events an agent would fire — `PreActing` for a tool call, `PostReasoning` for a model
//! message, … — carrying a [`RunContext`] and an [`AgentInfo`] of your choice. Dispatch
//! an event through the chain, then inspect what the hooks did through the event's own
//! accessors (`is_denied`, `tool_use`, `goto_requested`, `final_message`, …) and the
//! decision trail ([`decisions`]).
//!
//! The events a harness makes belong to one call (until the context or the agent is
//! replaced): hooks that keep per-call state, such as a latency timer started at
//! `PreActing` and read at `PostActing`, see it across them.
//!
//! ```
//! use rein::testing::HookHarness;
//! use rein::*;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cap = hook_fn(EventKind::PreActing, |event| {
//!     if let HookEvent::PreActing(e) = event
//!         && e.tool_use().input["amount"].as_f64().unwrap_or(0.0) > 100.0
//!     {
//!         e.deny("refunds above 100 need a human");
//!     }
//!     Ok(())
//! })
//! .with_name("refund_cap");
//!
//! let harness = HookHarness::new(cap)?
//!     .with_context(RunContext::new().with_user_id("alice"));
//! let mut event = harness.pre_acting(ToolUse::new("call_1", "refund", json!({"amount": 500})));
//! harness.dispatch(&mut event).await?;
//!
//! let HookEvent::PreActing(e) = &event else { unreachable!() };
//! assert!(e.is_denied());
//! assert_eq!(e.denied_by(), Some("refund_cap"));
//! assert_eq!(e.context().user_id(), Some("alice"));
//! # Ok(()) }
//! ```
//!
//! [`DecisionTrail`] keeps a run's decisions as a fixture (`rein-trail/1`, next to a
//! recording of [`crate::model::replay`]) and compares a replayed run's decisions with
//! it, with a line diff on mismatch.

mod trail;

pub use trail::{DecisionTrail, TRAIL_FORMAT, TrailEntry, TrailMismatch};

use std::sync::Arc;

use crate::context::{AgentInfo, RunContext, StopReason};
use crate::error::{BuildError, Error};
use crate::hook::{
    ActingChunkEvent, EventMeta, HookChain, HookEvent, IntoHook, PostActingEvent, PostCallEvent,
    PostCompactEvent, PostReasoningEvent, PostSummaryEvent, PreActingEvent, PreCallEvent,
    PreCompactEvent, PreReasoningEvent, PreSummaryEvent, ReasoningChunkEvent, RegisteredHook,
    SummaryChunkEvent,
};
use crate::hook::{Decision, TrailMode};
use crate::message::{Msg, ToolResult, ToolUse};
use crate::model::{GenerateOptions, ModelChunk, Usage};

/// Hooks in a chain, with a run context and an agent identity, that makes and dispatches
/// events as an agent would. See the [module docs](self).
pub struct HookHarness {
    registered: Vec<RegisteredHook>,
    chain: HookChain,
    agent: Arc<AgentInfo>,
    ctx: RunContext,
    mode: TrailMode,
    /// The header of the one call every event belongs to (rebuilt when the hooks, the
    /// context or the agent change).
    call: EventMeta,
}

impl std::fmt::Debug for HookHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookHarness")
            .field("hooks", &self.chain)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl HookHarness {
    /// A harness with one hook (a [`Hook`](crate::Hook) or
    /// [`SyncHook`](crate::SyncHook) value, or an `Arc` of one), a fresh
    /// [`RunContext`], an agent named `test-agent` (id `test-agent`, depth 0), and
    /// decision recording on.
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidHook`](crate::BuildErrorKind::InvalidHook) when the
    /// hook's [`validate`](crate::Hook::validate) fails, as at `AgentBuilder::build`.
    pub fn new<M>(hook: impl IntoHook<M>) -> Result<Self, BuildError> {
        let agent = Arc::new(AgentInfo {
            id: "test-agent".to_owned(),
            name: "test-agent".to_owned(),
            parent_id: None,
            depth: 0,
        });
        let ctx = RunContext::new();
        let mode = TrailMode {
            on: true,
            reveal: true,
        };
        let chain = HookChain::default();
        let empty = Self {
            call: EventMeta::new(&agent, &ctx, Arc::clone(chain.labels()), mode),
            registered: Vec::new(),
            chain,
            agent,
            ctx,
            mode,
        };
        empty.and(hook)
    }

    /// Adds another hook; the chain is rebuilt (ordered by priority, ties in the order
    /// added; the same `Arc` twice runs once).
    ///
    /// # Errors
    /// As [`HookHarness::new`].
    pub fn and<M>(mut self, hook: impl IntoHook<M>) -> Result<Self, BuildError> {
        self.registered.push(hook.into_registered().0);
        self.chain = HookChain::build(self.registered.iter().cloned(), None)?;
        Ok(self.new_call())
    }

    /// Sets the run context the events carry (ids, typed extensions).
    #[must_use]
    pub fn with_context(mut self, ctx: RunContext) -> Self {
        self.ctx = ctx;
        self.new_call()
    }

    /// Sets the agent identity the events carry (e.g. a subagent: `parent_id`, `depth`).
    #[must_use]
    pub fn with_agent(mut self, agent: AgentInfo) -> Self {
        self.agent = Arc::new(agent);
        self.new_call()
    }

    /// Starts the call the next events belong to.
    fn new_call(mut self) -> Self {
        self.call = EventMeta::new(
            &self.agent,
            &self.ctx,
            Arc::clone(self.chain.labels()),
            self.mode,
        );
        self
    }

    /// The run context the events carry.
    pub fn context(&self) -> &RunContext {
        &self.ctx
    }

    /// Hook names in dispatch order.
    pub fn hook_names(&self) -> Vec<String> {
        self.chain
            .entries()
            .iter()
            .map(|e| e.name.to_string())
            .collect()
    }

    /// Dispatches `event` through the hooks subscribed to its kind, as the agent loop
    /// does: in priority order, rewrites threaded, panics and errors handled per each
    /// hook's failure policy (timeouts apply to `async fn` hooks that set one).
    ///
    /// # Errors
    /// The error the call would fail with: kind
    /// [`ErrorKind::Hook`](crate::ErrorKind::Hook), naming the first failing hook
    /// with [`FailurePolicy::Abort`](crate::FailurePolicy::Abort) (never for
    /// notification events: chunks and `Error`).
    pub async fn dispatch(&self, event: &mut HookEvent) -> Result<(), Error> {
        if self.chain.is_sync(event.kind()) {
            self.chain.dispatch_sync(event)
        } else {
            self.chain.dispatch(event).await
        }
    }

    fn meta(&self) -> EventMeta {
        self.call.clone()
    }

    /// A `PreCall` event with these input messages and no system prompt.
    pub fn pre_call(&self, messages: Vec<Msg>) -> HookEvent {
        HookEvent::PreCall(PreCallEvent {
            meta: self.meta(),
            messages,
            system_prompt: None,
        })
    }

    /// A `PreReasoning` event (iteration 0) for these model messages, options and
    /// offered tool names.
    pub fn pre_reasoning(
        &self,
        messages: Vec<Msg>,
        options: GenerateOptions,
        tool_names: Vec<String>,
    ) -> HookEvent {
        HookEvent::PreReasoning(PreReasoningEvent {
            meta: self.meta(),
            messages: messages.into(),
            options: Box::new(options),
            tool_names: tool_names.into(),
            iteration: 0,
        })
    }

    /// A `ReasoningChunk` event for a text delta, with `accumulated` the message so far.
    pub fn reasoning_chunk(&self, delta: &str, accumulated: Msg) -> HookEvent {
        HookEvent::ReasoningChunk(ReasoningChunkEvent {
            meta: self.meta(),
            chunk: ModelChunk::Text(delta.to_owned()),
            accumulated,
        })
    }

    /// A `PostReasoning` event (iteration 0, no usage) for the model's message.
    pub fn post_reasoning(&self, message: Msg) -> HookEvent {
        HookEvent::PostReasoning(PostReasoningEvent {
            meta: self.meta(),
            message,
            goto: None,
            retract: false,
            stop: false,
            usage: Usage::default(),
            iteration: 0,
        })
    }

    /// A `PreActing` event for a tool call as the runtime admitted it.
    pub fn pre_acting(&self, tool_use: ToolUse) -> HookEvent {
        HookEvent::PreActing(PreActingEvent::new(self.meta(), tool_use))
    }

    /// An `ActingChunk` event: progress text of a running call.
    pub fn acting_chunk(&self, tool_use: ToolUse, chunk: &str) -> HookEvent {
        HookEvent::ActingChunk(ActingChunkEvent {
            meta: self.meta(),
            tool_use,
            chunk: chunk.to_owned(),
        })
    }

    /// A `PostActing` event for a call that ran (not denied) and its result.
    pub fn post_acting(&self, tool_use: ToolUse, result: ToolResult) -> HookEvent {
        HookEvent::PostActing(PostActingEvent {
            meta: self.meta(),
            tool_use,
            result,
            denied: false,
            stop: false,
            human: None,
        })
    }

    /// A `PreSummary` event for these messages and options (limit `max_iters`).
    pub fn pre_summary(
        &self,
        messages: Vec<Msg>,
        options: GenerateOptions,
        max_iters: u32,
    ) -> HookEvent {
        HookEvent::PreSummary(PreSummaryEvent {
            meta: self.meta(),
            messages: messages.into(),
            options: Box::new(options),
            max_iters,
        })
    }

    /// A `SummaryChunk` event for a text delta.
    pub fn summary_chunk(&self, delta: &str, accumulated: Msg) -> HookEvent {
        HookEvent::SummaryChunk(SummaryChunkEvent {
            meta: self.meta(),
            chunk: ModelChunk::Text(delta.to_owned()),
            accumulated,
        })
    }

    /// A `PostSummary` event for the summary message.
    pub fn post_summary(&self, message: Msg) -> HookEvent {
        HookEvent::PostSummary(PostSummaryEvent {
            meta: self.meta(),
            message,
        })
    }

    /// A `PreCompact` event for the turns about to be summarized.
    pub fn pre_compact(&self, messages: Vec<Msg>) -> HookEvent {
        HookEvent::PreCompact(PreCompactEvent {
            meta: self.meta(),
            messages: messages.into(),
            veto: None,
        })
    }

    /// A `PostCompact` event for the summary standing for `compacted` stored messages.
    pub fn post_compact(&self, message: Msg, compacted: usize) -> HookEvent {
        HookEvent::PostCompact(PostCompactEvent {
            meta: self.meta(),
            message,
            compacted,
        })
    }

    /// A `PostCall` event for the reply of a call that ended with a final answer.
    pub fn post_call(&self, reply: Msg) -> HookEvent {
        HookEvent::PostCall(PostCallEvent {
            meta: self.meta(),
            message: reply,
            reason: StopReason::Final,
            usage: Usage::default(),
            decisions: Vec::new(),
        })
    }
}

/// The decisions hooks recorded on `event` while it was dispatched (who rewrote,
/// denied, redirected or stopped what, with digests of before and after), in order.
pub fn decisions(event: &HookEvent) -> &[Decision] {
    &event.meta().trail
}
