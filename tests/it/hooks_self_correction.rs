//! SelfCorrectionHook: payment promises make the model think again, within a budget
//! per call.

use std::sync::Arc;

use rein::hooks::{
    CorrectionRole, FLAG_CORRECTED, FLAG_CORRECTION_EXHAUSTED, FLAGS_KEY, SelfCorrectionConfig,
    SelfCorrectionHook,
};
use rein::*;
use serde_json::json;

use crate::support::*;

fn correction(config: SelfCorrectionConfig) -> Arc<SelfCorrectionHook> {
    Arc::new(SelfCorrectionHook::new(SelfCorrectionConfig {
        enabled: true,
        ..config
    }))
}

fn default_correction() -> Arc<SelfCorrectionHook> {
    correction(SelfCorrectionConfig::default())
}

fn flags(msg: &Msg) -> Vec<String> {
    rein::hooks::msg_flags(msg)
}

#[tokio::test]
async fn a_tool_free_payment_promise_makes_the_model_reason_again_with_a_system_correction() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("已为您退款 500 元，请注意查收"),
        ScriptedTurn::text("退款申请已提交人工审核，审核通过后原路退回"),
    ]);
    let hook = default_correction();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let reply = agent.call(Msg::user("我要退款")).await.unwrap();
    assert_eq!(reply.text(), "退款申请已提交人工审核，审核通过后原路退回");
    assert_eq!(hook.corrections_count(), 1);
    let second = &model.requests()[1].messages;
    let promise = second
        .iter()
        .position(|m| m.text().starts_with("已为您退款"))
        .unwrap();
    let fix = second.get(promise + 1).unwrap();
    assert_eq!(fix.role, Role::System);
    assert_eq!(fix.name.as_deref(), Some("system-guard"));
    assert!(fix.text().contains("系统纠正"));
    // Memory never stores system messages; the retracted turn is flagged.
    let stored = agent.messages(&key("default")).await;
    assert!(stored.iter().all(|m| m.role != Role::System));
    assert_eq!(flags(&stored[1]), [FLAG_CORRECTED]);
    assert_memory_valid(&stored);
}

#[tokio::test]
async fn the_user_role_correction_with_custom_text_is_stored_in_the_conversation() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("Your refund was refunded already."),
        ScriptedTurn::text("A colleague will review the refund."),
    ]);
    let hook = correction(SelfCorrectionConfig {
        payment_keywords: vec!["REFUNDED".into()],
        correction_role: CorrectionRole::User,
        correction_message: "Do not claim refunds are done.".into(),
        ..SelfCorrectionConfig::default()
    });
    let agent = builder(&model).hook(hook).build().unwrap();
    agent.call(Msg::user("refund?")).await.unwrap();
    let stored = agent.messages(&key("default")).await;
    let fix = &stored[2];
    assert_eq!(fix.role, Role::User);
    assert_eq!(fix.text(), "Do not claim refunds are done.");
    assert_eq!(fix.name.as_deref(), Some("system-guard"));
    assert_eq!(
        model.requests()[1].messages.last().unwrap().text(),
        fix.text()
    );
}

#[tokio::test]
async fn a_turn_with_any_tool_call_is_not_corrected_by_default() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("queryOrder", json!({"order_id": "A"}))
            .with_text("已为您退款，我再查一下订单"),
        ScriptedTurn::text("订单已发货"),
    ]);
    let hook = default_correction();
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("查订单")).await.unwrap();
    assert_eq!(hook.corrections_count(), 0);
    assert_eq!(log.entries(), ["query:A"]);
}

#[tokio::test]
async fn the_strict_mode_corrects_a_promise_next_to_an_unrelated_tool_call_and_memory_stays_valid()
{
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("queryOrder", json!({"order_id": "A"}))
            .with_text("已为您退款，我再查一下订单"),
        ScriptedTurn::text("退款需人工审核，我先查订单"),
    ]);
    let hook = correction(SelfCorrectionConfig {
        correct_with_tool_calls: true,
        ..SelfCorrectionConfig::default()
    });
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("查订单")).await.unwrap();
    assert_eq!(reply.text(), "退款需人工审核，我先查订单");
    assert_eq!(hook.corrections_count(), 1);
    assert!(
        log.entries().is_empty(),
        "the redone turn's tool call never ran"
    );
    let stored = agent.messages(&key("default")).await;
    assert_memory_valid(&stored);
    let results = results_in_request(&model, 1);
    assert!(results[0].1 && results[0].2.contains("reasoning was redone"));
}

