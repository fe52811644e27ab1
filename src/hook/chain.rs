//! The priority chain: deduplication, ordering, interest lists and guarded dispatch.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::error::{BuildError, Error, HookFailure};

use super::event::HookLabel;
use super::{DynHook, EventKind, FailurePolicy, HookEvent, Interest, RegisteredHook};

/// A hook with the settings read from it once, at build time.
#[derive(Clone)]
pub(crate) struct HookEntry {
    pub(crate) registered: RegisteredHook,
    pub(crate) name: Arc<str>,
    pub(crate) priority: i32,
    pub(crate) interest: Interest,
    pub(crate) policy: FailurePolicy,
    pub(crate) timeout: Option<Duration>,
    /// Whether subagents inherit this hook.
    pub(crate) propagate: bool,
}

impl HookEntry {
    pub(crate) fn hook(&self) -> &Arc<dyn DynHook> {
        &self.registered.hook
    }
}

/// The built chain of one agent.
#[derive(Clone, Default)]
pub(crate) struct HookChain {
    entries: Vec<HookEntry>,
    /// Names and priorities by entry index, shared with every call's events.
    labels: Arc<[HookLabel]>,
    /// For each [`EventKind`], indexes into `entries`, in dispatch order.
    by_kind: [Vec<u16>; 12],
}

impl std::fmt::Debug for HookChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| (&*e.name, e.priority)))
            .finish()
    }
}

impl HookChain {
    /// Builds the chain from hooks in registration order: drops repeated instances
    /// (first registration wins), validates each hook, reads its settings, sorts stably
    /// by priority and computes the per-kind subscriber lists.
    pub(crate) fn build(
        registered: impl IntoIterator<Item = RegisteredHook>,
        default_timeout: Option<Duration>,
    ) -> Result<Self, BuildError> {
        let mut seen = std::collections::HashSet::new();
        let mut entries = Vec::new();
        for reg in registered {
            if !seen.insert(reg.identity) {
                continue;
            }
            let hook = &reg.hook;
            let name: Arc<str> = Arc::from(hook.name());
            hook.validate()
                .map_err(|e| BuildError::invalid_hook(&name, e.to_string()))?;
            entries.push(HookEntry {
                name,
                priority: hook.priority(),
                interest: hook.interest(),
                policy: hook.failure_policy(),
                timeout: hook.timeout().or(default_timeout),
                propagate: hook.propagate_to_subagents(),
                registered: reg,
            });
        }
        if entries.len() > usize::from(u16::MAX) {
            return Err(BuildError::invalid_hook(
                "<chain>",
                format!("too many hooks: {}", entries.len()),
            ));
        }
        entries.sort_by_key(|e| e.priority);
        let mut by_kind: [Vec<u16>; 12] = Default::default();
        for kind in EventKind::ALL {
            by_kind[kind as usize] = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.interest.contains(kind))
                .map(|(i, _)| i as u16)
                .collect();
        }
        let labels = entries
            .iter()
            .map(|e| HookLabel {
                name: Arc::clone(&e.name),
                priority: e.priority,
            })
            .collect();
        Ok(Self {
            entries,
            labels,
            by_kind,
        })
    }

    /// Names and priorities by entry index.
    pub(crate) fn labels(&self) -> &Arc<[HookLabel]> {
        &self.labels
    }

    /// The hooks in dispatch order.
    pub(crate) fn entries(&self) -> &[HookEntry] {
        &self.entries
    }

    /// Whether any hook subscribed to `kind`. Callers skip building events nobody
    /// wants.
    #[inline]
    pub(crate) fn wants(&self, kind: EventKind) -> bool {
        !self.by_kind[kind as usize].is_empty()
    }

    /// Calls every hook subscribed to the event's kind, in order. Returns the first
    /// failure of an [`FailurePolicy::Abort`] hook on a non-notification event; other
    /// failures are logged.
    pub(crate) async fn dispatch(&self, event: &mut HookEvent) -> Result<(), Error> {
        let kind = event.kind();
        for &i in &self.by_kind[kind as usize] {
            let entry = &self.entries[usize::from(i)];
            event.meta_mut().current = Some(i);
            let outcome = call_guarded(entry, event).await;
            if let Err(failure) = outcome {
                #[cfg(feature = "metrics")]
                crate::observe::metrics_impl::hook_error(&entry.name, kind.as_str());
                if kind.is_notification() || entry.policy == FailurePolicy::Ignore {
                    tracing::warn!(
                        hook = &*entry.name,
                        event = kind.as_str(),
                        error = %failure,
                        "hook failed; continuing (ignore policy or notification event)"
                    );
                } else {
                    event.meta_mut().current = None;
                    return Err(Error::hook(Arc::clone(&entry.name), kind, failure));
                }
            }
        }
        event.meta_mut().current = None;
        Ok(())
    }
}

/// Runs one hook on the event, turning a panic or a timeout into a failure.
///
/// The hook's future is created under `catch_unwind` (a hook may panic before
/// returning it) and polled under `catch_unwind`; no wrapper future is built around it,
/// so an inline-erased future is not copied again.
async fn call_guarded(entry: &HookEntry, event: &mut HookEvent) -> Result<(), HookFailure> {
    let create = move || {
        // Moving the reference in makes the closure `FnOnce`, so the future may borrow
        // the event for as long as it lives.
        let event = event;
        entry.hook().on_event_erased(event)
    };
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(create)) {
        Ok(fut) => AssertUnwindSafe(fut).catch_unwind(),
        Err(payload) => return Err(HookFailure::Panic(crate::util::panic_message(&*payload))),
    };
    let caught = match entry.timeout {
        None => fut.await,
        Some(limit) => match tokio::time::timeout(limit, fut).await {
            Ok(caught) => caught,
            Err(_) => return Err(HookFailure::Timeout(limit)),
        },
    };
    match caught {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(HookFailure::Error(e)),
        Err(payload) => Err(HookFailure::Panic(crate::util::panic_message(&*payload))),
    }
}
