//! Natural requests on the real model (llama-server + Qwen2.5-Coder-1.5B, see
//! `real_model`): a coordinator delegates a weather question nobody told it how to
//! delegate, and a typed answer follows a tool call without taking the server down.
//!
//! `measure_delegation_styles_on_the_real_model` (ignored: several minutes) is the
//! measurement behind the default [`DelegationStyle`]:
//! `scripts/test --test it measure_delegation_styles -- --ignored --nocapture`;
//! `measure_a_live_conversation_of_thirty_turns_under_compaction` (ignored: ~8 minutes)
//! runs 30 live turns with tool calls through compaction.

use rein::*;
use serde_json::json;

use super::real_model::{
    WEATHER_PROMPT, Weather, agent, attempts, calls, check, server, weather_tool,
};
use crate::support::*;

/// The coordinator's prompt: it is told to delegate weather questions, never which tool
/// to call.
const COORDINATOR_PROMPT: &str = "You are a travel assistant. Weather questions are answered \
     by your weather subagent: delegate them to it, then answer the user in one sentence from \
     its reply.";

/// The tool a parent delegates to the `weather` subagent with, in `style`.
fn delegation_tool(style: DelegationStyle) -> &'static str {
    match style {
        DelegationStyle::ToolPerSubagent => "ask_weather",
        _ => SPAWN_TOOL,
    }
}

