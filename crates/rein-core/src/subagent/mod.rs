//! Declared subagents: delegation that cannot open a hole in governance.
//!
//! An agent with subagents offers its model delegation in its [`DelegationStyle`]: by
//! default one tool per subagent (`ask_<id> {"task", "timeout_seconds"?}`, described by
//! the declaration), or the one delegation tool [`SPAWN_TOOL`]
//! (`agent_spawn {"agent_id", "task", "timeout_seconds"?}`), whose description lists the
//! available subagents. Either way a delegation is one tool call under the same hooks,
//! bounds and journal. Tools held with `AgentBuilder::subagent_tools` are granted to
//! subagents without being offered to the delegating model. A subagent is declared
//! - in code, with [`SubagentDeclaration`] (`AgentBuilder::subagent`),
//! - by a custom [`SubagentFactory`] (`AgentBuilder::subagent_factory`),
//! - in a workspace file `<workspace>/subagents/<id>.md` (`AgentBuilder::workspace`),
//!   present at build time (static: a broken file fails the build) or added, changed or
//!   removed while the agent runs (dynamic: the directory is re-scanned before every
//!   reasoning step; a broken file is reported and spawning it returns an error result),
//! - or is the built-in `general-purpose` subagent (`AgentBuilder::general_purpose_subagent`).
//!
//! A declaration made in code wins over a same-name file.
//!
//! # Invariants
//! Every path builds the child through one function, with the same [`AgentBuilder`]
//! users use, so none can forget them:
//! 1. **Hooks are inherited.** The child runs the parent's hooks — the same instances,
//!    in the same order — plus its own. Only a hook that declares
//!    [`Hook::propagate_to_subagents`](crate::Hook::propagate_to_subagents) `false` stays
//!    with the parent; a child cannot drop an inherited hook.
//! 2. **Tools only narrow.** The tools a child can call are a subset of the tools its
//!    parent can call, ∩ the declaration's allowlist (when non-empty), ∩ the workspace
//!    `tools.json` allow (when non-empty), − its deny, ∩ the child's own isolated
//!    workspace `tools.json` allow (when non-empty), − its deny. This holds for base,
//!    hook-contributed and MCP tools alike. The child policy applies even with an empty
//!    allowlist, is read when the child is built (and at the parent's build for
//!    declarations known then), and a child `tools.json` that cannot be read or parsed
//!    fails the build or the spawn — never "no policy". The delegation tool is never
//!    inherited implicitly: a child gets it only if its allowlist names it, and only
//!    below the maximum depth (default 3).
//! 3. **Hook tools are filtered before they are installed.** Tools contributed by hooks
//!    (`Hook::tools()`, called once per agent build) are collected apart, filtered by the
//!    builder's hook-tool filter, the allowlist, `tools.json` and the parent's tools, and
//!    only the survivors are registered. The bound therefore holds when the toolkit
//!    forbids deletion, and a rejected hook tool never removes a same-name tool the child
//!    owns.
//! 4. **Lineage is on every event.** A child's [`AgentInfo`](crate::AgentInfo) has its
//!    agent id as `name`, its parent's id as `parent_id`, and `depth` = parent + 1. A
//!    child call gets a fresh run id, the parent's user id, and the session
//!    `<agent_id>@<parent session>`, so two parent sessions' children never share memory.
//!
//! # Child workspaces
//! A declaration may carry a [`SubagentWorkspace`]: `shared` (the parent's; the default
//! when none is given, and always for `general-purpose`) or `isolated` with a root path
//! (relative paths resolve against the parent's workspace). An isolated root
//! - narrows the child with its `tools.json` (invariant 2; it may not declare MCP
//!   servers). The file is re-read before each spawn: when it (or `AGENTS.md`) changed,
//!   the child is rebuilt, so an edit applies from the next spawn and a file broken since
//!   fails that spawn;
//! - gives the child's prompt base: its `AGENTS.md` when present and not blank, else the
//!   declaration's body / system prompt;
//! - declares nested subagents in its own `subagents/*.md` (relative workspace paths in
//!   them resolve against the root), read only when the child delegates (its allowlist
//!   names [`SPAWN_TOOL`]) and bounded by depth as every delegation. The child sees the
//!   tree's code declarations and its own folder's files, not its parent's files.
//!
//! At the top-level build every isolated root known then is checked (policy,
//! `AGENTS.md`, and the nested declarations of children that delegate, recursively down
//! to the maximum depth): a broken one fails the build. One seen only later fails the
//! spawn that needs it, with an error result naming the file.
//!
//! # Workspace files
//! `tools.json` and the Markdown declarations are parsed strictly by [`spec`]: unknown
//! keys, missing `description`, bad types and malformed JSON/YAML are errors naming file,
//! line and key. A `tools.json` that exists but cannot be read or parsed fails the build,
//! and so does a dangling `tools.json` symlink and a workspace folder that does not
//! exist: a policy that cannot be read never means "no policy". Only a `tools.json` with
//! no directory entry at all means "no policy". The re-scan of `subagents/` compares file
//! contents, so an edit that keeps size and mtime is still seen.
//!
//! # Memory of children
//! A child keeps one conversation per parent session that spawned it
//! (`<agent_id>@<parent session>`). [`Agent::forget_session`](crate::Agent::forget_session)
//! on the parent forgets those too, down the whole tree; there is no other eviction, so
//! child conversations are bounded by (subagents × parent sessions not yet forgotten).

