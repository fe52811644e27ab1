//! Run with: cargo run --example quickstart
//!
//! An agent with one tool and one hook that prints every lifecycle event it sees — and
//! enforces a rule the prompt alone could not. Offline and deterministic on a
//! ScriptedModel; on a real model when an API key is set and its feature is on:
//!
//! ```sh
//! OPENAI_API_KEY=sk-... cargo run --features openai --example quickstart
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --features anthropic --example quickstart
//! # a real local model (Qwen2.5-Coder-1.5B on llama-server; no key, no GPU):
//! scripts/real-model start
//! eval "$(scripts/real-model env)" && cargo run --all-features --example quickstart
//! ```
//!
//! The prompts are written for small models too: a short system prompt that says to call
//! the tool once and what to do when a call is denied, and questions that stand on their
//! own (the second runs in a session of its own).
//!
//! The first output line says which model runs.

mod common;

use std::sync::Arc;

use rein::*;
use serde_json::json;

/// Prints each event; denies `add` calls with a negative operand.
struct Narrator;

impl Hook for Narrator {
    fn priority(&self) -> i32 {
        50
    }

    // Everything except per-chunk events, to keep the output short.
    fn interest(&self) -> Interest {
        Interest::LIFECYCLE
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let depth = event.agent().depth;
        match event {
            HookEvent::PreCall(e) => {
                println!("[{depth}] PreCall: {} input message(s)", e.messages().len())
            }
            HookEvent::PreReasoning(e) => println!(
                "[{depth}] PreReasoning #{}: {} message(s), tools {:?}",
                e.iteration(),
                e.messages().len(),
                e.tool_names()
            ),
            HookEvent::PostReasoning(e) => println!(
                "[{depth}] PostReasoning: text {:?}, {} tool call(s)",
                e.message().text(),
                e.message().tool_uses().len()
            ),
            HookEvent::PreActing(e) => {
                let input = e.tool_use().input.clone();
                println!("[{depth}] PreActing: {} {input}", e.tool_use().name);
                if input["a"].as_f64().unwrap_or(0.0) < 0.0
                    || input["b"].as_f64().unwrap_or(0.0) < 0.0
                {
                    e.deny("negative numbers are not allowed");
                    println!("[{depth}]   denied");
                }
            }
            HookEvent::PostActing(e) => println!(
                "[{depth}] PostActing: {} -> {:?} (error: {})",
                e.tool_use().name,
                e.tool_result().content,
                e.tool_result().is_error
            ),
            HookEvent::PostCall(e) => {
                println!("[{depth}] PostCall: reply {:?}", e.final_message().text())
            }
            HookEvent::Error(e) => println!("[{depth}] Error: {}", e.error()),
            other => println!("[{depth}] {}", other.kind()),
        }
        Ok(())
    }
}

/// The arguments of `add`: the tool's JSON Schema is generated from this type.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let real = common::real_model()?;
    let mut tools = Toolkit::new();
    tools.register(FunctionTool::typed(
        "add",
        "Adds two numbers.",
        |args: AddArgs| async move { Ok((args.a + args.b).to_string()) },
    ))?;

    // The script: call add(1, 2), then answer; then try add(-5, 3), then apologise.
    let script = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_text("Let me compute that."),
        ScriptedTurn::text("1 + 2 = 3."),
        ScriptedTurn::tool_call("add", json!({"a": -5, "b": 3})),
        ScriptedTurn::text("I am not allowed to add negative numbers."),
    ]);
    let model: Arc<dyn Model> = real.unwrap_or_else(|| Arc::new(script));

    let agent = Agent::builder()
        .name("calculator")
        // Short and direct on purpose: with a longer system prompt the 1.5B local model
        // described tool calls in prose instead of making them.
        .sys_prompt(
            "You are a calculator. For every question, call add once, then answer in one \
             sentence using its result. If the call is denied, say why in one sentence.",
        )
        .model(model)
        // Deterministic on a real model too (dropped for models without sampling options).
        .generate_options(GenerateOptions {
            temperature: Some(0.0),
            ..Default::default()
        })
        .toolkit(tools)
        .hook(Narrator)
        .build()?;

    let reply = agent.call(Msg::user("What is 1 + 2?")).await?;
    println!("=> {}\n", reply.text());

    // A session of its own: after the first exchange in its context, the 1.5B local model
    // answered "-5 + 3" by itself instead of calling the tool (so the hook never ran).
    let own_session = RunContext::new().with_session_id("second-question");
    let reply = agent
        .call_with(vec![Msg::user("What is -5 + 3?")], own_session)
        .await?;
    println!("=> {}", reply.text());
    Ok(())
}
