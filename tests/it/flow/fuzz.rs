//! The information-flow property: random tools (random result labels, acting or not,
//! external or not, quarantined or not), random input labels, random policy actions,
//! random call scripts (some passing `$docN` handles) and a random human. After every
//! run, replaying what executed in order against an oracle that tracks the session's
//! label from the declarations alone: no acting call ran under untrusted context or
//! with an untrusted document without the policy's decision (a human's approval of that
//! call, or the configuration's `allow`), no external call carried data above its
//! ceiling without it, and the Rule of Two held.
//!
//! Cases: `REIN_FUZZ_CASES` (or `PROPTEST_CASES`), default 96.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rein::hooks::{ApprovalDecisions, FlowAction, InformationFlowConfig, InformationFlowPolicy};
use rein::*;
use serde_json::json;

#[derive(Clone, Debug)]
struct ToolSpec {
    untrusted: bool,
    private: bool,
    acts: bool,
    external: bool,
    quarantined: bool,
}

#[derive(Clone, Debug)]
struct Case {
    tools: Vec<ToolSpec>,
    untrusted_input: bool,
    untrusted_action: FlowAction,
    confidentiality: FlowAction,
    rule_of_two: bool,
    /// (tool index, argument handle number or none)
    calls: Vec<(usize, Option<u8>)>,
    approvals: Vec<bool>,
}

fn action() -> impl Strategy<Value = FlowAction> {
    prop_oneof![
        Just(FlowAction::Deny),
        Just(FlowAction::Approve),
        Just(FlowAction::Allow)
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let tool = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(untrusted, private, acts, external, quarantined)| ToolSpec {
                untrusted,
                private,
                acts,
                external,
                quarantined,
            },
        );
    (
        prop::collection::vec(tool, 2..6),
        any::<bool>(),
        action(),
        action(),
        any::<bool>(),
        prop::collection::vec((0usize..6, prop::option::of(1u8..4)), 1..8),
        prop::collection::vec(any::<bool>(), 8),
    )
        .prop_map(
            |(
                tools,
                untrusted_input,
                untrusted_action,
                confidentiality,
                rule_of_two,
                calls,
                approvals,
            )| {
                let n = tools.len();
                Case {
                    calls: calls.into_iter().map(|(t, h)| (t % n, h)).collect(),
                    tools,
                    untrusted_input,
                    untrusted_action,
                    confidentiality,
                    rule_of_two,
                    approvals,
                }
            },
        )
}

type Executed = Arc<Mutex<Vec<(usize, String)>>>;

fn tool(i: usize, spec: &ToolSpec, executed: &Executed) -> FunctionTool {
    let executed = Arc::clone(executed);
    let mut caps = ToolCapabilities::new().changes_state(spec.acts);
    if spec.untrusted {
        caps = caps.untrusted();
    }
    if spec.private {
        caps = caps.reads_private();
    }
    if spec.external {
        caps = caps.external(Confidentiality::Public);
    }
    if spec.quarantined {
        caps = caps.quarantined();
    }
    FunctionTool::new(
        format!("t{i}"),
        "A tool.",
        json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        move |args| {
            let executed = Arc::clone(&executed);
            async move {
                let x = args["x"].as_str().unwrap_or("").to_owned();
                let mut log = executed.lock().unwrap();
                log.push((i, x));
                // Unique per execution, so the oracle knows which document an
                // argument carried.
                Ok(format!("result {} of t{i}", log.len()))
            }
        },
    )
    .capabilities(caps)
}

