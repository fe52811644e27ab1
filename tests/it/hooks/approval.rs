//! ApprovalHook: guarded tools wait for a decision before they run, and fail closed.

use std::time::Duration;

use rein::agent::PENDING_CALL_IDS_KEY;
use rein::hooks::{
    ApprovalConfig, ApprovalDecision, ApprovalDecisions, ApprovalHook, ApprovalMode,
    ApprovalRequest, SharedApprover, pending_approvals,
};
use rein::*;
use serde_json::json;

use super::stop_for_human;
use crate::support::*;

fn refund_turns() -> ScriptedModel {
    tool_then_text("submitRefund", json!({"amount": 20}), "done")
}

/// An approver that logs what it was asked (and whether the tool had run yet), then
/// answers `decision`.
fn approver(
    log: &Log,
    decision: ApprovalDecision,
) -> impl Fn(ApprovalRequest) -> futures::future::BoxFuture<'static, ApprovalDecision>
+ Send
+ Sync
+ 'static {
    let log = log.clone();
    move |req: ApprovalRequest| {
        let log = log.clone();
        let decision = decision.clone();
        Box::pin(async move {
            let ran = log.entries().iter().any(|e| e.starts_with("refund:"));
            log.push(format!(
                "asked:{}:{}:ran={ran}",
                req.tool_use.name, req.tool_use.input
            ));
            decision
        })
    }
}

/// Asserts the model's second request holds an error result for the first call,
/// containing `needle`.
fn assert_denied(model: &ScriptedModel, needle: &str) {
    let (_, is_error, text) = results_in_request(model, 1).remove(0);
    assert!(is_error && text.contains(needle), "{text}");
}

async fn run(hook: ApprovalHook, model: &ScriptedModel, log: &Log) -> Msg {
    let agent = builder(model)
        .toolkit(toolkit_with(vec![refund_tool(log), query_tool(log)]))
        .hook(hook)
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap()
}

/// Runs a refund call whose approver answers `decision`; returns the log and model.
async fn run_deciding(decision: ApprovalDecision) -> (Log, ScriptedModel) {
    let log = Log::default();
    let model = refund_turns();
    let hook = ApprovalHook::with_approver(approver(&log, decision), ["submitRefund"]);
    run(hook, &model, &log).await;
    (log, model)
}

#[tokio::test]
async fn a_guarded_tool_waits_for_approval_before_it_runs() {
    let (log, _) = run_deciding(ApprovalDecision::Approve).await;
    assert_eq!(
        log.entries(),
        [
            r#"asked:submitRefund:{"amount":20}:ran=false"#,
            r#"refund:{"amount":20}"#
        ]
    );
}

#[tokio::test]
async fn a_denial_keeps_the_tool_from_running_and_tells_the_model_why() {
    let (log, model) = run_deciding(ApprovalDecision::Deny("over the daily limit".into())).await;
    assert_eq!(log.entries().len(), 1, "asked, never ran");
    assert_denied(&model, "over the daily limit");
}

#[tokio::test]
async fn an_edited_decision_runs_the_tool_with_the_new_arguments() {
    let (log, _) = run_deciding(ApprovalDecision::Edit(json!({"amount": 5}))).await;
    assert_eq!(log.entries()[1], r#"refund:{"amount":5}"#);
}

#[tokio::test(start_paused = true)]
async fn no_decision_within_the_timeout_denies_the_call() {
    let log = Log::default();
    let model = refund_turns();
    let never = |_req: ApprovalRequest| async {
        std::future::pending::<()>().await;
        ApprovalDecision::Approve
    };
    let hook = ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["submitRefund".into()],
            timeout_ms: 1_000,
            ..ApprovalConfig::default()
        },
        Some(SharedApprover::new(never)),
    )
    .unwrap();
    let started = tokio::time::Instant::now();
    run(hook, &model, &log).await;
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert!(log.entries().is_empty(), "the tool never ran");
    assert_denied(&model, "no approval within 1s");
}

#[tokio::test]
async fn a_panicking_approver_denies_the_call() {
    let log = Log::default();
    let model = refund_turns();
    let hook = ApprovalHook::with_approver(
        |_req: ApprovalRequest| async {
            if true {
                panic!("approver crashed");
            }
            ApprovalDecision::Approve
        },
        ["submitRefund"],
    );
    let reply = run(hook, &model, &log).await;
    assert_eq!(reply.text(), "done");
    assert!(log.entries().is_empty());
    assert_denied(&model, "approver crashed");
}

