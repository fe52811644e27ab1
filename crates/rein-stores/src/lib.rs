//! rein's session stores on shared engines, for agents that run on several replicas.
//!
//! - [`RedisSessionStore`] (feature `redis`): one Redis hash and one list of messages per
//!   session, every save a Lua compare-and-set on the version (and the lease's fence)
//!   that writes only what the call changed.
//! - [`PostgresSessionStore`] (feature `postgres`): one row per session and one row per
//!   message in tables created by an idempotent migration, every save one statement
//!   `UPDATE … WHERE version = $expected` that writes only the messages the call
//!   changed.
//! - [`PostgresAuditSink`] (feature `postgres`): the audit records of every replica in one
//!   table, one batched insert per batch off the call path.
//!
//! Both stores implement [`SessionStore`](rein_core::SessionStore),
//! [`SessionAdmin`](rein_core::store::SessionAdmin) and
//! [`SessionLeases`](rein_core::store::SessionLeases) with the same contract as the file
//! and in-memory stores of `rein_core::store` (its module docs state the consistency
//! model: versions, corrupt data, leases with fencing tokens, faults); one shared test
//! suite runs against all four.

#![cfg_attr(docsrs, feature(doc_cfg))]

/// Implements [`SessionStore`](rein_core::SessionStore),
/// [`SessionAdmin`](rein_core::store::SessionAdmin) and
/// [`SessionLeases`](rein_core::store::SessionLeases) for an engine store as thin
/// wrappers over its inherent `inner_*` async fns. Names resolve where it is invoked,
/// which imports the types.
#[cfg(any(feature = "redis", feature = "postgres"))]
macro_rules! engine_store_traits {
    ($ty:ty) => {
        impl rein_core::SessionStore for $ty {
            fn load(
                &self,
                key: &SessionKey,
            ) -> impl Future<Output = Result<rein_core::store::StoredSession, StoreError>> + Send
            {
                self.inner_load(key)
            }

            fn save(
                &self,
                key: &SessionKey,
                messages: &[Msg],
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(key, messages, 0, expected_version, None)
            }

            fn save_from(
                &self,
                key: &SessionKey,
                messages: &[Msg],
                unchanged: usize,
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(key, messages, unchanged, expected_version, None)
            }
        }

        impl rein_core::store::SessionAdmin for $ty {
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

        impl rein_core::store::SessionLeases for $ty {
            fn acquire(
                &self,
                key: &SessionKey,
                ttl: std::time::Duration,
                wait: std::time::Duration,
            ) -> impl Future<Output = Result<rein_core::store::Lease, StoreError>> + Send {
                self.inner_acquire(key, ttl, wait)
            }

            fn renew(
                &self,
                lease: &rein_core::store::Lease,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                self.inner_renew(lease)
            }

            fn release(
                &self,
                lease: &rein_core::store::Lease,
            ) -> impl Future<Output = Result<bool, StoreError>> + Send {
                self.inner_release(lease)
            }

            fn save_fenced(
                &self,
                lease: &rein_core::store::Lease,
                messages: &[Msg],
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(lease.key(), messages, 0, expected_version, Some(lease))
            }

            fn save_fenced_from(
                &self,
                lease: &rein_core::store::Lease,
                messages: &[Msg],
                unchanged: usize,
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save(
                    lease.key(),
                    messages,
                    unchanged,
                    expected_version,
                    Some(lease),
                )
            }

            fn acquire_and_load(
                &self,
                key: &SessionKey,
                ttl: std::time::Duration,
                wait: std::time::Duration,
            ) -> impl Future<
                Output = Result<
                    (
                        rein_core::store::Lease,
                        Option<rein_core::store::StoredSession>,
                    ),
                    StoreError,
                >,
            > + Send {
                self.inner_acquire_and_load(key, ttl, wait)
            }

            fn acquire_queued_and_load(
                &self,
                key: &SessionKey,
                ttl: std::time::Duration,
                wait: std::time::Duration,
                max_waiting: usize,
            ) -> impl Future<
                Output = Result<
                    (
                        rein_core::store::Lease,
                        Option<rein_core::store::StoredSession>,
                    ),
                    StoreError,
                >,
            > + Send {
                self.inner_acquire_queued_and_load(key, ttl, wait, max_waiting)
            }

            fn signal(
                &self,
                key: &SessionKey,
                signal: rein_core::store::SessionSignal,
            ) -> impl Future<Output = Result<bool, StoreError>> + Send {
                self.inner_signal(key, signal)
            }

            fn signalled(
                &self,
                lease: &rein_core::store::Lease,
            ) -> impl Future<Output = Result<Option<rein_core::store::SessionSignal>, StoreError>>
                   + Send {
                self.inner_signalled(lease)
            }

            fn orders_and_signals(&self) -> bool {
                true
            }

            fn save_fenced_and_release(
                &self,
                lease: &rein_core::store::Lease,
                messages: &[Msg],
                unchanged: usize,
                expected_version: u64,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                self.inner_save_and_release(lease, messages, unchanged, expected_version)
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

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresSessionStore, PostgresSessionStoreBuilder};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres_audit::{PostgresAuditSink, PostgresAuditSinkBuilder};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisSessionStore, RedisSessionStoreBuilder};

#[cfg(any(feature = "redis", feature = "postgres"))]
use rein_core::Msg;
#[cfg(any(feature = "redis", feature = "postgres"))]
use rein_core::store::{SessionKey, StoreError, StoreErrorKind};

/// The format marker the engine stores keep next to every session (as the file store
/// does in its files).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) const FORMAT: &str = "rein-session/1";

/// A session key as one unambiguous string: the JSON array `[user or null, session]`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn key_string(key: &SessionKey) -> String {
    serde_json::json!([key.user_id, key.session_id]).to_string()
}

/// The format marker of a session whose messages are stored one per list element
/// (Redis) or row (PostgreSQL), written by every save since append-only saves; sessions
/// in [`FORMAT`] (the whole history in one value) load as before and are converted by
/// their first save.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) const FORMAT_APPEND: &str = "rein-session/2";

/// The JSON text of each message of `messages` (one list element or row each).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn encode_each(key: &SessionKey, messages: &[Msg]) -> Result<Vec<String>, StoreError> {
    messages
        .iter()
        .map(|m| {
            serde_json::to_string(m).map_err(|e| {
                StoreError::new(key, format!("cannot encode the conversation: {e}")).with_source(e)
            })
        })
        .collect()
}

/// The size of a history's JSON array from its message count and the bytes of its
/// messages' texts (what [`encode_messages`] writes for it, byte for byte).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn array_bytes(count: u64, text_bytes: u64) -> u64 {
    text_bytes
        .saturating_add(count.saturating_sub(1))
        .saturating_add(2)
}

/// The messages of a history stored one JSON text each, or a
/// [`StoreErrorKind::Corrupt`] naming `where_`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn decode_each<T: AsRef<[u8]>>(
    key: &SessionKey,
    texts: &[T],
    where_: &str,
) -> Result<Vec<Msg>, StoreError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_slice(t.as_ref()).map_err(|e| {
                StoreError::with_kind(
                    StoreErrorKind::Corrupt,
                    key,
                    format!("{where_}: message {i} is not a rein message: {e}"),
                )
            })
        })
        .collect()
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
