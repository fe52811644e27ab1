//! The declaration registry, the per-agent delegation state, the `agent_spawn` tool and
//! the one function that builds children.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use indexmap::IndexMap;
use serde_json::{Value, json};

use super::spec::{DeclarationSpec, SpecError, ToolsPolicy, dir_fingerprint, scan_subagents_dir};
use super::{GENERAL_PURPOSE, ModelResolver, SPAWN_TOOL, SubagentDeclaration, SubagentFactory};
use crate::agent::{Agent, AgentBuilder, AgentEvent, AgentInfo, RunContext, StopReason};
use crate::error::{BuildError, BuildErrorKind};
use crate::hook::RegisteredHook;
use crate::message::Msg;
use crate::model::{GenerateOptions, Model};
use crate::tool::{Tool, ToolContext, ToolError, ToolSchema, Toolkit};

/// A predicate over hook-contributed tool names.
pub(crate) type HookToolFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Where a subagent comes from.
#[derive(Clone)]
pub(crate) enum Declared {
    Decl(Arc<SubagentDeclaration>),
    Factory(Arc<dyn SubagentFactory>),
    GeneralPurpose,
}

impl Declared {
    fn description(&self) -> String {
        match self {
            Declared::Decl(d) => d.description.clone(),
            Declared::Factory(f) => f.declaration().description.clone(),
            Declared::GeneralPurpose => GENERAL_PURPOSE_DESCRIPTION.to_owned(),
        }
    }

    fn allowlist(&self) -> Vec<String> {
        match self {
            Declared::Decl(d) => d.tools.clone(),
            Declared::Factory(f) => f.declaration().tools.clone(),
            Declared::GeneralPurpose => Vec::new(),
        }
    }
}

const GENERAL_PURPOSE_DESCRIPTION: &str =
    "A general-purpose agent with the same tools as you, for a self-contained task.";

/// One parsed Markdown declaration file.
struct FileEntry {
    modified: SystemTime,
    len: u64,
    version: u64,
    decl: Result<Arc<SubagentDeclaration>, SpecError>,
}

#[derive(Default)]
struct Files {
    /// By agent id (file name without `.md`), sorted.
    entries: BTreeMap<String, FileEntry>,
    next_version: u64,
}

/// The declarations of a delegation tree, shared by every agent in it.
pub(crate) struct Registry {
    code: IndexMap<String, Declared>,
    dir: Option<PathBuf>,
    files: Mutex<Files>,
}

impl Registry {
    /// Collects code declarations and the static workspace files. A broken static file
    /// or a duplicate code id fails the build.
    pub(crate) fn new(
        decls: &[SubagentDeclaration],
        factories: &[Arc<dyn SubagentFactory>],
        general_purpose: bool,
        dir: Option<PathBuf>,
    ) -> Result<Self, BuildError> {
        let mut code = IndexMap::new();
        let all = decls
            .iter()
            .map(|d| (d.name.clone(), Declared::Decl(Arc::new(d.clone()))))
            .chain(factories.iter().map(|f| {
                (
                    f.declaration().name.clone(),
                    Declared::Factory(Arc::clone(f)),
                )
            }))
            .chain(general_purpose.then(|| (GENERAL_PURPOSE.to_owned(), Declared::GeneralPurpose)));
        for (id, declared) in all {
            if code.insert(id.clone(), declared).is_some() {
                return Err(BuildError::new(
                    BuildErrorKind::InvalidDeclaration,
                    format!("duplicate subagent id `{id}`"),
                ));
            }
        }
        let mut files = Files::default();
        if let Some(dir) = &dir {
            let fingerprints: HashMap<String, (SystemTime, u64)> = dir_fingerprint(dir)
                .map_err(BuildError::workspace)?
                .into_iter()
                .map(|(name, m, l)| (name, (m, l)))
                .collect();
            for parsed in scan_subagents_dir(dir).map_err(BuildError::workspace)? {
                let spec = parsed.map_err(BuildError::workspace)?;
                let (modified, len) = fingerprints
                    .get(&format!("{}.md", spec.id))
                    .copied()
                    .unwrap_or((SystemTime::UNIX_EPOCH, 0));
                files.next_version += 1;
                files.entries.insert(
                    spec.id.clone(),
                    FileEntry {
                        modified,
                        len,
                        version: files.next_version,
                        decl: Ok(Arc::new(SubagentDeclaration::from_spec(spec))),
                    },
                );
            }
        }
        Ok(Self {
            code,
            dir,
            files: Mutex::new(files),
        })
    }