/// A coordinator with a `weather` subagent in `style`. `get_weather` is held for the
/// subagent only ([`AgentBuilder::subagent_tools`]): the coordinator's model is offered
/// the delegation tool and nothing else. A hook, inherited by the child, records every
/// call as `"<depth>:<tool>"`.
fn coordinator(url: &str, log: &Log, record: &Log, style: DelegationStyle) -> Agent {
    let rec = record.clone();
    agent(url)
        .name("coordinator")
        .max_iters(4)
        .sys_prompt(COORDINATOR_PROMPT)
        .delegation_style(style)
        .subagent_tools(toolkit_with(vec![weather_tool(log)]))
        .subagent(
            SubagentDeclaration::builder("weather")
                .description("Looks up the current weather of a city.")
                .sys_prompt(WEATHER_PROMPT)
                .tools(["get_weather"])
                .build()
                .unwrap(),
        )
        .hook(
            FnHook::new("record", move |event| {
                if let HookEvent::PreActing(e) = event {
                    rec.push(format!("{}:{}", event_depth(e), e.tool_use().name));
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap()
}

fn event_depth(e: &PreActingEvent) -> u32 {
    e.agent().depth
}

/// One natural weather question to a coordinator: `Ok` when the parent delegated, the
/// child's `get_weather` passed the inherited hook and ran.
async fn delegates(url: &str, style: DelegationStyle, question: &str) -> Result<(), String> {
    let log = Log::default();
    let record = Log::default();
    let reply = coordinator(url, &log, &record, style)
        .call(Msg::user(question))
        .await
        .map_err(|e| format!("the call failed: {e}"))?;
    let seen = record.entries();
    let tool = delegation_tool(style);
    check(seen.contains(&format!("0:{tool}")), || {
        format!(
            "the parent never delegated: {seen:?} (reply {:?})",
            reply.text()
        )
    })?;
    check(seen.iter().any(|s| s == "1:get_weather"), || {
        format!("the child's tool call did not pass the inherited hook: {seen:?}")
    })?;
    check(!calls(&log, "get_weather").is_empty(), || {
        format!("the child's tool never ran: {:?}", log.entries())
    })
}

#[tokio::test]
async fn a_real_coordinator_delegates_a_natural_weather_question_and_the_childs_tool_call_passes_inherited_hooks()
 {
    let Some(url) = server() else { return };
    attempts("natural delegation", || {
        delegates(
            &url,
            DelegationStyle::default(),
            "What is the weather in Paris right now?",
        )
    })
    .await;
}

#[tokio::test]
async fn a_real_typed_call_answers_after_a_tool_call_and_the_server_stays_up() {
    let Some(url) = server() else { return };
    attempts("typed answer after a tool call", || async {
        let log = Log::default();
        let agent = agent(&url)
            .sys_prompt(
                "You are a weather assistant. Call get_weather once, then give the final answer.",
            )
            .toolkit(toolkit_with(vec![weather_tool(&log)]))
            .build()
            .unwrap();
        let ctx = RunContext::new();
        let typed = agent
            .run_typed::<Weather>(
                vec![Msg::user(
                    "What is the weather in Paris? Give the city and the temperature.",
                )],
                ctx.clone(),
            )
            .await
            .map_err(|e| format!("the typed call failed: {e}"))?;
        check(!calls(&log, "get_weather").is_empty(), || {
            format!("the tool never ran before the answer: {:?}", typed.value)
        })?;
        check(typed.value.city.to_lowercase().contains("paris"), || {
            format!("city: {:?}", typed.value)
        })?;
        check((typed.value.temperature_celsius - 31.0).abs() < 0.5, || {
            format!("the temperature is not the tool's: {:?}", typed.value)
        })?;
        // The server is still up: a plain call on the same session answers.
        let reply = agent
            .call_with(vec![Msg::user("Thanks! Reply with one word.")], ctx)
            .await
            .map_err(|e| format!("the server did not answer after the typed call: {e}"))?;
        check(reply.has_visible_text(), || {
            format!("empty reply {reply:?}")
        })
    })
    .await;
}

/// The natural questions of the measurement (none names a tool or a subagent).
const QUESTIONS: [&str; 6] = [
    "What is the weather in Paris right now?",
    "Is it sunny in Madrid today?",
    "How warm is it in Berlin at the moment?",
    "I fly to Rome tomorrow. What's the weather like there now?",
    "weather in Tokyo?",
    "Should I take an umbrella in London today?",
];

#[tokio::test]
#[ignore = "a measurement of several minutes on the real model; run with --ignored --nocapture"]
async fn measure_delegation_styles_on_the_real_model() {
    let Some(url) = server() else { return };
    let _turn = super::real_model::SERVER.lock().await;
    let mut table = Vec::new();
    for style in [DelegationStyle::Spawn, DelegationStyle::ToolPerSubagent] {
        let mut passed = 0;
        for question in QUESTIONS {
            let started = std::time::Instant::now();
            let result = delegates(&url, style, question).await;
            eprintln!(
                "{style:?} {question:?}: {} in {:.1}s",
                match &result {
                    Ok(()) => "delegated".to_owned(),
                    Err(why) => why.clone(),
                },
                started.elapsed().as_secs_f64()
            );
            passed += usize::from(result.is_ok());
        }
        table.push(
            json!({"style": format!("{style:?}"), "delegated": passed, "of": QUESTIONS.len()}),
        );
    }
    eprintln!("delegation styles on the real model: {}", json!(table));
}

/// The window the agents are given: below the server's own 4,096 (`-c 4096`), so that
/// each prompt stays quick on a 2-core machine and the server's own handling never
/// applies. That handling is why a client-side window matters: given a 4,972-token
/// prompt, this llama-server build silently kept its last 2,924 tokens (system prompt
/// and tool schemas included in what it dropped) and answered.
const WINDOW: u32 = 1024;

/// A stored conversation of `turns` weather turns, each a question, a `get_weather`
/// call, its result and an answer (30 turns are about 2,600 tokens by the estimate).
fn weather_history(turns: usize) -> Vec<Msg> {
    let cities = ["Paris", "Madrid", "Berlin", "Rome", "Tokyo", "London"];
    let mut out = Vec::new();
    for i in 0..turns {
        let city = cities[i % cities.len()];
        let id = format!("call_{i}");
        out.push(Msg::user(format!("Turn {i}: the weather in {city}?")));
        out.push(Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                &id,
                "get_weather",
                json!({"city": city}),
            ))],
        ));
        out.push(Msg::tool([ToolResult::new(
            &id,
            "get_weather",
            json!({"city": city, "temperature_celsius": 10 + i, "conditions": "sunny"}).to_string(),
        )]));
        out.push(Msg::assistant(format!("I looked {city} up.")));
    }
    out
}

