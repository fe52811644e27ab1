//! `build()`: turning an [`AgentConfig`] (and, for a child, its binding) into an
//! [`Agent`]. One function assembles every agent, top-level or subagent: check the
//! settings, compute the tool bound, bound the base tools, build the hook chain and
//! install the hook tools that survive the bound, install delegation, and (top-level)
//! validate every hook against the whole tree's tools.

use std::collections::HashSet;
use std::sync::Arc;

use super::builder::AgentBuilder;
use super::config::AgentConfig;
use super::delegation::{ChildBinding, Template};
use super::sessions::Sessions;
use super::{Agent, AgentInfo, AgentInner, StreamRelease};
use crate::error::{BuildError, BuildErrorKind};
use crate::hook::{HookChain, HookRegistry, HookSite};
use crate::message::Msg;
use crate::tool::policy::{
    Bound, DELEGATION_TOOL as SPAWN_TOOL, ToolsPolicy, check_allowlist, load_policy,
};
use crate::util::new_id;

impl<S> AgentBuilder<S> {
    /// Builds with the workspace policy already loaded (`preloaded`) and MCP tools
    /// already registered in the toolkit (`mcp_ready`), as `build_async` does.
    pub(crate) fn build_with(
        self,
        preloaded: Option<Option<Arc<ToolsPolicy>>>,
        mcp_ready: bool,
    ) -> Result<Agent, BuildError> {
        // Servers declared in code were connected by `build_async` (the only way to
        // build an `AgentBuilder<McpPending>`): only a workspace's can be unconnected.
        let AgentBuilder {
            config: c, child, ..
        } = self;
        check_settings(&c)?;
        let Some(model) = c.model.clone() else {
            return Err(BuildError::new(
                BuildErrorKind::MissingModel,
                format!("agent `{}` has no model: call AgentBuilder::model", c.name),
            ));
        };
        let window = c
            .context_window
            .or_else(|| model.capabilities().context_window)
            .map(|tokens| (tokens, c.context_policy));

        // The bound: workspace policy, and for a child its allowlist and its parent's
        // tools.
        let (policy, prepared) = match &child {
            Some(b) => {
                let prepared = match &c.delegation {
                    Some(plan) => plan.prepare(None)?,
                    None => None,
                };
                check_allowlist(&c.name, &b.allow, &b.callable)?;
                (b.policy.clone(), prepared)
            }
            None => {
                let policy = match (preloaded, &c.workspace) {
                    (Some(policy), _) => policy,
                    (None, Some(ws)) => load_policy(ws)?,
                    (None, None) => None,
                };
                if !mcp_ready && let Some(p) = policy.as_deref() {
                    check_no_mcp(p)?;
                }
                let dir = c.workspace.as_ref().map(|ws| ws.join("subagents"));
                let prepared = match &c.delegation {
                    Some(plan) => plan.prepare(dir)?,
                    None => None,
                };
                (policy, prepared)
            }
        };
        let bound = Bound {
            own_policy: child.as_ref().and_then(|b| b.own_policy.as_deref()),
            allow: child
                .as_ref()
                .map(|b| b.allow.as_slice())
                .unwrap_or_default(),
            policy: policy.as_deref(),
            callable: child.as_ref().map(|b| &*b.callable),
        };

        // Base tools: filtered into a new registry, never removed, so a toolkit that
        // forbids deletion is bounded all the same.
        let base_tools = c.toolkit.filtered(|name| bound.permits(name));
        let mut toolkit = base_tools.clone();

        // Hooks.
        let mut registered = c.hooks.clone();
        for registry in &c.registries {
            registered.extend(registry.snapshot());
        }
        if c.global_hooks {
            registered.extend(HookRegistry::global().snapshot());
        }
        let chain = HookChain::build(registered, c.hook_timeout)?;

        // Hook tools: collected apart, filtered, and only the survivors installed.
        let mut hook_tool_names = Vec::new();
        for entry in chain.entries() {
            for tool in entry.hook().tools() {
                let tool_name = tool.name().to_owned();
                hook_tool_names.push(tool_name.clone());
                let filter_ok = c.hook_tool_filter.as_ref().is_none_or(|f| f(&tool_name));
                if !filter_ok || !bound.permits(&tool_name) || tool_name == SPAWN_TOOL {
                    tracing::debug!(
                        hook = &*entry.name,
                        tool = %tool_name,
                        agent = %c.name,
                        "hook-contributed tool rejected by the tool bound; not installed"
                    );
                    continue;
                }
                toolkit.register(tool).map_err(|e| {
                    BuildError::tool(
                        &format!("hook `{}` contributes tool `{tool_name}`", entry.name),
                        e,
                    )
                })?;
            }
        }

        // A top-level `tools.json` entry must name a tool this agent could have (its own,
        // its hooks', its MCP servers'), unless it is written `?name`.
        if child.is_none()
            && let (Some(p), Some(ws)) = (policy.as_deref(), &c.workspace)
        {
            let base = c.toolkit.names();
            let known = base.iter().chain(&hook_tool_names).map(String::as_str);
            p.check_entries(&ws.join("tools.json"), known)?;
        }
        let depth = child.as_ref().map_or(0, |b| b.parent.depth + 1);
        let info = Arc::new(AgentInfo {
            id: c.id.clone().unwrap_or_else(|| new_id("agent")),
            name: c.name.clone(),
            parent_id: child.as_ref().map(|b| b.parent.id.clone()),
            depth,
        });
        let path: Arc<str> = match &child {
            Some(b) => Arc::clone(&b.path),
            None => Arc::from(c.name.as_str()),
        };

        // Delegation: a top-level agent with declarations, or a child whose allowlist
        // names the delegation tool; never at the maximum depth, never against policy.
        let wants_spawn = child
            .as_ref()
            .is_none_or(|b| b.allow.iter().any(|t| t == SPAWN_TOOL));
        let delegation = match prepared {
            Some(prepared) if wants_spawn && depth < c.max_depth && bound.permits(SPAWN_TOOL) => {
                if toolkit.contains(SPAWN_TOOL) {
                    return Err(BuildError::new(
                        BuildErrorKind::Tool,
                        format!(
                            "tool name `{SPAWN_TOOL}` is reserved for delegation on agents with subagents"
                        ),
                    ));
                }
                // Tools held for subagents join what children inherit and what the
                // bound counts as this agent's, but not this agent's own toolkit.
                let held = c.subagent_tools.filtered(|name| bound.permits(name));
                let mut base_tools = base_tools;
                for name in held.names() {
                    if let Some(tool) = held.get(&name) {
                        base_tools
                            .register(tool)
                            .map_err(|e| BuildError::tool(&format!("subagent tool `{name}`"), e))?;
                    }
                }
                let mut callable: HashSet<String> = toolkit.names().into_iter().collect();
                callable.extend(held.names());
                callable.insert(SPAWN_TOOL.to_owned());
                let inherited = chain
                    .entries()
                    .iter()
                    .filter(|e| e.propagate)
                    .map(|e| e.registered.clone())
                    .collect();
                let template = Template {
                    config: c.inheritable(base_tools, inherited),
                    info: Arc::clone(&info),
                    path: Arc::clone(&path),
                    callable: Arc::new(callable),
                    policy: policy.clone(),
                    workspace: match &child {
                        Some(b) => b.workspace.clone(),
                        None => c.workspace.clone(),
                    },
                };
                let (delegation, tools) = prepared.install(template, child.is_none())?;
                for tool in tools {
                    let name = tool.name().to_owned();
                    toolkit.register(tool).map_err(|e| {
                        BuildError::tool(&format!("the delegation tool `{name}`"), e)
                    })?;
                }
                Some(delegation)
            }
            _ => None,
        };

        let tool_names: Arc<[String]> = toolkit.names().into();
        let tool_schemas = toolkit.schemas();
        if child.is_none() {
            // Subagents' tools are a subset of these (the bound): checking here covers
            // every agent of the tree.
            let tools = match &delegation {
                Some(d) => d.schemas(&tool_schemas),
                None => tool_schemas.clone(),
            };
            let site = HookSite {
                agent: &info,
                tools: &tools,
            };
            for entry in chain.entries() {
                entry
                    .hook()
                    .validate_on(&site)
                    .map_err(|e| BuildError::invalid_hook(&entry.name, e.to_string()))?;
            }
        }
        // Without a session store a user's budget holds in this agent's own.
        let user_budget = c.user_budget.map(|b| {
            let store = c.store.clone().unwrap_or_else(|| {
                Arc::new(crate::store::InMemorySessionStore::new())
                    as Arc<dyn crate::store::DynSessionStore>
            });
            (b, store)
        });
        Ok(Agent {
            inner: Arc::new(AgentInner {
                info,
                model,
                tool_schemas: tool_schemas.into(),
                toolkit,
                tool_names,
                chain,
                system: system_message(c.sys_prompt.clone()),
                sys_prompt: c.sys_prompt.map(Arc::from),
                options: c.options,
                max_iters: c.max_iters,
                max_gotos: c.max_gotos,
                tool_timeout: c.tool_timeout,
                limits: c.limits,
                hold_deltas: c.stream_release == StreamRelease::AfterAcceptance,
                sessions: Sessions::new(c.hot_sessions),
                stream_filters: c.stream_filters,
                store: c.store,
                leasing: c.leasing,
                reload: c.reload,
                double_text: c.double_text,
                max_waiting: c.max_waiting,
                delegation,
                trail: c.trail,
                record_content: c.record_content,
                tool_labels: c.tool_labels,
                #[cfg(feature = "metrics")]
                metric_keys: crate::observe::metrics_impl::Keys::default(),
                output_mode: c.output_mode,
                input_label: c.input_label,
                window,
                call_budget: c.call_budget,
                session_budget: c.session_budget,
                user_budget,
                prices: c.prices,
            }),
        })
    }
}

