//! Sessions across replicas: session stores on shared engines, session management
//! ([`SessionAdmin`]: delete, list by user) and session leases ([`SessionLeases`]).
//!
//! - `RedisSessionStore` (feature `redis`): one Redis hash per session, every save a
//!   Lua compare-and-set on the version.
//! - `PostgresSessionStore` (feature `postgres`): one row per session in a table created
//!   by an idempotent migration, every save an `UPDATE … WHERE version = $expected`.
//! - `PostgresAuditSink` (feature `postgres`): the audit records of every replica in one
//!   table, one batched insert per batch off the call path.
//!
//! Both implement [`SessionStore`](crate::SessionStore) with the same contract as
//! [`FileSessionStore`] and
//! [`InMemorySessionStore`] (one shared test suite runs
//! against all four), plus [`SessionAdmin`] and [`SessionLeases`].
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
//!   after the TTL. Leases are advisory for unfenced saves: a plain
//!   [`SessionStore::save`](crate::SessionStore::save) still needs only the right
//!   version.
//! - **Faults.** A server that cannot be reached fails the call with
//!   [`StoreErrorKind::Unavailable`]; the next call after it is back works. Bad
//!   configuration (URL, credentials, table name, prefix) is
//!   [`StoreErrorKind::Config`]. Every error names the session it concerns.

use std::fs::{self, OpenOptions};
use std::io;

use std::future::Future;

use crate::agent::{
    FileSessionStore, InMemorySessionStore, SessionKey, StoreError, StoreErrorKind,
};
#[cfg(any(feature = "redis", feature = "postgres"))]
use crate::message::Msg;

/// Implements [`SessionStore`](crate::SessionStore), [`SessionAdmin`] and
/// [`SessionLeases`] for an engine store as thin wrappers over its inherent
/// `inner_*` async fns.
/// Names resolve where it is invoked, which imports the traits and types.
#[cfg(any(feature = "redis", feature = "postgres"))]
macro_rules! engine_store_traits {
    ($ty:ty) => {
        impl SessionStore for $ty {
            fn load(
                &self,
                key: &SessionKey,
            ) -> impl Future<Output = Result<StoredSession, StoreError>> + Send {
                self.inner_load(key)
            }

            fn save(
                &self,
                key: &SessionKey,
                messages: &[Msg],
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(key, messages, expected_version, None)
            }
        }

        impl SessionAdmin for $ty {
            fn delete(
                &self,
                key: &SessionKey,
            ) -> impl Future<Output = Result<bool, StoreError>> + Send {
                self.inner_delete(key)
            }

            fn list(
                &self,
                user_id: Option<&str>,
            ) -> impl Future<Output = Result<Vec<SessionKey>, StoreError>> + Send {
                self.inner_list(user_id)
            }
        }

        impl SessionLeases for $ty {
            fn acquire(
                &self,
                key: &SessionKey,
                ttl: std::time::Duration,
                wait: std::time::Duration,
            ) -> impl Future<Output = Result<Lease, StoreError>> + Send {
                self.inner_acquire(key, ttl, wait)
            }

            fn renew(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send {
                self.inner_renew(lease)
            }

            fn release(
                &self,
                lease: &Lease,
            ) -> impl Future<Output = Result<bool, StoreError>> + Send {
                self.inner_release(lease)
            }

            fn save_fenced(
                &self,
                lease: &Lease,
                messages: &[Msg],
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(lease.key(), messages, expected_version, Some(lease))
            }
        }
    };
}

#[cfg(any(feature = "redis", feature = "postgres"))]
mod lease;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_audit;
#[cfg(feature = "redis")]
mod redis;

pub use crate::agent::storable::{
    DEFAULT_MAX_SESSION_BYTES, MAX_KEY_BYTES, MAX_STORED_DEPTH, check_key, check_storable,
    key_problem,
};
pub use crate::agent::{Lease, LeaseConfig, SessionLeases};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresSessionStore, PostgresSessionStoreBuilder};
#[cfg(feature = "postgres")]
pub use postgres_audit::{PostgresAuditSink, PostgresAuditSinkBuilder};
#[cfg(feature = "redis")]
pub use redis::{RedisSessionStore, RedisSessionStoreBuilder};

/// Managing the sessions of a store: delete one, list a user's.
///
/// Implemented by every store of the crate. Kept apart from
/// [`SessionStore`](crate::SessionStore), which is all an agent needs.
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

/// The format marker the engine stores keep next to every session (as the file store
/// does in its files).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) const FORMAT: &str = "rein-session/1";

/// A session key as one unambiguous string: the JSON array `[user or null, session]`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn key_string(key: &SessionKey) -> String {
    serde_json::json!([key.user_id, key.session_id]).to_string()
}

/// The JSON text of a history.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn encode_messages(key: &SessionKey, messages: &[Msg]) -> Result<String, StoreError> {
    serde_json::to_string(messages).map_err(|e| {
        StoreError::new(key, format!("cannot encode the conversation: {e}")).with_source(e)
    })
}

/// The history in `text`, or a [`StoreErrorKind::Corrupt`] naming `where_`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn decode_messages(
    key: &SessionKey,
    text: &[u8],
    where_: &str,
) -> Result<Vec<Msg>, StoreError> {
    serde_json::from_slice(text).map_err(|e| {
        StoreError::with_kind(
            StoreErrorKind::Corrupt,
            key,
            format!("{where_} does not hold a rein conversation: {e}"),
        )
    })
}

/// A version as the engines' signed 64-bit integers, or an error naming the session.
#[cfg(feature = "postgres")]
pub(crate) fn to_i64(key: &SessionKey, what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::with_kind(
            StoreErrorKind::Config,
            key,
            format!("the {what} {value} is beyond the store's range (i64::MAX)"),
        )
    })
}
