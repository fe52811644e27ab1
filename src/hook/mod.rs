//! The typed hook chain.
//!
//! A [`Hook`] is code on the agent's path. The loop fires twelve [`HookEvent`]s (see
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
//! the chain calls it like a plain virtual function. Panics are caught once per event
//! (not per hook) and attributed to the hook that was running.

mod chain;
mod decision;
mod event;
mod registry;

pub(crate) use chain::HookChain;
pub use decision::{Decision, DecisionKind};
pub(crate) use decision::{TrailMode, emit_decision};
pub(crate) use event::EventMeta;
pub use event::{
    ActingChunkEvent, ErrorEvent, HookEvent, PostActingEvent, PostCallEvent, PostReasoningEvent,
    PostSummaryEvent, PreActingEvent, PreCallEvent, PreReasoningEvent, PreSummaryEvent,
    ReasoningChunkEvent, SummaryChunkEvent,
};
pub use registry::{HookRegistry, RegistrationGuard};

use std::fmt;
use std::future::Future;
use std::ops::BitOr;
use std::sync::Arc;
use std::time::Duration;

use crate::context::AgentInfo;
pub use crate::context::EventKind;
use crate::tool::{Tool, ToolSchema};

/// What a hook is checked against when a top-level agent is built (see
/// [`Hook::validate_on`]): the agent and every tool it can call. A subagent's tools are
/// a subset of its parent's (the delegation bound), so a tool name valid here is the
/// only kind any agent of the tree can call.
#[derive(Debug)]
#[non_exhaustive]
pub struct HookSite<'a> {
    /// The agent the hook is installed on.
    pub agent: &'a AgentInfo,
    /// The tools the agent can call (its own, hook-contributed, MCP and the delegation
    /// tool), with their argument schemas.
    pub tools: &'a [ToolSchema],
}

impl HookSite<'_> {
    /// Whether the agent has a tool with this name.
    pub fn has_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The JSON Schema of a tool's arguments.
    pub fn schema(&self, name: &str) -> Option<&serde_json::Value> {
        self.tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| &t.parameters)
    }

    /// Checks that `name` (configured under `key`, e.g. `approval.guarded_tools[0]`)
    /// is a tool of the agent; the error names the key and suggests the closest tool.
    pub fn expect_tool(&self, key: &str, name: &str) -> Result<(), HookError> {
        if self.has_tool(name) {
            return Ok(());
        }
        let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        let hint = closest(name, &names)
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        Err(HookError::new(format!(
            "{key}: no tool `{name}` on agent `{}` (its tools: [{}]){hint}",
            self.agent.name,
            names.join(", ")
        )))
    }
}

/// The candidate nearest to `name` (case-insensitive edit distance), if near enough to
/// be a likely typo.
fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, &c.to_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

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
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Handles one event. Mutate the event through its payload's methods. Returning an
    /// error is handled per [`Hook::failure_policy`].
    fn on_event(&self, event: &mut HookEvent)
    -> impl Future<Output = Result<(), HookError>> + Send;

    /// Set by the blanket implementation for [`SyncHook`]s only: the chain then calls
    /// [`Hook::__rein_on_event_sync`] instead of creating a future. Not for overriding.
    #[doc(hidden)]
    const __REIN_SYNC: bool = false;

    /// The synchronous handler of a [`SyncHook`]; never called for other hooks. Not for
    /// overriding.
    #[doc(hidden)]
    fn __rein_on_event_sync(&self, _event: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

/// A hook that handles every event without awaiting: the fast way to write the many
/// hooks that decide from the event alone (guards, rewrites, masking, counters).
///
/// Every `SyncHook` is a [`Hook`] (a blanket implementation forwards each setting), so
/// it is registered, ordered, deduplicated, inherited by subagents and fails exactly
/// like one. The difference is the call: the chain calls
/// [`SyncHook::on_event`] directly — no future is created, nothing is erased or
/// allocated — which makes an invocation cost about as much as a virtual call. Panics
/// are caught as for any hook. Because the call cannot be suspended, no timeout
/// applies ([`Hook::timeout`] is `None` and the agent's hook timeout is not used): a
/// sync hook must not block. Use [`Hook`] for anything that waits (I/O, a human, a
/// lock held across other work).
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
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Handles one event, synchronously. Mutate the event through its payload's
    /// methods. Returning an error is handled per [`SyncHook::failure_policy`].
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError>;
}

impl<T: SyncHook> Hook for T {
    fn name(&self) -> &str {
        SyncHook::name(self)
    }
    fn priority(&self) -> i32 {
        SyncHook::priority(self)
    }
    fn interest(&self) -> Interest {
        SyncHook::interest(self)
    }
    fn failure_policy(&self) -> FailurePolicy {
        SyncHook::failure_policy(self)
    }
    fn timeout(&self) -> Option<Duration> {
        None
    }
    fn propagate_to_subagents(&self) -> bool {
        SyncHook::propagate_to_subagents(self)
    }
    fn validate(&self) -> Result<(), HookError> {
        SyncHook::validate(self)
    }
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        SyncHook::validate_on(self, site)
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        SyncHook::tools(self)
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        SyncHook::on_event(self, event)
    }
    const __REIN_SYNC: bool = true;
    #[inline]
    fn __rein_on_event_sync(&self, event: &mut HookEvent) -> Result<(), HookError> {
        SyncHook::on_event(self, event)
    }
}

