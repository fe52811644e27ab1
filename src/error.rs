//! Errors as values.
//!
//! - [`Error`]: a call failed (model error, aborting hook, bound exceeded, bad input).
//!   Tool failures are *not* errors: they become error tool results the model reads.
//! - [`BuildError`]: an agent could not be built (missing model, duplicate tool,
//!   invalid schema, invalid hook configuration, unreadable policy).
//!
//! Both are opaque structs with a `#[non_exhaustive]` kind to match on, and a
//! `Display` that names the problem and where it is (hook, event, tool, file, key).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::hook::{EventKind, HookError};
use crate::model::ModelError;
use crate::subagent::spec::SpecError;
use crate::tool::ToolkitError;

/// What kind of failure ended a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The model call failed; see [`Error::model_error`].
    Model,
    /// A hook with the abort policy failed (error, panic or timeout); see
    /// [`Error::hook_name`], [`Error::event_kind`] and [`Error::hook_failure`].
    Hook,
    /// Hooks requested more consecutive `goto_reasoning` hops than the agent allows.
    GotoLimit,
    /// The call's input was invalid (e.g. a system-role message in the input).
    InvalidInput,
    /// The session store failed to load or save the session; see
    /// [`Error::store_error`] (a version conflict is
    /// [`StoreErrorKind::Conflict`](crate::StoreErrorKind::Conflict)).
    Store,
    /// An invariant of the runtime itself broke: a bug in rein, never the caller's
    /// input. The message says which invariant.
    Internal,
}

/// How a hook failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HookFailureKind {
    /// The hook returned an error.
    Error,
    /// The hook panicked.
    Panic,
    /// The hook ran past its timeout.
    Timeout,
}

/// A hook failure as caught by the chain.
#[derive(Debug)]
pub(crate) enum HookFailure {
    Error(HookError),
    Panic(String),
    Timeout(Duration),
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookFailure::Error(e) => write!(f, "returned an error: {e}"),
            HookFailure::Panic(m) => write!(f, "panicked: {m}"),
            HookFailure::Timeout(d) => write!(f, "timed out after {d:?}"),
        }
    }
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    message: String,
    hook: Option<Arc<str>>,
    event: Option<EventKind>,
    hook_failure: Option<HookFailureKind>,
    model: Option<ModelError>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// A failed agent call.
#[derive(Debug)]
pub struct Error {
    inner: Box<Inner>,
}

