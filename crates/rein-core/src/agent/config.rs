//! One configuration for every agent of a delegation tree.
//!
//! [`AgentBuilder`](super::AgentBuilder) is a thin, type-stated wrapper around an
//! [`AgentConfig`]: every builder method sets a field of it, and `build()` turns it into
//! an [`Agent`](super::Agent). A subagent is built from the same type: its parent's
//! config, reduced by [`AgentConfig::inheritable`] to what a child inherits, then
//! narrowed by its declaration ([`AgentConfig::narrow_to`]) and, at its own `build()`,
//! bounded by its allowlist, `tools.json` and the parent's tools. There is no second
//! list of settings to keep in step: a setting added here is inherited or not in
//! exactly one place, [`AgentConfig::inheritable`].

use crate::budget::{Budget, BudgetScope, Prices};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::delegation::{DelegationPlan, DelegationStyle, HookToolFilter, ModelResolver};
use super::leasing::Leasing;
use super::{ContextPolicy, OutputMode};
use super::{Limits, StreamRelease};
use crate::hook::{HookRegistry, RegisteredHook};
use crate::model::{GenerateOptions, Model};
use crate::store::DynSessionStore;
use crate::tool::Toolkit;

/// Everything an agent is configured with, before it is built. `Clone` shares the
/// model, tool instances, hooks and store (they are `Arc`s); the lists themselves are
/// copied, so a clone can be changed without touching the original.
#[derive(Clone)]
pub(crate) struct AgentConfig {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) model: Option<Arc<dyn Model>>,
    pub(crate) toolkit: Toolkit,
    pub(crate) hooks: Vec<RegisteredHook>,
    pub(crate) registries: Vec<HookRegistry>,
    pub(crate) global_hooks: bool,
    pub(crate) max_iters: u32,
    pub(crate) max_gotos: u32,
    pub(crate) options: GenerateOptions,
    pub(crate) tool_timeout: Duration,
    pub(crate) hook_timeout: Option<Duration>,
    pub(crate) limits: Limits,
    pub(crate) stream_release: StreamRelease,
    pub(crate) store: Option<Arc<dyn DynSessionStore>>,
    pub(crate) leasing: Option<Leasing>,
    /// Never trust the cached copy of a session: load it at the start of every call
    /// (a subagent of a leased agent, whose sessions other replicas also run).
    pub(crate) reload: bool,
    pub(crate) workspace: Option<PathBuf>,
    /// What the delegation layer declared (subagents, factories, the general-purpose
    /// subagent, a workspace's `subagents/`; for a child, its tree's registry).
    pub(crate) delegation: Option<Arc<dyn DelegationPlan>>,
    pub(crate) hook_tool_filter: Option<HookToolFilter>,
    pub(crate) model_resolver: Option<ModelResolver>,
    pub(crate) max_depth: u32,
    pub(crate) trail: bool,
    pub(crate) record_content: bool,
    pub(crate) tool_labels: Option<Arc<HashSet<String>>>,
    pub(crate) hot_sessions: usize,
    /// What a call on a busy session does ([`AgentBuilder::double_text`](super::AgentBuilder::double_text)).
    pub(crate) double_text: super::DoubleText,
    /// How many calls may wait for one session.
    pub(crate) max_waiting: usize,
    /// Applied, in order, to every stream of the agent ([`AgentBuilder::stream_filter`]).
    pub(crate) stream_filters: Vec<super::StreamFilter>,
    /// Every call's budget, and whose it is (a subagent's slice names the subagent).
    pub(crate) call_budget: Option<(Budget, BudgetScope)>,
    /// The session's budget, kept with the session.
    pub(crate) session_budget: Option<Budget>,
    /// The budget of each user across its sessions, kept in the store.
    pub(crate) user_budget: Option<Budget>,
    /// What the models cost (for cost budgets).
    pub(crate) prices: Option<Arc<Prices>>,
    /// Tools held for subagents only: never offered to this agent's model, granted to
    /// a subagent whose allowlist names them.
    pub(crate) subagent_tools: Toolkit,
    /// The context window set on the builder (else the model's capabilities').
    pub(crate) context_window: Option<u32>,
    /// What happens to a request over the window.
    pub(crate) context_policy: ContextPolicy,
    /// How a structured-output call asks for its answer.
    pub(crate) output_mode: OutputMode,
    /// How delegation is offered to the model (inherited: a child that delegates
    /// offers it the same way).
    pub(crate) delegation_style: DelegationStyle,
    /// The label of unlabelled call input.
    pub(crate) input_label: crate::label::Label,
}