/// `a::b::Foo<c::D>` → `Foo<c::D>`.
fn short_type_name(full: &str) -> &str {
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

/// A set of [`EventKind`]s a hook subscribes to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest(u16);

impl Interest {
    /// No events.
    pub const NONE: Interest = Interest(0);
    /// Every event kind.
    pub const ALL: Interest = Interest((1 << 12) - 1);
    /// Every kind except the three chunk kinds.
    pub const LIFECYCLE: Interest = Interest(
        Self::ALL.0
            & !(1 << EventKind::ReasoningChunk as u16)
            & !(1 << EventKind::ActingChunk as u16)
            & !(1 << EventKind::SummaryChunk as u16),
    );

    /// Exactly one kind.
    pub const fn only(kind: EventKind) -> Interest {
        Interest(1 << kind as u16)
    }

    /// This set plus `kind`.
    #[must_use]
    pub const fn with(self, kind: EventKind) -> Interest {
        Interest(self.0 | 1 << kind as u16)
    }

    /// This set minus `kind`.
    #[must_use]
    pub const fn without(self, kind: EventKind) -> Interest {
        Interest(self.0 & !(1 << kind as u16))
    }

    /// The set of the given kinds.
    pub fn of(kinds: impl IntoIterator<Item = EventKind>) -> Interest {
        kinds.into_iter().fold(Interest::NONE, Interest::with)
    }

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: EventKind) -> bool {
        self.0 & (1 << kind as u16) != 0
    }
}

impl BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest(self.0 | rhs.0)
    }
}

impl BitOr<EventKind> for Interest {
    type Output = Interest;
    fn bitor(self, rhs: EventKind) -> Interest {
        self.with(rhs)
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(EventKind::ALL.iter().filter(|k| self.contains(**k)))
            .finish()
    }
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

/// Inline capacity for a hook's future: futures up to this size (and pointer
/// alignment) are erased without allocating; larger ones are boxed.
const INLINE_FUTURE: usize = 64;

/// A type-erased hook future: inline when it fits, boxed otherwise.
pub(crate) type ErasedHookFuture<'a> =
    stackfuture::StackFuture<'a, Result<(), HookError>, INLINE_FUTURE>;

/// The object-safe twin of [`Hook`]: the one place hook futures are erased.
pub(crate) trait DynHook: Send + Sync + 'static {
    fn on_event_erased<'a>(&'a self, event: &'a mut HookEvent) -> ErasedHookFuture<'a>;
    /// Whether this is a [`SyncHook`] (call [`DynHook::on_event_sync`] instead).
    fn is_sync(&self) -> bool;
    fn on_event_sync(&self, event: &mut HookEvent) -> Result<(), HookError>;
    fn name(&self) -> &str;
    fn priority(&self) -> i32;
    fn interest(&self) -> Interest;
    fn failure_policy(&self) -> FailurePolicy;
    fn timeout(&self) -> Option<Duration>;
    fn propagate_to_subagents(&self) -> bool;
    fn validate(&self) -> Result<(), HookError>;
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError>;
    fn tools(&self) -> Vec<Arc<dyn Tool>>;
}

impl<H: Hook> DynHook for H {
    fn on_event_erased<'a>(&'a self, event: &'a mut HookEvent) -> ErasedHookFuture<'a> {
        stackfuture::StackFuture::from_or_box(Hook::on_event(self, event))
    }
    fn is_sync(&self) -> bool {
        H::__REIN_SYNC
    }
    fn on_event_sync(&self, event: &mut HookEvent) -> Result<(), HookError> {
        Hook::__rein_on_event_sync(self, event)
    }
    fn name(&self) -> &str {
        Hook::name(self)
    }
    fn priority(&self) -> i32 {
        Hook::priority(self)
    }
    fn interest(&self) -> Interest {
        Hook::interest(self)
    }
    fn failure_policy(&self) -> FailurePolicy {
        Hook::failure_policy(self)
    }
    fn timeout(&self) -> Option<Duration> {
        Hook::timeout(self)
    }
    fn propagate_to_subagents(&self) -> bool {
        Hook::propagate_to_subagents(self)
    }
    fn validate(&self) -> Result<(), HookError> {
        Hook::validate(self)
    }
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        Hook::validate_on(self, site)
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Hook::tools(self)
    }
}

/// A hook as registered: the erased instance plus its identity for deduplication.
#[derive(Clone)]
pub(crate) struct RegisteredHook {
    pub(crate) hook: Arc<dyn DynHook>,
    /// Address of the shared allocation: equal for clones of one `Arc`.
    pub(crate) identity: usize,
}

impl RegisteredHook {
    fn new(hook: Arc<dyn DynHook>) -> Self {
        let identity = Arc::as_ptr(&hook) as *const () as usize;
        Self { hook, identity }
    }
}

/// Conversion into a registered hook: implemented for every [`Hook`] value (a fresh
/// instance) and for `Arc<H>` (a shared instance, deduplicated by `Arc` identity).
pub trait IntoHook {
    #[doc(hidden)]
    fn into_registered(self) -> RegisteredHookHandle;
}

/// Opaque registration handle produced by [`IntoHook`].
#[doc(hidden)]
pub struct RegisteredHookHandle(pub(crate) RegisteredHook);

impl<H: Hook> IntoHook for H {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(Arc::new(self)))
    }
}

impl<H: Hook> IntoHook for Arc<H> {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(self))
    }
}
