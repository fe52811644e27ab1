//! GenAI spans, the decision trail and metrics.

use std::collections::HashMap;

use rein::*;
use serde_json::json;

use crate::support::capture::*;
use crate::support::*;

fn tool_agent(model: &ScriptedModel, log: &Log) -> AgentBuilder {
    builder(model)
        .name("calc")
        .toolkit(toolkit_with(vec![add_tool(log)]))
        .generate_options(GenerateOptions {
            temperature: Some(0.2),
            max_tokens: Some(99),
            ..Default::default()
        })
}

#[tokio::test]
async fn spans_follow_the_genai_conventions_and_nest_under_the_call() {
    let capture = Capture::default();
    let _guard = capture.install();
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_usage(11, 3),
        ScriptedTurn::text("3").with_usage(20, 1),
    ]);
    let agent = tool_agent(&model, &log).id("agent-x").build().unwrap();
    let ctx = RunContext::new().with_session_id("s1").with_run_id("r1");
    agent.call_with(vec![Msg::user("1+2")], ctx).await.unwrap();

    let call = capture.named("invoke_agent calc");
    assert_eq!(call.len(), 1);
    let call = &call[0];
    assert_eq!(call.name, "invoke_agent");
    let f = &call.fields;
    assert_eq!(f["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(f["gen_ai.agent.id"], "agent-x");
    assert_eq!(f["gen_ai.agent.name"], "calc");
    assert_eq!(f["rein.session.id"], "s1");
    assert_eq!(f["rein.run.id"], "r1");
    assert_eq!(f["gen_ai.provider.name"], "scripted");
    assert_eq!(f["gen_ai.usage.input_tokens"], "31");
    assert_eq!(f["gen_ai.usage.output_tokens"], "4");
    assert!(
        !f.contains_key("rein.agent.parent_id"),
        "top-level agent has no parent"
    );

    let chats = capture.named("chat scripted");
    assert_eq!(chats.len(), 2);
    for c in &chats {
        assert_eq!(c.parent, Some(call.id));
        assert_eq!(c.fields["gen_ai.operation.name"], "chat");
        assert_eq!(c.fields["gen_ai.request.model"], "scripted");
        assert_eq!(c.fields["gen_ai.request.temperature"], "0.2");
        assert_eq!(c.fields["gen_ai.request.max_tokens"], "99");
        assert!(
            !c.fields.contains_key("gen_ai.request.top_p"),
            "unset options are not recorded"
        );
        assert!(
            !c.fields.contains_key("gen_ai.input.messages"),
            "no content by default"
        );
    }
    assert_eq!(
        chats[0].fields["gen_ai.response.finish_reasons"],
        "toolcalls"
    );
    assert_eq!(chats[0].fields["gen_ai.usage.input_tokens"], "11");
    assert_eq!(chats[1].fields["gen_ai.response.finish_reasons"], "stop");

    let tools = capture.named("execute_tool add");
    assert_eq!(tools.len(), 1);
    let t = &tools[0];
    assert_eq!(t.parent, Some(call.id));
    assert_eq!(t.fields["gen_ai.operation.name"], "execute_tool");
    assert_eq!(t.fields["gen_ai.tool.name"], "add");
    assert!(t.fields["gen_ai.tool.call.id"].starts_with("call_"));
    assert_eq!(t.fields["rein.tool.status"], "ok");
    assert!(!t.fields.contains_key("gen_ai.tool.call.arguments"));
}

#[tokio::test]
async fn message_contents_are_recorded_only_when_enabled() {
    let capture = Capture::default();
    let _guard = capture.install();
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("the answer is 3"),
    ]);
    let agent = tool_agent(&model, &log)
        .record_content(true)
        .build()
        .unwrap();
    agent.call(Msg::user("secret question")).await.unwrap();
    let chats = capture.named("chat scripted");
    assert!(chats[0].fields["gen_ai.input.messages"].contains("secret question"));
    assert!(chats[1].fields["gen_ai.output.messages"].contains("the answer is 3"));
    let t = &capture.named("execute_tool add")[0];
    assert_eq!(t.fields["gen_ai.tool.call.arguments"], r#"{"a":1,"b":2}"#);
    assert_eq!(t.fields["gen_ai.tool.call.result"], "3");
}

#[tokio::test]
async fn a_subagents_invoke_agent_span_sits_under_the_parents_execute_tool_agent_spawn() {
    let capture = Capture::default();
    let _guard = capture.install();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "helper", "task": "t"})),
        ScriptedTurn::text("child"),
        ScriptedTurn::text("parent"),
    ]);
    let agent = builder(&model)
        .name("boss")
        .id("boss-id")
        .subagent(
            SubagentDeclaration::builder("helper")
                .description("h")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let spawn = capture.named("execute_tool agent_spawn");
    assert_eq!(spawn.len(), 1);
    let child = capture.named("invoke_agent helper");
    assert_eq!(child.len(), 1);
    assert_eq!(child[0].parent, Some(spawn[0].id));
    assert_eq!(child[0].fields["rein.agent.parent_id"], "boss-id");
    assert_eq!(child[0].fields["rein.agent.depth"], "1");
    let top = &capture.named("invoke_agent boss")[0];
    assert_eq!(spawn[0].parent, Some(top.id));
}

