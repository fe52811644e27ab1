//! Structured output: `Agent::call_typed` / `run_typed` send the type's schema in the
//! call's requests, validate and deserialize the answer, and re-ask (bounded) when it
//! does not fit; providers put the format on the wire (OpenAI natively, Anthropic as a
//! tool).

use rein::agent::OUTPUT_REASKS;
use rein::model::Messages;
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

fn agent(model: &ScriptedModel) -> Agent {
    Agent::builder()
        .name("triage")
        .model(model.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_typed_call_returns_the_validated_value_and_sends_the_schema_in_the_request() {
    let model = ScriptedModel::new([ScriptedTurn::text(
        r#"{"category": "refund", "urgent": true}"#,
    )]);
    let triage: Triage = agent(&model)
        .call_typed(Msg::user("charged twice"))
        .await
        .unwrap();
    assert_eq!(
        triage,
        Triage {
            category: "refund".into(),
            urgent: true
        }
    );
    let format = model.requests()[0].options.response_format.clone().unwrap();
    assert_eq!(format, ResponseFormat::for_type::<Triage>().unwrap());
    assert_eq!(format.name, "Triage");
    assert_eq!(format.schema["properties"]["urgent"]["type"], "boolean");
}

#[tokio::test]
async fn an_answer_that_fails_the_schema_is_re_asked_naming_the_field_and_hooks_see_every_attempt()
{
    let model = ScriptedModel::new([
        ScriptedTurn::text(r#"{"category": "refund", "urgent": "yes"}"#),
        ScriptedTurn::text("```json\n{\"category\": \"refund\", \"urgent\": false}\n```"),
    ]);
    let log = Log::default();
    let agent = Agent::builder()
        .name("triage")
        .model(model.clone())
        .hook(Recorder::new("rec", 0, &log).interest(Interest::only(EventKind::PostCall)))
        .build()
        .unwrap();
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("hello?")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(typed.reasks, 1);
    assert!(!typed.value.urgent);
    assert_eq!(log.count("rec:PostCall"), 2, "hooks observe both attempts");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let correction = requests[1].messages.iter().last().unwrap();
    assert_eq!(correction.role, Role::User);
    assert!(
        correction.text().contains("/urgent"),
        "the re-ask names the field: {}",
        correction.text()
    );
    assert!(
        requests[1].options.response_format.is_some(),
        "the re-ask carries the format too"
    );
}

#[tokio::test]
async fn an_answer_that_never_fits_is_an_output_error_after_the_bounded_re_asks() {
    let bad = || ScriptedTurn::text("Sure! It is a refund, and it is urgent.");
    let model = ScriptedModel::new([bad(), bad(), bad(), bad()]);
    let err = agent(&model)
        .call_typed::<Triage>(Msg::user("hello?"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Output);
    assert!(err.to_string().contains("not a JSON value"), "{err}");
    assert_eq!(
        model.requests().len(),
        1 + OUTPUT_REASKS as usize,
        "exactly the bounded number of attempts"
    );
}

#[tokio::test]
async fn a_type_whose_json_is_not_an_object_is_refused_before_any_model_call() {
    let model = ScriptedModel::new([ScriptedTurn::text("[]")]);
    let err = agent(&model)
        .call_typed::<Vec<Triage>>(Msg::user("hello?"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Output);
    assert!(err.to_string().contains("object"), "{err}");
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn in_native_mode_every_request_of_a_typed_call_carries_the_format_and_a_plain_call_after_it_none()
 {
    let lookup = FunctionTool::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}),
        |_args: Value| async move { Ok("paid twice".to_owned()) },
    );
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("lookup", json!({"order": "A-1"})),
        ScriptedTurn::text(r#"{"category": "refund", "urgent": true}"#),
        ScriptedTurn::text("You're welcome."),
    ]);
    let mut tools = Toolkit::new();
    tools.register(lookup).unwrap();
    let agent = Agent::builder()
        .name("triage")
        .model(model.clone())
        .toolkit(tools)
        .output_mode(OutputMode::Native)
        .build()
        .unwrap();
    let ctx = RunContext::new();
    let typed = agent
        .run_typed::<Triage>(vec![Msg::user("order A-1?")], ctx.clone())
        .await
        .unwrap();
    assert!(typed.value.urgent);
    agent
        .call_with(vec![Msg::user("thanks")], ctx)
        .await
        .unwrap();
    let formats: Vec<bool> = model
        .requests()
        .iter()
        .map(|r| r.options.response_format.is_some())
        .collect();
    assert_eq!(formats, [true, true, false]);
}

#[tokio::test]
async fn a_pre_reasoning_hook_sees_the_format_and_may_clear_it() {
    let model = ScriptedModel::new([ScriptedTurn::text(
        r#"{"category": "question", "urgent": false}"#,
    )]);
    let agent = Agent::builder()
        .name("triage")
        .model(model.clone())
        .hook(hook_fn(EventKind::PreReasoning, |e: &mut HookEvent| {
            if let HookEvent::PreReasoning(e) = e {
                let mut options = e.generate_options().clone();
                assert_eq!(
                    options.response_format.as_ref().map(|f| f.name.as_str()),
                    Some("Triage")
                );
                options.response_format = None;
                e.set_generate_options(options);
            }
            Ok(())
        }))
        .build()
        .unwrap();
    let triage: Triage = agent.call_typed(Msg::user("hours?")).await.unwrap();
    assert_eq!(triage.category, "question");
    assert!(model.requests()[0].options.response_format.is_none());
}

#[cfg(feature = "openai")]
#[test]
fn the_openai_body_carries_the_format_as_a_json_schema_response_format() {
    let m = OpenAiChatModel::builder()
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let request = ModelRequest {
        messages: Messages::from(vec![Msg::user("hi")]),
        tools: Vec::new().into(),
        options: GenerateOptions {
            response_format: Some(
                ResponseFormat::for_type::<Triage>()
                    .unwrap()
                    .with_strict(true),
            ),
            ..Default::default()
        },
    };
    let body = m.request_body(&request).unwrap();
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "Triage");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["properties"]["category"]["type"],
        "string"
    );
}