#[tokio::test]
async fn the_strict_mode_accepts_a_promise_made_while_calling_the_refund_tool() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 20})).with_text("已为您退款"),
        ScriptedTurn::text("已提交"),
    ]);
    let hook = correction(SelfCorrectionConfig {
        correct_with_tool_calls: true,
        refund_tools: vec!["submitRefund".into()],
        ..SelfCorrectionConfig::default()
    });
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(hook.corrections_count(), 0);
    assert_eq!(log.entries().len(), 1);
}

#[tokio::test]
async fn a_reply_without_a_promise_is_not_corrected() {
    let model = ScriptedModel::new([ScriptedTurn::text("您的订单已发货")]);
    let hook = default_correction();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    agent.call(Msg::user("订单呢")).await.unwrap();
    assert_eq!(model.requests().len(), 1);
    assert_eq!(hook.corrections_count(), 0);
}

#[test]
fn negated_conditional_and_excluded_phrases_are_not_promises() {
    let hook = SelfCorrectionHook::default();
    assert_eq!(
        hook.find_promise("已为您退款，款项稍后到账"),
        Some("已为您退款")
    );
    for text in [
        "退款成功后，款项将原路返回",
        "您已经退货了吗？",
        "这不是已退款的状态",
        "目前尚未退款成功",
        "如果款项已退的话会短信通知您",
    ] {
        assert_eq!(hook.find_promise(text), None, "{text}");
    }
}

#[tokio::test]
async fn the_budget_bounds_corrections_and_an_exhausted_budget_flags_the_reply() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("已为您退款"),
        ScriptedTurn::text("已打款，请查收"),
    ]);
    let hook = default_correction();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let reply = agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(model.requests().len(), 2, "one correction only");
    assert_eq!(reply.text(), "已打款，请查收");
    assert_eq!(
        reply.metadata.get(FLAGS_KEY),
        Some(&json!([FLAG_CORRECTION_EXHAUSTED]))
    );
    assert_eq!(hook.corrections_count(), 1);
    assert_eq!(hook.exhausted_count(), 1);
}

#[tokio::test]
async fn a_new_call_gets_a_fresh_budget_even_after_the_previous_call_errored() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("已为您退款"),
        ScriptedTurn::error(ModelError::new(ModelErrorKind::Server, "boom")),
        ScriptedTurn::text("已为您退款"),
        ScriptedTurn::text("退款待人工审核"),
    ]);
    let hook = default_correction();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let ctx = session("s");
    agent
        .call_with(vec![Msg::user("退款")], ctx.clone())
        .await
        .unwrap_err();
    assert!(
        ctx.extensions().is_empty(),
        "the failed call left no budget behind"
    );
    let reply = agent
        .call_with(vec![Msg::user("退款呢")], session("s"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "退款待人工审核");
    assert_eq!(hook.corrections_count(), 2);
    assert_eq!(hook.exhausted_count(), 0);
}

#[tokio::test]
async fn a_zero_budget_flags_the_promise_without_redoing() {
    let model = ScriptedModel::new([ScriptedTurn::text("已为您退款")]);
    let hook = correction(SelfCorrectionConfig {
        max_corrections: 0,
        ..SelfCorrectionConfig::default()
    });
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let reply = agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(flags(&reply), [FLAG_CORRECTION_EXHAUSTED]);
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn self_correction_runs_at_priority_200_and_is_inert_when_disabled() {
    let on = default_correction();
    assert_eq!(SyncHook::priority(&*on), 200);
    assert_eq!(
        SyncHook::interest(&SelfCorrectionHook::default()),
        Interest::NONE
    );
}