/// Rewrites `b` in the tool input to its value, at its priority.
fn set_b(name: &str, priority: i32, b: i64) -> FnHook {
    FnHook::new(name, move |e| {
        if let HookEvent::PreActing(e) = e {
            let mut u = e.tool_use().clone();
            u.input["b"] = json!(b);
            e.set_tool_use(u);
        }
        Ok(())
    })
    .priority(priority)
    .on(EventKind::PreActing)
}

#[tokio::test]
async fn the_trail_records_threaded_rewrites_in_priority_order_and_the_denial() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("denied, sorry"),
    ]);
    let agent = tool_agent(&model, &log)
        .decision_trail(true)
        .hook(set_b("third", 30, 30))
        .hook(set_b("first", 10, 10))
        .hook(
            FnHook::new("guard", |e| {
                if let HookEvent::PreActing(e) = e
                    && e.tool_use().input["b"] == 20
                {
                    e.deny("b = 20 is not allowed");
                }
                Ok(())
            })
            .priority(25)
            .on(EventKind::PreActing),
        )
        .hook(set_b("second", 20, 20))
        .hook(Recorder::new("observer", 5, &log))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("add")], RunContext::new())
        .await
        .unwrap();
    let d = &out.decisions;
    let summary: Vec<(String, i32, DecisionKind)> = d
        .iter()
        .map(|d| (d.hook.clone(), d.priority, d.kind))
        .collect();
    assert_eq!(
        summary,
        [
            ("first".to_string(), 10, DecisionKind::ToolInputRewritten),
            ("second".to_string(), 20, DecisionKind::ToolInputRewritten),
            ("guard".to_string(), 25, DecisionKind::ToolDenied),
        ],
        "the observer left no record; the rewrite after the denial was ignored and left none"
    );
    assert_eq!(d[0].after, d[1].before, "rewrites are threaded");
    assert_ne!(d[0].before, d[0].after);
    assert_eq!(d[2].reason.as_deref(), Some("b = 20 is not allowed"));
    let id = d[0].tool_call_id.clone();
    assert!(id.is_some());
    assert!(
        d.iter()
            .all(|x| x.event == EventKind::PreActing && x.tool_call_id == id)
    );
    assert!(
        d[0].before.contains("B#"),
        "digests reveal no content by default: {}",
        d[0].before
    );
    assert!(
        log.entries().iter().all(|e| !e.starts_with("add:")),
        "the tool never ran"
    );
}

#[tokio::test]
async fn decisions_are_span_events_on_the_current_span_when_a_subscriber_listens() {
    let capture = Capture::default();
    let _guard = capture.install();
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text("Your refund was paid.")]);
    let agent = tool_agent(&model, &log)
        .hook(
            FnHook::new("no-claims", |e| {
                if let HookEvent::PostCall(e) = e {
                    e.set_final_message(Msg::assistant("Your refund is being processed."));
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    // No decision_trail(true): the listening subscriber is enough.
    let out = agent
        .run(vec![Msg::user("refund?")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(out.decisions.len(), 1);
    assert_eq!(out.decisions[0].kind, DecisionKind::FinalMessageReplaced);
    let events = capture.decisions();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].fields["hook"], "no-claims");
    assert_eq!(events[0].fields["kind"], "final_message_replaced");
    let call = &capture.named("invoke_agent calc")[0];
    assert_eq!(events[0].span, Some(call.id));
}

#[tokio::test]
async fn without_a_subscriber_or_the_trail_flag_no_decision_is_recorded() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = tool_agent(&model, &log)
        .hook(set_b("rewriter", 10, 5))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("add")], RunContext::new())
        .await
        .unwrap();
    assert!(out.decisions.is_empty());
    assert_eq!(
        log.entries(),
        ["add:1+5"],
        "the rewrite itself still applies"
    );
}

#[tokio::test]
async fn setting_the_same_value_or_only_reading_leaves_no_record() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = tool_agent(&model, &log)
        .decision_trail(true)
        .hook(FnHook::new("same", |e| {
            match e {
                HookEvent::PreActing(e) => {
                    let u = e.tool_use().clone();
                    e.set_tool_use(u);
                }
                HookEvent::PreReasoning(e) => {
                    let o = e.generate_options().clone();
                    e.set_generate_options(o);
                }
                HookEvent::PostCall(e) => {
                    let m = e.final_message().clone();
                    e.set_final_message(m);
                }
                _ => {}
            }
            Ok(())
        }))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("add")], RunContext::new())
        .await
        .unwrap();
    assert!(out.decisions.is_empty(), "{:?}", out.decisions);
}

