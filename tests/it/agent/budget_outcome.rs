//! What a call with budgets reports: what it spent by agent path, what is left of every
//! budget, the stream event of a budget stop, and cached and reasoning tokens at their
//! own prices.

use futures::StreamExt;
use rein::budget::{BudgetKind, BudgetScope, SPEND_KEY};
use rein::*;
use serde_json::json;

use super::budgets::helper;
use crate::support::{Log, add_tool, builder_with_tools, session};

#[tokio::test]
async fn every_agent_of_the_tree_is_listed_with_what_it_spent_and_the_parts_add_up() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "helper", "task": "add"}))
            .with_usage(100, 10),
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 1})).with_usage(40, 4),
        ScriptedTurn::text("child done").with_usage(50, 5),
        ScriptedTurn::text("parent done").with_usage(120, 12),
    ]);
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .name("support")
        .subagent(helper())
        .call_budget(Budget::new().model_calls(10))
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("delegate")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::Final);
    let by = &outcome.spend_by_agent;
    assert_eq!(
        by.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        ["support", "support/helper"]
    );
    let (parent, child) = (&by[0].1, &by[1].1);
    assert_eq!((parent.model_calls, parent.input_tokens), (2, 220));
    // The spawn is the parent's tool call; `add` is the child's.
    assert_eq!((parent.tool_calls, child.tool_calls), (1, 1));
    assert_eq!((child.model_calls, child.output_tokens), (2, 9));
    let total = outcome.spend.as_ref().unwrap();
    assert_eq!(total.model_calls, parent.model_calls + child.model_calls);
    assert_eq!(total.input_tokens, parent.input_tokens + child.input_tokens);
    assert_eq!(total.tool_calls, parent.tool_calls + child.tool_calls);
}

#[tokio::test]
async fn the_outcome_and_the_reply_say_what_is_left_of_every_budget() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_usage(10, 5),
        ScriptedTurn::text("three").with_usage(10, 5),
        ScriptedTurn::text("again").with_usage(10, 5),
    ]);
    let store = InMemorySessionStore::new();
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .session_store(store)
        .call_budget(
            Budget::new()
                .model_calls(5)
                .tool_calls(3)
                .output_tokens(100),
        )
        .session_budget(Budget::new().model_calls(3))
        .build()
        .unwrap();
    let first = agent
        .run(vec![Msg::user("add")], session("s"))
        .await
        .unwrap();
    let left = first.remaining.clone().unwrap();
    // The session's 3 model calls bind before the call's 5.
    assert_eq!(left.model_calls, Some(1));
    assert_eq!(left.tool_calls, Some(2));
    assert_eq!(left.output_tokens, Some(90));
    assert_eq!(
        left.input_tokens, None,
        "no input budget, nothing to report"
    );
    let record = &first.reply.metadata[SPEND_KEY];
    assert_eq!(record["remaining"]["model_calls"], 1);
    assert_eq!(record["spent"]["model_calls"], 2);
    assert_eq!(record["spent"]["output_tokens"], 10);
    let second = agent
        .run(vec![Msg::user("again")], session("s"))
        .await
        .unwrap();
    assert_eq!(second.reply.text(), "again");
    assert_eq!(second.remaining.unwrap().model_calls, Some(0));
    let stored = agent.messages(&SessionKey::new(None, "s")).await;
    assert!(
        stored.iter().all(|m| !m.metadata.contains_key(SPEND_KEY)),
        "the record is on the returned reply only"
    );
}

#[tokio::test]
async fn a_stream_shows_which_budget_stopped_the_call_before_its_final_event() {
    let log = Log::default();
    let model =
        ScriptedModel::new((0..5).map(|i| ScriptedTurn::tool_call("add", json!({"a": i, "b": 1}))));
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .call_budget(Budget::new().model_calls(2))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("add")], RunContext::new())
        .collect()
        .await;
    let stop = events
        .iter()
        .position(|e| matches!(e, AgentEvent::BudgetExhausted(_)))
        .expect("a budget event");
    assert!(
        matches!(events.get(stop + 1), Some(AgentEvent::Final(o)) if o.reason == StopReason::BudgetExhausted),
        "{events:?}"
    );
    let AgentEvent::BudgetExhausted(e) = &events[stop] else {
        unreachable!()
    };
    assert_eq!(
        (&e.kind, &e.scope),
        (&BudgetKind::ModelCalls, &BudgetScope::Call)
    );
    assert_eq!((e.limit, e.used), (2.0, 2.0));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, AgentEvent::BudgetExhausted(_)))
            .count(),
        1
    );
}

#[tokio::test]
async fn cached_and_reasoning_tokens_are_charged_at_their_own_prices() {
    let usage = Usage {
        cached_input_tokens: 800,
        reasoning_tokens: 60,
        ..Usage::new(1_000, 100)
    };
    let model = ScriptedModel::new([ScriptedTurn::text("ok").with_usage_of(usage)]);
    let price = ModelPrice::new(1.0, 2.0).cached_input(0.1).reasoning(4.0);
    let agent = builder_with_tools(&model, Vec::new())
        .prices(Prices::new().model("scripted", price))
        .call_budget(Budget::new().cost(1.0))
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("hi")], RunContext::new())
        .await
        .unwrap();
    let spend = outcome.spend.unwrap();
    // 200 × 1.0 + 800 × 0.1 + 40 × 2.0 + 60 × 4.0 per million tokens.
    assert!((spend.cost - 600e-6).abs() < 1e-12, "{}", spend.cost);
    assert_eq!(
        (spend.cached_input_tokens, spend.reasoning_tokens),
        (800, 60)
    );
    // The same usage at plain input and output prices costs more.
    assert!(spend.cost < ModelPrice::new(1.0, 2.0).cost(1_000, 0, 100, 0));
}

#[test]
fn cached_and_reasoning_prices_are_read_from_a_hooks_file_and_checked_by_name() {
    let ok: rein::hooks::HooksConfig = serde_yaml_ng::from_str(
        "budgets:\n  call: {cost: 1.0}\n  prices: {scripted: {input_per_mtok: 1.0, output_per_mtok: 2.0, cached_input_per_mtok: 0.1, reasoning_per_mtok: 4.0}}\n",
    )
    .unwrap();
    let prices = ok.budgets.prices.clone().unwrap();
    assert_eq!(
        prices.get("scripted"),
        Some(&ModelPrice::new(1.0, 2.0).cached_input(0.1).reasoning(4.0))
    );
    let bad: rein::hooks::HooksConfig = serde_yaml_ng::from_str(
        "budgets: {prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10, reasoning_per_mtok: -1}}}",
    )
    .unwrap();
    let err = bad.build().unwrap_err();
    assert!(
        err.to_string().contains("prices.gpt-4o.reasoning_per_mtok"),
        "{err}"
    );
}
