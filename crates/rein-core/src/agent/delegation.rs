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

/// An installed delegation: the loop's side and the delegation tool.
pub(crate) type Installed = (Arc<dyn Delegating>, SharedTool);

/// A prepared delegation, installed once the agent's template is known.
pub(crate) trait PreparedDelegation {
    /// The agent's delegation and its delegation tool; `validate` checks every known
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
