//! Hook registries: hooks a builder takes in addition to its own.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::{IntoHook, RegisteredHook};

/// A shared, ordered set of hooks that builders take in addition to their own (for
/// example, a platform team's audit hook installed on every agent of a service).
///
/// Clones share the same set. A builder reads the registry when `build()` runs: hooks
/// added later apply to agents built later, never to agents already built. Registry
/// hooks come after the builder's own hooks at equal priority, and a hook instance
/// present both on the builder and in a registry (same `Arc`) runs once per event.
///
/// [`HookRegistry::global`] is the process-wide default registry, which every builder
/// reads unless told not to (`AgentBuilder::without_global_hooks`).
#[derive(Clone, Default)]
pub struct HookRegistry {
    hooks: Arc<Mutex<Vec<RegisteredHook>>>,
}

impl std::fmt::Debug for HookRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRegistry")
            .field("len", &self.len())
            .finish()
    }
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

    /// Adds a hook (a value, or an `Arc` to share and deduplicate an instance).
    pub fn register(&self, hook: impl IntoHook) {
        self.lock().push(hook.into_registered().0);
    }

    /// Removes every registration of this hook instance. Returns whether one was found.
    /// Agents already built keep it.
    pub fn unregister<H: super::Hook>(&self, hook: &Arc<H>) -> bool {
        let identity = Arc::as_ptr(hook) as *const () as usize;
        let mut hooks = self.lock();
        let before = hooks.len();
        hooks.retain(|r| r.identity != identity);
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
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RegisteredHook>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
