//! `build_async`: the agent builder's MCP step, as an extension trait (the builder lives
//! in `rein-core`, which knows MCP servers only as declarations).

use std::future::Future;

use rein_core::BuildError;
use rein_core::agent::{Agent, AgentBuilder};

use super::client::connect_all;

/// Adds [`build_async`](BuildAsync::build_async) to [`AgentBuilder`]: build an agent after
/// connecting its MCP servers. In scope with `use rein::*` or `use rein::prelude::*`.
pub trait BuildAsync: Sized {
    /// Builds the agent, first connecting its MCP servers. The only way to build an
    /// `AgentBuilder<McpPending>` (one that declares servers with
    /// [`AgentBuilder::mcp_server`]); on a [`Ready`](rein_core::agent::Ready) builder it
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
    /// As [`AgentBuilder::build`], plus
    /// [`BuildErrorKind::Mcp`](rein_core::BuildErrorKind::Mcp) naming the server when a
    /// server id or configuration is invalid or duplicated, a server cannot be started,
    /// connected or listed within its connect timeout, `enable_tools` names a tool the
    /// server does not offer, or a server tool's schema is invalid; and
    /// [`BuildErrorKind::Tool`](rein_core::BuildErrorKind::Tool) when an MCP tool name
    /// is taken by another tool.
    fn build_async(self) -> impl Future<Output = Result<Agent, BuildError>> + Send;
}

impl<S: Send> BuildAsync for AgentBuilder<S> {
    fn build_async(self) -> impl Future<Output = Result<Agent, BuildError>> + Send {
        self.build_connecting(|servers| async move { connect_all(&servers).await })
    }
}
