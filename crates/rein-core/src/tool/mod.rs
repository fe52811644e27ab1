//! Tools: what the model can call.
//!
//! A [`Tool`] has a name, a description and a JSON Schema for its arguments, and runs
//! asynchronously: implement [`Tool::call`] with `async fn`. The runtime holds tools as
//! [`SharedTool`]s (type-erased, reference-counted): a [`Toolkit`] holds them in
//! registration order, and [`Toolkit::copy`] shares the instances. The erasure happens
//! at one boundary, a private object-safe twin of [`Tool`] (the same style as
//! [`Hook`](crate::Hook)), so an implementation never writes `Box::pin`.
//!
//! [`FunctionTool`] makes a tool from a closure: [`FunctionTool::new`] takes raw JSON
//! and a schema you write; [`FunctionTool::typed`] takes a
//! `#[derive(Deserialize, JsonSchema)]` argument type and generates the schema.
//!
//! Before a tool runs, the loop validates the model's arguments against the tool's
//! schema (compiled once, at registration). Every failure — invalid or malformed
//! arguments, an unknown tool, a [`ToolError`], a panic, a timeout, a denial by a hook —
//! becomes an error [`ToolResult`](crate::ToolResult) the model can read, naming the tool
//! and, for validation, the failing field. The loop then continues.
//!
//! Tool calls of one model turn run concurrently, results kept in call order; a tool
//! that reports `concurrency_safe() == false` runs alone (calls before it finish first,
//! calls after it wait).

mod effect;
mod expects;
mod function;

pub(crate) mod policy;
pub use policy::substitute_env;
mod toolkit;
mod typed;
pub(crate) use typed::{deserialize_at, schema_for};

pub use crate::label::ToolCapabilities;
pub use effect::EffectClass;
pub(crate) use effect::idempotency_key;
pub(crate) use expects::expects;
pub use function::FunctionTool;
pub use toolkit::{Toolkit, ToolkitError};
pub(crate) use toolkit::{json_type, schema_violations};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::{AgentInfo, DecisionSink, EventSink, RunContext};

/// The deepest JSON nesting a tool call's arguments may have: 64 levels (the arguments
/// object itself is level 1). A deeper call is refused at admission, before any hook,
/// with an error result naming the tool, so a model turn can never store a value that a
/// session store could not load back (see
/// [`MAX_STORED_DEPTH`](crate::store::MAX_STORED_DEPTH), which leaves room for hooks).
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// A tool's description as offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The name the model calls.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// A callable tool.
///
/// Implement this for tools with state or custom behaviour; [`FunctionTool`] wraps a
/// closure. Implement [`Tool::call`] with `async fn`; the runtime erases the future
/// (at most one allocation per call) and holds the tool as a [`SharedTool`].
///
/// ```
/// use rein::{Tool, ToolContext, ToolError, Toolkit};
/// use serde_json::{Value, json};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// Hands out ticket numbers.
/// struct Tickets(AtomicU64);
///
/// impl Tool for Tickets {
///     fn name(&self) -> &str { "next_ticket" }
///     fn description(&self) -> &str { "Opens a support ticket and returns its number." }
///     fn parameters(&self) -> Value { json!({"type": "object", "properties": {}}) }
///     async fn call(&self, _input: Value, _ctx: ToolContext) -> Result<String, ToolError> {
///         Ok(self.0.fetch_add(1, Ordering::Relaxed).to_string())
///     }
/// }
///
/// let mut tools = Toolkit::new();
/// tools.register(Tickets(AtomicU64::new(1)))?;
/// assert_eq!(tools.names(), ["next_ticket"]);
/// # Ok::<(), rein::ToolkitError>(())
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls. Must be unique within a toolkit.
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments: an object schema. Validated when the tool is
    /// registered; an invalid schema is a registration (and so a build) error.
    fn parameters(&self) -> Value;

    /// Whether this tool may run concurrently with other calls of the same turn.
    /// Default `true`.
    fn concurrency_safe(&self) -> bool {
        true
    }

    /// A per-tool timeout overriding the agent's tool timeout. Default `None`.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// How the tool may be retried when the outcome of an earlier attempt is unknown
    /// (see [`EffectClass`]). Default [`EffectClass::AtMostOnce`]: never re-run
    /// automatically. Declare [`EffectClass::ReadOnly`] for a tool without side effects
    /// (it then skips the journal's store write before it runs) and
    /// [`EffectClass::Idempotent`] for one that deduplicates by
    /// [`ToolContext::idempotency_key`].
    fn effect_class(&self) -> EffectClass {
        EffectClass::AtMostOnce
    }

    /// What the tool declares for information-flow control: the label of its results,
    /// whether it changes state or communicates outside, whether its results are
    /// quarantined (see [`ToolCapabilities`]). Read once, at registration. Default
    /// [`ToolCapabilities::default`]: trusted, public results; changes state unless
    /// [`EffectClass::ReadOnly`]; not external.
    fn capabilities(&self) -> ToolCapabilities {
        ToolCapabilities::default()
    }

    /// Runs the tool with validated arguments. The returned text is what the model
    /// reads; an `Err` becomes an error result. Implement with `async fn`.
    fn call(
        &self,
        input: Value,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<String, ToolError>> + Send;
}

