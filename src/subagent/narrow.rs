//! What a [`SubagentFactory`](super::SubagentFactory) may change on its child's builder,
//! checked after `configure` returns.
//!
//! # Rule
//! A factory may only narrow:
//! - **Tools, by instance.** Every tool in the child's toolkit whose name the parent can
//!   call must be the *same instance* (`Arc` identity) the parent holds under that name.
//!   A different instance under a permitted name fails the spawn; a name the parent
//!   cannot call is dropped by the tool bound as before. Hook-contributed tools are not
//!   in the toolkit: they are installed at build time only if they survive the hook-tool
//!   filter, the allowlist, `tools.json` and the parent's callable names.
//! - **Limits.** `max_depth`, `max_iters` (the declaration's `steps`), `max_gotos`,
//!   `tool_timeout` and `hook_timeout` may be lowered, never raised (removing a hook
//!   timeout the parent has counts as raising). Raising one fails the spawn: nothing is
//!   clamped silently.
//! - **Hook-tool filter.** A filter the factory sets is combined with the parent's: a
//!   hook tool must pass both.
//! - **Content recording.** `record_content` can be turned off, not on.
//!
//! Failures are [`BuildErrorKind::Widening`]; the parent model gets them as the
//! delegation tool's error result.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::AgentBuilder;
use crate::agent::HookToolFilter;
use crate::error::{BuildError, BuildErrorKind};
use crate::tool::{SharedTool, Toolkit};

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
            max_depth: b.max_depth,
            max_iters: b.max_iters,
            max_gotos: b.max_gotos,
            tool_timeout: b.tool_timeout,
            hook_timeout: b.hook_timeout,
            hook_tool_filter: b.hook_tool_filter.clone(),
            record_content: b.record_content,
        }
    }
}

fn same_instance(a: &SharedTool, b: &SharedTool) -> bool {
    SharedTool::ptr_eq(a, b)
}

/// Checks (and, for the hook-tool filter and content recording, re-applies) the rule of
/// this module on the builder a factory returned for the child `id`.
///
/// `parent_tools` are the parent's own tool instances; `callable` every name the parent
/// can call.
///
/// # Errors
/// [`BuildErrorKind::Widening`] naming the first swapped tool or every raised limit.
pub(crate) fn enforce(
    id: &str,
    granted: Granted,
    parent_tools: &Toolkit,
    callable: &HashSet<String>,
    b: &mut AgentBuilder,
) -> Result<(), BuildError> {
    for name in b.toolkit.names() {
        if !callable.contains(&name) {
            continue; // dropped by the tool bound
        }
        let held = b.toolkit.get(&name);
        let parents = parent_tools.get(&name);
        let same = matches!((&held, &parents), (Some(h), Some(p)) if same_instance(h, p));
        if !same {
            return Err(BuildError::new(
                BuildErrorKind::Widening,
                format!(
                    "subagent `{id}`: its factory put a tool instance under the name `{name}` \
                     that is not the instance its parent holds; a factory may only narrow \
                     the parent's tools, never swap them"
                ),
            ));
        }
    }

    // No hook timeout is the longest one.
    let forever = |t: Option<Duration>| t.unwrap_or(Duration::MAX);
    let shown = |d: Duration| match d {
        Duration::MAX => "none".to_owned(),
        d => format!("{d:?}"),
    };
    let counts = [
        ("max_depth", granted.max_depth, b.max_depth),
        ("max_iters", granted.max_iters, b.max_iters),
        ("max_gotos", granted.max_gotos, b.max_gotos),
    ];
    let times = [
        ("tool_timeout", granted.tool_timeout, b.tool_timeout),
        (
            "hook_timeout",
            forever(granted.hook_timeout),
            forever(b.hook_timeout),
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

    b.record_content &= granted.record_content;
    b.hook_tool_filter = match (granted.hook_tool_filter, b.hook_tool_filter.take()) {
        (Some(parent), Some(own)) if !Arc::ptr_eq(&parent, &own) => {
            Some(Arc::new(move |name: &str| parent(name) && own(name)) as HookToolFilter)
        }
        (Some(parent), _) => Some(parent),
        (None, own) => own,
    };
    Ok(())
}