    fn files(&self) -> std::sync::MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Re-scans the declarations directory, re-parsing only files whose size or mtime
    /// changed. Broken files are reported with `tracing::error!` and kept as errors.
    pub(crate) fn refresh(&self) {
        let Some(dir) = &self.dir else { return };
        let current = match dir_fingerprint(dir) {
            Ok(fp) => fp,
            Err(e) => {
                tracing::error!(error = %e, "cannot re-scan the subagents directory; keeping the last known declarations");
                return;
            }
        };
        let mut files = self.files();
        let ids: HashSet<String> = current
            .iter()
            .map(|(name, _, _)| name.trim_end_matches(".md").to_owned())
            .collect();
        files.entries.retain(|id, _| ids.contains(id));
        for (name, modified, len) in current {
            let id = name.trim_end_matches(".md").to_owned();
            if files
                .entries
                .get(&id)
                .is_some_and(|e| e.modified == modified && e.len == len)
            {
                continue;
            }
            let path = dir.join(&name);
            let decl = parse_file(&path).map(|s| Arc::new(SubagentDeclaration::from_spec(s)));
            if let Err(e) = &decl {
                tracing::error!(file = %path.display(), error = %e, "invalid subagent declaration");
            }
            files.next_version += 1;
            let version = files.next_version;
            files.entries.insert(
                id,
                FileEntry {
                    modified,
                    len,
                    version,
                    decl,
                },
            );
        }
    }

    /// The declaration with this id (code first), with its version.
    fn lookup(&self, id: &str) -> Option<Result<(Declared, u64), SpecError>> {
        if let Some(d) = self.code.get(id) {
            return Some(Ok((d.clone(), 0)));
        }
        let files = self.files();
        let entry = files.entries.get(id)?;
        Some(
            entry
                .decl
                .clone()
                .map(|d| (Declared::Decl(d), entry.version)),
        )
    }

    /// Spawnable ids with descriptions: code declarations in order, then valid files.
    pub(crate) fn listing(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .code
            .iter()
            .map(|(id, d)| (id.clone(), d.description()))
            .collect();
        for (id, entry) in &self.files().entries {
            if let (false, Ok(d)) = (self.code.contains_key(id), &entry.decl) {
                out.push((id.clone(), d.description.clone()));
            }
        }
        out
    }

    /// Every declaration known now (for build-time validation).
    fn all(&self) -> Vec<(String, Declared)> {
        let mut out: Vec<(String, Declared)> = self
            .code
            .iter()
            .map(|(id, d)| (id.clone(), d.clone()))
            .collect();
        for (id, entry) in &self.files().entries {
            if let (false, Ok(d)) = (self.code.contains_key(id), &entry.decl) {
                out.push((id.clone(), Declared::Decl(Arc::clone(d))));
            }
        }
        out
    }
}

fn parse_file(path: &Path) -> Result<DeclarationSpec, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| SpecError::io(path, &e))?;
    DeclarationSpec::parse_markdown(path, &text)
}

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
    pub(crate) hook_tool_filter: Option<HookToolFilter>,
    pub(crate) max_depth: u32,
    pub(crate) max_iters_default: u32,
    pub(crate) max_gotos: u32,
    pub(crate) tool_timeout: Duration,
    pub(crate) hook_timeout: Option<Duration>,
    pub(crate) trail: bool,
    pub(crate) record_content: bool,
    pub(crate) tool_labels: Option<Arc<HashSet<String>>>,
}

/// What a child's builder needs to bound it: set only by [`Delegation::build_child`].
#[derive(Clone)]
pub(crate) struct ChildBinding {
    pub(crate) parent: Arc<AgentInfo>,
    pub(crate) path: Arc<str>,
    pub(crate) allow: Vec<String>,
    pub(crate) callable: Arc<HashSet<String>>,
    pub(crate) policy: Option<Arc<ToolsPolicy>>,
    pub(crate) registry: Arc<Registry>,
}

/// The delegation state of one agent: its template and its built children.
pub(crate) struct Delegation {
    pub(crate) registry: Arc<Registry>,
    template: Template,
    children: Mutex<HashMap<String, (u64, Agent)>>,
}

impl Delegation {
    pub(crate) fn new(registry: Arc<Registry>, template: Template) -> Self {
        Self {
            registry,
            template,
            children: Mutex::new(HashMap::new()),
        }
    }

    /// Checks that no known declaration's allowlist names a tool this agent cannot call.
    pub(crate) fn validate(&self) -> Result<(), BuildError> {
        for (id, declared) in self.registry.all() {
            check_allowlist(&id, &declared.allowlist(), &self.template.callable)?;
        }
        Ok(())
    }

