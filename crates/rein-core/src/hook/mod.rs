//! The typed hook chain.
//!
//! A [`Hook`] is code on the agent's path. The loop fires fourteen [`HookEvent`]s (see
//! [`EventKind`]); each event payload carries the agent identity, the run context and
//! the mutators that event allows (rewrite the options, the tool arguments, the tool
//! result, the final reply; deny a tool; redo reasoning; stop for a human).
//!
//! # Ordering and threading
//! Hooks run sequentially in ascending [`Hook::priority`] (default 100); equal
//! priorities keep registration order (builder hooks first, then registry hooks). Each
//! hook receives the same `&mut` event, so a later hook sees what an earlier one wrote.
//! Terminal decisions are sticky: once [`PreActingEvent::deny`] was called, no later hook
//! can run the tool. The same hook instance (by `Arc` identity) registered several
//! times — on the builder, in a [`HookRegistry`], or both — runs once per event.
//!
//! # Interest
//! A hook declares the event kinds it wants with [`Hook::interest`]. The chain computes
//! per-kind subscriber lists once, when the agent is built; an event no hook wants
//! costs one branch and is never constructed, and an unsubscribed hook is never called.
//!
//! # Failure policy
//! [`Hook::failure_policy`] says what the hook's errors mean. [`FailurePolicy::Abort`]
//! (the default, for governance) aborts the call: the `Error` event fires and the caller
//! gets an [`Error`](crate::Error) of kind [`ErrorKind::Hook`](crate::ErrorKind::Hook)
//! naming the hook. [`FailurePolicy::Ignore`] (for observers) logs the error with
//! `tracing` and continues. A panic inside a hook, or running past its
//! [`Hook::timeout`], is caught and handled as that hook's error. Errors on chunk events
//! (`ReasoningChunk`, `ActingChunk`, `SummaryChunk`) and on the `Error` event are
//! always logged and never affect the loop.
//!
//! # Erasure and cost
//! `Hook` uses a native `async fn` (return-position `impl Future + Send`), so it is not
//! object-safe. The chain stores hooks behind a private twin trait that erases each
//! hook's future at that single boundary, only for hooks subscribed to the event being
//! dispatched: a future of up to 64 bytes is stored inline (no allocation), a larger
//! one is boxed. A [`SyncHook`] — a hook that never awaits — skips futures entirely:
//! it is registered through an adapter (the marker type of [`IntoHook`] picks it), and
//! the chain calls it like a plain virtual function. Each hook's settings (name,
//! priority, interest, failure policy, timeout, propagation) are read into one
//! [`HookSettings`] value when the agent is built; the chain reads nothing else from
//! the hook until it calls it. Panics are caught once per event
//! (not per hook) and attributed to the hook that was running.
//!
//! # Closure hooks and unit tests
//! [`hook_fn`] makes a (sync) hook from a closure, for one kind or an [`Interest`];
//! [`crate::testing::HookHarness`] builds events with a run context and dispatches them
//! through a chain built like an agent's, so a hook is unit-tested without an agent.

mod acting;
mod chain;
mod decision;
mod erase;
mod event;
mod func;
mod kind;
mod meta;
mod reasoning;
mod registry;
mod site;
mod state;

pub(crate) use acting::Denial;
pub use acting::{ActingChunkEvent, HumanDecision, PostActingEvent, PreActingEvent};
pub(crate) use chain::HookChain;
pub use decision::{Decision, DecisionKind, FieldChange, RevealNumbers};
pub(crate) use decision::{Forward, TrailMode, emit_decision, forward};
pub(crate) use erase::RegisteredHook;
pub use erase::{HookSettings, IntoHook, RegisteredHookHandle, marker};
pub use event::{
    ErrorEvent, HookEvent, PostCallEvent, PostCompactEvent, PostSummaryEvent, PreCallEvent,
    PreCompactEvent, PreSummaryEvent, SummaryChunkEvent,
};
pub use func::{HookFn, hook_fn};
pub use kind::{EventKind, Interest};
pub(crate) use meta::EventMeta;
pub use reasoning::{PostReasoningEvent, PreReasoningEvent, ReasoningChunkEvent};
pub use registry::{HookRegistry, RegistrationGuard};
pub use site::HookSite;
pub use state::{CallState, StateKey};

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::tool::SharedTool;

