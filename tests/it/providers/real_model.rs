//! The runtime against a real LLM: llama-server with Qwen2.5-Coder-1.5B-Instruct on
//! 127.0.0.1, through the OpenAI-compatible provider (`scripts/real-model start` builds and
//! starts it; `.ci/run` does so before the tests).
//!
//! The tests read the server's base URL from `REIN_REAL_MODEL_URL`
//! (`eval "$(scripts/real-model env)"` sets it). Unset, they fail under `CI=true` and are
//! skipped elsewhere with a visible `SKIPPED` line.
//!
//! A real model words things its own way, so the tests assert structure (which tool ran
//! with which arguments, which events came in which order, what the next request told
//! the model), never wording; the one value they look for in a reply is a number or a
//! phone number the tool returned. Temperature 0; every scenario gets a bounded number
//! of attempts ([`ATTEMPTS`]), and the tests take turns on the one-slot server.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rein::hooks::{MaskingConfig, MaskingHook, SensitiveDataMasker};
use rein::*;
use serde_json::json;

use crate::support::server::needs_env;
use crate::support::*;

const ENV: &str = "REIN_REAL_MODEL_URL";

/// Attempts per scenario: a 1.5B model at temperature 0 is deterministic on one
/// server build, but a retry keeps a rare divergence from failing CI.
const ATTEMPTS: usize = 2;

/// The degrees the weather tool reports: the answer must come from the tool.
const DEGREES: &str = "31";

/// The phone number the customer tool returns (a mainland mobile: the masker's pattern).
const PHONE: &str = "13812345678";

/// The server serves one request at a time: the tests take turns.
pub(super) static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server's base URL ([`needs_env`]: a visible `SKIPPED` line when the variable is
/// unset or blank, a failure under `CI=true`, where CI starts the server).
#[track_caller]
pub(super) fn server() -> Option<String> {
    needs_env(
        ENV,
        "a real model server",
        |url| !url.trim().is_empty(),
        "run `scripts/real-model start` and `eval \"$(scripts/real-model env)\"` to run \
         the real-model tests",
    )
}

pub(super) fn model(url: &str) -> OpenAiChatModel {
    model_builder(url).build().unwrap()
}

/// The builder of [`model`].
pub(super) fn model_builder(url: &str) -> OpenAiChatModelBuilder {
    OpenAiChatModel::builder()
        .base_url(url)
        .model("local")
        .http(HttpConfig {
            // Generous: on a loaded 2-core machine one turn can take minutes.
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            total_timeout: Some(Duration::from_secs(600)),
            retry: RetryPolicy {
                max_attempts: 3,
                ..RetryPolicy::default()
            },
            ..HttpConfig::default()
        })
}

pub(super) fn options() -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.0),
        seed: Some(42),
        max_tokens: Some(200),
        ..Default::default()
    }
}

/// An agent on the real model: temperature 0, no global hooks.
pub(super) fn agent(url: &str) -> AgentBuilder {
    Agent::builder()
        .model(model(url))
        .generate_options(options())
        .max_iters(6)
        .without_global_hooks()
}

/// `get_weather(city)`: 31 °C and sunny anywhere; logs `"get_weather:{city}"`.
pub(super) fn weather_tool(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "get_weather",
        "Returns the current weather for a city.",
        json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name."}},
            "required": ["city"]
        }),
        move |args| {
            let log = log.clone();
            async move {
                let city = args["city"].as_str().unwrap_or_default().to_owned();
                log.push(format!("get_weather:{city}"));
                Ok(
                    json!({"city": city, "temperature_celsius": 31, "conditions": "sunny"})
                        .to_string(),
                )
            }
        },
    )
}

/// The child's system prompt in the delegation test. The weather tests themselves send no
/// system prompt, so the tool loop also meets the runtime's empty-turn re-ask: on this
/// server build (one inference thread) the model calls the tool three times, answers with
/// an empty turn, and answers from the results after the nudge. Prompts tried on the 1.5B
/// model: "Always call the get_weather tool to look up the weather" got the call described
/// in prose; "Call get_weather once" got the call and then the answer.
pub(super) const WEATHER_PROMPT: &str = "You are a weather assistant. Call get_weather once, then answer \
                              in one sentence using its result.";

