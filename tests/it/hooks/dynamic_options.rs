//! DynamicOptionsHook: a keyword in the last user message merges the precise profile
//! over the effective options.

use rein::hooks::{
    CorrectionRole, DynamicOptionsConfig, DynamicOptionsHook, SelfCorrectionConfig,
    SelfCorrectionHook,
};
use rein::*;

use crate::support::*;

fn dynamic(config: DynamicOptionsConfig) -> DynamicOptionsHook {
    DynamicOptionsHook::new(DynamicOptionsConfig {
        enabled: true,
        ..config
    })
    .unwrap()
}

fn base() -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.7),
        max_tokens: Some(512),
        ..GenerateOptions::default()
    }
}

async fn options_for(
    hook: DynamicOptionsHook,
    defaults: GenerateOptions,
    text: &str,
) -> GenerateOptions {
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model)
        .generate_options(defaults)
        .hook(hook)
        .build()
        .unwrap();
    agent.call(Msg::user(text)).await.unwrap();
    model.requests()[0].options.clone()
}

#[tokio::test]
async fn a_complaint_switches_to_the_precise_profile_merged_over_the_effective_options() {
    let options = options_for(
        dynamic(DynamicOptionsConfig::default()),
        base(),
        "我要投诉，必须退款",
    )
    .await;
    assert_eq!(options.temperature, Some(0.1));
    assert_eq!(options.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(options.max_tokens, Some(512), "other fields are kept");
}

#[tokio::test]
async fn a_normal_message_leaves_the_options_identical() {
    let options = options_for(dynamic(DynamicOptionsConfig::default()), base(), "你好").await;
    assert_eq!(options, base());
}

#[tokio::test]
async fn an_excluded_phrase_does_not_switch_the_profile() {
    let options = options_for(
        dynamic(DynamicOptionsConfig::default()),
        base(),
        "系统升级期间能下单吗",
    )
    .await;
    assert_eq!(options, base());
}

#[tokio::test]
async fn an_unset_profile_field_does_not_clobber_the_effective_value() {
    let defaults = GenerateOptions {
        reasoning_effort: Some("low".into()),
        ..base()
    };
    let options = options_for(
        dynamic(DynamicOptionsConfig {
            precise_reasoning_effort: None,
            precise_options: GenerateOptions {
                top_p: Some(0.5),
                ..GenerateOptions::default()
            },
            ..DynamicOptionsConfig::default()
        }),
        defaults,
        "退款",
    )
    .await;
    assert_eq!(options.temperature, Some(0.1));
    assert_eq!(options.reasoning_effort.as_deref(), Some("low"));
    assert_eq!(options.top_p, Some(0.5));
}

#[tokio::test]
async fn a_hook_written_correction_is_not_taken_for_user_input() {
    // The user-role correction mentions 退款; the user did not.
    let model = ScriptedModel::new([ScriptedTurn::text("已为您退款"), ScriptedTurn::text("好的")]);
    let agent = builder(&model)
        .generate_options(base())
        .hook(dynamic(DynamicOptionsConfig::default()))
        .hook(SelfCorrectionHook::new(SelfCorrectionConfig {
            enabled: true,
            correction_role: CorrectionRole::User,
            ..SelfCorrectionConfig::default()
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("你好")).await.unwrap();
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].options, base());
}

#[test]
fn a_negative_precise_temperature_is_a_build_error_naming_the_key() {
    let err = DynamicOptionsHook::new(DynamicOptionsConfig {
        precise_temperature: Some(-0.1),
        ..DynamicOptionsConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(
        err.to_string()
            .contains("dynamic_options.precise_temperature")
    );
}

#[test]
fn dynamic_options_run_at_priority_70_and_are_inert_when_disabled() {
    let hook = dynamic(DynamicOptionsConfig::default());
    assert_eq!(SyncHook::priority(&hook), 70);
    let off = DynamicOptionsHook::new(DynamicOptionsConfig::default()).unwrap();
    assert_eq!(SyncHook::interest(&off), Interest::NONE);
}