#[cfg(feature = "anthropic")]
mod anthropic {
    use super::*;

    fn body(tools: Vec<ToolSchema>, effort: Option<&str>) -> Result<Value, ModelError> {
        let m = AnthropicModel::builder()
            .model("claude-sonnet-4-5")
            .api_key("k")
            .build()
            .unwrap();
        m.request_body(&ModelRequest {
            messages: Messages::from(vec![Msg::user("hi")]),
            tools: tools.into(),
            options: GenerateOptions {
                response_format: Some(ResponseFormat::for_type::<Triage>().unwrap()),
                reasoning_effort: effort.map(str::to_owned),
                ..Default::default()
            },
        })
    }

    fn tool(name: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: "a tool".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    #[test]
    fn without_other_tools_the_format_is_a_forced_tool() {
        let body = body(Vec::new(), None).unwrap();
        assert_eq!(body["tools"][0]["name"], "Triage");
        assert_eq!(
            body["tools"][0]["input_schema"]["properties"]["urgent"]["type"],
            "boolean"
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "Triage"})
        );
    }

    #[test]
    fn with_other_tools_or_thinking_the_format_tool_is_offered_not_forced() {
        let with_tools = body(vec![tool("lookup")], None).unwrap();
        let names: Vec<&str> = with_tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["lookup", "Triage"]);
        assert!(with_tools.get("tool_choice").is_none());
        let thinking = body(Vec::new(), Some("low")).unwrap();
        assert!(
            thinking.get("tool_choice").is_none(),
            "thinking forbids forcing"
        );
        assert_eq!(thinking["tools"][0]["name"], "Triage");
    }

    #[test]
    fn a_format_named_like_a_tool_is_a_bad_request_before_anything_is_sent() {
        let err = body(vec![tool("Triage")], None).unwrap_err();
        assert_eq!(err.kind(), ModelErrorKind::BadRequest);
        assert!(err.to_string().contains("Triage"), "{err}");
    }
}
