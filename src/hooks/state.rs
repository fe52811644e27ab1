//! Per-run hook state, kept in the run context's [`Extensions`](crate::Extensions).
//!
//! Hooks that pair events (latency timers, audit durations, correction budgets) keep
//! their state here, keyed by (hook instance, agent id): a subagent sharing its parent's
//! run context, or two instances of one hook type, never see each other's state. The
//! state of a (hook, agent) pair is taken out on the terminal event (`PostCall` or
//! `Error`), and the extension itself is removed once empty, so a finished run leaves
//! nothing behind; a cancelled run's state is dropped with its context.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::agent::RunContext;

/// A process-unique id for one hook instance.
pub(crate) fn next_instance_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The states of one run: `(hook instance, agent id, state)`. A run holds a handful
/// of pairs (one per stateful hook, times the agents sharing the context), so a
/// linear scan beats hashing: no hash per event, no allocation per lookup.
type ByHook<T> = Vec<(u64, Box<str>, T)>;

fn position<T>(map: &ByHook<T>, hook: u64, agent: &str) -> Option<usize> {
    map.iter().position(|(h, a, _)| *h == hook && **a == *agent)
}

struct Slots<T> {
    map: ByHook<T>,
    /// Set when the extension was removed from its context: a late writer retries
    /// with a fresh extension instead of writing into a detached one.
    retired: bool,
}

/// The per-run states of type `T` of every (hook instance, agent) pair of one run.
pub(crate) struct RunStates<T> {
    slots: Mutex<Slots<T>>,
}

impl<T: Send + 'static> RunStates<T> {
    fn lock(&self) -> MutexGuard<'_, Slots<T>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn of(ctx: &RunContext) -> Arc<Self> {
        ctx.extensions().get_or_insert_run_local(|| RunStates {
            slots: Mutex::new(Slots {
                map: Vec::new(),
                retired: false,
            }),
        })
    }

    /// Runs `f` on the live slot map of the run, creating the extension if needed.
    fn live<R>(ctx: &RunContext, f: impl FnOnce(&mut ByHook<T>) -> R) -> R {
        loop {
            let states = Self::of(ctx);
            let mut slots = states.lock();
            if slots.retired {
                // Removed from the context by a concurrent `take`: the next `of` creates
                // a fresh extension.
                continue;
            }
            return f(&mut slots.map);
        }
    }

    /// Runs `f` on the state of (`hook`, `agent`), creating it with `init` if absent.
    pub(crate) fn with<R>(
        ctx: &RunContext,
        hook: u64,
        agent: &str,
        init: impl FnOnce() -> T,
        f: impl FnOnce(&mut T) -> R,
    ) -> R {
        Self::live(ctx, |map| {
            let i = match position(map, hook, agent) {
                Some(i) => i,
                None => {
                    map.push((hook, agent.into(), init()));
                    map.len() - 1
                }
            };
            f(&mut map[i].2)
        })
    }

    /// Runs `f` on the state of (`hook`, `agent`) if present.
    pub(crate) fn update<R>(
        ctx: &RunContext,
        hook: u64,
        agent: &str,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        loop {
            let states = ctx.extensions().get::<Self>()?;
            let mut slots = states.lock();
            if slots.retired {
                continue;
            }
            let i = position(&slots.map, hook, agent)?;
            return Some(f(&mut slots.map[i].2));
        }
    }

    /// Replaces the state of (`hook`, `agent`), returning the previous one.
    pub(crate) fn reset(ctx: &RunContext, hook: u64, agent: &str, value: T) -> Option<T> {
        Self::live(ctx, |map| match position(map, hook, agent) {
            Some(i) => Some(std::mem::replace(&mut map[i].2, value)),
            None => {
                map.push((hook, agent.into(), value));
                None
            }
        })
    }

    /// Takes the state of (`hook`, `agent`) out; removes the extension once empty.
    pub(crate) fn take(ctx: &RunContext, hook: u64, agent: &str) -> Option<T> {
        loop {
            let states = ctx.extensions().get::<Self>()?;
            let mut slots = states.lock();
            if slots.retired {
                continue;
            }
            let taken = position(&slots.map, hook, agent).map(|i| slots.map.swap_remove(i).2);
            if slots.map.is_empty() {
                slots.retired = true;
                // Lock order: slots, then the extension map (writers never hold both).
                ctx.extensions().remove::<Self>();
            }
            return taken;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_kept_per_hook_and_agent_and_the_extension_goes_when_empty() {
        let ctx = RunContext::new();
        RunStates::with(&ctx, 1, "a", || 10u32, |v| *v += 1);
        RunStates::with(&ctx, 2, "a", || 20u32, |_| ());
        RunStates::with(&ctx, 1, "b", || 30u32, |_| ());
        assert_eq!(RunStates::<u32>::update(&ctx, 1, "a", |v| *v), Some(11));
        assert_eq!(RunStates::<u32>::update(&ctx, 1, "c", |v| *v), None);
        assert_eq!(RunStates::reset(&ctx, 2, "a", 21u32), Some(20));
        assert_eq!(RunStates::<u32>::take(&ctx, 1, "a"), Some(11));
        assert_eq!(RunStates::<u32>::take(&ctx, 1, "b"), Some(30));
        assert_eq!(ctx.extensions().len(), 1);
        assert_eq!(RunStates::<u32>::take(&ctx, 2, "a"), Some(21));
        assert!(ctx.extensions().is_empty());
        assert_eq!(RunStates::<u32>::take(&ctx, 2, "a"), None);
        // A later writer gets a fresh extension.
        RunStates::with(&ctx, 3, "a", || 1u32, |_| ());
        assert_eq!(RunStates::<u32>::take(&ctx, 3, "a"), Some(1));
    }
}
