//! The acting step's use of the effect journal ([`super::journal`]): what an earlier
//! attempt of the session left for each call (replay, re-run, outcome unknown), calls
//! stored as waiting for a human, and the claim and settle writes around execution.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::acting::Planned;
use super::approvals::{ApprovalDecision, ApprovalDecisions};
use super::journal::{Entry, State};
use super::memory::CallMemory;
use super::run::Call;
use crate::context::StopReason;
use crate::error::Error;
use crate::hook::DecisionKind;
use crate::message::{Msg, ToolResult, ToolUse};
use crate::tool::{EffectClass, idempotency_key};

/// What the session already holds about a call, before it is planned.
pub(super) enum Prior {
    /// Nothing: the call goes through admission and `PreActing`.
    Fresh,
    /// Stored as waiting for a human (a stop for approval).
    Awaiting,
    /// Settled by an earlier attempt: its result is replayed, the tool does not run.
    Replay(ToolResult, Option<crate::label::Label>),
    /// Claimed by an earlier attempt and to be run again (an idempotent tool, a human's
    /// retry, a delegation whose subagent waits): no hook is asked again (they saw the
    /// call's final form before it was claimed).
    Rerun {
        class: EffectClass,
        attempt: u32,
        /// A delegation resuming its waiting subagent (not a fresh task).
        resume_child: bool,
        decision: Option<&'static str>,
    },
    /// Claimed by an earlier attempt, outcome unknown, resolved by a human without
    /// running it: this result is recorded.
    Resolved(ToolResult, EffectClass, u32),
    /// Claimed by an earlier attempt, outcome unknown, at-most-once, and no human
    /// resolved it: the call stops.
    Unknown(Entry),
}

