//! Session leases on Redis: the lease is a key holding the holder's token, expiring
//! after the TTL (`SET NX PX`), next to a fence counter raised on every acquisition.
//!
//! A leased call is two round trips: the acquisition loads the session in its own
//! script (the load then sees every save of an earlier holder, as nothing runs between
//! the two), and the call's last fenced save deletes the lease in its own script once it
//! has written. A failed save releases separately, as does a load that fails to decode.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rein_core::Msg;
use rein_core::store::{
    Lease, QueuedAttempt, SessionKey, SessionSignal, StoreError, StoreErrorKind, StoredSession,
    acquire_queued_polling, release_logged,
};

use super::RedisSessionStore;
use super::connection::redis_error;
use super::session::text;
use crate::lease::acquire_polling;

impl RedisSessionStore {
    pub(super) async fn inner_acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        rein_core::store::check_key(key)?;
        let (lease_key, fence_key, data_key) =
            (self.lease_key(key), self.fence_key(key), self.data_key(key));
        let [queue, waiters, ..] = self.queue_keys(key);
        acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let mut conn = self.conn();
            let (lease_key, fence_key, data_key) = (&lease_key, &fence_key, &data_key);
            let (queue, waiters) = (&queue, &waiters);
            async move {
                let fence: u64 = self
                    .scripts
                    .acquire
                    .key(lease_key)
                    .key(fence_key)
                    .key(data_key)
                    .key(queue)
                    .key(waiters)
                    .arg(token)
                    .arg(ttl_ms)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| redis_error(Some(key), "acquiring the lease", e))?;
                Ok((fence > 0).then_some(fence))
            }
        })
        .await
    }

    pub(super) async fn inner_renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease.key();
        let ttl_ms = rein_core::store::ttl_millis(key, lease.ttl())?;
        let mut conn = self.conn();
        let renewed: u64 = self
            .scripts
            .renew
            .key(self.lease_key(key))
            .arg(lease.token())
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "renewing the lease", e))?;
        if renewed == 0 {
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
        let mut conn = self.conn();
        let released: u64 = self
            .scripts
            .release
            .key(self.lease_key(key))
            .arg(lease.token())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "releasing the lease", e))?;
        Ok(released > 0)
    }

    /// `SessionLeases::acquire_and_load`: one script per attempt acquires the lease and,
    /// when it got it, loads the session; a session that then fails to decode releases
    /// the lease before the error is returned.
    pub(super) async fn inner_acquire_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        rein_core::store::check_key(key)?;
        let [queue, waiters, ..] = self.queue_keys(key);
        let keys = [
            self.lease_key(key),
            self.fence_key(key),
            self.data_key(key),
            self.messages_key(key),
            queue,
            waiters,
        ];
        // The reply of the attempt that got the lease (its first element the fence).
        let loaded: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
        let lease = acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let mut conn = self.conn();
            let (keys, loaded) = (&keys, &loaded);
            async move {
                let reply: Vec<Vec<u8>> = self
                    .scripts
                    .acquire_load
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .key(&keys[3])
                    .key(&keys[4])
                    .key(&keys[5])
                    .arg(token)
                    .arg(ttl_ms)
                    .arg(self.max_bytes)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| redis_error(Some(key), "acquiring the lease", e))?;
                let fence = match reply.first() {
                    Some(status) if status == b"busy" => return Ok(None),
                    Some(fence) => text(fence).parse::<u64>().ok().filter(|f| *f > 0),
                    None => None,
                };
                let Some(fence) = fence else {
                    return Err(StoreError::with_kind(
                        StoreErrorKind::Io,
                        key,
                        "Redis: unexpected reply from the acquire-and-load script",
                    ));
                };
                *loaded.lock().unwrap_or_else(PoisonError::into_inner) = reply;
                Ok(Some(fence))
            }
        })
        .await?;
        self.loaded_under(key, lease, loaded).await
    }

    /// `SessionLeases::save_fenced_and_release`: the save script deletes the lease once
    /// it has written; when it did not write, the lease is released separately.
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

    /// `SessionLeases::acquire_queued_and_load`: one script per attempt joins (or
    /// refreshes) the queue and, at its head with the lease free, acquires and loads.
    pub(super) async fn inner_acquire_queued_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        rein_core::store::check_key(key)?;
        let [queue, waiters, arrivals, _] = self.queue_keys(key);
        let keys = [
            self.lease_key(key),
            self.fence_key(key),
            self.data_key(key),
            self.messages_key(key),
            queue,
            waiters,
            arrivals,
        ];
        let token = crate::lease::new_token(key)?;
        let loaded: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
        let lease = acquire_queued_polling(
            key,
            ttl,
            wait,
            token,
            max_waiting,
            |token, ttl_ms, waiter_ms| {
                let mut conn = self.conn();
                let (keys, loaded) = (&keys, &loaded);
                async move {
                    let mut invocation = self.scripts.acquire_queued.prepare_invoke();
                    for k in keys {
                        invocation.key(k);
                    }
                    let reply: Vec<Vec<u8>> = invocation
                        .arg(token)
                        .arg(ttl_ms)
                        .arg(self.max_bytes)
                        .arg(waiter_ms)
                        .arg(max_waiting)
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| redis_error(Some(key), "acquiring the lease in turn", e))?;
                    let fence = match reply.first().map(Vec::as_slice) {
                        Some(b"full") => return Ok(QueuedAttempt::Full),
                        Some(b"waiting") => return Ok(QueuedAttempt::Waiting),
                        Some(fence) => text(fence).parse::<u64>().ok().filter(|f| *f > 0),
                        None => None,
                    };
                    let Some(fence) = fence else {
                        return Err(StoreError::with_kind(
                            StoreErrorKind::Io,
                            key,
                            "Redis: unexpected reply from the queued acquire script",
                        ));
                    };
                    *loaded.lock().unwrap_or_else(PoisonError::into_inner) = reply;
                    Ok(QueuedAttempt::Acquired(fence))
                }
            },
            |token| {
                let mut conn = self.conn();
                let (queue, waiters) = (&keys[4], &keys[5]);
                async move {
                    let _: u64 = self
                        .scripts
                        .leave
                        .key(queue)
                        .key(waiters)
                        .arg(token)
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| redis_error(Some(key), "leaving the queue", e))?;
                    Ok(())
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
        let [.., signal_key] = self.queue_keys(key);
        let mut conn = self.conn();
        let sent: u64 = self
            .scripts
            .signal
            .key(self.lease_key(key))
            .key(signal_key)
            .arg(signal.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "signalling the session's holder", e))?;
        Ok(sent > 0)
    }

    pub(super) async fn inner_signalled(
        &self,
        lease: &Lease,
    ) -> Result<Option<SessionSignal>, StoreError> {
        let key = lease.key();
        let [.., signal_key] = self.queue_keys(key);
        let mut conn = self.conn();
        let value: Option<String> = redis::cmd("GET")
            .arg(signal_key)
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "reading the session's signal", e))?;
        Ok(value.and_then(|v| {
            let (kind, token) = v.split_once(' ')?;
            (token == lease.token())
                .then(|| SessionSignal::from_name(kind))
                .flatten()
        }))
    }

    /// The session in the winning attempt's reply (after its fence); a session that
    /// fails to decode releases the lease before the error is returned.
    async fn loaded_under(
        &self,
        key: &SessionKey,
        lease: Lease,
        loaded: Mutex<Vec<Vec<u8>>>,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        let reply = loaded.into_inner().unwrap_or_else(PoisonError::into_inner);
        match self.decode_load(key, reply.get(1..).unwrap_or_default()) {
            Ok(stored) => Ok((lease, Some(stored))),
            Err(e) => {
                release_logged(self, &lease).await;
                Err(e)
            }
        }
    }
}
