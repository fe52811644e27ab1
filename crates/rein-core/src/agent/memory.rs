//! Conversation memory: one message list per (user, session), serialized per session;
//! an idle one is packed into a byte buffer ([`Packed`]) and unpacked before any use.

use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

use super::history::{check_history, pending_tool_uses, repair, started_bit};
use super::leasing::HeldLease;
use super::packed::Packed;
use crate::store::{DynSessionStore, SessionKey, StoreError, StoreErrorKind, StoredSession};

use crate::message::{ContentBlock, Msg, ToolResult, ToolUse};

mod records;

/// One conversation as held in memory.
#[derive(Debug, Default)]
pub(crate) struct Conversation {
    /// Shared copy-on-write: model requests hold a reference instead of a copy; a
    /// mutation copies only if a request still holds it.
    pub(crate) messages: Arc<Vec<Msg>>,
    /// `messages` mirror the store (or there is no store). Cleared by a save conflict:
    /// the next call reloads.
    pub(crate) loaded: bool,
    /// The store version `messages` were loaded at or last saved as.
    pub(crate) version: u64,
    /// `messages[..stored]` are exactly what the store holds at `version`: the length
    /// of the history as last loaded or saved, lowered to the smallest index a call
    /// changed in place ([`Conversation::changed_at`]); `0` after a replacement. A save
    /// writes only `messages[stored..]`
    /// ([`SessionStore::save_from`](crate::SessionStore::save_from)); `0` is always
    /// correct (a whole rewrite).
    pub(crate) stored: usize,
    /// `messages` may differ from what the store holds: set when a call starts,
    /// cleared by a successful save.
    pub(crate) dirty: bool,
    /// The conversation, packed while idle
    /// ([`Sessions::touch`](super::sessions::Sessions::touch)); `messages` are then
    /// the agent's shared empty list. Everything that reads or writes `messages` calls
    /// [`Conversation::unpack`] first.
    pub(super) packed: Option<Packed>,
    /// The idle clock's reading when this conversation last entered the idle queue (0:
    /// never).
    pub(super) queued_at: u64,
    /// The join of the labels of `messages[..n]`, as `(n, label)`: the session's label
    /// is folded incrementally, not rescanned every turn. Cleared when the messages are
    /// replaced; a raise of a folded message joins in here too.
    pub(super) label: Option<(usize, crate::label::Label)>,
}

impl Conversation {
    /// Unpacks a packed conversation. A buffer that does not unpack (a bug: only
    /// [`Packed::pack`] writes it) is [`StoreErrorKind::Corrupt`] and stays packed.
    pub(crate) fn unpack(&mut self, key: &SessionKey) -> Result<(), StoreError> {
        if let Some(packed) = &self.packed {
            let messages = packed
                .unpack()
                .map_err(|e| StoreError::with_kind(StoreErrorKind::Corrupt, key, e))?;
            self.messages = Arc::new(messages);
            self.packed = None;
        }
        Ok(())
    }

    /// Replaces the conversation's messages (dropping a packed form); the next save
    /// rewrites the whole stored history.
    pub(crate) fn replace(&mut self, messages: Vec<Msg>) {
        self.messages = Arc::new(messages);
        self.packed = None;
        self.stored = 0;
        self.label = None;
    }

    /// Notes that the message at `index` was changed in place: the next save rewrites
    /// the stored history from there on.
    pub(crate) fn changed_at(&mut self, index: usize) {
        self.stored = self.stored.min(index);
    }

    /// Packs an idle conversation; one that does not mirror the store (it reloads on
    /// its next call anyway) just lets its messages go.
    pub(super) fn pack(&mut self, empty: &Arc<Vec<Msg>>) {
        if self.packed.is_some() || self.messages.is_empty() {
            return;
        }
        if !self.loaded {
            self.messages = Arc::clone(empty);
            return;
        }
        if let Some(packed) = Packed::pack(&self.messages) {
            self.packed = Some(packed);
            self.messages = Arc::clone(empty);
        }
    }

