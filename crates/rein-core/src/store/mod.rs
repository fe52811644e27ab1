//! Sessions: where an agent's conversations live between calls. A [`SessionStore`]
//! loads and saves one conversation ([`SessionKey`]) with a version check;
//! [`SessionAdmin`] deletes and lists sessions; [`SessionLeases`] orders the calls on one
//! session across processes. This module owns that contract and the two stores that need
//! nothing outside the process: [`FileSessionStore`] (one file per session, saved
//! atomically) and [`InMemorySessionStore`]. The stores on shared engines (Redis,
//! PostgreSQL) implement the same traits in the `rein-stores` crate (`rein::store` with
//! the features `redis` and `postgres`); one shared test suite runs against all four.
//!
//! # Consistency model
//! - **Versions.** A load returns the messages and their version; a save names the
//!   version it replaces and fails with [`StoreErrorKind::Conflict`] (nothing written)
//!   when another writer saved in between. Exactly one of several concurrent savers of
//!   one version wins. On a `Conflict`, reload and redo the work on the new history (an
//!   agent does this by reloading on its next call on the session).
//! - **Corrupt data** (a stored value that is not a rein session, or whose history
//!   cannot be decoded) fails loads and saves with [`StoreErrorKind::Corrupt`] and is
//!   never overwritten; [`SessionAdmin::delete`] removes it.
//! - **Leases** order calls on one session across processes: a holder acquires a lease
//!   ([`SessionLeases::acquire`], [`StoreErrorKind::Busy`] when it cannot within the
//!   wait), renews it while it works, saves with [`SessionLeases::save_fenced`] and
//!   releases it. A save whose lease expired or was taken over fails with
//!   [`StoreErrorKind::LeaseLost`] and writes nothing; a holder that dies loses its lease
//!   after the TTL. [`SessionLeases::acquire_and_load`] (acquire, then load) and
//!   [`SessionLeases::save_fenced_and_release`] (the last fenced save, then release)
//!   take one round trip each where the store can, with the same guarantees. Leases are advisory for unfenced saves: a plain
//!   [`SessionStore::save`] still needs only the right
//!   version.
//! - **Faults.** A server that cannot be reached fails the call with
//!   [`StoreErrorKind::Unavailable`]; the next call after it is back works. Bad
//!   configuration (URL, credentials, table name, prefix) is
//!   [`StoreErrorKind::Config`]. Every error names the session it concerns.

use std::fs::{self, OpenOptions};
use std::future::Future;
use std::io;

mod file;
mod key;
mod lease;
mod memory_lease;
pub mod queue;
mod session;
pub(crate) mod storable;

pub use file::FileSessionStore;
pub use key::SessionKey;
pub(crate) use lease::DynSessionLeases;
pub use lease::{
    Lease, LeaseConfig, MAX_TTL, SessionLeases, acquire_polling, release_logged, ttl_millis,
};
pub use queue::{QueuedAttempt, SessionSignal, WAITER_TTL, acquire_queued_polling};
pub(crate) use session::DynSessionStore;
pub use session::{
    InMemorySessionStore, SessionStore, StoreError, StoreErrorKind, StoredSession, next_version,
    unchanged_beyond_stored,
};
pub use storable::{
    DEFAULT_MAX_SESSION_BYTES, MAX_KEY_BYTES, MAX_STORED_DEPTH, check_key, check_size,
    check_storable, key_problem, too_large,
};

/// Managing the sessions of a store: delete one, list a user's.
///
/// Implemented by every store of the crate. Kept apart from
/// [`SessionStore`], which is all an agent needs.
pub trait SessionAdmin: Send + Sync + 'static {
    /// Removes a session (its messages and version), whatever it holds — a corrupt
    /// session can be deleted. Returns whether there was one. The next load sees version
    /// `0`; a writer that still holds an older version then gets a `Conflict` only if
    /// the session was saved again past that version.
    ///
    /// # Errors
    /// [`StoreErrorKind::Io`] or [`StoreErrorKind::Unavailable`] when the storage
    /// cannot be written.
    fn delete(&self, key: &SessionKey) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The keys of the saved sessions of `user_id` (`None`: the sessions saved without
    /// a user), sorted by session id.
    ///
    /// # Errors
    /// [`StoreErrorKind::Io`] or [`StoreErrorKind::Unavailable`] when the storage
    /// cannot be read.
    fn list(
        &self,
        user_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<SessionKey>, StoreError>> + Send;
}

impl SessionAdmin for InMemorySessionStore {
    fn delete(&self, key: &SessionKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let removed = self.lock().remove(key).is_some();
        std::future::ready(Ok(removed))
    }

    fn list(
        &self,
        user_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<SessionKey>, StoreError>> + Send {
        let mut keys: Vec<SessionKey> = self
            .keys()
            .into_iter()
            .filter(|k| k.user_id.as_deref() == user_id)
            .collect();
        keys.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        std::future::ready(Ok(keys))
    }
}

impl SessionAdmin for FileSessionStore {
    fn delete(&self, key: &SessionKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let data = self.path_of(key);
        let lock = data.with_extension("lock");
        let owned = key.clone();
        let failed = key.clone();
        blocking(
            move || {
                let io_err = |what: &str, e: io::Error| {
                    StoreError::with_kind(StoreErrorKind::Io, &owned, format!("cannot {what}: {e}"))
                        .with_source(e)
                };
                // The lock a save takes: a delete never interleaves with a save.
                let lock = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .read(true)
                    .write(true)
                    .open(&lock)
                    .map_err(|e| io_err("open the lock file", e))?;
                lock.lock().map_err(|e| io_err("lock the session", e))?;
                let removed = match fs::remove_file(&data) {
                    Ok(()) => true,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                    Err(e) => return Err(io_err("remove the session file", e)),
                };
                drop(lock);
                Ok(removed)
            },
            move |e| {
                StoreError::with_kind(
                    StoreErrorKind::Io,
                    &failed,
                    format!("the file I/O task did not complete: {e}"),
                )
            },
        )
    }

    fn list(
        &self,
        user_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<SessionKey>, StoreError>> + Send {
        let dir = self.dir().to_path_buf();
        let user = user_id.map(str::to_owned);
        async move {
            let run = move || {
                let io_err = |e: io::Error| {
                    StoreError::unkeyed(
                        StoreErrorKind::Io,
                        format!("cannot list the session directory {}: {e}", dir.display()),
                    )
                    .with_source(e)
                };
                let mut keys = Vec::new();
                for entry in fs::read_dir(&dir).map_err(io_err)? {
                    let path = entry.map_err(io_err)?.path();
                    if path.extension().is_none_or(|e| e != "json") {
                        continue;
                    }
                    // Unreadable or corrupt files are not sessions of anyone; a load of
                    // their key reports them.
                    if let Ok((key, _)) = FileSessionStore::read_file(&path)
                        && key.user_id == user
                    {
                        keys.push(key);
                    }
                }
                keys.sort_by(|a, b| a.session_id.cmp(&b.session_id));
                Ok(keys)
            };
            blocking(run, |e| {
                StoreError::unkeyed(
                    StoreErrorKind::Io,
                    format!("the directory listing task did not complete: {e}"),
                )
            })
            .await
        }
    }
}

/// Runs blocking file I/O on tokio's blocking pool when a runtime is present, inline
/// otherwise; `failed` makes the error for a task that did not complete.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    failed: impl FnOnce(String) -> StoreError,
) -> Result<T, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(f)
            .await
            .map_err(|e| failed(e.to_string()))?,
        Err(_) => f(),
    }
}
