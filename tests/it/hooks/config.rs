//! HooksConfig: reference defaults, strict keys, build errors naming the key, and the
//! installer.

use rein::hooks::{
    ApprovalDecision, ApprovalMode, ApprovalRequest, AuditKind, AuditSinkConfig, HookServices,
    HooksConfig, MaskStyle, MemoryAuditSink, QueueFull, Segment, TtftMode,
};
use rein::*;
use serde_json::{Value, json};

use crate::support::*;

fn parse(v: Value) -> HooksConfig {
    serde_json::from_value(v).unwrap()
}

fn everything_on() -> HooksConfig {
    parse(json!({
        "latency": {"enabled": true},
        "masking": {"enabled": true},
        "audit": {"enabled": true},
        "self_correction": {"enabled": true},
        "tool_guard": {"enabled": true, "numeric_caps": {"amount": 1000}},
        "dynamic_options": {"enabled": true},
        "approval": {"enabled": true, "mode": "stop_for_human", "guarded_tools": ["submitRefund"]}
    }))
}

#[test]
fn an_empty_config_has_the_reference_defaults() {
    let c = parse(json!({}));
    assert_eq!(c, HooksConfig::default());
    assert!(c.latency.enabled);
    assert!(!c.masking.enabled);
    assert!(!c.audit.enabled);
    assert!(!c.self_correction.enabled);
    assert!(!c.tool_guard.enabled);
    assert!(!c.dynamic_options.enabled);
    assert!(!c.approval.enabled);
    assert!(c.audit.mask_args);
    assert!(c.audit.mask_answer);
    assert_eq!(c.audit.queue_capacity, 1024);
    assert_eq!(c.audit.on_full, QueueFull::Wait);
    assert_eq!(c.audit.sink, AuditSinkConfig::Tracing);
    assert_eq!(c.self_correction.max_corrections, 1);
    assert_eq!(c.self_correction.payment_keywords.len(), 7);
    assert_eq!(c.masker.replacement, "***");
    assert_eq!(c.masker.style, MaskStyle::Replace);
    assert!(c.masker.luhn_check);
    assert_eq!(c.dynamic_options.precise_temperature, Some(0.1));
    assert_eq!(
        c.dynamic_options.precise_reasoning_effort.as_deref(),
        Some("high")
    );
    assert!(
        c.approval.guarded_tools.is_empty(),
        "no reference-app default: an enabled hook must name its tools"
    );
    assert_eq!(c.approval.timeout_ms, 60_000);
    assert_eq!(c.approval.mode, ApprovalMode::Await);
    assert_eq!(c.latency.ttft, TtftMode::FirstChunk);
}

#[test]
fn the_default_config_installs_only_the_latency_hook() {
    let hooks = HooksConfig::default().build().unwrap();
    assert_eq!(hooks.names(), ["LatencyHook"]);
    let model = ScriptedModel::new([]);
    let agent = HooksConfig::default()
        .build()
        .unwrap()
        .install(builder(&model))
        .build()
        .unwrap();
    assert_eq!(agent.hook_names(), ["LatencyHook"]);
}

#[test]
fn an_enabled_config_installs_every_hook_in_priority_order() {
    let model = ScriptedModel::new([]);
    let hooks = everything_on().build().unwrap();
    // Installed onto a builder that already has a hook, in reverse: the chain orders
    // by priority, not registration.
    let agent = hooks
        .install(
            builder_with_tools(&model, vec![refund_tool(&Log::default())])
                .hook(FnHook::new("mine", |_| Ok(())).priority(800)),
        )
        .build()
        .unwrap();
    assert_eq!(
        agent.hook_names(),
        [
            "ToolGuardHook",
            "LatencyHook",
            "DynamicOptionsHook",
            "ApprovalHook",
            "SelfCorrectionHook",
            "mine",
            "AuditHook",
            "MaskingHook"
        ]
    );
    let priorities: Vec<i32> = [
        SyncHook::priority(&**hooks.tool_guard().unwrap()),
        SyncHook::priority(&**hooks.latency().unwrap()),
        SyncHook::priority(&**hooks.dynamic_options().unwrap()),
        Hook::priority(&**hooks.approval().unwrap()),
        SyncHook::priority(&**hooks.self_correction().unwrap()),
        Hook::priority(&**hooks.audit().unwrap()),
        SyncHook::priority(&**hooks.masking().unwrap()),
    ]
    .into();
    assert_eq!(priorities, [20, 50, 70, 100, 200, 850, 900]);
}

