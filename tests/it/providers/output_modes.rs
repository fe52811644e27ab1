//! Structured-output modes: a typed call of an agent with tools never sends a response
//! format together with tools to a server that did not declare the combination; it
//! asks through the final-answer tool instead (or the prompt), and every mode validates
//! and re-asks the same way.

use rein::agent::OUTPUT_TOOL;
use rein::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

/// How a support message is triaged.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Triage {
    /// One of `refund`, `question`, `complaint`.
    category: String,
    /// Whether a human should look at it today.
    urgent: bool,
}

fn lookup(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}),
        move |_args: Value| {
            let log = log.clone();
            async move {
                log.push("lookup ran");
                Ok("paid twice".to_owned())
            }
        },
    )
}

fn agent_with_lookup(model: &ScriptedModel, log: &Log) -> Agent {
    builder_with_tools(model, vec![lookup(log)])
        .sys_prompt("You triage support messages.")
        .build()
        .unwrap()
}

fn offered(request: &ModelRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

fn answer(urgent: bool) -> Value {
    json!({"category": "refund", "urgent": urgent})
}

#[tokio::test]
async fn with_tools_on_an_undeclared_server_the_answer_comes_through_the_final_answer_tool() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("lookup", json!({"order": "A-1"})),
        ScriptedTurn::tool_call(OUTPUT_TOOL, answer(true)),
    ]);
    let agent = agent_with_lookup(&model, &log);
    let ctx = session("typed-tool");
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("order A-1 charged twice")], ctx.clone())
        .await
        .unwrap();
    assert!(typed.value.urgent);
    assert_eq!(typed.outcome.reason, StopReason::Final);
    assert_eq!(log.count("lookup ran"), 1);
    for request in model.requests() {
        assert!(
            request.options.response_format.is_none(),
            "no response format next to tools"
        );
        assert_eq!(offered(&request), ["lookup", OUTPUT_TOOL]);
        let system = request.messages.iter().next().unwrap();
        assert_eq!(system.role, Role::System);
        assert!(system.text().starts_with("You triage support messages."));
        assert!(system.text().contains(OUTPUT_TOOL), "{}", system.text());
    }
    // The answer is stored as an assistant text, never as a call without a result.
    let memory = agent.messages(&key("typed-tool")).await;
    assert_memory_valid(&memory);
    let last = memory.last().unwrap();
    assert_eq!(last.role, Role::Assistant);
    assert!(!last.has_tool_uses());
    let stored: Value = serde_json::from_str(&last.text()).unwrap();
    assert_eq!(stored, answer(true));
    // A plain call afterwards offers the agent's tools only.
    model.push(ScriptedTurn::text("You're welcome."));
    agent
        .call_with(vec![Msg::user("thanks")], ctx)
        .await
        .unwrap();
    assert_eq!(offered(model.requests().last().unwrap()), ["lookup"]);
}

#[tokio::test]
async fn a_server_that_declares_the_format_with_tools_gets_the_native_format() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("lookup", json!({"order": "A-1"})),
        ScriptedTurn::text(answer(false).to_string()),
    ])
    .with_capabilities(ModelCapabilities::PERMISSIVE.native_output_with_tools(true));
    let agent = agent_with_lookup(&model, &log);
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("order A-1?")], RunContext::new())
        .await
        .unwrap();
    assert!(!typed.value.urgent);
    for request in model.requests() {
        assert!(request.options.response_format.is_some());
        assert_eq!(offered(&request), ["lookup"]);
    }
}

#[tokio::test]
async fn a_final_answer_that_fails_the_schema_is_re_asked_to_call_the_tool_again() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(OUTPUT_TOOL, json!({"category": "refund", "urgent": "yes"})),
        ScriptedTurn::tool_call(OUTPUT_TOOL, answer(true)),
    ]);
    let agent = agent_with_lookup(&model, &log);
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("hello?")], session("reask"))
        .await
        .unwrap();
    assert_eq!(typed.reasks, 1);
    let correction = model.requests()[1].messages.iter().last().unwrap().clone();
    assert_eq!(correction.role, Role::User);
    assert!(
        correction.text().contains("/urgent"),
        "{}",
        correction.text()
    );
    assert!(
        correction.text().contains(OUTPUT_TOOL),
        "{}",
        correction.text()
    );
    assert_memory_valid(&agent.messages(&key("reask")).await);
}

