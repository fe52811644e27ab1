//! A tool made from a closure.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;

use super::{EffectClass, Tool, ToolCapabilities, ToolContext, ToolError};

type Handler =
    dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<String, ToolError>> + Send + Sync;

/// A [`Tool`] backed by an async closure: [`FunctionTool::new`] for raw JSON arguments
/// and a schema you write, [`FunctionTool::typed`] for arguments of a Rust type with a
/// generated schema.
///
/// ```
/// use rein::{FunctionTool, ToolError};
/// use serde_json::json;
/// let add = FunctionTool::new(
///     "add",
///     "Adds two numbers.",
///     json!({"type": "object",
///            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
///            "required": ["a", "b"]}),
///     |args| async move {
///         let a = args["a"].as_f64().ok_or_else(|| ToolError::new("a must be a number"))?;
///         let b = args["b"].as_f64().ok_or_else(|| ToolError::new("b must be a number"))?;
///         Ok((a + b).to_string())
///     },
/// );
/// # let _ = add;
/// ```
#[derive(Clone)]
pub struct FunctionTool {
    name: String,
    description: String,
    parameters: Value,
    concurrency_safe: bool,
    timeout: Option<Duration>,
    effect: EffectClass,
    capabilities: ToolCapabilities,
    handler: Arc<Handler>,
}

impl FunctionTool {
    /// A tool that runs `f` with the validated arguments.
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self::with_context(name, description, parameters, move |v, _ctx| f(v))
    }

    /// Like [`FunctionTool::new`], but `f` also receives the [`ToolContext`] (run ids,
    /// extensions, progress emission).
    pub fn with_context<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            concurrency_safe: true,
            timeout: None,
            effect: EffectClass::AtMostOnce,
            capabilities: ToolCapabilities::default(),
            handler: Arc::new(move |v, ctx| f(v, ctx).boxed()),
        }
    }

    /// Marks the tool as not safe to run concurrently with other calls: it then runs
    /// alone in its turn.
    #[must_use]
    pub fn not_concurrency_safe(mut self) -> Self {
        self.concurrency_safe = false;
        self
    }

    /// Sets a timeout for this tool, overriding the agent's tool timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Declares how the tool may be retried (default [`EffectClass::AtMostOnce`]; see
    /// [`Tool::effect_class`]).
    #[must_use]
    pub fn effect(mut self, class: EffectClass) -> Self {
        self.effect = class;
        self
    }

    /// Declares the tool read-only ([`EffectClass::ReadOnly`]): safe to run again, not
    /// journaled before it runs.
    #[must_use]
    pub fn read_only(self) -> Self {
        self.effect(EffectClass::ReadOnly)
    }

    /// Declares the tool idempotent under [`ToolContext::idempotency_key`]
    /// ([`EffectClass::Idempotent`]).
    #[must_use]
    pub fn idempotent(self) -> Self {
        self.effect(EffectClass::Idempotent)
    }

    /// Declares what the tool can do and the label of its results (default
    /// [`ToolCapabilities::default`]; see [`Tool::capabilities`]).
    #[must_use]
    pub fn capabilities(mut self, capabilities: ToolCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }
}

impl fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionTool")
            .field("name", &self.name)
            .field("concurrency_safe", &self.concurrency_safe)
            .field("timeout", &self.timeout)
            .field("effect", &self.effect)
            .finish_non_exhaustive()
    }
}

impl Tool for FunctionTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn concurrency_safe(&self) -> bool {
        self.concurrency_safe
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    fn effect_class(&self) -> EffectClass {
        self.effect
    }
    fn capabilities(&self) -> ToolCapabilities {
        self.capabilities
    }
    fn call(
        &self,
        input: Value,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<String, ToolError>> + Send {
        (self.handler)(input, ctx)
    }
}
