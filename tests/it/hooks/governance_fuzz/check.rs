//! The invariants, checked over everything one case recorded, across the whole tree.

use std::collections::HashSet;

use proptest::prelude::*;
use rein::hooks::{ApprovalDecisions, SensitiveDataMasker};
use rein::*;

use super::case::{Case, DECLS, FACTORY, Kind, MARKDOWN, PII, TOOLS};
use super::hooks::{CallRec, Obs, interest_of};
use super::{CHILD_APPROVALS_SURFACE, CHILD_STREAMS_MASKED, checked};

/// One hook in an agent's chain: label, subscribed to `PreActing`, propagates.
type Link = (String, bool, bool);

/// The hooks installed on the root, in any order.
pub fn root_chain(case: &Case) -> Vec<Link> {
    let mut chain: Vec<Link> = case
        .hooks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let pre = interest_of(&h.kind).contains(EventKind::PreActing);
            (format!("r{i}"), pre, h.propagate)
        })
        .collect();
    chain.push(("probe".into(), true, true));
    if !matches!(case.approval, super::case::Approval::None) {
        chain.push(("approve".into(), true, true));
    }
    if case.mask.is_some() {
        chain.push(("mask".into(), false, true));
    }
    chain
}

/// The chain of the agent `id`: its parent's propagating hooks, then its own.
fn chain(case: &Case, obs: &Obs, id: &str) -> Vec<Link> {
    let Some(rec) = obs.agents.get(id) else {
        return Vec::new();
    };
    let Some(parent) = &rec.parent else {
        return root_chain(case);
    };
    let mut out: Vec<Link> = chain(case, obs, parent)
        .into_iter()
        .filter(|l| l.2)
        .collect();
    if let Some(i) = DECLS.iter().position(|d| *d == rec.name) {
        for (j, h) in case.decls[i].hooks.iter().enumerate() {
            let pre = interest_of(&h.kind).contains(EventKind::PreActing);
            out.push((format!("{}.{j}", rec.name), pre, h.propagate));
        }
    }
    out
}

/// The allowlist of a declared subagent (empty: no narrowing).
pub fn allowlist(case: &Case, name: &str) -> Vec<String> {
    if name == FACTORY {
        return vec!["lookup".into()];
    }
    if name == MARKDOWN {
        let allow = case.markdown.as_deref().unwrap_or_default();
        return allow.iter().map(|t| t.to_string()).collect();
    }
    DECLS
        .iter()
        .position(|d| *d == name)
        .map(|i| case.decls[i].allow.iter().map(|t| t.to_string()).collect())
        .unwrap_or_default()
}

pub fn has_subagents(case: &Case) -> bool {
    !case.decls.is_empty() || case.general_purpose || case.factory || case.markdown.is_some()
}

/// The tools the agent `id` may run.
fn bound(case: &Case, obs: &Obs, id: &str) -> HashSet<String> {
    let Some(rec) = obs.agents.get(id) else {
        return HashSet::new();
    };
    let Some(parent) = &rec.parent else {
        let mut all: HashSet<String> = TOOLS.iter().map(|t| t.to_string()).collect();
        if has_subagents(case) {
            all.insert(SPAWN_TOOL.into());
        }
        return all;
    };
    let allow = allowlist(case, &rec.name);
    bound(case, obs, parent)
        .into_iter()
        .filter(|t| allow.is_empty() || allow.contains(t))
        .filter(|t| t != SPAWN_TOOL || (allow.contains(t) && rec.depth < case.max_depth))
        .collect()
}

fn saw(obs: &Obs, label: &str, call: &CallRec) -> bool {
    obs.seen.iter().any(|(l, c)| l == label && c == call)
}

