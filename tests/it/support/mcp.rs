//! The hostile MCP server (`tests/fixtures/hostile_mcp.js`, a Node script).

use rein::mcp::McpServerConfig;

use super::server::needs;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hostile_mcp.js");

/// The hostile server in `mode`, or `None` (with a `SKIPPED` line; a failure under CI)
/// when `node` is missing.
#[track_caller]
pub fn hostile(mode: &str) -> Option<McpServerConfig> {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    needs(
        "`node`",
        node.then_some(()),
        "the hostile MCP server is a Node script: install Node.js",
    )?;
    Some(McpServerConfig::stdio("node").args([SCRIPT, mode]))
}
