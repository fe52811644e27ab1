//! Run with: cargo run --example structured_output
//!
//! Structured output: `Agent::call_typed` asks for an answer of a Rust type, sends its
//! JSON Schema with the call (OpenAI natively, Anthropic as a forced tool), validates and
//! deserializes the answer, and re-asks when it does not fit. Offline on a
//! `ScriptedModel` whose first answer breaks the schema; on a real model when an API key
//! is set (see `examples/quickstart.rs`):
//!
//! ```sh
//! eval "$(scripts/real-model env)" && cargo run --all-features --example structured_output
//! ```

mod common;

use std::sync::Arc;

use rein::*;
use schemars::JsonSchema;
use serde::Deserialize;

/// How a support message is triaged.
#[derive(Deserialize, JsonSchema)]
struct Triage {
    /// One of `refund`, `question`, `complaint`.
    category: String,
    /// Whether a human should look at it today.
    urgent: bool,
    /// The order the message is about, if it names one.
    order: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model: Arc<dyn Model> = match common::real_model()? {
        Some(real) => real,
        None => Arc::new(ScriptedModel::new([
            // `urgent` as a string: the schema says boolean, so the runtime re-asks.
            ScriptedTurn::text(r#"{"category": "refund", "urgent": "yes", "order": "A-1001"}"#),
            ScriptedTurn::text(r#"{"category": "refund", "urgent": true, "order": "A-1001"}"#),
        ])),
    };
    // Prints each answer the model gives, so the re-ask is visible.
    let show = hook_fn(EventKind::PostReasoning, |e: &mut HookEvent| {
        if let HookEvent::PostReasoning(e) = e {
            println!("model answered: {}", e.message().text());
        }
        Ok(())
    });
    let agent = Agent::builder()
        .name("triage")
        .sys_prompt("You triage customer support messages. Answer with JSON only.")
        .model(model)
        .hook(show)
        .build()?;
    let typed = agent
        .run_typed::<Triage>(
            vec![Msg::user(
                "I was charged twice for order A-1001 and need the money back today!",
            )],
            RunContext::new(),
        )
        .await?;
    println!("re-asks: {}", typed.reasks);
    let Triage {
        category,
        urgent,
        order,
    } = typed.value;
    println!("triage: category {category}, urgent {urgent}, order {order:?}");
    Ok(())
}
