//! Errors as values.
//!
//! - [`Error`]: a call failed (model error, aborting hook, bound exceeded, bad input).
//!   Tool failures are *not* errors: they become error tool results the model reads.
//! - [`BuildError`]: an agent could not be built (missing model, duplicate tool,
//!   invalid schema, invalid hook configuration, unreadable policy).
//!
//! Both are opaque structs with a `#[non_exhaustive]` kind to match on, and a
//! `Display` that names the problem and where it is (hook, event, tool, file, key).

//!
//! Layers: [`BuildError`] sits at the bottom (every layer's builders return it). The call
//! [`Error`] (in `error/call.rs`) sits above `model` and below `hook`: it composes the
//! lower layers' errors (a [`ModelError`](crate::ModelError), a hook's error as its
//! source, a store error as its source) without importing the layers above it; the
//! accessors for upper-layer causes ([`Error::store_error`]) are defined where those
//! types live.

mod call;

pub(crate) use call::HookFailure;
pub use call::{Error, ErrorKind, HookFailureKind};

use std::fmt;

use crate::strict::SpecError;

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
    /// `HooksConfig` (`rein::hooks`)); the message names the key.
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
    /// A build error of this kind with this message (shown as it is): what an extension
    /// of the builder (an MCP client, a hook's constructor) returns.
    pub fn new(kind: BuildErrorKind, message: impl Into<String>) -> Self {
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

    /// A [`BuildErrorKind::InvalidConfig`] error for an invalid configuration value,
    /// naming its key (e.g. `tool_guard.numeric_caps.amount.max`): what a hook's or an
    /// extension's constructor returns for a setting it cannot use. The message reads
    /// ``invalid configuration `key`: message``.
    pub fn invalid_config(key: &str, message: impl fmt::Display) -> Self {
        Self::new(
            BuildErrorKind::InvalidConfig,
            format!("invalid configuration `{key}`: {message}"),
        )
    }

    /// A tool could not be registered (`err` is the toolkit's error).
    pub(crate) fn tool(context: &str, err: impl fmt::Display) -> Self {
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

/// Hand-written rather than `thiserror`: the workspace error is returned as itself
/// (a derived impl would return the `Box`, and `downcast_ref::<SpecError>` would fail).
impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.spec
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