    /// The schemas to offer this step: the delegation tool's description lists the
    /// subagents known now.
    pub(crate) fn schemas(&self, base: &[ToolSchema]) -> Vec<ToolSchema> {
        self.registry.refresh();
        let listing = self.registry.listing();
        base.iter()
            .map(|s| {
                if s.name != SPAWN_TOOL {
                    return s.clone();
                }
                let mut description = SPAWN_DESCRIPTION.to_owned();
                description.push_str("\n\nAvailable subagents:");
                for (id, desc) in &listing {
                    let _ = write!(description, "\n- {id}: {desc}");
                }
                ToolSchema {
                    description,
                    ..s.clone()
                }
            })
            .collect()
    }

    /// The child for `id`, built on first use and rebuilt when its file changed.
    fn child(&self, id: &str) -> Result<Agent, ToolError> {
        let declared = match self.registry.lookup(id) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                return Err(ToolError::new(format!(
                    "subagent `{id}` cannot be spawned: its declaration is invalid: {e}"
                )));
            }
            None => {
                let ids: Vec<String> = self
                    .registry
                    .listing()
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                return Err(ToolError::new(format!(
                    "unknown subagent `{id}`; valid agent ids: [{}]",
                    ids.join(", ")
                )));
            }
        };
        let (declared, version) = declared;
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((v, agent)) = children.get(id)
            && *v == version
        {
            return Ok(agent.clone());
        }
        let agent = self
            .build_child(id, &declared)
            .map_err(|e| ToolError::new(format!("subagent `{id}` could not be built: {e}")))?;
        children.insert(id.to_owned(), (version, agent.clone()));
        Ok(agent)
    }

    /// The one function that builds every child, whatever declared it.
    fn build_child(&self, id: &str, declared: &Declared) -> Result<Agent, BuildError> {
        let t = &self.template;
        let general;
        let (decl, factory): (&SubagentDeclaration, Option<&Arc<dyn SubagentFactory>>) =
            match declared {
                Declared::Decl(d) => (d, None),
                Declared::Factory(f) => (f.declaration(), Some(f)),
                Declared::GeneralPurpose => {
                    general = SubagentDeclaration {
                        name: GENERAL_PURPOSE.to_owned(),
                        description: GENERAL_PURPOSE_DESCRIPTION.to_owned(),
                        tools: Vec::new(),
                        sys_prompt: t.sys_prompt.clone(),
                        steps: t.max_iters_default,
                        model: None,
                        temperature: None,
                        top_p: None,
                        hooks: Vec::new(),
                    };
                    (&general, None)
                }
            };
        check_allowlist(id, &decl.tools, &t.callable)?;
        let model = match &decl.model {
            None => Arc::clone(&t.model),
            Some(name) => match t.resolver.as_ref().and_then(|r| r(name)) {
                Some(m) => m,
                None => {
                    tracing::warn!(subagent = id, model = %name, "model name did not resolve; using the parent's model");
                    Arc::clone(&t.model)
                }
            },
        };
        let overlay = GenerateOptions {
            temperature: decl.temperature,
            top_p: decl.top_p,
            ..Default::default()
        };
        let mut prompt = decl.sys_prompt.clone().unwrap_or_default();
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        let _ = write!(
            prompt,
            "You are the subagent `{id}`, working on a task delegated by `{}`. \
             Complete the task and reply with its result.",
            t.info.name
        );
        let mut b = AgentBuilder::new()
            .name(id)
            .sys_prompt(prompt)
            .generate_options(GenerateOptions::merge(&overlay, &t.options))
            .max_iters(decl.steps)
            .max_gotos(t.max_gotos)
            .tool_timeout(t.tool_timeout)
            .toolkit(t.base_tools.copy());
        b.model = Some(model);
        b.hook_timeout = t.hook_timeout;
        b.hook_tool_filter = t.hook_tool_filter.clone();
        b.model_resolver = t.resolver.clone();
        b.max_depth = t.max_depth;
        b.trail = t.trail;
        b.record_content = t.record_content;
        b.tool_labels = t.tool_labels.clone();
        b.hooks.extend(decl.hooks.iter().cloned());
        if let Some(f) = factory {
            b = f.configure(b);
        }
        // Re-applied after any factory: inherited hooks first, nothing global, no
        // workspace or declarations of its own, and the bound.
        let own = std::mem::take(&mut b.hooks);
        b.hooks = t.hooks.iter().cloned().chain(own).collect();
        b.global_hooks = false;
        b.registries.clear();
        b.workspace = None;
        b.subagents.clear();
        b.factories.clear();
        b.general_purpose = false;
        b.name = id.to_owned();
        b.id = None;
        b.child = Some(ChildBinding {
            parent: Arc::clone(&t.info),
            path: Arc::from(format!("{}/{id}", t.path)),
            allow: decl.tools.clone(),
            callable: Arc::clone(&t.callable),
            policy: t.policy.clone(),
            registry: Arc::clone(&self.registry),
        });
        b.build()
    }
}