#[tokio::test]
async fn unguarded_tools_run_without_asking() {
    let log = Log::default();
    let model = tool_then_text("queryOrder", json!({"order_id": "A"}), "done");
    let hook =
        ApprovalHook::with_approver(approver(&log, ApprovalDecision::Approve), ["submitRefund"]);
    run(hook, &model, &log).await;
    assert_eq!(log.entries(), ["query:A"]);
}

#[tokio::test(start_paused = true)]
async fn an_agent_hook_timeout_does_not_cut_an_approval_short() {
    let log = Log::default();
    let model = refund_turns();
    let slow = |_req: ApprovalRequest| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ApprovalDecision::Approve
    };
    let agent = builder(&model)
        .hook_timeout(Duration::from_millis(100))
        .toolkit(toolkit_with(vec![refund_tool(&log)]))
        .hook(ApprovalHook::with_approver(slow, ["submitRefund"]))
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(log.entries(), [r#"refund:{"amount":20}"#]);
}

/// A refund agent whose approval hook stops for a human.
fn stop_for_human_agent() -> (Log, ScriptedModel, Agent) {
    let log = Log::default();
    let model = refund_turns();
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(stop_for_human())
        .build()
        .unwrap();
    (log, model, agent)
}

#[tokio::test]
async fn stop_for_human_stops_before_the_tool_runs_and_resumes_with_the_decision() {
    let (log, _, agent) = stop_for_human_agent();
    let first = agent
        .run(vec![Msg::user("退款")], session("s"))
        .await
        .unwrap();
    assert_eq!(first.reason, StopReason::ReasoningStopped);
    let waiting = pending_approvals(&first.reply);
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].name, "submitRefund");
    assert_eq!(waiting[0].input, json!({"amount": 20}));
    assert_eq!(
        first.reply.metadata.get(PENDING_CALL_IDS_KEY),
        Some(&json!([waiting[0].id]))
    );
    assert!(log.entries().is_empty(), "nothing ran before the decision");

    // Out of band, a human approves the call they saw; the caller resumes the session.
    let ctx = session("s");
    ctx.extensions()
        .insert(ApprovalDecisions::new().approve_call(&waiting[0]));
    let second = agent.call_with(vec![], ctx).await.unwrap();
    assert_eq!(second.text(), "done");
    assert_eq!(log.entries(), [r#"refund:{"amount":20}"#]);
    assert_memory_valid(&agent.messages(&key("s")).await);
}

#[tokio::test]
async fn resuming_without_a_decision_denies_the_guarded_call() {
    let (log, model, agent) = stop_for_human_agent();
    agent
        .call_with(vec![Msg::user("退款")], session("s"))
        .await
        .unwrap();
    agent.call_with(vec![], session("s")).await.unwrap();
    assert!(log.entries().is_empty());
    assert_denied(&model, "no decision");
}

#[test]
fn await_mode_needs_an_approver_and_a_positive_timeout() {
    let err = ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["submitRefund".into()],
            ..ApprovalConfig::default()
        },
        None,
    )
    .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(err.to_string().contains("`approval.mode`"), "{err}");
    let err = ApprovalHook::new(
        ApprovalConfig {
            timeout_ms: 0,
            mode: ApprovalMode::StopForHuman,
            ..ApprovalConfig::default()
        },
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("`approval.timeout_ms`"), "{err}");
}

#[test]
fn approval_runs_at_priority_100() {
    assert_eq!(Hook::priority(&stop_for_human()), 100);
}

/// The approval hook's old names for the pending-call keys still compile and are the
/// agent's keys.
#[test]
#[allow(deprecated)]
fn the_deprecated_approval_key_names_are_the_agents_pending_call_keys() {
    assert_eq!(rein::hooks::APPROVAL_PENDING_KEY, PENDING_CALL_IDS_KEY);
    assert_eq!(
        rein::hooks::APPROVAL_PENDING_CALLS_KEY,
        rein::agent::PENDING_CALLS_KEY
    );
}
