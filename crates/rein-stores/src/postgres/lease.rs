//! Session leases on PostgreSQL: rows of `<table>_leases` with a token, a fence and an
//! expiry by the server's clock (not advisory locks, which belong to one pooled
//! connection and have neither a TTL nor a fence). A leased call is two round trips:
//! acquire and load pipelined, then the last fenced save releasing in its statement.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::Row;

use rein_core::Msg;
use rein_core::store::{
    Lease, QueuedAttempt, SessionKey, SessionSignal, StoreError, StoreErrorKind, StoredSession,
    acquire_queued_polling, release_logged, ttl_millis,
};

use super::PostgresSessionStore;
use super::connection::pg_error;
use crate::key_string;
use crate::lease::acquire_polling;

impl PostgresSessionStore {
    pub(super) async fn inner_acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        rein_core::store::check_key(key)?;
        let k = key_string(key);
        // The lease wait bounds the pool wait too: an attempt waits for a connection
        // only as long as is left of it (a `Busy` refusal, not the pool's timeout).
        let deadline = tokio::time::Instant::now() + wait;
        acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let k = &k;
            async move {
                // At most 86,400,000 ms: exact as a float.
                let ms = ttl_ms as f64;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let what = "acquiring the lease";
                let (client, statement) = self
                    .prepared_within(Some(key), what, &self.sql.acquire, Some(left))
                    .await?;
                let rows = client
                    .query(&statement, &[k, &token, &ms])
                    .await
                    .map_err(|e| pg_error(Some(key), what, &e))?;
                Ok(match rows.first() {
                    Some(row) => {
                        let fence: i64 = row
                            .try_get(0)
                            .map_err(|e| pg_error(Some(key), "acquiring the lease", &e))?;
                        Some(u64::try_from(fence).unwrap_or(0))
                    }
                    None => None,
                })
            }
        })
        .await
    }

    pub(super) async fn inner_renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease.key();
        let ms = ttl_millis(key, lease.ttl())? as f64;
        let (k, token) = (key_string(key), lease.token());
        let n = self
            .execute(
                Some(key),
                "renewing the lease",
                &self.sql.renew,
                &[&k, &token, &ms],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                "the lease expired or another holder took the session over",
            ));
        }
        Ok(())
    }

    pub(super) async fn inner_release(&self, lease: &Lease) -> Result<bool, StoreError> {
        let key = lease.key();
        let (k, token) = (key_string(key), lease.token());
        let n = self
            .execute(
                Some(key),
                "releasing the lease",
                &self.sql.release,
                &[&k, &token],
            )
            .await?;
        Ok(n > 0)
    }

    /// `SessionLeases::acquire_and_load`: per attempt, the acquisition and the load
    /// under the lease are two statements pipelined on one connection (one round trip;
    /// the server runs the load after the acquisition committed, so it sees every
    /// earlier holder's save). The load reads nothing unless this token holds the lease;
    /// when it finds the lease already gone (a TTL shorter than the round trip), no
    /// session is returned and the caller loads. A session that fails to decode
    /// releases the lease before the error is returned.
    pub(super) async fn inner_acquire_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        rein_core::store::check_key(key)?;
        let k = key_string(key);
        let max = i64::try_from(self.max_bytes).unwrap_or(i64::MAX);
        let deadline = tokio::time::Instant::now() + wait;
        // The load's outcome in the attempt that got the lease.
        let loaded: Mutex<Option<Result<Option<Row>, StoreError>>> = Mutex::new(None);
        let lease = acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let (k, max, loaded) = (&k, &max, &loaded);
            async move {
                // At most 86,400,000 ms: exact as a float.
                let ms = ttl_ms as f64;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let what = "acquiring the lease";
                let (client, acquire) = self
                    .prepared_within(Some(key), what, &self.sql.acquire, Some(left))
                    .await?;
                let load = client
                    .prepare_cached(&self.sql.load_leased)
                    .await
                    .map_err(|e| pg_error(Some(key), "loading the session", &e))?;
                // Polled together, the two requests leave in one write.
                let (acquired, rows) = futures::future::join(
                    client.query(&acquire, &[k, &token, &ms]),
                    client.query(&load, &[k, max, &token]),
                )
                .await;
                let acquired = acquired.map_err(|e| pg_error(Some(key), what, &e))?;
                let Some(row) = acquired.first() else {
                    return Ok(None);
                };
                let fence: i64 = row.try_get(0).map_err(|e| pg_error(Some(key), what, &e))?;
                let rows = rows
                    .map(|rows| rows.into_iter().next())
                    .map_err(|e| pg_error(Some(key), "loading the session", &e));
                *loaded.lock().unwrap_or_else(PoisonError::into_inner) = Some(rows);
                Ok(Some(u64::try_from(fence).unwrap_or(0)))
            }
        })
        .await?;
        self.loaded_under(key, lease, loaded).await
    }

    /// `SessionLeases::save_fenced_and_release`: the save statement releases the lease
    /// once it has written; when it did not write, the lease is released separately.
    pub(super) async fn inner_save_and_release(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
    ) -> Result<u64, StoreError> {
        let saved = self
            .save_releasing(
                lease.key(),
                messages,
                unchanged,
                expected,
                Some(lease),
                true,
            )
            .await;
        if saved.is_err() {
            release_logged(self, lease).await;
        }
        saved
    }

    /// `SessionLeases::acquire_queued_and_load`: per attempt, the queue function (one
    /// transaction under a per-session advisory lock: purge, join or refresh, take the
    /// lease at the head) and the load under the lease, pipelined on one connection.
    pub(super) async fn inner_acquire_queued_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        rein_core::store::check_key(key)?;
        let k = key_string(key);
        let max = i64::try_from(self.max_bytes).unwrap_or(i64::MAX);
        let most = i64::try_from(max_waiting).unwrap_or(i64::MAX);
        let deadline = tokio::time::Instant::now() + wait;
        let token = crate::lease::new_token(key)?;
        let loaded: Mutex<Option<Result<Option<Row>, StoreError>>> = Mutex::new(None);
        let lease = acquire_queued_polling(
            key,
            ttl,
            wait,
            token,
            max_waiting,
            |token, ttl_ms, waiter_ms| {
                let (k, max, most, loaded) = (&k, &max, &most, &loaded);
                async move {
                    // At most 86,400,000 ms: exact as floats.
                    let (ms, life) = (ttl_ms as f64, waiter_ms as f64);
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    let what = "acquiring the lease in turn";
                    let (client, acquire) = self
                        .prepared_within(Some(key), what, &self.sql.acquire_queued, Some(left))
                        .await?;
                    let load = client
                        .prepare_cached(&self.sql.load_leased)
                        .await
                        .map_err(|e| pg_error(Some(key), "loading the session", &e))?;
                    let (acquired, rows) = futures::future::join(
                        client.query_one(&acquire, &[k, &token, &ms, &life, most]),
                        client.query(&load, &[k, max, &token]),
                    )
                    .await;
                    let row = acquired.map_err(|e| pg_error(Some(key), what, &e))?;
                    let fence: i64 = row.try_get(0).map_err(|e| pg_error(Some(key), what, &e))?;
                    if fence < 0 {
                        return Ok(QueuedAttempt::Full);
                    }
                    if fence == 0 {
                        return Ok(QueuedAttempt::Waiting);
                    }
                    let rows = rows
                        .map(|rows| rows.into_iter().next())
                        .map_err(|e| pg_error(Some(key), "loading the session", &e));
                    *loaded.lock().unwrap_or_else(PoisonError::into_inner) = Some(rows);
                    Ok(QueuedAttempt::Acquired(u64::try_from(fence).unwrap_or(0)))
                }
            },
            |token| {
                let k = &k;
                async move {
                    self.execute(
                        Some(key),
                        "leaving the queue",
                        &self.sql.leave,
                        &[k, &token],
                    )
                    .await
                    .map(|_| ())
                }
            },
        )
        .await?;
        self.loaded_under(key, lease, loaded).await
    }

    pub(super) async fn inner_signal(
        &self,
        key: &SessionKey,
        signal: SessionSignal,
    ) -> Result<bool, StoreError> {
        let k = key_string(key);
        let n = self
            .execute(
                Some(key),
                "signalling the session's holder",
                &self.sql.signal,
                &[&k, &signal.as_str()],
            )
            .await?;
        Ok(n > 0)
    }

    pub(super) async fn inner_signalled(
        &self,
        lease: &Lease,
    ) -> Result<Option<SessionSignal>, StoreError> {
        let key = lease.key();
        let (k, token) = (key_string(key), lease.token());
        let rows = self
            .query(
                Some(key),
                "reading the session's signal",
                &self.sql.signalled,
                &[&k, &token],
            )
            .await?;
        Ok(rows
            .first()
            .and_then(|row| row.try_get::<_, Option<String>>(0).ok().flatten())
            .and_then(|name| SessionSignal::from_name(&name)))
    }

    /// The session the winning attempt loaded under `lease`; a session that fails to
    /// decode releases the lease before the error is returned.
    async fn loaded_under(
        &self,
        key: &SessionKey,
        lease: Lease,
        loaded: Mutex<Option<Result<Option<Row>, StoreError>>>,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        let loaded = loaded.into_inner().unwrap_or_else(PoisonError::into_inner);
        let decoded = match loaded {
            Some(Ok(Some(row))) => self.decode_row(key, &row, 1).map(Some),
            Some(Ok(None)) | None => Ok(None),
            Some(Err(e)) => Err(e),
        };
        match decoded {
            Ok(stored) => Ok((lease, stored)),
            Err(e) => {
                release_logged(self, &lease).await;
                Err(e)
            }
        }
    }
}
