//! The effect journal: what the runtime durably knows about each tool call that may
//! have an effect, stored with the session so that every replica sees it.
//!
//! The journal lives in the metadata of the assistant message that carries the tool
//! uses (key [`JOURNAL_KEY`]), so every store — the file and in-memory stores, Redis,
//! PostgreSQL, a user's own — keeps it without a new method, and a store's versioned
//! save is the journal's compare-and-set:
//!
//! 1. **Claim.** Before a call whose tool is not read-only starts, its entry is written
//!    as `claimed` and the session is saved (fenced under the call's lease). A save is
//!    a compare-and-set on the session's version, so of two holders that loaded the
//!    same version only one claim lands; the other fails before its tool runs, and
//!    whoever loads later sees the claim. The call never starts twice, whatever the
//!    lease did.
//! 2. **Settle.** When the tool ends, its raw result is written into the entry
//!    (`settled`) and saved before any `PostActing` hook sees it.
//! 3. **Record.** The result as the hooks left it goes into the tool message; the
//!    entry keeps `settled` without the copy.
//!
//! A call found pending with an entry was started by an earlier attempt of the session
//! (a crashed or cancelled call, another replica): a settled one is replayed from its
//! entry (never re-run); a claimed one is outcome-unknown and handled by its
//! [`EffectClass`]; a `suspended` one (a delegation whose subagent waits for a human)
//! resumes its subagent.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{Msg, ToolResult};
use crate::tool::EffectClass;

/// Metadata key of the journal on an assistant message: an object from tool call id
/// to its entry.
pub const JOURNAL_KEY: &str = "rein.effects";

/// Where a journaled call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    /// Started (or about to): its outcome is unknown until settled.
    Claimed,
    /// Ended; the raw result is in the entry until the tool message records it.
    Settled,
    /// A delegation whose subagent stopped for a human: it resumes its subagent.
    Suspended,
}

/// One call's journal entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    pub(crate) state: State,
    /// The tool's class when the call was claimed.
    pub(crate) class: EffectClass,
    /// Attempts started so far (1 at the first claim).
    pub(crate) attempt: u32,
    /// The settled result, until the tool message records the call's final result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<ToolResult>,
    /// The human decision the claim consumed (`approve`, `edit`, `retry`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decision: Option<String>,
    /// The settled result's label ([`crate::label`]), replayed with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<crate::label::Label>,
}

impl Entry {
    pub(crate) fn claimed(class: EffectClass, attempt: u32, decision: Option<String>) -> Self {
        Self {
            state: State::Claimed,
            class,
            attempt,
            result: None,
            decision,
            label: None,
        }
    }
}

/// The entry of call `id` on `msg`.
///
/// # Errors
/// The journal or the entry is malformed (a hand-edited or forged session): the text
/// names the call and what is wrong.
pub(crate) fn entry(msg: &Msg, id: &str) -> Result<Option<Entry>, String> {
    let Some(journal) = msg.metadata.get(JOURNAL_KEY) else {
        return Ok(None);
    };
    let Value::Object(map) = journal else {
        return Err(format!("metadata `{JOURNAL_KEY}` is not an object"));
    };
    match map.get(id) {
        None => Ok(None),
        Some(v) => parse(id, v).map(Some),
    }
}

fn parse(id: &str, v: &Value) -> Result<Entry, String> {
    let entry: Entry = serde_json::from_value(v.clone())
        .map_err(|e| format!("journal entry `{JOURNAL_KEY}.{id}` is malformed: {e}"))?;
    if let Some(r) = &entry.result
        && r.id != id
    {
        return Err(format!(
            "journal entry `{JOURNAL_KEY}.{id}` holds the result of another call (`{}`)",
            r.id
        ));
    }
    if entry.result.is_some() && entry.state != State::Settled {
        return Err(format!(
            "journal entry `{JOURNAL_KEY}.{id}` holds a result but is not settled"
        ));
    }
    if entry.attempt == 0 {
        return Err(format!(
            "journal entry `{JOURNAL_KEY}.{id}` has attempt 0 (attempts start at 1)"
        ));
    }
    Ok(entry)
}

/// Writes (or replaces) the entry of call `id` on `msg`.
pub(crate) fn set(msg: &mut Msg, id: &str, entry: &Entry) {
    let value = serde_json::to_value(entry).unwrap_or(Value::Null);
    let journal = msg
        .metadata
        .entry(JOURNAL_KEY.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !journal.is_object() {
        *journal = Value::Object(Map::new());
    }
    if let Value::Object(map) = journal {
        map.insert(id.to_owned(), value);
    }
}

/// Checks the journal of one stored message: an object whose keys are tool uses of
/// that message and whose values are well-formed entries.
pub(crate) fn check(msg: &Msg, index: usize) -> Result<(), String> {
    let Some(journal) = msg.metadata.get(JOURNAL_KEY) else {
        return Ok(());
    };
    let Value::Object(map) = journal else {
        return Err(format!(
            "message {index}: metadata `{JOURNAL_KEY}` is not an object"
        ));
    };
    let uses = msg.tool_uses();
    for (id, v) in map {
        if !uses.iter().any(|u| &u.id == id) {
            return Err(format!(
                "message {index}: journal entry `{JOURNAL_KEY}.{id}` names no tool use of this message"
            ));
        }
        parse(id, v).map_err(|e| format!("message {index}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ContentBlock, ToolUse};
    use serde_json::json;

    fn with_use() -> Msg {
        let mut m = Msg::assistant("");
        m.content.push(ContentBlock::ToolUse(ToolUse::new(
            "c1",
            "refund",
            json!({}),
        )));
        m
    }

    #[test]
    fn an_entry_round_trips_through_the_message_metadata() {
        let mut m = with_use();
        let e = Entry::claimed(EffectClass::AtMostOnce, 1, Some("approve".into()));
        set(&mut m, "c1", &e);
        assert_eq!(entry(&m, "c1"), Ok(Some(e)));
        assert_eq!(entry(&m, "c2"), Ok(None));
        assert!(check(&m, 0).is_ok());
    }

    #[test]
    fn a_forged_journal_is_refused_naming_the_field() {
        let mut m = with_use();
        m.metadata
            .insert(JOURNAL_KEY.into(), json!({"c1": {"state": "done"}}));
        let e = check(&m, 3).unwrap_err();
        assert!(
            e.contains("message 3") && e.contains("rein.effects.c1"),
            "{e}"
        );
        m.metadata.insert(
            JOURNAL_KEY.into(),
            json!({"other": {"state": "claimed", "class": "idempotent", "attempt": 1}}),
        );
        assert!(check(&m, 0).unwrap_err().contains("names no tool use"));
        m.metadata.insert(JOURNAL_KEY.into(), json!([1]));
        assert!(check(&m, 0).unwrap_err().contains("not an object"));
        m.metadata.insert(
            JOURNAL_KEY.into(),
            json!({"c1": {"state": "claimed", "class": "idempotent", "attempt": 0}}),
        );
        assert!(check(&m, 0).unwrap_err().contains("attempt 0"));
    }
}
