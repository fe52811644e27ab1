//! What a [`SubagentFactory`](super::SubagentFactory) may change on its child's builder,
//! checked after `configure` returns.
//!
//! # Rule
//! A factory may only narrow:
//! - **Tools, by instance.** Every tool in the child's toolkit whose name the parent can
//!   call must be the *same instance* (`Arc` identity) the parent holds under that name.
//!   A different instance under a permitted name fails the spawn; a name the parent
//!   cannot call is dropped by the tool bound as before. The same holds **wherever the
//!   tool comes from**: a tool contributed by a hook the child did not inherit (one the
//!   factory or the declaration added, a registry, the global hooks) under a name the
//!   parent can call must be the parent's own instance of that name (its toolkit's, or
//!   one its inherited hooks contribute), so a factory cannot drop `lookup` from the
//!   toolkit and bring its own `lookup` back through a hook. Hook tools are then
//!   installed at build time only if they survive the hook-tool filter, the allowlist,
//!   `tools.json` and the parent's callable names.
//! - **Limits.** `max_depth`, `max_iters` (the declaration's `steps`), `max_gotos`,
//!   `tool_timeout` and `hook_timeout` may be lowered, never raised (removing a hook
//!   timeout the parent has counts as raising). Raising one fails the spawn: nothing is
//!   clamped silently.
//! - **Hook-tool filter.** A filter the factory sets is combined with the parent's: a
//!   hook tool must pass both.
//! - **Content recording.** `record_content` can be turned off, not on.
//! - **Turn limits and stream release.** Turn limits are capped at the parent's; the
//!   stream release is the parent's (the child's deltas reach the same caller).
//! - **Identity.** The child keeps its declared id as its name, and has no workspace or
//!   subagent declarations of its own (those come from its declaration);
//!   [`BuildErrorKind::InvalidConfig`] otherwise.
//!
//! Failures are [`BuildErrorKind::Widening`]; the parent model gets them as the
//! delegation tool's error result.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{AgentBuilder, AgentConfig, HookToolFilter};
use crate::error::{BuildError, BuildErrorKind};
use crate::hook::{HookRegistry, RegisteredHook};
use crate::tool::SharedTool;

/// The limits the runtime set on a child's builder before the factory ran.
pub(crate) struct Granted {
    pub(crate) max_depth: u32,
    pub(crate) max_iters: u32,
    pub(crate) max_gotos: u32,
    pub(crate) tool_timeout: Duration,
    pub(crate) hook_timeout: Option<Duration>,
    pub(crate) hook_tool_filter: Option<HookToolFilter>,
    pub(crate) record_content: bool,
}

impl Granted {
    /// The limits of a builder as it is now.
    pub(crate) fn of(b: &AgentBuilder) -> Self {
        Self {
            max_depth: b.config.max_depth,
            max_iters: b.config.max_iters,
            max_gotos: b.config.max_gotos,
            tool_timeout: b.config.tool_timeout,
            hook_timeout: b.config.hook_timeout,
            hook_tool_filter: b.config.hook_tool_filter.clone(),
            record_content: b.config.record_content,
        }
    }
}

fn same_instance(a: &SharedTool, b: &SharedTool) -> bool {
    SharedTool::ptr_eq(a, b)
}

/// The first tool a hook the child did not inherit contributes under a name the parent
/// can call that is not the parent's own instance of that name, if any.
fn swapped_hook_tool(
    parent: &AgentConfig,
    callable: &HashSet<String>,
    b: &AgentBuilder,
) -> Option<String> {
    let inherited: HashSet<usize> = parent.hooks.iter().map(|h| h.identity).collect();
    let mut added: Vec<RegisteredHook> = b.config.hooks.clone();
    for registry in &b.config.registries {
        added.extend(registry.snapshot());
    }
    if b.config.global_hooks {
        added.extend(HookRegistry::global().snapshot());
    }
    added.retain(|h| !inherited.contains(&h.identity));
    if added.is_empty() {
        return None;
    }
    // Asked only when a new hook contributes a callable name: inherited hooks may build
    // their tools on every call.
    let mut parents_hook_tools: Option<Vec<SharedTool>> = None;
    for hook in &added {
        for tool in hook.hook.tools() {
            let name = tool.name();
            if !callable.contains(name) {
                continue; // dropped by the tool bound at build
            }
            if parent
                .toolkit
                .get(name)
                .is_some_and(|p| same_instance(&p, &tool))
            {
                continue;
            }
            let theirs = parents_hook_tools
                .get_or_insert_with(|| parent.hooks.iter().flat_map(|h| h.hook.tools()).collect());
            if !theirs
                .iter()
                .any(|p| p.name() == name && same_instance(p, &tool))
            {
                return Some(name.to_owned());
            }
        }
    }
    None
}