/// A tool future, erased: inline when it fits in 64 bytes (a [`FunctionTool`]'s
/// already-boxed future does, so it is not boxed twice), boxed otherwise.
type ErasedToolFuture<'a> = stackfuture::StackFuture<'a, Result<String, ToolError>, 64>;

/// The object-safe twin of [`Tool`]: the one place tool futures are erased. Private:
/// users implement [`Tool`] with `async fn` and hold a [`SharedTool`].
trait DynTool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn parameters(&self) -> Value;
    fn concurrency_safe(&self) -> bool;
    fn timeout(&self) -> Option<Duration>;
    fn effect_class(&self) -> EffectClass;
    fn capabilities(&self) -> ToolCapabilities;
    fn call_erased(&self, input: Value, ctx: ToolContext) -> ErasedToolFuture<'_>;
}

impl<T: Tool> DynTool for T {
    fn name(&self) -> &str {
        Tool::name(self)
    }
    fn description(&self) -> &str {
        Tool::description(self)
    }
    fn parameters(&self) -> Value {
        Tool::parameters(self)
    }
    fn concurrency_safe(&self) -> bool {
        Tool::concurrency_safe(self)
    }
    fn timeout(&self) -> Option<Duration> {
        Tool::timeout(self)
    }
    fn effect_class(&self) -> EffectClass {
        Tool::effect_class(self)
    }
    fn capabilities(&self) -> ToolCapabilities {
        Tool::capabilities(self)
    }
    fn call_erased(&self, input: Value, ctx: ToolContext) -> ErasedToolFuture<'_> {
        stackfuture::StackFuture::from_or_box(Tool::call(self, input, ctx))
    }
}

/// A type-erased tool, shared by reference count: what a [`Toolkit`] holds,
/// [`Hook::tools`](crate::Hook::tools) returns and [`Toolkit::get`] gives back. Cheap
/// to clone; clones are the same instance ([`SharedTool::ptr_eq`]).
///
/// Made from any [`Tool`] with [`SharedTool::new`], or from an `Arc` of one with
/// [`SharedTool::from_arc`] (keeping that instance); any [`IntoTool`] converts.
#[derive(Clone)]
pub struct SharedTool(Arc<dyn DynTool>);

impl SharedTool {
    /// Shares a tool.
    pub fn new(tool: impl Tool) -> Self {
        Self(Arc::new(tool))
    }

    /// Shares the instance behind `tool`.
    pub fn from_arc<T: Tool>(tool: Arc<T>) -> Self {
        Self(tool)
    }

    /// [`Tool::name`].
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// [`Tool::description`].
    pub fn description(&self) -> &str {
        self.0.description()
    }

