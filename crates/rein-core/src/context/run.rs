//! Identity and per-call context.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::util::new_id;

/// Who is running: carried by every hook event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentInfo {
    /// Unique per agent instance (generated unless set with `AgentBuilder::id`).
    pub id: String,
    /// The agent's name (not unique: a subagent may share its parent's name).
    pub name: String,
    /// The delegating agent's id, for subagents.
    pub parent_id: Option<String>,
    /// 0 for a top-level agent, parent depth + 1 for a subagent.
    pub depth: u32,
}

/// Typed per-call storage shared by the hooks and tools of one call.
///
/// Values are keyed by type and stored as `Arc<T>`; put interior mutability (a `Mutex`,
/// atomics) inside `T` for state that changes during the call. Because the storage
/// belongs to the call, concurrent calls never see each other's state and nothing
/// outlives the call when it errors or is cancelled.
///
/// A call holds a handful of values, so they are kept in a small vector searched by
/// `TypeId` (no hashing, no allocation for lookups).
///
/// Values stored while a call runs in the context belong to that run: they are not
/// carried into the fresh run a concurrent call on the same context gets (see
/// [`RunContext`]).
#[derive(Clone, Default)]
pub struct Extensions {
    inner: Arc<Storage>,
}

/// The values and the run flag, behind one allocation.
#[derive(Default)]
struct Storage {
    map: Mutex<Slots>,
    /// Set while a call runs in the context these extensions belong to.
    active: AtomicBool,
}

/// `(type, value, run-local)`: run-local values (stored while a call ran)
/// are not carried into the context of another run.
type Slots = Vec<(TypeId, Arc<dyn Any + Send + Sync>, bool)>;

impl Extensions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.inner
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn find(slots: &Slots, id: TypeId) -> Option<usize> {
        slots.iter().position(|(t, _, _)| *t == id)
    }

    /// Stores `value`, replacing a previous value of the same type (returned).
    pub fn insert<T: Send + Sync + 'static>(&self, value: T) -> Option<Arc<T>> {
        let id = TypeId::of::<T>();
        let new: Arc<dyn Any + Send + Sync> = Arc::new(value);
        let run_local = self.inner.active.load(Ordering::Acquire);
        let mut slots = self.lock();
        match Self::find(&slots, id) {
            Some(i) => std::mem::replace(&mut slots[i], (id, new, run_local))
                .1
                .downcast::<T>()
                .ok(),
            None => {
                slots.push((id, new, run_local));
                None
            }
        }
    }

    /// The value of type `T`, if present.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let slots = self.lock();
        let i = Self::find(&slots, TypeId::of::<T>())?;
        Arc::clone(&slots[i].1).downcast::<T>().ok()
    }

    /// The value of type `T`, inserting `init()` first if absent.
    pub fn get_or_insert_with<T: Send + Sync + 'static>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let run_local = self.inner.active.load(Ordering::Acquire);
        let id = TypeId::of::<T>();
        let mut slots = self.lock();
        if let Some(i) = Self::find(&slots, id)
            && let Ok(v) = Arc::clone(&slots[i].1).downcast::<T>()
        {
            return v;
        }
        let v = Arc::new(init());
        let erased: Arc<dyn Any + Send + Sync> = v.clone();
        match Self::find(&slots, id) {
            Some(i) => slots[i] = (id, erased, run_local),
            None => slots.push((id, erased, run_local)),
        }
        v
    }

    /// A new storage holding the values stored now (the same `Arc`s), less run-local
    /// state; later inserts into either are not seen by the other.
    fn snapshot(&self) -> Self {
        let slots: Slots = self
            .lock()
            .iter()
            .filter(|(_, _, run_local)| !run_local)
            .cloned()
            .collect();
        Self {
            inner: Arc::new(Storage {
                map: Mutex::new(slots),
                active: AtomicBool::new(false),
            }),
        }
    }

    /// Removes and returns the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let mut slots = self.lock();
        let i = Self::find(&slots, TypeId::of::<T>())?;
        slots.swap_remove(i).1.downcast::<T>().ok()
    }

    /// Number of stored values.
    #[inline]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` if nothing is stored.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.len())
            .finish()
    }
}

#[derive(Clone, Debug)]
struct Ids {
    run_id: String,
    /// Borrowed for the default session: no allocation per context.
    session_id: Cow<'static, str>,
    user_id: Option<String>,
}

/// The context of one agent call: run id, session and user, and typed
/// [`Extensions`].
///
/// Create one per call ([`RunContext::new`] generates a fresh run id). The session id
/// (default `"default"`) and user id select the conversation: calls on the same
/// (user, session) are serialized in arrival order; different sessions run
/// concurrently. Clones share the ids and the extensions.
///
/// # One run at a time
/// A context describes one run. Reusing it for a *later* call (for example to resume a
/// call stopped for approval, with `ApprovalDecisions` (`rein::hooks`)
/// in its extensions) continues that run. But two calls cannot be the same run at the
/// same time: when a call starts with a context (or a clone of one) whose run is still
/// in progress in another call, the new call runs in a *fresh run* derived from it — a
/// new run id and its own extensions holding the values stored while no call ran (the
/// same `Arc`s: e.g. the caller's approval decisions), but nothing stored during the
/// other call (its hooks' and tools' state). Hooks and tools of the
/// second call then see the derived context, and nothing they store reaches the
/// caller's context. So concurrent calls never share run ids or per-run hook state.
#[derive(Clone, Debug)]
pub struct RunContext {
    ids: Arc<Ids>,
    extensions: Extensions,
    /// Set on a subagent's context while the delegating call records decisions: the
    /// subagent's decisions are forwarded there as they are recorded.
    decisions: Option<super::DecisionSink>,
    /// The innermost budget a call in this context draws from (set by the running call;
    /// a subagent's context inherits its delegating call's, so the child draws from what
    /// the parent has left).
    ledger: Option<Arc<crate::budget::Ledger>>,
    /// This call's double-text policy, when it overrides the agent's.
    double_text: Option<super::DoubleText>,
}

