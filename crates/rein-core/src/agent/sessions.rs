//! The per-session slots of an agent, and the idle queue that packs conversations no
//! call opened lately (see [`Sessions`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::double_text::Control;
use super::memory::Conversation;
use crate::message::Msg;
use crate::store::SessionKey;

/// How many recently used sessions of an agent stay unpacked, unless the builder says
/// otherwise ([`AgentBuilder::hot_sessions`](super::AgentBuilder::hot_sessions)).
pub(crate) const HOT_SESSIONS: usize = 16_384;

/// A session's conversation (its lock is the in-process FIFO) and its double-text
/// control, created by the first call that waits for the session (a session no call
/// ever waited for costs no allocation for it).
type Slot = (Arc<tokio::sync::Mutex<Conversation>>, Option<Arc<Control>>);

/// The per-session slots of an agent, and the idle queue that packs the conversations
/// no call used lately.
///
/// The idle queue holds the sessions in the order they were opened (by a call,
/// [`Agent::messages`](super::Agent::messages) or
/// [`Agent::set_messages`](super::Agent::set_messages)); once it holds more than `hot`
/// entries, the oldest ones leave it, and a conversation leaving it that was not
/// opened since is packed ([`Packed`](super::packed::Packed)). A session opened again
/// re-enters the queue only when its entry is older than `hot / 2` openings, so a busy
/// session costs the queue one entry per `hot / 2` openings of the agent. Entries are
/// weak: a forgotten session leaves its entry with nothing to pack.
#[derive(Debug)]
pub(crate) struct Sessions {
    slots: Mutex<HashMap<SessionKey, Slot>>,
    /// Counts openings (read without the queue's lock: a session opened lately skips
    /// the lock altogether).
    clock: AtomicU64,
    /// (clock reading at entry, session), oldest first.
    idle: Mutex<VecDeque<(u64, Weak<tokio::sync::Mutex<Conversation>>)>>,
    /// What packed conversations hold as `messages` (one shared empty list).
    empty: Arc<Vec<Msg>>,
    /// How many recently opened sessions stay unpacked; 0: none is ever packed.
    hot: usize,
    /// Whether any call ever waited for a session of this agent (until then no session
    /// has a double-text control, and a running call does not look for one).
    waited: std::sync::atomic::AtomicBool,
}

/// At most this many entries leave the idle queue per opening (packing is work done
/// on the opening call's time).
const PACKS_PER_OPENING: usize = 2;

impl Sessions {
    /// Slots whose `hot` most recently opened sessions stay unpacked (0: never pack).
    pub(crate) fn new(hot: usize) -> Self {
        Self {
            slots: Mutex::default(),
            clock: AtomicU64::new(0),
            idle: Mutex::default(),
            empty: Arc::new(Vec::new()),
            hot,
            waited: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn slot(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<Conversation>> {
        self.slot_and_control(key).0
    }

    /// The session's slot and its double-text control ([`Control`]), if a call ever
    /// waited for it.
    pub(crate) fn slot_and_control(&self, key: &SessionKey) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((slot, control)) = slots.get(key) {
            return (Arc::clone(slot), control.clone());
        }
        let slot = Arc::new(tokio::sync::Mutex::new(Conversation {
            messages: Arc::clone(&self.empty),
            ..Conversation::default()
        }));
        slots.insert(key.clone(), (Arc::clone(&slot), None));
        (slot, None)
    }

    /// The session's double-text control, created if it has none (`None`: the
    /// session was forgotten meanwhile).
    pub(crate) fn control(&self, key: &SessionKey) -> Option<Arc<Control>> {
        self.waited.store(true, Ordering::Release);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, control) = slots.get_mut(key)?;
        Some(Arc::clone(control.get_or_insert_with(Arc::default)))
    }

    /// The session's double-text control, if a call ever waited for it.
    pub(crate) fn existing_control(&self, key: &SessionKey) -> Option<Arc<Control>> {
        if !self.waited.load(Ordering::Acquire) {
            return None;
        }
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.get(key).and_then(|(_, c)| c.clone())
    }

    /// Forgets a session. Its idle-queue entry, when it is the latest one (a session
    /// forgotten right after its call, as stateless callers do), leaves the queue at
    /// once; an older entry stays until its turn (it holds only a weak reference:
    /// the conversation itself is freed now).
    pub(crate) fn remove(&self, key: &SessionKey) -> bool {
        let removed = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        let Some((slot, _)) = removed else {
            return false;
        };
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle
            .back()
            .is_some_and(|(_, w)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&slot)))
        {
            idle.pop_back();
        }
        true
    }

    /// Records that `slot` (locked by the caller as `conv`) was opened, and packs up to
    /// [`PACKS_PER_OPENING`] conversations that leave the idle queue unopened since
    /// they entered it. Conversations in use (locked) re-enter the queue instead.
    pub(crate) fn touch(
        &self,
        slot: &Arc<tokio::sync::Mutex<Conversation>>,
        conv: &mut Conversation,
    ) {
        if self.hot == 0 {
            return;
        }
        let mut leaving: [Option<(u64, Arc<tokio::sync::Mutex<Conversation>>)>; PACKS_PER_OPENING] =
            Default::default();
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        if conv.queued_at != 0 && now.saturating_sub(conv.queued_at) < (self.hot as u64).div_ceil(2)
        {
            return;
        }
        conv.queued_at = now;
        {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.push_back((now, Arc::downgrade(slot)));
            for out in &mut leaving {
                if idle.len() <= self.hot {
                    break;
                }
                if let Some((at, weak)) = idle.pop_front() {
                    // A forgotten session has nothing to pack.
                    *out = weak.upgrade().map(|s| (at, s));
                }
            }
        }
        let mut busy = Vec::new();
        for (at, other) in leaving.into_iter().flatten() {
            if Arc::ptr_eq(&other, slot) {
                // The caller's own (older) entry: the one just pushed stands for it.
                continue;
            }
            match other.try_lock() {
                // Opened since it entered: a later entry stands for it.
                Ok(c) if c.queued_at != at => {}
                Ok(mut c) => c.pack(&self.empty),
                Err(_) => busy.push((at, Arc::downgrade(&other))),
            }
        }
        if !busy.is_empty() {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.extend(busy);
        }
    }
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
