//! goto_reasoning, stop_agent and resume, the iteration limit, empty answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::StreamExt;
use rein::*;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn goto_reasoning_redoes_the_step_with_the_hint_and_keeps_memory_valid() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::text("Your refund was paid."),
        ScriptedTurn::text("I have submitted your refund request."),
    ]);
    let agent = builder(&model)
        .hook(
            FnHook::new("self-correct", |e| {
                if let HookEvent::PostReasoning(e) = e
                    && e.message().text().contains("was paid")
                {
                    e.goto_reasoning(vec![Msg::user("Do not claim payment without a tool call.")]);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("refund?")], session("g1"))
        .await
        .unwrap();
    assert_eq!(out.reply.text(), "I have submitted your refund request.");
    assert_eq!(out.model_calls, 2);
    let second = &model.requests()[1].messages;
    assert_eq!(
        second.last().unwrap().text(),
        "Do not claim payment without a tool call."
    );
    assert!(second.iter().any(|m| m.text() == "Your refund was paid."));
}

#[tokio::test]
async fn goto_reasoning_with_a_pending_tool_use_gets_a_synthetic_result() {
    let log = Log::default();
    let fired = Arc::new(AtomicU32::new(0));
    let fired2 = Arc::clone(&fired);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("add", json!({"a": 1, "b": 2})),
            ("add", json!({"a": 3, "b": 4})),
        ]),
        ScriptedTurn::text("fine"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("redo", move |e| {
                if let HookEvent::PostReasoning(e) = e
                    && e.message().has_tool_uses()
                    && fired2.fetch_add(1, Ordering::SeqCst) == 0
                {
                    // Supplies a result for the second call only.
                    let second = e.message().tool_uses()[1].clone();
                    e.goto_reasoning(vec![
                        Msg::tool([ToolResult::new(second.id, second.name, "7 (precomputed)")]),
                        Msg::user("think again"),
                    ]);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add twice")).await.unwrap();
    assert!(log.entries().is_empty(), "no tool ran");
    let stored = agent.messages(&key("default")).await;
    assert_memory_valid(&stored);
    let results = results_in_request(&model, 1);
    assert_eq!(results.len(), 2);
    let uses = stored[1].tool_uses();
    assert_eq!(results[0].0, uses[0].id);
    assert!(results[0].1);
    assert!(results[0].2.contains("reasoning was redone"));
    assert_eq!(
        results[1],
        (uses[1].id.clone(), false, "7 (precomputed)".to_string())
    );
    assert_eq!(
        model.requests()[1].messages.last().unwrap().text(),
        "think again"
    );
}

#[tokio::test]
async fn consecutive_gotos_are_bounded_by_max_gotos() {
    let model = ScriptedModel::new((0..10).map(|i| ScriptedTurn::text(format!("try {i}"))));
    let agent = builder(&model)
        .max_gotos(2)
        .hook(
            FnHook::new("never-happy", |e| {
                if let HookEvent::PostReasoning(e) = e {
                    e.goto_reasoning(vec![Msg::user("again")]);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::GotoLimit);
    assert!(err.to_string().contains("more than 2"), "{err}");
    assert_eq!(model.requests().len(), 3, "one call plus two redos");
    assert_memory_valid(&agent.messages(&key("default")).await);
}

#[tokio::test]
async fn the_default_goto_bound_is_three() {
    let model = ScriptedModel::new((0..10).map(|i| ScriptedTurn::text(format!("try {i}"))));
    let agent = builder(&model)
        .hook(
            FnHook::new("never-happy", |e| {
                if let HookEvent::PostReasoning(e) = e {
                    e.goto_reasoning(vec![Msg::user("again")]);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap();
    assert_eq!(
        agent.call(Msg::user("hi")).await.unwrap_err().kind(),
        ErrorKind::GotoLimit
    );
    assert_eq!(model.requests().len(), 4);
}

fn stop_on_tool_use() -> FnHook {
    FnHook::new("approval", |e| {
        if let HookEvent::PostReasoning(e) = e
            && e.message().has_tool_uses()
            && e.context().extensions().get::<Approved>().is_none()
        {
            e.stop_agent();
        }
        Ok(())
    })
    .on(EventKind::PostReasoning)
}

struct Approved;

#[tokio::test]
async fn stop_in_post_reasoning_returns_pending_tool_uses_and_a_later_empty_call_resumes_them() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 2, "b": 3})),
        ScriptedTurn::text("5"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(stop_on_tool_use())
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("2+3")], session("hitl"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::ReasoningStopped);
    assert_eq!(out.reply.tool_uses().len(), 1);
    assert!(log.entries().is_empty(), "nothing ran before approval");
    let stored = agent.messages(&key("hitl")).await;
    assert!(
        stored.last().unwrap().has_tool_uses(),
        "tool use left pending for resume"
    );

    let ctx = session("hitl");
    ctx.extensions().insert(Approved);
    let out = agent.run(vec![], ctx).await.unwrap();
    assert_eq!(out.reason, StopReason::Final);
    assert_eq!(out.reply.text(), "5");
    assert_eq!(log.entries(), ["add:2+3"]);
    assert_memory_valid(&agent.messages(&key("hitl")).await);
}

#[tokio::test]
async fn new_input_after_a_stop_marks_the_pending_tool_uses_not_executed() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 2, "b": 3})),
        ScriptedTurn::text("ok, never mind"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(stop_on_tool_use())
        .build()
        .unwrap();
    agent
        .run(vec![Msg::user("2+3")], session("s"))
        .await
        .unwrap();
    let ctx = session("s");
    ctx.extensions().insert(Approved);
    let reply = agent
        .call_with(vec![Msg::user("forget it")], ctx)
        .await
        .unwrap();
    assert_eq!(reply.text(), "ok, never mind");
    assert!(log.entries().is_empty());
    let stored = agent.messages(&key("s")).await;
    assert_memory_valid(&stored);
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("not executed"), "{r:?}");
}

#[tokio::test]
async fn tool_results_supplied_after_a_stop_are_recorded_instead_of_running_the_tool() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 2, "b": 3})),
        ScriptedTurn::text("the human says 6"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(stop_on_tool_use())
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("2+3")], session("ext"))
        .await
        .unwrap();
    let id = out.reply.tool_uses()[0].id.clone();
    let ctx = session("ext");
    ctx.extensions().insert(Approved);
    let reply = agent
        .call_with(vec![Msg::tool([ToolResult::new(&id, "add", "6")])], ctx)
        .await
        .unwrap();
    assert_eq!(reply.text(), "the human says 6");
    assert!(log.entries().is_empty());
    assert_eq!(
        results_in_request(&model, 1),
        [(id, false, "6".to_string())]
    );
}