mod ask;
mod delegate;
mod narrow;
mod plan;
mod registry;
pub mod spec;
#[cfg(test)]
mod spec_tests;

use std::fmt;
use std::path::PathBuf;

use crate::agent::AgentBuilder;
use crate::error::{BuildError, BuildErrorKind};
use crate::hook::{IntoHook, RegisteredHook};

/// The delegation tool's name.
pub const SPAWN_TOOL: &str = crate::tool::policy::DELEGATION_TOOL;

/// The built-in general-purpose subagent's id.
pub const GENERAL_PURPOSE: &str = "general-purpose";

pub use crate::agent::{DelegationStyle, ModelResolver};

/// How a subagent's workspace relates to its parent's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkspaceMode {
    /// The child has a root of its own: its `tools.json` narrows the child's tools
    /// further (never widens them), its `AGENTS.md`, when present, is the child's
    /// prompt base, and its `subagents/` folder declares the child's own subagents.
    Isolated,
    /// The child works in the parent's workspace: the parent's policy, nothing more.
    Shared,
}

/// A subagent's workspace: `workspace: {mode: isolated|shared, path: rel|abs}` in
/// Markdown front matter, [`SubagentDeclarationBuilder::workspace`] in code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubagentWorkspace {
    /// Isolated or shared.
    pub mode: WorkspaceMode,
    /// The isolated root (required for [`WorkspaceMode::Isolated`], absent for
    /// [`WorkspaceMode::Shared`]). A relative path resolves against the delegating
    /// agent's workspace when the child is built (for a Markdown file, at parse time
    /// against the workspace holding its `subagents/` folder, and stored absolute).
    pub path: Option<PathBuf>,
}

impl SubagentWorkspace {
    /// An isolated workspace rooted at `path`.
    pub fn isolated(path: impl Into<PathBuf>) -> Self {
        Self {
            mode: WorkspaceMode::Isolated,
            path: Some(path.into()),
        }
    }

    /// The parent's workspace.
    pub fn shared() -> Self {
        Self {
            mode: WorkspaceMode::Shared,
            path: None,
        }
    }
}

/// A subagent declared in code (or loaded from a Markdown file).
///
/// ```
/// use rein::*;
/// use rein::subagent::SubagentDeclaration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let analyst = SubagentDeclaration::builder("log-analyst")
///     .description("Reads service logs and explains failures.")
///     .tools(["query_logs"]) // at most the parent's tools; none: no tools at all
///     .steps(4)
///     .build()?;
/// let model = ScriptedModel::new([
///     // By default each subagent is a tool of its own: `ask_<id>` with a `task`.
///     ScriptedTurn::tool_call(
///         "ask_log_analyst",
///         serde_json::json!({"task": "why did payments fail?"}),
///     ),
///     ScriptedTurn::text("the bank timed out"),       // the subagent's answer
///     ScriptedTurn::text("Payments failed: bank timeout."), // the parent's reply
/// ]);
/// let mut tools = Toolkit::new();
/// tools.register(FunctionTool::new("query_logs", "Log lines.", serde_json::json!({"type": "object"}),
///     |_| async { Ok("12:01 ERROR timeout talking to bank".to_string()) }))?;
/// let agent = Agent::builder().model(model).toolkit(tools).subagent(analyst).build()?;
/// let reply = agent.call(Msg::user("What happened to payments?")).await?;
/// assert_eq!(reply.text(), "Payments failed: bank timeout.");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SubagentDeclaration {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) tools: Vec<String>,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) steps: u32,
    pub(crate) model: Option<String>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) hooks: Vec<RegisteredHook>,
    pub(crate) workspace: Option<SubagentWorkspace>,
    pub(crate) budget: Option<crate::budget::Budget>,
}

