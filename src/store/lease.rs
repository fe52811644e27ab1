//! Session leases: cross-process ordering of the calls on one session.

use std::time::Duration;

use std::future::Future;

// `StoreErrorKind` is used by the engine helpers and the doc links.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres")),
    allow(unused_imports)
)]
use crate::agent::StoreErrorKind;
use crate::agent::{SessionKey, StoreError};
use crate::message::Msg;

/// A lease on one session, held by whoever acquired it until it expires (its TTL after
/// the last acquisition or renewal, measured by the store's server) or is released.
///
/// The **fence** is a number the store increases on every acquisition of the session's
/// lease and never reuses (a release or an expiry does not reset it). A fenced save
/// records it with the session; a save carrying a lower fence than the one recorded, or
/// from a lease that is no longer held, fails with [`StoreErrorKind::LeaseLost`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    key: SessionKey,
    token: String,
    fence: u64,
    ttl: Duration,
}

impl Lease {
    /// A lease as a store hands it out (stores call this; a hand-made lease is simply
    /// not held, and every use of it fails with [`StoreErrorKind::LeaseLost`]).
    pub fn new(key: SessionKey, token: String, fence: u64, ttl: Duration) -> Self {
        Self {
            key,
            token,
            fence,
            ttl,
        }
    }

    /// The session.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The random token that identifies this holder (128 bits, hex).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token: strictly greater than the fence of every earlier lease on the
    /// session.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The time to live given at acquisition; every renewal extends the lease by it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often a holder should renew: a third of the TTL, so that two renewals can
    /// fail (or be late) before the lease expires.
    pub fn renew_interval(&self) -> Duration {
        self.ttl / 3
    }
}

/// Session leases: at most one holder per session at a time, across processes sharing
/// the store, with fencing at save.
///
/// The intended use around one call on a session (what an agent does once integrated):
/// acquire (wait up to a bound, then fail with [`StoreErrorKind::Busy`] before anything
/// runs), load, renew every [`Lease::renew_interval`] while the call runs, save with
/// [`SessionLeases::save_fenced`], release. A holder that dies or hangs loses the lease
/// after the TTL; its later saves fail with [`StoreErrorKind::LeaseLost`].
///
/// Waiting polls the store with a jittered backoff (5 ms doubling to 100 ms): waiters
/// are served roughly, not strictly, in arrival order.
pub trait SessionLeases: Send + Sync + 'static {
    /// Acquires the lease on `key` for `ttl`, waiting up to `wait` (zero: one attempt)
    /// while another holder has it.
    ///
    /// # Errors
    /// [`StoreErrorKind::Busy`] when the lease is still held by another holder after
    /// `wait`; [`StoreErrorKind::Config`] for a TTL under 1 ms (or over a day);
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached.
    fn acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Extends a held lease by its TTL from now.
    ///
    /// # Errors
    /// [`StoreErrorKind::LeaseLost`] when the lease expired or another holder has the
    /// session; [`StoreErrorKind::Unavailable`] when the server cannot be reached.
    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Releases a lease if it is still held by this holder (compare-and-delete), so the
    /// next waiter gets it without waiting for the TTL. Returns whether it was held.
    /// Releasing never lowers the fence.
    ///
    /// # Errors
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached (the lease then
    /// expires after its TTL).
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`SessionStore::save`](crate::SessionStore::save) under a lease: in one atomic
    /// step, checks that `lease` is still held and that no later lease saved the
    /// session, compares the version, writes and records the lease's fence.
    ///
    /// # Errors
    /// [`StoreErrorKind::LeaseLost`] (nothing written) when the lease is no longer held
    /// or a later lease saved; then as `save`: `Conflict`, `Corrupt`, `Unavailable`.
    fn save_fenced(
        &self,
        lease: &Lease,
        messages: &[Msg],
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Longest TTL a lease may have.
#[cfg(any(feature = "redis", feature = "postgres"))]
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The TTL in whole milliseconds, or a `Config` error.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn ttl_millis(key: &SessionKey, ttl: Duration) -> Result<u64, StoreError> {
    if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
        return Err(StoreError::with_kind(
            StoreErrorKind::Config,
            key,
            format!("a lease TTL must be between 1 ms and 24 h, not {ttl:?}"),
        ));
    }
    // At most 86,400,000: fits.
    Ok(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh 128-bit random token, as 32 hex digits.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn new_token(key: &SessionKey) -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::new(key, format!("no randomness for a lease token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Calls `attempt` until it returns a fence or `wait` has passed, sleeping a jittered,
/// growing backoff in between; then a [`StoreErrorKind::Busy`] naming the session.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) async fn acquire_polling<F, Fut>(
    key: &SessionKey,
    ttl: Duration,
    wait: Duration,
    mut attempt: F,
) -> Result<Lease, StoreError>
where
    F: FnMut(String, u64) -> Fut,
    Fut: std::future::Future<Output = Result<Option<u64>, StoreError>>,
{
    let ttl_ms = ttl_millis(key, ttl)?;
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u32;
    loop {
        let token = new_token(key)?;
        attempts += 1;
        if let Some(fence) = attempt(token.clone(), ttl_ms).await? {
            return Ok(Lease::new(key.clone(), token, fence, ttl));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(StoreError::with_kind(
                StoreErrorKind::Busy,
                key,
                format!(
                    "the session is leased by another holder (another call on it is running); \
                     waited {:?} over {attempts} attempts",
                    now - started
                ),
            ));
        }
        // Jitter: 50–100 % of the backoff, from the token's randomness.
        let jitter = u32::from(token.bytes().next().unwrap_or(0) % 50) + 50;
        let sleep = (backoff * jitter / 100).min(deadline - now);
        tokio::time::sleep(sleep).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}