/// Runs `scenario` up to [`ATTEMPTS`] times (one at a time on the server) until it
/// returns `Ok`; fails with every attempt's reason.
pub(super) async fn attempts<F, Fut>(name: &str, mut scenario: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let _turn = SERVER.lock().await;
    let started = Instant::now();
    let mut failures = Vec::new();
    for n in 1..=ATTEMPTS {
        match scenario().await {
            Ok(()) => {
                eprintln!(
                    "real model: {name}: passed on attempt {n} in {:.1}s",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            Err(why) => failures.push(format!("attempt {n}: {why}")),
        }
    }
    panic!("{name} failed {ATTEMPTS} times:\n{}", failures.join("\n"));
}

/// `Err(message)` unless `cond`.
pub(super) fn check(cond: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(message()) }
}

pub(super) fn calls(log: &Log, tool: &str) -> Vec<String> {
    log.entries()
        .into_iter()
        .filter(|e| e.starts_with(&format!("{tool}:")))
        .collect()
}

/// Checks the weather tool ran for Paris.
fn ran_for_paris(log: &Log) -> Result<(), String> {
    let ran = calls(log, "get_weather");
    check(
        ran.iter().any(|c| c.to_lowercase().contains("paris")),
        || format!("get_weather never ran for Paris: {:?}", log.entries()),
    )
}

#[tokio::test]
async fn a_real_model_calls_a_tool_reads_its_result_and_answers_from_it() {
    let Some(url) = server() else { return };
    attempts("tool loop", || async {
        let log = Log::default();
        let agent = agent(&url)
            .toolkit(toolkit_with(vec![weather_tool(&log)]))
            .build()
            .unwrap();
        let reply = agent
            .call_with(
                vec![Msg::user("What is the weather in Paris right now?")],
                session("loop"),
            )
            .await
            .map_err(|e| format!("the call failed: {e}"))?;
        ran_for_paris(&log)?;
        check(reply.tool_uses().is_empty(), || {
            format!("the reply still calls tools: {reply:?}")
        })?;
        check(reply.text().contains(DEGREES), || {
            format!("the answer does not use the tool's {DEGREES} °C: {reply:?}")
        })?;
        let memory = agent.messages(&key("loop")).await;
        assert_memory_valid(&memory);
        let results = memory.iter().flat_map(|m| m.tool_results()).count();
        check(results >= 1, || {
            format!("no tool result stored: {memory:?}")
        })
    })
    .await;
}

#[tokio::test]
async fn a_real_model_streams_text_deltas_a_tool_call_its_result_and_the_final_reply() {
    let Some(url) = server() else { return };
    attempts("stream", || async {
        let log = Log::default();
        let agent = agent(&url)
            .toolkit(toolkit_with(vec![weather_tool(&log)]))
            .build()
            .unwrap();
        let events: Vec<AgentEvent> = agent
            .stream(
                vec![Msg::user("What is the weather in Paris right now?")],
                RunContext::new(),
            )
            .collect()
            .await;
        ran_for_paris(&log)?;
        let position = |f: &dyn Fn(&AgentEvent) -> bool| events.iter().position(f);
        let start = position(
            &|e| matches!(e, AgentEvent::ToolCallStart { name, .. } if name == "get_weather"),
        );
        let call = position(
            &|e| matches!(e, AgentEvent::ToolCall(u) if u.name == "get_weather"),
        );
        let result = position(
            &|e| matches!(e, AgentEvent::ToolResult(r) if r.content.contains(DEGREES) && !r.is_error),
        );
        let (Some(start), Some(call), Some(result)) = (start, call, result) else {
            return Err(format!("missing tool events: {events:?}"));
        };
        check(start < call && call < result, || {
            format!("tool events out of order: {events:?}")
        })?;
        let Some(AgentEvent::Final(outcome)) = events.last() else {
            return Err(format!("the stream does not end with Final: {events:?}"));
        };
        // Deltas of a turn the loop discarded (an empty turn re-asked) end with
        // `ReasoningRedone`; the answer is what was streamed after the last one.
        let from = events
            .iter()
            .rposition(|e| matches!(e, AgentEvent::ReasoningRedone))
            .map_or(result, |redone| redone.max(result));
        let answer: String = events[from..]
            .iter()
            .filter_map(|e| match e {
                AgentEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        check(!answer.is_empty(), || {
            format!("no text deltas after the tool result: {events:?}")
        })?;
        check(outcome.reply.text() == answer, || {
            format!(
                "the final reply {:?} is not the streamed answer {answer:?}",
                outcome.reply.text()
            )
        })?;
        check(answer.contains(DEGREES), || {
            format!("the answer does not use the tool's result: {answer:?}")
        })
    })
    .await;
}

#[tokio::test]
async fn a_tool_denied_by_a_hook_never_runs_and_the_real_model_is_told_why() {
    let Some(url) = server() else { return };
    const WHY: &str = "weather lookups are disabled for maintenance";
    attempts("deny", || async {
        let log = Log::default();
        let sent: Arc<Mutex<Vec<Vec<Msg>>>> = Arc::default();
        let seen = Arc::clone(&sent);
        let agent = agent(&url)
            .toolkit(toolkit_with(vec![weather_tool(&log)]))
            .hook(FnHook {
                interest: Interest::LIFECYCLE,
                ..FnHook::new("deny", move |event| {
                    match event {
                        HookEvent::PreActing(e) if e.tool_use().name == "get_weather" => {
                            e.deny(WHY);
                        }
                        HookEvent::PreReasoning(e) => {
                            seen.lock().unwrap().push(e.messages().to_vec());
                        }
                        _ => {}
                    }
                    Ok(())
                })
            })
            .build()
            .unwrap();
        let reply = agent
            .call(Msg::user("What is the weather in Paris right now?"))
            .await
            .map_err(|e| format!("the call failed: {e}"))?;
        assert!(
            log.entries().is_empty(),
            "a denied tool ran: {:?}",
            log.entries()
        );
        let requests = sent.lock().unwrap().clone();
        let told = requests.iter().skip(1).any(|messages| {
            messages
                .iter()
                .flat_map(|m| m.tool_results())
                .any(|r| r.is_error && r.content.contains(WHY))
        });
        check(told, || {
            format!("no later request carried the denial reason: {requests:?}")
        })?;
        check(!reply.text().trim().is_empty(), || {
            format!("no answer after the denial: {reply:?}")
        })
    })
    .await;
}

#[tokio::test]
async fn a_real_reply_repeating_a_phone_number_from_a_tool_result_is_masked() {
    let Some(url) = server() else { return };
    attempts("masking", || async {
        let raw: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = Arc::clone(&raw);
        let lookup = FunctionTool::new(
            "lookup_customer",
            "Returns a customer's record by name.",
            json!({
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"]
            }),
            |args| async move {
                Ok(json!({"name": args["name"], "phone": PHONE, "tier": "gold"}).to_string())
            },
        );
        let agent = agent(&url)
            // Without it the model called the tool four times, then said it had no results.
            .sys_prompt(
                "You are a support assistant. Call lookup_customer once, then answer in one \
                 sentence using its result.",
            )
            .toolkit(toolkit_with(vec![lookup]))
            .hook(MaskingHook::new(
                MaskingConfig {
                    enabled: true,
                    ..MaskingConfig::default()
                },
                SensitiveDataMasker::default(),
            ))
            .hook(
                FnHook::new("raw", move |event| {
                    if let HookEvent::PostReasoning(e) = event {
                        seen.lock().unwrap().push(e.message().text());
                    }
                    Ok(())
                })
                .on(EventKind::PostReasoning),
            )
            .build()
            .unwrap();
        let reply = agent
            .call(Msg::user(
                "Look up the customer Li Lei and reply with their phone number only.",
            ))
            .await
            .map_err(|e| format!("the call failed: {e}"))?;
        let raw = raw.lock().unwrap().clone();
        check(raw.iter().any(|t| t.contains(PHONE)), || {
            format!("the model never repeated the number, nothing to mask: {raw:?}")
        })?;
        assert!(
            !reply.text().contains(PHONE),
            "the number reached the caller: {reply:?}"
        );
        check(reply.text().contains("***"), || {
            format!("the reply carries no mask: {reply:?}")
        })
    })
    .await;
}

#[tokio::test]
async fn a_real_parent_delegates_through_agent_spawn_and_the_childs_tool_call_passes_inherited_hooks()
 {
    let Some(url) = server() else { return };
    attempts("delegation", || async {
        let log = Log::default();
        let record = Log::default();
        let rec = record.clone();
        let agent = agent(&url)
            .name("dispatcher")
            .delegation_style(DelegationStyle::Spawn)
            .max_iters(4)
            // With get_weather in view (the child can only use the parent's tools) and a
            // plain weather question, the 1.5B model called get_weather, then described
            // agent_spawn in prose after the denial: here the user asks for the delegation.
            .sys_prompt(
                "You are a dispatcher. Call agent_spawn once with agent_id \"weather\" and the \
                 user's question as the task, then answer in one sentence using its result.",
            )
            .toolkit(toolkit_with(vec![weather_tool(&log)]))
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
                    let depth = event.agent().depth;
                    if let HookEvent::PreActing(e) = event {
                        let name = e.tool_use().name.clone();
                        rec.push(format!("{depth}:{name}"));
                        // The parent must delegate; the same hook, inherited, lets the
                        // child call the tool.
                        if depth == 0 && name == "get_weather" {
                            e.deny(format!(
                                "only the weather agent may call get_weather: call \
                                 {SPAWN_TOOL} with agent_id \"weather\""
                            ));
                        }
                    }
                    Ok(())
                })
                .on(EventKind::PreActing),
            )
            .build()
            .unwrap();
        let reply = agent
            .call(Msg::user(
                "Use agent_spawn to ask the weather agent: what is the weather in Paris?",
            ))
            .await
            .map_err(|e| format!("the call failed: {e}"))?;
        let seen = record.entries();
        check(seen.contains(&format!("0:{SPAWN_TOOL}")), || {
            format!("the parent never delegated: {seen:?} (reply {reply:?})")
        })?;
        check(seen.iter().any(|s| s == "1:get_weather"), || {
            format!("the child's tool call did not pass the inherited hook: {seen:?}")
        })?;
        check(!calls(&log, "get_weather").is_empty(), || {
            format!("the child's tool never ran: {:?}", log.entries())
        })
    })
    .await;
}

