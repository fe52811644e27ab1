//! The agent's seam to delegation. The `subagent` layer sits *above* this one: it
//! builds children through [`AgentBuilder`](super::AgentBuilder), so the agent layer
//! cannot name its types. Instead the builder holds a [`DelegationPlan`] (set by the
//! subagent layer's builder methods: `subagent`, `subagent_factory`,
//! `general_purpose_subagent`, `workspace`), and a built agent holds the
//! [`Delegating`] side the loop needs. Both are called at build time and once per
//! reasoning step of a delegating agent only; an agent without subagents pays nothing.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{AgentInfo, Limits, SessionKey, StreamRelease};
use crate::error::BuildError;
use crate::hook::RegisteredHook;
use crate::model::{GenerateOptions, Model};
use crate::tool::policy::ToolsPolicy;
use crate::tool::{SharedTool, ToolSchema, Toolkit};

/// Resolves the `model` name of a subagent declaration to a model; `None` keeps the
/// parent's model (with a warning). Set with
/// [`AgentBuilder::model_resolver`](super::AgentBuilder::model_resolver).
pub type ModelResolver = Arc<dyn Fn(&str) -> Option<Arc<dyn Model>> + Send + Sync>;

/// A predicate over hook-contributed tool names.
pub(crate) type HookToolFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What a child inherits from the agent that delegates to it.
pub(crate) struct Template {
    pub(crate) info: Arc<AgentInfo>,
    pub(crate) path: Arc<str>,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) resolver: Option<ModelResolver>,
    /// The delegating agent's own tools (no hook tools, no delegation tool).
    pub(crate) base_tools: Toolkit,
    /// Everything the delegating agent can call.
    pub(crate) callable: Arc<HashSet<String>>,
    /// Inheritable hooks in the delegating agent's chain order.
    pub(crate) hooks: Vec<RegisteredHook>,
    pub(crate) options: GenerateOptions,
    pub(crate) policy: Option<Arc<ToolsPolicy>>,
    /// The delegating agent's workspace root (relative child workspaces resolve here).
    pub(crate) workspace: Option<PathBuf>,
    pub(crate) hook_tool_filter: Option<HookToolFilter>,
    pub(crate) max_depth: u32,
    pub(crate) max_iters_default: u32,
    pub(crate) max_gotos: u32,
    pub(crate) tool_timeout: Duration,
    pub(crate) hook_timeout: Option<Duration>,
    pub(crate) trail: bool,
    pub(crate) record_content: bool,
    pub(crate) tool_labels: Option<Arc<HashSet<String>>>,
    /// The delegating agent's turn limits: a child's are at most these.
    pub(crate) limits: Limits,
    /// The delegating agent's stream release: a child's deltas reach the same caller.
    pub(crate) stream_release: StreamRelease,
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
    /// A copy (builders are `Clone`).
    fn clone_plan(&self) -> Box<dyn DelegationPlan>;
    /// The concrete plan, for the delegation layer's builder methods.
    fn as_any_mut(&mut self) -> &mut dyn Any;
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
