//! What a hook is validated against when an agent is built.

use super::HookError;
use crate::context::AgentInfo;
use crate::tool::ToolSchema;
use crate::util::closest;

/// What a hook is checked against when a top-level agent is built (see
/// [`Hook::validate_on`](super::Hook::validate_on)): the agent and every tool it can
/// call. A subagent's tools are a subset of its parent's (the delegation bound), so a
/// tool name valid here is the only kind any agent of the tree can call.
#[derive(Debug)]
#[non_exhaustive]
pub struct HookSite<'a> {
    /// The agent the hook is installed on.
    pub agent: &'a AgentInfo,
    /// The tools the agent can call (its own, hook-contributed, MCP and the delegation
    /// tool), with their argument schemas.
    pub tools: &'a [ToolSchema],
}

impl HookSite<'_> {
    /// Whether the agent has a tool with this name.
    pub fn has_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The JSON Schema of a tool's arguments.
    pub fn schema(&self, name: &str) -> Option<&serde_json::Value> {
        self.tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| &t.parameters)
    }

    /// Checks that `name` (configured under `key`, e.g. `approval.guarded_tools[0]`)
    /// is a tool of the agent; the error names the key and suggests the closest tool.
    pub fn expect_tool(&self, key: &str, name: &str) -> Result<(), HookError> {
        if self.has_tool(name) {
            return Ok(());
        }
        let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        let hint = closest(name, &names)
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        Err(HookError::new(format!(
            "{key}: no tool `{name}` on agent `{}` (its tools: [{}]){hint}",
            self.agent.name,
            names.join(", ")
        )))
    }
}
