//! Session stores: where conversations persist between calls, agents and processes.
//!
//! A store keeps, per [`SessionKey`], the conversation's messages and a **version**: `0`
//! for a session that was never saved, then `1, 2, …`, one more on every successful
//! save. A save names the version it expects to replace ([`SessionStore::save`](crate::SessionStore::save)); when
//! the stored version is different — another agent or another process saved the session
//! since this one loaded it — nothing is written and the save fails with
//! [`StoreErrorKind::Conflict`]. Two writers therefore never silently overwrite each
//! other.
//!
//! Two stores ship with the crate: [`FileSessionStore`](super::FileSessionStore) (one
//! file per session, atomic replace) and [`InMemorySessionStore`] (a shared map, for
//! tests and for several agents in one process). Without a store an agent keeps its
//! conversations in its own memory only.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::key::SessionKey;
use super::lease::Lease;
use crate::message::Msg;

/// What kind of failure a [`StoreError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The stored version is not the version the save expected: someone else saved the
    /// session in between. Nothing was written. An agent that gets this error reloads
    /// the session from the store on its next call on it.
    Conflict,
    /// Reading or writing the backing storage failed (a file system error, a background
    /// I/O task that could not run).
    Io,
    /// Stored data could not be decoded, or it belongs to another session.
    Corrupt,
    /// Any other failure (the kind of [`StoreError::new`]).
    Other,
    /// A lease on the session could not be acquired within the wait: another holder
    /// (usually another replica) is running a call on it. Nothing ran, nothing was
    /// written; retry later. See [`SessionLeases`](crate::store::SessionLeases).
    Busy,
    /// The lease a fenced save or a renewal used is no longer held (it expired, was
    /// released, or another holder took the session over). Nothing was written.
    LeaseLost,
    /// The store's server cannot be reached (connection refused or dropped, a timeout,
    /// a server shutting down). Nothing was written, or the outcome is unknown for a
    /// save whose reply was lost (a retry then sees a `Conflict` if it had landed);
    /// the next call after the server is back works.
    Unavailable,
    /// The store is misconfigured or was given an invalid argument: a malformed URL,
    /// credentials the server rejects, a missing database, an invalid table name or key
    /// prefix, a zero lease TTL. Retrying does not help.
    Config,
    /// The session key is one no store can hold (see
    /// [`key_problem`](crate::store::key_problem)): an id with U+0000, an id over [`MAX_KEY_BYTES`](crate::store::MAX_KEY_BYTES). Nothing was read
    /// or written; the same key fails the same way on every store.
    InvalidKey,
    /// What the save would write could not be loaded back: a value nested deeper than
    /// [`MAX_STORED_DEPTH`](crate::store::MAX_STORED_DEPTH). Nothing was written.
    Unstorable,
    /// The session is larger than the store's maximum session size (a save would write
    /// more, or the stored value holds more; it was not read). Nothing was written.
    TooLarge,
    /// A call that waits for a busy session would be one more than the queue's bound
    /// ([`SessionLeases::acquire_queued_and_load`](crate::store::SessionLeases::acquire_queued_and_load),
    /// the agent's double-text `max_waiting`). Nothing ran, nothing was written, the
    /// call did not join the queue; retry later.
    QueueFull,
}

/// A session store failure: a [`StoreErrorKind`], the session it concerns (when one
/// does) and a message.
///
/// `Display` reads ``session store failed for session `user/session`: message``.
#[derive(Debug, thiserror::Error)]
#[error("session store failed{}: {message}", session_suffix(.session.as_deref()))]
pub struct StoreError {
    kind: StoreErrorKind,
    session: Option<String>,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

fn session_suffix(session: Option<&str>) -> String {
    match session {
        Some(s) => format!(" for session `{s}`"),
        None => String::new(),
    }
}

impl StoreError {
    /// An error of kind [`StoreErrorKind::Other`] for this session.
    pub fn new(key: &SessionKey, message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::Other, key, message)
    }

    /// An error of the given kind for this session.
    pub fn with_kind(kind: StoreErrorKind, key: &SessionKey, message: impl Into<String>) -> Self {
        Self {
            kind,
            session: Some(key.to_string()),
            message: message.into(),
            source: None,
        }
    }

