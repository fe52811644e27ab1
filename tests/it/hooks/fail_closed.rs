//! Production hooks fail closed on configuration: a name that matches no tool, a
//! condition on an argument that does not exist, or a hook that guards nothing is a
//! build error, never a silently disabled guard.

use rein::hooks::{
    ApprovalDecision, ApprovalRequest, HookServices, HooksConfig, pending_approvals,
};
use rein::*;
use serde_json::json;

use crate::support::*;

fn yaml(text: &str) -> HooksConfig {
    serde_yaml_ng::from_str(text).unwrap()
}

fn refund_agent(
    config: &HooksConfig,
    model: &ScriptedModel,
    log: &Log,
) -> Result<Agent, BuildError> {
    let approver = |_r: ApprovalRequest| async { ApprovalDecision::Approve };
    let hooks = config.build_with(HookServices::new().approver(approver))?;
    hooks
        .install(builder_with_tools(model, vec![refund_tool(log)]))
        .build()
}

#[test]
fn a_typod_guarded_tool_fails_the_build_naming_the_key_and_the_closest_tool() {
    let config = yaml("approval: {enabled: true, guarded_tools: [SubmitRefund]}");
    let err = refund_agent(&config, &ScriptedModel::new([]), &Log::default()).unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidHook);
    let msg = err.to_string();
    assert!(msg.contains("approval.guarded_tools[0]"), "{msg}");
    assert!(msg.contains("did you mean `submitRefund`"), "{msg}");
}

#[test]
fn a_typod_tool_guard_tool_fails_the_build_naming_the_key() {
    for (section, key) in [
        (
            "tool_guard: {enabled: true, tools: [refund], numeric_caps: {amount: 1000}}",
            "tool_guard.tools[0]",
        ),
        (
            "tool_guard: {enabled: true, per_tool: {refund: {numeric_caps: {amount: 10}}}}",
            "tool_guard.per_tool.refund",
        ),
        (
            "tool_guard: {enabled: true, deny_when: {refnud: {path: /amount, gt: 1}}}",
            "tool_guard.deny_when.refnud",
        ),
    ] {
        let err =
            refund_agent(&yaml(section), &ScriptedModel::new([]), &Log::default()).unwrap_err();
        assert!(err.to_string().contains(key), "{section}: {err}");
    }
}

#[test]
fn an_enabled_approval_hook_without_guarded_tools_fails_the_build() {
    let err = yaml("approval: {enabled: true, mode: stop_for_human}")
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(err.to_string().contains("approval.guarded_tools"), "{err}");
}

#[test]
fn a_condition_on_an_argument_the_tool_lacks_fails_the_build() {
    let config = yaml(
        "approval:
           enabled: true
           mode: stop_for_human
           guarded_tools: [submitRefund]
           when: {submitRefund: {path: /amuont, gt: 100}}",
    );
    let err = refund_agent(&config, &ScriptedModel::new([]), &Log::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("approval.when.submitRefund.path"), "{msg}");
    assert!(
        msg.contains("amount"),
        "it lists the declared arguments: {msg}"
    );
    // A condition for a tool that is not guarded is a config error.
    let err = yaml(
        "approval: {enabled: true, mode: stop_for_human, guarded_tools: [submitRefund],
                    when: {other: {path: /amount, gt: 1}}}",
    )
    .build()
    .unwrap_err();
    assert!(err.to_string().contains("approval.when.other"), "{err}");
}

const CONDITIONAL: &str = "
approval:
  enabled: true
  mode: stop_for_human
  guarded_tools: [submitRefund]
  when:
    submitRefund: {path: /amount, gt: 100}
";

