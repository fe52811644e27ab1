//! A user's budget holds across the user's sessions, across replicas sharing a store
//! (in process here; two OS processes on Redis and PostgreSQL in
//! `session::budget_processes`), and down a delegation tree.

use std::sync::Arc;

use rein::budget::{BUDGET_KEY, USER_BUDGET_SESSION};
use rein::*;
use serde_json::json;

use crate::support::builder;

fn for_user(user: &str, s: &str) -> RunContext {
    RunContext::new().with_user_id(user).with_session_id(s)
}

fn answers(n: usize) -> ScriptedModel {
    ScriptedModel::new((0..n).map(|i| ScriptedTurn::text(format!("answer {i}"))))
}

#[tokio::test]
async fn a_user_budget_is_shared_by_every_session_of_the_user_and_no_other() {
    let model = answers(8);
    let agent = builder(&model)
        .user_budget(Budget::new().model_calls(3))
        .build()
        .unwrap();
    for s in ["s1", "s2", "s3"] {
        let out = agent
            .run(vec![Msg::user("hi")], for_user("ann", s))
            .await
            .unwrap();
        assert_eq!(out.reason, StopReason::Final, "{s}");
    }
    let fourth = agent
        .run(vec![Msg::user("hi")], for_user("ann", "s4"))
        .await
        .unwrap();
    assert_eq!(fourth.reason, StopReason::BudgetExhausted);
    let record = &fourth.reply.metadata[BUDGET_KEY];
    assert_eq!(
        (&record["kind"], &record["scope"]),
        (&json!("model_calls"), &json!("user"))
    );
    assert!(
        fourth
            .reply
            .text()
            .contains("the model-call budget of the user is spent: 3 of 3")
    );
    assert_eq!(fourth.remaining.unwrap().model_calls, Some(0));
    // Another user has a budget of its own.
    let bob = agent
        .run(vec![Msg::user("hi")], for_user("bob", "s1"))
        .await
        .unwrap();
    assert_eq!(bob.reason, StopReason::Final);
    assert_eq!(
        model.requests().len(),
        4,
        "no request after ann's budget ran out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_calling_for_one_user_at_once_never_spend_more_than_its_budget() {
    let store = Arc::new(InMemorySessionStore::new());
    let replica = |model: &ScriptedModel| {
        builder(model)
            .session_store(Arc::clone(&store))
            .user_budget(Budget::new().model_calls(17).output_tokens(10_000))
            .build()
            .unwrap()
    };
    let (m1, m2) = (answers(30), answers(30));
    let (a, b) = (replica(&m1), replica(&m2));
    let mut calls = Vec::new();
    for i in 0..30 {
        for (agent, name) in [(&a, "a"), (&b, "b")] {
            let agent = agent.clone();
            calls.push(tokio::spawn(async move {
                agent
                    .run(
                        vec![Msg::user("hi")],
                        for_user("ann", &format!("{name}{i}")),
                    )
                    .await
                    .unwrap()
                    .reason
            }));
        }
    }
    let mut reasons = Vec::new();
    for c in calls {
        reasons.push(c.await.unwrap());
    }
    let finals = reasons.iter().filter(|r| **r == StopReason::Final).count();
    let stopped = reasons
        .iter()
        .filter(|r| **r == StopReason::BudgetExhausted)
        .count();
    assert_eq!((finals, stopped), (17, 43), "{reasons:?}");
    assert_eq!(m1.requests().len() + m2.requests().len(), 17);
    // The record in the store says the same, with nothing left reserved.
    let stored = store
        .load(&SessionKey::new(Some("ann"), USER_BUDGET_SESSION))
        .await
        .unwrap();
    let record = &stored.messages.last().unwrap().metadata[BUDGET_KEY];
    assert_eq!(record["spent"]["model_calls"], 17, "{record}");
    assert!(record.get("reserved").is_none(), "{record}");
}

#[tokio::test]
async fn a_subagent_draws_from_its_users_budget() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "helper", "task": "t"})),
        ScriptedTurn::text("child 1"),
        ScriptedTurn::text("child 2"),
        ScriptedTurn::text("parent"),
    ]);
    let agent = builder(&model)
        .subagent(
            SubagentDeclaration::builder("helper")
                .description("helps")
                .build()
                .unwrap(),
        )
        .user_budget(Budget::new().model_calls(2))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("go")], for_user("ann", "s"))
        .await
        .unwrap();
    // The parent's request and the child's first use the budget; the child then stops
    // for it, and so does the parent.
    assert_eq!(out.reason, StopReason::BudgetExhausted);
    assert_eq!(model.requests().len(), 2);
    assert_eq!(out.spend.unwrap().model_calls, 2);
}

#[test]
fn a_user_budget_of_tool_calls_or_time_fails_the_build_naming_the_key() {
    for (budget, key) in [
        (Budget::new().tool_calls(3), "user_budget.tool_calls"),
        (
            Budget::new().tool_calls_of("refund", 1),
            "user_budget.tool_calls_per_tool",
        ),
        (
            Budget::new().wall_clock(std::time::Duration::from_secs(1)),
            "user_budget.wall_clock_ms",
        ),
        (Budget::new().model_calls(0), "user_budget.model_calls"),
    ] {
        let err = builder(&ScriptedModel::new([]))
            .user_budget(budget)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
}
