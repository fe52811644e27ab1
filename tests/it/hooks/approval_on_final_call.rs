//! Stop-for-human decides on the call that would run (issue 31 item 3): admission and
//! every `PreActing` rewrite (a tool guard's cap) come first, the condition is evaluated
//! on that final form, the pending list shows it with the model's original, and
//! approving what was shown runs exactly that. The README's own `hooks.yaml` works
//! verbatim.

use std::sync::{Arc, Mutex};

use rein::hooks::{AuditSinkConfig, HooksConfig, pending_approvals};
use rein::*;
use serde_json::{Value, json};

use crate::support::{TempDir, builder, key, session};

/// The README's `hooks.yaml` block, as it stands in the README.
fn readme_hooks_yaml() -> String {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("# hooks.yaml — refunds above 100 wait for a human")
        .expect("the README's hooks.yaml example");
    let end = start + readme[start..].find("```").unwrap();
    readme[start..end].to_owned()
}

fn refund_tool(paid: &Arc<Mutex<Vec<Value>>>) -> Toolkit {
    let paid = paid.clone();
    let tool = FunctionTool::new(
        "refund",
        "Refunds an amount.",
        json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}),
        move |args| {
            let paid = paid.clone();
            async move {
                paid.lock().unwrap().push(args["amount"].clone());
                Ok("refunded".to_owned())
            }
        },
    );
    let mut t = Toolkit::new();
    t.register(tool).unwrap();
    t
}

/// An agent with the README's hooks (the audit file moved into `dir`).
fn agent(dir: &TempDir, model: &ScriptedModel, paid: &Arc<Mutex<Vec<Value>>>) -> Agent {
    let path = dir.path().join("hooks.yaml");
    std::fs::write(&path, readme_hooks_yaml()).unwrap();
    let mut config = HooksConfig::from_path(&path).unwrap();
    if let AuditSinkConfig::Jsonl { path, .. } = &mut config.audit.sink {
        *path = dir.path().join("audit.jsonl");
    }
    let hooks = config.build().unwrap();
    hooks
        .install(builder(model).toolkit(refund_tool(paid)))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_readme_hooks_yaml_shows_the_capped_call_and_approving_it_runs_exactly_that() {
    let dir = TempDir::new("readme-yaml");
    let paid = Arc::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({"amount": 5000})),
        ScriptedTurn::text("refunded 1000"),
    ]);
    let agent = agent(&dir, &model, &paid);
    let stopped = agent
        .run(vec![Msg::user("refund 5000")], session("cap"))
        .await
        .unwrap();
    assert_eq!(
        stopped.reason,
        StopReason::ReasoningStopped,
        "{stopped:?} {:?}",
        paid.lock().unwrap()
    );
    let waiting = pending_approvals(&stopped.reply);
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        waiting[0].input,
        json!({"amount": 1000}),
        "the human sees what would run"
    );
    let listed = &stopped.reply.metadata[agent::PENDING_CALLS_KEY][0];
    assert_eq!(
        listed["original"]["input"],
        json!({"amount": 5000}),
        "and what was asked"
    );
    assert!(
        paid.lock().unwrap().is_empty(),
        "nothing ran before the decision"
    );
    let done = agent
        .resume(
            &key("cap"),
            agent::ApprovalDecisions::new().approve_call(&waiting[0]),
        )
        .await
        .unwrap();
    assert_eq!(done.reason, StopReason::Final, "{done:?}");
    assert_eq!(
        *paid.lock().unwrap(),
        [json!(1000)],
        "exactly what was approved ran"
    );
}

#[tokio::test]
async fn a_call_capped_below_the_approval_condition_needs_no_human() {
    let dir = TempDir::new("below");
    let paid = Arc::default();
    let yaml = readme_hooks_yaml().replace("{amount: 1000}", "{amount: 50}");
    std::fs::write(dir.path().join("hooks.yaml"), yaml).unwrap();
    let mut config = HooksConfig::from_path(dir.path().join("hooks.yaml")).unwrap();
    if let AuditSinkConfig::Jsonl { path, .. } = &mut config.audit.sink {
        *path = dir.path().join("audit.jsonl");
    }
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({"amount": 500})),
        ScriptedTurn::text("refunded 50"),
    ]);
    let agent = config
        .build()
        .unwrap()
        .install(builder(&model).toolkit(refund_tool(&paid)))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("refund 500")], session("below"))
        .await
        .unwrap();
    assert_eq!(
        out.reason,
        StopReason::Final,
        "the 50 that runs needs no approval"
    );
    assert_eq!(*paid.lock().unwrap(), [json!(50)]);
}

