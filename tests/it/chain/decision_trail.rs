//! The decision trail across delegation: a subagent's decisions appear in the
//! top-level call's outcome with the agent path, in order, at any depth; and the
//! operator's opt-in to readable before/after numbers.

use futures::StreamExt;
use rein::observe::{FieldChange, RevealNumbers};
use rein::*;
use serde_json::json;

use crate::support::subagents::{decl, spawn};
use crate::support::*;

/// Builds the agent and runs one call of it (trail on unless the builder says).
async fn go(b: AgentBuilder) -> (Agent, CallOutcome) {
    let agent = b.build().unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], RunContext::new())
        .await
        .unwrap();
    (agent, outcome)
}

/// Denies every `queryOrder` call (inherited by subagents).
fn no_queries() -> FnHook {
    FnHook::new("NoQueries", |e| {
        if let HookEvent::PreActing(p) = e
            && p.tool_use().name == "queryOrder"
        {
            p.deny("orders are off limits");
        }
        Ok(())
    })
    .on(EventKind::PreActing)
}

/// A top-level agent `parent` with the refund and query tools, the refund cap, and
/// the subagents `child` (refund, query, delegation) and `grand` (refund).
fn parent(model: &ScriptedModel, log: &Log) -> AgentBuilder {
    builder_with_tools(model, vec![refund_tool(log), query_tool(log)])
        .name("parent")
        .hook(refund_cap(1000))
        .subagent(decl("child", &["submitRefund", "queryOrder", SPAWN_TOOL]))
        .subagent(decl("grand", &["submitRefund"]))
}

fn refund(amount: u64) -> ScriptedTurn {
    ScriptedTurn::tool_call("submitRefund", json!({"amount": amount}))
}

/// `(agent path, kind, hook)` of each decision.
fn trail(outcome: &CallOutcome) -> Vec<(String, DecisionKind, String)> {
    outcome
        .decisions
        .iter()
        .map(|d| (d.agent_path().to_owned(), d.kind, d.hook.clone()))
        .collect()
}

fn rewrite(path: &str) -> (String, DecisionKind, String) {
    (
        path.to_owned(),
        DecisionKind::ToolInputRewritten,
        "ToolGuardHook".to_owned(),
    )
}