/// Marks a run as in progress for the duration of one call; clears it on drop.
#[derive(Debug)]
pub(crate) struct ActiveRun {
    run: Extensions,
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.run.inner.active.store(false, Ordering::Release);
    }
}

impl Default for RunContext {
    fn default() -> Self {
        Self::new()
    }
}

impl RunContext {
    /// A context with a fresh run id, session `"default"` and no user.
    pub fn new() -> Self {
        Self {
            ids: Arc::new(Ids {
                run_id: new_id("run"),
                session_id: Cow::Borrowed("default"),
                user_id: None,
            }),
            extensions: Extensions::default(),
            decisions: None,
            ledger: None,
            double_text: None,
        }
    }

    /// Starts a call in this context: the context itself when its run is not in
    /// progress elsewhere, else a fresh run derived from it (see the type's docs).
    pub(crate) fn begin_run(self) -> (RunContext, ActiveRun) {
        if self
            .extensions
            .inner
            .active
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let run = self.extensions.clone();
            return (self, ActiveRun { run });
        }
        let derived = RunContext {
            ids: Arc::new(Ids {
                run_id: new_id("run"),
                session_id: self.ids.session_id.clone(),
                user_id: self.ids.user_id.clone(),
            }),
            extensions: self.extensions.snapshot(),
            decisions: self.decisions.clone(),
            ledger: self.ledger.clone(),
            double_text: self.double_text,
        };
        derived
            .extensions
            .inner
            .active
            .store(true, Ordering::Release);
        tracing::debug!(
            run_id = %self.ids.run_id,
            derived = %derived.ids.run_id,
            "run context already in use by a running call; this call runs in a fresh run"
        );
        let run = derived.extensions.clone();
        (derived, ActiveRun { run })
    }

    /// The context of a subagent call made during this run: a fresh run on
    /// `session`, same user, with the values the caller stored before the run (the
    /// same `Arc`s: approval decisions reach the subagent that waits for them) but none
    /// of this run's own state.
    pub(crate) fn child_context(&self, session: &str) -> RunContext {
        RunContext {
            ids: Arc::new(Ids {
                run_id: new_id("run"),
                session_id: Cow::Owned(session.to_owned()),
                user_id: self.ids.user_id.clone(),
            }),
            extensions: self.extensions.snapshot(),
            decisions: None,
            ledger: self.ledger.clone(),
            // A subagent's session is ordered by its delegating call.
            double_text: None,
        }
    }

    /// This call's [`DoubleText`](super::DoubleText) policy, instead of the agent's
    /// ([`AgentBuilder::double_text`](crate::AgentBuilder::double_text)). It decides what
    /// this call does when its session is busy; a running call is stopped only by a
    /// newer call's policy. Clones of the context keep it; a subagent's context does not.
    #[must_use]
    pub fn with_double_text(mut self, policy: super::DoubleText) -> Self {
        self.double_text = Some(policy);
        self
    }

    /// The policy set with [`with_double_text`](Self::with_double_text), if any.
    pub fn double_text(&self) -> Option<super::DoubleText> {
        self.double_text
    }

    /// The budget a call in this context draws from (see [`crate::budget`]).
    pub(crate) fn ledger(&self) -> Option<&Arc<crate::budget::Ledger>> {
        self.ledger.as_ref()
    }

    /// This context drawing from `ledger`.
    pub(crate) fn with_ledger(mut self, ledger: Option<Arc<crate::budget::Ledger>>) -> Self {
        self.ledger = ledger;
        self
    }

    /// Forwards the decisions of the call run in this (subagent) context to `sink` as
    /// they are recorded (see [`super::DecisionSink`]).
    pub(crate) fn forward_decisions_to(&mut self, sink: super::DecisionSink) {
        self.decisions = Some(sink);
    }

    /// Where the decisions of the call run in this context are forwarded, if anywhere.
    pub(crate) fn decision_sink(&self) -> Option<&super::DecisionSink> {
        self.decisions.as_ref()
    }

    fn ids_mut(&mut self) -> &mut Ids {
        Arc::make_mut(&mut self.ids)
    }

    /// Sets the session id.
    #[must_use]
    pub fn with_session_id(mut self, s: impl Into<String>) -> Self {
        self.ids_mut().session_id = Cow::Owned(s.into());
        self
    }

    /// Sets the user id.
    #[must_use]
    pub fn with_user_id(mut self, s: impl Into<String>) -> Self {
        self.ids_mut().user_id = Some(s.into());
        self
    }

    /// Sets the run id (normally generated).
    #[must_use]
    pub fn with_run_id(mut self, s: impl Into<String>) -> Self {
        self.ids_mut().run_id = s.into();
        self
    }

    /// The session id.
    #[inline]
    pub fn session_id(&self) -> &str {
        &self.ids.session_id
    }

    /// The user id, if any.
    #[inline]
    pub fn user_id(&self) -> Option<&str> {
        self.ids.user_id.as_deref()
    }

    /// The run id.
    #[inline]
    pub fn run_id(&self) -> &str {
        &self.ids.run_id
    }

    /// The call's typed storage.
    #[inline]
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }
}