    /// Saves the conversation if the store still holds the version it was loaded at
    /// (under `lease`, when the call holds one: a fenced save).
    ///
    /// On a conflict (or a lost lease) the conversation is marked not loaded, so the
    /// next call on it reloads the stored one (whoever saved it wins; this agent never
    /// overwrites it).
    pub(crate) async fn persist(
        &mut self,
        store: &dyn DynSessionStore,
        key: &SessionKey,
        lease: Option<&HeldLease>,
    ) -> Result<(), StoreError> {
        self.unpack(key)?;
        let unchanged = self.stored.min(self.messages.len());
        let saved = match lease {
            Some(lease) => lease.save(&self.messages, unchanged, self.version).await,
            None => {
                store
                    .save_from(key, &self.messages, unchanged, self.version)
                    .await
            }
        };
        self.saved(saved)
    }

    /// [`persist`](Self::persist) under `lease`, then releases it whatever the outcome,
    /// in one round trip where the store can (how a leased call ends).
    pub(crate) async fn persist_and_release(
        &mut self,
        key: &SessionKey,
        lease: &HeldLease,
    ) -> Result<(), StoreError> {
        if let Err(e) = self.unpack(key) {
            lease.release().await;
            return Err(e);
        }
        let unchanged = self.stored.min(self.messages.len());
        let saved = lease
            .save_and_release(&self.messages, unchanged, self.version)
            .await;
        self.saved(saved)
    }

    /// Records the outcome of a save (see [`persist`](Self::persist)).
    fn saved(&mut self, saved: Result<u64, StoreError>) -> Result<(), StoreError> {
        match saved {
            Ok(version) => {
                self.version = version;
                self.stored = self.messages.len();
                self.dirty = false;
                Ok(())
            }
            Err(e) => {
                if e.is_conflict() || e.kind() == StoreErrorKind::LeaseLost {
                    self.loaded = false;
                    self.dirty = false;
                }
                Err(e)
            }
        }
    }

    /// Brings the conversation in line with the store before a call: saves what an
    /// earlier cancelled (or failed-to-save) call left unsaved, then loads the session
    /// if it is not loaded — always, under a lease, unless the leftovers were just
    /// saved (another replica may have saved since this copy was loaded).
    ///
    /// A conflict while saving leftovers is logged and the stored session wins.
    ///
    /// `preloaded` is the session as loaded with the lease's acquisition (it replaces
    /// the load).
    pub(crate) async fn sync(
        &mut self,
        store: &dyn DynSessionStore,
        key: &SessionKey,
        lease: Option<&HeldLease>,
        reload: bool,
        preloaded: Option<StoredSession>,
    ) -> Result<(), StoreError> {
        self.unpack(key)?;
        if self.loaded && self.dirty {
            match self.persist(store, key, lease).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_conflict() || e.kind() == StoreErrorKind::LeaseLost => {
                    tracing::warn!(
                        session = %key,
                        error = %e,
                        "unsaved state of an earlier call lost to another writer; reloading the session"
                    )
                }
                Err(e) => return Err(e),
            }
        } else if lease.is_some() || reload {
            self.loaded = false;
        }
        match preloaded {
            Some(stored) if !self.loaded => self.adopt(key, stored),
            _ => self.load_if_needed(store, key).await,
        }
    }

    /// Loads the stored session unless the conversation is loaded (a loaded one is
    /// unpacked if it was packed). A stored history that breaks the memory invariant
    /// (e.g. a hand-edited file) is refused as [`StoreErrorKind::Corrupt`].
    pub(crate) async fn load_if_needed(
        &mut self,
        store: &dyn DynSessionStore,
        key: &SessionKey,
    ) -> Result<(), StoreError> {
        if self.loaded {
            return self.unpack(key);
        }
        let stored = store.load(key).await?;
        self.adopt(key, stored)
    }

    /// Takes `stored` as the conversation (it mirrors the store), unless it breaks the
    /// memory invariant ([`StoreErrorKind::Corrupt`]).
    fn adopt(&mut self, key: &SessionKey, stored: StoredSession) -> Result<(), StoreError> {
        check_history(&stored.messages).map_err(|e| {
            StoreError::with_kind(
                StoreErrorKind::Corrupt,
                key,
                format!("the stored conversation is not a valid history: {e}"),
            )
        })?;
        self.replace(stored.messages);
        self.version = stored.version;
        self.stored = self.messages.len();
        self.loaded = true;
        self.dirty = false;
        Ok(())
    }
}