    /// [`Tool::parameters`].
    pub fn parameters(&self) -> Value {
        self.0.parameters()
    }

    /// [`Tool::concurrency_safe`].
    pub fn concurrency_safe(&self) -> bool {
        self.0.concurrency_safe()
    }

    /// [`Tool::timeout`].
    pub fn timeout(&self) -> Option<Duration> {
        self.0.timeout()
    }

    /// [`Tool::effect_class`].
    pub fn effect_class(&self) -> EffectClass {
        self.0.effect_class()
    }

    /// [`Tool::capabilities`].
    pub fn capabilities(&self) -> ToolCapabilities {
        self.0.capabilities()
    }

    /// [`Tool::call`], with the future erased.
    pub fn call(
        &self,
        input: Value,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<String, ToolError>> + Send + '_ {
        self.0.call_erased(input, ctx)
    }

    /// Whether both are the same instance.
    pub fn ptr_eq(a: &SharedTool, b: &SharedTool) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&a.0), Arc::as_ptr(&b.0))
    }
}

impl fmt::Debug for SharedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedTool").field(&self.name()).finish()
    }
}

/// An error a tool returns. Its message is shown to the model (prefixed with the tool
/// name), so write it for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    message: String,
}

impl ToolError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

/// A progress chunk a running tool emitted, routed to `ActingChunk` hooks.
#[derive(Debug)]
pub(crate) struct ProgressChunk {
    pub(crate) index: usize,
    pub(crate) text: String,
}

/// What a running tool knows about its call.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub(crate) run: RunContext,
    pub(crate) agent: Arc<AgentInfo>,
    pub(crate) tool_use_id: String,
    pub(crate) index: usize,
    pub(crate) progress: Option<futures::channel::mpsc::UnboundedSender<ProgressChunk>>,
    /// The streaming caller's sink, for forwarding subagent events.
    pub(crate) events: Option<EventSink>,
    /// Where a delegating tool sends its subagent's decisions (present only on agents
    /// that delegate, while the call records decisions).
    pub(crate) decisions: Option<DecisionSink>,
    /// Where a delegating tool leaves the calls its subagent stopped on (present only
    /// on agents that delegate): the call is then suspended instead of answered.
    pub(crate) suspend: Option<Arc<std::sync::Mutex<Option<Vec<serde_json::Value>>>>>,
    /// The call was claimed before (see [`ToolContext::is_retry`]).
    pub(crate) retry: bool,
    /// A delegation call resuming the subagent that waits below it (recorded in the
    /// session's journal), rather than sending its task anew.
    pub(crate) resume_child: bool,
    /// What the tool said about its result's label (read by the runtime after the call).
    pub(crate) flow: Arc<ResultFlow>,
    /// The label of the model turn that made the call.
    pub(crate) call_label: crate::label::Label,
}

/// What a running tool said about its result's label ([`ToolContext::raise_result_label`],
/// [`ToolContext::endorse_result`]).
#[derive(Debug, Default)]
pub(crate) struct ResultFlow {
    raised: std::sync::atomic::AtomicU8,
    endorsed: std::sync::atomic::AtomicBool,
}

impl ResultFlow {
    /// The label the tool raised its result to, and whether it endorsed it.
    pub(crate) fn get(&self) -> (crate::label::Label, bool) {
        use std::sync::atomic::Ordering;
        (
            crate::label::Label::from_bits(self.raised.load(Ordering::Acquire)),
            self.endorsed.load(Ordering::Acquire),
        )
    }
}