impl Error {
    fn new(kind: ErrorKind, message: String) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                message,
                hook: None,
                event: None,
                hook_failure: None,
                model: None,
                source: None,
            }),
        }
    }

    pub(crate) fn hook(name: Arc<str>, event: EventKind, failure: HookFailure) -> Self {
        let mut e = Self::new(
            ErrorKind::Hook,
            format!("hook `{name}` {failure} (on {event})"),
        );
        e.inner.hook_failure = Some(match &failure {
            HookFailure::Error(_) => HookFailureKind::Error,
            HookFailure::Panic(_) => HookFailureKind::Panic,
            HookFailure::Timeout(_) => HookFailureKind::Timeout,
        });
        if let HookFailure::Error(source) = failure {
            e.inner.source = Some(Box::new(source));
        }
        e.inner.hook = Some(name);
        e.inner.event = Some(event);
        e
    }

    pub(crate) fn model(phase: &str, model_name: &str, err: ModelError) -> Self {
        let mut e = Self::new(
            ErrorKind::Model,
            format!("model `{model_name}` failed during {phase}: {err}"),
        );
        e.inner.model = Some(err);
        e
    }

    pub(crate) fn goto_limit(limit: u32) -> Self {
        Self::new(
            ErrorKind::GotoLimit,
            format!(
                "hooks requested more than {limit} consecutive goto_reasoning hops; the call was aborted"
            ),
        )
    }

    pub(crate) fn store(err: crate::agent::StoreError) -> Self {
        let mut e = Self::new(ErrorKind::Store, err.to_string());
        e.inner.source = Some(Box::new(err));
        e
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message.into())
    }

    /// A broken runtime invariant (a rein bug), never blamed on the caller.
    pub(crate) fn internal(what: &str) -> Self {
        Self::new(
            ErrorKind::Internal,
            format!("internal error (a rein bug): {what}"),
        )
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The hook that failed, for [`ErrorKind::Hook`].
    pub fn hook_name(&self) -> Option<&str> {
        self.inner.hook.as_deref()
    }

    /// The event during which the hook failed, for [`ErrorKind::Hook`].
    pub fn event_kind(&self) -> Option<EventKind> {
        self.inner.event
    }

    /// How the hook failed, for [`ErrorKind::Hook`].
    pub fn hook_failure(&self) -> Option<HookFailureKind> {
        self.inner.hook_failure
    }

    /// The store error, for [`ErrorKind::Store`].
    pub fn store_error(&self) -> Option<&crate::agent::StoreError> {
        self.inner
            .source
            .as_deref()
            .and_then(|e| e.downcast_ref::<crate::agent::StoreError>())
    }

    /// The model error, for [`ErrorKind::Model`].
    pub fn model_error(&self) -> Option<&ModelError> {
        self.inner.model.as_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if let Some(m) = &self.inner.model {
            return Some(m);
        }
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What kind of problem stopped a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildErrorKind {
    /// No model was set.
    MissingModel,
    /// A tool could not be registered (duplicate name, invalid name or schema).
    Tool,
    /// A hook reported an invalid configuration, or hooks could not be assembled.
    InvalidHook,
    /// A builder setting is invalid (e.g. `max_iters(0)`), or a configuration key is
    /// invalid (e.g. `masking.extra_patterns[0].regex` of a
    /// [`HooksConfig`](crate::hooks::HooksConfig)); the message names the key.
    InvalidConfig,
    /// A workspace file (`tools.json`, `subagents/*.md`) is unreadable or malformed;
    /// see [`BuildError::workspace_error`] for file, line and key.
    Workspace,
    /// A subagent declaration is invalid (duplicate id, missing description, an
    /// allowlist naming a tool the parent cannot call, ...).
    InvalidDeclaration,
    /// An MCP server could not be used: it failed to start, connect or list its tools
    /// within its connect timeout, its configuration is invalid, `enable_tools` names a
    /// tool it does not offer, servers were declared without the feature `mcp`, or the
    /// synchronous `build()` was used where `build_async()` is required. The message
    /// names the server.
    Mcp,
    /// A [`SubagentFactory`](crate::SubagentFactory) tried to widen its child beyond
    /// what the runtime granted: it put a tool instance the parent does not hold under a
    /// name the parent can call, or raised a limit (`max_depth`, `max_iters`,
    /// `max_gotos`, `tool_timeout`, `hook_timeout`). The spawn fails; the message names
    /// the tool or the limit.
    Widening,
}

/// An agent (or declaration) could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    kind: BuildErrorKind,
    message: String,
    spec: Option<Box<SpecError>>,
}

impl BuildError {
    pub(crate) fn new(kind: BuildErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            spec: None,
        }
    }

    pub(crate) fn workspace(err: SpecError) -> Self {
        Self {
            kind: BuildErrorKind::Workspace,
            message: err.to_string(),
            spec: Some(Box::new(err)),
        }
    }

    /// The workspace file error (file, line, key), for [`BuildErrorKind::Workspace`].
    pub fn workspace_error(&self) -> Option<&SpecError> {
        self.spec.as_deref()
    }

    pub(crate) fn invalid_hook(name: &str, message: impl fmt::Display) -> Self {
        Self::new(
            BuildErrorKind::InvalidHook,
            format!("hook `{name}` has an invalid configuration: {message}"),
        )
    }

    /// An invalid configuration value, naming its key (e.g. `tool_guard.numeric_caps.amount.max`).
    pub(crate) fn invalid_config(key: &str, message: impl fmt::Display) -> Self {
        Self::new(
            BuildErrorKind::InvalidConfig,
            format!("invalid configuration `{key}`: {message}"),
        )
    }

    pub(crate) fn tool(context: &str, err: ToolkitError) -> Self {
        Self::new(BuildErrorKind::Tool, format!("{context}: {err}"))
    }

    /// The kind of problem.
    pub fn kind(&self) -> BuildErrorKind {
        self.kind
    }

    /// The message (also the `Display` output).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.spec
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Error {
    /// This error with its message (the `Display` output) replaced by `f(message)` when
    /// that returns `Some`; kind, hook, event and sources are kept. Used by the masked
    /// stream to mask personal data in an error item.
    pub(crate) fn map_message(mut self, f: impl FnOnce(&str) -> Option<String>) -> Self {
        if let Some(message) = f(&self.inner.message) {
            self.inner.message = message;
        }
        self
    }
}
