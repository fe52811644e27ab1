//! Opening a call's memory: the session's slot (the in-process FIFO), its lease, and
//! the conversation brought in line with the store, before anything of the call runs.

use std::sync::Arc;

use std::sync::atomic::Ordering;

use super::DoubleText;
use super::approvals::ApprovalDecisions;
use super::double_text::{Control, Waiting, Watch};
use super::memory::{CallMemory, Persistence};
use crate::store::{SessionKey, SessionSignal, StoreError, StoreErrorKind};

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
        policy: DoubleText,
    ) -> Result<CallMemory, StoreError> {
        let mut memory = self.open_synced(key, policy).await?;
        if let Some(why) = resume.and_then(|d| d.stale_on(memory.messages())) {
            memory.disarm();
            memory.abandon().await;
            return Err(StoreError::with_kind(StoreErrorKind::Conflict, key, why));
        }
        Ok(memory)
    }

    async fn open_synced(
        &self,
        key: &SessionKey,
        policy: DoubleText,
    ) -> Result<CallMemory, StoreError> {
        let (slot, mut control) = self.sessions.slot_and_control(key);
        let mut guard = match Arc::clone(&slot).try_lock_owned() {
            Ok(guard) => guard,
            Err(_) => {
                control = self.sessions.control(key);
                self.wait_for_slot(key, &slot, control.as_ref(), policy)
                    .await?
            }
        };
        // A session no call waited for has no control: nothing can signal this call
        // until a waiter creates one, which the call picks up at a safe point.
        let watch = control.map(|control| Watch {
            run: control.begin(),
            control,
        });
        self.sessions.touch(&slot, &mut guard);
        let Some(store) = &self.store else {
            guard.unpack(key)?;
            let mut memory = CallMemory::new(guard, None);
            memory.conversation().loaded = true;
            memory.set_watch(watch);
            return Ok(memory);
        };
        // Leftovers of an earlier call are saved first: then no load comes with the lease.
        let load = !(guard.loaded && guard.dirty);
        let (lease, preloaded) = match &self.leasing {
            Some(leasing) => {
                let (lease, stored) = leasing.acquire(key, load, policy, self.max_waiting).await?;
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
        memory.set_watch(watch);
        if let Err(e) = memory.sync(preloaded).await {
            memory.disarm();
            memory.abandon().await;
            return Err(e);
        }
        Ok(memory)
    }

    /// The slot is held by a running call: `Reject` fails at once; the other policies
    /// count themselves waiting (`QueueFull` past the bound), signal the running call
    /// (`Interrupt`, `Rollback`), and wait their turn (the slot's lock is FIFO).
    async fn wait_for_slot(
        &self,
        key: &SessionKey,
        slot: &Arc<tokio::sync::Mutex<super::memory::Conversation>>,
        control: Option<&Arc<Control>>,
        policy: DoubleText,
    ) -> Result<tokio::sync::OwnedMutexGuard<super::memory::Conversation>, StoreError> {
        if policy == DoubleText::Reject {
            return Err(StoreError::with_kind(
                StoreErrorKind::Busy,
                key,
                "another call on this session is running in this process (double-text policy \
                 Reject); nothing ran",
            ));
        }
        let Some(control) = control else {
            // Forgotten meanwhile: the slot's lock still orders the calls.
            return Ok(Arc::clone(slot).lock_owned().await);
        };
        let before = control.waiting.fetch_add(1, Ordering::AcqRel);
        let waiting = Waiting(Arc::clone(control));
        if before >= self.max_waiting {
            return Err(StoreError::with_kind(
                StoreErrorKind::QueueFull,
                key,
                format!(
                    "{} calls already wait for this session in this process (the queue is \
                     full); nothing ran",
                    self.max_waiting
                ),
            ));
        }
        match policy {
            DoubleText::Interrupt => control.signal(SessionSignal::Interrupt),
            DoubleText::Rollback => control.signal(SessionSignal::Rollback),
            _ => {}
        }
        let guard = Arc::clone(slot).lock_owned().await;
        drop(waiting);
        Ok(guard)
    }
}
