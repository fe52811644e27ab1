//! Identity and per-call context.

use std::any::{Any, TypeId};
use std::fmt;
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
#[derive(Clone, Default)]
pub struct Extensions {
    map: Arc<Mutex<Slots>>,
}

type Slots = Vec<(TypeId, Arc<dyn Any + Send + Sync>)>;

impl Extensions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(slots: &Slots, id: TypeId) -> Option<usize> {
        slots.iter().position(|(t, _)| *t == id)
    }

    /// Stores `value`, replacing a previous value of the same type (returned).
    pub fn insert<T: Send + Sync + 'static>(&self, value: T) -> Option<Arc<T>> {
        let id = TypeId::of::<T>();
        let new: Arc<dyn Any + Send + Sync> = Arc::new(value);
        let mut slots = self.lock();
        match Self::find(&slots, id) {
            Some(i) => std::mem::replace(&mut slots[i].1, new).downcast::<T>().ok(),
            None => {
                slots.push((id, new));
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
            Some(i) => slots[i].1 = erased,
            None => slots.push((id, erased)),
        }
        v
    }

    /// Removes and returns the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let mut slots = self.lock();
        let i = Self::find(&slots, TypeId::of::<T>())?;
        slots.swap_remove(i).1.downcast::<T>().ok()
    }

    /// Number of stored values.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` if nothing is stored.
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
    session_id: String,
    user_id: Option<String>,
}

/// The context of one agent call: run id, session and user, and typed
/// [`Extensions`].
///
/// Create one per call ([`RunContext::new`] generates a fresh run id). The session id
/// (default `"default"`) and user id select the conversation: calls on the same
/// (user, session) are serialized in arrival order; different sessions run
/// concurrently. Clones share the ids and the extensions.
#[derive(Clone, Debug)]
pub struct RunContext {
    ids: Arc<Ids>,
    extensions: Extensions,
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
                session_id: "default".to_owned(),
                user_id: None,
            }),
            extensions: Extensions::default(),
        }
    }

    fn ids_mut(&mut self) -> &mut Ids {
        Arc::make_mut(&mut self.ids)
    }

    /// Sets the session id.
    #[must_use]
    pub fn with_session_id(mut self, s: impl Into<String>) -> Self {
        self.ids_mut().session_id = s.into();
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
    pub fn session_id(&self) -> &str {
        &self.ids.session_id
    }

    /// The user id, if any.
    pub fn user_id(&self) -> Option<&str> {
        self.ids.user_id.as_deref()
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.ids.run_id
    }

    /// The call's typed storage.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }
}
