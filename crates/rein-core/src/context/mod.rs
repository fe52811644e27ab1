//! The bottom layer every other layer shares: who runs ([`AgentInfo`]), the per-call
//! context ([`RunContext`], [`Extensions`]), why a loop ended ([`StopReason`]) and the
//! lifecycle event kinds ([`EventKind`]).
//!
//! These are plain values with no behaviour of the loop, so `tool`, `model`, `hook` and
//! `agent` can all name them without importing each other. Their public paths are the
//! crate root and `rein::agent` (and `rein::hook::EventKind`); this module is private.

mod kind;
mod run;

pub use kind::EventKind;
pub use run::{AgentInfo, Extensions, RunContext};

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

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
    /// A subagent stopped with tool calls waiting (for a human's approval): the
    /// delegation call that reached it is pending in this agent's session, and the
    /// reply — the turn's assistant message — lists every waiting call of the
    /// delegation tree under [`PENDING_CALLS_KEY`](crate::agent::PENDING_CALLS_KEY) (with [`PENDING_CALL_IDS_KEY`](crate::agent::PENDING_CALL_IDS_KEY)).
    /// Resume with an empty input and the decisions in the run context: they reach the
    /// subagent that waits, which runs the approved calls once and continues.
    SubagentStopped,
    /// A tool call of this session (or of a subagent below it) was started by an
    /// earlier attempt — a crashed or cancelled call, another replica — and its outcome
    /// was never recorded, and its tool must not run twice
    /// ([`EffectClass::AtMostOnce`](crate::EffectClass::AtMostOnce)). Nothing ran. The
    /// reply lists those calls under [`PENDING_CALLS_KEY`](crate::agent::PENDING_CALLS_KEY)
    /// with `"status": "outcome_unknown"`; a human resolves each with
    /// [`ApprovalDecisions::retry`](crate::agent::ApprovalDecisions::retry),
    /// [`record_outcome`](crate::agent::ApprovalDecisions::record_outcome) or
    /// [`abandon`](crate::agent::ApprovalDecisions::abandon), and resumes. Input given
    /// with the call that stopped here was not taken: send it again after resolving.
    OutcomeUnknown,
    /// A budget ran out ([`crate::budget`]): the next model call could not be made
    /// within what was left, or the wall-clock budget passed at a safe point. Nothing ran
    /// after the check. The reply names the budget under
    /// [`BUDGET_KEY`](crate::budget::BUDGET_KEY) (`kind`, `scope`, `limit`, `used`); its
    /// text is the last answer the model gave in this call, if any.
    BudgetExhausted,
}

/// A value an upper layer hands down through the lower ones, opaque to them: the
/// upper layer wraps it and downcasts it back. `K` only tells the channels apart.
pub(crate) struct Opaque<K>(Arc<dyn Any + Send + Sync>, PhantomData<fn() -> K>);

impl<K> Opaque<K> {
    /// Wraps a value of the upper layer.
    pub(crate) fn new<T: Any + Send + Sync>(value: T) -> Self {
        Self(Arc::new(value), PhantomData)
    }

    /// The value, if it is a `T`.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl<K> Clone for Opaque<K> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0), PhantomData)
    }
}

impl<K> std::fmt::Debug for Opaque<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Opaque")
    }
}

/// Marks [`EventSink`].
#[derive(Debug)]
pub(crate) enum Events {}

/// Marks [`DecisionSink`].
#[derive(Debug)]
pub(crate) enum Decisions {}

/// The streaming caller's event sink, opaque below the agent layer (the agent layer's
/// event sender): a tool that delegates (the `agent_spawn` tool) forwards its
/// subagent's events through it. Set only on agents that delegate, while a caller
/// streams.
pub(crate) type EventSink = Opaque<Events>;

/// Where a subagent call sends the decisions it records, opaque below the hook layer
/// (the hook layer's forwarder into the delegating call's trail). Set only while the
/// delegating call records decisions: on the delegating tool's context, and by that
/// tool on its subagent's run context. Absent, nothing is forwarded or allocated.
pub(crate) type DecisionSink = Opaque<Decisions>;
