//! The refund scenario of the recorded real run (`tests/fixtures/recordings/refund.jsonl`):
//! a support agent with a `submitRefund` tool, a tool guard capping refunds at 1000 and
//! an approval hook whose approver refuses refunds above 500, on a customer message
//! holding a card number and an e-mail address.
//!
//! Self-contained (it imports nothing of the test support), because the recorder,
//! `examples/record_refund.rs`, includes it with `#[path]`: the recording and its
//! replay build the very same agent.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

use rein::hooks::{
    ApprovalConfig, ApprovalDecision, ApprovalHook, ApprovalMode, ApprovalRequest, SharedApprover,
    ToolGuardConfig, ToolGuardHook,
};
use rein::observe::RevealNumbers;
use rein::*;
use serde_json::json;

/// The committed recording, relative to the repository root.
pub const FIXTURE: &str = "tests/fixtures/recordings/refund.jsonl";

/// The fixture's absolute path.
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

/// The card number and the e-mail address of [`CUSTOMER`], which no fixture may hold.
pub const CARD: &str = "4111 1111 1111 1111";
pub const EMAIL: &str = "jane.doe@example.com";

pub const SYSTEM_PROMPT: &str = "You are a customer-support agent of an online shop. When a \
     customer asks for a refund, call submitRefund once with the order id and the amount they \
     ask for. After the tool result, tell the customer in one or two sentences what happened.";

/// The customer's message.
pub const CUSTOMER: &str = "Hello, please refund order A-1001: I was charged 5000 CNY for a \
     kettle that arrived broken. My card is 4111 1111 1111 1111 and my e-mail is \
     jane.doe@example.com.";

/// The session the scenario runs in.
pub const SESSION: &str = "refund";

/// What the approver answers for refunds above 500 (after the cap).
pub const APPROVER_REASON: &str =
    "refunds above 500 CNY need a supervisor; escalated as ticket T-77";

/// `submitRefund(order_id, amount)`: files a refund and says so.
pub fn refund_tool() -> FunctionTool {
    FunctionTool::new(
        "submitRefund",
        "Files a refund for an order.",
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "The order id, e.g. A-1234."},
                "amount": {"type": "number", "description": "The amount to refund, in CNY."}
            },
            "required": ["order_id", "amount"]
        }),
        |args| async move {
            Ok(format!(
                "refund R-1001 filed for order {} ({} CNY)",
                args["order_id"].as_str().unwrap_or("?"),
                args["amount"]
            ))
        },
    )
}

/// Caps `amount` at 1000.
pub fn tool_guard() -> Result<ToolGuardHook, Box<dyn std::error::Error>> {
    let mut config: ToolGuardConfig =
        serde_json::from_value(json!({"numeric_caps": {"amount": 1000}}))?;
    config.enabled = true;
    Ok(ToolGuardHook::new(config)?)
}

/// Asks the approver about refunds above 500; it refuses them.
pub fn approval() -> Result<ApprovalHook, Box<dyn std::error::Error>> {
    let when = serde_json::from_value(json!({"path": "/amount", "gt": 500}))?;
    let approver = SharedApprover::new(|_request: ApprovalRequest| async {
        ApprovalDecision::Deny(APPROVER_REASON.to_owned())
    });
    Ok(ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["submitRefund".into()],
            when: [("submitRefund".to_owned(), when)].into(),
            mode: ApprovalMode::Await,
            ..ApprovalConfig::default()
        },
        Some(approver),
    )?)
}

/// The generation options: temperature 0, a seed, a short answer.
pub fn options() -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.0),
        seed: Some(42),
        max_tokens: Some(200),
        ..Default::default()
    }
}

/// The support agent on `model`, recording its decision trail.
pub fn agent(model: impl Model) -> Result<Agent, Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    tools.register(refund_tool())?;
    Ok(Agent::builder()
        .name("support")
        .model(model)
        .sys_prompt(SYSTEM_PROMPT)
        .generate_options(options())
        .toolkit(tools)
        .max_iters(4)
        .without_global_hooks()
        .hook(tool_guard()?)
        .hook(approval()?)
        .hook(RevealNumbers::new().field("submitRefund", "/amount"))
        .decision_trail(true)
        .build()?)
}

/// Runs the scenario on `agent`: the outcome and the conversation.
pub async fn run(agent: &Agent) -> Result<(CallOutcome, Vec<Msg>), Error> {
    let ctx = RunContext::new().with_session_id(SESSION);
    let outcome = agent.run(vec![Msg::user(CUSTOMER)], ctx).await?;
    let messages = agent.messages(&SessionKey::new(None, SESSION)).await;
    Ok((outcome, messages))
}
