//! The builder side of delegation: the `AgentBuilder` methods that declare subagents
//! live here, in the layer above `agent`, and record a [`DelegationPlan`] the builder
//! prepares and installs at `build()` without naming this layer's types.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use super::ask::AskTool;
use super::delegate::{Delegation, SpawnTool};
use super::registry::Registry;
use super::{SubagentDeclaration, SubagentFactory};
use crate::agent::{
    AgentBuilder, Delegating, DelegationPlan, DelegationStyle, Installed, PreparedDelegation,
    SessionKey, Template,
};
use crate::error::BuildError;
use crate::tool::{SharedTool, ToolSchema, Toolkit};

/// What a top-level builder declared: code declarations, factories, the general-purpose
/// subagent (and, through the workspace, `subagents/*.md`).
#[derive(Clone, Default)]
pub(crate) struct Declarations {
    pub(crate) subagents: Vec<SubagentDeclaration>,
    pub(crate) factories: Vec<Arc<dyn SubagentFactory>>,
    pub(crate) general_purpose: bool,
}

impl std::fmt::Debug for Declarations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declarations")
            .field("subagents", &self.subagents)
            .field("factories", &self.factories.len())
            .field("general_purpose", &self.general_purpose)
            .finish()
    }
}

/// Applies `f` to the builder's declarations, created on first use (a child's
/// inherited registry is replaced: a builder that declares subagents is top-level).
fn declare<S>(b: &mut AgentBuilder<S>, f: impl FnOnce(&mut Declarations)) {
    let mut decls = b
        .config
        .delegation
        .take()
        .and_then(|p| p.as_any().downcast_ref::<Declarations>().cloned())
        .unwrap_or_default();
    f(&mut decls);
    b.config.delegation = Some(Arc::new(decls));
}

impl DelegationPlan for Declarations {
    fn prepare(
        &self,
        subagents_dir: Option<PathBuf>,
    ) -> Result<Option<Box<dyn PreparedDelegation>>, BuildError> {
        let delegates = !self.subagents.is_empty()
            || !self.factories.is_empty()
            || self.general_purpose
            || subagents_dir.as_ref().is_some_and(|d| d.is_dir());
        if !delegates {
            return Ok(None);
        }
        let registry = Registry::new(
            &self.subagents,
            &self.factories,
            self.general_purpose,
            subagents_dir,
        )?;
        Ok(Some(Box::new(Prepared(Arc::new(registry)))))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A child's plan: the registry of the tree it belongs to, or — for an isolated child
/// that delegates — the tree's code declarations with its own `subagents/` folder.
#[derive(Clone)]
pub(crate) struct ChildPlan {
    tree: Arc<Registry>,
    own_dir: Option<PathBuf>,
}

impl ChildPlan {
    /// `own_dir`: the isolated child's `subagents/` folder (see
    /// [`nested_dir`](super::spec::nested_dir)); `None` shares the tree's registry.
    pub(crate) fn new(tree: Arc<Registry>, own_dir: Option<PathBuf>) -> Self {
        Self { tree, own_dir }
    }
}

impl std::fmt::Debug for ChildPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildPlan")
    }
}

impl DelegationPlan for ChildPlan {
    fn prepare(
        &self,
        _subagents_dir: Option<PathBuf>,
    ) -> Result<Option<Box<dyn PreparedDelegation>>, BuildError> {
        let registry = match &self.own_dir {
            None => Arc::clone(&self.tree),
            Some(dir) => Arc::new(self.tree.nested(dir.clone())?),
        };
        Ok(Some(Box::new(Prepared(registry))))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A loaded registry, waiting for the agent's template.
struct Prepared(Arc<Registry>);

impl PreparedDelegation for Prepared {
    fn install(
        self: Box<Self>,
        template: Template,
        validate: bool,
    ) -> Result<Installed, BuildError> {
        let delegation = Arc::new(Delegation::new(self.0, template));
        if validate {
            delegation.validate()?;
        }
        let spawn = || SharedTool::new(SpawnTool::new(Arc::clone(&delegation)));
        let tools = match delegation.style() {
            DelegationStyle::ToolPerSubagent => {
                let mut tools = AskTool::for_all(&delegation)?;
                // Declarations that appear later are reached through `agent_spawn`.
                if delegation.registry.dynamic() {
                    tools.push(spawn());
                }
                tools
            }
            _ => vec![spawn()],
        };
        Ok((delegation, tools))
    }
}

impl Delegating for Delegation {
    fn built_child(&self, id: &str) -> Result<crate::Agent, String> {
        Delegation::built_child(self, id).map_err(|e| e.to_string())
    }

    fn schemas(&self, base: &[ToolSchema]) -> Vec<ToolSchema> {
        Delegation::schemas(self, base)
    }

    fn listing(&self) -> Vec<(String, String)> {
        self.registry.refresh();
        self.registry.listing()
    }

    fn forget_children(&self, key: &SessionKey) {
        Delegation::forget_children(self, key);
    }
}

impl<S> AgentBuilder<S> {
    /// Uses a workspace folder: `<ws>/tools.json` bounds this agent's tools and every
    /// subagent's, and `<ws>/subagents/*.md` declares subagents — those present now are
    /// checked at `build()`, later changes (judged by file content, not size or mtime)
    /// are picked up before each reasoning step.
    ///
    /// Fails closed at `build()` ([`BuildErrorKind::Workspace`](crate::BuildErrorKind::Workspace), naming the path): the
    /// folder must exist and be a directory ([`SpecErrorKind::Missing`] otherwise), and
    /// only a `tools.json` with no directory entry at all means "no policy" — a dangling
    /// symlink ([`SpecErrorKind::Missing`]), an unreadable file or a malformed one is an
    /// error.
    ///
    /// [`SpecErrorKind::Missing`]: crate::subagent::spec::SpecErrorKind::Missing
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.workspace = Some(path.into());
        declare(&mut self, |_| {});
        self
    }

    /// Tools held for subagents only: this agent's model is never offered them and
    /// this agent cannot call them, but a subagent whose allowlist names one is granted
    /// it (the bound counts them as this agent's tools: `tools.json` still applies, and
    /// a name clashing with one of this agent's tools fails the build). For a
    /// coordinator that should delegate instead of calling the tool itself: small
    /// models call a tool they are offered rather than delegate to a subagent that has
    /// it. Ignored when the agent has no subagents.
    pub fn subagent_tools(mut self, tools: Toolkit) -> Self {
        self.config.subagent_tools = tools;
        self
    }

    /// Declares a subagent in code (wins over a same-name workspace file).
    pub fn subagent(mut self, decl: SubagentDeclaration) -> Self {
        declare(&mut self, |d| d.subagents.push(decl));
        self
    }

    /// Declares a subagent built by a custom factory.
    pub fn subagent_factory(mut self, factory: impl SubagentFactory) -> Self {
        declare(&mut self, |d| d.factories.push(Arc::new(factory)));
        self
    }

    /// Offers the built-in `general-purpose` subagent: the parent's tools (not the
    /// delegation tool) and hooks, no allowlist.
    pub fn general_purpose_subagent(mut self) -> Self {
        declare(&mut self, |d| d.general_purpose = true);
        self
    }
}
