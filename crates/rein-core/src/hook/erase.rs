//! The one boundary where hooks are erased: settings read once, async hooks behind a
//! private object-safe twin, sync hooks as plain trait objects.

use std::sync::Arc;
use std::time::Duration;

use super::{FailurePolicy, Hook, HookError, HookEvent, HookSite, Interest, SyncHook};
use crate::tool::SharedTool;

/// A hook's settings as the chain uses them, read once when an agent is built (the
/// role `tracing::Metadata` plays for a span): everything the chain needs to order,
/// filter and supervise the hook without calling it.
///
/// Built from a hook's defaulted methods ([`HookSettings::of`], [`HookSettings::of_sync`]);
/// useful in tests to check a hook's configuration whichever trait it implements.
///
/// ```
/// use rein::{EventKind, HookSettings, Interest, hook_fn};
///
/// let guard = hook_fn(EventKind::PreActing, |_event| Ok(())).with_priority(20);
/// let settings = HookSettings::of_sync(&guard);
/// assert_eq!(settings.priority, 20);
/// assert_eq!(settings.interest, Interest::only(EventKind::PreActing));
/// assert!(settings.sync);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookSettings {
    /// [`Hook::name`]: the name in logs, errors and decision records.
    pub name: Arc<str>,
    /// [`Hook::priority`]: lower runs first.
    pub priority: i32,
    /// [`Hook::interest`]: the kinds the hook is called for.
    pub interest: Interest,
    /// [`Hook::failure_policy`]: what an error, panic or timeout means.
    pub failure_policy: FailurePolicy,
    /// [`Hook::timeout`]: the hook's own limit per call (`None` for sync hooks, which
    /// cannot be suspended, and for hooks that leave it to the agent).
    pub timeout: Option<Duration>,
    /// [`Hook::propagate_to_subagents`]: whether subagents run the hook too.
    pub propagate_to_subagents: bool,
    /// Whether the hook is a [`SyncHook`] (called without a future).
    pub sync: bool,
}

impl HookSettings {
    /// The settings of an `async fn` hook.
    pub fn of<H: Hook>(hook: &H) -> Self {
        Self {
            name: Arc::from(hook.name()),
            priority: hook.priority(),
            interest: hook.interest(),
            failure_policy: hook.failure_policy(),
            timeout: hook.timeout(),
            propagate_to_subagents: hook.propagate_to_subagents(),
            sync: false,
        }
    }

    /// The settings of a [`SyncHook`] (its timeout is always `None`).
    pub fn of_sync<S: SyncHook + ?Sized>(hook: &S) -> Self {
        Self {
            name: Arc::from(hook.name()),
            priority: hook.priority(),
            interest: hook.interest(),
            failure_policy: hook.failure_policy(),
            timeout: None,
            propagate_to_subagents: hook.propagate_to_subagents(),
            sync: true,
        }
    }
}

/// Inline capacity for a hook's future: futures up to this size (and pointer
/// alignment) are erased without allocating; larger ones are boxed.
const INLINE_FUTURE: usize = 64;

/// A type-erased hook future: inline when it fits, boxed otherwise.
pub(crate) type ErasedHookFuture<'a> =
    stackfuture::StackFuture<'a, Result<(), HookError>, INLINE_FUTURE>;

/// The object-safe twin of [`Hook`]: the one place hook futures are erased. Private:
/// users implement [`Hook`] with `async fn`.
pub(crate) trait DynHook: Send + Sync + 'static {
    fn on_event_erased<'a>(&'a self, event: &'a mut HookEvent) -> ErasedHookFuture<'a>;
    fn settings(&self) -> HookSettings;
    fn validate(&self) -> Result<(), HookError>;
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError>;
    fn tools(&self) -> Vec<SharedTool>;
}

impl<H: Hook> DynHook for H {
    fn on_event_erased<'a>(&'a self, event: &'a mut HookEvent) -> ErasedHookFuture<'a> {
        stackfuture::StackFuture::from_or_box(Hook::on_event(self, event))
    }
    fn settings(&self) -> HookSettings {
        HookSettings::of(self)
    }
    fn validate(&self) -> Result<(), HookError> {
        Hook::validate(self)
    }
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        Hook::validate_on(self, site)
    }
    fn tools(&self) -> Vec<SharedTool> {
        Hook::tools(self)
    }
}

