//! Round four (issues 33 and 34): random budgets over the random trees, and the
//! information-flow policy over labelled sources.
//!
//! - **Budgets.** A case may give every root call a budget of model calls, tool calls
//!   and `refund` calls, and each declared subagent a model-call slice per run. Per
//!   round (each round is one call): the tree's model requests never exceed the call's
//!   model-call budget, nor a subagent's requests its slices; the tool calls that ran
//!   never exceed the tool-call budgets; what the outcome reports spent is what the
//!   models and tools saw; and a call that stopped for its budget stopped exactly when
//!   the model-call budget was used up — nothing was sent after it ran out.
//! - **Labels.** With the policy on, `lookup` returns untrusted content, `refund`
//!   changes state and `note` communicates outside. No `refund` or `note` call the
//!   model made after reading a `lookup` result ran without a human deciding on it
//!   (the policy stops it for one, or denies it). A call counts as made under untrusted
//!   context when the history before it, as a later request of the same agent shows
//!   it, held a `lookup` result (an under-approximation: content that reaches a child
//!   through its task or a parent through a child's reply is not counted, nor a call no
//!   later request shows, so the check never blames a clean call).

use std::collections::HashMap;

use proptest::prelude::*;
use rein::hooks::{InformationFlowConfig, InformationFlowPolicy};
use rein::*;

use super::case::{Case, DECLS};
use super::hooks::{Obs, Shared};
use super::{checked, saw};

/// The root's budget and the information-flow policy, as the case says.
pub fn install(mut b: AgentBuilder, case: &Case) -> AgentBuilder {
    if let Some(spec) = case.budget {
        let mut budget = Budget::new()
            .model_calls(spec.model_calls)
            .tool_calls(spec.tool_calls);
        if let Some(n) = spec.refunds {
            budget = budget.tool_calls_of("refund", n);
        }
        b = b.call_budget(budget);
    }
    if let Some(action) = case.flow {
        b = b.hook(InformationFlowPolicy::new(InformationFlowConfig {
            enabled: true,
            untrusted_action: action,
            ..InformationFlowConfig::default()
        }));
    }
    b
}

/// What the tree had done when a round began.
pub struct Mark {
    requests: usize,
    by: HashMap<String, usize>,
    executed: usize,
    child_runs: usize,
}

impl Mark {
    pub fn take(obs: &Shared) -> Self {
        let obs = obs.lock().unwrap();
        Self {
            requests: obs.requests,
            by: obs.requests_by.clone(),
            executed: obs.executed.len(),
            child_runs: obs.child_runs.len(),
        }
    }
}

/// The budget invariants of one round that began at `mark` and ended with `result`.
pub fn round(
    case: &Case,
    mark: &Mark,
    obs: &Shared,
    result: &Result<CallOutcome, Error>,
) -> Result<(), TestCaseError> {
    let obs = obs.lock().unwrap();
    let requests = (obs.requests - mark.requests) as u64;
    let ran = &obs.executed[mark.executed..];
    if let Some(spec) = case.budget {
        checked(3);
        prop_assert!(
            requests <= spec.model_calls,
            "{} model requests in a call with a budget of {}",
            requests,
            spec.model_calls
        );
        prop_assert!(
            ran.len() as u64 <= spec.tool_calls,
            "{} tool calls ran in a call with a budget of {}",
            ran.len(),
            spec.tool_calls
        );
        if let Some(n) = spec.refunds {
            let refunds = ran.iter().filter(|(c, _)| c.name == "refund").count() as u64;
            prop_assert!(refunds <= n, "{} refunds ran, budget {}", refunds, n);
        }
        if let Ok(o) = result {
            let spend = o.spend.clone().unwrap_or_default();
            checked(3);
            prop_assert_eq!(
                spend.model_calls,
                requests,
                "the outcome's spend is not what the models saw"
            );
            prop_assert!(spend.tool_calls <= spec.tool_calls);
            prop_assert!(ran.len() as u64 <= spend.tool_calls);
            if o.reason == StopReason::BudgetExhausted {
                checked(1);
                saw(10, 1);
                let record = &o.reply.metadata[budget::BUDGET_KEY];
                prop_assert!(
                    record["kind"] == "model_calls"
                        && record["scope"] == "call"
                        && requests == spec.model_calls,
                    "a stop for {} after {} of {} model requests",
                    record,
                    requests,
                    spec.model_calls
                );
            }
        }
    }
    slices(case, mark, &obs)
}

/// No declared subagent sent more requests in the round than its slices allow.
fn slices(case: &Case, mark: &Mark, obs: &Obs) -> Result<(), TestCaseError> {
    for (i, d) in case.decls.iter().enumerate() {
        let Some(slice) = d.slice else { continue };
        let name = DECLS[i];
        let sent = obs.requests_by.get(name).copied().unwrap_or(0)
            - mark.by.get(name).copied().unwrap_or(0);
        let runs = obs.child_runs[mark.child_runs..]
            .iter()
            .filter(|(id, _)| obs.agents.get(id).is_some_and(|a| a.name == name))
            .count()
            .max(1);
        checked(1);
        prop_assert!(
            sent as u64 <= slice * runs as u64,
            "subagent {} sent {} requests in {} runs with a slice of {}",
            name,
            sent,
            runs,
            slice
        );
    }
    Ok(())
}

/// No state-changing or external call made under untrusted context ran without a
/// human's decision.
pub fn flow(case: &Case, obs: &Obs) -> Result<(), TestCaseError> {
    if case.flow.is_none() {
        return Ok(());
    }
    let acting = |name: &str| name == "refund" || name == "note";
    let tainted = |id: &String| obs.emitted_tainted.contains(id) && !obs.emitted_clean.contains(id);
    saw(11, obs.tainted_acting);
    for (call, _) in &obs.executed {
        if !tainted(&call.id) || !acting(&call.name) {
            continue;
        }
        checked(1);
        saw(12, 1);
        let human = obs
            .approvals
            .iter()
            .any(|a| a.call.agent.is_empty() && a.call.id == call.id);
        prop_assert!(
            human,
            "{:?} ran under untrusted context without a human's decision ({:?})",
            call,
            case.flow
        );
    }
    Ok(())
}
