//! Session leases: cross-process ordering of the calls on one session, and how an agent
//! holds one for the duration of a call ([`AgentBuilder::leased_session_store`](crate::AgentBuilder::leased_session_store)).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::key::SessionKey;
use super::queue::SessionSignal;
use super::session::{StoreError, StoreErrorKind, StoredSession};
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

    /// The random token that identifies this holder.
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
/// The use around one call on a session (what an agent built with
/// [`AgentBuilder::leased_session_store`](crate::AgentBuilder::leased_session_store) does): acquire (wait up to a bound, then fail
/// with [`StoreErrorKind::Busy`] before anything runs), load, renew every
/// [`Lease::renew_interval`] while the call runs, save with
/// [`SessionLeases::save_fenced`], release. A holder that dies or hangs loses the lease
/// after the TTL; its later saves fail with [`StoreErrorKind::LeaseLost`].
///
/// Implemented by `RedisSessionStore`, `PostgresSessionStore` and
/// [`InMemorySessionStore`](super::InMemorySessionStore). Implement the methods with
/// `async fn`; the agent erases the futures at one private boundary. Waiting polls the
/// store with a jittered backoff (5 ms doubling to 100 ms): waiters are served roughly,
/// not strictly, in arrival order.
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

    /// [`SessionStore::save`](crate::SessionStore::save) under a lease: in one atomic step, checks that `lease` is
    /// still held and that no later lease saved the session, compares the version,
    /// writes and records the lease's fence.
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

    /// [`save_fenced`](Self::save_fenced), told how much of the stored history the save
    /// leaves as it is: the contract of
    /// [`SessionStore::save_from`](crate::SessionStore::save_from) (`messages[..unchanged]`
    /// are exactly what the store holds at `expected_version`; everything from index
    /// `unchanged` on is replaced by `messages[unchanged..]`), under the lease and fence
    /// checks of `save_fenced`, all in one atomic step.
    ///
    /// The default calls [`save_fenced`](Self::save_fenced) with all of `messages`.
    ///
    /// # Errors
    /// As [`save_fenced`](Self::save_fenced); [`StoreErrorKind::Conflict`] also when the
    /// store holds fewer than `unchanged` messages.
    fn save_fenced_from(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = unchanged;
        self.save_fenced(lease, messages, expected_version)
    }

    /// [`acquire`](Self::acquire), and the session as stored once the lease is held, in
    /// one round trip where the store can: how a leased call starts (it loads the
    /// session fresh under the lease, as another holder may have saved it since).
    ///
    /// Returns the lease and `Some(session)`, the messages and version a
    /// [`SessionStore::load`](crate::SessionStore::load) issued right after the
    /// acquisition would return (every save of an earlier holder is in it), or `None`
    /// when the store does not load with the acquisition: the caller then loads with
    /// `SessionStore::load` itself. Waiting, TTL and fence are those of `acquire`; an
    /// attempt that does not get the lease reads nothing.
    ///
    /// The default is `acquire` and `None`, so a store that does not override it works
    /// unchanged (with one more round trip). The Redis store acquires and loads in one
    /// Lua script, the PostgreSQL store in two statements pipelined on one connection
    /// (the load runs after the acquisition committed).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); and, when the store loads, as
    /// `SessionStore::load` (`Corrupt`, `TooLarge`, …): a lease acquired for a load
    /// that then fails is released before the error is returned, so no lease is held
    /// after an error (except when the server became unreachable in between: that
    /// lease expires after its TTL).
    fn acquire_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<(Lease, Option<StoredSession>), StoreError>> + Send {
        async move { Ok((self.acquire(key, ttl, wait).await?, None)) }
    }

    /// [`save_fenced_from`](Self::save_fenced_from), then [`release`](Self::release), in
    /// one round trip where the store can: how a leased call ends.
    ///
    /// The save is exactly `save_fenced_from` (the lease and fence checks, the version
    /// check and the write, in one atomic step); after it the lease is released whatever
    /// the save's outcome, and only if this holder still has it (compare-and-delete;
    /// the fence is never lowered). A store that does both in one step releases only
    /// once the save is written, so the next holder's load sees it. Returns the save's
    /// outcome: a release that fails is not an error of the save (the lease then
    /// expires after its TTL) and is logged as a `tracing` warning. When the server
    /// cannot be reached, neither may have happened.
    ///
    /// The default calls `save_fenced_from`, then `release` (two round trips). The Redis
    /// and PostgreSQL stores release in the save's own script or statement when it
    /// writes, and separately (as the default) when it does not.
    ///
    /// # Errors
    /// As [`save_fenced_from`](Self::save_fenced_from).
    fn save_fenced_and_release(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        async move {
            let saved = self
                .save_fenced_from(lease, messages, unchanged, expected_version)
                .await;
            release_logged(self, lease).await;
            saved
        }
    }

    /// [`acquire_and_load`](Self::acquire_and_load) in the order callers reached the
    /// store: the caller joins the session's queue of waiters (see
    /// [`crate::store::queue`]) and gets the lease only when it is free and every caller
    /// that joined before it has been served or left. Across processes, the queue is
    /// first come, first served by the store's order of arrival.
    ///
    /// At most `max_waiting` callers wait in the queue; a caller that would be one more
    /// fails at once. A caller that gives up after `wait` leaves the queue; one that is
    /// dropped or dies stays in it for [`WAITER_TTL`](crate::store::WAITER_TTL).
    ///
    /// The default is `acquire_and_load` (no queue: waiters are served roughly in
    /// arrival order, and `max_waiting` is not enforced); a store that overrides it also
    /// overrides [`orders_and_signals`](Self::orders_and_signals). The Redis,
    /// PostgreSQL and in-memory stores queue.
    ///
    /// # Errors
    /// [`StoreErrorKind::QueueFull`] when `max_waiting` callers already wait (nothing
    /// joined, nothing read); otherwise as `acquire_and_load`.
    fn acquire_queued_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> impl Future<Output = Result<(Lease, Option<StoredSession>), StoreError>> + Send {
        let _ = max_waiting;
        self.acquire_and_load(key, ttl, wait)
    }

    /// Signals the call that holds `key`'s lease now (another process's, possibly):
    /// the holder reads it with [`signalled`](Self::signalled) at its safe points. The
    /// signal names that holder's lease, so the next holder never sees it; a session
    /// signalled twice keeps the stronger signal ([`SessionSignal::max`]). Returns
    /// whether a holder was signalled (`false`: no one holds the lease).
    ///
    /// The default signals no one (`Ok(false)`).
    ///
    /// # Errors
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached.
    fn signal(
        &self,
        key: &SessionKey,
        signal: SessionSignal,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (key, signal);
        std::future::ready(Ok(false))
    }

    /// The signal sent to `lease` since it was acquired, if any (the default: never).
    ///
    /// # Errors
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached.
    fn signalled(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<SessionSignal>, StoreError>> + Send {
        let _ = lease;
        std::future::ready(Ok(None))
    }

    /// Whether this store queues waiters in arrival order and carries signals
    /// ([`acquire_queued_and_load`](Self::acquire_queued_and_load),
    /// [`signal`](Self::signal)); an agent whose double-text policy needs them fails to
    /// build on a store that does not (default `false`).
    fn orders_and_signals(&self) -> bool {
        false
    }
}

