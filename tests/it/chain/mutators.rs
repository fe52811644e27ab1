//! Each mutator's effect on what the model or tool receives and on memory.

use rein::*;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn pre_call_set_messages_changes_what_is_stored_and_sent() {
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("rewrite-input", |e| {
                if let HookEvent::PreCall(e) = e {
                    let text = e.messages()[0].text().replace("secret", "[redacted]");
                    e.set_messages(vec![Msg::user(text)]);
                }
                Ok(())
            })
            .on(EventKind::PreCall),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("my secret is 42")).await.unwrap();
    let sent = &model.requests()[0].messages;
    assert_eq!(sent.last().unwrap().text(), "my [redacted] is 42");
    let stored = agent.messages(&key("default")).await;
    assert_eq!(stored[0].text(), "my [redacted] is 42");
}

#[tokio::test]
async fn pre_call_system_prompt_change_applies_to_every_model_request_of_the_call_only() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("3"),
        ScriptedTurn::text("next"),
    ]);
    let log = Log::default();
    let agent = builder(&model)
        .sys_prompt("base prompt")
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("sys", |e| {
                if let HookEvent::PreCall(e) = e
                    && e.messages().first().is_some_and(|m| m.text() == "first")
                {
                    e.set_system_prompt(Some("special prompt".into()));
                }
                Ok(())
            })
            .on(EventKind::PreCall),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("first")).await.unwrap();
    agent.call(Msg::user("second")).await.unwrap();
    let reqs = model.requests();
    for r in &reqs[..2] {
        assert_eq!(r.messages.first().unwrap().role, Role::System);
        assert_eq!(r.messages.first().unwrap().text(), "special prompt");
    }
    assert_eq!(reqs[2].messages.first().unwrap().text(), "base prompt");
    let stored = agent.messages(&key("default")).await;
    assert!(stored.iter().all(|m| m.role != Role::System));
}

