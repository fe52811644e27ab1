//! `Agent::stream`: typed events for a UI, with the same hook semantics as `call`.

use futures::StreamExt;
use rein::*;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn stream_yields_deltas_tool_events_and_the_governed_final_reply() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_text("Let me add."),
        ScriptedTurn::text("The sum is 3."),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("govern", |e| {
                if let HookEvent::PostCall(e) = e {
                    let t = format!("{} (checked)", e.final_message().text());
                    e.set_final_message(Msg::assistant(t));
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("1+2")], RunContext::new())
        .collect()
        .await;
    let mut text = String::new();
    let mut kinds = Vec::new();
    for e in &events {
        match e {
            AgentEvent::TextDelta(t) => {
                text.push_str(t);
                if kinds.last() != Some(&"text") {
                    kinds.push("text");
                }
            }
            AgentEvent::ToolCallStart { name, .. } => {
                assert_eq!(name, "add");
                kinds.push("start");
            }
            AgentEvent::ToolCall(u) => {
                assert_eq!(u.input, json!({"a": 1, "b": 2}));
                kinds.push("call");
            }
            AgentEvent::ToolResult(r) => {
                assert_eq!(r.content, "3");
                kinds.push("result");
            }
            AgentEvent::Final(o) => {
                assert_eq!(o.reply.text(), "The sum is 3. (checked)");
                kinds.push("final");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(text, "Let me add.The sum is 3.");
    assert_eq!(kinds, ["text", "start", "call", "result", "text", "final"]);
}

#[tokio::test]
async fn a_failed_streamed_call_ends_with_the_error() {
    let model = ScriptedModel::new([ScriptedTurn::text("partial answer")
        .with_error_mid_stream(ModelError::new(ModelErrorKind::Stream, "eof"))]);
    let agent = builder(&model).build().unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("hi")], RunContext::new())
        .collect()
        .await;
    assert!(matches!(events.first(), Some(AgentEvent::TextDelta(_))));
    match events.last() {
        Some(AgentEvent::Error(e)) => assert_eq!(e.kind(), ErrorKind::Model),
        other => panic!("expected an error last, got {other:?}"),
    }
}

#[tokio::test]
async fn a_redo_is_announced_to_the_stream() {
    let model = ScriptedModel::new([ScriptedTurn::text("wrong"), ScriptedTurn::text("right")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("redo", |e| {
                if let HookEvent::PostReasoning(e) = e
                    && e.message().text() == "wrong"
                {
                    e.goto_reasoning(vec![Msg::user("try again")]);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("q")], RunContext::new())
        .collect()
        .await;
    let redo = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ReasoningRedone))
        .unwrap();
    let after: String = events[redo..]
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(after, "right");
}