/// Where a call's conversation is saved (when the call ends, or is dropped).
pub(crate) struct Persistence {
    pub(crate) store: Arc<dyn DynSessionStore>,
    pub(crate) key: SessionKey,
    pub(crate) slot: Arc<tokio::sync::Mutex<Conversation>>,
    /// The session's lease, when the agent leases sessions.
    pub(crate) lease: Option<HeldLease>,
    /// Load the stored session at the start of the call even without a lease.
    pub(crate) reload: bool,
}

impl Persistence {
    /// Saves the slot's conversation from a spawned task once the slot is free, if it
    /// is still unsaved then (a call queued on the slot may have saved it first). Without
    /// a tokio runtime nothing is spawned: the conversation stays marked unsaved and the
    /// next call on the session saves it before it proceeds.
    fn spawn_save(self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        handle.spawn(async move {
            let mut conv = self.slot.lock_owned().await;
            if conv.loaded
                && conv.dirty
                && let Err(e) = conv.persist(&*self.store, &self.key, None).await
            {
                tracing::error!(
                    session = %self.key,
                    error = %e,
                    "saving the session of a cancelled call failed; the next call on it retries"
                );
            }
        });
    }
}

/// Exclusive access to a conversation for the duration of one call.
///
/// While the guard is armed, dropping it (the call's future was dropped, or an error
/// path forgot to) gives every tool use still without a result a synthetic error
/// result, so the stored conversation stays valid.
///
/// With a store, dropping it while the conversation is unsaved hands the save to a
/// spawned task (see [`Persistence`]).
pub(crate) struct CallMemory {
    guard: OwnedMutexGuard<Conversation>,
    armed: bool,
    persistence: Option<Persistence>,
    /// The tool calls this call started, by position in the last assistant message's
    /// tool uses (bit `p`; bit 63 also for every later position), so a repair never
    /// calls a started tool "not executed". No allocation per call.
    started: u64,
    /// The double-text signal this call watches ([`super::double_text`]).
    watch: Option<super::double_text::Watch>,
}

/// Result text for tool uses left without a result by a dropped call.
const DROPPED: &str = "not executed: the call was cancelled before this tool ran";

/// Result text for a started tool whose call was cancelled or failed before its result
/// was recorded, on an agent without a store (with a store the call stays pending in the
/// journal and is surfaced as outcome-unknown).
pub(crate) const INTERRUPTED: &str = "outcome unknown: the tool was started, but the call was \
     cancelled or failed before its result was recorded; it may or may not have taken effect";

impl CallMemory {
    pub(crate) fn new(
        guard: OwnedMutexGuard<Conversation>,
        persistence: Option<Persistence>,
    ) -> Self {
        Self {
            guard,
            armed: true,
            persistence,
            started: 0,
            watch: None,
        }
    }

    /// The double-text signal of this call's slot (set when the call took it).
    pub(crate) fn watch(&self) -> Option<&super::double_text::Watch> {
        self.watch.as_ref()
    }

    pub(crate) fn set_watch(&mut self, watch: Option<super::double_text::Watch>) {
        self.watch = watch;
    }

    /// Replaces everything from `start` on with `tail` (a rollback): the next save
    /// rewrites the stored history from `start`, and the session's label is folded
    /// again (what was dropped no longer counts, what stays does).
    pub(crate) fn rewrite_from(&mut self, start: usize, tail: Vec<Msg>) {
        let conv = &mut *self.guard;
        let messages = Arc::make_mut(&mut conv.messages);
        messages.truncate(start);
        messages.extend(tail);
        conv.changed_at(start);
        conv.label = None;
    }

    /// Whether this call journals effects (it has a store to journal them in).
    pub(crate) fn journaling(&self) -> bool {
        self.persistence.is_some()
    }