#[tokio::test]
async fn a_subagents_decisions_appear_in_the_parents_outcome_with_its_agent_path() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("child", "refund order 7"),
        refund(5000),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let (agent, outcome) = go(parent(&model, &log).decision_trail(true)).await;
    assert_eq!(outcome.reply.text(), "parent done");
    assert_eq!(log.entries(), [r#"refund:{"amount":1000}"#]);
    assert_eq!(trail(&outcome), [rewrite("parent/child")]);
    let d = &outcome.decisions[0];
    assert_ne!(
        d.agent_id,
        agent.info().id,
        "the child's id, not the parent's"
    );
    assert_eq!(d.event, EventKind::PreActing);
    assert!(d.tool_call_id.is_some());
    let line = serde_json::to_value(d).unwrap();
    assert_eq!(line["agent_path"], "parent/child");
}

#[tokio::test]
async fn a_grandchilds_decisions_reach_the_top_level_outcome_with_the_full_path() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("child", "delegate the refund"),
        spawn("grand", "refund order 7"),
        refund(5000),
        ScriptedTurn::text("grand done"),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let (_, outcome) = go(parent(&model, &log).decision_trail(true)).await;
    assert_eq!(outcome.reply.text(), "parent done");
    assert_eq!(log.entries(), [r#"refund:{"amount":1000}"#]);
    assert_eq!(trail(&outcome), [rewrite("parent/child/grand")]);
}

#[tokio::test]
async fn decisions_of_parent_and_subagents_are_in_the_order_they_were_made() {
    let log = Log::default();
    let model = ScriptedModel::new([
        refund(5000),
        spawn("child", "two refunds"),
        refund(6000),
        spawn("grand", "one refund"),
        refund(7000),
        ScriptedTurn::text("grand done"),
        refund(8000),
        ScriptedTurn::text("child done"),
        refund(9000),
        ScriptedTurn::text("parent done"),
    ]);
    let (_, outcome) = go(parent(&model, &log)
        .hook(RevealNumbers::new().field("submitRefund", "/amount"))
        .decision_trail(true))
    .await;
    let seen: Vec<(String, Option<u64>)> = outcome
        .decisions
        .iter()
        .map(|d| {
            assert_eq!(d.kind, DecisionKind::ToolInputRewritten, "{d:?}");
            let before = d.changes[0].before.as_ref().and_then(|n| n.as_u64());
            (d.agent_path.clone(), before)
        })
        .collect();
    let expected = [
        ("parent", 5000),
        ("parent/child", 6000),
        ("parent/child/grand", 7000),
        ("parent/child", 8000),
        ("parent", 9000),
    ]
    .map(|(p, n)| (p.to_owned(), Some(n)));
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_denied_child_call_shows_as_a_deny_decision_of_the_child() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("child", "look order 7 up"),
        ScriptedTurn::tool_call("queryOrder", json!({"order_id": "7"})),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let (_, outcome) = go(parent(&model, &log).hook(no_queries()).decision_trail(true)).await;
    assert!(log.entries().is_empty());
    assert_eq!(
        trail(&outcome),
        [(
            "parent/child".to_owned(),
            DecisionKind::ToolDenied,
            "NoQueries".to_owned()
        )]
    );
    assert_eq!(
        outcome.decisions[0].reason.as_deref(),
        Some("orders are off limits")
    );
}

#[tokio::test]
async fn a_childs_call_the_runtime_rejected_shows_as_a_runtime_decision_of_the_child() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("child", "refund"),
        ScriptedTurn::tool_call("deleteEverything", json!({})),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let (_, outcome) = go(parent(&model, &log).decision_trail(true)).await;
    assert_eq!(
        trail(&outcome),
        [(
            "parent/child".to_owned(),
            DecisionKind::ToolCallRejected,
            "<runtime>".to_owned()
        )]
    );
    assert_eq!(outcome.decisions[0].before, "unknown_tool");
}

#[tokio::test]
async fn with_the_trail_off_no_agent_of_the_tree_collects_decisions() {
    for on in [true, false] {
        let log = Log::default();
        let model = ScriptedModel::new([
            refund(5000),
            spawn("child", "refund"),
            refund(6000),
            ScriptedTurn::text("child done"),
            ScriptedTurn::text("parent done"),
        ]);
        let seen = Log::default();
        let seen2 = seen.clone();
        // What every agent of the tree holds when its call ends.
        let probe = FnHook::new("Probe", move |e| {
            if let HookEvent::PostCall(p) = e {
                seen2.push(format!("{}:{}", p.agent().name, p.decisions().len()));
            }
            Ok(())
        })
        .on(EventKind::PostCall);
        let (_, outcome) = go(parent(&model, &log).hook(probe).decision_trail(on)).await;
        assert_eq!(
            log.entries(),
            [r#"refund:{"amount":1000}"#, r#"refund:{"amount":1000}"#]
        );
        if on {
            assert_eq!(
                trail(&outcome),
                [rewrite("parent"), rewrite("parent/child")]
            );
            assert_eq!(seen.entries(), ["child:1", "parent:2"]);
        } else {
            assert!(outcome.decisions.is_empty(), "{:?}", outcome.decisions);
            assert_eq!(seen.entries(), ["child:0", "parent:0"]);
        }
    }
}

#[tokio::test]
async fn the_streamed_final_outcome_holds_the_subagents_decisions() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("child", "refund"),
        refund(5000),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let agent = parent(&model, &log).decision_trail(true).build().unwrap();
    let mut stream = agent.stream(vec![Msg::user("go")], RunContext::new());
    let mut finals = Vec::new();
    while let Some(event) = stream.next().await {
        if let AgentEvent::Final(o) = event {
            finals.push(o);
        }
    }
    assert_eq!(
        finals.len(),
        1,
        "only the top-level call's outcome is final"
    );
    assert_eq!(trail(&finals[0]), [rewrite("parent/child")]);
}

#[tokio::test]
async fn a_cancelled_subagents_decisions_made_before_the_cancel_reach_the_parent() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            SPAWN_TOOL,
            json!({"agent_id": "slowchild", "task": "refund, then wait", "timeout_seconds": 1}),
        ),
        refund(5000),
        ScriptedTurn::tool_call("slow", json!({"ms": 600_000})),
        ScriptedTurn::text("parent done"),
    ]);
    let (_, outcome) = go(
        builder_with_tools(&model, vec![refund_tool(&log), slow_tool()])
            .name("parent")
            .hook(refund_cap(1000))
            .subagent(decl("slowchild", &["submitRefund", "slow"]))
            .decision_trail(true),
    )
    .await;
    assert_eq!(outcome.reply.text(), "parent done");
    assert_eq!(log.entries(), [r#"refund:{"amount":1000}"#]);
    assert_eq!(trail(&outcome), [rewrite("parent/slowchild")]);
}

#[tokio::test]
async fn opted_in_numbers_are_readable_and_everything_else_stays_a_digest() {
    for reveal in [false, true] {
        let log = Log::default();
        let model = ScriptedModel::new([
            ScriptedTurn::tool_call(
                "submitRefund",
                json!({"amount": 5000, "order_id": "A-13800138000"}),
            ),
            ScriptedTurn::text("done"),
        ]);
        let mut b = builder_with_tools(&model, vec![refund_tool(&log)])
            .hook(refund_cap(1000))
            .decision_trail(true);
        if reveal {
            b = b.hook(RevealNumbers::new().field("submitRefund", "/amount"));
        }
        let (_, outcome) = go(b).await;
        let d = &outcome.decisions[0];
        assert_eq!(d.kind, DecisionKind::ToolInputRewritten);
        // Digests by default: neither the order id nor the amounts are readable.
        for text in [&d.before, &d.after] {
            assert!(text.contains("B#"), "{text}");
            assert!(
                !text.contains("13800138000") && !text.contains("5000"),
                "{text}"
            );
        }
        let line = serde_json::to_string(d).unwrap();
        if reveal {
            assert_eq!(d.changes.len(), 1);
            let FieldChange {
                pointer,
                before,
                after,
                ..
            } = &d.changes[0];
            assert_eq!(pointer, "/amount");
            assert_eq!(before.as_ref().and_then(|n| n.as_u64()), Some(5000));
            assert_eq!(after.as_ref().and_then(|n| n.as_u64()), Some(1000));
            assert!(
                line.contains(r#""changes":[{"pointer":"/amount","before":5000,"after":1000}]"#),
                "{line}"
            );
        } else {
            assert!(d.changes.is_empty());
            assert!(!line.contains("changes"), "{line}");
        }
    }
}

#[tokio::test]
async fn a_revealed_field_in_a_run_context_applies_to_that_call() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 5000}), "done");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(refund_cap(1000))
        .decision_trail(true)
        .build()
        .unwrap();
    let ctx = RunContext::new();
    ctx.extensions()
        .insert(RevealNumbers::new().field("submitRefund", "/amount"));
    let outcome = agent.run(vec![Msg::user("go")], ctx).await.unwrap();
    let change = &outcome.decisions[0].changes[0];
    assert_eq!(change.before.as_ref().and_then(|n| n.as_u64()), Some(5000));
}

#[test]
fn revealing_a_field_of_an_unknown_tool_or_a_field_the_schema_lacks_fails_the_build() {
    let model = ScriptedModel::new([ScriptedTurn::text("x")]);
    let log = Log::default();
    let cases = [
        ("submitRefnd", "/amount", "did you mean `submitRefund`"),
        ("submitRefund", "/amout", "no field `/amout`"),
        ("submitRefund", "amount", "not a JSON pointer"),
    ];
    for (tool, pointer, expected) in cases {
        let err = builder_with_tools(&model, vec![refund_tool(&log)])
            .hook(RevealNumbers::new().field(tool, pointer))
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("RevealNumbers.fields[0]"), "{text}");
        assert!(text.contains(expected), "{text}");
    }
}
