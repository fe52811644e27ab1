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

/// A promise, then an honest answer, through the default (`system`) correction; the
/// agent has a system prompt. Returns the model and the agent after one call.
async fn corrected_call() -> (ScriptedModel, Agent, Arc<SelfCorrectionHook>) {
    let model = ScriptedModel::new([
        ScriptedTurn::text("已为您退款 500 元，请注意查收"),
        ScriptedTurn::text("退款申请已提交人工审核，审核通过后原路退回"),
    ]);
    let hook = default_correction();
    let agent = builder(&model)
        .sys_prompt("你是客服")
        .hook(hook.clone())
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("我要退款")).await.unwrap();
    assert_eq!(reply.text(), "退款申请已提交人工审核，审核通过后原路退回");
    (model, agent, hook)
}

#[tokio::test]
async fn the_re_ask_ends_with_the_correction_as_a_user_turn_after_the_withdrawn_reply() {
    let (model, _agent, hook) = corrected_call().await;
    assert_eq!(hook.corrections_count(), 1);
    let second = model.requests()[1].messages.to_vec();
    let n = second.len();
    let fix = &second[n - 1];
    assert_eq!(fix.role, Role::User);
    assert_eq!(fix.name.as_deref(), Some("system-guard"));
    assert!(fix.text().contains("系统纠正"));
    let withdrawn = &second[n - 2];
    assert_eq!(withdrawn.role, Role::Assistant);
    assert!(withdrawn.text().starts_with("已为您退款"));
    assert_eq!(flags(withdrawn), [FLAG_CORRECTED]);
    // The only system message is the system prompt.
    let systems: Vec<String> = second
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Msg::text)
        .collect();
    assert_eq!(systems, ["你是客服"]);
}

#[tokio::test]
async fn neither_the_withdrawn_promise_nor_the_correction_is_stored() {
    let (_model, agent, _hook) = corrected_call().await;
    let stored = agent.messages(&key("default")).await;
    let texts: Vec<(Role, String)> = stored.iter().map(|m| (m.role, m.text())).collect();
    assert_eq!(
        texts,
        [
            (Role::User, "我要退款".to_owned()),
            (
                Role::Assistant,
                "退款申请已提交人工审核，审核通过后原路退回".to_owned()
            ),
        ]
    );
    assert_memory_valid(&stored);
}

#[tokio::test]
async fn a_later_call_of_the_session_never_sees_the_withdrawn_promise() {
    let (model, agent, _hook) = corrected_call().await;
    model.push(ScriptedTurn::text("好的"));
    agent.call(Msg::user("谢谢")).await.unwrap();
    let third = model.requests()[2].messages.to_vec();
    assert!(third.iter().all(|m| !m.text().starts_with("已为您退款")));
    assert!(third.iter().all(|m| !m.text().contains("系统纠正")));
}

#[cfg(feature = "openai")]
#[tokio::test]
async fn the_openai_re_ask_body_ends_with_the_user_correction_after_the_withdrawn_reply() {
    let (model, _agent, _hook) = corrected_call().await;
    let m = OpenAiChatModel::builder()
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let body = m.request_body(&model.requests()[1]).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert!(
        messages[n - 2]["content"]
            .as_str()
            .unwrap()
            .starts_with("已为您退款")
    );
    assert_eq!(messages[n - 1]["role"], "user");
    assert!(messages[n - 1].to_string().contains("系统纠正"));
    assert_eq!(messages.iter().filter(|m| m["role"] == "system").count(), 1);
}

#[cfg(feature = "anthropic")]
#[tokio::test]
async fn the_anthropic_re_ask_body_ends_with_a_user_turn_so_it_is_no_prefill() {
    let (model, _agent, _hook) = corrected_call().await;
    let m = AnthropicModel::builder()
        .model("claude-test")
        .max_tokens(1000)
        .build()
        .unwrap();
    let body = m.request_body(&model.requests()[1]).unwrap();
    assert_eq!(body["system"], "你是客服");
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert!(messages[1].to_string().contains("已为您退款"));
    assert!(messages[2].to_string().contains("系统纠正"));
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