#[tokio::test]
async fn an_over_100_refund_stops_for_approval_only_when_the_condition_holds() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 50})),
        ScriptedTurn::text("refunded 50"),
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 500})),
    ]);
    let agent = refund_agent(&yaml(CONDITIONAL), &model, &log).unwrap();
    let small = agent
        .run(vec![Msg::user("50 back")], session("s"))
        .await
        .unwrap();
    assert_eq!(small.reason, StopReason::Final);
    assert_eq!(log.entries(), [r#"refund:{"amount":50}"#]);
    let big = agent
        .run(vec![Msg::user("500 back")], session("s"))
        .await
        .unwrap();
    assert_eq!(big.reason, StopReason::ReasoningStopped);
    let waiting = pending_approvals(&big.reply);
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].input, json!({"amount": 500}));
    assert_eq!(log.entries().len(), 1, "the big refund waits for a human");
}

#[tokio::test]
async fn the_condition_is_evaluated_on_the_capped_call_and_the_approver_sees_both_forms() {
    let log = Log::default();
    let asked = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 5000})),
        ScriptedTurn::text("done"),
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 90})),
        ScriptedTurn::text("done"),
    ]);
    let config = yaml(
        "tool_guard: {enabled: true, tools: [submitRefund], numeric_caps: {amount: 1000}}
approval:
  enabled: true
  guarded_tools: [submitRefund]
  when: {submitRefund: {path: /amount, gt: 100}}",
    );
    let seen = asked.clone();
    let approver = move |r: ApprovalRequest| {
        seen.push(format!("{} <- {}", r.tool_use.input, r.original.input));
        async { ApprovalDecision::Approve }
    };
    let hooks = config
        .build_with(HookServices::new().approver(approver))
        .unwrap();
    let agent = hooks
        .install(builder_with_tools(&model, vec![refund_tool(&log)]))
        .build()
        .unwrap();
    agent
        .call_with(vec![Msg::user("a")], session("s"))
        .await
        .unwrap();
    assert_eq!(
        asked.entries(),
        [r#"{"amount":1000} <- {"amount":5000}"#],
        "the approver saw the call that would run and what the model asked for"
    );
    agent
        .call_with(vec![Msg::user("b")], session("s"))
        .await
        .unwrap();
    assert_eq!(asked.entries().len(), 1, "90 needs no approval");
    assert_eq!(
        log.entries(),
        [r#"refund:{"amount":1000}"#, r#"refund:{"amount":90}"#]
    );
}

#[tokio::test]
async fn tool_guard_deny_when_denies_the_calls_that_match() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("submitRefund", json!({"amount": 10, "order_id": "A-1"})),
            ("submitRefund", json!({"amount": 10, "order_id": "X-9"})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let config =
        yaml("tool_guard: {enabled: true, deny_when: {submitRefund: {path: /order_id, eq: X-9}}}");
    let agent = refund_agent(&config, &model, &log).unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(log.entries(), [r#"refund:{"amount":10,"order_id":"A-1"}"#]);
    let results = results_in_request(&model, 1);
    assert!(
        results[1].1 && results[1].2.contains("deny_when"),
        "{}",
        results[1].2
    );
}

#[tokio::test]
async fn an_unknown_tool_call_never_reaches_the_approver() {
    let asked = Log::default();
    let seen = asked.clone();
    let approver = move |r: ApprovalRequest| {
        seen.push(r.tool_use.name.clone());
        async { ApprovalDecision::Approve }
    };
    let model = ScriptedModel::new([
        // `submitRefund` with arguments its schema refuses, then a tool that does
        // not exist: neither is a call that could run.
        ScriptedTurn::tool_calls(vec![
            ("submitRefund", json!({"order_id": "A-1"})),
            ("wireMoney", json!({"amount": 5})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let config = yaml("approval: {enabled: true, guarded_tools: [submitRefund]}");
    let hooks = config
        .build_with(HookServices::new().approver(approver))
        .unwrap();
    let log = Log::default();
    let agent = hooks
        .install(builder_with_tools(&model, vec![refund_tool(&log)]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert!(
        asked.entries().is_empty(),
        "no human was asked about a call that cannot run"
    );
    let results = results_in_request(&model, 1);
    assert!(
        results[0].2.contains("Invalid arguments"),
        "{}",
        results[0].2
    );
    assert!(results[1].2.contains("Unknown tool"), "{}", results[1].2);
}

#[test]
fn hooks_config_from_path_reads_json_yaml_and_toml_and_names_the_file_on_errors() {
    let dir = TempDir::new("hooks-config");
    let files = [
        ("h.json", r#"{"masking": {"enabled": true}}"#),
        ("h.yaml", "masking: {enabled: true}\n"),
        ("h.toml", "[masking]\nenabled = true\n"),
    ];
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let config = HooksConfig::from_path(&path).unwrap();
        assert!(config.masking.enabled, "{name}");
    }
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "masking:\n  enabled: true\n  colour: red\n").unwrap();
    let err = HooksConfig::from_path(&bad).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bad.yaml") && msg.contains("colour"), "{msg}");
    let err = HooksConfig::from_path(dir.path().join("h.ini")).unwrap_err();
    assert!(err.to_string().contains("h.ini"), "{err}");
    let missing = HooksConfig::from_path(dir.path().join("none.json")).unwrap_err();
    assert!(missing.to_string().contains("cannot read"), "{missing}");
}

#[test]
fn a_misspelt_refund_tool_of_self_correction_fails_the_build() {
    let config = yaml("self_correction: {enabled: true, refund_tools: [submitrefund]}");
    let err = refund_agent(&config, &ScriptedModel::new([]), &Log::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("self_correction.refund_tools[0]"), "{msg}");
    assert!(msg.contains("did you mean `submitRefund`"), "{msg}");
}

/// The annotated reference configuration in `examples/` documents every key and builds.
#[test]
fn hooks_config_reference_names_every_key_and_builds_on_the_refund_agent() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hooks_reference.yaml");
    let config = HooksConfig::from_path(&path).unwrap();
    let file: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let defaults = serde_json::to_value(HooksConfig::default()).unwrap();
    for (section, keys) in defaults.as_object().unwrap() {
        let documented = file.get(section).and_then(|s| s.as_object());
        assert!(documented.is_some(), "section `{section}` is missing");
        for key in keys.as_object().unwrap().keys() {
            assert!(
                documented.unwrap().contains_key(key),
                "`{section}.{key}` is not in the reference"
            );
        }
    }
    let hooks = config.build().unwrap();
    let log = Log::default();
    let model = ScriptedModel::new([]);
    hooks
        .install(builder_with_tools(
            &model,
            vec![refund_tool(&log), query_tool(&log)],
        ))
        .build()
        .unwrap();
}

mod template_leak {
    use rein::hooks::{FLAG_TEMPLATE_STRIPPED, HooksConfig};
    use rein::*;

    use crate::support::*;

    fn agent(model: &ScriptedModel) -> Agent {
        let config: HooksConfig =
            serde_yaml_ng::from_str("template_leak: {enabled: true, max_redos: 1}").unwrap();
        config
            .build()
            .unwrap()
            .install(builder(model))
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn a_reply_with_leaked_template_markup_is_asked_again_and_never_shown() {
        let model = ScriptedModel::new([
            ScriptedTurn::text("<tool_call>{\"name\": \"refund\"}</tool_call>"),
            ScriptedTurn::text("I have filed your refund request for review."),
        ]);
        let reply = agent(&model).call(Msg::user("refund?")).await.unwrap();
        assert_eq!(reply.text(), "I have filed your refund request for review.");
        let second = &model.requests()[1].messages;
        assert!(
            second
                .iter()
                .any(|m| m.text().contains("chat-template markup"))
        );
    }

    #[tokio::test]
    async fn when_the_redo_budget_is_used_up_the_markup_is_stripped_and_flagged() {
        let model = ScriptedModel::new([
            ScriptedTurn::text("<|im_start|>assistant hello"),
            ScriptedTurn::text("<|im_start|>assistant hello again<|im_end|>"),
        ]);
        let reply = agent(&model).call(Msg::user("hi")).await.unwrap();
        assert_eq!(reply.text(), "assistant hello again");
        assert!(
            serde_json::to_string(&reply.metadata)
                .unwrap()
                .contains(FLAG_TEMPLATE_STRIPPED)
        );
        assert_eq!(model.requests().len(), 2, "one redo, then stripped");
    }
}