/// Checks (and, for the hook-tool filter and content recording, re-applies) the rule of
/// this module on the builder a factory returned for the child `id`.
///
/// `parent` is the config the child inherited (its toolkit holds the parent's own tool
/// instances); `callable` every name the parent can call.
///
/// # Errors
/// [`BuildErrorKind::Widening`] naming the first swapped tool or every raised limit;
/// [`BuildErrorKind::InvalidConfig`] when the factory renamed the child or gave it a
/// workspace or subagents of its own.
pub(crate) fn enforce(
    id: &str,
    granted: Granted,
    parent: &AgentConfig,
    callable: &HashSet<String>,
    b: &mut AgentBuilder,
) -> Result<(), BuildError> {
    let invalid = |what: &str| {
        Err(BuildError::new(
            BuildErrorKind::InvalidConfig,
            format!(
                "subagent `{id}`: its factory {what}; a child's name is its declared id, and \
                 its workspace and subagents come from its declaration"
            ),
        ))
    };
    if b.config.name != id {
        return invalid(&format!("renamed it to `{}`", b.config.name));
    }
    if b.config.workspace.is_some() {
        return invalid("gave it a workspace");
    }
    if b.config.delegation.is_some() {
        return invalid("declared subagents on it");
    }
    let parent_tools = &parent.toolkit;
    let swapped = |name: &str| {
        Err(BuildError::new(
            BuildErrorKind::Widening,
            format!(
                "subagent `{id}`: its factory put a tool instance under the name `{name}` \
                 that is not the instance its parent holds; a factory may only narrow \
                 the parent's tools, never swap them"
            ),
        ))
    };
    for name in b.config.toolkit.names() {
        if !callable.contains(&name) {
            continue; // dropped by the tool bound
        }
        let held = b.config.toolkit.get(&name);
        let parents = parent_tools.get(&name);
        let same = matches!((&held, &parents), (Some(h), Some(p)) if same_instance(h, p));
        if !same {
            return swapped(&name);
        }
    }
    if let Some(name) = swapped_hook_tool(parent, callable, b) {
        return swapped(&name);
    }

    // No hook timeout is the longest one.
    let forever = |t: Option<Duration>| t.unwrap_or(Duration::MAX);
    let shown = |d: Duration| match d {
        Duration::MAX => "none".to_owned(),
        d => format!("{d:?}"),
    };
    let counts = [
        ("max_depth", granted.max_depth, b.config.max_depth),
        ("max_iters", granted.max_iters, b.config.max_iters),
        ("max_gotos", granted.max_gotos, b.config.max_gotos),
    ];
    let times = [
        ("tool_timeout", granted.tool_timeout, b.config.tool_timeout),
        (
            "hook_timeout",
            forever(granted.hook_timeout),
            forever(b.config.hook_timeout),
        ),
    ];
    let raised: Vec<String> = counts
        .iter()
        .filter(|(_, g, s)| s > g)
        .map(|(limit, g, s)| format!("`{limit}` from {g} to {s}"))
        .chain(
            times
                .iter()
                .filter(|(_, g, s)| s > g)
                .map(|(limit, g, s)| format!("`{limit}` from {} to {}", shown(*g), shown(*s))),
        )
        .collect();
    if !raised.is_empty() {
        return Err(BuildError::new(
            BuildErrorKind::Widening,
            format!(
                "subagent `{id}`: its factory raised {}; a factory may only lower limits",
                raised.join(", ")
            ),
        ));
    }

    // A factory may lower the turn limits, never raise them; the caller that streams
    // sees the child's turns released as the parent's.
    b.config.limits = b.config.limits.at_most(&parent.limits);
    b.config.stream_release = parent.stream_release;
    b.config.record_content &= granted.record_content;
    b.config.hook_tool_filter = match (granted.hook_tool_filter, b.config.hook_tool_filter.take()) {
        (Some(parent), Some(own)) if !Arc::ptr_eq(&parent, &own) => {
            Some(Arc::new(move |name: &str| parent(name) && own(name)) as HookToolFilter)
        }
        (Some(parent), _) => Some(parent),
        (None, own) => own,
    };
    Ok(())
}
