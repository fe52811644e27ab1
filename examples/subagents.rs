//! Run with: cargo run --example subagents
//!
//! A support agent delegates to the `log-analyst` subagent declared in
//! `examples/subagents_workspace/subagents/log-analyst.md`. The parent's governance hook
//! is inherited: it sees the child's tool calls and denies a query for personal data.
//! A hook-contributed `delete_logs` tool is installed on the parent, but not on the
//! child, whose allowlist names only `query_logs` and `lookup_order`; the child's own
//! isolated workspace (`workspaces/log-analyst/tools.json`) denies `lookup_order`, so
//! the child gets `query_logs` alone: a child policy only narrows. Runs offline on a
//! ScriptedModel, or on a real model when an API key is set and its feature is on (see
//! the quickstart example); the first output line says which.

mod common;

use std::path::Path;
use std::sync::Arc;

use rein::*;
use serde_json::json;

/// Governance: no log queries for the `pii` stream, anywhere in the delegation tree.
/// Also contributes an admin tool, `delete_logs`, which must not leak into children.
struct Governance;

impl Hook for Governance {
    fn priority(&self) -> i32 {
        20
    }

    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing) | EventKind::PostCall | EventKind::PreReasoning
    }

    fn tools(&self) -> Vec<SharedTool> {
        vec![SharedTool::new(FunctionTool::new(
            "delete_logs",
            "Deletes a service's logs.",
            json!({"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}),
            |_| async { Ok("deleted".to_string()) },
        ))]
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let who = format!("{} (depth {})", event.agent().name, event.agent().depth);
        match event {
            HookEvent::PreActing(e) => {
                let call = e.tool_use();
                println!("governance saw {who} call {} {}", call.name, call.input);
                if call.name == "query_logs" && call.input["stream"] == "pii" {
                    e.deny("the pii stream is off limits");
                    println!("governance denied it");
                }
            }
            HookEvent::PreReasoning(e) if e.agent().depth > 0 && e.iteration() == 0 => {
                println!("governance saw {who} offered tools {:?}", e.tool_names())
            }
            HookEvent::PostCall(e) => println!("{who} replied: {}", e.final_message().text()),
            _ => {}
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let real = common::real_model()?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/subagents_workspace");

    let mut tools = Toolkit::new();
    tools.register(FunctionTool::new(
        "query_logs",
        "Returns recent log lines of a service stream.",
        json!({"type": "object",
               "properties": {"service": {"type": "string"}, "stream": {"type": "string"}},
               "required": ["service"]}),
        |args| async move {
            let service = args["service"].as_str().unwrap_or("?").to_string();
            Ok(format!(
                "{service}: 12:01 ERROR timeout talking to bank; 12:07 ERROR retry budget exhausted"
            ))
        },
    ))?;
    tools.register(FunctionTool::new(
        "lookup_order",
        "Looks up an order.",
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
        |_| async { Ok("order 42: refund pending".to_string()) },
    ))?;

    // One script for the whole tree: the parent and the child share the model.
    let script = ScriptedModel::new([
        // parent: each subagent is a tool of its own (`ask_<id>`, the default style);
        // `agent_spawn` stays for subagents the workspace declares later.
        ScriptedTurn::tool_call(
            "ask_log_analyst",
            json!({"task": "Why did refunds fail around 12:00 in payments?"}),
        ),
        // child
        ScriptedTurn::tool_calls(vec![
            (
                "query_logs",
                json!({"service": "payments", "stream": "pii"}),
            ),
            ("query_logs", json!({"service": "payments"})),
        ]),
        ScriptedTurn::text(
            "Two errors: a bank timeout at 12:01 and an exhausted retry budget at 12:07.",
        ),
        // parent
        ScriptedTurn::text("Refunds failed because the bank timed out; retries ran out at 12:07."),
    ]);

    let agent = Agent::builder()
        .name("support")
        .model(match &real {
            Some(m) => Arc::clone(m),
            None => Arc::new(script.clone()),
        })
        .toolkit(tools)
        .workspace(&workspace)
        .hook(Governance)
        .build()?;

    println!("parent tools: {:?}", agent.tool_names());
    println!("subagents: {:?}\n", agent.subagents());

    let mut stream = agent.stream(
        vec![Msg::user("Why did my refund fail?")],
        RunContext::new(),
    );
    use futures::StreamExt;
    while let Some(event) = stream.next().await {
        match event {
            AgentEvent::Subagent { path, event } => {
                if let AgentEvent::ToolResult(r) = *event {
                    println!("  [{path}] tool result: {}", r.content);
                }
            }
            AgentEvent::ToolResult(r) => println!(
                "  [support] tool result: {}",
                r.content.lines().next().unwrap_or("")
            ),
            AgentEvent::Final(outcome) => println!("\nfinal reply: {}", outcome.reply.text()),
            AgentEvent::Error(e) => return Err(e.into()),
            _ => {}
        }
    }

    if real.is_some() {
        return Ok(());
    }
    // The child was offered only `query_logs`: no delete_logs (hook tool, not in the
    // allowlist), no lookup_order (denied by the child workspace), no agent_spawn.
    let child_request = &script.requests()[1];
    let offered: Vec<&str> = child_request
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    println!(
        "tools offered to log-analyst: {offered:?} = parent's tools ∩ its allowlist \
         [query_logs, lookup_order] ∩ tools.json ∩ its own workspaces/log-analyst/tools.json \
         (deny lookup_order)"
    );
    assert_eq!(offered, ["query_logs"]);
    Ok(())
}
