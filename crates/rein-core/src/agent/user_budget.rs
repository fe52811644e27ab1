//! A user's budget across sessions and replicas: one record in the session store, under
//! the user's reserved session [`USER_BUDGET_SESSION`](crate::budget::USER_BUDGET_SESSION), changed
//! only by a versioned save (compare-and-swap), so replicas sharing the store never
//! double-spend it.
//!
//! A model request is admitted against the record as stored: read it, check the
//! request's worst case against what is left, and save the record with the worst case
//! added to `reserved` at the version read; if another replica saved in between, the
//! save fails with a conflict and the request is checked again against the newer
//! record. After the request, its reservation is replaced by what it used the same way.
//! A replica that dies in between leaves its reservation charged.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::budget::{BUDGET_KEY, Spend, session_record};
use crate::message::Msg;
use crate::store::{DynSessionStore, SessionKey, StoreError, StoreErrorKind};

/// Saves that lose to another replica's are retried this many times before the call
/// fails (each retry reads the newer record first).
const MAX_ATTEMPTS: u32 = 64;

/// The stored record of one user's budget and where it lives.
pub(crate) struct UserBook {
    store: Arc<dyn DynSessionStore>,
    key: SessionKey,
    /// Serializes this call tree's admissions and settlements (parallel subagents), so
    /// what the ledger holds in memory is always what was saved.
    turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for UserBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserBook").field("key", &self.key).finish()
    }
}

/// The record as read: what the user spent, what requests in flight reserved, and the
/// version to save over.
pub(crate) struct Snapshot {
    pub(crate) spent: Spend,
    pub(crate) reserved: Spend,
    version: u64,
}

impl UserBook {
    /// The book of the user of `key` (its session id is replaced by the reserved one).
    pub(crate) fn new(store: Arc<dyn DynSessionStore>, key: SessionKey) -> Self {
        Self {
            store,
            key,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Holds this call tree's turn on the record (see [`UserBook::turn`]).
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Reads the record (nothing spent when the user has none yet).
    pub(crate) async fn read(&self) -> Result<Snapshot, StoreError> {
        let stored = self.store.load(&self.key).await?;
        let record = stored
            .messages
            .last()
            .and_then(|m| m.metadata.get(BUDGET_KEY));
        let part = |name: &str| {
            record
                .and_then(|r| r.get(name))
                .and_then(|v| Spend::deserialize(v).ok())
                .unwrap_or_default()
        };
        Ok(Snapshot {
            spent: part("spent"),
            reserved: part("reserved"),
            version: stored.version,
        })
    }

    /// Saves `spent` and `reserved` over the snapshot's version: `Ok(false)` when
    /// another replica saved first (nothing written).
    pub(crate) async fn write(
        &self,
        at: &Snapshot,
        spent: &Spend,
        reserved: &Spend,
    ) -> Result<bool, StoreError> {
        let mut msg = Msg::system("The budget record of this user, kept by rein.").synthetic();
        msg.metadata
            .insert(BUDGET_KEY.to_owned(), session_record(spent, reserved));
        match self
            .store
            .save_from(&self.key, std::slice::from_ref(&msg), 0, at.version)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies `change` to the stored record until a save lands (a conflict reads the
    /// newer record and applies it again).
    ///
    /// # Errors
    /// The store's error, or a `Conflict` after [`MAX_ATTEMPTS`] lost saves.
    pub(crate) async fn update(
        &self,
        change: impl Fn(&mut Spend, &mut Spend),
    ) -> Result<(), StoreError> {
        for attempt in 0..MAX_ATTEMPTS {
            let at = self.read().await?;
            let (mut spent, mut reserved) = (at.spent.clone(), at.reserved.clone());
            change(&mut spent, &mut reserved);
            if self.write(&at, &spent, &reserved).await? {
                return Ok(());
            }
            backoff(attempt).await;
        }
        Err(self.contended())
    }

    /// The error of a record that kept changing under every save.
    pub(crate) fn contended(&self) -> StoreError {
        StoreError::with_kind(
            StoreErrorKind::Busy,
            &self.key,
            format!("the user's budget record changed under {MAX_ATTEMPTS} saves in a row"),
        )
    }

    /// Whether another attempt may follow `attempt` (waiting a little first).
    pub(crate) async fn retry(&self, attempt: u32) -> bool {
        if attempt + 1 >= MAX_ATTEMPTS {
            return false;
        }
        backoff(attempt).await;
        true
    }
}

/// A short pause that grows with the attempts, so replicas racing for the record spread
/// out (1 ms, 2 ms, … up to 32 ms).
async fn backoff(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(1 << attempt.min(5))).await;
}