#[tokio::test]
async fn a_result_for_a_call_that_is_not_pending_is_invalid_input() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = builder(&model).build().unwrap();
    let err = agent
        .call_with(
            vec![Msg::tool([ToolResult::new("nope", "add", "1")])],
            RunContext::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("`nope`"), "{err}");
}

#[tokio::test]
async fn stop_on_any_post_acting_of_a_batch_stops_the_loop() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("add", json!({"a": 1, "b": 1})),
            ("add", json!({"a": 2, "b": 2})),
            ("add", json!({"a": 3, "b": 3})),
        ]),
        ScriptedTurn::text("after resume"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("stop-on-first", |e| {
                if let HookEvent::PostActing(e) = e
                    && e.tool_use().input["a"] == 1
                {
                    e.stop_agent();
                }
                Ok(())
            })
            .on(EventKind::PostActing),
        )
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("go")], session("b"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::ActingStopped);
    assert_eq!(out.reply.role, Role::Tool);
    assert_eq!(
        out.reply.tool_results().len(),
        3,
        "every result of the turn is stored"
    );
    assert_eq!(model.requests().len(), 1, "no reasoning after the stop");
    assert_memory_valid(&agent.messages(&key("b")).await);
    let reply = agent.call_with(vec![], session("b")).await.unwrap();
    assert_eq!(reply.text(), "after resume");
}

#[tokio::test]
async fn the_iteration_limit_ends_with_a_summary_call_without_tools() {
    let log = Log::default();
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 1})),
        ScriptedTurn::tool_call("add", json!({"a": 2, "b": 2})),
        ScriptedTurn::text("summary: I added things"),
    ]);
    let agent = builder(&model)
        .max_iters(2)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(FnHook::new("summary-watch", move |e| {
            match e {
                HookEvent::PreSummary(e) => seen2.push(format!("pre:{}", e.max_iters())),
                HookEvent::SummaryChunk(_) => seen2.push("chunk"),
                HookEvent::PostSummary(e) => seen2.push(format!("post:{}", e.message().text())),
                _ => {}
            }
            Ok(())
        }))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("loop")], session("m"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::MaxIterations);
    assert_eq!(out.reply.text(), "summary: I added things");
    assert_eq!(log.entries(), ["add:1+1", "add:2+2"]);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[2].tools.is_empty(), "summary call offers no tools");
    assert!(
        reqs[2]
            .messages
            .last()
            .unwrap()
            .text()
            .contains("maximum iterations")
    );
    let entries = seen.entries();
    assert_eq!(entries.first().unwrap(), "pre:2");
    assert!(entries.iter().filter(|e| *e == "chunk").count() >= 2);
    assert_eq!(entries.last().unwrap(), "post:summary: I added things");
    let stored = agent.messages(&key("m")).await;
    assert_memory_valid(&stored);
    assert_eq!(stored.last().unwrap().text(), "summary: I added things");
    assert!(
        stored
            .iter()
            .all(|m| !m.text().contains("maximum iterations")),
        "instruction not stored"
    );
}