impl AgentBuilder {
    /// A child's builder: `config` (its parent's, narrowed by its declaration) bound by
    /// `binding`. See [`SubagentFactory`](crate::SubagentFactory) for what a factory may
    /// change on it before it is built.
    pub(crate) fn child(config: AgentConfig, binding: ChildBinding) -> Self {
        let mut b = AgentBuilder::from_config(config);
        b.child = Some(binding);
        b
    }
}

/// The system message for `prompt`: none for no or a blank prompt.
pub(super) fn system_message(prompt: Option<String>) -> Option<Arc<Msg>> {
    prompt
        .filter(|p| !p.trim().is_empty())
        .map(|p| Arc::new(Msg::system(p)))
}

/// The numeric settings `build()` refuses.
fn check_settings(c: &AgentConfig) -> Result<(), BuildError> {
    let invalid = |message: String| Err(BuildError::new(BuildErrorKind::InvalidConfig, message));
    if c.max_iters == 0 {
        return invalid("max_iters must be at least 1".to_owned());
    }
    if c.context_window == Some(0) {
        return Err(BuildError::invalid_config(
            "context_window",
            "a context window of 0 tokens fits no request; set the model's window",
        ));
    }
    for (value, what) in [
        (c.limits.max_tool_calls_per_turn, "max_tool_calls_per_turn"),
        (c.limits.tool_concurrency, "tool_concurrency"),
        (c.limits.max_tool_result_bytes, "max_tool_result_bytes"),
    ] {
        if value == 0 {
            return invalid(format!("{what} must be at least 1"));
        }
    }
    if c.tool_timeout.is_zero() {
        return invalid("tool_timeout must be greater than zero".to_owned());
    }
    if let Some(l) = &c.leasing {
        l.check()?;
        if matches!(
            c.double_text,
            super::DoubleText::Interrupt | super::DoubleText::Rollback
        ) && !l.leases.orders_and_signals()
        {
            return Err(BuildError::invalid_config(
                "double_text",
                format!(
                    "{:?} across replicas needs a leased store that carries signals \
                     (SessionLeases::orders_and_signals); this store does not",
                    c.double_text
                ),
            ));
        }
    }
    check_budgets(c)
}