/// The answer of the structured-output test.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(super) struct Weather {
    /// The city the question is about.
    pub(super) city: String,
    /// The temperature in degrees Celsius the tool reported.
    pub(super) temperature_celsius: f64,
}

/// Structured output on the real server without tools: `response_format: json_schema`
/// (the `Native` mode `Auto` picks without tools), which this llama-server build turns
/// into a grammar. With tools the build aborts on a request that carries both `tools` and
/// a JSON-schema `response_format` ("Content path must be a string"): `Auto` uses the
/// final-answer tool there
/// (`real_model_natural::a_real_typed_call_answers_after_a_tool_call_and_the_server_stays_up`).
#[tokio::test]
async fn a_real_model_answers_a_typed_call_with_a_value_that_fits_the_schema() {
    let Some(url) = server() else { return };
    attempts("structured output", || async {
        let agent = agent(&url)
            .sys_prompt("You extract facts from weather reports.")
            .build()
            .unwrap();
        let typed = agent
            .run_typed::<Weather>(
                vec![Msg::user(
                    "Report: it is 31 degrees Celsius and sunny in Paris today. \
                     Give the city and the temperature.",
                )],
                RunContext::new(),
            )
            .await
            .map_err(|e| format!("call failed: {e}"))?;
        check(typed.value.city.to_lowercase().contains("paris"), || {
            format!("city: {:?}", typed.value)
        })?;
        check((typed.value.temperature_celsius - 31.0).abs() < 0.5, || {
            format!("the temperature is not the report's: {:?}", typed.value)
        })
    })
    .await;
}