#[tokio::test]
async fn the_default_iteration_limit_is_ten() {
    let log = Log::default();
    let mut turns: Vec<ScriptedTurn> = (0..10)
        .map(|i| ScriptedTurn::tool_call("add", json!({"a": i, "b": 0})))
        .collect();
    turns.push(ScriptedTurn::text("summary"));
    let model = ScriptedModel::new(turns);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("loop")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::MaxIterations);
    assert_eq!(log.entries().len(), 10);
}

/// The synthetic user-role messages of `messages` (the runtime's own).
fn synthetic(messages: &[Msg]) -> Vec<&Msg> {
    messages
        .iter()
        .filter(|m| m.metadata.get("rein.synthetic") == Some(&json!(true)))
        .collect()
}

/// `true` for an assistant message with neither visible text nor tool calls.
fn is_empty_turn(m: &Msg) -> bool {
    m.role == Role::Assistant && !m.has_visible_text() && m.tool_uses().is_empty()
}

#[tokio::test]
async fn an_empty_answer_is_not_stored_and_only_the_reask_carries_a_nudge() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("").with_thinking("..."),
        ScriptedTurn::text("real answer"),
        ScriptedTurn::text("second answer"),
    ]);
    let agent = builder(&model).build().unwrap();
    let reply = agent
        .call_with(vec![Msg::user("hi")], session("e1"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "real answer");
    let requests = model.requests();
    let reask: Vec<Msg> = requests[1].messages.iter().cloned().collect();
    assert!(
        !reask.iter().any(is_empty_turn),
        "the empty turn was sent back to the model: {reask:?}"
    );
    let nudge = reask.last().unwrap();
    assert_eq!(nudge.role, Role::User);
    assert_eq!(synthetic(&reask), vec![nudge]);
    // The small-model failure: a reminder about a "previous response" the model cannot see.
    assert!(
        !nudge.text().to_lowercase().contains("previous"),
        "{nudge:?}"
    );
    // Memory holds what was said: the question and the answer.
    let memory = agent.messages(&key("e1")).await;
    assert_eq!(memory.len(), 2, "{memory:?}");
    assert_eq!(memory[0].text(), "hi");
    assert_eq!(memory[1].text(), "real answer");
    // The nudge was for that one request.
    agent
        .call_with(vec![Msg::user("again")], session("e1"))
        .await
        .unwrap();
    let third: Vec<Msg> = model.requests()[2].messages.iter().cloned().collect();
    assert!(synthetic(&third).is_empty(), "{third:?}");
}

#[tokio::test]
async fn an_empty_answer_after_a_tool_result_is_reasked_and_memory_stays_valid() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("  \n"),
        ScriptedTurn::text("1 + 2 = 3"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .build()
        .unwrap();
    let reply = agent
        .call_with(vec![Msg::user("1 + 2?")], session("e2"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "1 + 2 = 3");
    let reask: Vec<Msg> = model.requests()[2].messages.iter().cloned().collect();
    let n = reask.len();
    assert_eq!(synthetic(&reask), vec![&reask[n - 1]]);
    assert_eq!(reask[n - 1].role, Role::User);
    assert_eq!(reask[n - 2].tool_results().len(), 1, "{reask:?}");
    let memory = agent.messages(&key("e2")).await;
    assert_memory_valid(&memory);
    assert!(!memory.iter().any(is_empty_turn), "{memory:?}");
    assert!(synthetic(&memory).is_empty(), "{memory:?}");
    assert_eq!(
        memory.len(),
        4,
        "question, tool call, result, answer: {memory:?}"
    );
}

#[tokio::test]
async fn empty_answers_are_bounded_by_max_iters_and_never_stored() {
    let model = ScriptedModel::new([
        ScriptedTurn::text(""),
        ScriptedTurn::text(""),
        ScriptedTurn::text("summary"),
    ]);
    let agent = builder(&model).max_iters(2).build().unwrap();
    let out = agent
        .run(vec![Msg::user("hi")], session("e3"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::MaxIterations);
    assert_eq!(out.model_calls, 3);
    // The summary request carries its own instruction, not a leftover nudge.
    let summary: Vec<Msg> = model.requests()[2].messages.iter().cloned().collect();
    assert_eq!(synthetic(&summary).len(), 1, "{summary:?}");
    let memory = agent.messages(&key("e3")).await;
    assert_eq!(memory.len(), 2, "the question and the summary: {memory:?}");
    assert_eq!(memory[1].text(), "summary");
}

#[tokio::test]
async fn a_streamed_empty_turn_is_followed_by_reasoning_redone_before_the_answer() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("").with_thinking("thinking it over"),
        ScriptedTurn::text("real answer"),
    ]);
    let agent = builder(&model).build().unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("hi")], RunContext::new())
        .collect()
        .await;
    let thought = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ThinkingDelta(_)));
    let redone = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ReasoningRedone));
    let answer = events
        .iter()
        .position(|e| matches!(e, AgentEvent::TextDelta(t) if t.contains("real")));
    let (Some(thought), Some(redone), Some(answer)) = (thought, redone, answer) else {
        panic!("missing events: {events:?}");
    };
    assert!(thought < redone && redone < answer, "{events:?}");
}
