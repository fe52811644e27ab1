//! ToolGuardHook: injected parameters, clamped caps, rejected non-numbers.

use std::sync::Arc;

use rein::hooks::{HooksConfig, StringNumbers, ToolGuardConfig, ToolGuardHook};
use rein::*;
use serde_json::{Value, json};

use crate::support::*;

fn guard(config: Value) -> ToolGuardHook {
    let mut config: ToolGuardConfig = serde_json::from_value(config).unwrap();
    config.enabled = true;
    ToolGuardHook::new(config).unwrap()
}

fn call(name: &str, input: Value) -> ToolUse {
    ToolUse::new("call_1", name, input)
}

/// The guarded input, or the input unchanged.
fn guarded(g: &ToolGuardHook, name: &str, input: Value) -> Value {
    let c = call(name, input);
    g.guard(&c).unwrap().unwrap_or(c).input
}

#[test]
fn a_missing_parameter_is_injected_and_an_existing_one_keeps_its_value_and_type() {
    let g = guard(json!({"inject_params": {"channel": "online", "priority": 1}}));
    assert_eq!(
        guarded(&g, "t", json!({"amount": 5})),
        json!({"amount": 5, "channel": "online", "priority": 1})
    );
    assert_eq!(
        guarded(&g, "t", json!({"channel": "vip", "priority": "high"})),
        json!({"channel": "vip", "priority": "high"})
    );
    assert_eq!(
        guarded(&g, "t", Value::Null),
        json!({"channel": "online", "priority": 1})
    );
}

#[test]
fn a_value_above_the_cap_is_clamped_and_an_integer_stays_an_integer() {
    let g = guard(json!({"numeric_caps": {"amount": 1000}}));
    let out = guarded(&g, "t", json!({"amount": 5000}));
    assert_eq!(out, json!({"amount": 1000}));
    assert!(out["amount"].is_i64());
    assert_eq!(
        guarded(&g, "t", json!({"amount": 800})),
        json!({"amount": 800})
    );
    assert_eq!(
        guarded(&g, "t", json!({"amount": 1000.5})),
        json!({"amount": 1000.0})
    );
    let frac = guard(json!({"numeric_caps": {"amount": 99.5}}));
    assert_eq!(
        guarded(&frac, "t", json!({"amount": 120})),
        json!({"amount": 99})
    );
}

#[test]
fn a_min_bound_raises_negative_values() {
    let g = guard(json!({"numeric_caps": {"amount": {"min": 0, "max": 1000}}}));
    assert_eq!(
        guarded(&g, "t", json!({"amount": -50})),
        json!({"amount": 0})
    );
    assert_eq!(
        guarded(&g, "t", json!({"amount": -0.5})),
        json!({"amount": 0.0})
    );
}

#[test]
fn nan_inf_and_non_numeric_values_in_a_capped_field_are_rejected() {
    let g = guard(json!({"numeric_caps": {"amount": 1000}}));
    for bad in [
        json!("NaN"),
        json!("nan"),
        json!("inf"),
        json!("-Infinity"),
        json!("1e999"),
        json!("abc"),
        json!(""),
        json!(true),
        json!(null),
        json!([1]),
        json!({"v": 1}),
    ] {
        let err = g
            .guard(&call("refund", json!({"amount": bad.clone()})))
            .unwrap_err();
        assert!(
            err.contains("`amount`") && err.contains("refund") && err.contains("at most 1000"),
            "{bad}: {err}"
        );
    }
    // A missing capped field is not an error.
    assert_eq!(g.guard(&call("refund", json!({}))).unwrap(), None);
}

#[test]
fn a_numeric_string_is_clamped_and_stays_a_string_unless_converted() {
    let keep = guard(json!({"numeric_caps": {"amount": 1000}}));
    assert_eq!(
        guarded(&keep, "t", json!({"amount": "5000"})),
        json!({"amount": "1000"})
    );
    assert_eq!(
        guarded(&keep, "t", json!({"amount": " 800 "})),
        json!({"amount": " 800 "})
    );
    let convert = guard(json!({
        "numeric_caps": {"amount": 1000},
        "string_numbers": "convert"
    }));
    assert_eq!(convert.config().string_numbers, StringNumbers::Convert);
    assert_eq!(
        guarded(&convert, "t", json!({"amount": "5000"})),
        json!({"amount": 1000})
    );
    assert_eq!(
        guarded(&convert, "t", json!({"amount": "12.5"})),
        json!({"amount": 12.5})
    );
}

