//! The call error: what ended a failed call, composed from the lower layers' errors.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::context::EventKind;
use crate::model::ModelError;

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
    /// A structured call ([`Agent::call_typed`](crate::Agent::call_typed)) got no
    /// answer of the requested shape: the answer still failed the schema (or did not
    /// deserialize) after the bounded re-asks, the call stopped before answering (a
    /// hook's stop, a call waiting for a human), or the format could not be made from
    /// the type. The message says which, with the schema violation and its path.
    Output,
    /// A model request would not fit the model's context window (see
    /// [`ContextPolicy`](crate::agent::ContextPolicy)): with `Fail`, any request over
    /// it; with `DropOldest`, one whose current turn alone is over it. Nothing was sent;
    /// the message gives the estimate, the answer's reserve and the window.
    ContextWindow,
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
#[derive(Debug, thiserror::Error)]
pub(crate) enum HookFailure {
    /// The hook's own error (a `HookError`), kept as the call error's source.
    #[error("returned an error: {0}")]
    Error(Box<dyn std::error::Error + Send + Sync>),
    /// The hook panicked (the panic message).
    #[error("panicked: {0}")]
    Panic(String),
    /// The hook ran past its timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl HookFailure {
    /// The hook returned `err`.
    pub(crate) fn error(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Error(Box::new(err))
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
            e.inner.source = Some(source);
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

    /// An error of `kind` whose cause is `source` (e.g. a session store's error).
    pub(crate) fn with_source(
        kind: ErrorKind,
        message: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> Self {
        let mut e = Self::new(kind, message);
        e.inner.source = Some(source);
        e
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message.into())
    }

    /// No answer of the requested shape (see [`ErrorKind::Output`]).
    pub(crate) fn context_window(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ContextWindow, message.into())
    }

    pub(crate) fn output(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Output, message.into())
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

    /// The attached cause, if any (a hook's error, a store error).
    pub(crate) fn source_ref(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.inner.source.as_deref()
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

/// Hand-written rather than `thiserror`: the source is the model error or the boxed
/// cause, returned as the concrete error (a derived impl would return the `Box`, and
/// `downcast_ref` to the cause's type would fail).
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

impl Error {
    /// This error with its message (the `Display` output) replaced by `f(message)` when
    /// that returns `Some`; kind, hook, event and sources are kept. Used by the masked
    /// stream to mask personal data in an error item; a stream filter of your own can do
    /// the same.
    pub fn map_message(mut self, f: impl FnOnce(&str) -> Option<String>) -> Self {
        if let Some(message) = f(&self.inner.message) {
            self.inner.message = message;
        }
        self
    }
}