#[tokio::test]
async fn a_call_that_fails_its_schema_is_never_put_to_a_human() {
    let dir = TempDir::new("schema");
    let paid = Arc::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({"amount": "lots"})),
        ScriptedTurn::text("I could not refund that"),
    ]);
    let agent = agent(&dir, &model, &paid);
    let out = agent
        .run(vec![Msg::user("refund lots")], session("bad"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::Final);
    assert!(pending_approvals(&out.reply).is_empty());
    let r = &model.requests()[1]
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap()
        .clone();
    assert!(
        r.is_error && r.content.contains("Invalid arguments"),
        "{}",
        r.content
    );
    assert!(paid.lock().unwrap().is_empty());
}

/// Item 12: an edit that changes nothing, or any answer, leaves nothing behind.
#[tokio::test]
async fn an_approval_leaves_no_state_behind_whatever_the_approver_answered() {
    use rein::hooks::{ApprovalDecision, ApprovalHook, ApprovalRequest};
    for answer in [
        ApprovalDecision::Edit(json!({"amount": 20})),
        ApprovalDecision::Edit(json!({"amount": 7})),
        ApprovalDecision::Approve,
        ApprovalDecision::Deny("no".into()),
    ] {
        let paid = Arc::default();
        let hook = Arc::new(ApprovalHook::with_approver(
            move |_r: ApprovalRequest| {
                let a = answer.clone();
                async move { a }
            },
            ["refund"],
        ));
        let model = ScriptedModel::new([
            ScriptedTurn::tool_call("refund", json!({"amount": 20})),
            ScriptedTurn::text("done"),
        ]);
        let agent = builder(&model)
            .toolkit(refund_tool(&paid))
            .hook(hook.clone())
            .build()
            .unwrap();
        agent
            .run(vec![Msg::user("refund")], session("e"))
            .await
            .unwrap();
        assert_eq!(hook.edits_in_flight(), 0);
    }
}

/// Issue 31 item 11: who approved what. The stop's audit record lists the waiting call;
/// the human's decision (with the approver and the reason) is on the call's audit record
/// and in the decision trail.
#[tokio::test]
async fn the_audit_and_the_trail_record_who_approved_which_call_and_why() {
    use rein::hooks::{AuditConfig, AuditHook, AuditKind, MemoryAuditSink, SensitiveDataMasker};
    let sink = MemoryAuditSink::new();
    let audit = Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        sink.clone(),
    ));
    let paid = Arc::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("refund", json!({"amount": 500})),
        ScriptedTurn::text("refunded"),
    ]);
    let guard = rein::hooks::ApprovalHook::new(
        rein::hooks::ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["refund".into()],
            mode: rein::hooks::ApprovalMode::StopForHuman,
            ..rein::hooks::ApprovalConfig::default()
        },
        None,
    )
    .unwrap();
    let agent = builder(&model)
        .toolkit(refund_tool(&paid))
        .hook(guard)
        .hook(audit.clone())
        .decision_trail(true)
        .build()
        .unwrap();
    let stopped = agent
        .run(vec![Msg::user("refund")], session("who"))
        .await
        .unwrap();
    let call = pending_approvals(&stopped.reply).remove(0);
    let decisions = agent::ApprovalDecisions::new()
        .by("alice@support")
        .with_reason(&call.id, "customer verified by phone")
        .approve_call(&call);
    let done = agent.resume(&key("who"), decisions).await.unwrap();
    audit.flush().await.unwrap();
    let records = sink.records();
    let stop = records
        .iter()
        .find(|r| r.kind == AuditKind::FinalAnswer && !r.pending.is_empty())
        .expect("the stop is audited with what waits");
    assert_eq!(stop.pending[0]["id"], json!(call.id));
    assert_eq!(stop.pending[0]["status"], "awaiting_approval");
    let ran = records
        .iter()
        .find(|r| r.kind == AuditKind::ToolCall)
        .expect("the approved call is audited");
    assert_eq!(ran.tool_call_id.as_deref(), Some(call.id.as_str()));
    assert_eq!(ran.human_decision.as_deref(), Some("approve"));
    assert_eq!(ran.approved_by.as_deref(), Some("alice@support"));
    assert_eq!(
        ran.human_reason.as_deref(),
        Some("customer verified by phone")
    );
    let trail = done
        .decisions
        .iter()
        .find(|d| d.kind == rein::hook::DecisionKind::HumanDecision)
        .expect("the trail records the human decision");
    assert_eq!(trail.before, "approve");
    assert_eq!(trail.tool_call_id.as_deref(), Some(call.id.as_str()));
    assert!(
        trail
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("alice@support") && r.contains("verified")),
        "{trail:?}"
    );
}