    /// An error of the given kind that concerns no single session (e.g. a store
    /// directory that cannot be created).
    pub fn unkeyed(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            session: None,
            message: message.into(),
            source: None,
        }
    }

    /// A [`StoreErrorKind::Conflict`]: the save expected version `expected`, the store
    /// holds version `found`.
    pub fn conflict(key: &SessionKey, expected: u64, found: u64) -> Self {
        Self::with_kind(
            StoreErrorKind::Conflict,
            key,
            format!(
                "version conflict: expected to replace version {expected}, the store holds version {found} (another writer saved this session)"
            ),
        )
    }

    /// Attaches the underlying error (returned by `std::error::Error::source`).
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The session, as `user/session` or `session`, when the error concerns one.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The message, without the session prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether this is a [`StoreErrorKind::Conflict`].
    pub fn is_conflict(&self) -> bool {
        self.kind == StoreErrorKind::Conflict
    }
}

/// A session as loaded from a store: its messages and their version (`0` when the
/// session was never saved, then `messages` is empty).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct StoredSession {
    /// The conversation, oldest first.
    pub messages: Vec<Msg>,
    /// The version to pass to the next [`SessionStore::save`](crate::SessionStore::save).
    pub version: u64,
}

impl StoredSession {
    /// A stored session with these messages at this version.
    pub fn new(messages: Vec<Msg>, version: u64) -> Self {
        Self { messages, version }
    }
}

/// Where conversations persist between calls (and agents, and processes).
///
/// Without a store, an agent keeps conversations in memory for its lifetime. With one,
/// an agent loads a session on its first call on it and saves it after every call —
/// completed, failed or cancelled (see [`AgentBuilder::session_store`](crate::AgentBuilder::session_store)
/// for when exactly). An agent caches what it loaded: it assumes no one else writes the
/// session while it holds it, and detects it when someone did, through the version.
///
/// Implementations must make `save` atomic with respect to `load` (a load sees the old
/// or the new messages, never a mix) and must compare the version and write as one
/// step with respect to other savers. Implement both methods with `async fn`; the agent
/// erases the futures at one private boundary (boxed, once per load or save).
///
/// ```
/// use rein::*;
/// use std::collections::HashMap;
/// use std::sync::Mutex;
///
/// /// Sessions in a map, behind a lock (a real store would use a database row with a
/// /// version column and `UPDATE … WHERE version = expected`).
/// #[derive(Default)]
/// struct MapStore(Mutex<HashMap<SessionKey, StoredSession>>);
///
/// impl SessionStore for MapStore {
///     async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
///         let map = self.0.lock().map_err(|_| StoreError::new(key, "poisoned"))?;
///         Ok(map.get(key).cloned().unwrap_or_default())
///     }
///
///     async fn save(
///         &self,
///         key: &SessionKey,
///         messages: &[Msg],
///         expected_version: u64,
///     ) -> Result<u64, StoreError> {
///         let mut map = self.0.lock().map_err(|_| StoreError::new(key, "poisoned"))?;
///         let found = map.get(key).map_or(0, |s| s.version);
///         if found != expected_version {
///             return Err(StoreError::conflict(key, expected_version, found));
///         }
///         map.insert(key.clone(), StoredSession::new(messages.to_vec(), found + 1));
///         Ok(found + 1)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder()
///     .model(ScriptedModel::new([ScriptedTurn::text("hello")]))
///     .session_store(MapStore::default())
///     .build()?;
/// agent.call_with(vec![Msg::user("hi")], RunContext::new().with_session_id("s1")).await?;
/// assert_eq!(agent.messages(&SessionKey::new(None, "s1")).await.len(), 2);
/// # Ok(()) }
/// ```
pub trait SessionStore: Send + Sync + 'static {
    /// The stored messages and version of a session; version `0` and no messages when
    /// it was never saved.
    ///
    /// # Errors
    /// [`StoreErrorKind::Io`] when the storage cannot be read, [`StoreErrorKind::Corrupt`]
    /// when what is stored cannot be decoded.
    fn load(
        &self,
        key: &SessionKey,
    ) -> impl Future<Output = Result<StoredSession, StoreError>> + Send;

    /// Replaces the stored messages of a session if its stored version is still
    /// `expected_version`, and returns the new version (`expected_version + 1`).
    ///
    /// # Errors
    /// [`StoreErrorKind::Conflict`] (nothing written) when the stored version differs;
    /// [`StoreErrorKind::Io`] when writing fails (the old version is then still stored).
    fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// [`save`](Self::save), told how much of the stored history the save leaves as it
    /// is, so a store can write only the rest (what the call appended or changed).
    ///
    /// The contract: `messages[..unchanged]` are exactly the messages the store holds at
    /// `expected_version` (its first `unchanged` messages, in order); the save replaces
    /// everything the store holds from index `unchanged` on with `messages[unchanged..]`,
    /// so that afterwards the store holds exactly `messages`, at the returned version.
    /// `unchanged` is `0` for a full rewrite (always correct); it is never larger than
    /// `messages.len()` (a larger value is read as `messages.len()`). The version check,
    /// atomicity and errors are those of `save`.
    ///
    /// A store that writes only the tail and finds it holds fewer than `unchanged`
    /// messages at `expected_version` (the caller's claim is wrong) must not write: it
    /// fails with [`StoreErrorKind::Conflict`] (see [`unchanged_beyond_stored`]), as
    /// when another writer saved first, and the caller reloads. A whole rewrite (the
    /// default) stores `messages` exactly either way. No store can detect a prefix that
    /// differs in content: passing one is the caller's bug.
    ///
    /// The default calls [`save`](Self::save) with all of `messages` (a whole rewrite),
    /// so a store that does not override it keeps working unchanged. The Redis and
    /// PostgreSQL stores and [`InMemorySessionStore`] write only `messages[unchanged..]`.
    ///
    /// # Errors
    /// As [`save`](Self::save); [`StoreErrorKind::Conflict`] also when a store that
    /// writes only the tail holds fewer than `unchanged` messages.
    fn save_from(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = unchanged;
        self.save(key, messages, expected_version)
    }
}