pub(crate) fn check_allowlist(
    id: &str,
    allow: &[String],
    callable: &HashSet<String>,
) -> Result<(), BuildError> {
    if let Some(tool) = allow.iter().find(|t| !callable.contains(t.as_str())) {
        return Err(BuildError::new(
            BuildErrorKind::InvalidDeclaration,
            format!(
                "subagent `{id}`: its allowlist names tool `{tool}`, which its parent cannot call"
            ),
        ));
    }
    Ok(())
}

const SPAWN_DESCRIPTION: &str = "Delegate a self-contained task to a subagent and wait for its \
     reply. Give `agent_id` (one of the subagents below) and `task` (everything the subagent \
     needs to know; it does not see this conversation). Optional `timeout_seconds` cancels the \
     subagent after that many seconds.";

/// The delegation tool offered to an agent that has subagents.
pub(crate) struct SpawnTool {
    delegation: Arc<Delegation>,
}

impl SpawnTool {
    pub(crate) fn new(delegation: Arc<Delegation>) -> Self {
        Self { delegation }
    }

    async fn spawn(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let id = input["agent_id"].as_str().unwrap_or_default().to_owned();
        let task = input["task"].as_str().unwrap_or_default().to_owned();
        if task.trim().is_empty() {
            return Err(ToolError::new("`task` must not be empty"));
        }
        let timeout = input
            .get("timeout_seconds")
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        let child = self.delegation.child(&id)?;
        let parent = ctx.run();
        let session = format!("{id}@{}", parent.session_id());
        let mut child_ctx = RunContext::new().with_session_id(&session);
        if let Some(user) = parent.user_id() {
            child_ctx = child_ctx.with_user_id(user);
        }
        let path = format!("{}/{id}", self.delegation.template.path);
        let run = async {
            match ctx.events.clone() {
                None => {
                    child
                        .run_internal(vec![Msg::user(task)], child_ctx, None)
                        .await
                }
                Some(parent_tx) => {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    let forward = async {
                        while let Some(event) = rx.recv().await {
                            let event = match event {
                                nested @ AgentEvent::Subagent { .. } => nested,
                                other => AgentEvent::Subagent {
                                    path: path.clone(),
                                    event: Box::new(other),
                                },
                            };
                            let _ = parent_tx.send(event);
                        }
                    };
                    let (result, ()) = tokio::join!(
                        child.run_internal(vec![Msg::user(task)], child_ctx, Some(tx)),
                        forward
                    );
                    result
                }
            }
        };
        let result = match timeout {
            None => run.await,
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(ToolError::new(format!(
                        "status: timeout\nagent_id: {id}\nsubagent `{id}` did not finish within {}s and was cancelled",
                        limit.as_secs()
                    )));
                }
            },
        };
        match result {
            Ok(outcome) => {
                let status = match outcome.reason {
                    StopReason::Final => "completed",
                    StopReason::MaxIterations => "max_iterations",
                    _ => "stopped",
                };
                Ok(format!(
                    "status: {status}\nagent_id: {id}\nsession_id: {session}\n\n{}",
                    outcome.reply.text()
                ))
            }
            Err(e) => Err(ToolError::new(format!(
                "status: failed\nagent_id: {id}\nsubagent `{id}` failed: {e}"
            ))),
        }
    }
}

impl Tool for SpawnTool {
    fn name(&self) -> &str {
        SPAWN_TOOL
    }

    fn description(&self) -> &str {
        SPAWN_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "description": "The subagent to delegate to."},
                "task": {"type": "string", "description": "The task, self-contained."},
                "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 3600,
                                    "description": "Cancel the subagent after this many seconds."}
            },
            "required": ["agent_id", "task"],
            "additionalProperties": false
        })
    }

    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(self.spawn(input, ctx))
    }
}

/// Loads the workspace policy (fails closed) for an agent's builder.
pub(crate) fn load_policy(workspace: &Path) -> Result<Option<Arc<ToolsPolicy>>, BuildError> {
    ToolsPolicy::load(&workspace.join("tools.json"))
        .map(|p| p.map(Arc::new))
        .map_err(BuildError::workspace)
}
