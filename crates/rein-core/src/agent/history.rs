//! What a valid stored history is, and how a call leaves one: the check a loaded or
//! imported history passes, the tool uses still pending, and the repair that gives
//! pending uses a result (never for calls the effect journal holds as started).

use std::collections::HashSet;

use super::memory::INTERRUPTED;
use crate::message::{ContentBlock, Msg, Role, ToolResult, ToolUse};

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
        super::journal::check(m, i)?;
    }
    Ok(())
}

/// The tool uses of the last assistant message in `messages` that have no result yet, in
/// order: the calls a stopped call (stop for a human, a subagent that stopped, an
/// outcome unknown) left waiting. Empty when the history ends with a settled turn.
pub fn pending_tool_uses(messages: &[Msg]) -> Vec<ToolUse> {
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

/// The bit of tool-use position `p` in a started mask (unknown positions and those
/// past 62 share bit 63, so they count as started: the safe side).
pub(super) fn started_bit(position: Option<usize>) -> u64 {
    match position {
        Some(p) if p < 63 => 1 << p,
        _ => 1 << 63,
    }
}

pub(super) fn repair(messages: &mut Vec<Msg>, text: &str, started: u64) {
    let mut pending = pending_tool_uses(messages);
    if pending.is_empty() {
        return;
    }
    let positions: Vec<(String, u64)> =
        match messages.iter().rev().find(|m| m.role == Role::Assistant) {
            Some(m) => m
                .tool_uses()
                .iter()
                .enumerate()
                .map(|(p, u)| (u.id.clone(), started_bit(Some(p))))
                .collect(),
            None => Vec::new(),
        };
    let was_started = |id: &str| {
        positions
            .iter()
            .any(|(u, bit)| u == id && started & bit != 0)
    };
    let mut ran: Vec<String> = Vec::new();
    if let Some(last) = messages.iter().rev().find(|m| m.role == Role::Assistant)
        && last.metadata.contains_key(super::journal::JOURNAL_KEY)
    {
        // A started call whose outcome is unknown stays pending: the next call on the
        // session surfaces it. A settled one ran: its result is withheld (the hooks
        // never accepted it), and it is not called "not executed".
        pending.retain(|u| match super::journal::entry(last, &u.id) {
            Ok(Some(e)) if e.state == super::journal::State::Settled => {
                ran.push(u.id.clone());
                true
            }
            Ok(Some(_)) => false,
            _ => true,
        });
    }
    if pending.is_empty() {
        return;
    }
    let results = pending.into_iter().map(|u| {
        let text = if ran.contains(&u.id) {
            SETTLED_UNACCEPTED
        } else if was_started(&u.id) {
            INTERRUPTED
        } else {
            text
        };
        ToolResult::error(u.id, u.name, text)
    });
    messages.push(Msg::tool(results).synthetic());
}

/// Result text for a journaled call whose tool ran and settled, in a call that then
/// failed or was cancelled before the hooks accepted the result.
const SETTLED_UNACCEPTED: &str = "the tool ran once and its result was recorded in the effect \
     journal, but the call failed or was cancelled before the result was accepted; it is not \
     run again";

/// Gives a fresh runtime id to every tool use of `msg` whose id the session already
/// used (or that repeats within `msg`): a hook that re-issues an earlier call ("retry
/// the refund") gets a new call, which no earlier decision or journal entry covers,
/// and memory stays loadable. `model_ids` are the ids the runtime gave the model's
/// turn (unique): the history is scanned only when a hook put in another id.
pub(super) fn reid_repeated(msg: &mut Msg, model_ids: &[String], history: &[Msg]) {
    let mut seen: Option<HashSet<String>> = None;
    let mut mine: HashSet<String> = HashSet::new();
    let mut renamed: Vec<(String, String)> = Vec::new();
    for block in &mut msg.content {
        let ContentBlock::ToolUse(u) = block else {
            continue;
        };
        let repeated_here = !mine.insert(u.id.clone());
        let used = repeated_here
            || (!model_ids.contains(&u.id) && {
                let seen = seen.get_or_insert_with(|| {
                    history
                        .iter()
                        .flat_map(|m| m.tool_uses())
                        .map(|t| t.id.clone())
                        .collect()
                });
                seen.contains(&u.id)
            });
        if used {
            let fresh = crate::util::new_id("call");
            tracing::warn!(
                tool = %u.name,
                id = %u.id,
                new_id = %fresh,
                "a tool call reused an id the session already has; it runs under a new id"
            );
            renamed.push((std::mem::replace(&mut u.id, fresh.clone()), fresh.clone()));
            mine.insert(fresh);
        }
    }
    // A stop for approval listed the calls under their old ids.
    for (old, new) in renamed {
        for k in [super::PENDING_CALL_IDS_KEY, super::PENDING_CALLS_KEY] {
            if let Some(serde_json::Value::Array(items)) = msg.metadata.get_mut(k) {
                for item in items {
                    let slot = match item {
                        serde_json::Value::Object(o) => o.get_mut("id"),
                        other => Some(other),
                    };
                    if let Some(v) = slot
                        && v.as_str() == Some(old.as_str())
                    {
                        *v = serde_json::Value::String(new.clone());
                    }
                }
            }
        }
    }
}
