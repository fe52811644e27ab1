//! An agent's side of session leases: the lease held around one call, renewed while it
//! runs, and released (or lost) with it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::{Either, select};

use super::builder::AgentBuilder;
use crate::error::Error;
use crate::message::Msg;
use crate::store::{
    DynSessionLeases, Lease, LeaseConfig, MAX_TTL, SessionKey, SessionLeases, SessionStore,
    StoreError, StoreErrorKind, StoredSession,
};

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

    /// Acquires the session's lease for one call; with `load`, also the stored session
    /// in the same round trip where the store can
    /// ([`SessionLeases::acquire_and_load`]; `None`: load it separately).
    pub(crate) async fn acquire(
        &self,
        key: &SessionKey,
        load: bool,
        policy: super::DoubleText,
        max_waiting: usize,
    ) -> Result<(HeldLease, Option<StoredSession>), StoreError> {
        use super::DoubleText;
        let signal = match policy {
            DoubleText::Interrupt => Some(crate::store::SessionSignal::Interrupt),
            DoubleText::Rollback => Some(crate::store::SessionSignal::Rollback),
            _ => None,
        };
        if let Some(signal) = signal {
            self.leases.signal(key, signal).await?;
        }
        let (lease, stored) = if policy == DoubleText::Reject {
            // One attempt, and no queue: a session with waiters is busy too.
            self.leases
                .acquire_and_load(key, self.config.ttl, std::time::Duration::ZERO)
                .await?
        } else if self.leases.orders_and_signals() {
            let (lease, stored) = self
                .leases
                .acquire_queued_and_load(key, self.config.ttl, self.config.wait, max_waiting)
                .await?;
            (lease, stored.filter(|_| load))
        } else if load {
            self.leases
                .acquire_and_load(key, self.config.ttl, self.config.wait)
                .await?
        } else {
            let lease = self
                .leases
                .acquire(key, self.config.ttl, self.config.wait)
                .await?;
            (lease, None)
        };
        let held = HeldLease {
            leases: Arc::clone(&self.leases),
            lease,
            lost: Arc::new(AtomicBool::new(false)),
        };
        Ok((held, stored))
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

    /// A fenced save of `messages`, of which the first `unchanged` are what the store
    /// holds at `version` ([`SessionLeases::save_fenced_from`]); a
    /// [`StoreErrorKind::LeaseLost`] marks the lease lost.
    pub(crate) async fn save(
        &self,
        messages: &[Msg],
        unchanged: usize,
        version: u64,
    ) -> Result<u64, StoreError> {
        let saved = self
            .leases
            .save_fenced_from(&self.lease, messages, unchanged, version)
            .await;
        if let Err(e) = &saved
            && e.kind() == StoreErrorKind::LeaseLost
        {
            self.mark_lost();
        }
        saved
    }

    /// [`save`](Self::save), then releases the lease whatever the save's outcome, in one
    /// round trip where the store can ([`SessionLeases::save_fenced_and_release`]).
    pub(crate) async fn save_and_release(
        &self,
        messages: &[Msg],
        unchanged: usize,
        version: u64,
    ) -> Result<u64, StoreError> {
        let saved = self
            .leases
            .save_fenced_and_release(&self.lease, messages, unchanged, version)
            .await;
        if let Err(e) = &saved
            && e.kind() == StoreErrorKind::LeaseLost
        {
            self.mark_lost();
        }
        saved
    }

    /// The signal a newer call sent this lease's holder, if any
    /// ([`SessionLeases::signalled`]).
    pub(crate) async fn signalled(
        &self,
    ) -> Result<Option<crate::store::SessionSignal>, StoreError> {
        self.leases.signalled(&self.lease).await
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

    /// From a dropped call: saves `snapshot` (the call's repaired conversation, how many
    /// of its messages the store holds unchanged, and the version it replaces) under the
    /// lease, then releases it, in a task spawned on the current tokio runtime. Returns
    /// `false` (nothing spawned) without a runtime.
    pub(crate) fn spawn_finish(self, snapshot: Option<(Arc<Vec<Msg>>, usize, u64)>) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        handle.spawn(async move {
            let Some((messages, unchanged, version)) = snapshot else {
                self.release().await;
                return;
            };
            if let Err(e) = self.save_and_release(&messages, unchanged, version).await {
                tracing::error!(
                    session = %self.key(),
                    error = %e,
                    "saving the session of a cancelled call failed; the stored version stays"
                );
            }
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
    ///   outside a lease: another replica may have saved since), in the acquisition's
    ///   round trip where the store can ([`SessionLeases::acquire_and_load`]).
    /// - **Renew** every `ttl / 3` while the call runs. When the lease is lost (a
    ///   renewal finds it gone, or renewals fail until it may have expired), the call
    ///   is cancelled and fails with [`StoreErrorKind::LeaseLost`]; nothing is saved,
    ///   the next call reloads the stored session.
    /// - **Save** with [`SessionLeases::save_fenced`]: a save from a holder whose lease
    ///   expired and was taken over fails with `LeaseLost` and writes nothing.
    /// - **Release** when the call ends, with the last save in one round trip where the
    ///   store can ([`SessionLeases::save_fenced_and_release`]). When the call's future is dropped, a task
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
        self.config.store = Some(Arc::clone(&store) as Arc<dyn crate::store::DynSessionStore>);
        self.config.leasing = Some(Leasing {
            leases: store,
            config,
        });
        self
    }
}