/// Every executed call (and every spawned child) was seen in its final form by every
/// `PreActing` hook of its agent's chain, was not denied, is inside the agent's bound,
/// and had an approval when one was required.
pub fn governance(case: &Case, obs: &Obs) -> Result<(), TestCaseError> {
    for v in &obs.violations {
        prop_assert!(false, "{}", v);
    }
    let approvals = !matches!(case.approval, super::case::Approval::None);
    let mut ids = HashSet::new();
    for (call, tag) in &obs.executed {
        let Some(agent) = obs.agents.get(&call.agent) else {
            prop_assert!(false, "{:?} ran in an agent no hook saw", call);
            unreachable!();
        };
        checked(1);
        prop_assert!(
            *tag != "rogue",
            "a factory's own `{}` instance ran in {} (bound is by instance)",
            call.name,
            agent.name
        );
        checked(1);
        prop_assert!(ids.insert(call.id.clone()), "call id {} ran twice", call.id);
        checked(1);
        prop_assert!(
            !obs.model_ids.contains(&call.id),
            "the model's id {} was trusted",
            call.id
        );
        let links = chain(case, obs, &call.agent);
        for (label, _, _) in links.iter().filter(|l| l.1) {
            checked(1);
            prop_assert!(
                saw(obs, label, call),
                "{} ran {:?} that hook {} never saw in that form",
                agent.name,
                call,
                label
            );
        }
        checked(1);
        prop_assert!(
            !obs.denied.contains(&(call.agent.clone(), call.id.clone())),
            "{:?} ran after a denial",
            call
        );
        checked(1);
        prop_assert!(
            bound(case, obs, &call.agent).contains(&call.name),
            "{} ran {} outside its bound {:?}",
            agent.name,
            call.name,
            bound(case, obs, &call.agent)
        );
        if approvals && call.name == "refund" && links.iter().any(|l| l.0 == "approve") {
            checked(1);
            let approved = obs.approvals.iter().any(|a| {
                a.call.id == call.id
                    && (a.call.agent.is_empty() || a.call.agent == call.agent)
                    && match &a.approved {
                        None => true,
                        Some(args) => *args == call.input && a.call.name == call.name,
                    }
            });
            prop_assert!(approved, "{:?} ran without an approval of that form", call);
        }
    }
    for (n, (child, task)) in obs.child_runs.iter().enumerate() {
        let rec = &obs.agents[child];
        if task.is_empty() {
            // A resumed child (its delegation call waited for a human): it ran before.
            checked(1);
            // By name: on another replica (a rebuilt agent) the same child has a new id.
            prop_assert!(
                obs.child_runs[..n]
                    .iter()
                    .any(|(c, t)| obs.agents[c].name == rec.name && !t.is_empty()),
                "child {} resumed without having run",
                rec.name
            );
            continue;
        }
        let parent = rec.parent.clone().unwrap_or_default();
        checked(2);
        prop_assert!(
            rec.depth <= case.max_depth,
            "{} runs at depth {} > {}",
            rec.name,
            rec.depth,
            case.max_depth
        );
        prop_assert!(
            bound(case, obs, &parent).contains(SPAWN_TOOL),
            "{} spawned {} without the delegation tool",
            obs.agents[&parent].name,
            rec.name
        );
        let links = chain(case, obs, &parent);
        let ok = obs.seen.iter().any(|(l, c)| {
            l == "probe"
                && c.agent == parent
                && c.name == SPAWN_TOOL
                && c.input["agent_id"] == rec.name.as_str()
                && c.input["task"] == task.as_str()
                && !obs.denied.contains(&(c.agent.clone(), c.id.clone()))
                && links.iter().filter(|l| l.1).all(|(l, _, _)| saw(obs, l, c))
        });
        checked(1);
        prop_assert!(
            ok,
            "child {} ran a task no accepted spawn call of its parent carried",
            rec.name
        );
    }
    // Admission: a call reaches the hooks only with object arguments and a tool its
    // agent has.
    let mut first = HashSet::new();
    for (_, c) in &obs.seen {
        if first.insert((c.agent.clone(), c.id.clone())) {
            checked(2);
            prop_assert!(c.input.is_object(), "a hook was shown {:?}", c);
            prop_assert!(
                bound(case, obs, &c.agent).contains(&c.name),
                "a hook was asked about {:?}, a tool its agent does not have",
                c
            );
        }
    }
    Ok(())
}

/// With stop-for-human approvals, a child's waiting calls surface on a top-level reply.
pub fn child_approvals(obs: &Obs, surfaced: &[String]) -> Result<(), TestCaseError> {
    if !CHILD_APPROVALS_SURFACE {
        return Ok(());
    }
    for (agent, ids) in &obs.stopped_for_human {
        if obs.agents.get(agent).is_some_and(|a| a.parent.is_some()) {
            for id in ids {
                checked(1);
                prop_assert!(
                    surfaced.contains(id),
                    "a child's call {} waits for a human the caller was never told about",
                    id
                );
            }
        }
    }
    Ok(())
}

/// `text` holds no personal data: none the masker finds, and none of [`PII`] verbatim
/// (the masker does not see a number glued to the `n` of an escaped line end, so `find`
/// alone would miss that leak).
fn leak(masker: &SensitiveDataMasker, what: &str, text: &str) -> Result<(), TestCaseError> {
    checked(1);
    let found = masker.find(text);
    prop_assert!(found.is_empty(), "{} leaks {:?} in {:?}", what, found, text);
    let verbatim: Vec<_> = PII.iter().filter(|p| text.contains(*p)).collect();
    prop_assert!(
        verbatim.is_empty(),
        "{} leaks {:?} in {:?}",
        what,
        verbatim,
        text
    );
    Ok(())
}

