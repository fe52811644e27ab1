//! The priority chain: deduplication, ordering, interest lists and guarded dispatch.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::error::{BuildError, Error, HookFailure};

use super::erase::{ErasedHook, RegisteredHook};
use super::meta::HookLabel;
use super::{EventKind, FailurePolicy, HookEvent, Interest, SyncHook};

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
    by_kind: [Vec<u16>; EventKind::COUNT],
    /// For each [`EventKind`], whether all its subscribers are sync hooks.
    sync_only: [bool; EventKind::COUNT],
    /// For each [`EventKind`], its subscribers ready to call, in dispatch order
    /// (position `i` is entry `by_kind[kind][i]`): a dispatch walks one contiguous
    /// slice instead of indexing the entries and re-reading each one's settings.
    runs: [Box<[Slot]>; EventKind::COUNT],
    /// For each [`EventKind`] whose subscribers are all sync hooks, the same list as
    /// bare trait objects (empty for the other kinds): the tightest loop, for the
    /// dispatch that needs no future.
    sync_runs: [Box<[SyncSlot]>; EventKind::COUNT],
}

/// A sync subscriber of a sync-only event kind, ready to call.
#[derive(Clone)]
struct SyncSlot {
    /// The hook's entry index (what the event records as the hook being called).
    index: u16,
    hook: Arc<dyn SyncHook>,
}

impl SyncSlot {
    /// The slot of a sync hook; `None` for an async one.
    fn of(slot: &Slot) -> Option<Self> {
        match &slot.hook {
            ErasedHook::Sync(hook) => Some(Self {
                index: slot.index,
                hook: Arc::clone(hook),
            }),
            ErasedHook::Async(_) => None,
        }
    }
}

/// A subscriber of one event kind, ready to call.
#[derive(Clone)]
struct Slot {
    /// The hook's entry index (what the event records as the hook being called).
    index: u16,
    hook: ErasedHook,
    /// The limit of one call of the hook (always `None` for a sync hook).
    timeout: Option<Duration>,
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
        let mut by_kind: [Vec<u16>; EventKind::COUNT] = Default::default();
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
        let runs: [Box<[Slot]>; EventKind::COUNT] = EventKind::ALL.map(|kind| {
            by_kind[kind as usize]
                .iter()
                .map(|&index| slot(&entries, index))
                .collect()
        });
        let sync_runs = EventKind::ALL.map(|kind| {
            let slots: Vec<SyncSlot> = runs[kind as usize].iter().map_while(SyncSlot::of).collect();
            // All or nothing: a kind with an async subscriber has no sync list.
            if slots.len() == runs[kind as usize].len() {
                slots.into_boxed_slice()
            } else {
                Box::default()
            }
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
            runs,
            sync_runs,
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
    ///
    /// Not an `async fn` itself: it returns the dispatch future, so awaiting it is one
    /// state machine, not two.
    pub(crate) fn dispatch<'a>(
        &'a self,
        event: &'a mut HookEvent,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        let slots = &self.runs[event.kind() as usize];
        self.dispatch_slots(event, slots)
    }

    /// The subscribers of `kind` (entry indexes), in dispatch order.
    #[inline]
    pub(crate) fn subscribers(&self, kind: EventKind) -> &[u16] {
        &self.by_kind[kind as usize]
    }

    /// The slots of the entries in `list`, a subsequence of the subscribers of `kind`:
    /// borrowed when it is all of them (the common case), built otherwise.
    fn slots_of(&self, kind: EventKind, list: &[u16]) -> Cow<'_, [Slot]> {
        let all = &self.runs[kind as usize];
        if list.len() == all.len() {
            Cow::Borrowed(all)
        } else {
            Cow::Owned(list.iter().map(|&i| slot(&self.entries, i)).collect())
        }
    }

    /// [`HookChain::dispatch`] over `list`, a subsequence of the subscribers of the
    /// event's kind (used to re-run the `PreActing` hooks that have not seen a call's
    /// final form).
    pub(crate) async fn dispatch_list(
        &self,
        event: &mut HookEvent,
        list: &[u16],
    ) -> Result<(), Error> {
        let slots = self.slots_of(event.kind(), list);
        self.dispatch_slots(event, &slots).await
    }

    /// [`HookChain::dispatch`] over `slots`.
    async fn dispatch_slots(&self, event: &mut HookEvent, slots: &[Slot]) -> Result<(), Error> {
        let mut from = 0;
        while from < slots.len() {
            let run = AssertUnwindSafe(self.run_hooks(event, slots, from))
                .catch_unwind()
                .await;
            let failed = match run {
                Ok(None) => break,
                Ok(Some(failed)) => failed,
                Err(payload) => panicked(event, slots, from, &*payload),
            };
            from = self.handle_failure(event, slots, failed)?;
        }
        event.meta_mut().current = None;
        Ok(())
    }

    /// [`HookChain::dispatch`] for an event whose subscribers are all sync hooks (see
    /// [`HookChain::is_sync`]): a plain call, same ordering, failure handling and panic
    /// attribution.
    pub(crate) fn dispatch_sync(&self, event: &mut HookEvent) -> Result<(), Error> {
        let kind = event.kind() as usize;
        self.guarded_sync(event, &self.runs[kind], &self.sync_runs[kind])
    }

