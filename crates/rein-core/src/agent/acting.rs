//! The acting step of the loop: admitting a turn's tool calls, `PreActing` until every
//! hook accepted the final form of each call, execution, `PostActing`.
//!
//! # What a tool call goes through
//! 1. **Admission** (runtime, before any hook): the arguments are normalised once — a
//!    JSON string that holds a JSON object (a double-encoding model or gateway) is
//!    decoded, and the decoded object is what memory records, hooks see and the tool
//!    receives. A call whose arguments are not an object, that names a tool the agent
//!    does not have, whose arguments fail the tool's JSON Schema, or that exceeds the
//!    per-turn call limit is *rejected*: it gets an error result the model can read, no
//!    `PreActing` hook is asked about it (nobody is asked to approve a call that cannot
//!    run), and `PostActing` hooks see the error result.
//! 2. **`PreActing` to a fixed point.** The hooks run in priority order. When a hook
//!    rewrites the call (name or arguments), every hook that ran before it in that pass
//!    — and the rewriting hook itself — has not seen the final form, so they run again
//!    on it; a pass that changes nothing ends the step. After at most
//!    [`MAX_PRE_ACTING_PASSES`] passes without agreement the call is denied. So the call
//!    that runs was seen, in its final form, by every subscribed `PreActing` hook.
//!    A denial is final and ends the step at once.
//! 3. **Execution**: concurrency-safe calls of the turn run together (at most the
//!    agent's tool concurrency at a time), an unsafe call alone; a result longer than the
//!    agent's maximum is truncated with a marker the model can read, recorded in the
//!    decision trail.
//! 4. **`PostActing`** per result, in call order; any hook may stop the loop.

use std::borrow::Cow;
use std::sync::PoisonError;

use serde_json::Value;

use super::approvals::ApprovalDecisions;
use super::effects::{Planning, Prior};
use super::fire::{changed, fire};
use super::memory::CallMemory;
use super::quarantine::{HANDLE_PREFIX, Handles, names_handles, quarantine as quarantine_result};
use super::run::{Call, emit};
use super::stream::AgentEvent;
use crate::error::Error;
use crate::hook::{
    Decision, DecisionKind, Denial, EventKind, HookEvent, HumanDecision, PostActingEvent,
    PreActingEvent,
};
use crate::label::Label;
use crate::message::{Msg, ToolResult, ToolUse};
use crate::model::accumulate::normalize_arguments;
use crate::tool::{EffectClass, ToolSchema, expects};

/// How many `PreActing` passes a call may take before the hooks are considered not to
/// agree on it (the call is then denied). One pass when no hook rewrites; two when the
/// rewriting hooks' outputs are stable.
pub const MAX_PRE_ACTING_PASSES: u32 = 4;

/// How an acting step ended.
pub(super) enum Acted {
    /// Every call has its result; the loop reasons again.
    Continue,
    /// A `PostActing` hook stopped the loop: the turn's tool message.
    Stopped(Msg),
    /// A delegation call was suspended (its subagent waits for a human): the turn's
    /// assistant message, listing the waiting calls in its metadata.
    Suspended(Msg),
    /// Nothing ran: a call is stored as waiting for a human without a decision, or an
    /// earlier attempt left a call whose outcome is unknown. The turn's assistant
    /// message listing them, and the stop reason.
    Blocked(Msg, crate::context::StopReason),
}

/// What running one call gave: its result, or the calls it was suspended on, and the
/// label of the result.
pub(super) type Ran = (ToolResult, Option<Vec<Value>>, Label);