/// Runs the case; returns what executed, in order, and the calls a human approved
/// (tool index per approval, in order).
async fn run(case: &Case) -> (Vec<(usize, String)>, Vec<usize>) {
    let executed: Executed = Arc::default();
    let mut turns: Vec<ScriptedTurn> = case
        .calls
        .iter()
        .map(|(t, h)| {
            let x = h.map_or_else(|| "plain".to_owned(), |h| format!("$doc{h}"));
            ScriptedTurn::tool_call(format!("t{t}"), json!({ "x": x }))
        })
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let model = ScriptedModel::new(turns);
    let mut tools = Toolkit::new();
    for (i, spec) in case.tools.iter().enumerate() {
        tools.register(tool(i, spec, &executed)).unwrap();
    }
    let input_label = if case.untrusted_input {
        Label::UNTRUSTED
    } else {
        Label::BOTTOM
    };
    let agent = crate::support::builder(&model)
        .toolkit(tools)
        .input_label(input_label)
        .max_iters(20)
        .hook(InformationFlowPolicy::new(InformationFlowConfig {
            enabled: true,
            untrusted_action: case.untrusted_action,
            confidentiality: case.confidentiality,
            rule_of_two: case.rule_of_two,
            tools: Default::default(),
        }))
        .build()
        .unwrap();
    let ctx = || RunContext::new().with_session_id("fuzz");
    let mut out = agent.run(vec![Msg::user("go")], ctx()).await.unwrap();
    let mut approved = Vec::new();
    let mut decisions_made = 0;
    while out.reason == StopReason::ReasoningStopped {
        let waiting = rein::hooks::pending_approvals(&out.reply);
        assert!(!waiting.is_empty(), "a stop without a pending call");
        let mut d = ApprovalDecisions::new();
        for call in &waiting {
            let yes = case.approvals[decisions_made % case.approvals.len()];
            decisions_made += 1;
            if yes {
                approved.push(call.name[1..].parse::<usize>().unwrap());
                d = d.approve_call(call);
            } else {
                d = d.deny_call(call, "no");
            }
        }
        let resume = ctx();
        resume.extensions().insert(d);
        out = agent.run(vec![], resume).await.unwrap();
    }
    let executed = executed.lock().unwrap().clone();
    (executed, approved)
}

/// Replays the execution against the declarations: every executed call must have been
/// allowed by the configuration or approved by the human.
fn check(case: &Case, executed: &[(usize, String)], approved: &[usize]) -> Result<(), String> {
    let mut untrusted = case.untrusted_input;
    let mut private = false;
    // Documents, by their text: (untrusted, private) of what made them.
    let mut docs: HashMap<String, (bool, bool)> = HashMap::new();
    let mut approvals: Vec<usize> = approved.to_vec();
    for (k, (i, x)) in executed.iter().enumerate() {
        let spec = &case.tools[*i];
        if x.starts_with("$doc") {
            return Err(format!("t{i} received the handle {x} unsubstituted"));
        }
        let (arg_untrusted, arg_private) = docs.get(x).copied().unwrap_or((false, false));
        let acting = spec.acts || spec.external;
        let needs = |action: FlowAction| action != FlowAction::Allow;
        let mut needed = false;
        if acting && (untrusted || arg_untrusted) && needs(case.untrusted_action) {
            if case.untrusted_action == FlowAction::Deny {
                return Err(format!(
                    "t{i} ran under untrusted context although the policy denies"
                ));
            }
            needed = true;
        }
        if spec.external && (private || arg_private) && needs(case.confidentiality) {
            if case.confidentiality == FlowAction::Deny {
                return Err(format!("t{i} sent private data although the policy denies"));
            }
            needed = true;
        }
        if acting && case.rule_of_two && (untrusted || arg_untrusted) && (private || arg_private) {
            needed = true;
        }
        if needed {
            match approvals.iter().position(|a| a == i) {
                Some(p) => {
                    approvals.remove(p);
                }
                None => return Err(format!("t{i} ran without the human's approval")),
            }
        }
        // Its result enters the session (or becomes a document).
        let result_untrusted = spec.untrusted || arg_untrusted;
        let result_private = spec.private || arg_private;
        if spec.quarantined {
            docs.insert(
                format!("result {} of t{i}", k + 1),
                (result_untrusted, result_private),
            );
        } else {
            untrusted |= result_untrusted;
            private |= result_private;
        }
    }
    Ok(())
}

#[test]
fn no_acting_call_runs_under_untrusted_context_without_the_policys_decision() {
    let cases = std::env::var("REIN_FUZZ_CASES")
        .or_else(|_| std::env::var("PROPTEST_CASES"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |case| {
            let (executed, approved) = rt.block_on(run(&case));
            check(&case, &executed, &approved).map_err(|e| {
                TestCaseError::fail(format!(
                    "{e}\nexecuted: {executed:?}\napproved: {approved:?}"
                ))
            })
        })
        .unwrap();
}
