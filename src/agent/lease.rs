//! Session leases: cross-process ordering of the calls on one session, and how an agent
//! holds one for the duration of a call ([`AgentBuilder::leased_session_store`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::{BoxFuture, Either, select};

use super::builder::AgentBuilder;
use super::memory::SessionKey;
use super::store::{SessionStore, StoreError, StoreErrorKind};
use crate::error::Error;
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
/// [`AgentBuilder::leased_session_store`] does): acquire (wait up to a bound, then fail
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

    /// [`SessionStore::save`] under a lease: in one atomic step, checks that `lease` is
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

    fn save_fenced<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
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

    fn save_fenced<'a>(
        &'a self,
        lease: &'a Lease,
        messages: &'a [Msg],
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(SessionLeases::save_fenced(
            self,
            lease,
            messages,
            expected_version,
        ))
    }
}

/// How an agent leases its sessions ([`AgentBuilder::leased_session_store`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a lease lives without renewal (default 30 s). The agent renews every
    /// third of it while a call runs; a replica that dies holds the session at most
    /// this long. Between 1 ms and 24 h (checked at `build()`).
    pub ttl: Duration,
    /// How long a call waits for a session another holder (another replica) is running
    /// a call on before it fails with [`StoreErrorKind::Busy`] (default 10 s; zero: one
    /// attempt).
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

/// Longest TTL a lease may have.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The TTL in whole milliseconds, or a [`StoreErrorKind::Config`] naming the session.
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

