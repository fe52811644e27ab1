//! Per-call hook state, kept with the call's events.
//!
//! Hooks that pair events (latency timers, audit durations, correction budgets) keep
//! their state here, keyed by hook instance, in a slot every event of one call shares
//! (a subagent's call has its own): two instances of one hook type, or a parent and the
//! child it delegates to, never see each other's state. The state is taken out on the
//! terminal event (`PostCall` or `Error`); whatever is left (a cancelled call) is
//! dropped with the call, so nothing outlives it. A lookup is one uncontended lock
//! and a scan of a handful of entries: no hashing, no allocation, no reference counts
//! (the run context's extensions, which this replaced, cost ~400 instructions an
//! event).

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{MutexGuard, PoisonError};

use crate::hook::EventMeta;

/// A process-unique id for one hook instance.
pub(crate) fn next_instance_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

type Slots = Vec<(u64, Box<dyn Any + Send>)>;

fn lock(meta: &EventMeta) -> MutexGuard<'_, Slots> {
    meta.call
        .states
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The per-call states of type `T`, by hook instance (a namespace for the functions
/// below; a hook uses one state type).
pub(crate) struct RunStates<T>(PhantomData<T>);

impl<T: Send + 'static> RunStates<T> {
    /// The state of `hook` in `slots`, if present and of type `T`.
    fn find(slots: &mut Slots, hook: u64) -> Option<&mut T> {
        slots
            .iter_mut()
            .find(|(h, _)| *h == hook)
            .and_then(|(_, state)| state.downcast_mut::<T>())
    }

    /// Runs `f` on the state of `hook` in this call, creating it with `init` if absent.
    pub(crate) fn with<R>(
        meta: &EventMeta,
        hook: u64,
        init: impl FnOnce() -> T,
        f: impl FnOnce(&mut T) -> R,
    ) -> R {
        let mut slots = lock(meta);
        if let Some(state) = Self::find(&mut slots, hook) {
            return f(state);
        }
        let mut state = init();
        let result = f(&mut state);
        slots.push((hook, Box::new(state)));
        result
    }

    /// Runs `f` on the state of `hook` in this call, if present.
    pub(crate) fn update<R>(meta: &EventMeta, hook: u64, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        Self::find(&mut lock(meta), hook).map(f)
    }

    /// Replaces the state of `hook` in this call, returning the previous one (drop it
    /// after this returns: the lock is released by then).
    pub(crate) fn reset(meta: &EventMeta, hook: u64, value: T) -> Option<T> {
        let mut slots = lock(meta);
        match Self::find(&mut slots, hook) {
            Some(state) => Some(std::mem::replace(state, value)),
            None => {
                slots.push((hook, Box::new(value)));
                None
            }
        }
    }

    /// Takes the state of `hook` out of this call.
    pub(crate) fn take(meta: &EventMeta, hook: u64) -> Option<T> {
        let mut slots = lock(meta);
        let i = slots
            .iter()
            .position(|(h, state)| *h == hook && state.is::<T>())?;
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
        RunStates::with(&call, 1, || 10u32, |v| *v += 1);
        RunStates::with(&event, 2, || 20u32, |_| ());
        assert_eq!(RunStates::<u32>::update(&event, 1, |v| *v), Some(11));
        assert_eq!(RunStates::<u32>::update(&call, 3, |v| *v), None);
        assert_eq!(RunStates::reset(&call, 2, 21u32), Some(20));
        assert_eq!(RunStates::<u32>::take(&event, 1), Some(11));
        assert_eq!(RunStates::<u32>::take(&event, 1), None);
        // Another call (a subagent's, or the next one) has its own states.
        let other = meta();
        assert_eq!(RunStates::<u32>::update(&other, 2, |v| *v), None);
        assert_eq!(RunStates::<u32>::take(&call, 2), Some(21));
        assert!(call.call.states.0.lock().unwrap().is_empty());
    }
}