impl fmt::Debug for SubagentDeclaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubagentDeclaration")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("tools", &self.tools)
            .field("steps", &self.steps)
            .field("model", &self.model)
            .field("hooks", &self.hooks.len())
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl SubagentDeclaration {
    /// Starts a declaration of the subagent `name` (its agent id).
    pub fn builder(name: impl Into<String>) -> SubagentDeclarationBuilder {
        SubagentDeclarationBuilder {
            decl: SubagentDeclaration {
                name: name.into(),
                description: String::new(),
                tools: Vec::new(),
                sys_prompt: None,
                steps: 10,
                model: None,
                temperature: None,
                top_p: None,
                hooks: Vec::new(),
                workspace: None,
                budget: None,
            },
        }
    }

    /// The agent id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the subagent is for (shown to the parent model).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The tool allowlist over inherited tools (empty = inherit all).
    pub fn tools(&self) -> &[String] {
        &self.tools
    }

    /// The child's maximum reasoning steps.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    pub(crate) fn from_spec(spec: spec::DeclarationSpec) -> Self {
        SubagentDeclaration {
            name: spec.id,
            description: spec.description,
            tools: spec.tools,
            sys_prompt: Some(spec.body).filter(|b| !b.trim().is_empty()),
            steps: spec.steps.unwrap_or(10),
            model: spec.model,
            temperature: spec.temperature,
            top_p: spec.top_p,
            hooks: Vec::new(),
            workspace: spec.workspace,
            budget: None,
        }
    }

    /// The declared workspace (`None`: none of its own; the parent's policy applies).
    pub fn workspace(&self) -> Option<&SubagentWorkspace> {
        self.workspace.as_ref()
    }

    /// The child's own slice of its delegating call's budget, if declared.
    pub fn budget(&self) -> Option<&crate::budget::Budget> {
        self.budget.as_ref()
    }
}

/// Builds a [`SubagentDeclaration`].
#[must_use]
#[derive(Clone, Debug)]
pub struct SubagentDeclarationBuilder {
    decl: SubagentDeclaration,
}

impl SubagentDeclarationBuilder {
    /// What the subagent is for (required, shown to the parent model).
    pub fn description(mut self, s: impl Into<String>) -> Self {
        self.decl.description = s.into();
        self
    }