    /// Notes that the tool of call `id` is about to start.
    pub(crate) fn started(&mut self, id: &str) {
        let position = self.last_assistant().and_then(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse(u) => Some(u),
                    _ => None,
                })
                .position(|u| u.id == id)
        });
        self.started |= started_bit(position);
    }

    /// Saves the conversation now, in the middle of the call (a journal claim or
    /// settle): a versioned save, fenced under the call's lease. The call goes on
    /// changing the conversation, so it stays marked unsaved.
    ///
    /// # Errors
    /// The save's error; a `Conflict` or a lost lease means another holder moved the
    /// session on, so nothing this call journaled may run.
    pub(crate) async fn checkpoint(&mut self) -> Result<(), StoreError> {
        let Self {
            guard, persistence, ..
        } = self;
        let Some(p) = persistence.as_ref() else {
            return Ok(());
        };
        if let Some(lease) = &p.lease
            && lease.is_lost()
        {
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                &p.key,
                "the session lease was lost; nothing more is journaled or run",
            ));
        }
        guard.persist(&*p.store, &p.key, p.lease.as_ref()).await?;
        guard.dirty = true;
        Ok(())
    }

    pub(crate) fn conversation(&mut self) -> &mut Conversation {
        &mut self.guard
    }

    pub(crate) fn messages(&self) -> &[Msg] {
        &self.guard.messages
    }

    /// The conversation, shared (for a model request).
    pub(crate) fn shared(&self) -> Arc<Vec<Msg>> {
        Arc::clone(&self.guard.messages)
    }

    fn messages_mut(&mut self) -> &mut Vec<Msg> {
        Arc::make_mut(&mut self.guard.messages)
    }

    /// How many messages the conversation holds.
    pub(crate) fn len(&self) -> usize {
        self.guard.messages.len()
    }

    pub(crate) fn push(&mut self, msg: Msg) {
        self.messages_mut().push(msg);
    }

    /// Tool uses of the last assistant message that have no result after it.
    pub(crate) fn pending_tool_uses(&self) -> Vec<ToolUse> {
        pending_tool_uses(&self.guard.messages)
    }

    /// Gives every pending tool use an error result with `text` — except calls the
    /// journal holds (they stay pending: the next call on the session replays or
    /// surfaces them) and tools this call started (they get [`INTERRUPTED`]).
    pub(crate) fn repair(&mut self, text: &str) {
        let started = self.started;
        repair(self.messages_mut(), text, started);
    }

    /// Replaces the stored tool use with this id (name and input) in the last
    /// assistant message.
    pub(crate) fn update_tool_use(&mut self, updated: &ToolUse) {
        if let Some(msg) = self.last_assistant_mut() {
            for block in &mut msg.content {
                if let ContentBlock::ToolUse(u) = block
                    && u.id == updated.id
                {
                    u.name.clone_from(&updated.name);
                    u.input.clone_from(&updated.input);
                }
            }
        }
    }

    /// Records a result in the tool message at `batch` (creating it at the end on the
    /// first result of a turn). Returns the message's index.
    pub(crate) fn record_result(&mut self, batch: Option<usize>, result: ToolResult) -> usize {
        if let Some(i) = batch {
            self.guard.changed_at(i);
        }
        let messages = self.messages_mut();
        match batch {
            Some(i) if i < messages.len() => {
                messages[i].content.push(ContentBlock::ToolResult(result));
                i
            }
            _ => {
                messages.push(Msg::tool([result]));
                messages.len() - 1
            }
        }
    }

    /// [`CallMemory::record_result`], then raises the tool message's label by the
    /// result's and stores the document the result was quarantined as.
    pub(crate) fn record_labelled(
        &mut self,
        batch: Option<usize>,
        result: ToolResult,
        label: crate::label::Label,
        document: Option<(String, serde_json::Value)>,
    ) -> usize {
        let i = self.record_result(batch, result);
        // `record_result` noted the change of message `i` (or pushed it).
        if let Some(msg) = self.messages_mut().get_mut(i) {
            msg.raise_label(label);
            if let Some((handle, doc)) = document {
                super::quarantine::store(msg, handle, doc);
            }
        }
        if let Some((n, folded)) = self.guard.label
            && i < n
        {
            self.guard.label = Some((n, folded.join(label)));
        }
        i
    }

    /// The join of the labels of every stored message: the label of a model turn made
    /// now. Folds only what was added since the last time.
    pub(crate) fn session_label(&mut self) -> crate::label::Label {
        let conv = &mut *self.guard;
        let len = conv.messages.len();
        let (from, base) = match conv.label {
            Some((n, l)) if n <= len => (n, l),
            _ => (0, crate::label::Label::BOTTOM),
        };
        let label = conv.messages[from..]
            .iter()
            .fold(base, |acc, m| acc.join(m.label()));
        conv.label = Some((len, label));
        label
    }

    /// Brings the conversation in line with the store (see [`Conversation::sync`]).
    pub(super) async fn sync(
        &mut self,
        preloaded: Option<StoredSession>,
    ) -> Result<(), StoreError> {
        let Self {
            guard, persistence, ..
        } = self;
        let Some(p) = persistence.as_ref() else {
            return Ok(());
        };
        guard
            .sync(&*p.store, &p.key, p.lease.as_ref(), p.reload, preloaded)
            .await?;
        match &p.lease {
            Some(lease) if lease.is_lost() => Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                &p.key,
                "the session lease was lost while the call started",
            )),
            _ => Ok(()),
        }
    }

    /// The call's lease, when it holds one (to renew while the call runs).
    pub(crate) fn lease(&self) -> Option<HeldLease> {
        self.persistence.as_ref().and_then(|p| p.lease.clone())
    }

    /// Ends the call with the store: saves the conversation (fenced under a lease;
    /// nothing when the lease was lost), releases the lease, and settles (dropping no
    /// longer hands a save to a task). A failed save leaves the conversation marked
    /// unsaved: the next call on the session saves it first. Under a lease the cached
    /// copy is not trusted afterwards: the next call reloads.
    pub(crate) async fn finish(&mut self) -> Result<(), StoreError> {
        let Self {
            guard, persistence, ..
        } = self;
        let Some(p) = persistence.as_ref() else {
            return Ok(());
        };
        let saved = match &p.lease {
            Some(lease) if lease.is_lost() => {
                guard.loaded = false;
                guard.dirty = false;
                lease.release().await;
                Ok(())
            }
            Some(lease) => {
                let saved = guard.persist_and_release(&p.key, lease).await;
                if saved.is_ok() {
                    guard.loaded = false;
                }
                saved
            }
            None => guard.persist(&*p.store, &p.key, None).await,
        };
        *persistence = None;
        saved
    }

    /// Gives up the session without saving (the call did not start): releases the
    /// lease, if any, and settles.
    pub(super) async fn abandon(&mut self) {
        if let Some(p) = self.persistence.take()
            && let Some(lease) = &p.lease
        {
            lease.release().await;
        }
    }

    /// Ends the call: dropping no longer repairs (pending tool uses left on purpose by
    /// `stop_agent` stay resumable).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CallMemory {
    fn drop(&mut self) {
        if self.armed {
            repair(
                Arc::make_mut(&mut self.guard.messages),
                DROPPED,
                self.started,
            );
        }
        let Some(mut p) = self.persistence.take() else {
            return;
        };
        let unsaved = self.guard.loaded && self.guard.dirty;
        match p.lease.take() {
            None if unsaved => {
                // The task waits for the slot, which is released right after this.
                p.spawn_save();
            }
            None => {}
            Some(lease) => {
                // The task does not need the slot: it saves this snapshot under the
                // lease, then releases it (a call queued on the slot waits for the
                // lease meanwhile, and reloads).
                let snapshot = (unsaved && !lease.is_lost()).then(|| {
                    (
                        Arc::clone(&self.guard.messages),
                        self.guard.stored,
                        self.guard.version,
                    )
                });
                if lease.spawn_finish(snapshot) {
                    self.guard.loaded = false;
                    self.guard.dirty = false;
                }
            }
        }
    }
}
