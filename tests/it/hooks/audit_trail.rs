//! AuditHook and the truth of a call: what the model asked for, what ran, who changed
//! it, and calls the runtime refused before any hook.

use std::sync::Arc;

use rein::hooks::{
    AuditConfig, AuditHook, AuditKind, AuditRecord, AuditStatus, MemoryAuditSink,
    SensitiveDataMasker,
};
use rein::*;
use serde_json::json;

use crate::support::*;

fn audit(sink: &MemoryAuditSink) -> Arc<AuditHook> {
    Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        Arc::new(sink.clone()),
    ))
}

/// Runs one call of `model` on an agent with the refund and query tools, the audit
/// hook and `hooks`; returns the tool records.
async fn audited(
    model: &ScriptedModel,
    configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> (Vec<AuditRecord>, Log) {
    let log = Log::default();
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let agent = configure(
        builder_with_tools(model, vec![refund_tool(&log), query_tool(&log)]).hook(hook.clone()),
    )
    .build()
    .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    hook.flush().await.unwrap();
    let tools = sink
        .records()
        .into_iter()
        .filter(|r| r.kind == AuditKind::ToolCall || r.kind == AuditKind::ToolDenied)
        .collect();
    (tools, log)
}

#[tokio::test]
async fn the_audit_of_a_capped_call_holds_the_requested_and_the_final_amount_and_the_guards_name() {
    for trail in [false, true] {
        let model = tool_then_text("submitRefund", json!({"amount": 5000}), "ok");
        let (records, log) =
            audited(&model, |b| b.hook(refund_cap(1000)).decision_trail(trail)).await;
        assert_eq!(log.entries(), [r#"refund:{"amount":1000}"#]);
        assert_eq!(records.len(), 1, "{records:?}");
        let r = &records[0];
        assert_eq!(r.status, Some(AuditStatus::Ok));
        assert_eq!(r.args, Some(json!({"amount": 1000})), "trail {trail}");
        assert_eq!(
            r.original_args,
            Some(json!({"amount": 5000})),
            "trail {trail}"
        );
        assert_eq!(r.rewritten_by, ["ToolGuardHook"], "trail {trail}");
        assert_eq!(r.original_tool, None);
        let line: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(line["original_args"], json!({"amount": 5000}));
        assert_eq!(line["rewritten_by"], json!(["ToolGuardHook"]));
    }
}

#[tokio::test]
async fn a_call_no_hook_changed_carries_no_original_arguments() {
    let model = tool_then_text("submitRefund", json!({"amount": 500}), "ok");
    let (records, _) = audited(&model, |b| b.hook(refund_cap(1000))).await;
    let r = &records[0];
    assert_eq!(r.args, Some(json!({"amount": 500})));
    assert_eq!(r.original_args, None);
    assert!(r.rewritten_by.is_empty());
    let line = r.to_json_line();
    assert!(
        !line.contains("original_args") && !line.contains("rewritten_by"),
        "{line}"
    );
}

#[tokio::test]
async fn original_arguments_are_masked_like_the_arguments() {
    let model = tool_then_text(
        "submitRefund",
        json!({"amount": 5000, "order_id": "call 13812345678"}),
        "ok",
    );
    let (records, _) = audited(&model, |b| b.hook(refund_cap(1000))).await;
    assert_eq!(
        records[0].original_args,
        Some(json!({"amount": 5000, "order_id": "call ***"}))
    );
}

#[tokio::test]
async fn every_hook_that_rewrote_a_call_is_named_in_order_with_the_decision_trail() {
    let model = tool_then_text("submitRefund", json!({"amount": 5000}), "ok");
    let tagger = FnHook::new("Tagger", |e| {
        if let HookEvent::PreActing(e) = e {
            let mut tu = e.tool_use().clone();
            tu.input["order_id"] = json!("A-1");
            e.set_tool_use(tu);
        }
        Ok(())
    })
    .on(EventKind::PreActing)
    .priority(30);
    let (records, _) = audited(&model, |b| {
        b.hook(refund_cap(1000)).hook(tagger).decision_trail(true)
    })
    .await;
    let r = &records[0];
    assert_eq!(r.args, Some(json!({"amount": 1000, "order_id": "A-1"})));
    assert_eq!(r.original_args, Some(json!({"amount": 5000})));
    assert_eq!(r.rewritten_by, ["ToolGuardHook", "Tagger"]);
}

#[tokio::test]
async fn a_renamed_call_records_the_tool_the_model_asked_for() {
    let model = tool_then_text("queryOrder", json!({"order_id": "7"}), "ok");
    let renamer = FnHook::new("Renamer", |e| {
        if let HookEvent::PreActing(e) = e
            && e.tool_use().name == "queryOrder"
        {
            e.set_tool_use(ToolUse::new("", "submitRefund", json!({"amount": 1})));
        }
        Ok(())
    })
    .on(EventKind::PreActing);
    let (records, _) = audited(&model, |b| b.hook(renamer)).await;
    let r = &records[0];
    assert_eq!(r.tool.as_deref(), Some("submitRefund"));
    assert_eq!(r.original_tool.as_deref(), Some("queryOrder"));
    assert_eq!(r.original_args, Some(json!({"order_id": "7"})));
    assert_eq!(r.rewritten_by, ["Renamer"]);
}

#[tokio::test]
async fn an_unknown_tool_call_is_audited_as_unknown_tool() {
    let model = tool_then_text("deleteEverything", json!({}), "ok");
    let (records, log) = audited(&model, |b| b).await;
    assert!(log.entries().is_empty());
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.kind, AuditKind::ToolCall);
    assert_eq!(r.tool.as_deref(), Some("deleteEverything"));
    assert_eq!(r.status, Some(AuditStatus::UnknownTool));
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .starts_with("Unknown tool `deleteEverything`"),
        "{r:?}"
    );
    assert!(r.to_json_line().contains(r#""status":"unknown_tool""#));
}

#[tokio::test]
async fn arguments_that_fail_the_schema_are_audited_as_invalid_arguments() {
    let model = tool_then_text("submitRefund", json!({"order_id": "7"}), "ok");
    let (records, log) = audited(&model, |b| b).await;
    assert!(log.entries().is_empty());
    assert_eq!(records[0].status, Some(AuditStatus::InvalidArguments));
    assert!(
        records[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("Invalid arguments")
    );
}

#[tokio::test]
async fn calls_beyond_the_per_turn_limit_are_audited_as_too_many_calls() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("queryOrder", json!({"order_id": "1"})),
            ("queryOrder", json!({"order_id": "2"})),
        ]),
        ScriptedTurn::text("ok"),
    ]);
    let (records, log) = audited(&model, |b| b.max_tool_calls_per_turn(1)).await;
    assert_eq!(log.entries(), ["query:1"]);
    let statuses: Vec<_> = records.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [Some(AuditStatus::Ok), Some(AuditStatus::TooManyCalls)]
    );
}

#[tokio::test]
async fn a_tool_that_fails_is_still_audited_as_error() {
    let failing = FunctionTool::new(
        "queryOrder",
        "Fails.",
        json!({"type": "object"}),
        |_| async {
            Err(ToolError::new(
                "Unknown tool `queryOrder`. Available tools: [x]",
            ))
        },
    );
    let model = tool_then_text("queryOrder", json!({}), "ok");
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let agent = builder_with_tools(&model, vec![failing])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("q")).await.unwrap();
    hook.flush().await.unwrap();
    let r = &sink.records()[0];
    assert_eq!(r.status, Some(AuditStatus::Error));
    assert_eq!(r.reason, None);
}
