//! Admitting a call's input: reconciling it with tool uses an earlier call left pending
//! (resume, supplied results, superseded calls) and refusing input that would make
//! memory an invalid history.

use std::collections::HashSet;

use super::memory::CallMemory;
use super::run::{Call, SUPERSEDED};
use crate::error::Error;
use crate::message::{ContentBlock, Msg, Role, ToolUse};

impl Call<'_> {
    /// Adds the call's input to memory, reconciling it with tool uses left pending by
    /// an earlier call. Returns the tool uses to run before reasoning (resume).
    pub(super) fn admit_input(
        &self,
        memory: &mut CallMemory,
        mut input: Vec<Msg>,
    ) -> Result<Option<Vec<ToolUse>>, Error> {
        // The session's budget record is the runtime's: a record in the input would
        // otherwise be read as what the session spent.
        for m in &mut input {
            if !m.metadata.is_empty() {
                m.metadata.remove(crate::budget::BUDGET_KEY);
            }
        }
        let label = self.agent.input_label;
        if !label.is_bottom() {
            for m in &mut input {
                if !m.metadata.contains_key(crate::label::LABEL_KEY) {
                    m.set_label(label);
                }
            }
        }
        let pending = memory.pending_tool_uses();
        let pending_ids: HashSet<&str> = pending.iter().map(|u| u.id.as_str()).collect();
        let exchanges = check_input_exchanges(memory.messages(), &pending_ids, &input)?;
        let mut supplied: HashSet<String> = HashSet::new();
        for (i, msg) in input.iter().enumerate() {
            for r in msg.tool_results() {
                if exchanges.contains(r.id.as_str()) {
                    continue;
                }
                if !pending_ids.contains(r.id.as_str()) {
                    return Err(Error::invalid_input(format!(
                        "call input message {i} has a result for tool call `{}` ({}), which is not pending",
                        r.id, r.name
                    )));
                }
                if !supplied.insert(r.id.clone()) {
                    return Err(Error::invalid_input(format!(
                        "call input has two results for tool call `{}`",
                        r.id
                    )));
                }
            }
        }
        if pending.is_empty() {
            for m in input {
                memory.push(m);
            }
            return Ok(None);
        }
        if input.is_empty() {
            return Ok(Some(pending));
        }
        let only_results = input.iter().all(|m| {
            m.content
                .iter()
                .all(|b| matches!(b, ContentBlock::ToolResult(_)))
        });
        if only_results {
            for m in input {
                memory.push(m);
            }
            let rest: Vec<ToolUse> = pending
                .into_iter()
                .filter(|u| !supplied.contains(&u.id))
                .collect();
            return Ok((!rest.is_empty()).then_some(rest));
        }
        // New input while tools are pending: results supplied alongside are kept, the
        // rest are marked as not executed, then the input is appended.
        let mut results = Vec::new();
        let mut others = Vec::new();
        for mut m in input {
            let (r, o): (Vec<ContentBlock>, Vec<ContentBlock>) = m.content.into_iter().partition(
                |b| matches!(b, ContentBlock::ToolResult(r) if supplied.contains(&r.id)),
            );
            results.extend(r);
            if !o.is_empty() {
                m.content = o;
                others.push(m);
            }
        }
        if !results.is_empty() {
            memory.push(Msg::new(Role::Tool, results));
        }
        memory.repair(SUPERSEDED);
        for m in others {
            memory.push(m);
        }
        Ok(None)
    }
}

/// Checks the tool exchanges a call's input carries itself (an imported assistant
/// message with its tool uses and their results): the input, less the results for
/// tool uses pending in memory, must be a valid history in which every tool use has
/// its result, with ids not used in memory. Returns the ids of those exchanges.
///
/// So memory stays valid: a tool use without a result would be followed by the
/// model's next turn, and the session would no longer load.
fn check_input_exchanges(
    memory: &[Msg],
    pending: &HashSet<&str>,
    input: &[Msg],
) -> Result<HashSet<String>, Error> {
    let mut ids: HashSet<String> = HashSet::new();
    for m in input {
        for u in m.tool_uses() {
            ids.insert(u.id.clone());
        }
    }
    if ids.is_empty() {
        return Ok(ids);
    }
    let rest: Vec<Msg> = input
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.content.retain(
                |b| !matches!(b, ContentBlock::ToolResult(r) if pending.contains(r.id.as_str())),
            );
            m
        })
        .filter(|m| !m.content.is_empty())
        .collect();
    super::history::check_history(&rest)
        .map_err(|e| Error::invalid_input(format!("call input is not a valid history: {e}")))?;
    if let Some(u) = super::history::pending_tool_uses(&rest).first() {
        return Err(Error::invalid_input(format!(
            "call input has tool call `{}` ({}) without a result; give every tool call in \
             the input its result (pending calls are resumed with an empty input instead)",
            u.id, u.name
        )));
    }
    for m in memory {
        for u in m.tool_uses() {
            if ids.contains(u.id.as_str()) {
                return Err(Error::invalid_input(format!(
                    "call input repeats tool call id `{}`, already used in this conversation",
                    u.id
                )));
            }
        }
    }
    Ok(ids)
}