impl<S: SessionStore> SessionStore for Arc<S> {
    fn load(
        &self,
        key: &SessionKey,
    ) -> impl Future<Output = Result<StoredSession, StoreError>> + Send {
        SessionStore::load(&**self, key)
    }

    fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        SessionStore::save(&**self, key, messages, expected_version)
    }

    fn save_from(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        SessionStore::save_from(&**self, key, messages, unchanged, expected_version)
    }
}

/// The object-safe twin of [`SessionStore`]: the one place store futures are erased
/// (the agent holds its store as `Arc<dyn DynSessionStore>`). Private to the crate.
pub(crate) trait DynSessionStore: Send + Sync + 'static {
    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<StoredSession, StoreError>>;

    fn save_from<'a>(
        &'a self,
        key: &'a SessionKey,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
}

/// The agent checks the key contract and the nesting bound here, for every store (a
/// user's own included), before the store sees the call.
impl<S: SessionStore> DynSessionStore for S {
    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<StoredSession, StoreError>> {
        Box::pin(async move {
            super::storable::check_key(key)?;
            SessionStore::load(self, key).await
        })
    }

    fn save_from<'a>(
        &'a self,
        key: &'a SessionKey,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            super::storable::check_key(key)?;
            let unchanged = unchanged.min(messages.len());
            // The prefix was checked when it was saved: only what is written is checked.
            super::storable::check_storable(key, &messages[unchanged..])?;
            SessionStore::save_from(self, key, messages, unchanged, expected_version).await
        })
    }
}

/// A [`SessionStore`] in this process's memory. Clones share the same sessions, so two
/// agents given clones of one store see each other's saves (and conflict like two
/// processes sharing a directory would).
///
/// It implements [`SessionLeases`](super::SessionLeases) too (leases measured on this process's clock,
/// shared by clones), so agents built with
/// [`AgentBuilder::leased_session_store`](crate::AgentBuilder::leased_session_store) on
/// clones of one store order their calls as replicas on a shared engine would.
#[derive(Clone, Default)]
pub struct InMemorySessionStore {
    sessions: Arc<Mutex<HashMap<SessionKey, StoredSession>>>,
    leases: Arc<Mutex<HashMap<SessionKey, LeaseRow>>>,
}

