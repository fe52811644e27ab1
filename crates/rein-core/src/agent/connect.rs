//! Building an agent whose MCP servers must be connected first: the builder step a
//! client crate (`rein-mcp`, or one of your own) builds on.

use std::future::Future;

use super::Agent;
use super::builder::AgentBuilder;
use crate::error::{BuildError, BuildErrorKind};
use crate::mcp::McpServerConfig;
use crate::tool::SharedTool;
use crate::tool::policy::load_policy;

impl<S> AgentBuilder<S> {
    /// Builds the agent after `connect` turned its MCP server declarations into tools:
    /// the declarations made with `AgentBuilder::mcp_server` (feature `mcp`) followed by
    /// those of the workspace `tools.json`, as `(id, configuration)` pairs. The tools
    /// `connect` returns are added to the base tools (bounded, hooked and audited like
    /// every other tool), and the rest is [`AgentBuilder::build`]. This is the one way
    /// to build an `AgentBuilder<McpPending>`; `rein::mcp`'s `build_async` is this step
    /// with the `rmcp` client.
    ///
    /// `connect` is called once, also with an empty list (return no tools then).
    ///
    /// # Errors
    /// As [`AgentBuilder::build`], plus [`BuildErrorKind::Mcp`] when a server id is
    /// declared twice (in code and/or `tools.json`), whatever `connect` returns as an
    /// error, and [`BuildErrorKind::Tool`] when a returned tool's name is taken.
    pub async fn build_connecting<F, Fut>(mut self, connect: F) -> Result<Agent, BuildError>
    where
        F: FnOnce(Vec<(String, McpServerConfig)>) -> Fut,
        Fut: Future<Output = Result<Vec<SharedTool>, BuildError>>,
    {
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
        for tool in connect(servers).await? {
            let name = tool.name().to_owned();
            self.config
                .toolkit
                .register(tool)
                .map_err(|e| BuildError::tool(&format!("MCP tool `{name}`"), e))?;
        }
        self.build_with(Some(policy), true)
    }
}