#[test]
fn a_config_round_trips_through_json() {
    let c = everything_on();
    let back: HooksConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn an_unknown_key_is_rejected() {
    for v in [
        json!({"masking": {"enabeld": true}}),
        json!({"latencyy": {}}),
        json!({"masker": {"replacment": "x"}}),
        json!({"audit": {"sink": {"type": "jsonl", "path": "a", "extra": 1}}}),
    ] {
        let err = serde_json::from_value::<HooksConfig>(v.clone()).unwrap_err();
        assert!(err.to_string().contains("unknown"), "{v}: {err}");
    }
}

#[test]
fn an_uncompilable_extra_pattern_is_a_build_error_naming_the_key_and_pattern() {
    let c = parse(json!({
        "masker": {"extra_patterns": [
            {"name": "token", "regex": "TOKEN-\\d+"},
            {"name": "broken", "regex": "SECRET-(\\d+"}
        ]}
    }));
    let err = c.build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    let msg = err.to_string();
    assert!(msg.contains("`masker.extra_patterns[1].regex`"), "{msg}");
    assert!(msg.contains("broken"), "{msg}");
}

#[test]
fn a_negative_cap_is_a_build_error_naming_the_key() {
    let c = parse(json!({"tool_guard": {"numeric_caps": {"amount": -100}}}));
    let err = c.build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(
        err.to_string()
            .contains("`tool_guard.numeric_caps.amount`: must not be negative"),
        "{err}"
    );
}

#[test]
fn an_audit_file_that_cannot_be_opened_is_a_build_error_naming_the_key() {
    let c = parse(json!({
        "audit": {"enabled": true, "sink": {"type": "jsonl", "path": "/nonexistent-dir/x/audit.jsonl"}}
    }));
    let err = c.build().unwrap_err();
    assert!(err.to_string().contains("`audit.sink.path`"), "{err}");
}

#[test]
fn approval_in_await_mode_without_an_approver_is_a_build_error() {
    let c = parse(json!({"approval": {"enabled": true, "guarded_tools": ["submitRefund"]}}));
    let err = c.build().unwrap_err();
    assert!(err.to_string().contains("`approval.mode`"), "{err}");
    let services =
        HookServices::new().approver(|_req: ApprovalRequest| async { ApprovalDecision::Approve });
    assert!(c.build_with(services).unwrap().approval().is_some());
}

#[test]
fn a_disabled_section_is_still_validated() {
    let c = parse(json!({"approval": {"timeout_ms": 0}, "masking": {"enabled": false}}));
    let err = c.build().unwrap_err();
    assert!(err.to_string().contains("`approval.timeout_ms`"), "{err}");
    let c = parse(json!({"masker": {"disabled": ["phnoe"]}}));
    let err = c.build().unwrap_err();
    assert!(err.to_string().contains("`masker.disabled[0]`"), "{err}");
}

#[tokio::test]
async fn installed_hooks_share_their_instances_across_agents() {
    let sink = MemoryAuditSink::new();
    let hooks = parse(json!({"audit": {"enabled": true}}))
        .build_with(HookServices::new().audit_sink(sink.clone()))
        .unwrap();
    for name in ["a", "b"] {
        let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
        let agent = hooks.install(builder(&model).name(name)).build().unwrap();
        agent.call(Msg::user("hi")).await.unwrap();
    }
    hooks.audit().unwrap().flush().await.unwrap();
    assert_eq!(
        sink.kinds(),
        [AuditKind::FinalAnswer, AuditKind::FinalAnswer]
    );
    let agents: Vec<String> = sink.records().into_iter().map(|r| r.agent).collect();
    assert_eq!(agents, ["a", "b"]);
    assert_eq!(hooks.latency().unwrap().snapshot().count(Segment::E2e), 2);
}

#[test]
fn every_hook_is_inert_when_its_section_is_disabled() {
    // Build every hook from a config, then flip `enabled` off by rebuilding each from
    // its own section: a disabled hook subscribes to no event.
    let mut c = everything_on();
    c.latency.enabled = false;
    c.masking.enabled = false;
    c.audit.enabled = false;
    c.self_correction.enabled = false;
    c.tool_guard.enabled = false;
    c.dynamic_options.enabled = false;
    c.approval.enabled = false;
    let hooks = c.build().unwrap();
    assert!(hooks.names().is_empty());
    use rein::hooks::*;
    let masker = SensitiveDataMasker::default();
    assert_eq!(
        SyncHook::interest(&LatencyHook::new(c.latency.clone())),
        Interest::NONE
    );
    assert_eq!(
        SyncHook::interest(&MaskingHook::new(c.masking.clone(), masker.clone())),
        Interest::NONE
    );
    assert_eq!(
        Hook::interest(&AuditHook::new(
            c.audit.clone(),
            masker,
            std::sync::Arc::new(MemoryAuditSink::new())
        )),
        Interest::NONE
    );
    assert_eq!(
        SyncHook::interest(&SelfCorrectionHook::new(c.self_correction.clone())),
        Interest::NONE
    );
    assert_eq!(
        SyncHook::interest(&ToolGuardHook::new(c.tool_guard.clone()).unwrap()),
        Interest::NONE
    );
    assert_eq!(
        SyncHook::interest(&DynamicOptionsHook::new(c.dynamic_options.clone()).unwrap()),
        Interest::NONE
    );
    assert_eq!(
        Hook::interest(&ApprovalHook::new(c.approval.clone(), None).unwrap()),
        Interest::NONE
    );
}

/// Issue 31 item 13 (per-replica values): string values of a hooks config may name
/// variables, substituted in the parsed values (never in the text, so a value cannot
/// change the file's structure); a missing variable fails naming it and the key; a
/// whole-value reference to a number becomes the number.
#[test]
fn per_replica_values_come_from_variables_and_cannot_change_the_structure() {
    let dir = TempDir::new("hooks-config");
    let path = dir.path().join("hooks.yaml");
    let vars = |name: &str| match name {
        "REPLICA" => Some("replica-7\nmasking: {enabled: false}".to_owned()),
        "TIMEOUT_MS" => Some("2500".to_owned()),
        _ => None,
    };
    std::fs::write(
        &path,
        "audit:\n  enabled: true\n  sink: {type: jsonl, path: \"/tmp/audit-${REPLICA}.jsonl\"}\n\
         approval:\n  enabled: true\n  mode: stop_for_human\n  guarded_tools: [refund]\n  timeout_ms: \"${TIMEOUT_MS}\"\n\
         masking:\n  enabled: true\n",
    )
    .unwrap();
    let c = rein::hooks::HooksConfig::from_path_with_vars(&path, &vars).unwrap();
    assert!(c.masking.enabled, "a value cannot change the structure");
    assert_eq!(c.approval.timeout_ms, 2500);
    let rein::hooks::AuditSinkConfig::Jsonl { path: audit, .. } = &c.audit.sink else {
        panic!("jsonl sink");
    };
    assert_eq!(
        audit,
        std::path::Path::new("/tmp/audit-replica-7\nmasking: {enabled: false}.jsonl")
    );
    std::fs::write(
        &path,
        "audit:\n  enabled: true\n  sink: {type: jsonl, path: \"${NOT_SET}\"}\n",
    )
    .unwrap();
    let err = rein::hooks::HooksConfig::from_path_with_vars(&path, &vars).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("NOT_SET") && text.contains("audit.sink.path"),
        "{text}"
    );
}

