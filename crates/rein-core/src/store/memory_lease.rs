//! The session leases of an [`InMemorySessionStore`]: one row per session behind the
//! store's lease lock, with the queue of waiters and the holder's signal.

use std::time::Duration;

use tokio::time::Instant;

use super::key::SessionKey;
use super::lease::{Lease, SessionLeases, acquire_polling};
use super::queue::{QueuedAttempt, SessionSignal, acquire_queued_polling};
use super::session::{InMemorySessionStore, LeaseRow, StoreError, StoreErrorKind, StoredSession};
use crate::message::Msg;
use crate::util::new_id;

impl LeaseRow {
    /// Takes a free (or expired) lease for `token`: its new fence, or `None` when a
    /// live holder keeps it.
    fn take(&mut self, token: String, now: Instant, ttl: Duration) -> Option<u64> {
        match &self.holder {
            Some((_, expires)) if *expires > now => None,
            _ => {
                self.fence += 1;
                self.holder = Some((token, now + ttl));
                Some(self.fence)
            }
        }
    }
}

fn lease_lost(key: &SessionKey) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::LeaseLost,
        key,
        "the session lease is no longer held (it expired or another holder took the session)",
    )
}

impl SessionLeases for InMemorySessionStore {
    async fn acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        let token = |_: &SessionKey| Ok(new_id("lease"));
        acquire_polling(key, ttl, wait, token, |token, _| {
            let now = Instant::now();
            let mut leases = self.lock_leases();
            let row = leases.entry(key.clone()).or_default();
            row.waiters.retain(|(_, expires)| *expires > now);
            // A caller that does not queue never passes one that does.
            let fence = row
                .waiters
                .is_empty()
                .then(|| row.take(token, now, ttl))
                .flatten();
            std::future::ready(Ok(fence))
        })
        .await
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut leases = self.lock_leases();
        match leases.get_mut(lease.key()) {
            Some(row) if row.holds(lease, now) => {
                row.holder = Some((lease.token().to_owned(), now + lease.ttl()));
                Ok(())
            }
            _ => Err(lease_lost(lease.key())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut leases = self.lock_leases();
        match leases.get_mut(lease.key()) {
            Some(row) if matches!(&row.holder, Some((token, _)) if token == lease.token()) => {
                let held = row.holds(lease, now);
                row.holder = None;
                Ok(held)
            }
            _ => Ok(false),
        }
    }

    async fn acquire_queued_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> Result<(Lease, Option<StoredSession>), StoreError> {
        let token = new_id("lease");
        let lease = acquire_queued_polling(
            key,
            ttl,
            wait,
            token,
            max_waiting,
            |token, _, waiter_ms| {
                let now = Instant::now();
                let mut leases = self.lock_leases();
                let row = leases.entry(key.clone()).or_default();
                row.waiters.retain(|(_, expires)| *expires > now);
                let expires = now + Duration::from_millis(waiter_ms);
                let attempt = match row.waiters.iter().position(|(t, _)| *t == token) {
                    Some(i) => {
                        row.waiters[i].1 = expires;
                        if i == 0 {
                            match row.take(token, now, ttl) {
                                Some(fence) => {
                                    row.waiters.pop_front();
                                    QueuedAttempt::Acquired(fence)
                                }
                                None => QueuedAttempt::Waiting,
                            }
                        } else {
                            QueuedAttempt::Waiting
                        }
                    }
                    None if row.waiters.is_empty() => match row.take(token.clone(), now, ttl) {
                        Some(fence) => QueuedAttempt::Acquired(fence),
                        None => {
                            row.waiters.push_back((token, expires));
                            QueuedAttempt::Waiting
                        }
                    },
                    None if row.waiters.len() >= max_waiting => QueuedAttempt::Full,
                    None => {
                        row.waiters.push_back((token, expires));
                        QueuedAttempt::Waiting
                    }
                };
                std::future::ready(Ok(attempt))
            },
            |token| {
                let mut leases = self.lock_leases();
                if let Some(row) = leases.get_mut(key) {
                    row.waiters.retain(|(t, _)| *t != token);
                }
                std::future::ready(Ok(()))
            },
        )
        .await?;
        let stored = self.lock().get(key).cloned().unwrap_or_default();
        Ok((lease, Some(stored)))
    }

    async fn signal(&self, key: &SessionKey, signal: SessionSignal) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut leases = self.lock_leases();
        let Some(row) = leases.get_mut(key) else {
            return Ok(false);
        };
        let Some((holder, expires)) = &row.holder else {
            return Ok(false);
        };
        if *expires <= now {
            return Ok(false);
        }
        let signal = match &row.signal {
            Some((token, earlier)) if token == holder => earlier.max(signal),
            _ => signal,
        };
        row.signal = Some((holder.clone(), signal));
        Ok(true)
    }

    async fn signalled(&self, lease: &Lease) -> Result<Option<SessionSignal>, StoreError> {
        let leases = self.lock_leases();
        Ok(leases
            .get(lease.key())
            .and_then(|row| row.signal.as_ref())
            .filter(|(token, _)| token == lease.token())
            .map(|(_, s)| *s))
    }

    fn orders_and_signals(&self) -> bool {
        true
    }

    async fn save_fenced(
        &self,
        lease: &Lease,
        messages: &[Msg],
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        self.save_fenced_from(lease, messages, 0, expected_version)
            .await
    }

    async fn save_fenced_from(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let key = lease.key();
        // Lock order: leases, then sessions.
        let mut leases = self.lock_leases();
        let row = leases.entry(key.clone()).or_default();
        if !row.holds(lease, Instant::now()) || row.saved_fence > lease.fence() {
            return Err(lease_lost(key));
        }
        let version = self.write(key, messages, unchanged, expected_version)?;
        row.saved_fence = lease.fence();
        Ok(version)
    }
}