/// A weather agent with the window; every model call's input tokens, as the server
/// counted them, go to `inputs`.
fn windowed(url: &str, log: &Log, inputs: &Log, policy: ContextPolicy) -> Agent {
    let inputs = inputs.clone();
    agent(url)
        .sys_prompt(WEATHER_PROMPT)
        .toolkit(toolkit_with(vec![weather_tool(log)]))
        .context_window(WINDOW)
        .context_policy(policy)
        .hook(
            FnHook::new("usage", move |event| {
                if let HookEvent::PostReasoning(e) = event {
                    inputs.push(e.usage().input_tokens.to_string());
                }
                Ok(())
            })
            .on(EventKind::PostReasoning),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_real_conversation_over_the_window_goes_on_dropped_or_compacted_and_fails_typed_otherwise()
 {
    let Some(url) = server() else { return };
    attempts("context window", || async {
        let history = weather_history(30);
        let log = Log::default();
        let inputs = Log::default();
        // Fail: the typed error, before anything is sent.
        let fail = windowed(&url, &log, &inputs, ContextPolicy::Fail);
        fail.set_messages(&key("fail"), history.clone())
            .await
            .map_err(|e| e.to_string())?;
        let err = fail
            .call_with(vec![Msg::user("And in Paris now?")], session("fail"))
            .await;
        check(
            matches!(&err, Err(e) if e.kind() == ErrorKind::ContextWindow),
            || format!("expected the context-window error: {err:?}"),
        )?;
        check(inputs.entries().is_empty(), || {
            format!("a request was sent: {:?}", inputs.entries())
        })?;
        // DropOldest: three more real turns, each answered, every prompt within the
        // window by the server's own count. (Whether the model calls the tool again is
        // its own choice: after 30 stored turns the 1.5B model answers in their style.)
        let drop = windowed(&url, &log, &inputs, ContextPolicy::DropOldest);
        drop.set_messages(&key("drop"), history.clone())
            .await
            .map_err(|e| e.to_string())?;
        for (n, city) in ["Paris", "Oslo", "Lima"].into_iter().enumerate() {
            let reply = drop
                .call_with(
                    vec![Msg::user(format!(
                        "What is the weather in {city} right now?"
                    ))],
                    session("drop"),
                )
                .await
                .map_err(|e| format!("turn {n} failed: {e}"))?;
            check(reply.has_visible_text(), || {
                format!("turn {n}: no answer: {reply:?}")
            })?;
        }
        let counted: Vec<u64> = inputs
            .entries()
            .iter()
            .filter_map(|t| t.parse().ok())
            .collect();
        check(
            !counted.is_empty() && counted.iter().all(|&t| t > 0 && t <= u64::from(WINDOW)),
            || format!("prompts outside the window by the server's count: {counted:?}"),
        )?;
        let stored = drop.messages(&key("drop")).await;
        check(stored.len() >= history.len() + 3 * 2, || {
            format!("the session lost turns: {} messages", stored.len())
        })?;
        // Compact: the oldest turns summarized on the real model (rolling calls within the
        // window), the summary stored in their place, and the conversation goes on.
        let inputs = Log::default();
        let compact = windowed(&url, &log, &inputs, ContextPolicy::Compact);
        compact
            .set_messages(&key("compact"), history.clone())
            .await
            .map_err(|e| e.to_string())?;
        for (n, city) in ["Paris", "Oslo"].into_iter().enumerate() {
            let reply = compact
                .call_with(
                    vec![Msg::user(format!(
                        "What is the weather in {city} right now?"
                    ))],
                    session("compact"),
                )
                .await
                .map_err(|e| format!("compacted turn {n} failed: {e}"))?;
            check(reply.has_visible_text(), || {
                format!("compacted turn {n}: no answer: {reply:?}")
            })?;
        }
        let stored = compact.messages(&key("compact")).await;
        check(
            stored[0].metadata.contains_key(rein::agent::COMPACTION_KEY)
                && stored.len() < history.len(),
            || {
                format!(
                    "not compacted: {} messages, first {:?}",
                    stored.len(),
                    stored[0].text()
                )
            },
        )?;
        crate::support::assert_memory_valid(&stored);
        let counted: Vec<u64> = inputs
            .entries()
            .iter()
            .filter_map(|t| t.parse().ok())
            .collect();
        check(
            !counted.is_empty() && counted.iter().all(|&t| t > 0 && t <= u64::from(WINDOW)),
            || format!("compacted prompts outside the window by the server's count: {counted:?}"),
        )
    })
    .await;
}

/// The cities of the live conversation, one per turn in turn.
const CITIES: [&str; 10] = [
    "Paris", "Madrid", "Berlin", "Rome", "Tokyo", "London", "Oslo", "Lima", "Cairo", "Delhi",
];

#[tokio::test]
#[ignore = "a measurement of several minutes on the real model; run with --ignored --nocapture"]
async fn measure_a_live_conversation_of_thirty_turns_under_compaction() {
    let Some(url) = server() else { return };
    let _turn = super::real_model::SERVER.lock().await;
    let (log, inputs, compactions) = (Log::default(), Log::default(), Log::default());
    let (seen, done) = (inputs.clone(), compactions.clone());
    let root = url.trim_end_matches('/').trim_end_matches("/v1").to_owned();
    let conversation = Agent::builder()
        .model(
            super::real_model::model_builder(&url)
                .llama_server_token_count(root)
                .build()
                .unwrap(),
        )
        .generate_options(super::real_model::options())
        .max_iters(6)
        .without_global_hooks()
        .sys_prompt(WEATHER_PROMPT)
        .toolkit(toolkit_with(vec![weather_tool(&log)]))
        .context_window(WINDOW)
        .context_policy(ContextPolicy::Compact)
        .hook(FnHook::new("usage", move |event| {
            match event {
                // Every question is looked up: the 1.5B model otherwise answers later
                // turns in the style of earlier ones, with made-up figures.
                HookEvent::PreReasoning(e)
                    if e.messages()
                        .iter()
                        .last()
                        .is_some_and(|m| m.role == Role::User && m.tool_results().is_empty()) =>
                {
                    let mut options = e.generate_options().clone();
                    options.tool_choice = Some(ToolChoice::Required);
                    e.set_generate_options(options);
                }
                HookEvent::PostReasoning(e) => seen.push(e.usage().input_tokens.to_string()),
                HookEvent::PostCompact(_) => done.push("compacted".to_owned()),
                _ => {}
            }
            Ok(())
        }))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let mut answered = 0;
    for (n, city) in CITIES.iter().cycle().take(30).enumerate() {
        let turn = std::time::Instant::now();
        let reply = conversation
            .call_with(
                vec![Msg::user(format!(
                    "What is the weather in {city} right now?"
                ))],
                session("live"),
            )
            .await
            .unwrap_or_else(|e| panic!("turn {n} failed: {e}"));
        answered += usize::from(reply.has_visible_text());
        eprintln!(
            "turn {n} ({city}): {:.1}s, {} compactions so far: {:?}",
            turn.elapsed().as_secs_f64(),
            compactions.entries().len(),
            reply.text()
        );
    }
    let stored = conversation.messages(&key("live")).await;
    assert_memory_valid(&stored);
    let counted: Vec<u64> = inputs
        .entries()
        .iter()
        .filter_map(|t| t.parse().ok())
        .collect();
    let largest = counted.iter().copied().max().unwrap_or(0);
    eprintln!(
        "a live conversation of 30 turns: {answered} answered, {} weather calls, {} model \
         requests, {} compactions, largest prompt {largest} of a {WINDOW}-token window by \
         the server's count, {} messages stored, {:.0}s",
        calls(&log, "get_weather").len(),
        counted.len(),
        compactions.entries().len(),
        stored.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(answered, 30, "every turn answered");
    assert!(
        calls(&log, "get_weather").len() >= 30,
        "a tool call every turn"
    );
    assert!(
        !compactions.entries().is_empty(),
        "the conversation was compacted"
    );
    assert!(
        largest <= u64::from(WINDOW),
        "a prompt over the window: {counted:?}"
    );
}