#[tokio::test]
async fn the_final_answer_called_with_other_tools_waits_for_their_results() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("lookup", json!({"order": "A-1"})),
            (OUTPUT_TOOL, answer(false)),
        ]),
        ScriptedTurn::tool_call(OUTPUT_TOOL, answer(true)),
    ]);
    let agent = agent_with_lookup(&model, &log);
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("order A-1?")], session("both"))
        .await
        .unwrap();
    assert!(
        typed.value.urgent,
        "the answer given after the lookup's result"
    );
    assert_eq!(log.count("lookup ran"), 1);
    let memory = agent.messages(&key("both")).await;
    assert_memory_valid(&memory);
    let calls: Vec<String> = memory
        .iter()
        .flat_map(|m| m.tool_uses())
        .map(|u| u.name.clone())
        .collect();
    assert_eq!(
        calls,
        ["lookup"],
        "the early final answer is not kept as a call"
    );
}

#[tokio::test]
async fn a_plain_text_answer_that_fits_is_accepted_in_tool_mode() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text(answer(true).to_string())]);
    let agent = agent_with_lookup(&model, &log);
    let triage: Triage = agent.call_typed(Msg::user("hello?")).await.unwrap();
    assert!(triage.urgent);
}

#[tokio::test]
async fn prompted_mode_puts_the_schema_in_the_system_prompt_and_sends_no_format() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text(answer(true).to_string())]);
    let agent = builder_with_tools(&model, vec![lookup(&log)])
        .output_mode(OutputMode::Prompted)
        .build()
        .unwrap();
    let triage: Triage = agent.call_typed(Msg::user("hello?")).await.unwrap();
    assert!(triage.urgent);
    let request = &model.requests()[0];
    assert!(request.options.response_format.is_none());
    assert_eq!(offered(request), ["lookup"]);
    let system = request.messages.iter().next().unwrap();
    assert_eq!(system.role, Role::System);
    assert!(system.text().contains("\"urgent\""), "{}", system.text());
}

#[tokio::test]
async fn without_tools_a_model_without_native_output_is_prompted() {
    let model = ScriptedModel::new([ScriptedTurn::text(answer(false).to_string())])
        .with_capabilities(ModelCapabilities::PERMISSIVE.native_output(false));
    let agent = builder(&model).build().unwrap();
    let triage: Triage = agent.call_typed(Msg::user("hello?")).await.unwrap();
    assert!(!triage.urgent);
    let request = &model.requests()[0];
    assert!(request.options.response_format.is_none());
    assert!(request.tools.is_empty());
    assert!(
        request
            .messages
            .iter()
            .next()
            .unwrap()
            .text()
            .contains("JSON Schema")
    );
}

#[tokio::test]
async fn an_agent_with_a_tool_named_final_answer_cannot_use_the_tool_mode() {
    let model = ScriptedModel::new([ScriptedTurn::text("{}")]);
    let clash = FunctionTool::new(
        OUTPUT_TOOL,
        "Clashes.",
        json!({"type": "object"}),
        |_args: Value| async move { Ok(String::new()) },
    );
    let agent = builder_with_tools(&model, vec![clash]).build().unwrap();
    let err = agent
        .call_typed::<Triage>(Msg::user("hello?"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Output);
    assert!(err.to_string().contains(OUTPUT_TOOL), "{err}");
    assert!(model.requests().is_empty(), "refused before any model call");
}

#[test]
fn auto_resolves_from_the_capabilities_and_whether_tools_are_offered() {
    let permissive = ModelCapabilities::PERMISSIVE;
    let declared = permissive.native_output_with_tools(true);
    let no_tools = permissive.tools(false);
    let nothing = no_tools.native_output(false);
    let cases = [
        (permissive, true, OutputMode::Tool),
        (declared, true, OutputMode::Native),
        (no_tools, true, OutputMode::Prompted),
        (permissive, false, OutputMode::Native),
        (nothing, false, OutputMode::Prompted),
    ];
    for (caps, tools, expected) in cases {
        assert_eq!(
            OutputMode::Auto.resolve(&caps, tools),
            expected,
            "{caps:?} {tools}"
        );
    }
    assert_eq!(
        OutputMode::Native.resolve(&permissive, true),
        OutputMode::Native,
        "an explicit mode is kept"
    );
    for preset in [
        ModelCapabilities::llama_cpp(),
        ModelCapabilities::ollama(),
        ModelCapabilities::vllm(),
    ] {
        assert_eq!(OutputMode::Auto.resolve(&preset, true), OutputMode::Tool);
        assert_eq!(OutputMode::Auto.resolve(&preset, false), OutputMode::Native);
    }
    for known in [
        ModelCapabilities::openai("gpt-4o"),
        ModelCapabilities::anthropic("claude-sonnet-4-5"),
    ] {
        assert_eq!(OutputMode::Auto.resolve(&known, true), OutputMode::Native);
    }
}
