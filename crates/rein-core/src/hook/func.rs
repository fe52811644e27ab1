//! Closure hooks: `hook_fn(EventKind::PreActing, |event| …)`.

use std::borrow::Cow;
use std::fmt;

use super::{EventKind, FailurePolicy, HookError, HookEvent, Interest, SyncHook};

/// A hook made from a closure, for the events of `interest` (an [`EventKind`] or an
/// [`Interest`]): the closure is called with each such event, synchronously, like a
/// [`SyncHook`] (no future, about the cost of a virtual call), in the same chain as
/// every other hook.
///
/// Defaults: named `hook_fn`, priority 100, [`FailurePolicy::Abort`],
/// inherited by subagents; change them with the `with_*` methods and
/// [`HookFn::local_only`].
///
/// The closure cannot await: a closure hook that waits would need a future borrowing
/// the event that is `Send`, which stable Rust cannot state for a closure. Implement
/// [`Hook`](super::Hook) with `async fn` for that.
///
/// ```
/// use rein::*;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let no_refunds = hook_fn(EventKind::PreActing, |event| {
///     if let HookEvent::PreActing(e) = event
///         && e.tool_use().name == "refund"
///     {
///         e.deny("refunds need a human");
///     }
///     Ok(())
/// })
/// .with_name("no_refunds")
/// .with_priority(20);
///
/// let mut tools = Toolkit::new();
/// tools.register(FunctionTool::new("refund", "Refunds.", json!({"type": "object"}),
///     |_| async { Ok("refunded".to_string()) }))?;
/// let agent = Agent::builder()
///     .model(ScriptedModel::new([
///         ScriptedTurn::tool_call("refund", json!({})),
///         ScriptedTurn::text("I asked a colleague."),
///     ]))
///     .toolkit(tools)
///     .hook(no_refunds)
///     .build()?;
/// assert_eq!(agent.call(Msg::user("refund me")).await?.text(), "I asked a colleague.");
/// # Ok(()) }
/// ```
pub fn hook_fn<F>(interest: impl Into<Interest>, f: F) -> HookFn<F>
where
    F: Fn(&mut HookEvent) -> Result<(), HookError> + Send + Sync + 'static,
{
    HookFn {
        f,
        interest: interest.into(),
        name: None,
        priority: 100,
        policy: FailurePolicy::Abort,
        propagate: true,
    }
}

/// A closure hook made by [`hook_fn`].
#[derive(Clone)]
pub struct HookFn<F> {
    f: F,
    interest: Interest,
    name: Option<Cow<'static, str>>,
    priority: i32,
    policy: FailurePolicy,
    propagate: bool,
}

impl<F> HookFn<F> {
    /// Names the hook (logs, errors, decision records). Default `hook_fn`.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the priority (lower runs first). Default 100.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets what the closure's errors (and panics) mean. Default
    /// [`FailurePolicy::Abort`].
    #[must_use]
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Keeps the hook off subagents (default: they run it too).
    #[must_use]
    pub fn local_only(mut self) -> Self {
        self.propagate = false;
        self
    }
}

impl<F> fmt::Debug for HookFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookFn")
            .field("name", &self.name)
            .field("interest", &self.interest)
            .field("priority", &self.priority)
            .field("policy", &self.policy)
            .field("propagate", &self.propagate)
            .finish_non_exhaustive()
    }
}

impl<F> SyncHook for HookFn<F>
where
    F: Fn(&mut HookEvent) -> Result<(), HookError> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        match &self.name {
            Some(n) => n,
            None => "hook_fn",
        }
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn interest(&self) -> Interest {
        self.interest
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn propagate_to_subagents(&self) -> bool {
        self.propagate
    }
    #[inline]
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        (self.f)(event)
    }
}

impl From<EventKind> for Interest {
    /// The set of exactly this kind.
    fn from(kind: EventKind) -> Interest {
        Interest::only(kind)
    }
}
