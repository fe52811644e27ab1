//! The priority chain: deduplication, ordering, interest lists and guarded dispatch.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::error::{BuildError, Error, HookFailure};

use super::erase::{ErasedHook, RegisteredHook};
use super::meta::HookLabel;
use super::{EventKind, FailurePolicy, HookEvent, Interest};

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
    pub(crate) fn hook(&self) -> &ErasedHook {
        &self.registered.hook
    }

    /// Whether the hook is a [`SyncHook`](super::SyncHook) (called without a future).
    #[inline]
    fn is_sync(&self) -> bool {
        matches!(self.registered.hook, ErasedHook::Sync(_))
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
    /// For each [`EventKind`], whether all its subscribers are sync hooks.
    sync_only: [bool; 12],
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
            let settings = reg.hook.settings();
            reg.hook
                .validate()
                .map_err(|e| BuildError::invalid_hook(&settings.name, e.to_string()))?;
            entries.push(HookEntry {
                name: settings.name,
                priority: settings.priority,
                interest: settings.interest,
                policy: settings.failure_policy,
                // A sync hook cannot be suspended, so no timeout can apply to it.
                timeout: if settings.sync {
                    None
                } else {
                    settings.timeout.or(default_timeout)
                },
                propagate: settings.propagate_to_subagents,
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
        let sync_only = EventKind::ALL.map(|kind| {
            by_kind[kind as usize]
                .iter()
                .all(|&i| entries[usize::from(i)].is_sync())
        });
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
            sync_only,
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

    /// Whether every hook subscribed to `kind` is a [`SyncHook`](super::SyncHook): the
    /// event can then be dispatched with [`HookChain::dispatch_sync`], no future at all.
    #[inline]
    pub(crate) fn is_sync(&self, kind: EventKind) -> bool {
        self.sync_only[kind as usize]
    }

    /// Calls every hook subscribed to the event's kind, in order. Returns the first
    /// failure of an [`FailurePolicy::Abort`] hook on a non-notification event; other
    /// failures are logged.
    ///
    /// Panics are caught once per event, not once per hook: the chain records the index
    /// of the hook it is calling in the event before calling it, so a caught panic is
    /// attributed to that hook, handled per its policy, and dispatch resumes with the
    /// next hook. The common path (no hook panics) pays for one unwind guard per event.
    ///
    /// Correct for every event; an event whose subscribers are all sync hooks is
    /// cheaper through [`HookChain::dispatch_sync`] (the caller checks
    /// [`HookChain::is_sync`]: awaiting even a ready future costs a state machine).
    pub(crate) async fn dispatch(&self, event: &mut HookEvent) -> Result<(), Error> {
        let list = &self.by_kind[event.kind() as usize];
        self.dispatch_list(event, list).await
    }

    /// The subscribers of `kind` (entry indexes), in dispatch order.
    #[inline]
    pub(crate) fn subscribers(&self, kind: EventKind) -> &[u16] {
        &self.by_kind[kind as usize]
    }

    /// [`HookChain::dispatch`] over `list`, a subsequence of the subscribers of the
    /// event's kind (used to re-run the `PreActing` hooks that have not seen a call's
    /// final form).
    pub(crate) async fn dispatch_list(
        &self,
        event: &mut HookEvent,
        list: &[u16],
    ) -> Result<(), Error> {
        restamp(event);
        let mut from = 0;
        while from < list.len() {
            let run = AssertUnwindSafe(self.run_hooks(event, list, from))
                .catch_unwind()
                .await;
            let failed = match run {
                Ok(None) => break,
                Ok(Some(failed)) => failed,
                Err(payload) => self.panicked(event, list, from, &*payload),
            };
            from = self.handle_failure(event, list, failed)?;
        }
        event.meta_mut().current = None;
        Ok(())
    }

    /// [`HookChain::dispatch`] for an event whose subscribers are all sync hooks (see
    /// [`HookChain::is_sync`]): a plain call, same ordering, failure handling and panic
    /// attribution.
    pub(crate) fn dispatch_sync(&self, event: &mut HookEvent) -> Result<(), Error> {
        let list = &self.by_kind[event.kind() as usize];
        self.dispatch_sync_list(event, list)
    }

    /// [`HookChain::dispatch_sync`] over `list` (see [`HookChain::dispatch_list`]).
    pub(crate) fn dispatch_sync_list(
        &self,
        event: &mut HookEvent,
        list: &[u16],
    ) -> Result<(), Error> {
        restamp(event);
        let mut from = 0;
        while from < list.len() {
            let run =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.run_sync(event, list, from)));
            let failed = match run {
                Ok(SyncRun::Done) => break,
                Ok(SyncRun::Failed(at, failure)) => (at, failure),
                // Cannot happen: every subscriber of a sync-only kind is sync (both
                // computed from the same entries at build).
                Ok(SyncRun::Async(at)) => {
                    from = at + 1;
                    continue;
                }
                Err(payload) => self.panicked(event, list, from, &*payload),
            };
            from = self.handle_failure(event, list, failed)?;
        }
        event.meta_mut().current = None;
        Ok(())
    }

    /// The failure of the hook that was running when a panic was caught.
    fn panicked(
        &self,
        event: &mut HookEvent,
        list: &[u16],
        from: usize,
        payload: &(dyn std::any::Any + Send),
    ) -> (usize, HookFailure) {
        let current = event.meta_mut().current;
        let at = list
            .iter()
            .position(|&i| Some(i) == current)
            .unwrap_or(from);
        (at, HookFailure::Panic(crate::util::panic_message(payload)))
    }

    /// Logs an ignorable failure and returns where dispatch resumes, or returns the
    /// call's error for an aborting one.
    fn handle_failure(
        &self,
        event: &mut HookEvent,
        list: &[u16],
        (at, failure): (usize, HookFailure),
    ) -> Result<usize, Error> {
        let kind = event.kind();
        let entry = &self.entries[usize::from(list[at])];
        #[cfg(feature = "metrics")]
        super::decision::hook_error_metric(&entry.name, kind.as_str());
        if kind.is_notification() || entry.policy == FailurePolicy::Ignore {
            tracing::warn!(
                hook = &*entry.name,
                event = kind.as_str(),
                error = %failure,
                "hook failed; continuing (ignore policy or notification event)"
            );
            Ok(at + 1)
        } else {
            event.meta_mut().current = None;
            Err(Error::hook(Arc::clone(&entry.name), kind, failure))
        }
    }

    /// Runs the hooks at `list[from..]` (entry indexes) in order until one fails;
    /// returns the failing hook's position in `list` and its failure, or `None` when
    /// all succeeded. A panic unwinds out of this future to [`HookChain::dispatch`].
    async fn run_hooks(
        &self,
        event: &mut HookEvent,
        list: &[u16],
        from: usize,
    ) -> Option<(usize, HookFailure)> {
        let mut pos = from;
        loop {
            let &i = list.get(pos)?;
            if self.entries[usize::from(i)].is_sync() {
                // Runs of sync hooks go through a plain loop (its state stays in
                // registers); only an async hook makes this future suspend.
                pos = match self.run_sync(event, list, pos) {
                    SyncRun::Done => return None,
                    SyncRun::Failed(at, failure) => return Some((at, failure)),
                    SyncRun::Async(at) => at,
                };
            }
            let at = pos;
            let entry = &self.entries[usize::from(list[at])];
            event.meta_mut().current = Some(list[at]);
            let fut = match entry.hook() {
                ErasedHook::Async(hook) => hook.on_event_erased(event),
                // Unreachable (`run_sync` ran every sync hook up to here), and correct
                // anyway: a sync hook's outcome as a ready future.
                ErasedHook::Sync(hook) => {
                    stackfuture::StackFuture::from_or_box(std::future::ready(hook.on_event(event)))
                }
            };
            let outcome = match entry.timeout {
                None => fut.await.map_err(HookFailure::error),
                Some(limit) => match tokio::time::timeout(limit, fut).await {
                    Ok(outcome) => outcome.map_err(HookFailure::error),
                    Err(_) => Err(HookFailure::Timeout(limit)),
                },
            };
            if let Err(failure) = outcome {
                return Some((at, failure));
            }
            pos = at + 1;
        }
    }

    /// Calls the sync hooks of `list[from..]` until the first async hook, a failure
    /// or the end.
    fn run_sync(&self, event: &mut HookEvent, list: &[u16], from: usize) -> SyncRun {
        for (at, &i) in list.iter().enumerate().skip(from) {
            let ErasedHook::Sync(hook) = self.entries[usize::from(i)].hook() else {
                return SyncRun::Async(at);
            };
            event.meta_mut().current = Some(i);
            if let Err(e) = hook.on_event(event) {
                return SyncRun::Failed(at, HookFailure::error(e));
            }
        }
        SyncRun::Done
    }
}

/// Gives an event a fresh timestamp for this dispatch (a chunk event object is reused
/// for every chunk).
fn restamp(event: &mut HookEvent) {
    event.meta_mut().stamp = std::sync::OnceLock::new();
}

/// Where a run of sync hooks stopped.
enum SyncRun {
    /// Every remaining hook ran.
    Done,
    /// The hook at this position failed.
    Failed(usize, HookFailure),
    /// The hook at this position is async.
    Async(usize),
}
