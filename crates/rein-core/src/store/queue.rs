//! Double texting at the store: the queue of callers waiting for a session's lease, in
//! the order they reached the store (not the order of each process), and the signals a
//! newer call sends the call that holds the lease.
//!
//! A waiter joins the queue on its first attempt and is live while it keeps trying (each
//! attempt refreshes its entry for [`WAITER_TTL`]); only the live head of the queue may
//! take a free lease, and a plain [`SessionLeases::acquire`](super::SessionLeases::acquire) (a caller that does not
//! queue) takes it only when no one waits. A waiter that gives up leaves the queue at
//! once; one that dies leaves it after [`WAITER_TTL`]. A signal names the lease it was
//! sent to (its token): a newer holder never sees an older holder's signal.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::key::SessionKey;
use super::lease::{Lease, ttl_millis};
use super::session::{StoreError, StoreErrorKind};

/// What a newer call on a busy session asks of the call that holds it
/// ([`SessionLeases::signal`](super::SessionLeases::signal)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionSignal {
    /// Stop at the next safe point, keeping what was done.
    Interrupt,
    /// Stop at the next safe point and discard the call's unsettled steps. Stronger than
    /// `Interrupt`: a session signalled both is rolled back.
    Rollback,
}

impl SessionSignal {
    /// The signal's stored name: `interrupt` or `rollback`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Rollback => "rollback",
        }
    }

    /// The signal named `name` (as [`as_str`](Self::as_str) writes it), or `None`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "interrupt" => Some(Self::Interrupt),
            "rollback" => Some(Self::Rollback),
            _ => None,
        }
    }

    /// The stronger of two signals (`Rollback` over `Interrupt`).
    #[must_use]
    pub fn max(self, other: Self) -> Self {
        if self == Self::Rollback || other == Self::Rollback {
            Self::Rollback
        } else {
            Self::Interrupt
        }
    }
}

/// How long a queued waiter stays in a session's queue after its last attempt. Waiters
/// try at least every 100 ms (and a store may refresh an entry only once half of this
/// has passed), so only a waiter that died (or was dropped) stays this long; the
/// callers behind it wait for it at most this long.
pub const WAITER_TTL: Duration = Duration::from_secs(3);

/// One attempt of a queued acquisition, as a store reports it to
/// [`acquire_queued_polling`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuedAttempt {
    /// The lease was acquired with this fence (the waiter left the queue).
    Acquired(u64),
    /// The waiter is in the queue (joined or refreshed) and not yet served.
    Waiting,
    /// The waiter is not in the queue and `max_waiting` callers already wait: it did
    /// not join.
    Full,
}

/// Calls `attempt` (with one token for the whole acquisition, the TTL and the waiter
/// TTL in milliseconds) until it acquires, the queue is full, or `wait` has passed
/// (then `leave` removes the waiter from the queue): how a store implements
/// [`SessionLeases::acquire_queued_and_load`](super::SessionLeases::acquire_queued_and_load)
/// on an engine that cannot wait. Retries every 5 ms doubling to 100 ms.
///
/// # Errors
/// [`StoreErrorKind::QueueFull`] when the queue is full at the first attempt;
/// [`StoreErrorKind::Busy`] once `wait` has passed; any error `attempt` returns, at
/// once (the waiter then leaves the queue after [`WAITER_TTL`]).
pub async fn acquire_queued_polling<F, Fut, L, LFut>(
    key: &SessionKey,
    ttl: Duration,
    wait: Duration,
    token: String,
    max_waiting: usize,
    mut attempt: F,
    leave: L,
) -> Result<Lease, StoreError>
where
    F: FnMut(String, u64, u64) -> Fut,
    Fut: Future<Output = Result<QueuedAttempt, StoreError>>,
    L: FnOnce(String) -> LFut,
    LFut: Future<Output = Result<(), StoreError>>,
{
    let ttl_ms = ttl_millis(key, ttl)?;
    let waiter_ms = u64::try_from(WAITER_TTL.as_millis()).unwrap_or(u64::MAX);
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match attempt(token.clone(), ttl_ms, waiter_ms).await? {
            QueuedAttempt::Acquired(fence) => {
                return Ok(Lease::new(key.clone(), token, fence, ttl));
            }
            QueuedAttempt::Full => {
                return Err(StoreError::with_kind(
                    StoreErrorKind::QueueFull,
                    key,
                    format!(
                        "{max_waiting} calls already wait for this session (the queue is full); \
                         nothing ran"
                    ),
                ));
            }
            QueuedAttempt::Waiting => {}
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            if let Err(e) = leave(token).await {
                tracing::warn!(session = %key, error = %e, "leaving the session queue failed; the entry expires");
            }
            return Err(StoreError::with_kind(
                StoreErrorKind::Busy,
                key,
                format!(
                    "the session is leased by another holder and the queue did not reach this \
                     call; waited {:?} over {attempts} attempts",
                    now - started
                ),
            ));
        }
        tokio::time::sleep(backoff.min(deadline - now)).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}
