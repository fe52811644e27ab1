//! Opening a call's memory: the session's slot (the in-process FIFO), its lease, and
//! the conversation brought in line with the store, before anything of the call runs.

use std::sync::Arc;

use super::approvals::ApprovalDecisions;
use super::memory::{CallMemory, Persistence};
use crate::store::{SessionKey, StoreError, StoreErrorKind};

impl super::AgentInner {
    /// Opens a session for one call: waits for its slot (the in-process FIFO), then,
    /// with leasing, acquires its lease (a [`StoreErrorKind::Busy`] when another holder
    /// keeps it past the wait), then brings the conversation in line with the store.
    /// With `resume` (the decisions of a call without input), fails with
    /// [`StoreErrorKind::Conflict`] when they are stale on the conversation
    /// ([`ApprovalDecisions::stale_on`]: another call resumed first).
    /// On a failure nothing ran, the conversation is unchanged and the lease, if
    /// acquired, is released.
    pub(crate) async fn open_memory(
        &self,
        key: &SessionKey,
        resume: Option<&ApprovalDecisions>,
    ) -> Result<CallMemory, StoreError> {
        let mut memory = self.open_synced(key).await?;
        if let Some(why) = resume.and_then(|d| d.stale_on(memory.messages())) {
            memory.disarm();
            memory.abandon().await;
            return Err(StoreError::with_kind(StoreErrorKind::Conflict, key, why));
        }
        Ok(memory)
    }

    async fn open_synced(&self, key: &SessionKey) -> Result<CallMemory, StoreError> {
        let slot = self.sessions.slot(key);
        let mut guard = Arc::clone(&slot).lock_owned().await;
        self.sessions.touch(&slot, &mut guard);
        let Some(store) = &self.store else {
            guard.unpack(key)?;
            let mut memory = CallMemory::new(guard, None);
            memory.conversation().loaded = true;
            return Ok(memory);
        };
        // Leftovers of an earlier call are saved first: then no load comes with the lease.
        let load = !(guard.loaded && guard.dirty);
        let (lease, preloaded) = match &self.leasing {
            Some(leasing) => {
                let (lease, stored) = leasing.acquire(key, load).await?;
                (Some(lease), stored)
            }
            None => (None, None),
        };
        let mut memory = CallMemory::new(
            guard,
            Some(Persistence {
                store: Arc::clone(store),
                key: key.clone(),
                slot,
                lease,
                reload: self.reload,
            }),
        );
        if let Err(e) = memory.sync(preloaded).await {
            memory.disarm();
            memory.abandon().await;
            return Err(e);
        }
        Ok(memory)
    }
}