    /// The allowlist over the parent's tools; empty (the default) inherits them all
    /// except the delegation tool, which must be listed to be inherited.
    pub fn tools<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.decl.tools = names.into_iter().map(Into::into).collect();
        self
    }

    /// The child's system prompt (a fixed section naming the child and its parent is
    /// appended).
    pub fn sys_prompt(mut self, s: impl Into<String>) -> Self {
        self.decl.sys_prompt = Some(s.into());
        self
    }

    /// Maximum reasoning steps of the child (default 10, at least 1).
    pub fn steps(mut self, n: u32) -> Self {
        self.decl.steps = n;
        self
    }

    /// A slice of the delegating call's budget for each call of this subagent: the child
    /// is charged against this *and* against every budget of the call that delegates to
    /// it (it can never spend more than its parent has left). Stopped by it, the child
    /// returns `status: budget_exhausted` to its parent, which goes on.
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.decl.budget = Some(budget);
        self
    }

    /// A model name, resolved by the parent builder's model resolver; the parent's
    /// model is used when it does not resolve.
    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.decl.model = Some(name.into());
        self
    }

    /// Temperature overlaid on the parent's options.
    pub fn temperature(mut self, t: f64) -> Self {
        self.decl.temperature = Some(t);
        self
    }

    /// top_p overlaid on the parent's options.
    pub fn top_p(mut self, p: f64) -> Self {
        self.decl.top_p = Some(p);
        self
    }

    /// The child's workspace (default: none, which behaves as shared). An isolated
    /// workspace's `tools.json` narrows the child's tools; see [`SubagentWorkspace`].
    pub fn workspace(mut self, ws: SubagentWorkspace) -> Self {
        self.decl.workspace = Some(ws);
        self
    }

    /// A hook of the child's own, run after inherited hooks of equal priority.
    pub fn hook<M>(mut self, h: impl IntoHook<M>) -> Self {
        self.decl.hooks.push(h.into_registered().0);
        self
    }

    /// Validates and builds the declaration.
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidDeclaration`] for an id outside `[A-Za-z0-9_.-]+`, a
    /// blank description, `steps(0)`, a blank allowlist entry, an out-of-range
    /// temperature (0–2) or top_p (0 < p ≤ 1), an isolated workspace without a path or a
    /// shared one with a path, or an isolated workspace for `general-purpose` (always
    /// shared).
    pub fn build(self) -> Result<SubagentDeclaration, BuildError> {
        let d = self.decl;
        let bad = |msg: String| {
            Err(BuildError::new(
                BuildErrorKind::InvalidDeclaration,
                format!("subagent declaration `{}`: {msg}", d.name),
            ))
        };
        if d.name.is_empty()
            || !d
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return bad("the id must be non-empty and use only [A-Za-z0-9_.-]".into());
        }
        if d.description.trim().is_empty() {
            return bad("`description` is required".into());
        }
        if d.steps == 0 {
            return bad("`steps` must be at least 1".into());
        }
        if d.tools.iter().any(|t| t.trim().is_empty()) {
            return bad("`tools` has a blank entry".into());
        }
        if d.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return bad("`temperature` must be within 0..=2".into());
        }
        if d.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
            return bad("`top_p` must be within (0, 1]".into());
        }
        match &d.workspace {
            Some(SubagentWorkspace {
                mode: WorkspaceMode::Isolated,
                path: None,
            }) => return bad("an isolated workspace needs a path".into()),
            Some(SubagentWorkspace {
                mode: WorkspaceMode::Shared,
                path: Some(_),
            }) => return bad("a shared workspace takes no path".into()),
            Some(SubagentWorkspace {
                mode: WorkspaceMode::Isolated,
                ..
            }) if d.name == GENERAL_PURPOSE => {
                return bad("`general-purpose` always shares its parent's workspace".into());
            }
            _ => {}
        }
        Ok(d)
    }
}

/// Builds custom children. The runtime hands [`SubagentFactory::configure`] a builder
/// holding the child's config as every child starts: its parent's inheritable config
/// (model, options, the parent's own tools, its inheritable hooks, limits, timeouts)
/// narrowed by the declaration (prompt, steps, model, temperature, top-p, the
/// declaration's hooks after the inherited ones). The factory may add hooks (they run
/// after those), narrow tools, lower limits, change the prompt, model or options, set
/// a fixed id or a session store. Afterwards the runtime checks what it returned and
/// builds it with the tool bound — the declaration's allowlist, `tools.json` and the
/// parent's tools — so a factory can narrow, never widen. The builder is
/// [`Ready`](crate::agent::Ready): a child cannot declare MCP servers (it inherits the
/// parent's MCP tools through the bound), which the type system enforces.
///
/// Widening fails the spawn with [`BuildErrorKind::Widening`] (the parent model gets
/// an error result naming the tool or limit; nothing is clamped silently):
/// - a tool under a name the parent can call must be the very instance the parent holds
///   (`Arc` identity) — a factory cannot swap in another tool under a permitted name;
/// - `max_depth`, `max_iters` (the declared steps), `max_gotos`, `tool_timeout` and
///   `hook_timeout` may only be lowered (dropping the parent's hook timeout raises it).
///
/// A hook-tool filter the factory sets is combined with the parent's (a hook tool must
/// pass both), `record_content` can only be turned off, turn limits are capped at the
/// parent's and the stream release is the parent's. Renaming the child or giving it a
/// workspace or subagent declarations of its own fails the spawn with
/// [`BuildErrorKind::InvalidConfig`].
///
/// ```
/// use rein::*;
/// use rein::subagent::{SubagentDeclaration, SubagentFactory};
///
/// /// A reader: the parent's `read` tool only, three steps at most.
/// struct Reader(SubagentDeclaration);
///
/// impl SubagentFactory for Reader {
///     fn declaration(&self) -> &SubagentDeclaration {
///         &self.0
///     }
///     fn configure(&self, builder: AgentBuilder) -> AgentBuilder {
///         let tools = builder.current_toolkit().filtered(|name| name == "read");
///         builder.toolkit(tools).max_iters(3)
///     }
/// }
///
/// # fn main() -> Result<(), BuildError> {
/// let decl = SubagentDeclaration::builder("reader").description("Reads files.").build()?;
/// let agent = Agent::builder()
///     .model(ScriptedModel::new([]))
///     .subagent_factory(Reader(decl))
///     .build()?;
/// assert!(agent.tool_names().iter().any(|t| t == "ask_reader"));
/// # Ok(()) }
/// ```
pub trait SubagentFactory: Send + Sync + 'static {
    /// The declaration: id, description (shown to the parent model), allowlist.
    fn declaration(&self) -> &SubagentDeclaration;

    /// Customizes the child's builder.
    fn configure(&self, builder: AgentBuilder) -> AgentBuilder;
}
