//! What a call keeps in its messages' metadata, stored with the session: the effect
//! journal and pending calls on the last assistant message, and the session's budget
//! record.

use super::CallMemory;
use crate::message::{Msg, Role, ToolUse};
use crate::store::{StoreError, StoreErrorKind};

impl CallMemory {
    /// The last assistant message (the one whose tool uses are acting or pending).
    pub(super) fn last_assistant(&self) -> Option<&Msg> {
        self.guard
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
    }

    /// The journal entry of call `id` on the last assistant message.
    pub(crate) fn entry(
        &self,
        id: &str,
    ) -> Result<Option<crate::agent::journal::Entry>, StoreError> {
        let Some(msg) = self.last_assistant() else {
            return Ok(None);
        };
        crate::agent::journal::entry(msg, id).map_err(|e| self.corrupt(e))
    }

    fn corrupt(&self, why: String) -> StoreError {
        let text = format!("the session's effect journal is not valid: {why}");
        match &self.persistence {
            Some(p) => StoreError::with_kind(StoreErrorKind::Corrupt, &p.key, text),
            None => StoreError::unkeyed(StoreErrorKind::Corrupt, text),
        }
    }

    /// The index of the last assistant message.
    fn last_assistant_index(&self) -> Option<usize> {
        self.guard
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
    }

    /// Message `index`, to change in place (noted for the next save).
    fn changed_mut(&mut self, index: usize) -> Option<&mut Msg> {
        self.guard.changed_at(index);
        self.messages_mut().get_mut(index)
    }

    /// The last assistant message, to change in place (noted for the next save).
    pub(super) fn last_assistant_mut(&mut self) -> Option<&mut Msg> {
        let index = self.last_assistant_index()?;
        self.changed_mut(index)
    }

    /// Writes the journal entry of call `id` on the last assistant message.
    pub(crate) fn set_entry(&mut self, id: &str, entry: &crate::agent::journal::Entry) {
        if let Some(msg) = self.last_assistant_mut() {
            crate::agent::journal::set(msg, id, entry);
        }
    }

    /// Sets a metadata value on the last assistant message (kept with the session).
    pub(crate) fn set_last_metadata(&mut self, key: &str, value: serde_json::Value) {
        if let Some(msg) = self.last_assistant_mut() {
            msg.metadata.insert(key.to_owned(), value);
        }
    }

    /// A metadata value of the last assistant message.
    pub(crate) fn last_metadata(&self, key: &str) -> Option<&serde_json::Value> {
        self.last_assistant().and_then(|m| m.metadata.get(key))
    }

    /// The session's budget record ([`BUDGET_KEY`](crate::budget::BUDGET_KEY)): the
    /// newest one, on the last message that carries one.
    pub(crate) fn budget_record(&self) -> Option<&serde_json::Value> {
        self.guard
            .messages
            .iter()
            .rev()
            .find_map(|m| m.metadata.get(crate::budget::BUDGET_KEY))
    }

    /// Writes the session's budget record on the last assistant message or, while the
    /// session has none (its first call, before the model answered), on its last
    /// message: the call's input, so that the first request's reservation is saved too.
    pub(crate) fn set_budget_record(&mut self, value: serde_json::Value) {
        let index = self
            .last_assistant_index()
            .or_else(|| self.guard.messages.len().checked_sub(1));
        if let Some(msg) = index.and_then(|i| self.changed_mut(i)) {
            msg.metadata
                .insert(crate::budget::BUDGET_KEY.to_owned(), value);
        }
    }

    /// Pending tool uses that an earlier attempt journaled (claimed, settled or
    /// suspended).
    pub(crate) fn journaled_pending(&self) -> Result<Vec<ToolUse>, StoreError> {
        let mut out = Vec::new();
        for u in self.pending_tool_uses() {
            if self.entry(&u.id)?.is_some() {
                out.push(u);
            }
        }
        Ok(out)
    }
}
