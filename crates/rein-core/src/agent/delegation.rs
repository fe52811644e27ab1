//! The agent's seam to delegation. The `subagent` layer sits *above* this one: it
//! builds children through [`AgentBuilder`](super::AgentBuilder) from a [`Template`]
//! (the parent's inheritable [`AgentConfig`]), so the agent layer cannot name its
//! types. Instead the builder holds a [`DelegationPlan`] (set by the
//! subagent layer's builder methods: `subagent`, `subagent_factory`,
//! `general_purpose_subagent`, `workspace`), and a built agent holds the
//! [`Delegating`] side the loop needs. Both are called at build time and once per
//! reasoning step of a delegating agent only; an agent without subagents pays nothing.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::config::AgentConfig;
use super::{AgentInfo, SessionKey};
use crate::error::BuildError;
use crate::model::Model;
use crate::tool::policy::ToolsPolicy;
use crate::tool::{SharedTool, ToolSchema};

/// Resolves the `model` name of a subagent declaration to a model; `None` keeps the
/// parent's model (with a warning). Set with
/// [`AgentBuilder::model_resolver`](super::AgentBuilder::model_resolver).
pub type ModelResolver = Arc<dyn Fn(&str) -> Option<Arc<dyn Model>> + Send + Sync>;

/// How an agent with subagents offers delegation to its model (default
/// [`ToolPerSubagent`](Self::ToolPerSubagent)). Set with
/// [`AgentBuilder::delegation_style`](super::AgentBuilder::delegation_style); inherited
/// by subagents that delegate. Either way a delegation is one tool call: it passes the
/// same admission, `PreActing` hooks, effect journal, depth bound and audit, and the
/// child is built the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DelegationStyle {
    /// One tool, `agent_spawn {agent_id, task, timeout_seconds?}`
    /// ([`SPAWN_TOOL`](crate::subagent::SPAWN_TOOL)), whose description lists the
    /// subagents known at each step (so subagents added to a workspace later are
    /// offered at once).
    Spawn,
    /// One tool per subagent known at `build()`, named `ask_<id>` (the id with every
    /// character other than ASCII letters and digits turned into `_`, e.g.
    /// `ask_weather_agent`), described by the declaration's description, with one
    /// `task` argument (and the optional `timeout_seconds`). Small models call a
    /// specific, self-describing tool far more readily than a generic one (OpenAI's
    /// handoffs `transfer_to_<agent>` work the same way). An agent whose subagents
    /// come from a workspace folder (files may appear while it runs) also keeps
    /// `agent_spawn`, whose listing includes the subagents declared after `build()`.
    ///
    /// The default: on the real local model of the test servers (Qwen2.5-Coder-1.5B), a
    /// coordinator told only to "delegate weather questions" delegated 4 of 6 natural
    /// questions through `ask_weather` and 1 of 6 through `agent_spawn`.
    #[default]
    ToolPerSubagent,
}

/// A predicate over hook-contributed tool names.
pub(crate) type HookToolFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What a child inherits from the agent that delegates to it: the delegating agent's
/// inheritable config (see [`AgentConfig::inheritable`]) and what bounds its children.
pub(crate) struct Template {
    /// The config every child starts from: the delegating agent's own bounded tools
    /// (no hook tools, no delegation tool), its inheritable hooks in chain order, and
    /// its inherited settings.
    pub(crate) config: AgentConfig,
    pub(crate) info: Arc<AgentInfo>,
    pub(crate) path: Arc<str>,
    /// Everything the delegating agent can call.
    pub(crate) callable: Arc<HashSet<String>>,
    pub(crate) policy: Option<Arc<ToolsPolicy>>,
    /// The delegating agent's workspace root (relative child workspaces resolve here).
    pub(crate) workspace: Option<PathBuf>,
}

/// What a child's builder needs to bound it: set only when the delegation layer builds
/// a child (with the parent's registry as the child's [`DelegationPlan`]).
#[derive(Clone)]
pub(crate) struct ChildBinding {
    pub(crate) parent: Arc<AgentInfo>,
    pub(crate) path: Arc<str>,
    pub(crate) allow: Vec<String>,
    pub(crate) callable: Arc<HashSet<String>>,
    pub(crate) policy: Option<Arc<ToolsPolicy>>,
    /// The policy of the child's own isolated workspace (narrows further).
    pub(crate) own_policy: Option<Arc<ToolsPolicy>>,
    /// The child's workspace root: its isolated root, else its parent's.
    pub(crate) workspace: Option<PathBuf>,
}

/// The built delegation of one agent, as the loop sees it.
pub(crate) trait Delegating: Send + Sync {
    /// The schemas to offer this step (the delegation tool lists the subagents known
    /// now).
    fn schemas(&self, base: &[ToolSchema]) -> Vec<ToolSchema>;
    /// The subagents this agent can delegate to now, with their descriptions.
    fn listing(&self) -> Vec<(String, String)>;
    /// Forgets the conversations children held for the parent session `key`.
    fn forget_children(&self, key: &SessionKey);
    /// The child `id`, built as a delegation to it would (for inspection).
    fn built_child(&self, id: &str) -> Result<super::Agent, String>;
}

/// What the delegation layer set on a builder.
pub(crate) trait DelegationPlan: fmt::Debug + Send + Sync + 'static {
    /// Loads what this agent can delegate to (before the tool bound is applied, so a
    /// bad declaration fails the build first); `subagents_dir` is the workspace's
    /// `subagents/` folder, if any. `None`: the agent does not delegate.
    ///
    /// # Errors
    /// A duplicate declaration id or a broken static declaration file.
    fn prepare(
        &self,
        subagents_dir: Option<PathBuf>,
    ) -> Result<Option<Box<dyn PreparedDelegation>>, BuildError>;
    /// The concrete plan, for the delegation layer's builder methods.
    fn as_any(&self) -> &dyn Any;
}

/// An installed delegation: the loop's side and the delegation tools (`agent_spawn`, or
/// one per subagent).
pub(crate) type Installed = (Arc<dyn Delegating>, Vec<SharedTool>);

/// A prepared delegation, installed once the agent's template is known.
pub(crate) trait PreparedDelegation {
    /// The agent's delegation and its delegation tools (in `template.config`'s
    /// [`DelegationStyle`]); `validate` checks every known
    /// declaration against the template (top-level agents).
    ///
    /// # Errors
    /// A declaration's allowlist names a tool the agent cannot call, or an isolated
    /// workspace has an invalid policy.
    fn install(
        self: Box<Self>,
        template: Template,
        validate: bool,
    ) -> Result<Installed, BuildError>;
}