/// For store implementations: [`SessionLeases::release`] with a failure logged as a
/// `tracing` warning (the lease then expires after its TTL), as
/// [`SessionLeases::save_fenced_and_release`] releases.
pub async fn release_logged<S: SessionLeases + ?Sized>(store: &S, lease: &Lease) {
    if let Err(e) = store.release(lease).await {
        tracing::warn!(
            session = %lease.key(),
            error = %e,
            "releasing the session lease failed; it expires after its TTL"
        );
    }
}

impl<S: SessionLeases> SessionLeases for Arc<S> {
    fn acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send {
        SessionLeases::acquire(&**self, key, ttl, wait)
    }

    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send {
        SessionLeases::renew(&**self, lease)
    }

    fn release(&self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send {
        SessionLeases::release(&**self, lease)
    }

    fn save_fenced(
        &self,
        lease: &Lease,
        messages: &[Msg],
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        SessionLeases::save_fenced(&**self, lease, messages, expected_version)
    }

    fn save_fenced_from(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        SessionLeases::save_fenced_from(&**self, lease, messages, unchanged, expected_version)
    }

    fn acquire_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<(Lease, Option<StoredSession>), StoreError>> + Send {
        SessionLeases::acquire_and_load(&**self, key, ttl, wait)
    }

    fn save_fenced_and_release(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        SessionLeases::save_fenced_and_release(
            &**self,
            lease,
            messages,
            unchanged,
            expected_version,
        )
    }

    fn acquire_queued_and_load(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> impl Future<Output = Result<(Lease, Option<StoredSession>), StoreError>> + Send {
        SessionLeases::acquire_queued_and_load(&**self, key, ttl, wait, max_waiting)
    }

    fn signal(
        &self,
        key: &SessionKey,
        signal: SessionSignal,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        SessionLeases::signal(&**self, key, signal)
    }

    fn signalled(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<SessionSignal>, StoreError>> + Send {
        SessionLeases::signalled(&**self, lease)
    }

    fn orders_and_signals(&self) -> bool {
        SessionLeases::orders_and_signals(&**self)
    }
}

/// The object-safe twin of [`SessionLeases`]: the one place lease futures are erased.
pub(crate) trait DynSessionLeases: Send + Sync + 'static {
    fn acquire<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>>;

    fn renew<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<bool, StoreError>>;

    fn save_fenced_from<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    fn acquire_and_load<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<(Lease, Option<StoredSession>), StoreError>>;

    fn save_fenced_and_release<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    fn acquire_queued_and_load<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> BoxFuture<'a, Result<(Lease, Option<StoredSession>), StoreError>>;

    fn signal<'a>(
        &'a self,
        key: &'a SessionKey,
        signal: SessionSignal,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    fn signalled<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Option<SessionSignal>, StoreError>>;

    fn orders_and_signals(&self) -> bool;
}

impl<S: SessionLeases> DynSessionLeases for S {
    fn acquire<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(SessionLeases::acquire(self, key, ttl, wait))
    }

    fn renew<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(SessionLeases::renew(self, lease))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(SessionLeases::release(self, lease))
    }

