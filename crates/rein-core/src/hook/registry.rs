//! Hook registries: hooks a builder takes in addition to its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::{IntoHook, RegisteredHook};

/// One registration: the hook and the token a [`RegistrationGuard`] removes it by.
#[derive(Clone)]
struct Entry {
    token: u64,
    hook: RegisteredHook,
}

/// A shared, ordered set of hooks that builders take in addition to their own (for
/// example, a platform team's audit hook installed on every agent of a service).
///
/// Clones share the same set. A builder reads the registry when `build()` runs: hooks
/// added later apply to agents built later, never to agents already built. Registry
/// hooks come after the builder's own hooks at equal priority, and a hook instance
/// present both on the builder and in a registry (same `Arc`) runs once per event.
///
/// [`HookRegistry::global`] is the process-wide default registry, which every builder
/// reads unless told not to (`AgentBuilder::without_global_hooks`). To add a hook for a
/// limited time (a test, a maintenance window), use [`HookRegistry::register_scoped`]:
/// the hook is removed when the returned guard drops, even when the scope unwinds from a
/// panic, so it never leaks into agents built afterwards.
///
/// ```
/// use rein::*;
/// use std::sync::Arc;
///
/// // A platform team's guard, installed on every agent built from this registry.
/// let platform = HookRegistry::new();
/// let guard = Arc::new(hook_fn(EventKind::PreActing, |event| {
///     if let HookEvent::PreActing(e) = event
///         && e.tool_use().name == "drop_table"
///     {
///         e.deny("never");
///     }
///     Ok(())
/// }));
/// platform.register(Arc::clone(&guard));
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::new([ScriptedTurn::text("hi")]))
///     .hook(Arc::clone(&guard)) // the same instance: it still runs once per event
///     .hooks_from(&platform)
///     .build()?;
/// assert_eq!(agent.hook_names().len(), 1);
///
/// {
///     let _scoped = platform.register_scoped(hook_fn(EventKind::PostCall, |_| Ok(())));
///     assert_eq!(platform.len(), 2);
/// } // removed here, even if the scope panics
/// assert_eq!(platform.len(), 1);
/// assert!(platform.unregister(&guard));
/// # Ok::<(), rein::BuildError>(())
/// ```
#[derive(Clone, Default)]
pub struct HookRegistry {
    hooks: Arc<Mutex<Vec<Entry>>>,
}

impl std::fmt::Debug for HookRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRegistry")
            .field("len", &self.len())
            .finish()
    }
}

/// Source of registration tokens, unique in the process.
fn next_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl HookRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide default registry.
    pub fn global() -> &'static HookRegistry {
        static GLOBAL: OnceLock<HookRegistry> = OnceLock::new();
        GLOBAL.get_or_init(HookRegistry::new)
    }

    /// Adds a hook (a value, or an `Arc` to share and deduplicate an instance) for good:
    /// it stays until [`unregister`](Self::unregister)ed.
    pub fn register<M>(&self, hook: impl IntoHook<M>) {
        self.push(hook);
    }

    /// Adds a hook for as long as the returned guard lives.
    ///
    /// Dropping the [`RegistrationGuard`] removes exactly this registration (other
    /// registrations of the same instance stay). The drop also runs while a panic
    /// unwinds, so a failing test cannot leave its hook in [`HookRegistry::global`] for
    /// the tests that run after or beside it. As with [`unregister`](Self::unregister),
    /// agents built while the guard lived keep the hook.
    #[must_use = "the hook is removed as soon as the guard is dropped"]
    pub fn register_scoped<M>(&self, hook: impl IntoHook<M>) -> RegistrationGuard {
        let token = self.push(hook);
        RegistrationGuard {
            registry: self.clone(),
            token,
        }
    }

    /// Removes every registration of this hook instance (scoped ones included), a
    /// [`Hook`](super::Hook) or a [`SyncHook`](super::SyncHook) registered as an `Arc`.
    /// Returns whether one was found. Agents already built keep it.
    pub fn unregister<H: ?Sized>(&self, hook: &Arc<H>) -> bool {
        let identity = Arc::as_ptr(hook) as *const () as usize;
        let mut hooks = self.lock();
        let before = hooks.len();
        hooks.retain(|e| e.hook.identity != identity);
        hooks.len() != before
    }

    /// Number of registrations.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` if nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    pub(crate) fn snapshot(&self) -> Vec<RegisteredHook> {
        self.lock().iter().map(|e| e.hook.clone()).collect()
    }

    fn push<M>(&self, hook: impl IntoHook<M>) -> u64 {
        let token = next_token();
        self.lock().push(Entry {
            token,
            hook: hook.into_registered().0,
        });
        token
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps one hook registered in a [`HookRegistry`] while it lives; made by
/// [`HookRegistry::register_scoped`].
///
/// Dropping it (at the end of the scope, explicitly, or while a panic unwinds) removes
/// that registration. Agents built in the meantime keep the hook.
#[must_use = "the hook is removed as soon as the guard is dropped"]
pub struct RegistrationGuard {
    registry: HookRegistry,
    token: u64,
}

impl std::fmt::Debug for RegistrationGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationGuard")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Drop for RegistrationGuard {
    fn drop(&mut self) {
        let token = self.token;
        self.registry.lock().retain(|e| e.token != token);
    }
}