/// The lease state of one session in an [`InMemorySessionStore`].
#[derive(Debug, Default)]
pub(super) struct LeaseRow {
    /// The current holder's token and when its lease expires.
    pub(super) holder: Option<(String, Instant)>,
    /// The fence of the last acquisition.
    pub(super) fence: u64,
    /// The fence of the last fenced save.
    pub(super) saved_fence: u64,
    /// The queued waiters in arrival order, each with the time its entry expires.
    pub(super) waiters: std::collections::VecDeque<(String, Instant)>,
    /// The signal sent to a holder (its token).
    pub(super) signal: Option<(String, super::SessionSignal)>,
}

impl LeaseRow {
    /// Whether `lease` is the live holder.
    pub(super) fn holds(&self, lease: &Lease, now: Instant) -> bool {
        matches!(&self.holder, Some((token, expires)) if token == lease.token() && *expires > now)
    }
}

impl fmt::Debug for InMemorySessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemorySessionStore")
            .field("sessions", &self.len())
            .finish()
    }
}

impl InMemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions have been saved.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` when no session has been saved.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys of the saved sessions, in no particular order.
    pub fn keys(&self) -> Vec<SessionKey> {
        self.lock().keys().cloned().collect()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, StoredSession>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn lock_leases(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, LeaseRow>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The version check and write of a save (the caller holds whatever else must not
    /// change meanwhile).
    pub(super) fn write(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        super::storable::check_key(key)?;
        let unchanged = unchanged.min(messages.len());
        super::storable::check_storable(key, &messages[unchanged..])?;
        let mut sessions = self.lock();
        let stored = sessions.get_mut(key);
        let found = stored.as_ref().map_or(0, |s| s.version);
        if found != expected_version {
            return Err(StoreError::conflict(key, expected_version, found));
        }
        let version = next_version(key, expected_version)?;
        match stored {
            Some(stored) => {
                if stored.messages.len() < unchanged {
                    return Err(short(key, unchanged, stored.messages.len(), found));
                }
                stored.messages.truncate(unchanged);
                stored.messages.extend_from_slice(&messages[unchanged..]);
                stored.version = version;
            }
            None if unchanged > 0 => return Err(short(key, unchanged, 0, found)),
            None => {
                sessions.insert(key.clone(), StoredSession::new(messages.to_vec(), version));
            }
        }
        Ok(version)
    }
}

impl SessionStore for InMemorySessionStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        super::storable::check_key(key)?;
        Ok(self.lock().get(key).cloned().unwrap_or_default())
    }

    async fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        self.write(key, messages, 0, expected_version)
    }

    async fn save_from(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        self.write(key, messages, unchanged, expected_version)
    }
}

/// For store implementations: the [`StoreErrorKind::Conflict`] of a
/// [`SessionStore::save_from`] that claims `unchanged` stored messages where the store
/// holds `stored` at version `version` (nothing written; the caller reloads).
pub fn unchanged_beyond_stored(
    key: &SessionKey,
    unchanged: usize,
    stored: usize,
    version: u64,
) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::Conflict,
        key,
        format!(
            "nothing saved: the save leaves {unchanged} stored messages unchanged, but the store \
             holds {stored} at version {version} (reload the session)"
        ),
    )
}

fn short(key: &SessionKey, unchanged: usize, stored: usize, version: u64) -> StoreError {
    unchanged_beyond_stored(key, unchanged, stored, version)
}

/// For store implementations: the version a save of `expected` writes (`expected + 1`).
///
/// # Errors
/// A [`StoreError`] naming the session when the version space is exhausted
/// (`expected == u64::MAX`).
pub fn next_version(key: &SessionKey, expected: u64) -> Result<u64, StoreError> {
    expected.checked_add(1).ok_or_else(|| {
        StoreError::new(key, "the session's version counter is exhausted (u64::MAX)")
    })
}