/// Record and replay (`rein::model::replay`): the refund scenario recorded on the real
/// model replays at once, offline, with the same decision trail — and the recording holds
/// neither the customer's card number nor their e-mail address. The committed fixture of
/// the same scenario is replayed by `replay::the_recorded_refund_run_replays_offline…`.
#[tokio::test]
async fn a_real_run_recorded_and_replayed_at_once_has_the_same_decision_trail() {
    use rein::model::replay::{PiiRedactor, RecordingModel, ReplayModel};
    use rein::testing::DecisionTrail;

    use crate::support::refund;

    let Some(url) = server() else { return };
    attempts("record and replay", || async {
        let dir = TempDir::new("real-record");
        let path = dir.path().join("refund.jsonl");
        let recorder = Arc::new(
            RecordingModel::create(model(&url), &path, PiiRedactor::default())
                .map_err(|e| e.to_string())?,
        );
        let agent = refund::agent(Arc::clone(&recorder)).map_err(|e| e.to_string())?;
        let (outcome, messages) = refund::run(&agent)
            .await
            .map_err(|e| format!("the recorded call failed: {e}"))?;
        let recorded =
            DecisionTrail::new(&outcome.decisions, &messages).redacted(&PiiRedactor::default());
        check(
            recorded
                .entries()
                .iter()
                .any(|e| e.kind == "tool_input_rewritten"),
            || format!("the model never asked for the refund the guard caps: {recorded:?}"),
        )?;
        let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        check(
            !text.contains("4111") && !text.contains(refund::EMAIL),
            || format!("the recording is not redacted: {text}"),
        )?;

        let replay = ReplayModel::open(&path, PiiRedactor::default()).map_err(|e| e.to_string())?;
        let agent = refund::agent(replay.clone()).map_err(|e| e.to_string())?;
        let (outcome, messages) = refund::run(&agent)
            .await
            .map_err(|e| format!("the replay failed: {e}"))?;
        let replayed =
            DecisionTrail::new(&outcome.decisions, &messages).redacted(&PiiRedactor::default());
        recorded
            .compare(&replayed)
            .map_err(|diff| diff.to_string())?;
        check(replay.remaining() == 0, || {
            format!(
                "{} recorded exchange(s) never asked for",
                replay.remaining()
            )
        })
    })
    .await;
}