/// Calls `attempt` (with a fresh token from `token` and the TTL in milliseconds) until
/// it returns a fence or `wait` has passed, sleeping a jittered, growing backoff in
/// between; then a [`StoreErrorKind::Busy`] naming the session.
pub(crate) async fn acquire_polling<T, F, Fut>(
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

/// An agent's lease settings and the store that hands the leases out.
#[derive(Clone)]
pub(crate) struct Leasing {
    pub(crate) leases: Arc<dyn DynSessionLeases>,
    pub(crate) config: LeaseConfig,
}

impl Leasing {
    /// The TTL is in range, or a build error naming `session_leases.ttl`.
    pub(crate) fn check(&self) -> Result<(), crate::error::BuildError> {
        let ttl = self.config.ttl;
        if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
            return Err(crate::error::BuildError::invalid_config(
                "session_leases.ttl",
                format!("must be between 1 ms and 24 h, not {ttl:?}"),
            ));
        }
        Ok(())
    }

    /// Acquires the session's lease for one call.
    pub(crate) async fn acquire(&self, key: &SessionKey) -> Result<HeldLease, StoreError> {
        let lease = self
            .leases
            .acquire(key, self.config.ttl, self.config.wait)
            .await?;
        Ok(HeldLease {
            leases: Arc::clone(&self.leases),
            lease,
            lost: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// The lease one call holds.
#[derive(Clone)]
pub(crate) struct HeldLease {
    leases: Arc<dyn DynSessionLeases>,
    lease: Lease,
    /// Set when a renewal or a fenced save found the lease gone.
    lost: Arc<AtomicBool>,
}

impl HeldLease {
    pub(crate) fn key(&self) -> &SessionKey {
        self.lease.key()
    }

    /// Whether the lease is known to be lost (nothing may be saved under it).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// A fenced save; a [`StoreErrorKind::LeaseLost`] marks the lease lost.
    pub(crate) async fn save(&self, messages: &[Msg], version: u64) -> Result<u64, StoreError> {
        let saved = self
            .leases
            .save_fenced(&self.lease, messages, version)
            .await;
        if let Err(e) = &saved
            && e.kind() == StoreErrorKind::LeaseLost
        {
            self.mark_lost();
        }
        saved
    }

    /// Releases the lease (failures are logged: the lease then expires after its TTL).
    pub(crate) async fn release(&self) {
        match self.leases.release(&self.lease).await {
            Ok(_) => {}
            Err(e) => tracing::warn!(
                session = %self.key(),
                error = %e,
                "releasing the session lease failed; it expires after its TTL"
            ),
        }
    }

    /// From a dropped call: saves `snapshot` (the call's repaired conversation and the
    /// version it replaces) under the lease, then releases it, in a task spawned on the
    /// current tokio runtime. Returns `false` (nothing spawned) without a runtime.
    pub(crate) fn spawn_finish(self, snapshot: Option<(Arc<Vec<Msg>>, u64)>) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        handle.spawn(async move {
            if let Some((messages, version)) = snapshot
                && let Err(e) = self.save(&messages, version).await
            {
                tracing::error!(
                    session = %self.key(),
                    error = %e,
                    "saving the session of a cancelled call failed; the stored version stays"
                );
            }
            self.release().await;
        });
        true
    }

    /// Renews the lease every [`Lease::renew_interval`]; completes only when the lease
    /// is lost: a renewal found it gone, or renewals failed for so long that it may
    /// have expired.
    async fn renew_until_lost(&self) -> StoreError {
        let interval = self.lease.renew_interval().max(Duration::from_millis(1));
        let ttl = self.lease.ttl();
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(interval).await;
            match self.leases.renew(&self.lease).await {
                Ok(()) => last_ok = tokio::time::Instant::now(),
                Err(e) if e.kind() == StoreErrorKind::LeaseLost => {
                    self.mark_lost();
                    return e;
                }
                Err(e) => {
                    // The lease may still be held: try again unless it could expire
                    // before the next renewal.
                    if last_ok.elapsed() + interval >= ttl {
                        self.mark_lost();
                        return StoreError::with_kind(
                            StoreErrorKind::LeaseLost,
                            self.key(),
                            format!(
                                "the session lease could not be renewed for {:?} and may have \
                                 expired: {e}",
                                last_ok.elapsed()
                            ),
                        )
                        .with_source(e);
                    }
                    tracing::warn!(session = %self.key(), error = %e, "renewing the session lease failed; retrying");
                }
            }
        }
    }
}

/// Runs a call's work while renewing its lease (when it holds one). A lost lease
/// cancels the work (its future is dropped by the caller) and fails the call with
/// [`StoreErrorKind::LeaseLost`].
///
/// The renewals run as a task of their own on the current tokio runtime, so a tool that
/// blocks the call's thread (a synchronous client inside an `async fn`) does not
/// starve them on a multi-threaded runtime. On a current-thread runtime (or none) they
/// run inside the call, and a blocking tool can still let the lease expire: another
/// replica then takes the session over, finds the running call claimed in the effect
/// journal, and does not run it again (its outcome is unknown to it), while this call
/// fails with `LeaseLost` at its next store write. The journal, not the lease, is what
/// keeps an effect from running twice. The task ends with the call: a call future that is
/// leaked without being dropped keeps its lease renewed (drop a call to give it up).
///
/// The work is borrowed pinned, not moved in: the caller's state machine holds it once.
pub(crate) async fn kept<T, W>(lease: Option<HeldLease>, work: Pin<&mut W>) -> Result<T, Error>
where
    W: Future<Output = Result<T, Error>>,
{
    let Some(lease) = lease else {
        return work.await;
    };
    let handle = tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread);
    let Some(handle) = handle else {
        // Boxed: only leased calls pay for the renewal's state, not every call's future.
        let renewing = Box::pin(lease.renew_until_lost());
        return match select(work, renewing).await {
            Either::Left((result, _)) => result,
            Either::Right((lost, _)) => Err(Error::store(lost)),
        };
    };
    let (tx, rx) = futures::channel::oneshot::channel();
    let renewer = {
        let lease = lease.clone();
        handle.spawn(async move {
            let lost = lease.renew_until_lost().await;
            let _ = tx.send(lost);
        })
    };
    let _stop = AbortOnDrop(renewer);
    match select(work, rx).await {
        Either::Left((result, _)) => result,
        Either::Right((Ok(lost), _)) => Err(Error::store(lost)),
        // The renewer ended without a verdict (its runtime shut down): the work goes
        // on, and a lost lease shows at its next fenced write.
        Either::Right((Err(_), work)) => work.await,
    }
}

/// Aborts the renewal task when the call ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<B> AgentBuilder<B> {
    /// Persists conversations in `store` (as [`AgentBuilder::session_store`]) **and**
    /// orders the calls on each session across every agent and process sharing the
    /// store with its [`SessionLeases`] (default: off — no leases, only the in-process
    /// per-session FIFO). Replaces an earlier `session_store`; a later `session_store`
    /// turns leasing off again. Pass an `Arc` (or a clone of a client) to share one
    /// store.
    ///
    /// Per call on a session, after the in-process FIFO (which stays the fast path):
    /// - **Acquire** the session's lease, waiting up to [`LeaseConfig::wait`]; when
    ///   another holder keeps it, the call fails with
    ///   [`ErrorKind::Store`](crate::ErrorKind::Store) /
    ///   [`StoreErrorKind::Busy`] before any hook, model or tool runs. Retry later.
    /// - **Load** the session fresh from the store (the cached copy is not trusted
    ///   outside a lease: another replica may have saved since).
    /// - **Renew** every `ttl / 3` while the call runs. When the lease is lost (a
    ///   renewal finds it gone, or renewals fail until it may have expired), the call
    ///   is cancelled and fails with [`StoreErrorKind::LeaseLost`]; nothing is saved,
    ///   the next call reloads the stored session.
    /// - **Save** with [`SessionLeases::save_fenced`]: a save from a holder whose lease
    ///   expired and was taken over fails with `LeaseLost` and writes nothing.
    /// - **Release** when the call ends. When the call's future is dropped, a task
    ///   spawned on the current tokio runtime saves its repaired conversation under the
    ///   lease and releases it; a replica that dies mid-call loses the lease after the
    ///   TTL, and the next call sees the last saved (valid) history.
    ///
    /// The TTL must be between 1 ms and 24 h; `build()` fails with
    /// [`BuildErrorKind::InvalidConfig`](crate::BuildErrorKind::InvalidConfig) naming
    /// `session_leases.ttl` otherwise.
    ///
    /// ```
    /// use rein::*;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = InMemorySessionStore::new(); // RedisSessionStore / PostgresSessionStore across hosts
    /// let config = LeaseConfig { ttl: Duration::from_secs(10), wait: Duration::from_secs(2) };
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new([ScriptedTurn::text("hello")]))
    ///     .leased_session_store(store.clone(), config)
    ///     .build()?;
    /// agent.call_with(vec![Msg::user("hi")], RunContext::new().with_session_id("s1")).await?;
    /// assert_eq!(store.keys().len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn leased_session_store<S: SessionStore + SessionLeases>(
        mut self,
        store: S,
        config: LeaseConfig,
    ) -> Self {
        let store = Arc::new(store);
        self.config.store = Some(Arc::clone(&store) as Arc<dyn super::store::DynSessionStore>);
        self.config.leasing = Some(Leasing {
            leases: store,
            config,
        });
        self
    }
}