#[tokio::test]
async fn options_decisions_show_the_options_and_post_call_hooks_see_the_trail() {
    let log = Log::default();
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = tool_agent(&model, &log)
        .decision_trail(true)
        .hook(
            FnHook::new("precise", |e| {
                if let HookEvent::PreReasoning(e) = e {
                    let o = GenerateOptions::merge(
                        &GenerateOptions {
                            temperature: Some(0.1),
                            ..Default::default()
                        },
                        e.generate_options(),
                    );
                    e.set_generate_options(o);
                }
                Ok(())
            })
            .on(EventKind::PreReasoning),
        )
        .hook(
            FnHook::new("audit", move |e| {
                if let HookEvent::PostCall(e) = e {
                    for d in e.decisions() {
                        seen2.push(format!(
                            "{}:{}:{}->{}",
                            d.hook,
                            d.kind.as_str(),
                            d.before,
                            d.after
                        ));
                    }
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(
        seen.entries(),
        [
            r#"precise:options_set:{"temperature":0.2,"max_tokens":99}->{"temperature":0.1,"max_tokens":99}"#
        ]
    );
}

#[tokio::test]
async fn a_failed_calls_error_event_carries_the_trail() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2}))]);
    let agent = tool_agent(&model, &log)
        .decision_trail(true)
        .hook(set_b("rewriter", 10, 7))
        .hook(
            FnHook::new("watch", move |e| {
                if let HookEvent::Error(e) = e {
                    seen2.push(format!("{}", e.decisions().len()));
                }
                Ok(())
            })
            .on(EventKind::Error),
        )
        .build()
        .unwrap();
    assert!(
        agent.call(Msg::user("add")).await.is_err(),
        "the script runs out after the tool"
    );
    assert_eq!(seen.entries(), ["1"]);
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn metrics_count_calls_model_calls_tools_denials_hook_errors_and_tokens() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let log = Log::default();
    let mut tools = toolkit_with(vec![add_tool(&log)]);
    tools
        .register(FunctionTool::new(
            "secret_tool",
            "s",
            json!({"type": "object"}),
            |_| async { Ok("s".to_string()) },
        ))
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("add", json!({"a": 1, "b": 2})),
            ("secret_tool", json!({})),
            ("add", json!({"a": 5, "b": 5})),
        ])
        .with_usage(10, 2),
        ScriptedTurn::text("ok").with_usage(7, 1),
    ]);
    let agent = builder(&model)
        .name("m")
        .toolkit(tools)
        .metric_tool_labels(["add"])
        .hook(
            FnHook::new("guard", |e| {
                if let HookEvent::PreActing(e) = e
                    && e.tool_use().input["a"] == 5
                {
                    e.deny("no fives");
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .hook(
            FnHook::new("flaky-observer", |_| Err(HookError::new("down")))
                .on(EventKind::PostCall)
                .policy(FailurePolicy::Ignore),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();

    let mut counters: HashMap<String, u64> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let DebugValue::Counter(v) = value else {
            continue;
        };
        let mut labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        counters.insert(format!("{}{{{}}}", key.key().name(), labels.join(",")), v);
    }
    assert_eq!(counters["rein_calls_total{agent=m,outcome=ok}"], 1);
    assert_eq!(
        counters["rein_model_calls_total{agent=m,model=scripted}"],
        2
    );
    assert_eq!(counters["rein_tokens_total{agent=m,direction=input}"], 17);
    assert_eq!(counters["rein_tokens_total{agent=m,direction=output}"], 3);
    assert_eq!(counters["rein_tool_calls_total{status=ok,tool=add}"], 1);
    assert_eq!(counters["rein_tool_calls_total{status=denied,tool=add}"], 1);
    assert_eq!(
        counters["rein_tool_calls_total{status=ok,tool=other}"], 1,
        "labels capped: {counters:?}"
    );
    assert_eq!(counters["rein_denials_total{hook=guard,tool=add}"], 1);
    assert_eq!(
        counters["rein_hook_errors_total{event=PostCall,hook=flaky-observer}"],
        1
    );
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn metrics_reach_a_recorder_installed_after_the_agents_first_call() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::text("one").with_usage(3, 1),
        ScriptedTurn::text("two").with_usage(4, 1),
        ScriptedTurn::text("three").with_usage(5, 1),
    ]);
    let agent = tool_agent(&model, &log).name("late").build().unwrap();
    // The first call builds the agent's keys while no recorder is installed.
    agent.call(Msg::user("a")).await.unwrap();

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    agent.call(Msg::user("b")).await.unwrap();
    agent.call(Msg::user("c")).await.unwrap();

    let counters: HashMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(v) = value else {
                return None;
            };
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Some((format!("{}{{{}}}", key.key().name(), labels.join(",")), v))
        })
        .collect();
    assert_eq!(counters["rein_calls_total{agent=late,outcome=ok}"], 2);
    assert_eq!(
        counters["rein_model_calls_total{agent=late,model=scripted}"],
        2
    );
    assert_eq!(counters["rein_tokens_total{agent=late,direction=input}"], 9);
    assert_eq!(
        counters["rein_tokens_total{agent=late,direction=output}"],
        2
    );
}