    /// [`HookChain::dispatch_sync`] over `list` (see [`HookChain::dispatch_list`]).
    pub(crate) fn dispatch_sync_list(
        &self,
        event: &mut HookEvent,
        list: &[u16],
    ) -> Result<(), Error> {
        let kind = event.kind();
        let slots = self.slots_of(kind, list);
        let sync = match &slots {
            Cow::Borrowed(_) => Cow::Borrowed(&*self.sync_runs[kind as usize]),
            // Position for position: every subscriber of a sync-only kind is sync.
            Cow::Owned(slots) => Cow::Owned(slots.iter().filter_map(SyncSlot::of).collect()),
        };
        self.guarded_sync(event, &slots, &sync)
    }

    /// Calls `sync` (the sync hooks of `slots`, position for position) under one
    /// unwind guard, resuming after a failure that does not abort.
    #[inline]
    fn guarded_sync(
        &self,
        event: &mut HookEvent,
        slots: &[Slot],
        sync: &[SyncSlot],
    ) -> Result<(), Error> {
        let mut from = 0;
        while from < sync.len() {
            let run = std::panic::catch_unwind(AssertUnwindSafe(|| run_sync(event, sync, from)));
            let failed = match run {
                Ok(None) => break,
                Ok(Some(failed)) => failed,
                Err(payload) => panicked(event, slots, from, &*payload),
            };
            from = self.handle_failure(event, slots, failed)?;
        }
        event.meta_mut().current = None;
        Ok(())
    }

    /// Logs an ignorable failure and returns where dispatch resumes, or returns the
    /// call's error for an aborting one.
    fn handle_failure(
        &self,
        event: &mut HookEvent,
        slots: &[Slot],
        (at, failure): (usize, HookFailure),
    ) -> Result<usize, Error> {
        let kind = event.kind();
        let entry = &self.entries[usize::from(slots[at].index)];
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

    /// Runs the hooks at `slots[from..]` in order until one fails; returns the failing
    /// hook's position and its failure, or `None` when all succeeded. A panic unwinds
    /// out of this future to [`HookChain::dispatch`].
    async fn run_hooks(
        &self,
        event: &mut HookEvent,
        slots: &[Slot],
        from: usize,
    ) -> Option<(usize, HookFailure)> {
        let mut pos = from;
        loop {
            let slot = slots.get(pos)?;
            let hook = match &slot.hook {
                ErasedHook::Async(hook) => hook,
                // Runs of sync hooks go through a plain loop (its state stays in
                // registers); only an async hook makes this future suspend.
                ErasedHook::Sync(_) => {
                    pos = match run_sync_mixed(event, slots, pos) {
                        SyncRun::Done => return None,
                        SyncRun::Failed(at, failure) => return Some((at, failure)),
                        SyncRun::Async(at) => at,
                    };
                    continue;
                }
            };
            event.meta_mut().current = Some(slot.index);
            // The future is built where it is awaited (no `let`): moving it there
            // after building it was a copy per hook.
            let outcome = match slot.timeout {
                None => hook
                    .on_event_erased(event)
                    .await
                    .map_err(HookFailure::error),
                Some(limit) => match tokio::time::timeout(limit, hook.on_event_erased(event)).await
                {
                    Ok(outcome) => outcome.map_err(HookFailure::error),
                    Err(_) => Err(HookFailure::Timeout(limit)),
                },
            };
            if let Err(failure) = outcome {
                return Some((pos, failure));
            }
            pos += 1;
        }
    }
}

/// The slot of entry `index`.
fn slot(entries: &[HookEntry], index: u16) -> Slot {
    let entry = &entries[usize::from(index)];
    Slot {
        index,
        hook: entry.registered.hook.clone(),
        timeout: entry.timeout,
    }
}

/// The failure of the hook that was running when a panic was caught.
fn panicked(
    event: &mut HookEvent,
    slots: &[Slot],
    from: usize,
    payload: &(dyn std::any::Any + Send),
) -> (usize, HookFailure) {
    let current = event.meta_mut().current;
    let at = slots
        .iter()
        .position(|s| Some(s.index) == current)
        .unwrap_or(from);
    (at, HookFailure::Panic(crate::util::panic_message(payload)))
}

/// Calls the hooks of `sync[from..]` in order until one fails; returns its position
/// and failure, or `None` when all succeeded.
#[inline]
fn run_sync(event: &mut HookEvent, sync: &[SyncSlot], from: usize) -> Option<(usize, HookFailure)> {
    for (at, slot) in sync.iter().enumerate().skip(from) {
        event.meta_mut().current = Some(slot.index);
        if let Err(e) = slot.hook.on_event(event) {
            return Some((at, HookFailure::error(e)));
        }
    }
    None
}

/// Calls the sync hooks of `slots[from..]` (a kind with async subscribers too) until
/// the first async hook, a failure or the end.
#[inline]
fn run_sync_mixed(event: &mut HookEvent, slots: &[Slot], from: usize) -> SyncRun {
    for (at, slot) in slots.iter().enumerate().skip(from) {
        let ErasedHook::Sync(hook) = &slot.hook else {
            return SyncRun::Async(at);
        };
        event.meta_mut().current = Some(slot.index);
        if let Err(e) = hook.on_event(event) {
            return SyncRun::Failed(at, HookFailure::error(e));
        }
    }
    SyncRun::Done
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