/// No tool result in `memory` holds personal data (tool results are masked).
pub fn masked_results(masker: &SensitiveDataMasker, memory: &[Msg]) -> Result<(), TestCaseError> {
    for m in memory {
        for r in m.tool_results() {
            leak(masker, "a tool result in the root's memory", &r.content)?;
        }
    }
    Ok(())
}

/// The visible text of a message: text, thinking and tool-result blocks.
pub fn visible(msg: &Msg) -> Vec<String> {
    msg.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.clone()),
            ContentBlock::Thinking(t) => Some(t.text.clone()),
            ContentBlock::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

pub fn masked_reply(masker: &SensitiveDataMasker, reply: &Msg) -> Result<(), TestCaseError> {
    for t in visible(reply) {
        leak(masker, "the masked reply", &t)?;
    }
    Ok(())
}

/// No item of a masked stream holds personal data, nor does any run of consecutive
/// deltas (what a UI shows joined). Tool-call events carry arguments, which are never
/// masked; tool-result events are masked by the stream whether or not the hook masks
/// tool results (inside their JSON string literals too).
pub fn masked_stream(
    masker: &SensitiveDataMasker,
    events: &[AgentEvent],
) -> Result<(), TestCaseError> {
    let mut runs: std::collections::HashMap<(String, bool), String> = Default::default();
    let mut check = |path: &str, event: &AgentEvent| -> Result<(), TestCaseError> {
        let what = format!("the masked stream (at `{path}`)");
        match event {
            AgentEvent::TextDelta(t) | AgentEvent::ThinkingDelta(t) => {
                leak(masker, &what, t)?;
                let key = (path.to_owned(), matches!(event, AgentEvent::TextDelta(_)));
                let run = runs.entry(key).or_default();
                run.push_str(t);
                leak(masker, &what, run)?;
            }
            other => {
                runs.retain(|(p, _), _| p != path);
                match other {
                    AgentEvent::ToolResult(r) => leak(masker, &what, &r.content)?,
                    AgentEvent::Final(o) => masked_reply(masker, &o.reply)?,
                    _ => {}
                }
            }
        }
        Ok(())
    };
    for e in events {
        let mut path = "root".to_owned();
        let mut e = e;
        while let AgentEvent::Subagent { path: p, event } = e {
            path = p.clone();
            e = event;
        }
        if path != "root" && !CHILD_STREAMS_MASKED {
            continue;
        }
        check(&path, e)?;
    }
    Ok(())
}

/// Whether the root chain can make the call itself fail: an aborting failing hook, or
/// a redo hook (too many redos).
pub fn may_fail(case: &Case) -> bool {
    case.hooks.iter().any(|h| match h.kind {
        Kind::Fail { policy, .. } => policy == FailurePolicy::Abort,
        Kind::Goto => true,
        _ => false,
    })
}

/// The human resolves every call a stopped reply lists as outcome-unknown (after a
/// crash) by recording an outcome: it is never run again.
pub fn resolve_unknown(reply: &Msg, mut d: ApprovalDecisions) -> ApprovalDecisions {
    if let Some(serde_json::Value::Array(calls)) = reply.metadata.get(agent::PENDING_CALLS_KEY) {
        for c in calls {
            if c["status"] == "outcome_unknown"
                && let Some(id) = c["id"].as_str()
            {
                d = d.record_outcome(id, "the fuzzer's human checked: it took effect");
            }
        }
    }
    d
}

/// The ids a stopped reply lists as outcome-unknown.
pub fn unknown_ids(reply: &Msg) -> Vec<String> {
    match reply.metadata.get(agent::PENDING_CALLS_KEY) {
        Some(serde_json::Value::Array(calls)) => calls
            .iter()
            .filter(|c| c["status"] == "outcome_unknown")
            .filter_map(|c| c["id"].as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `memory` ends with tool calls left without a result, every one of them a call
/// a crash left with an unknown outcome: a call that fails later (an aborting hook) must
/// leave them open, since only a human can say whether they took effect.
pub fn only_unknown_open(memory: &[Msg]) -> bool {
    let answered: std::collections::HashSet<&str> = memory
        .iter()
        .flat_map(Msg::tool_results)
        .map(|r| r.id.as_str())
        .collect();
    let Some(last) = memory.iter().rev().find(|m| !m.tool_uses().is_empty()) else {
        return false;
    };
    let unknown = unknown_ids(last);
    let open: Vec<_> = last
        .tool_uses()
        .into_iter()
        .filter(|u| !answered.contains(u.id.as_str()))
        .collect();
    !open.is_empty() && open.iter().all(|u| unknown.contains(&u.id))
}