impl ToolContext {
    /// Suspends this call: it gets no result, the agent's loop stops with
    /// [`StopReason::SubagentStopped`](crate::StopReason::SubagentStopped), and the
    /// reply lists `pending` (tool calls, with their agent path, waiting in the
    /// delegation tree). Returns whether the call could be suspended.
    pub(crate) fn suspend(&self, pending: Vec<serde_json::Value>) -> bool {
        match &self.suspend {
            Some(slot) => {
                *slot
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pending);
                true
            }
            None => false,
        }
    }

    /// The run context of the agent call (ids and typed extensions).
    pub fn run(&self) -> &RunContext {
        &self.run
    }

    /// The agent running the tool.
    pub fn agent(&self) -> &AgentInfo {
        &self.agent
    }

    /// The id of the tool use being executed.
    pub fn tool_use_id(&self) -> &str {
        &self.tool_use_id
    }

    /// The call's idempotency key: the same on every retry, resume and replica of this
    /// tool call, different for every other call (derived from the session and the
    /// runtime's call id, which is stored with the session). Pass it to the service the
    /// tool changes so a repeated request has no further effect — for HTTP, as the
    /// `Idempotency-Key` header (the IETF draft's convention); MCP tool calls carry it
    /// in the request's `_meta` as `rein/idempotency_key`. A tool that does so may
    /// declare [`EffectClass::Idempotent`].
    pub fn idempotency_key(&self) -> String {
        idempotency_key(self.run.user_id(), self.run.session_id(), &self.tool_use_id)
    }

    /// Whether this call was started before (its claim is in the session's journal) and
    /// runs again now: an [`EffectClass::Idempotent`] tool retried after its outcome was
    /// lost, or a call a human chose to retry. The idempotency key is the one of the
    /// first attempt.
    pub fn is_retry(&self) -> bool {
        self.retry
    }

    /// The label of the model turn that made this call (see
    /// [`PreActingEvent::label`](crate::hook::PreActingEvent::label)): what a tool
    /// passes on when it hands the call's arguments to another model (a delegation
    /// labels its subagent's task with it).
    pub fn call_label(&self) -> crate::label::Label {
        self.call_label
    }

    /// Raises the label of this call's result to include `label` (never lowers it):
    /// for a tool that learns only while it runs where its data came from (a fetch
    /// that followed a redirect off-site, a delegation whose subagent read untrusted
    /// content). Joined with what the tool declares
    /// ([`ToolCapabilities::result`]) and what its arguments carried.
    pub fn raise_result_label(&self, label: crate::label::Label) {
        self.flow
            .raised
            .fetch_or(label.bits(), std::sync::atomic::Ordering::AcqRel);
    }

    /// Endorses this call's result: its integrity is the tool's declared one, not
    /// lowered by the quarantined documents its arguments carried (their
    /// confidentiality still flows). For a tool whose output cannot carry
    /// instructions whatever its input said — a bool, or one of a few values the
    /// caller listed — such as an extraction tool. An endorsement is a trust decision
    /// of the tool's author; a tool that returns free text must not make it.
    pub fn endorse_result(&self) {
        self.flow
            .endorsed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Emits a progress chunk. It fires an `ActingChunk` hook event and, on
    /// `Agent::stream`, a progress item; it is never sent to the model. A no-op when
    /// nothing listens.
    pub fn emit(&self, text: impl Into<String>) {
        if let Some(tx) = &self.progress {
            // The receiver lives as long as the acting step; a send after it ended is
            // dropped on purpose.
            let _ = tx.unbounded_send(ProgressChunk {
                index: self.index,
                text: text.into(),
            });
        }
    }
}

/// Conversion into a shared tool: implemented for every [`Tool`] value, for `Arc<T>`
/// of one, and for a [`SharedTool`]. Registering an `Arc` or a `SharedTool` shares that
/// instance.
pub trait IntoTool {
    /// The shared tool.
    fn into_tool(self) -> SharedTool;
}

impl<T: Tool> IntoTool for T {
    fn into_tool(self) -> SharedTool {
        SharedTool::new(self)
    }
}

impl<T: Tool> IntoTool for Arc<T> {
    fn into_tool(self) -> SharedTool {
        SharedTool::from_arc(self)
    }
}

impl IntoTool for SharedTool {
    fn into_tool(self) -> SharedTool {
        self
    }
}