/// Budgets are valid, and a cost budget can price this agent's model.
fn check_budgets(c: &AgentConfig) -> Result<(), BuildError> {
    let budgets = [
        c.call_budget.as_ref().map(|(b, _)| (b, "call_budget")),
        c.session_budget.as_ref().map(|b| (b, "session_budget")),
        c.user_budget.as_ref().map(|b| (b, "user_budget")),
    ];
    for (b, key) in budgets.into_iter().flatten() {
        b.validate(key)
            .map_err(|m| BuildError::invalid_config(key, m))?;
        if b.cost.is_some() {
            let model = c
                .options
                .model
                .clone()
                .or_else(|| c.model.as_ref().map(|m| m.name().to_owned()))
                .unwrap_or_default();
            if c.prices.as_ref().and_then(|p| p.get(&model)).is_none() {
                return Err(BuildError::invalid_config(
                    &format!("{key}.cost"),
                    format!(
                        "a cost budget needs the price of model `{model}`: add it with AgentBuilder::prices"
                    ),
                ));
            }
        }
    }
    if let Some(b) = &c.user_budget {
        b.validate_user("user_budget")
            .map_err(|m| BuildError::invalid_config("user_budget", m))?;
    }
    if let Some(p) = &c.prices {
        p.validate()
            .map_err(|m| BuildError::invalid_config("prices", m))?;
    }
    Ok(())
}

/// Fails when a workspace's `tools.json` declares MCP servers that are not connected
/// (sync `build()`, or no `mcp` feature): they are never silently ignored.
fn check_no_mcp(policy: &ToolsPolicy) -> Result<(), BuildError> {
    let ids: Vec<&str> = policy.mcp_servers.keys().map(String::as_str).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let list = ids
        .iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = if cfg!(feature = "mcp") {
        format!(
            "MCP servers {list} are declared: build the agent with `AgentBuilder::build_async()`, \
             which connects them (the synchronous `build()` cannot)"
        )
    } else {
        format!(
            "MCP servers {list} are declared, but rein was built without the `mcp` feature: \
             enable it (features = [\"mcp\"]) or remove the servers"
        )
    };
    Err(BuildError::new(BuildErrorKind::Mcp, message))
}