/// A lifecycle hook.
///
/// Only [`Hook::on_event`] is required; everything else has a default. Implement it
/// with `async fn` (a hook that never awaits is cheaper as a [`SyncHook`]):
///
/// ```
/// use rein::{Hook, HookEvent, HookError, EventKind, Interest};
///
/// struct NoRefunds;
///
/// impl Hook for NoRefunds {
///     fn priority(&self) -> i32 { 20 }
///     fn interest(&self) -> Interest { Interest::only(EventKind::PreActing) }
///     async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
///         if let HookEvent::PreActing(e) = event {
///             if e.tool_use().name == "issue_refund" {
///                 e.deny("refunds need a human");
///             }
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Hook: Send + Sync + 'static {
    /// A name for logs, errors and audit records. Defaults to the type's name without
    /// its module path.
    fn name(&self) -> &str {
        short_type_name(std::any::type_name::<Self>())
    }

    /// Position in the chain: lower runs first. Default 100. Suggested bands: 0–50
    /// security, 51–100 high, 101–500 normal, 501–1000 logging and metrics.
    fn priority(&self) -> i32 {
        100
    }

    /// The event kinds this hook is called for. Default: every kind. Read once, when
    /// the agent is built.
    fn interest(&self) -> Interest {
        Interest::ALL
    }

    /// What an error (or panic, or timeout) of this hook means. Default
    /// [`FailurePolicy::Abort`]. Read once, when the agent is built.
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Abort
    }

    /// How long one `on_event` may take before it counts as failed. Default `None`:
    /// the agent's hook timeout applies (itself unset by default, meaning no limit).
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether subagents spawned by an agent with this hook also run it. Default
    /// `true`: governance follows delegation.
    fn propagate_to_subagents(&self) -> bool {
        true
    }

    /// Checks the hook's configuration. Called once per `build()`; an error fails the
    /// build with [`BuildErrorKind::InvalidHook`](crate::BuildErrorKind::InvalidHook)
    /// naming the hook. Default: always valid.
    fn validate(&self) -> Result<(), HookError> {
        Ok(())
    }

    /// Checks the hook against the top-level agent it is installed on, once the
    /// agent's tools are known (after [`Hook::validate`]): e.g. that every tool name in
    /// its configuration is a tool the agent can call, so a typo cannot silently
    /// switch a guard off. An error fails the build with
    /// [`BuildErrorKind::InvalidHook`](crate::BuildErrorKind::InvalidHook) naming the
    /// hook. Not called for subagents: their tools are a subset of the top-level
    /// agent's. Default: always valid.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        let _ = site;
        Ok(())
    }

    /// Tools this hook contributes. Called once per `build()` of each agent the hook is
    /// installed on; the tools are registered on that agent's own copy of the toolkit.
    /// A name clash with an existing tool is a build error. Default: none.
    fn tools(&self) -> Vec<SharedTool> {
        Vec::new()
    }

    /// Handles one event. Mutate the event through its payload's methods. Returning an
    /// error is handled per [`Hook::failure_policy`].
    fn on_event(&self, event: &mut HookEvent)
    -> impl Future<Output = Result<(), HookError>> + Send;
}

/// A hook that handles every event without awaiting: the fast way to write the many
/// hooks that decide from the event alone (guards, rewrites, masking, counters).
///
/// A `SyncHook` is registered exactly where a [`Hook`] is (`AgentBuilder::hook`,
/// [`HookRegistry`], a subagent declaration: they take any [`IntoHook`]), and is
/// ordered, deduplicated, inherited by subagents and fails exactly like one. The
/// difference is the call: the chain calls [`SyncHook::on_event`] directly — no future
/// is created, nothing is erased or allocated — which makes an invocation cost about as
/// much as a virtual call. Panics are caught as for any hook. Because the call cannot be
/// suspended, no timeout applies (the agent's hook timeout is not used): a sync hook
/// must not block. Use [`Hook`] for anything that waits (I/O, a human, a lock held
/// across other work). A type implements one of the two traits, not both (registering
/// a type that implements both is ambiguous, a compile error). For a one-off sync hook
/// without a type of its own, see [`hook_fn`].
///
/// ```
/// use rein::{EventKind, HookError, HookEvent, Interest, SyncHook};
///
/// struct NoRefunds;
///
/// impl SyncHook for NoRefunds {
///     fn priority(&self) -> i32 { 20 }
///     fn interest(&self) -> Interest { Interest::only(EventKind::PreActing) }
///     fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
///         if let HookEvent::PreActing(e) = event
///             && e.tool_use().name == "issue_refund"
///         {
///             e.deny("refunds need a human");
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait SyncHook: Send + Sync + 'static {
    /// As [`Hook::name`]: the type's name without its module path by default.
    fn name(&self) -> &str {
        short_type_name(std::any::type_name::<Self>())
    }

    /// As [`Hook::priority`]: lower runs first. Default 100.
    fn priority(&self) -> i32 {
        100
    }

    /// As [`Hook::interest`]: read once, when the agent is built. Default: every kind.
    fn interest(&self) -> Interest {
        Interest::ALL
    }

    /// As [`Hook::failure_policy`]. Default [`FailurePolicy::Abort`].
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Abort
    }

    /// As [`Hook::propagate_to_subagents`]. Default `true`.
    fn propagate_to_subagents(&self) -> bool {
        true
    }

    /// As [`Hook::validate`]. Default: always valid.
    fn validate(&self) -> Result<(), HookError> {
        Ok(())
    }

    /// As [`Hook::validate_on`]. Default: always valid.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        let _ = site;
        Ok(())
    }

    /// As [`Hook::tools`]. Default: none.
    fn tools(&self) -> Vec<SharedTool> {
        Vec::new()
    }

    /// Handles one event, synchronously. Mutate the event through its payload's
    /// methods. Returning an error is handled per [`SyncHook::failure_policy`].
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError>;
}

/// `a::b::Foo<c::D>` → `Foo<c::D>`.
pub(crate) fn short_type_name(full: &str) -> &str {
    let head = full.find('<').unwrap_or(full.len());
    match full[..head].rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
    }
}

/// What a hook's failure means for the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// The call aborts with a typed error; the `Error` event fires first.
    #[default]
    Abort,
    /// The failure is logged with `tracing` and the call continues.
    Ignore,
}

/// An error a hook returns.
#[derive(Debug)]
pub struct HookError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl HookError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// Attaches an underlying cause.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HookError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
