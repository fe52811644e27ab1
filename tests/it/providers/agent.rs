//! An agent runs a two-turn tool-calling conversation end to end through each enabled
//! provider against the local server, with the hook semantics of `ScriptedModel`:
//! `ReasoningChunk` per streamed delta, `PreReasoning` options are the wire options,
//! usage reaches `PostReasoning` and `PostCall`.

use std::sync::{Arc, Mutex};

use rein::*;
use serde_json::{Value, json};

use crate::providers::mock::*;
use crate::support::*;

fn first_turn() -> Turn {
    Turn {
        thinking: vec!["I should ", "use add."],
        signature: Some("sig-42"),
        text: vec!["Let me ", "add."],
        calls: vec![("call_1", "add", vec!["{\"a\": 1", ", \"b\": 2}"])],
        usage: (10, 5),
    }
}

fn second_turn() -> Turn {
    Turn {
        text: vec!["The sum ", "is 3."],
        usage: (20, 6),
        ..Turn::default()
    }
}

#[derive(Default)]
struct Seen {
    deltas: Vec<ModelChunk>,
    options: Vec<GenerateOptions>,
    reasoning_usage: Vec<Usage>,
    call_usage: Option<Usage>,
}

#[tokio::test]
async fn an_agent_runs_a_two_turn_tool_conversation_through_each_provider_with_hook_semantics() {
    for wire in wires() {
        let server = MockServer::start([
            Reply::sse(&wire.events(&first_turn())),
            Reply::sse(&wire.events(&second_turn())),
        ])
        .await;
        let log = Log::default();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = Arc::clone(&seen);
        let observer = FnHook::new("observer", move |e| {
            let mut s = s.lock().unwrap();
            match e {
                HookEvent::ReasoningChunk(e) => s.deltas.push(e.chunk().clone()),
                HookEvent::PreReasoning(e) => s.options.push(e.generate_options().clone()),
                HookEvent::PostReasoning(e) => s.reasoning_usage.push(e.usage()),
                HookEvent::PostCall(e) => s.call_usage = Some(e.usage()),
                _ => {}
            }
            Ok(())
        })
        .priority(500);
        // An earlier hook makes this call more precise; the wire must show it.
        let precise = FnHook::new("precise", |e| {
            if let HookEvent::PreReasoning(e) = e {
                let mine = GenerateOptions {
                    temperature: Some(0.1),
                    ..Default::default()
                };
                e.set_generate_options(GenerateOptions::merge(&mine, e.generate_options()));
            }
            Ok(())
        })
        .on(EventKind::PreReasoning)
        .priority(10);
        let mut defaults = GenerateOptions {
            temperature: Some(0.7),
            top_p: Some(0.9),
            max_tokens: Some(300),
            ..Default::default()
        };
        defaults
            .extra_body
            .insert("metadata".into(), json!({"user_id": "u-1"}));
        let agent = Agent::builder()
            .name("calc")
            .sys_prompt("You add numbers.")
            .model(wire.model(&server, fast_http(1)))
            .without_global_hooks()
            .toolkit(toolkit_with(vec![add_tool(&log)]))
            .generate_options(defaults)
            .hook(precise)
            .hook(observer)
            .build()
            .unwrap();

        let reply = agent.call(Msg::user("What is 1 + 2?")).await.unwrap();

        let name = wire.name();
        assert_eq!(reply.text(), "The sum is 3.", "{name}");
        assert_eq!(log.entries(), ["add:1+2"], "{name}");
        let bodies = server.bodies();
        assert_eq!(bodies.len(), 2, "{name}");
        let sent = wire.tool_results(&bodies[1]);
        assert_eq!(sent.len(), 1, "{name}");
        assert!(sent[0].0.starts_with("call_"), "{name}: a runtime id");
        assert_eq!(sent[0].1, "3", "{name}");
        assert_eq!(bodies[0]["tools"].as_array().unwrap().len(), 1, "{name}");

        let seen = std::mem::take(&mut *seen.lock().unwrap());
        // One ReasoningChunk per streamed delta, in order.
        let texts: Vec<&str> = seen
            .deltas
            .iter()
            .filter_map(|c| match c {
                ModelChunk::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["Let me ", "add.", "The sum ", "is 3."], "{name}");
        let thinking: Vec<&str> = seen
            .deltas
            .iter()
            .filter_map(|c| match c {
                ModelChunk::Thinking(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(thinking, ["I should ", "use add."], "{name}");
        let fragments = seen
            .deltas
            .iter()
            .filter(|c| matches!(c, ModelChunk::ToolCall { .. }))
            .count();
        assert_eq!(
            fragments, 3,
            "{name}: the opening fragment and two argument pieces"
        );

        // The options PreReasoning hooks saw last are exactly what went on the wire.
        assert_eq!(seen.options.len(), 2);
        for (options, body) in seen.options.iter().zip(&bodies) {
            assert_eq!(options.temperature, Some(0.1));
            assert_options_on_wire(options, body, name);
        }

        assert_eq!(
            seen.reasoning_usage,
            [Usage::new(10, 5), Usage::new(20, 6)],
            "{name}"
        );
        assert_eq!(seen.call_usage, Some(Usage::new(30, 11)), "{name}");
        assert_memory_valid(&agent.messages(&key("default")).await);
    }
}

/// Every option field that is set appears on the wire under its own name with its
/// value, and every `extra_body` entry as a top-level field.
fn assert_options_on_wire(options: &GenerateOptions, body: &Value, wire: &str) {
    let Value::Object(fields) = serde_json::to_value(options).unwrap() else {
        unreachable!()
    };
    for (k, v) in fields {
        if k == "extra_body" {
            for (ek, ev) in v.as_object().unwrap() {
                assert_eq!(&body[ek], ev, "{wire}: extra_body.{ek}");
            }
        } else {
            assert_eq!(body[&k], v, "{wire}: {k}");
        }
    }
}
