//! Conversation memory: one message list per (user, session), serialized per session.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::OwnedMutexGuard;

use crate::message::{ContentBlock, Msg, Role, ToolResult, ToolUse};

/// Identifies one conversation of an agent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The user, if calls carry one.
    pub user_id: Option<String>,
    /// The session.
    pub session_id: String,
}

impl SessionKey {
    /// A key for this user and session.
    pub fn new(user_id: Option<&str>, session_id: &str) -> Self {
        Self {
            user_id: user_id.map(str::to_owned),
            session_id: session_id.to_owned(),
        }
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.user_id {
            Some(u) => write!(f, "{u}/{}", self.session_id),
            None => f.write_str(&self.session_id),
        }
    }
}

/// A session store failure.
#[derive(Debug, thiserror::Error)]
#[error("session store failed for session `{session}`: {message}")]
pub struct StoreError {
    session: String,
    message: String,
}

impl StoreError {
    /// An error for this session.
    pub fn new(key: &SessionKey, message: impl Into<String>) -> Self {
        Self {
            session: key.to_string(),
            message: message.into(),
        }
    }
}

/// Where conversations persist between calls (and processes).
///
/// Without a store, an agent keeps conversations in memory for its lifetime. With one,
/// a session is loaded on its first call in this agent and saved after every call,
/// successful or failed.
pub trait SessionStore: Send + Sync + 'static {
    /// The stored messages of a session (empty if none).
    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<Vec<Msg>, StoreError>>;

    /// Replaces the stored messages of a session.
    fn save<'a>(
        &'a self,
        key: &'a SessionKey,
        messages: &'a [Msg],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// One conversation as held in memory.
#[derive(Debug, Default)]
pub(crate) struct Conversation {
    /// Shared copy-on-write: model requests hold a reference instead of a copy; a
    /// mutation copies only if a request still holds it.
    pub(crate) messages: Arc<Vec<Msg>>,
    pub(crate) loaded: bool,
}

/// The per-session slots of an agent.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    slots: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<Conversation>>>>,
}

impl Sessions {
    pub(crate) fn slot(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<Conversation>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(key) {
            return Arc::clone(slot);
        }
        let slot = Arc::new(tokio::sync::Mutex::new(Conversation::default()));
        slots.insert(key.clone(), Arc::clone(&slot));
        slot
    }

    pub(crate) fn remove(&self, key: &SessionKey) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .is_some()
    }
}

/// Exclusive access to a conversation for the duration of one call.
///
/// While the guard is armed, dropping it (the call's future was dropped, or an error
/// path forgot to) gives every tool use still without a result a synthetic error
/// result, so the stored conversation stays valid.
pub(crate) struct CallMemory {
    guard: OwnedMutexGuard<Conversation>,
    armed: bool,
}

/// Result text for tool uses left without a result by a dropped call.
const DROPPED: &str = "not executed: the call was cancelled before this tool ran";

impl CallMemory {
    pub(crate) fn new(guard: OwnedMutexGuard<Conversation>) -> Self {
        Self { guard, armed: true }
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

    pub(crate) fn push(&mut self, msg: Msg) {
        self.messages_mut().push(msg);
    }

    /// Tool uses of the last assistant message that have no result after it.
    pub(crate) fn pending_tool_uses(&self) -> Vec<ToolUse> {
        pending_tool_uses(&self.guard.messages)
    }

    /// Gives every pending tool use an error result with `text`.
    pub(crate) fn repair(&mut self, text: &str) {
        repair(self.messages_mut(), text);
    }

    /// Replaces the stored tool use with this id (name and input) in the last
    /// assistant message.
    pub(crate) fn update_tool_use(&mut self, updated: &ToolUse) {
        if let Some(msg) = self
            .messages_mut()
            .iter_mut()
            .rev()
            .find(|m| m.role == Role::Assistant)
        {
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

    /// Ends the call: dropping no longer repairs (pending tool uses left on purpose by
    /// `stop_agent` stay resumable).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CallMemory {
    fn drop(&mut self) {
        if self.armed {
            repair(Arc::make_mut(&mut self.guard.messages), DROPPED);
        }
    }
}

/// Checks a history for import: no system messages; tool results follow their uses
/// directly (only tool-result messages while uses are open); each use has at most one
/// result; uses left open are allowed only at the very end (they are then pending).
pub(crate) fn check_history(messages: &[Msg]) -> Result<(), String> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::System {
            return Err(format!("message {i} has the System role"));
        }
        let results = m.tool_results();
        if !open.is_empty() && results.is_empty() {
            return Err(format!(
                "message {i} comes before the results of tool calls {:?}",
                open.iter().collect::<Vec<_>>()
            ));
        }
        for r in results {
            if !open.remove(r.id.as_str()) {
                return Err(format!(
                    "message {i} has a result for tool call `{}` with no open tool use",
                    r.id
                ));
            }
        }
        for u in m.tool_uses() {
            if !seen.insert(u.id.as_str()) {
                return Err(format!("message {i} repeats tool call id `{}`", u.id));
            }
            open.insert(u.id.as_str());
        }
    }
    Ok(())
}

pub(crate) fn pending_tool_uses(messages: &[Msg]) -> Vec<ToolUse> {
    let Some(pos) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
        return Vec::new();
    };
    let uses = messages[pos].tool_uses();
    if uses.is_empty() {
        return Vec::new();
    }
    let answered: HashSet<&str> = messages[pos + 1..]
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.id.as_str())
        .collect();
    uses.into_iter()
        .filter(|u| !answered.contains(u.id.as_str()))
        .cloned()
        .collect()
}

fn repair(messages: &mut Vec<Msg>, text: &str) {
    let pending = pending_tool_uses(messages);
    if pending.is_empty() {
        return;
    }
    let results = pending
        .into_iter()
        .map(|u| ToolResult::error(u.id, u.name, text));
    messages.push(Msg::tool(results).synthetic());
}