#[test]
fn rules_can_be_scoped_to_tools() {
    let g = guard(json!({
        "tools": ["submitRefund"],
        "numeric_caps": {"amount": 1000},
        "per_tool": {"queryOrder": {"inject_params": {"source": "bot"}}}
    }));
    assert_eq!(
        guarded(&g, "submitRefund", json!({"amount": 5000})),
        json!({"amount": 1000})
    );
    assert_eq!(
        guarded(&g, "transfer", json!({"amount": 5000})),
        json!({"amount": 5000})
    );
    assert_eq!(
        guarded(&g, "queryOrder", json!({"amount": 5000})),
        json!({"amount": 5000, "source": "bot"})
    );
}

#[test]
fn nested_fields_are_addressed_by_json_pointer() {
    let g = guard(json!({
        "inject_params": {"/meta/channel": "online"},
        "numeric_caps": {"/refund/amount": 100, "/items/*/qty": {"min": 1, "max": 5}}
    }));
    assert_eq!(
        guarded(
            &g,
            "t",
            json!({"refund": {"amount": 900}, "items": [{"qty": 9}, {"qty": 0}, {"qty": 3}]})
        ),
        json!({
            "refund": {"amount": 100},
            "items": [{"qty": 5}, {"qty": 1}, {"qty": 3}],
            "meta": {"channel": "online"}
        })
    );
}

#[tokio::test]
async fn a_guarded_call_runs_with_the_guarded_arguments_and_memory_records_them() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 999999}), "已提交");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(guard(json!({
            "inject_params": {"channel": "online"},
            "numeric_caps": {"amount": 1000}
        })))
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(
        log.entries(),
        [r#"refund:{"amount":1000,"channel":"online"}"#]
    );
    let stored = agent.messages(&key("default")).await;
    let used = stored[1].tool_uses()[0].clone();
    assert!(used.id.starts_with("call_"), "a runtime id: {}", used.id);
    assert_eq!(
        stored[2].tool_results()[0].id,
        used.id,
        "the result pairs with the stored use"
    );
    assert_eq!(used.input, json!({"amount": 1000, "channel": "online"}));
}

#[tokio::test]
async fn a_nan_amount_denies_the_call_and_the_model_is_told_why() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": "NaN"}), "金额无效");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(guard(json!({"numeric_caps": {"amount": 1000}})))
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    assert!(log.entries().is_empty());
    let (_, is_error, text) = results_in_request(&model, 1).remove(0);
    assert!(is_error);
    assert!(
        text.contains("denied") && text.contains("not a finite number") && !text.contains("NaN"),
        "{text}"
    );
}

#[test]
fn invalid_caps_are_build_errors_naming_the_key() {
    for (config, key) in [
        (
            json!({"numeric_caps": {"amount": -1}}),
            "tool_guard.numeric_caps.amount",
        ),
        (
            json!({"numeric_caps": {"amount": {"min": 10, "max": 5}}}),
            "tool_guard.numeric_caps.amount.min",
        ),
        (
            json!({"numeric_caps": {"amount": {}}}),
            "tool_guard.numeric_caps.amount.max",
        ),
        (
            json!({"per_tool": {"refund": {"numeric_caps": {"amount": -3}}}}),
            "tool_guard.per_tool.refund.numeric_caps.amount",
        ),
        (
            json!({"inject_params": {"/a/*": 1}}),
            "tool_guard.inject_params./a/*",
        ),
        (
            json!({"numeric_caps": {"/a//b": 1}}),
            "tool_guard.numeric_caps./a//b",
        ),
    ] {
        let config: HooksConfig = serde_json::from_value(json!({ "tool_guard": config })).unwrap();
        let err = config.build().unwrap_err();
        assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
        assert!(err.to_string().contains(&format!("`{key}`")), "{err}");
    }
}

#[tokio::test]
async fn a_disabled_guard_leaves_calls_alone() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 5000}), "ok");
    let hook = Arc::new(
        ToolGuardHook::new(
            serde_json::from_value(json!({"numeric_caps": {"amount": 1000}})).unwrap(),
        )
        .unwrap(),
    );
    assert_eq!(SyncHook::interest(&*hook), Interest::NONE);
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(hook)
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    assert_eq!(log.entries(), [r#"refund:{"amount":5000}"#]);
}

#[test]
fn the_tool_guard_runs_first_at_priority_20_and_fails_closed() {
    let g = guard(json!({"numeric_caps": {"amount": 1}}));
    assert_eq!(SyncHook::priority(&g), 20);
    assert_eq!(SyncHook::failure_policy(&g), FailurePolicy::Abort);
}
