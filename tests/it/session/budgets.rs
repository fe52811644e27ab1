//! A session budget across replicas: charged with the session in the store, fenced under
//! the lease, on every engine (in-memory, Redis, PostgreSQL).

use std::time::Duration;

use rein::budget::BUDGET_KEY;
use rein::*;

use crate::session::store_agents::{Leased, config, per_engine_tests};
use crate::session::store_contract::Harness;
use crate::support::{builder, key, session};

/// A replica: its own client of the store, a session budget of `calls` model calls.
async fn replica<S: Leased>(
    h: &Harness<S>,
    turns: Vec<ScriptedTurn>,
    calls: u64,
) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new(turns);
    let agent = builder(&model)
        .leased_session_store(h.client().await, config(30_000, 10_000))
        .session_budget(Budget::new().model_calls(calls))
        .build()
        .unwrap();
    (agent, model)
}

fn answers(n: usize) -> Vec<ScriptedTurn> {
    (0..n)
        .map(|i| ScriptedTurn::text(format!("answer {i}")))
        .collect()
}

/// Two replicas call one session at the same time, three calls each, against a budget of
/// four model calls: four calls answer, two stop for the budget, and four model calls
/// were made in all — never more.
pub async fn two_replicas_draining_one_session_budget_never_spend_more_than_it<S: Leased>(
    h: &Harness<S>,
) {
    let s = format!("budget-{}", std::process::id());
    let (a, ma) = replica(h, answers(3), 4).await;
    let (b, mb) = replica(h, answers(3), 4).await;
    let run = |agent: Agent, n: usize| {
        let s = s.clone();
        tokio::spawn(async move {
            let mut reasons = Vec::new();
            for i in 0..n {
                let out = agent
                    .run(vec![Msg::user(format!("q{i}"))], session(&s))
                    .await
                    .unwrap();
                reasons.push(out.reason);
            }
            reasons
        })
    };
    let (ra, rb) = tokio::join!(run(a, 3), run(b.clone(), 3));
    let reasons: Vec<StopReason> = ra.unwrap().into_iter().chain(rb.unwrap()).collect();
    let finals = reasons.iter().filter(|r| **r == StopReason::Final).count();
    let stopped = reasons
        .iter()
        .filter(|r| **r == StopReason::BudgetExhausted)
        .count();
    assert_eq!((finals, stopped), (4, 2), "{reasons:?}");
    assert_eq!(ma.requests().len() + mb.requests().len(), 4);
    let stored = b.messages(&key(&s)).await;
    crate::support::assert_memory_valid(&stored);
}

/// A call dropped while its model request is in flight (a replica that dies after the
/// request was sent) leaves the request charged: its reservation was saved with the
/// session before the request went out.
pub async fn a_replica_dying_mid_request_leaves_its_charge_with_the_session<S: Leased>(
    h: &Harness<S>,
) {
    let s = format!("budget-crash-{}", std::process::id());
    let (a, ma) = replica(
        h,
        vec![
            ScriptedTurn::text("first"),
            ScriptedTurn::text("never seen").with_delay(Duration::from_secs(30)),
        ],
        3,
    )
    .await;
    a.run(vec![Msg::user("one")], session(&s)).await.unwrap();
    let dying = a.run(vec![Msg::user("two")], session(&s));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), dying)
            .await
            .is_err()
    );
    assert_eq!(ma.requests().len(), 2, "the second request was sent");
    // The other replica finds the reserved call charged: one model call is left of three.
    let (b, mb) = replica(h, answers(2), 3).await;
    // The dropped call's lease is released by its background task; wait for it.
    let third = b.run(vec![Msg::user("three")], session(&s)).await.unwrap();
    assert_eq!(third.reason, StopReason::Final, "{third:?}");
    let fourth = b.run(vec![Msg::user("four")], session(&s)).await.unwrap();
    assert_eq!(fourth.reason, StopReason::BudgetExhausted);
    assert_eq!(mb.requests().len(), 1);
    let record = fourth.reply.metadata[BUDGET_KEY].clone();
    assert_eq!(record["scope"], "session");
}

per_engine_tests!(budgets:
    two_replicas_draining_one_session_budget_never_spend_more_than_it,
    a_replica_dying_mid_request_leaves_its_charge_with_the_session,
);
