//! Per-call hook state: what a hook remembers between the events of one call.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{MutexGuard, PoisonError};

use super::meta::EventMeta;

/// Identifies one hook instance's per-call state. Every `StateKey::new()` is unique in
/// the process; a hook makes one when it is constructed and uses it for every call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateKey(u64);

impl StateKey {
    /// A key no other `StateKey` in this process equals.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for StateKey {
    /// Same as [`StateKey::new`]: a fresh key.
    fn default() -> Self {
        Self::new()
    }
}

type Slots = Vec<(u64, Box<dyn Any + Send>)>;

/// The per-call state of the hooks of one call, shared by every event of that call.
///
/// A hook is shared by every call of an agent (and by the agent's clones), so it must not
/// keep a call's state in its own fields. Hooks that pair events — a timer started at
/// `PreReasoning` and read at `PostReasoning`, a retry budget counted across
/// `PostReasoning` events, an edit remembered from `PreActing` to `PostActing` — keep it
/// in the call's [`CallState`], reached from any event with `event.state()`:
///
/// ```
/// use rein::hook::StateKey;
/// use rein::*;
///
/// /// Counts the model turns of each call.
/// struct TurnCounter {
///     key: StateKey,
/// }
///
/// impl SyncHook for TurnCounter {
///     fn interest(&self) -> Interest {
///         Interest::only(EventKind::PostReasoning) | EventKind::PostCall
///     }
///     fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
///         match event {
///             HookEvent::PostReasoning(e) => {
///                 e.state().with(self.key, || 0u32, |turns| *turns += 1);
///             }
///             HookEvent::PostCall(e) => {
///                 let turns = e.state().take::<u32>(self.key).unwrap_or(0);
///                 tracing::info!(turns, "call finished");
///             }
///             _ => {}
///         }
///         Ok(())
///     }
/// }
///
/// let hook = TurnCounter { key: StateKey::new() };
/// # let _ = hook;
/// ```
///
/// The state is keyed by the hook instance's [`StateKey`] (make one in the hook's
/// constructor) and by type, so two instances of one hook type, or a parent and the child
/// it delegates to (a subagent's call has its own state), never see each other's state.
/// Whatever a hook leaves behind is dropped with the call — finished, failed or
/// cancelled — so nothing outlives it. A lookup is one uncontended lock and a scan of a
/// handful of entries: no hashing, no allocation once the state exists.
///
/// Keep per-call *inputs* (a user id, a tenant, approval decisions) in the
/// [`RunContext`](crate::RunContext)'s extensions instead: those come from the caller;
/// this is the hooks' own scratch space.
///
/// Every method takes the hook's [`StateKey`] and works on the state of type `T` stored
/// under it; a state of another type under the same key is invisible to it. The closures
/// run under the call's state lock: do not call another `CallState` method from inside
/// one (it would wait for itself).
#[derive(Clone, Copy)]
pub struct CallState<'a>(&'a EventMeta);

impl std::fmt::Debug for CallState<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState").finish_non_exhaustive()
    }
}

impl<'a> CallState<'a> {
    pub(crate) fn of(meta: &'a EventMeta) -> Self {
        Self(meta)
    }

    fn lock(&self) -> MutexGuard<'a, Slots> {
        self.0
            .call
            .states
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn find<T: Send + 'static>(slots: &mut Slots, key: StateKey) -> Option<&mut T> {
        slots
            .iter_mut()
            .find(|(k, state)| *k == key.0 && state.is::<T>())
            .and_then(|(_, state)| state.downcast_mut::<T>())
    }

    /// Runs `f` on this hook's state, creating it with `init` first if this call has none.
    pub fn with<T: Send + 'static, R>(
        &self,
        key: StateKey,
        init: impl FnOnce() -> T,
        f: impl FnOnce(&mut T) -> R,
    ) -> R {
        let mut slots = self.lock();
        if let Some(state) = Self::find::<T>(&mut slots, key) {
            return f(state);
        }
        let mut state = init();
        let result = f(&mut state);
        slots.push((key.0, Box::new(state)));
        result
    }

    /// Runs `f` on this hook's state if this call has one; `None` (and `f` not run)
    /// otherwise.
    pub fn update<T: Send + 'static, R>(
        &self,
        key: StateKey,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        Self::find::<T>(&mut self.lock(), key).map(f)
    }

    /// Sets this hook's state to `value`, returning the previous one if there was one.
    pub fn replace<T: Send + 'static>(&self, key: StateKey, value: T) -> Option<T> {
        let mut slots = self.lock();
        match Self::find::<T>(&mut slots, key) {
            Some(state) => Some(std::mem::replace(state, value)),
            None => {
                slots.push((key.0, Box::new(value)));
                None
            }
        }
    }

    /// Takes this hook's state out of the call (typically on `PostCall` or `Error`);
    /// `None` if there is none.
    pub fn take<T: Send + 'static>(&self, key: StateKey) -> Option<T> {
        let mut slots = self.lock();
        let i = slots
            .iter()
            .position(|(k, state)| *k == key.0 && state.is::<T>())?;
        let (_, state) = slots.swap_remove(i);
        drop(slots);
        state.downcast::<T>().ok().map(|b| *b)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::agent::{AgentInfo, RunContext};
    use crate::hook::TrailMode;

    fn meta() -> EventMeta {
        EventMeta::new(
            &Arc::new(AgentInfo {
                id: "a".to_owned(),
                name: "a".to_owned(),
                parent_id: None,
                depth: 0,
            }),
            &RunContext::new(),
            Arc::from(Vec::new()),
            TrailMode::default(),
        )
    }

    #[test]
    fn state_is_kept_per_hook_for_one_call_and_shared_by_its_events() {
        let call = meta();
        let event = call.clone();
        let (one, two, three) = (StateKey::new(), StateKey::new(), StateKey::new());
        CallState::of(&call).with(one, || 10u32, |v| *v += 1);
        CallState::of(&event).with(two, || 20u32, |_| ());
        assert_eq!(
            CallState::of(&event).update::<u32, _>(one, |v| *v),
            Some(11)
        );
        assert_eq!(CallState::of(&call).update::<u32, _>(three, |v| *v), None);
        assert_eq!(CallState::of(&call).replace(two, 21u32), Some(20));
        assert_eq!(CallState::of(&event).take::<u32>(one), Some(11));
        assert_eq!(CallState::of(&event).take::<u32>(one), None);
        // Another call (a subagent's, or the next one) has its own states.
        let other = meta();
        assert_eq!(CallState::of(&other).update::<u32, _>(two, |v| *v), None);
        assert_eq!(CallState::of(&call).take::<u32>(two), Some(21));
        assert!(call.call.states.0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_state_of_another_type_under_the_same_key_is_invisible() {
        let call = meta();
        let key = StateKey::new();
        CallState::of(&call).with(key, || 1u32, |_| ());
        assert_eq!(CallState::of(&call).take::<String>(key), None);
        assert_eq!(CallState::of(&call).take::<u32>(key), Some(1));
    }
}