/// A hook as the chain holds it: an `async fn` hook behind its erased twin, or a sync
/// hook as a plain trait object (`SyncHook` is object-safe: nothing to erase).
#[derive(Clone)]
pub(crate) enum ErasedHook {
    Async(Arc<dyn DynHook>),
    Sync(Arc<dyn SyncHook>),
}

impl ErasedHook {
    /// The hook's settings (read once per build).
    pub(crate) fn settings(&self) -> HookSettings {
        match self {
            ErasedHook::Async(h) => h.settings(),
            ErasedHook::Sync(h) => HookSettings::of_sync(&**h),
        }
    }

    /// [`Hook::validate`] / [`SyncHook::validate`].
    pub(crate) fn validate(&self) -> Result<(), HookError> {
        match self {
            ErasedHook::Async(h) => h.validate(),
            ErasedHook::Sync(h) => h.validate(),
        }
    }

    /// [`Hook::validate_on`] / [`SyncHook::validate_on`].
    pub(crate) fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        match self {
            ErasedHook::Async(h) => h.validate_on(site),
            ErasedHook::Sync(h) => h.validate_on(site),
        }
    }

    /// [`Hook::tools`] / [`SyncHook::tools`].
    pub(crate) fn tools(&self) -> Vec<SharedTool> {
        match self {
            ErasedHook::Async(h) => h.tools(),
            ErasedHook::Sync(h) => h.tools(),
        }
    }

    /// Address of the shared allocation: equal for clones of one `Arc`.
    fn identity(&self) -> usize {
        match self {
            ErasedHook::Async(h) => Arc::as_ptr(h) as *const () as usize,
            ErasedHook::Sync(h) => Arc::as_ptr(h) as *const () as usize,
        }
    }
}

/// A hook as registered: the erased instance plus its identity for deduplication.
#[derive(Clone)]
pub(crate) struct RegisteredHook {
    pub(crate) hook: ErasedHook,
    /// Address of the shared allocation: equal for clones of one `Arc`.
    pub(crate) identity: usize,
}

impl RegisteredHook {
    fn new(hook: ErasedHook) -> Self {
        let identity = hook.identity();
        Self { hook, identity }
    }
}

/// Conversion into a registered hook: implemented for every [`Hook`] and every
/// [`SyncHook`] value (a fresh instance) and for an `Arc` of either (a shared instance,
/// deduplicated by `Arc` identity).
///
/// The type parameter is a marker from [`marker`] that the compiler infers: it is what
/// lets one `hook(..)` method take both kinds of hook and still register a sync hook
/// through its own adapter (called without a future). Code that forwards a hook writes
/// `fn add<M>(h: impl IntoHook<M>)`.
pub trait IntoHook<M> {
    #[doc(hidden)]
    fn into_registered(self) -> RegisteredHookHandle;
}

/// Opaque registration handle produced by [`IntoHook`].
#[doc(hidden)]
pub struct RegisteredHookHandle(pub(crate) RegisteredHook);

impl std::fmt::Debug for RegisteredHookHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredHookHandle")
            .finish_non_exhaustive()
    }
}

/// The marker types of [`IntoHook`]: which registration path a hook value takes. Never
/// named in user code (the compiler infers them); uninhabited.
pub mod marker {
    /// An `async fn` [`Hook`](crate::Hook) value.
    #[derive(Debug)]
    pub enum Async {}
    /// A [`SyncHook`](crate::SyncHook) value.
    #[derive(Debug)]
    pub enum Sync {}
    /// An `Arc` of an `async fn` [`Hook`](crate::Hook).
    #[derive(Debug)]
    pub enum SharedAsync {}
    /// An `Arc` of a [`SyncHook`](crate::SyncHook).
    #[derive(Debug)]
    pub enum SharedSync {}
}

impl<H: Hook> IntoHook<marker::Async> for H {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(ErasedHook::Async(Arc::new(self))))
    }
}

impl<H: Hook> IntoHook<marker::SharedAsync> for Arc<H> {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(ErasedHook::Async(self)))
    }
}

impl<S: SyncHook> IntoHook<marker::Sync> for S {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(ErasedHook::Sync(Arc::new(self))))
    }
}

impl<S: SyncHook> IntoHook<marker::SharedSync> for Arc<S> {
    fn into_registered(self) -> RegisteredHookHandle {
        RegisteredHookHandle(RegisteredHook::new(ErasedHook::Sync(self)))
    }
}