/// What [`Call::plan_prior`] made of a call.
pub(super) enum Planning {
    /// Planned already (replayed, re-run, decided by a human): no admission, no hook.
    Done(Box<Planned>),
    /// On to admission and `PreActing`, with the human decision applied to it, if any.
    Admit(ToolUse, Option<&'static str>),
}

impl Prior {
    /// The call cannot proceed until a human decides.
    pub(super) fn blocks(&self) -> bool {
        matches!(self, Prior::Unknown(_))
    }
}

/// Text of the result of a call a human abandoned after its outcome was unknown.
fn abandoned(name: &str, reason: &str) -> String {
    format!(
        "Tool call `{name}` was abandoned by a human after its outcome was unknown (it \
         may or may not have taken effect): {reason}"
    )
}

impl Call<'_> {
    /// What the session holds about each call of a step (see [`Prior`]). Reads the
    /// journal and the stored stop; consumes no decision.
    ///
    /// # Errors
    /// A malformed journal entry ([`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt)):
    /// nothing runs.
    pub(super) fn priors(
        &self,
        memory: &CallMemory,
        uses: &[ToolUse],
    ) -> Result<Vec<Prior>, Error> {
        let decisions = self.ctx.extensions().get::<ApprovalDecisions>();
        let awaiting: HashSet<&str> = match memory.last_metadata(super::PENDING_CALL_IDS_KEY) {
            Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_str).collect(),
            _ => HashSet::new(),
        };
        let mut out = Vec::with_capacity(uses.len());
        for u in uses {
            let decided = decisions.as_deref().and_then(|d| d.get(&u.id)).cloned();
            let entry = if memory.journaling() {
                memory.entry(&u.id).map_err(Error::store)?
            } else {
                None
            };
            let prior = match entry {
                None if awaiting.contains(u.id.as_str()) => Prior::Awaiting,
                None => Prior::Fresh,
                Some(Entry {
                    state: State::Settled,
                    result: Some(result),
                    label,
                    ..
                }) => Prior::Replay(result, label),
                // Settled and recorded: the call is not pending, so this is not reached
                // for a valid history; nothing to run.
                Some(
                    e @ Entry {
                        state: State::Settled,
                        result: None,
                        ..
                    },
                ) => Prior::Unknown(e),
                Some(Entry {
                    state: State::Suspended,
                    class,
                    attempt,
                    ..
                }) => Prior::Rerun {
                    class,
                    attempt: attempt.saturating_add(1),
                    resume_child: true,
                    decision: None,
                },
                Some(e) => match decided.filter(ApprovalDecision::resolves_unknown) {
                    Some(ApprovalDecision::Retry) => Prior::Rerun {
                        class: e.class,
                        attempt: e.attempt.saturating_add(1),
                        resume_child: false,
                        decision: Some("retry"),
                    },
                    Some(ApprovalDecision::RecordOutcome(text)) => {
                        Prior::Resolved(ToolResult::new(&u.id, &u.name, text), e.class, e.attempt)
                    }
                    Some(ApprovalDecision::Deny(reason)) => Prior::Resolved(
                        ToolResult::error(&u.id, &u.name, abandoned(&u.name, &reason)),
                        e.class,
                        e.attempt,
                    ),
                    _ if e.class == EffectClass::AtMostOnce => Prior::Unknown(e),
                    _ => Prior::Rerun {
                        class: e.class,
                        attempt: e.attempt.saturating_add(1),
                        resume_child: false,
                        decision: None,
                    },
                },
            };
            out.push(prior);
        }
        Ok(out)
    }

    /// Plans one call from what the session holds about it ([`Prior`]): a replay, a
    /// re-run or a human's decision gives the planned call at once; otherwise the call
    /// goes on to admission and `PreActing`, with the label of the human decision the
    /// runtime applied to it (an edit is applied to `tool_use` and memory).
    pub(super) fn plan_prior(
        &self,
        memory: &mut CallMemory,
        mut tool_use: ToolUse,
        prior: Prior,
        decisions: Option<&ApprovalDecisions>,
    ) -> Planning {
        let mut human = None;
        match prior {
            Prior::Fresh => {}
            Prior::Replay(result, label) => {
                self.note_runtime(
                    DecisionKind::EffectReplayed,
                    "tool_result",
                    "settled",
                    "an earlier attempt ran this call and settled its result; replayed, not run again",
                    &tool_use.id,
                );
                // A settle before labels were stored: what the tool declares.
                let flow = label.unwrap_or_else(|| self.capabilities(&tool_use.name).result);
                return Planning::Done(Box::new(Planned {
                    replay: Some(result),
                    flow,
                    ..Planned::new(tool_use)
                }));
            }
            Prior::Resolved(result, class, attempt) => {
                let label = if result.is_error {
                    "deny"
                } else {
                    "record_outcome"
                };
                let human = self.note_human(
                    decisions,
                    "tool_result",
                    label,
                    "a human resolved a call whose outcome was unknown",
                    &tool_use.id,
                );
                return Planning::Done(Box::new(Planned {
                    replay: Some(result),
                    journal: Some((class, attempt, Some("resolved"))),
                    human: Some(human),
                    ..Planned::new(tool_use)
                }));
            }
            Prior::Rerun {
                class,
                attempt,
                resume_child,
                decision,
            } => {
                let human = decision.map(|d| {
                    self.note_human(
                        decisions,
                        "tool_use",
                        d,
                        "a human chose to retry a call whose outcome was unknown (same idempotency key)",
                        &tool_use.id,
                    )
                });
                return Planning::Done(Box::new(Planned {
                    journal: Some((class, attempt, decision)),
                    retry: true,
                    resume_child,
                    human,
                    ..Planned::new(tool_use)
                }));
            }
            Prior::Awaiting => {
                match decisions.and_then(|d| d.apply(&tool_use)) {
                    Some(ApprovalDecision::Deny(reason)) => {
                        let human =
                            self.note_human(decisions, "tool_use", "deny", &reason, &tool_use.id);
                        return Planning::Done(Box::new(Planned {
                            denial: Some(reason),
                            human: Some(human),
                            ..Planned::new(tool_use)
                        }));
                    }
                    Some(ApprovalDecision::RecordOutcome(text)) => {
                        let human = self.note_human(
                            decisions,
                            "tool_result",
                            "record_outcome",
                            "a human recorded the result of a call waiting for approval; not run",
                            &tool_use.id,
                        );
                        let result = ToolResult::new(&tool_use.id, &tool_use.name, text);
                        return Planning::Done(Box::new(Planned {
                            replay: Some(result),
                            human: Some(human),
                            ..Planned::new(tool_use)
                        }));
                    }
                    Some(ApprovalDecision::Edit(input)) => {
                        tool_use.input = input;
                        memory.update_tool_use(&tool_use);
                        human = Some("edit");
                    }
                    Some(d) => human = Some(d.label()),
                    None => {
                        // Stored as waiting for a human: it runs only with a
                        // decision, whatever hooks this agent has.
                        let reason = format!(
                            "tool `{}` needs approval and no decision was given for call `{}`",
                            tool_use.name, tool_use.id
                        );
                        self.note_runtime(
                            DecisionKind::ToolDenied,
                            "tool_use",
                            "awaiting_approval",
                            &reason,
                            &tool_use.id,
                        );
                        return Planning::Done(Box::new(Planned {
                            denial: Some(reason),
                            ..Planned::new(tool_use)
                        }));
                    }
                }
                if let Some(d) = human {
                    // The record travels with the call (`decided` in the acting step).
                    let _ = self.note_human(
                        decisions,
                        "tool_use",
                        d,
                        "a human decided on a call stored as waiting for approval",
                        &tool_use.id,
                    );
                }
            }
            // Blocked calls returned above.
            Prior::Unknown(_) => {
                return Planning::Done(Box::new(Planned {
                    rejection: Some(("outcome unknown".to_owned(), "outcome_unknown")),
                    ..Planned::new(tool_use)
                }));
            }
        }
        Planning::Admit(tool_use, human)
    }

    /// Records a human's decision in the trail — with who decided and why, when the
    /// decisions say — and returns it for the call's events.
    fn note_human(
        &self,
        decisions: Option<&ApprovalDecisions>,
        field: &'static str,
        label: &str,
        default_reason: &str,
        id: &str,
    ) -> Box<crate::hook::HumanDecision> {
        let human = match decisions {
            Some(d) => d.human(id, label),
            None => crate::hook::HumanDecision {
                decision: label.to_owned(),
                approver: None,
                reason: None,
            },
        };
        let why = human.reason.as_deref().unwrap_or(default_reason);
        let reason = match &human.approver {
            Some(who) => format!("by {who}: {why}"),
            None => why.to_owned(),
        };
        self.note_runtime(DecisionKind::HumanDecision, field, label, &reason, id);
        Box::new(human)
    }

    /// The reply of a step that cannot proceed until a human decides: the turn's
    /// assistant message with every call whose outcome is unknown listed under
    /// [`PENDING_CALLS_KEY`](super::PENDING_CALLS_KEY) (`status`: `outcome_unknown`),
    /// and why the call stops. The same list is stored on the session's message, so any
    /// replica reads it from the store.
    pub(super) fn blocked(
        &self,
        memory: &mut CallMemory,
        uses: &[ToolUse],
        priors: &[Prior],
    ) -> (Msg, StopReason) {
        let info = &self.agent.info;
        let mut ids = Vec::new();
        let mut calls = Vec::new();
        let mut unknown = false;
        for (u, prior) in uses.iter().zip(priors) {
            let status = match prior {
                Prior::Unknown(e) => {
                    unknown = true;
                    self.note_runtime(
                        DecisionKind::OutcomeUnknown,
                        "tool_use",
                        e.class.as_str(),
                        "the call was started by an earlier attempt and its outcome was never \
                         recorded; it is not run again without a human's decision",
                        &u.id,
                    );
                    json!({
                        "status": "outcome_unknown",
                        "class": e.class.as_str(),
                        "attempt": e.attempt,
                        "idempotency_key": idempotency_key(
                            self.ctx.user_id(), self.ctx.session_id(), &u.id),
                    })
                }
                _ => continue,
            };
            let mut call = json!({
                "id": u.id, "name": u.name, "input": u.input,
                "agent": info.name, "agent_id": info.id,
            });
            if let (Some(obj), Value::Object(extra)) = (call.as_object_mut(), status) {
                obj.extend(extra);
            }
            ids.push(Value::String(u.id.clone()));
            calls.push(call);
        }
        memory.set_last_metadata(super::PENDING_CALL_IDS_KEY, Value::Array(ids));
        memory.set_last_metadata(super::PENDING_CALLS_KEY, Value::Array(calls));
        let msg = memory
            .messages()
            .iter()
            .rev()
            .find(|m| m.role == crate::message::Role::Assistant)
            .cloned()
            .unwrap_or_else(|| Msg::assistant(""));
        debug_assert!(unknown);
        (msg, StopReason::OutcomeUnknown)
    }

    /// The reply of a turn a `PreActing` hook stopped for a human: the turn's assistant
    /// message (with the calls in the form they have now) listing the waiting calls
    /// under [`PENDING_CALLS_KEY`](super::PENDING_CALLS_KEY) — the call that would run,
    /// its `original` form when a hook changed it, `status: awaiting_approval` — and the
    /// same list stored on the session's message.
    pub(super) fn stopped_for_human(&self, memory: &mut CallMemory, planned: &[Planned]) -> Msg {
        let info = &self.agent.info;
        let mut ids = Vec::new();
        let mut calls = Vec::new();
        for p in planned {
            let Some(original) = &p.wait else { continue };
            let u = &p.tool_use;
            let mut call = json!({
                "id": u.id, "name": u.name, "input": u.input,
                "agent": info.name, "agent_id": info.id,
                "status": "awaiting_approval",
            });
            if let (Some(o), Some(obj)) = (original, call.as_object_mut()) {
                obj.insert(
                    "original".to_owned(),
                    json!({"name": o.name, "input": o.input}),
                );
            }
            tracing::info!(target: "rein::approval", tool = %u.name, tool_call_id = %u.id, "stopped for human approval");
            ids.push(Value::String(u.id.clone()));
            calls.push(call);
        }
        memory.set_last_metadata(super::PENDING_CALL_IDS_KEY, Value::Array(ids));
        memory.set_last_metadata(super::PENDING_CALLS_KEY, Value::Array(calls));
        memory
            .messages()
            .iter()
            .rev()
            .find(|m| m.role == crate::message::Role::Assistant)
            .cloned()
            .unwrap_or_else(|| Msg::assistant(""))
    }

    /// Claims, in one save, every call of `claims` (id, class, attempt, the human
    /// decision it consumes) before any of them runs.
    ///
    /// # Errors
    /// The save failed: another holder moved the session on (a conflict, a lost
    /// lease) or the store is unavailable. None of the calls may run.
    pub(super) async fn claim(
        &self,
        memory: &mut CallMemory,
        claims: &[(String, EffectClass, u32, Option<&'static str>)],
    ) -> Result<(), Error> {
        if claims.is_empty() || !memory.journaling() {
            return Ok(());
        }
        for (id, class, attempt, decision) in claims {
            let entry = Entry::claimed(*class, *attempt, decision.map(str::to_owned));
            memory.set_entry(id, &entry);
        }
        memory.checkpoint().await.map_err(Error::store)
    }

    /// Settles, in one save, the results of journaled calls that ended (a suspended
    /// delegation is recorded as such), before any `PostActing` hook sees them.
    ///
    /// # Errors
    /// The save failed. The tools ran; their claims stay, so the next attempt finds
    /// their outcome unknown.
    pub(super) async fn settle(
        &self,
        memory: &mut CallMemory,
        ended: Vec<(Entry, ToolResult, bool, crate::label::Label)>,
    ) -> Result<(), Error> {
        if ended.is_empty() || !memory.journaling() {
            return Ok(());
        }
        for (mut entry, result, suspended, label) in ended {
            let id = result.id.clone();
            if suspended {
                entry.state = State::Suspended;
                entry.result = None;
            } else {
                entry.state = State::Settled;
                entry.result = Some(result);
                entry.label = Some(label);
            }
            memory.set_entry(&id, &entry);
        }
        memory.checkpoint().await.map_err(Error::store)
    }

    /// After the tool message records a journaled call's final result, its entry
    /// drops the settled copy.
    pub(super) fn recorded(&self, memory: &mut CallMemory, id: &str) -> Result<(), Error> {
        if !memory.journaling() {
            return Ok(());
        }
        if let Some(mut entry) = memory.entry(id).map_err(Error::store)?
            && entry.result.is_some()
        {
            entry.result = None;
            memory.set_entry(id, &entry);
        }
        Ok(())
    }
}