/// Issue 31 item 13: one hooks config serves several agents. The triage agent (no
/// `refund`) builds from the service's file through its section; typo detection holds
/// for every agent; without the section the triage build fails as before.
#[test]
fn one_hooks_config_serves_several_agents_through_per_agent_sections() {
    let yaml = "tool_guard: {enabled: true, tools: [refund], numeric_caps: {amount: 1000}}\n\
                approval: {enabled: true, mode: stop_for_human, guarded_tools: [refund]}\n\
                agents:\n  triage: {tool_guard: {enabled: false}, approval: {enabled: false}}\n";
    let config: rein::hooks::HooksConfig = serde_yaml_ng::from_str(yaml).unwrap();
    let tool = |name: &str| {
        FunctionTool::new(
            name,
            "t",
            json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
            |_| async { Ok(String::new()) },
        )
    };
    let model = ScriptedModel::new([]);
    let service = config
        .for_agent("service")
        .build()
        .unwrap()
        .install(builder_with_tools(&model, vec![tool("refund")]).name("service"))
        .build()
        .unwrap();
    assert!(service.hook_names().iter().any(|h| h == "ToolGuardHook"));
    let triage = config
        .for_agent("triage")
        .build()
        .unwrap()
        .install(builder_with_tools(&model, vec![tool("lookup")]).name("triage"))
        .build()
        .unwrap();
    assert!(
        !triage
            .hook_names()
            .iter()
            .any(|h| h == "ToolGuardHook" || h == "ApprovalHook")
    );
    // Without its section the triage agent cannot reuse the file (typo detection).
    let err = config
        .for_agent("nobody")
        .build()
        .unwrap()
        .install(builder_with_tools(&model, vec![tool("lookup")]))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("refund"), "{err}");
    // An unknown key inside a section is refused like anywhere else.
    let bad = "agents:\n  triage: {tool_gaurd: {enabled: false}}\n";
    let e = serde_yaml_ng::from_str::<rein::hooks::HooksConfig>(bad).unwrap_err();
    assert!(e.to_string().contains("tool_gaurd"), "{e}");
}

