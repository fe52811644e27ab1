//! Built-in tools a small model can use: unknown properties are ignored, and every
//! rejection says exactly what to send.

use rein::*;
use serde_json::json;

use crate::support::subagents::{decl, spawn};
use crate::support::*;

const EXPECTS: &str = r#"agent_spawn expects {"agent_id": string (one of: alpha, beta), "task": string, "timeout_seconds": integer (optional)}"#;

fn two_subagents(model: &ScriptedModel) -> Agent {
    builder(model)
        .subagent(decl("alpha", &[]))
        .subagent(decl("beta", &[]))
        .build()
        .unwrap()
}

#[tokio::test]
async fn agent_spawn_ignores_unknown_properties_a_small_model_adds() {
    // The arguments a real 1.5B model sent, retrying until the iteration limit while
    // they were rejected.
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            SPAWN_TOOL,
            json!({"agent_id": "alpha", "task": "sum 2 and 3", "parameters": {"a": 2, "b": 3}}),
        ),
        ScriptedTurn::text("5"),
        ScriptedTurn::text("the sum is 5"),
    ]);
    let agent = two_subagents(&model);
    let reply = agent.call(Msg::user("delegate")).await.unwrap();
    assert_eq!(reply.text(), "the sum is 5");
    let r = &results_in_request(&model, 2)[0];
    assert!(!r.1, "the spawn was refused: {}", r.2);
    assert!(
        r.2.contains("status: completed") && r.2.ends_with('5'),
        "{}",
        r.2
    );
    // The offered schema does not claim a strictness admission does not apply, and
    // lists the subagents the tool accepts now.
    let offered = model.requests()[0]
        .tools
        .iter()
        .find(|t| t.name == SPAWN_TOOL)
        .unwrap()
        .parameters
        .clone();
    assert_eq!(offered.get("additionalProperties"), None);
    assert_eq!(
        offered["properties"]["agent_id"]["enum"],
        json!(["alpha", "beta"])
    );
}

#[tokio::test]
async fn a_rejected_agent_spawn_tells_the_model_exactly_what_to_send() {
    let model = ScriptedModel::new([
        // Missing `task`: refused at admission.
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "alpha"})),
        // An empty task: refused by the tool.
        spawn("alpha", "  "),
        // An unknown subagent: refused by the tool, naming the valid ids.
        spawn("gamma", "t"),
        ScriptedTurn::text("gave up"),
    ]);
    let agent = two_subagents(&model);
    agent.call(Msg::user("delegate")).await.unwrap();
    for n in 1..=3 {
        // Each request holds every result so far: the newest is the last.
        let results = results_in_request(&model, n);
        assert_eq!(results.len(), n);
        let r = results.last().unwrap();
        assert!(r.1, "request {n}: {}", r.2);
        assert!(r.2.ends_with(EXPECTS), "request {n}: {}", r.2);
    }
    assert!(results_in_request(&model, 1)[0].2.contains("\"task\""));
    assert!(
        results_in_request(&model, 2)[1]
            .2
            .contains("`task` must not be empty")
    );
    let unknown = &results_in_request(&model, 3)[2].2;
    assert!(
        unknown.contains("unknown subagent `gamma`; valid agent ids: [alpha, beta]"),
        "{unknown}"
    );
}

#[tokio::test]
async fn arguments_refused_at_admission_name_the_fields_a_tool_expects() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": "two"})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(
        r.1 && r.2.starts_with("Invalid arguments for tool `add`: "),
        "{}",
        r.2
    );
    assert!(
        r.2.ends_with(r#"add expects {"a": number, "b": number}"#),
        "{}",
        r.2
    );
}
