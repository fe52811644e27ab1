//! MaskingHook and SensitiveDataMasker on a running agent: final replies, tool results,
//! streamed deltas; tool arguments never.

use std::sync::Arc;

use futures::StreamExt;
use rein::hooks::{
    HooksConfig, MaskStyle, MaskedStream, MaskerConfig, MaskingConfig, MaskingHook, OnError,
    SensitiveDataMasker,
};
use rein::*;
use serde_json::{Value, json};

use crate::support::*;

fn masking(mask_tool_results: bool) -> MaskingHook {
    MaskingHook::new(
        MaskingConfig {
            enabled: true,
            mask_tool_results,
            ..MaskingConfig::default()
        },
        SensitiveDataMasker::default(),
    )
}

/// An enabled masking hook with a masker built from `config`.
fn masking_with(config: MaskerConfig) -> MaskingHook {
    MaskingHook::new(
        MaskingConfig {
            enabled: true,
            ..MaskingConfig::default()
        },
        config.build().unwrap(),
    )
}

async fn reply_through(hook: MaskingHook, text: &str) -> Msg {
    let model = ScriptedModel::new([ScriptedTurn::text(text)]);
    let agent = builder(&model).hook(hook).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap()
}

#[tokio::test]
async fn the_final_reply_is_masked_keeping_id_role_name_metadata_and_other_blocks() {
    let model = ScriptedModel::new([ScriptedTurn::text("已为您登记，联系电话 13800138000")
        .with_thinking("用户电话 13800138000")]);
    let agent = builder(&model)
        .name("cs")
        .hook(masking(false))
        .hook(
            FnHook::new("tag", |e| {
                if let HookEvent::PostCall(e) = e {
                    let mut m = e.final_message().clone();
                    m.metadata.insert("ticket".into(), json!("T-9"));
                    e.set_final_message(m);
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("登记电话")).await.unwrap();
    assert_eq!(reply.text(), "已为您登记，联系电话 ***");
    let stored = last_stored(&agent, "default").await;
    assert_eq!(reply.id, stored.id);
    assert_eq!(reply.role, Role::Assistant);
    assert_eq!(reply.name.as_deref(), Some("cs"));
    assert_eq!(reply.metadata.get("ticket"), Some(&json!("T-9")));
    assert_eq!(reply.content.len(), stored.content.len());
    assert!(matches!(&reply.content[0], ContentBlock::Thinking(t) if t.text == "用户电话 ***"));
    // Memory keeps what the model said; the caller gets the governed reply.
    assert!(stored.text().contains("13800138000"));
}

#[test]
fn a_message_without_personal_data_is_not_replaced() {
    let hook = masking(false);
    assert!(
        hook.mask_message(&Msg::assistant("订单 20260613001 已发货"))
            .is_none()
    );
}

#[tokio::test]
async fn order_numbers_timestamps_and_letter_prefixed_ids_are_not_masked() {
    let text = "订单 20260613001 已发货，时间戳 1718236800000，运单 SF13800138000，单号 ORD202606130012345";
    let reply = reply_through(masking(false), text).await;
    assert_eq!(reply.text(), text);
}

#[tokio::test]
async fn an_email_whose_local_part_holds_a_phone_number_is_masked_whole() {
    let reply = reply_through(masking(false), "邮箱 user13800138000@x.com 已记录").await;
    assert_eq!(reply.text(), "邮箱 *** 已记录");
}

#[tokio::test]
async fn ids_cards_emails_and_phones_in_one_reply_are_all_masked() {
    let reply = reply_through(
        masking(false),
        "身份证 11010119900307721X，卡 4111 1111 1111 1111，邮箱 user.name@example.com，手机 +86 138 0013 8000",
    )
    .await;
    assert_eq!(reply.text(), "身份证 ***，卡 ***，邮箱 ***，手机 ***");
}

#[tokio::test]
async fn the_reference_bank_card_example_is_masked_only_with_the_luhn_check_off() {
    // 6222021234567890123 fails Luhn: with the default (Luhn on) it is not taken for a
    // card; the reference behaviour needs `luhn_check = false`.
    let text = "卡号 6222021234567890123";
    assert_eq!(reply_through(masking(false), text).await.text(), text);
    let config: HooksConfig = serde_json::from_value(json!({
        "masker": { "luhn_check": false },
        "masking": { "enabled": true }
    }))
    .unwrap();
    let hooks = config.build().unwrap();
    let hook = hooks.masking().unwrap();
    assert_eq!(hook.masker().mask(text), "卡号 ***");
}

#[tokio::test]
async fn a_replacement_with_dollar_signs_and_backslashes_is_inserted_literally() {
    let hook = masking_with(MaskerConfig {
        replacement: r"$1\0".into(),
        ..MaskerConfig::default()
    });
    let reply = reply_through(hook, "电话 13800138000").await;
    assert_eq!(reply.text(), r"电话 $1\0");
}

#[tokio::test]
async fn typed_placeholders_and_partial_masking_are_options() {
    for (style, expected) in [
        (MaskStyle::Placeholder, "电话 [PHONE]，邮箱 [EMAIL]"),
        (
            MaskStyle::Partial,
            "电话 138****8000，邮箱 u***@example.com",
        ),
    ] {
        let hook = masking_with(MaskerConfig {
            style,
            ..MaskerConfig::default()
        });
        let reply = reply_through(hook, "电话 13800138000，邮箱 user@example.com").await;
        assert_eq!(reply.text(), expected);
    }
}

#[tokio::test]
async fn tool_results_are_masked_before_they_reach_the_model_when_enabled() {
    let log = Log::default();
    let model = tool_then_text("queryOrder", json!({"order_id": "A1"}), "查到了");
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(masking(true))
        .build()
        .unwrap();
    agent.call(Msg::user("查订单")).await.unwrap();
    let results = results_in_request(&model, 1);
    assert_eq!(results[0].2, "order A1: shipped; contact ***");
    let stored = agent.messages(&key("default")).await;
    assert!(stored.iter().all(|m| {
        !m.tool_results()
            .iter()
            .any(|r| r.content.contains("13800138000"))
    }));
}

#[tokio::test]
async fn tool_results_are_untouched_when_the_flag_is_off() {
    let log = Log::default();
    let model = tool_then_text("queryOrder", json!({"order_id": "A1"}), "查到了");
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(masking(false))
        .build()
        .unwrap();
    agent.call(Msg::user("查订单")).await.unwrap();
    assert_eq!(
        results_in_request(&model, 1)[0].2,
        "order A1: shipped; contact 13800138000"
    );
}

#[tokio::test]
async fn tool_arguments_are_never_masked() {
    let log = Log::default();
    let model = tool_then_text("queryOrder", json!({"order_id": "13800138000"}), "ok");
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(masking(true))
        .build()
        .unwrap();
    agent.call(Msg::user("查订单")).await.unwrap();
    assert_eq!(log.entries(), ["query:13800138000"]);
    let stored = agent.messages(&key("default")).await;
    let uses: Vec<Value> = stored
        .iter()
        .flat_map(|m| m.tool_uses().into_iter().map(|u| u.input.clone()))
        .collect();
    assert_eq!(uses, [json!({"order_id": "13800138000"})]);
}

#[tokio::test]
async fn streamed_text_is_masked_even_when_a_number_is_split_across_chunks() {
    // ScriptedModel streams this 20-char text in two 10-char chunks:
    // "您的电话是13800" + "138000，请确认".
    let model = ScriptedModel::new([ScriptedTurn::text("您的电话是13800138000，请确认")]);
    let hook = Arc::new(masking(false));
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let events: Vec<AgentEvent> = hook
        .mask_stream(agent.stream(vec![Msg::user("hi")], RunContext::new()))
        .collect()
        .await;
    let mut deltas = Vec::new();
    let mut fin = None;
    for e in events {
        match e {
            AgentEvent::TextDelta(t) => deltas.push(t),
            AgentEvent::Final(o) => fin = Some(o.reply.text()),
            _ => {}
        }
    }
    assert!(deltas.iter().all(|d| !d.contains("13800")), "{deltas:?}");
    assert_eq!(deltas.concat(), "您的电话是***，请确认");
    assert_eq!(fin.as_deref(), Some("您的电话是***，请确认"));
}

#[tokio::test]
async fn a_disabled_masking_hook_leaves_the_reply_alone() {
    let hook = MaskingHook::new(MaskingConfig::default(), SensitiveDataMasker::default());
    assert_eq!(SyncHook::interest(&hook), Interest::NONE);
    let reply = reply_through(hook, "电话 13800138000").await;
    assert_eq!(reply.text(), "电话 13800138000");
}

#[test]
fn masking_runs_at_priority_900_and_fails_closed_unless_told_otherwise() {
    let hook = masking(false);
    assert_eq!(SyncHook::priority(&hook), 900);
    assert_eq!(SyncHook::failure_policy(&hook), FailurePolicy::Abort);
    let open = MaskingHook::new(
        MaskingConfig {
            enabled: true,
            on_error: OnError::FailOpen,
            ..MaskingConfig::default()
        },
        SensitiveDataMasker::default(),
    );
    assert_eq!(SyncHook::failure_policy(&open), FailurePolicy::Ignore);
}

#[tokio::test]
async fn the_masked_stream_holds_back_unfinished_tokens_and_flushes_before_other_events() {
    let events = || {
        vec![
            AgentEvent::TextDelta("电话1380013".into()),
            AgentEvent::TextDelta("8000 后续".into()),
            AgentEvent::ThinkingDelta("想 user@".into()),
            AgentEvent::TextDelta("x".into()),
            AgentEvent::ReasoningRedone,
            AgentEvent::TextDelta("tail 1390013900".into()),
        ]
    };
    let out: Vec<String> = MaskedStream::new(
        futures::stream::iter(events()),
        SensitiveDataMasker::default(),
        256,
    )
    .map(|e| match e {
        AgentEvent::TextDelta(t) => format!("text:{t}"),
        AgentEvent::ThinkingDelta(t) => format!("thinking:{t}"),
        other => format!("{other:?}"),
    })
    .collect()
    .await;
    assert_eq!(
        out,
        [
            "text:电话",
            "text:*** 后续",
            "thinking:想 ",
            "thinking:user@",
            "text:x",
            "ReasoningRedone",
            "text:tail ",
            "text:1390013900",
        ]
    );
    // A carry limit bounds the delay but never splits the unfinished number: the text
    // before it goes out, the number waits for its end.
    let first = MaskedStream::new(
        futures::stream::iter(events()),
        SensitiveDataMasker::default(),
        4,
    )
    .next()
    .await;
    assert!(matches!(first, Some(AgentEvent::TextDelta(t)) if t == "电话"));
}

mod subagent_boundary {
    use rein::hooks::{HooksConfig, SubagentBoundary};
    use rein::*;
    use serde_json::json;

    use crate::support::*;

    async fn parent_reads(boundary: &str) -> (String, String) {
        let model = ScriptedModel::new([
            ScriptedTurn::tool_call(
                SPAWN_TOOL,
                json!({"agent_id": "lookup", "task": "find the phone"}),
            ),
            ScriptedTurn::text("The customer's phone is 13800138000."),
            ScriptedTurn::text("Found it: 13800138000."),
        ]);
        let config: HooksConfig = serde_json::from_value(json!({
            "masking": {"enabled": true, "subagent_replies": boundary}
        }))
        .unwrap();
        let child = SubagentDeclaration::builder("lookup")
            .description("looks things up")
            .build()
            .unwrap();
        let agent = config
            .build()
            .unwrap()
            .install(builder(&model).subagent(child))
            .build()
            .unwrap();
        let reply = agent.call(Msg::user("phone?")).await.unwrap();
        let results = results_in_request(&model, 2);
        (results[0].2.clone(), reply.text())
    }

    #[tokio::test]
    async fn by_default_a_childs_reply_is_masked_before_the_parent_reads_it() {
        let (parent_read, reply) = parent_reads("parent").await;
        assert!(!parent_read.contains("13800138000"), "{parent_read}");
        assert!(!reply.contains("13800138000"), "{reply}");
    }

    #[tokio::test]
    async fn with_the_user_boundary_the_parent_reads_the_data_and_the_user_still_gets_it_masked() {
        let (parent_read, reply) = parent_reads("user").await;
        assert!(parent_read.contains("13800138000"), "{parent_read}");
        assert!(!reply.contains("13800138000"), "{reply}");
        assert_eq!(
            serde_json::to_value(SubagentBoundary::default()).unwrap(),
            json!("parent")
        );
    }
}