#[tokio::test]
async fn budgets_in_a_hooks_file_hold_like_the_builders() {
    let config: HooksConfig = serde_yaml_ng::from_str(
        "budgets:\n  call: {model_calls: 1}\n  prices: {scripted: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n",
    )
    .unwrap();
    let hooks = config.build().unwrap();
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("never asked"),
    ]);
    let agent = hooks
        .install(builder_with_tools(&model, vec![add_tool(&log)]))
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("add")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::BudgetExhausted);
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn an_invalid_budget_in_a_hooks_file_is_a_build_error_naming_the_key() {
    let zero: HooksConfig = serde_yaml_ng::from_str("budgets: {session: {tool_calls: 0}}").unwrap();
    let err = zero.build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(
        err.to_string().contains("budgets.session.tool_calls"),
        "{err}"
    );
    // A user budget keeps tokens, cost and model calls only.
    let user: HooksConfig = serde_yaml_ng::from_str("budgets: {user: {tool_calls: 5}}").unwrap();
    let err = user.build().unwrap_err();
    assert!(err.to_string().contains("budgets.user.tool_calls"), "{err}");
    let price: HooksConfig = serde_yaml_ng::from_str(
        "budgets: {prices: {gpt-4o: {input_per_mtok: -2.5, output_per_mtok: 10}}}",
    )
    .unwrap();
    let err = price.build().unwrap_err();
    assert!(
        err.to_string().contains("prices.gpt-4o.input_per_mtok"),
        "{err}"
    );
    let typo = serde_yaml_ng::from_str::<HooksConfig>("budgets: {call: {model_call: 3}}");
    assert!(typo.unwrap_err().to_string().contains("model_call"));
}