/// A tool call after admission and `PreActing`.
pub(super) struct Planned {
    pub(super) tool_use: ToolUse,
    /// Why a hook denied it.
    pub(super) denial: Option<String>,
    /// Why the runtime refused it before any hook saw it, with the status label.
    pub(super) rejection: Option<(String, &'static str)>,
    /// Its arguments are exactly what admission validated against the tool's schema
    /// (no hook rewrote the call): execution need not validate them again.
    pub(super) checked: bool,
    /// Its result is known already (settled by an earlier attempt, or recorded by a
    /// human): the tool does not run.
    pub(super) replay: Option<ToolResult>,
    /// Journaled: the class, the attempt and the human decision its claim consumes.
    pub(super) journal: Option<(EffectClass, u32, Option<&'static str>)>,
    /// Claimed before and run again ([`ToolContext::is_retry`]).
    pub(super) retry: bool,
    /// A delegation resuming its waiting subagent.
    pub(super) resume_child: bool,
    /// A hook stopped the call for a human: with the model's original form when a hook
    /// changed it.
    pub(super) wait: Option<Option<ToolUse>>,
    /// What a human decided about the call (for `PostActing` and the audit).
    pub(super) human: Option<Box<HumanDecision>>,
    /// Its arguments with the quarantined documents they name substituted (what the
    /// tool receives; memory and hooks keep the handles).
    pub(super) args: Option<Value>,
    /// For a call that runs: the label of the documents its arguments name. For a
    /// replay: the label of the settled result.
    pub(super) flow: Label,
}

impl Planned {
    pub(super) fn new(tool_use: ToolUse) -> Self {
        Self {
            tool_use,
            denial: None,
            rejection: None,
            checked: false,
            replay: None,
            journal: None,
            retry: false,
            resume_child: false,
            wait: None,
            human: None,
            args: None,
            flow: Label::BOTTOM,
        }
    }

    /// Whether its tool runs.
    pub(super) fn runs(&self) -> bool {
        self.rejection.is_none() && self.denial.is_none() && self.replay.is_none()
    }
}

/// A call as the `PreActing` hooks left it.
struct PreActed {
    tool_use: ToolUse,
    denial: Option<Denial>,
    /// A hook changed the call.
    changed: bool,
    /// A hook stopped the call for a human ([`PreActingEvent::stop_for_human`]).
    wait: bool,
    /// The call as admitted, when a hook changed it.
    original: Option<ToolUse>,
}

impl Call<'_> {
    /// Admission, `PreActing` for each call, execution, `PostActing` for each result.
    /// Returns the turn's tool message when a hook stopped the loop.
    pub(super) async fn act(
        &mut self,
        memory: &mut CallMemory,
        uses: Vec<ToolUse>,
    ) -> Result<Acted, Error> {
        // The calls were made by the last model turn (or, resumed, by a stored one).
        self.label = memory
            .messages()
            .iter()
            .rev()
            .find(|m| m.role == crate::message::Role::Assistant)
            .map_or(Label::BOTTOM, Msg::label);
        let limit = self.agent.limits.max_tool_calls_per_turn;
        let total = uses.len();
        let journaling = memory.journaling();
        // What the session holds about these calls (journal, stored stop); none on an
        // agent without a store whose turn was not stopped for a human.
        let priors = if journaling || memory.last_metadata(super::PENDING_CALL_IDS_KEY).is_some() {
            self.priors(memory, &uses)?
        } else {
            Vec::new()
        };
        if priors.iter().any(Prior::blocks) {
            let (msg, reason) = self.blocked(memory, &uses, &priors);
            return Ok(Acted::Blocked(msg, reason));
        }
        let decisions = priors
            .iter()
            .any(|p| !matches!(p, Prior::Fresh | Prior::Replay(..)))
            .then(|| self.ctx.extensions().get::<ApprovalDecisions>())
            .flatten();
        let mut priors = priors.into_iter();
        let mut planned = Vec::with_capacity(uses.len());
        // The session's quarantined documents, loaded once a call names one.
        let mut handles: Option<Handles> = None;
        for (n, tool_use) in uses.into_iter().enumerate() {
            let prior = priors.next().unwrap_or(Prior::Fresh);
            let (mut tool_use, human) =
                match self.plan_prior(memory, tool_use, prior, decisions.as_deref()) {
                    Planning::Done(p) => {
                        planned.push(*p);
                        continue;
                    }
                    Planning::Admit(u, human) => (u, human),
                };
            let decided = human.map(|label| {
                let d = decisions.as_deref().map(|d| d.human(&tool_use.id, label));
                Box::new(d.unwrap_or_else(|| HumanDecision {
                    decision: label.to_owned(),
                    approver: None,
                    reason: None,
                }))
            });
            let rejection = if n >= limit {
                Some((
                    format!(
                        "Tool call `{}` was not executed: the model asked for {total} tool \
                         calls in one turn and at most {limit} run; call fewer tools at once",
                        tool_use.name
                    ),
                    "too_many_calls",
                ))
            } else {
                self.admit(memory, &mut tool_use)
                    .or_else(|| self.admit_tool_budget(&tool_use.name))
            };
            if let Some((reason, status)) = rejection {
                // The model reads the schema's messages (they quote the values it
                // sent); the trail and the logs get the failing paths only.
                let recorded = if status == "invalid_arguments" {
                    without_values(&tool_use.name, &reason)
                } else {
                    reason.clone()
                };
                self.note_runtime(
                    DecisionKind::ToolCallRejected,
                    "tool_use",
                    status,
                    &recorded,
                    &tool_use.id,
                );
                planned.push(Planned {
                    rejection: Some((reason, status)),
                    ..Planned::new(tool_use)
                });
                continue;
            }
            let journal = journaling
                .then(|| self.effect_class(&tool_use.name))
                .filter(|c| c.is_journaled())
                .map(|c| (c, 1, human));
            if !self.wants(EventKind::PreActing) {
                planned.push(Planned {
                    checked: true,
                    journal,
                    ..Planned::new(tool_use)
                });
                continue;
            }
            if handles.is_none() && names_handles(&tool_use.input) {
                handles = Some(Handles::of(memory.messages()));
            }
            let mut e = self
                .pre_acting(tool_use, decided.clone(), handles.as_ref())
                .await?;
            if human.is_some() && e.changed && e.denial.is_none() {
                // The human decided on the call as stored; a hook changed it since.
                let reason = format!(
                    "the decision for call `{}` was made for the call as it was stored; a hook \
                     changed the call after it was decided, so it was not run",
                    e.tool_use.id
                );
                self.note_runtime(
                    DecisionKind::ToolDenied,
                    "tool_use",
                    "changed_after_decision",
                    &reason,
                    &e.tool_use.id,
                );
                e.denial = Some(crate::hook::Denial { hook: None, reason });
            }
            // A rename makes it another tool's call: that tool's budget decides.
            if e.changed
                && e.denial.is_none()
                && let Some(from) = e.original.as_ref().map(|o| o.name.as_str())
                && from != e.tool_use.name
                && let Some((reason, status)) = self.retarget_tool_budget(from, &e.tool_use.name)
            {
                self.note_runtime(
                    DecisionKind::ToolCallRejected,
                    "tool_use",
                    status,
                    &reason,
                    &e.tool_use.id,
                );
                e.denial = Some(crate::hook::Denial { hook: None, reason });
            }
            if e.changed {
                memory.update_tool_use(&e.tool_use);
            }
            #[cfg(feature = "metrics")]
            if let Some(d) = &e.denial {
                self.agent.metric_keys.denial(
                    d.hook.as_deref().unwrap_or("<runtime>"),
                    crate::observe::metrics_impl::tool_label(
                        self.agent.tool_labels.as_deref(),
                        &e.tool_use.name,
                    ),
                );
            }
            // A rename changes the tool, and with it the class.
            let journal = if e.changed {
                journaling
                    .then(|| self.effect_class(&e.tool_use.name))
                    .filter(|c| c.is_journaled())
                    .map(|c| (c, 1, human))
            } else {
                journal
            };
            planned.push(Planned {
                checked: !e.changed,
                denial: e.denial.map(|d| d.reason),
                journal,
                wait: e.wait.then_some(e.original),
                human: decided,
                ..Planned::new(e.tool_use)
            });
        }
        // A hook stopped for a human: nothing of the turn runs; the calls wait in the
        // form they have now.
        if planned.iter().any(|p| p.wait.is_some()) {
            let msg = self.stopped_for_human(memory, &planned);
            return Ok(Acted::Blocked(
                msg,
                crate::context::StopReason::ReasoningStopped,
            ));
        }
        self.substitute_documents(memory, &mut planned, &mut handles);
        // Claimed durably before any of them starts.
        let claims: Vec<_> = planned
            .iter()
            .filter(|p| p.runs())
            .filter_map(|p| p.journal.map(|(c, a, d)| (p.tool_use.id.clone(), c, a, d)))
            .collect();
        self.claim(memory, &claims).await?;
        for p in &planned {
            emit(self.sink, || AgentEvent::ToolCall(p.tool_use.clone()));
        }
        let results = self.execute(memory, &planned).await?;
        let mut stop = false;
        let mut batch = None;
        let mut waiting: Vec<Value> = Vec::new();
        let mut suspended = false;
        let mut quarantined = 0;
        let mut known_documents: Option<usize> = None;
        for (p, (result, pending, label)) in planned.into_iter().zip(results) {
            if let Some(pending) = pending {
                // No result: the call stays pending in memory and runs again when the
                // session resumes (the subagent then resumes where it stopped).
                suspended = true;
                waiting.extend(pending);
                continue;
            }
            // What the tool returned (not a refusal of the runtime's) may be quarantined.
            let quarantine =
                (p.runs() || p.replay.is_some()) && self.capabilities(&p.tool_use.name).quarantined;
            let mut result = if self.wants(EventKind::PostActing) {
                let (result, stopped) = fire!(self, PostActing(PostActingEvent {
                    meta: self.meta.clone(),
                    tool_use: p.tool_use,
                    result,
                    denied: p.denial.is_some(),
                    stop: false,
                    human: p.human,
                }) => { result, stop });
                stop |= stopped;
                result
            } else {
                result
            };
            // The hooks saw the text; the model and the stream see the handle.
            let (label, document) = if quarantine {
                // Counted before this step stored any (the numbering is the session's).
                let known = *known_documents.get_or_insert_with(|| match &handles {
                    Some(h) => h.len(),
                    None => Handles::of(memory.messages()).len(),
                });
                quarantined += 1;
                let handle = format!("{HANDLE_PREFIX}{}", known + quarantined);
                let doc = quarantine_result(&mut result, &handle, label);
                (Label::BOTTOM, Some((handle, doc)))
            } else {
                (label, None)
            };
            emit(self.sink, || AgentEvent::ToolResult(result.clone()));
            let id = (journaling && (p.journal.is_some() || p.replay.is_some()))
                .then(|| result.id.clone());
            batch = Some(memory.record_labelled(batch, result, label, document));
            if let Some(id) = id {
                self.recorded(memory, &id)?;
            }
        }
        if suspended {
            let mut msg = memory
                .messages()
                .iter()
                .rev()
                .find(|m| m.role == crate::message::Role::Assistant)
                .cloned()
                .unwrap_or_else(|| Msg::assistant(""));
            let ids: Vec<Value> = waiting
                .iter()
                .filter_map(|w| w.get("id").cloned())
                .collect();
            // Stored too: any replica reads what waits below this call from the store.
            memory.set_last_metadata(super::PENDING_CALL_IDS_KEY, Value::Array(ids.clone()));
            memory.set_last_metadata(super::PENDING_CALLS_KEY, Value::Array(waiting.clone()));
            msg.metadata
                .insert(super::PENDING_CALL_IDS_KEY.to_owned(), Value::Array(ids));
            msg.metadata
                .insert(super::PENDING_CALLS_KEY.to_owned(), Value::Array(waiting));
            return Ok(Acted::Suspended(msg));
        }
        if stop {
            let msg = batch
                .and_then(|i| memory.messages().get(i).cloned())
                .unwrap_or_else(|| Msg::tool([]));
            return Ok(Acted::Stopped(msg));
        }
        Ok(Acted::Continue)
    }

    /// Admission of one call before any hook: normalises its arguments (memory records
    /// the normalised form), checks the tool exists and the arguments fit its schema.
    /// Returns the rejection text and status when the call cannot run.
    fn admit(
        &self,
        memory: &mut CallMemory,
        tool_use: &mut ToolUse,
    ) -> Option<(String, &'static str)> {
        let name = tool_use.name.as_str();
        match normalize_arguments(&mut tool_use.input) {
            Ok(true) => memory.update_tool_use(tool_use),
            Ok(false) => {}
            Err(why) => {
                return Some((
                    format!("Invalid arguments for tool `{name}`: {why}"),
                    "invalid_arguments",
                ));
            }
        }
        let depth = crate::store::storable::depth(&tool_use.input);
        if depth > crate::tool::MAX_ARGUMENT_DEPTH {
            // Memory records an empty object instead: the session must stay storable.
            tool_use.input = Value::Object(serde_json::Map::new());
            memory.update_tool_use(tool_use);
            return Some((
                format!(
                    "Invalid arguments for tool `{name}`: nested {depth} levels deep; at most {} \
                     levels are accepted (the call is recorded with empty arguments)",
                    crate::tool::MAX_ARGUMENT_DEPTH
                ),
                "invalid_arguments",
            ));
        }
        let Some(entry) = self.agent.toolkit.entry(name) else {
            return Some((self.unknown_tool(name), "unknown_tool"));
        };
        match entry.prepare(&tool_use.input) {
            Ok(None) => None,
            Ok(Some(pruned)) => {
                // What runs is what hooks and memory see (explicit nulls of optional
                // properties pruned).
                tool_use.input = pruned;
                memory.update_tool_use(tool_use);
                None
            }
            Err(msg) => Some((
                self.invalid_arguments(&entry.schema, &msg),
                "invalid_arguments",
            )),
        }
    }

    /// The error result of arguments that fail the tool's schema: what is wrong, then
    /// exactly what to send (the fields of the schema offered to the model this step,
    /// e.g. the subagent ids `agent_spawn` accepts now).
    pub(super) fn invalid_arguments(&self, declared: &ToolSchema, why: &str) -> String {
        let name = &declared.name;
        let offered = match &self.agent.delegation {
            Some(d) => d.schemas(std::slice::from_ref(declared)).pop(),
            None => None,
        };
        let schema = offered.as_ref().unwrap_or(declared);
        format!(
            "Invalid arguments for tool `{name}`: {why}. {}",
            expects(name, &schema.parameters)
        )
    }

    pub(super) fn unknown_tool(&self, name: &str) -> String {
        let available = self.agent.tool_names.join(", ");
        format!("Unknown tool `{name}`. Available tools: [{available}]")
    }

    /// Runs the `PreActing` hooks on one call until a pass changes nothing (see the
    /// module docs), denying it when they do not agree within
    /// [`MAX_PRE_ACTING_PASSES`]. Returns the call as the hooks left it, their denial,
    /// and whether a hook changed it (taken out of the event field by field, never
    /// moving the whole event).
    async fn pre_acting(
        &self,
        tool_use: ToolUse,
        human: Option<Box<HumanDecision>>,
        handles: Option<&Handles>,
    ) -> Result<PreActed, Error> {
        let chain = &self.agent.chain;
        let full = chain.subscribers(EventKind::PreActing);
        let mut event = PreActingEvent::new(self.meta.clone(), tool_use);
        event.human = human;
        event.label = self.label;
        let mut ev = HookEvent::PreActing(event);
        let mut stale: Cow<'_, [u16]> = Cow::Borrowed(full);
        let mut passes = 0;
        loop {
            passes += 1;
            if let HookEvent::PreActing(e) = &mut ev {
                e.changed_by = None;
                if passes > 1 {
                    // Each pass is a new dispatch: a new timestamp.
                    e.meta.restamp();
                }
                // What the call names now (a rewrite may rename it or add a handle).
                e.capabilities = self.capabilities(&e.tool_use.name);
                e.argument_label = handles.map_or(Label::BOTTOM, |h| h.label_of(&e.tool_use.input));
            }
            super::fire::dispatch!(self, &mut ev, &stale)?;
            let HookEvent::PreActing(e) = &mut ev else {
                return Err(changed("PreActing"));
            };
            if e.denial.is_some() {
                break;
            }
            let Some(by) = e.changed_by else { break };
            if passes >= MAX_PRE_ACTING_PASSES {
                let hook = chain
                    .entries()
                    .get(usize::from(by))
                    .map_or("<runtime>", |h| &*h.name);
                e.meta.current = None;
                e.deny(format!(
                    "the PreActing hooks did not agree on this call after \
                     {MAX_PRE_ACTING_PASSES} passes (last rewrite by `{hook}`)"
                ));
                self.keep_trail(&mut ev);
                break;
            }
            // The hooks after the last rewrite in this pass saw the final form; every
            // other subscriber runs again.
            let seen: &[u16] = match stale.iter().position(|&i| i == by) {
                Some(p) => &stale[p + 1..],
                None => &[],
            };
            let next: Vec<u16> = full.iter().copied().filter(|i| !seen.contains(i)).collect();
            stale = Cow::Owned(next);
        }
        match ev {
            HookEvent::PreActing(PreActingEvent {
                tool_use,
                denial,
                changed: rewritten,
                wait,
                original,
                ..
            }) => Ok(PreActed {
                wait: wait && denial.is_none(),
                tool_use,
                denial,
                changed: rewritten,
                original: original.map(|o| *o),
            }),
            _ => Err(changed("PreActing")),
        }
    }

    /// Gives every call that runs the text of the quarantined documents its arguments
    /// name (after `PreActing`: hooks saw the handles), with their label; a call
    /// naming a document the session does not hold is refused.
    fn substitute_documents(
        &self,
        memory: &CallMemory,
        planned: &mut [Planned],
        handles: &mut Option<Handles>,
    ) {
        for p in planned.iter_mut() {
            if !p.runs() || p.wait.is_some() || !names_handles(&p.tool_use.input) {
                continue;
            }
            let h = handles.get_or_insert_with(|| Handles::of(memory.messages()));
            match h.substitute(&p.tool_use.input) {
                Ok(Some(args)) => {
                    p.flow = h.label_of(&p.tool_use.input);
                    p.args = Some(args);
                    // The tool's schema is checked on what it receives.
                    p.checked = false;
                }
                Ok(None) => {}
                Err(handle) => {
                    let reason = format!(
                        "Tool call `{}` was not executed: its arguments name document `{handle}`, \
                         which this session does not hold",
                        p.tool_use.name
                    );
                    self.note_runtime(
                        DecisionKind::ToolCallRejected,
                        "tool_use",
                        "unknown_document",
                        &reason,
                        &p.tool_use.id,
                    );
                    p.journal = None;
                    p.rejection = Some((reason, "unknown_document"));
                }
            }
        }
    }

    /// Records a decision the runtime made (rejections, truncations).
    pub(super) fn note_runtime(
        &self,
        kind: DecisionKind,
        field: &'static str,
        before: &str,
        reason: &str,
        tool_call_id: &str,
    ) {
        if !self.meta.mode.on {
            return;
        }
        let d = Decision {
            hook: "<runtime>".to_owned(),
            priority: 0,
            event: EventKind::PreActing,
            kind,
            field,
            before: before.to_owned(),
            after: String::new(),
            reason: Some(reason.to_owned()),
            agent_id: self.agent.info.id.clone(),
            tool_call_id: Some(tool_call_id.to_owned()),
            agent_path: self.agent.info.name.clone(),
            changes: Vec::new(),
        };
        self.keep_runtime(d);
    }

    /// Keeps a decision the runtime made (not a hook): emitted on the current span,
    /// forwarded to a delegating call's trail, kept in this call's.
    pub(super) fn keep_runtime(&self, d: Decision) {
        crate::hook::emit_decision(&d);
        self.forward(std::slice::from_ref(&d));
        self.trail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(d);
    }

    /// Sends decisions this call recorded on to the delegating call, when this call is
    /// a subagent's and its parent records decisions (see [`Forward`]).
    pub(super) fn forward(&self, made: &[Decision]) {
        let sink = self.ctx.decision_sink();
        if sink.is_some() {
            for d in made {
                crate::hook::forward(sink, d);
            }
        }
    }
}

/// The trail's form of an invalid-arguments rejection: the tool and the failing paths
/// (the `at \`/path\`` parts of the schema's messages), never the values.
fn without_values(tool: &str, reason: &str) -> String {
    let mut paths: Vec<&str> = Vec::new();
    let mut rest = reason;
    while let Some(i) = rest.find("at `") {
        let after = &rest[i + 4..];
        let Some(end) = after.find('`') else { break };
        let path = &after[..end];
        if !paths.contains(&path) {
            paths.push(path);
        }
        rest = &after[end + 1..];
    }
    if paths.is_empty() {
        format!("Invalid arguments for tool `{tool}` (values not recorded)")
    } else {
        format!(
            "Invalid arguments for tool `{tool}` at {} (values not recorded)",
            paths.join(", ")
        )
    }
}
