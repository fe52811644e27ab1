//! `DelegationStyle::ToolPerSubagent`: every declared subagent is its own tool
//! (`ask_<id>` with one `task` argument), under the same hooks, bound and journal as
//! `agent_spawn`.

use rein::*;
use serde_json::json;

use crate::support::subagents::*;
use crate::support::*;

fn ask(tool: &str, task: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(tool, json!({"task": task}))
}

fn per_subagent(model: &ScriptedModel, log: &Log) -> AgentBuilder {
    builder(model)
        .name("boss")
        .delegation_style(DelegationStyle::ToolPerSubagent)
        .toolkit(toolkit_with(vec![named_tool("search", log)]))
        .subagent(decl("weather", &["search"]))
        .subagent(decl("billing-agent", &[]))
}

#[tokio::test]
async fn each_declared_subagent_is_offered_as_its_own_tool_with_one_task_argument() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text("hi")]);
    let agent = per_subagent(&model, &log).build().unwrap();
    assert_eq!(
        agent.tool_names(),
        ["search", "ask_weather", "ask_billing_agent"]
    );
    agent.call(Msg::user("hello")).await.unwrap();
    assert_eq!(
        offered(&model, 0),
        ["search", "ask_weather", "ask_billing_agent"]
    );
    let request = &model.requests()[0];
    let weather = request
        .tools
        .iter()
        .find(|t| t.name == "ask_weather")
        .unwrap();
    assert!(
        weather.description.contains("the weather subagent"),
        "the declaration's description: {}",
        weather.description
    );
    assert_eq!(weather.parameters["required"], json!(["task"]));
    assert!(weather.parameters["properties"].get("agent_id").is_none());
}

#[tokio::test]
async fn a_subagent_tool_call_delegates_under_the_same_inherited_hooks() {
    let log = Log::default();
    let seen = Log::default();
    let rec = seen.clone();
    let model = ScriptedModel::new([
        ask("ask_weather", "weather in Paris?"),
        ScriptedTurn::tool_call("search", json!({})),
        ScriptedTurn::text("31 degrees"),
        ScriptedTurn::text("It is 31 degrees in Paris."),
    ]);
    let agent = per_subagent(&model, &log)
        .hook(
            FnHook::new("gov", move |e| {
                if let HookEvent::PreActing(p) = e {
                    rec.push(format!("{}:{}", p.agent().depth, p.tool_use().name));
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("weather?")).await.unwrap();
    assert_eq!(reply.text(), "It is 31 degrees in Paris.");
    assert_eq!(seen.entries(), ["0:ask_weather", "1:search"]);
    assert_eq!(log.entries(), ["search"]);
    let result = &results_in_request(&model, 3)[0];
    assert!(!result.1, "{}", result.2);
    assert!(
        result
            .2
            .starts_with("status: completed\nagent_id: weather\n"),
        "{}",
        result.2
    );
    // The child got the task as its user message.
    let child_request = &model.requests()[1];
    assert!(
        child_request
            .messages
            .iter()
            .any(|m| m.role == Role::User && m.text() == "weather in Paris?")
    );
}

#[tokio::test]
async fn a_denied_subagent_tool_never_starts_its_subagent() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ask("ask_weather", "weather in Paris?"),
        ScriptedTurn::text("I cannot ask."),
    ]);
    let agent = per_subagent(&model, &log)
        .hook(
            FnHook::new("deny", |e| {
                if let HookEvent::PreActing(p) = e
                    && p.tool_use().name == "ask_weather"
                {
                    p.deny("no delegation today");
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("weather?")).await.unwrap();
    assert_eq!(model.requests().len(), 2, "no request of the subagent");
    let result = &results_in_request(&model, 1)[0];
    assert!(result.1);
    assert!(result.2.contains("no delegation today"), "{}", result.2);
}

#[tokio::test]
async fn an_empty_task_is_an_error_result_that_says_what_the_tool_takes() {
    let log = Log::default();
    let model = ScriptedModel::new([ask("ask_weather", "  "), ScriptedTurn::text("ok")]);
    let agent = per_subagent(&model, &log).build().unwrap();
    agent.call(Msg::user("weather?")).await.unwrap();
    let result = &results_in_request(&model, 1)[0];
    assert!(result.1);
    assert!(
        result.2.contains("`task` must not be empty"),
        "{}",
        result.2
    );
    assert!(result.2.contains("ask_weather"), "{}", result.2);
}

#[test]
fn two_subagents_with_one_tool_name_fail_the_build_naming_both() {
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .delegation_style(DelegationStyle::ToolPerSubagent)
        .subagent(decl("billing-agent", &[]))
        .subagent(decl("billing_agent", &[]))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Tool);
    let text = err.to_string();
    assert!(
        text.contains("billing-agent")
            && text.contains("billing_agent")
            && text.contains("ask_billing_agent"),
        "{text}"
    );
}

#[test]
fn a_tool_named_like_a_subagent_tool_fails_the_build() {
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .delegation_style(DelegationStyle::ToolPerSubagent)
        .toolkit(toolkit_with(vec![named_tool("ask_weather", &log)]))
        .subagent(decl("weather", &[]))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Tool);
    assert!(err.to_string().contains("ask_weather"), "{err}");
}

#[test]
fn the_spawn_style_offers_agent_spawn_only() {
    let model = ScriptedModel::new([]);
    let agent = builder(&model)
        .delegation_style(DelegationStyle::Spawn)
        .subagent(decl("weather", &[]))
        .build()
        .unwrap();
    assert_eq!(agent.tool_names(), [SPAWN_TOOL]);
}

#[tokio::test]
async fn a_tool_held_for_subagents_is_never_offered_to_the_parent_but_runs_in_the_child() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ask("ask_weather", "weather in Paris?"),
        ScriptedTurn::tool_call("search", json!({})),
        ScriptedTurn::text("31 degrees"),
        ScriptedTurn::text("It is 31 degrees."),
    ]);
    let agent = builder(&model)
        .delegation_style(DelegationStyle::ToolPerSubagent)
        .subagent_tools(toolkit_with(vec![named_tool("search", &log)]))
        .subagent(decl("weather", &["search"]))
        .build()
        .unwrap();
    assert_eq!(
        agent.tool_names(),
        ["ask_weather"],
        "the parent cannot call it"
    );
    agent.call(Msg::user("weather?")).await.unwrap();
    assert_eq!(offered(&model, 0), ["ask_weather"]);
    assert_eq!(offered(&model, 1), ["search"], "the child is granted it");
    assert_eq!(log.entries(), ["search"]);
}

#[test]
fn a_held_tool_clashing_with_the_parents_own_fails_the_build() {
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("search", &log)]))
        .subagent_tools(toolkit_with(vec![named_tool("search", &log)]))
        .subagent(decl("weather", &["search"]))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Tool);
    assert!(err.to_string().contains("search"), "{err}");
}

#[test]
fn a_workspace_agent_keeps_agent_spawn_for_subagents_declared_later() {
    let ws = TempDir::workspace("per-subagent");
    ws.write("subagents/weather.md", &md("Looks up the weather.", "[]"));
    let model = ScriptedModel::new([]);
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .workspace(ws.path())
        .build()
        .unwrap();
    assert_eq!(agent.tool_names(), ["ask_weather", SPAWN_TOOL]);
}
