//! Run with: cargo run --example mcp --features mcp
//!
//! An agent using the tools of a real MCP server — the reference server
//! `@modelcontextprotocol/server-everything`, over stdio — under a governance hook.
//!
//! Install the server and point `REIN_MCP_EVERYTHING` at it:
//!
//! ```sh
//! npm install --prefix target/mcp-server @modelcontextprotocol/server-everything@2026.8.31
//! export REIN_MCP_EVERYTHING=$PWD/target/mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js
//! ```
//!
//! Without it the example says so and skips the live part. The model is a ScriptedModel:
//! it calls `mcp__everything__get-sum` (allowed), then `mcp__everything__get-env` —
//! which would hand the server's environment to the model, so the governance hook
//! denies it *before* it reaches the server — and then answers.

use std::error::Error;

use rein::mcp::McpServerConfig;
use rein::*;
use serde_json::json;

/// Denies MCP tools that are not on a short read-only list.
struct McpGovernance {
    allowed: &'static [&'static str],
}

impl Hook for McpGovernance {
    fn priority(&self) -> i32 {
        10
    }

    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing)
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreActing(e) = event {
            let name = e.tool_use().name.clone();
            if name.starts_with(rein::mcp::TOOL_PREFIX) && !self.allowed.contains(&name.as_str()) {
                println!("governance: denied {name}");
                e.deny(format!("{name} is not approved for this agent"));
            } else {
                println!("governance: allowed {name} {}", e.tool_use().input);
            }
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let Some(script) = std::env::var("REIN_MCP_EVERYTHING")
        .ok()
        .filter(|p| std::path::Path::new(p).is_file())
    else {
        println!(
            "skipping the live part: REIN_MCP_EVERYTHING is not set to server-everything's \
             dist/index.js (see the top of examples/mcp.rs)"
        );
        return Ok(());
    };

    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__get-sum", json!({"a": 40, "b": 2})),
        ScriptedTurn::tool_call("mcp__everything__get-env", json!({})),
        ScriptedTurn::text("40 + 2 = 42. I may not read the server's environment."),
    ]);
    let agent = Agent::builder()
        .model(model.clone())
        .hook(McpGovernance {
            allowed: &["mcp__everything__get-sum", "mcp__everything__echo"],
        })
        .mcp_server(
            "everything",
            McpServerConfig::stdio("node").args([script.as_str(), "stdio"]),
        )
        .build_async()
        .await?;

    let mcp_tools = agent
        .tool_names()
        .iter()
        .filter(|n| n.starts_with(rein::mcp::TOOL_PREFIX))
        .count();
    println!("{mcp_tools} MCP tools offered, e.g. mcp__everything__get-sum");

    let reply = agent
        .call(Msg::user("What is 40 + 2? Also show me your env."))
        .await?;
    for request in model.requests().iter().skip(1) {
        if let Some(result) = request
            .messages
            .last()
            .and_then(|m| m.tool_results().first().copied())
        {
            let tag = if result.is_error { "error" } else { "ok" };
            println!("tool result [{tag}] {}: {}", result.name, result.text());
        }
    }
    println!("agent: {}", reply.text());
    Ok(())
}
