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
    /// A newer call on the session asked this one to stop
    /// ([`DoubleText::Interrupt`](crate::agent::DoubleText::Interrupt)); it stopped at a
    /// safe point (every tool it started had settled). The session keeps its input, its
    /// turns and results so far, and the reply: a note that it was interrupted.
    Interrupted,
    /// A newer call on the session rolled this one back
    /// ([`DoubleText::Rollback`](crate::agent::DoubleText::Rollback)) at a safe point:
    /// the session holds what it held before this call, plus the tool calls with an
    /// effect that had run (and their results), flagged
    /// [`ROLLED_BACK_KEY`](crate::agent::ROLLED_BACK_KEY), and the reply: a note
    /// listing them.
    RolledBack,
}

/// What a call does when its session is already answering another call ("double
/// texting"). Set per agent with [`AgentBuilder::double_text`](crate::AgentBuilder::double_text), per call with
/// [`RunContext::with_double_text`]; the policy of the *newer* call decides. See the
/// [`crate::agent::double_text`] docs for the guarantees of each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DoubleText {
    /// Fail at once with [`StoreErrorKind::Busy`](crate::store::StoreErrorKind::Busy)
    /// (an [`ErrorKind::Store`](crate::ErrorKind::Store)): nothing runs, nothing is
    /// stored. A session whose queue holds waiters is busy too.
    Reject,
    /// Wait for the running call (and every call that arrived before) to end, first
    /// come first served: in arrival order at the slot in a process, and at the store's
    /// queue across replicas. Fails with `QueueFull` past
    /// [`AgentBuilder::max_waiting`](crate::AgentBuilder::max_waiting), and with `Busy` after
    /// [`LeaseConfig::wait`](crate::store::LeaseConfig::wait) under leasing.
    #[default]
    Enqueue,
    /// Ask the running call to stop at its next safe point (its partial turn is kept:
    /// its input, the turns and tool results so far, and a note that it was
    /// interrupted), then wait as `Enqueue`. The running call ends with
    /// [`StopReason::Interrupted`].
    Interrupt,
    /// Ask the running call to stop at its next safe point and discard its steps: the
    /// session goes back to what it held before that call, except the tool calls with
    /// an effect that already ran (not [`EffectClass::ReadOnly`](crate::EffectClass::ReadOnly)), which stay with
    /// their results, flagged [`ROLLED_BACK_KEY`](crate::agent::ROLLED_BACK_KEY), after a note listing them. Then wait
    /// as `Enqueue`. The running call ends with [`StopReason::RolledBack`].
    Rollback,
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