    fn save_fenced_from<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(SessionLeases::save_fenced_from(
            self,
            lease,
            messages,
            unchanged.min(messages.len()),
            expected_version,
        ))
    }

    /// The key contract is checked here, as for a plain load, before the store sees
    /// the call.
    fn acquire_and_load<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<(Lease, Option<StoredSession>), StoreError>> {
        Box::pin(async move {
            super::storable::check_key(key)?;
            SessionLeases::acquire_and_load(self, key, ttl, wait).await
        })
    }

    fn save_fenced_and_release<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        unchanged: usize,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(SessionLeases::save_fenced_and_release(
            self,
            lease,
            messages,
            unchanged.min(messages.len()),
            expected_version,
        ))
    }

    fn acquire_queued_and_load<'a>(
        &'a self,
        key: &'a SessionKey,
        ttl: Duration,
        wait: Duration,
        max_waiting: usize,
    ) -> BoxFuture<'a, Result<(Lease, Option<StoredSession>), StoreError>> {
        Box::pin(async move {
            super::storable::check_key(key)?;
            SessionLeases::acquire_queued_and_load(self, key, ttl, wait, max_waiting).await
        })
    }

    fn signal<'a>(
        &'a self,
        key: &'a SessionKey,
        signal: SessionSignal,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(SessionLeases::signal(self, key, signal))
    }

    fn signalled<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Option<SessionSignal>, StoreError>> {
        Box::pin(SessionLeases::signalled(self, lease))
    }

    fn orders_and_signals(&self) -> bool {
        SessionLeases::orders_and_signals(self)
    }
}

/// How an agent leases its sessions ([`AgentBuilder::leased_session_store`](crate::AgentBuilder::leased_session_store)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a lease lives without renewal (default 30 s). The agent renews every
    /// third of it while a call runs; a replica that dies holds the session at most
    /// this long. Between 1 ms and 24 h (checked at `build()`).
    pub ttl: Duration,
    /// How long a call waits for a session another holder (another replica) is running
    /// a call on before it fails with [`StoreErrorKind::Busy`] (default 10 s; zero: one
    /// attempt). It bounds the whole refusal: a store that needs a connection from a
    /// pool to try (PostgreSQL) waits for one only as long as is left of it, and an
    /// exhausted pool is a `Busy` refusal too.
    pub wait: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
        }
    }
}

/// Longest TTL a lease may have (24 h).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// For store implementations: the TTL in whole milliseconds (what engines take).
///
/// # Errors
/// [`StoreErrorKind::Config`] naming the session when the TTL is under 1 ms or over
/// [`MAX_TTL`].
pub fn ttl_millis(key: &SessionKey, ttl: Duration) -> Result<u64, StoreError> {
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

/// Calls `attempt` (with a fresh token from `token` and the TTL in milliseconds) until
/// it returns a fence or `wait` has passed, sleeping a jittered, growing backoff in
/// between: how a store whose engine cannot wait for a lease implements
/// [`SessionLeases::acquire`].
///
/// # Errors
/// [`StoreErrorKind::Busy`] naming the session once `wait` has passed; any error
/// `attempt` returns, at once.
pub async fn acquire_polling<T, F, Fut>(
    key: &SessionKey,
    ttl: Duration,
    wait: Duration,
    mut token: T,
    mut attempt: F,
) -> Result<Lease, StoreError>
where
    T: FnMut(&SessionKey) -> Result<String, StoreError>,
    F: FnMut(String, u64) -> Fut,
    Fut: Future<Output = Result<Option<u64>, StoreError>>,
{
    let ttl_ms = ttl_millis(key, ttl)?;
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u32;
    loop {
        let token = token(key)?;
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
        // Jitter: 50–100 % of the backoff, from the token's (or the clock's) bits.
        let seed = token
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31) ^ u32::from(b))
            ^ (now - started).subsec_nanos();
        let jitter = seed % 50 + 50;
        let sleep = (backoff * jitter / 100).min(deadline - now);
        tokio::time::sleep(sleep).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}
