//! Unit tests of the ledger (`super`): admission, charging down a chain, what is left.

use super::*;
use crate::budget::{Budget, BudgetKind, BudgetScope, ModelPrice, Spend};

fn ledger(b: Budget) -> Arc<Ledger> {
    Ledger::new(BudgetScope::Call, b, Spend::default(), None, "top".into())
}

fn t(input: u64, output: u64) -> Tokens {
    Tokens {
        input,
        output,
        ..Tokens::default()
    }
}

#[test]
fn a_request_is_capped_to_the_output_left_and_refused_once_it_is_spent() {
    let l = ledger(Budget::new().output_tokens(100));
    let cap = l.admit_model_call(10, Some(500), None).unwrap();
    assert_eq!(cap, Some(100));
    l.settle_model_call(10, cap, t(12, 60), None);
    assert_eq!(l.admit_model_call(10, None, None).unwrap(), Some(40));
    l.settle_model_call(10, Some(40), t(12, 40), None);
    let e = l.admit_model_call(10, None, None).unwrap_err();
    assert_eq!(e.kind, BudgetKind::OutputTokens);
}

#[test]
fn a_child_draws_from_what_its_parent_has_left() {
    let parent = ledger(Budget::new().model_calls(3));
    parent.admit_model_call(1, None, None).unwrap();
    parent.settle_model_call(1, None, t(1, 1), None);
    let child = Ledger::new(
        BudgetScope::Subagent("a/b".into()),
        Budget::new().model_calls(10),
        Spend::default(),
        Some(Arc::clone(&parent)),
        "top/b".into(),
    );
    for _ in 0..2 {
        let cap = child.admit_model_call(1, None, None).unwrap();
        child.settle_model_call(1, cap, t(1, 1), None);
    }
    let e = child.admit_model_call(1, None, None).unwrap_err();
    assert_eq!(
        (e.kind, e.scope),
        (BudgetKind::ModelCalls, BudgetScope::Call)
    );
    assert_eq!(parent.spent().model_calls, 3);
}

#[test]
fn the_cost_left_pays_for_the_output_cap_after_the_input() {
    let price = ModelPrice::new(1.0, 2.0); // per million
    let l = ledger(Budget::new().cost(0.001)); // 1,000 µ-units
    // 200 input tokens cost 0.0002; 0.0008 left pays 400 output tokens.
    let cap = l.admit_model_call(200, Some(10_000), Some(&price)).unwrap();
    assert_eq!(cap, Some(400));
    l.settle_model_call(200, cap, t(200, 400), Some(&price));
    assert!(l.admit_model_call(1, None, Some(&price)).is_err());
}

#[test]
fn zero_and_negative_limits_are_refused_by_name() {
    assert!(
        Budget::new()
            .model_calls(0)
            .validate("call_budget")
            .unwrap_err()
            .contains("call_budget.model_calls")
    );
    assert!(
        Budget::new()
            .cost(-1.0)
            .validate("b")
            .unwrap_err()
            .contains("b.cost")
    );
    assert!(
        Budget::new()
            .tool_calls_of("refund", 0)
            .validate("b")
            .unwrap_err()
            .contains("tool_calls_per_tool.refund")
    );
    assert!(Budget::new().cost(1.0).model_calls(2).validate("b").is_ok());
}

#[test]
fn cached_and_reasoning_tokens_are_charged_at_their_rates_and_reserved_at_the_dearer() {
    // Input 1.0, cached 0.1, output 2.0, reasoning 4.0 per million.
    let price = ModelPrice::new(1.0, 2.0).cached_input(0.1).reasoning(4.0);
    let used = Tokens {
        input: 1_000,
        cached_input: 800,
        output: 100,
        reasoning: 60,
    };
    let l = ledger(Budget::new().cost(1.0));
    let cap = l.admit_model_call(1_000, Some(100), Some(&price)).unwrap();
    // Reserved at the dearer output rate: 1,000 × 1.0 + 100 × 4.0.
    let reserved = l.spent_with_reserved().1.cost;
    assert!((reserved - 0.0014).abs() < 1e-12, "{reserved}");
    l.settle_model_call(1_000, cap, used, Some(&price));
    let spent = l.spent();
    // 200 × 1.0 + 800 × 0.1 + 40 × 2.0 + 60 × 4.0 = 600 per million.
    assert!((spent.cost - 0.0006).abs() < 1e-12, "{}", spent.cost);
    assert_eq!(
        (spent.cached_input_tokens, spent.reasoning_tokens),
        (800, 60)
    );
    assert_eq!(l.spent_with_reserved().1.cost, 0.0);
}

#[test]
fn what_is_left_is_the_least_of_every_budget_on_the_chain() {
    let parent = ledger(Budget::new().model_calls(3).tool_calls(10));
    let child = Ledger::new(
        BudgetScope::Subagent("b".into()),
        Budget::new().model_calls(5).tool_calls(2),
        Spend::default(),
        Some(Arc::clone(&parent)),
        "top/b".into(),
    );
    let cap = child.admit_model_call(1, None, None).unwrap();
    child.settle_model_call(1, cap, t(1, 1), None);
    child.admit_tool_call("search").unwrap();
    let left = child.remaining();
    assert_eq!((left.model_calls, left.tool_calls), (Some(2), Some(1)));
    assert_eq!(left.input_tokens, None);
    let top = parent.remaining();
    assert_eq!((top.model_calls, top.tool_calls), (Some(2), Some(9)));
}

#[test]
fn a_renamed_call_is_charged_to_the_tool_it_became_and_refused_past_its_limit() {
    let l = ledger(Budget::new().tool_calls_of("refund", 1));
    l.admit_tool_call("lookup").unwrap();
    l.retarget_tool_call("lookup", "refund").unwrap();
    let spent = l.spent();
    assert_eq!(spent.tool_calls, 1);
    assert_eq!(spent.tool_calls_per_tool.get("refund"), Some(&1));
    l.admit_tool_call("lookup").unwrap();
    let e = l.retarget_tool_call("lookup", "refund").unwrap_err();
    assert_eq!(e.kind, BudgetKind::ToolCallsOf("refund".into()));
    // Renamed away from a limited tool, the charge leaves it.
    l.admit_tool_call("refund").unwrap_err();
    let m = ledger(Budget::new().tool_calls_of("refund", 1));
    m.admit_tool_call("refund").unwrap();
    m.retarget_tool_call("refund", "lookup").unwrap();
    m.admit_tool_call("refund").unwrap();
}

#[test]
fn a_delegating_ledger_splits_what_it_spent_by_agent() {
    let parent = ledger(Budget::new());
    let cap = parent.admit_model_call(1, None, None).unwrap();
    parent.settle_model_call(1, cap, t(10, 5), None);
    let child = Ledger::new(
        BudgetScope::Call,
        Budget::new(),
        Spend::default(),
        Some(Arc::clone(&parent)),
        "top/b".into(),
    );
    let cap = child.admit_model_call(1, None, None).unwrap();
    child.settle_model_call(1, cap, t(7, 3), None);
    child.admit_tool_call("search").unwrap();
    let by = parent.spent_by_agent();
    let paths: Vec<&str> = by.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["top", "top/b"]);
    assert_eq!((by[0].1.input_tokens, by[0].1.tool_calls), (10, 0));
    assert_eq!((by[1].1.input_tokens, by[1].1.tool_calls), (7, 1));
    assert_eq!(parent.spent().input_tokens, 17);
    assert_eq!(child.spent_by_agent().len(), 1);
}
