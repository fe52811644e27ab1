//! `AgentBuilder::build_async`: the agent builder's MCP step. It lives here, in the leaf
//! that connects servers, so the agent layer never imports `mcp`: the builder only holds
//! the declarations (`tool::mcp_config` values) and refuses them in the synchronous
//! `build()`.

use super::client::connect_all;
use crate::agent::{Agent, AgentBuilder};
use crate::error::{BuildError, BuildErrorKind};
use crate::tool::policy::load_policy;

impl<S> AgentBuilder<S> {
    /// Builds the agent, first connecting its MCP servers (feature `mcp`). The only
    /// way to build an `AgentBuilder<McpPending>` (one that declares servers with
    /// [`AgentBuilder::mcp_server`]); on a [`Ready`](crate::agent::Ready) builder it
    /// also connects the servers a workspace `tools.json` declares.
    ///
    /// Every server declared with [`AgentBuilder::mcp_server`] or in the workspace
    /// `tools.json` is connected concurrently, each within its connect timeout; its tools
    /// (those in `enable_tools`, when set) are added to the base tools, and the rest is
    /// [`AgentBuilder::build`]. The connections are kept open for the agent's calls and
    /// closed (stdio servers' processes killed) when the last agent sharing them — clones
    /// and subagents included — is dropped. Without servers this is `build()`.
    ///
    /// # Errors
    /// As [`AgentBuilder::build`], plus [`BuildErrorKind::Mcp`] naming the server when a
    /// server id or configuration is invalid or duplicated, a server cannot be started,
    /// connected or listed within its connect timeout, `enable_tools` names a tool the
    /// server does not offer, or a server tool's schema is invalid; and
    /// [`BuildErrorKind::Tool`] when an MCP tool name is taken by another tool.
    #[cfg(feature = "mcp")]
    pub async fn build_async(mut self) -> Result<Agent, BuildError> {
        let policy = match &self.config.workspace {
            Some(ws) => load_policy(ws)?,
            None => None,
        };
        let mut servers = self.mcp_servers.clone();
        if let Some(p) = &policy {
            for (id, config) in &p.mcp_servers {
                servers.push((id.clone(), config.clone()));
            }
        }
        for (i, (id, _)) in servers.iter().enumerate() {
            if servers[..i].iter().any(|(other, _)| other == id) {
                return Err(BuildError::new(
                    BuildErrorKind::Mcp,
                    format!("MCP server `{id}` is declared twice (in code and/or tools.json)"),
                ));
            }
        }
        for tool in connect_all(&servers).await? {
            let name = tool.name().to_owned();
            self.config
                .toolkit
                .register(tool)
                .map_err(|e| BuildError::tool(&format!("MCP tool `{name}`"), e))?;
        }
        self.build_with(Some(policy), true)
    }
}