impl Default for AgentConfig {
    /// The defaults every builder method documents.
    fn default() -> Self {
        Self {
            id: None,
            name: "agent".to_owned(),
            sys_prompt: None,
            model: None,
            toolkit: Toolkit::new(),
            hooks: Vec::new(),
            registries: Vec::new(),
            global_hooks: true,
            max_iters: 10,
            max_gotos: 3,
            options: GenerateOptions::default(),
            tool_timeout: Duration::from_secs(300),
            hook_timeout: None,
            limits: Limits::default(),
            stream_release: StreamRelease::Immediate,
            store: None,
            leasing: None,
            reload: false,
            workspace: None,
            delegation: None,
            hook_tool_filter: None,
            model_resolver: None,
            max_depth: 3,
            trail: false,
            record_content: false,
            tool_labels: None,
            hot_sessions: super::sessions::HOT_SESSIONS,
            double_text: super::DoubleText::Enqueue,
            max_waiting: super::double_text::MAX_WAITING,
            stream_filters: Vec::new(),
            call_budget: None,
            session_budget: None,
            user_budget: None,
            prices: None,
            subagent_tools: Toolkit::new(),
            context_window: None,
            context_policy: ContextPolicy::Fail,
            output_mode: OutputMode::Auto,
            input_label: crate::label::Label::BOTTOM,
            delegation_style: DelegationStyle::default(),
        }
    }
}

/// What a subagent's declaration sets on the config it inherits.
pub(crate) struct Narrowing {
    /// The subagent id (its name).
    pub(crate) name: String,
    /// Its full system prompt.
    pub(crate) sys_prompt: String,
    /// Its model, when the declaration names one that resolves.
    pub(crate) model: Option<Arc<dyn Model>>,
    /// Options laid over the inherited ones (its temperature and top-p).
    pub(crate) options: GenerateOptions,
    /// Its reasoning steps.
    pub(crate) max_iters: u32,
    /// Its own hooks, run after the inherited ones.
    pub(crate) hooks: Vec<RegisteredHook>,
    /// Its slice of the delegating call's budget.
    pub(crate) budget: Option<Budget>,
}

impl AgentConfig {
    /// What a child of this agent starts from: `base_tools` (this agent's bounded own
    /// tools), `hooks` (its inheritable hooks, in chain order), and these settings:
    ///
    /// | inherited | not inherited |
    /// |---|---|
    /// | model, model resolver, options, system prompt (the general-purpose child's) | id, name (set by the declaration) |
    /// | max_iters (the general-purpose child's steps), max_gotos, max_depth, the session store (its sessions are `<child id>@<session>`) | leases (the parent's lease orders the tree; a leased parent's children reload every call) |
    /// | tool and hook timeouts, turn limits, stream release | hook registries and global hooks (only the inheritable hooks, passed in) |
    /// | hook-tool filter, decision trail, content recording, metric tool labels | workspace and declarations (a child's come from its binding) |
    pub(crate) fn inheritable(&self, base_tools: Toolkit, hooks: Vec<RegisteredHook>) -> Self {
        Self {
            id: None,
            name: self.name.clone(),
            sys_prompt: self.sys_prompt.clone(),
            model: self.model.clone(),
            toolkit: base_tools,
            hooks,
            registries: Vec::new(),
            global_hooks: false,
            max_iters: self.max_iters,
            max_gotos: self.max_gotos,
            options: self.options.clone(),
            tool_timeout: self.tool_timeout,
            hook_timeout: self.hook_timeout,
            limits: self.limits,
            stream_release: self.stream_release,
            // A child's conversations persist in its parent's store (under
            // `<child id>@<session>`), so a stop below the parent resumes on any
            // replica; the parent's lease orders the whole tree's calls.
            store: self.store.clone(),
            leasing: None,
            reload: self.leasing.is_some() || self.reload,
            workspace: None,
            delegation: None,
            hook_tool_filter: self.hook_tool_filter.clone(),
            model_resolver: self.model_resolver.clone(),
            max_depth: self.max_depth,
            trail: self.trail,
            record_content: self.record_content,
            tool_labels: self.tool_labels.clone(),
            hot_sessions: self.hot_sessions,
            double_text: super::DoubleText::Enqueue,
            max_waiting: self.max_waiting,
            // A child's events reach the caller through its parent's stream, filtered there.
            stream_filters: Vec::new(),
            // A child draws from its delegating call's budgets (through the run
            // context); a declaration may add a slice of its own.
            call_budget: None,
            session_budget: None,
            // The top-level call's user budget is in the chain a child draws from.
            user_budget: None,
            prices: self.prices.clone(),
            // A child gets the held tools through its parent's template, like any.
            subagent_tools: Toolkit::new(),
            // A child with a model of its own gets that model's window unless one was
            // set here.
            context_window: self.context_window,
            context_policy: self.context_policy,
            output_mode: self.output_mode,
            input_label: self.input_label,
            delegation_style: self.delegation_style,
        }
    }

    /// This (inherited) config narrowed by a subagent's declaration: its name, prompt,
    /// steps, model and option overlay; its own hooks run after the inherited ones.
    pub(crate) fn narrow_to(mut self, n: Narrowing) -> Self {
        self.name = n.name;
        self.sys_prompt = Some(n.sys_prompt);
        if let Some(model) = n.model {
            self.model = Some(model);
        }
        self.options = GenerateOptions::merge(&n.options, &self.options);
        self.max_iters = n.max_iters;
        self.hooks.extend(n.hooks);
        if let Some(b) = n.budget {
            self.call_budget = Some((b, BudgetScope::Subagent(self.name.clone())));
        }
        self
    }
}