#[tokio::test]
async fn a_system_message_in_the_call_input_is_rejected() {
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model).build().unwrap();
    let err = agent
        .call_with(vec![Msg::system("obey me")], RunContext::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("System role"), "{err}");
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn pre_reasoning_shows_the_agent_default_options_as_effective() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model)
        .generate_options(GenerateOptions {
            temperature: Some(0.7),
            max_tokens: Some(256),
            ..Default::default()
        })
        .hook(
            FnHook::new("look", move |e| {
                if let HookEvent::PreReasoning(e) = e {
                    seen2.push(format!("{:?}", e.generate_options().temperature));
                    seen2.push(format!("{:?}", e.generate_options().max_tokens));
                }
                Ok(())
            })
            .on(EventKind::PreReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(seen.entries(), ["Some(0.7)", "Some(256)"]);
    assert_eq!(model.requests()[0].options.temperature, Some(0.7));
}

#[tokio::test]
async fn pre_reasoning_options_set_by_a_hook_are_what_the_model_receives_and_later_hooks_see_them()
{
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model)
        .generate_options(GenerateOptions {
            temperature: Some(0.7),
            max_tokens: Some(256),
            ..Default::default()
        })
        .hook(
            FnHook::new("precise", |e| {
                if let HookEvent::PreReasoning(e) = e {
                    let precise = GenerateOptions {
                        temperature: Some(0.1),
                        reasoning_effort: Some("high".into()),
                        ..Default::default()
                    };
                    let merged = GenerateOptions::merge(&precise, e.generate_options());
                    e.set_generate_options(merged);
                }
                Ok(())
            })
            .priority(10)
            .on(EventKind::PreReasoning),
        )
        .hook(
            FnHook::new("later", move |e| {
                if let HookEvent::PreReasoning(e) = e {
                    seen2.push(format!("{:?}", e.generate_options().temperature));
                }
                Ok(())
            })
            .priority(20)
            .on(EventKind::PreReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    let sent = &model.requests()[0].options;
    assert_eq!(sent.temperature, Some(0.1));
    assert_eq!(sent.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(sent.max_tokens, Some(256));
    assert_eq!(seen.entries(), ["Some(0.1)"]);
}

#[tokio::test]
async fn pre_reasoning_set_messages_affects_only_that_model_call() {
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("hint", |e| {
                if let HookEvent::PreReasoning(e) = e {
                    let mut msgs = e.messages().to_vec();
                    msgs.push(Msg::user("(be brief)"));
                    e.set_messages(msgs);
                }
                Ok(())
            })
            .on(EventKind::PreReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(
        model.requests()[0].messages.last().unwrap().text(),
        "(be brief)"
    );
    let stored = agent.messages(&key("default")).await;
    assert!(stored.iter().all(|m| m.text() != "(be brief)"));
}

#[tokio::test]
async fn pre_reasoning_lists_the_tools_offered_in_registration_order() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let mut tools = Toolkit::new();
    for name in ["zeta", "alpha", "mid"] {
        tools
            .register(FunctionTool::new(
                name,
                "t",
                json!({"type": "object"}),
                |_| async { Ok(String::new()) },
            ))
            .unwrap();
    }
    tools.register(add_tool(&log)).unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .hook(
            FnHook::new("names", move |e| {
                if let HookEvent::PreReasoning(e) = e {
                    seen2.push(e.tool_names().join(","));
                }
                Ok(())
            })
            .on(EventKind::PreReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(seen.entries(), ["zeta,alpha,mid,add"]);
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["zeta", "alpha", "mid", "add"]);
}

#[tokio::test]
async fn post_reasoning_set_message_replaces_what_is_stored_and_acted_on() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("swap", |e| {
                if let HookEvent::PostReasoning(e) = e
                    && e.message().has_tool_uses()
                {
                    let mut m = e.message().clone();
                    for b in &mut m.content {
                        if let ContentBlock::ToolUse(u) = b {
                            u.input = json!({"a": 10, "b": 20});
                        }
                    }
                    e.set_message(m);
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    assert!(log.entries().contains(&"add:10+20".to_string()));
    let stored = agent.messages(&key("default")).await;
    assert_eq!(stored[1].tool_uses()[0].input, json!({"a": 10, "b": 20}));
}

#[tokio::test]
async fn pre_acting_set_tool_use_changes_what_runs_and_what_memory_records() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("clamp", |e| {
                if let HookEvent::PreActing(e) = e {
                    let mut u = e.tool_use().clone();
                    u.input["b"] = json!(100);
                    u.id = "hijacked".into();
                    e.set_tool_use(u);
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    assert_eq!(log.entries(), ["add:1+100"]);
    let stored = agent.messages(&key("default")).await;
    let used = stored[1].tool_uses()[0].clone();
    assert_eq!(used.input, json!({"a": 1, "b": 100}));
    assert_ne!(used.id, "hijacked", "the id is kept so the result pairs");
    assert_eq!(stored[2].tool_results()[0].id, used.id);
    assert_memory_valid(&stored);
    // The model saw the rewritten call in the next request.
    let next = &model.requests()[1].messages;
    assert!(
        next.iter()
            .any(|m| m.tool_uses().iter().any(|u| u.input["b"] == 100))
    );
}

#[tokio::test]
async fn pre_acting_deny_skips_the_tool_and_tells_the_model_why() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("sorry"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("guard", |e| {
                if let HookEvent::PreActing(e) = e {
                    e.deny("adding is forbidden today");
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    assert!(log.entries().is_empty(), "the tool must not run");
    let results = results_in_request(&model, 1);
    assert_eq!(results.len(), 1);
    assert!(results[0].1);
    assert!(
        results[0].2.contains("adding is forbidden today"),
        "{:?}",
        results[0]
    );
    assert_memory_valid(&agent.messages(&key("default")).await);
}

#[tokio::test]
async fn a_later_hook_cannot_undo_a_deny() {
    let log = Log::default();
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("sorry"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("deny-first", |e| {
                if let HookEvent::PreActing(e) = e {
                    e.deny("first reason");
                }
                Ok(())
            })
            .priority(10)
            .on(EventKind::PreActing),
        )
        .hook(
            FnHook::new("tries-to-undo", move |e| {
                if let HookEvent::PreActing(e) = e {
                    seen2.push(format!(
                        "{}|{:?}|{:?}",
                        e.is_denied(),
                        e.denial_reason(),
                        e.denied_by()
                    ));
                    e.deny("second reason");
                    let mut u = e.tool_use().clone();
                    u.input = json!({"a": 5, "b": 5});
                    e.set_tool_use(u);
                }
                Ok(())
            })
            .priority(20)
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    assert!(log.entries().is_empty());
    assert_eq!(
        seen.entries(),
        ["true|Some(\"first reason\")|Some(\"deny-first\")"]
    );
    let results = results_in_request(&model, 1);
    assert!(results[0].2.contains("first reason"));
    let stored = agent.messages(&key("default")).await;
    assert_eq!(stored[1].tool_uses()[0].input, json!({"a": 1, "b": 2}));
}

#[tokio::test]
async fn post_acting_set_tool_result_changes_what_memory_records_and_the_model_reads() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("mask", |e| {
                if let HookEvent::PostActing(e) = e {
                    let text = format!("[masked {}]", e.tool_result().content);
                    e.set_tool_result(ToolResult::new("other-id", "other-name", text));
                }
                Ok(())
            })
            .on(EventKind::PostActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    let stored = agent.messages(&key("default")).await;
    let id = stored[1].tool_uses()[0].id.clone();
    let results = results_in_request(&model, 1);
    assert_eq!(results, [(id.clone(), false, "[masked 3]".to_string())]);
    let r = stored[2].tool_results()[0].clone();
    assert_eq!(
        (r.id.as_str(), r.name.as_str(), r.content.as_str()),
        (id.as_str(), "add", "[masked 3]")
    );
}

#[tokio::test]
async fn rewrites_are_threaded_to_later_hooks() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("first", |e| {
                if let HookEvent::PostActing(e) = e {
                    let t = format!("{}+first", e.tool_result().content);
                    e.set_tool_result(ToolResult::new("", "", t));
                }
                Ok(())
            })
            .priority(1)
            .on(EventKind::PostActing),
        )
        .hook(
            FnHook::new("second", move |e| {
                if let HookEvent::PostActing(e) = e {
                    seen2.push(e.tool_result().content.clone());
                    let t = format!("{}+second", e.tool_result().content);
                    e.set_tool_result(ToolResult::new("", "", t));
                }
                Ok(())
            })
            .priority(2)
            .on(EventKind::PostActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("add")).await.unwrap();
    assert_eq!(seen.entries(), ["3+first"]);
    assert_eq!(results_in_request(&model, 1)[0].2, "3+first+second");
}

#[tokio::test]
async fn post_call_set_final_message_changes_the_reply_but_not_memory() {
    let model = ScriptedModel::new([ScriptedTurn::text("Your refund was paid.")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("no-refund-claims", |e| {
                if let HookEvent::PostCall(e) = e
                    && e.final_message().text().contains("refund was paid")
                {
                    e.set_final_message(Msg::assistant("Your refund request is being processed."));
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("refund?")).await.unwrap();
    assert_eq!(reply.text(), "Your refund request is being processed.");
    let stored = agent.messages(&key("default")).await;
    assert_eq!(stored.last().unwrap().text(), "Your refund was paid.");
}

#[tokio::test]
async fn reasoning_chunk_events_accumulate_the_streamed_text() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let model = ScriptedModel::new([ScriptedTurn::text("Hello, world").with_thinking("hmm")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("chunks", move |e| {
                if let HookEvent::ReasoningChunk(e) = e {
                    seen2.push(format!("{:?}=>{}", e.chunk(), e.accumulated().text()));
                }
                Ok(())
            })
            .on(EventKind::ReasoningChunk),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(reply.text(), "Hello, world");
    let entries = seen.entries();
    let texts: Vec<&String> = entries.iter().filter(|e| e.starts_with("Text")).collect();
    assert!(texts.len() >= 2, "{entries:?}");
    assert!(texts.last().unwrap().ends_with("=>Hello, world"));
    assert!(texts[0].ends_with(&format!("=>{}", texts[0].split('"').nth(1).unwrap())));
    assert!(entries[0].starts_with("Thinking"));
}
