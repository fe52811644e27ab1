//! The loop's limits as one value: what a call may make the runtime do.

use std::time::Duration;

use super::builder::AgentBuilder;

/// Every limit of an agent's loop, as one value: share it between agents, keep it in your
/// configuration, read it back from a builder ([`AgentBuilder::current_limits`]) and set
/// it with [`AgentBuilder::limits`]. Each field is also a builder method of the same name
/// (`AgentBuilder::max_iters`, …), which documents it in full; the defaults below are the
/// builder's.
///
/// `#[non_exhaustive]`: start from [`LoopLimits::default`] and set fields (or chain the
/// setters), so a limit added later does not break your code.
///
/// ```
/// use std::time::Duration;
/// use rein::agent::LoopLimits;
/// use rein::*;
///
/// let strict = LoopLimits::default()
///     .max_iters(4)
///     .max_tool_calls_per_turn(8)
///     .tool_timeout(Duration::from_secs(20));
/// let builder = Agent::builder()
///     .model(ScriptedModel::new([ScriptedTurn::text("ok")]))
///     .limits(strict);
/// assert_eq!(builder.current_limits(), strict);
/// ```
///
/// Invalid values (a zero step limit, a zero timeout) are not refused here but by
/// `build()`, with a [`BuildErrorKind::InvalidConfig`](crate::BuildErrorKind) naming the
/// setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoopLimits {
    /// Reasoning steps per call before the summary step (default 10).
    pub max_iters: u32,
    /// Consecutive `goto_reasoning` redos (default 3).
    pub max_gotos: u32,
    /// Tool calls of one model turn that run; the rest are refused before any hook
    /// (default 64).
    pub max_tool_calls_per_turn: usize,
    /// Concurrency-safe tool calls of one turn running at the same time (default 16).
    pub tool_concurrency: usize,
    /// Largest tool result, in bytes, that reaches memory and the model (default 1 MiB).
    pub max_tool_result_bytes: usize,
    /// One tool call's timeout unless the tool sets its own (default 300 s).
    pub tool_timeout: Duration,
    /// One hook invocation's timeout unless the hook sets its own (default none).
    pub hook_timeout: Option<Duration>,
    /// Delegation depth: an agent at this depth gets no delegation tool (default 3).
    pub max_depth: u32,
}

impl Default for LoopLimits {
    /// The builder's defaults.
    fn default() -> Self {
        AgentBuilder::new().current_limits()
    }
}

impl LoopLimits {
    /// Sets [`LoopLimits::max_iters`].
    pub fn max_iters(mut self, n: u32) -> Self {
        self.max_iters = n;
        self
    }

    /// Sets [`LoopLimits::max_gotos`].
    pub fn max_gotos(mut self, n: u32) -> Self {
        self.max_gotos = n;
        self
    }

    /// Sets [`LoopLimits::max_tool_calls_per_turn`].
    pub fn max_tool_calls_per_turn(mut self, n: usize) -> Self {
        self.max_tool_calls_per_turn = n;
        self
    }

    /// Sets [`LoopLimits::tool_concurrency`].
    pub fn tool_concurrency(mut self, n: usize) -> Self {
        self.tool_concurrency = n;
        self
    }

    /// Sets [`LoopLimits::max_tool_result_bytes`].
    pub fn max_tool_result_bytes(mut self, n: usize) -> Self {
        self.max_tool_result_bytes = n;
        self
    }

    /// Sets [`LoopLimits::tool_timeout`].
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.tool_timeout = d;
        self
    }

    /// Sets [`LoopLimits::hook_timeout`] (`None`: no timeout).
    pub fn hook_timeout(mut self, d: Option<Duration>) -> Self {
        self.hook_timeout = d;
        self
    }

    /// Sets [`LoopLimits::max_depth`].
    pub fn max_depth(mut self, n: u32) -> Self {
        self.max_depth = n;
        self
    }
}

impl<S> AgentBuilder<S> {
    /// Sets every limit of the loop at once (see [`LoopLimits`]); the same as calling each
    /// limit's own builder method.
    pub fn limits(mut self, limits: LoopLimits) -> Self {
        let c = &mut self.config;
        c.max_iters = limits.max_iters;
        c.max_gotos = limits.max_gotos;
        c.limits.max_tool_calls_per_turn = limits.max_tool_calls_per_turn;
        c.limits.tool_concurrency = limits.tool_concurrency;
        c.limits.max_tool_result_bytes = limits.max_tool_result_bytes;
        c.tool_timeout = limits.tool_timeout;
        c.hook_timeout = limits.hook_timeout;
        c.max_depth = limits.max_depth;
        self
    }

    /// The limits this builder would build an agent with (see [`LoopLimits`]).
    pub fn current_limits(&self) -> LoopLimits {
        let c = &self.config;
        LoopLimits {
            max_iters: c.max_iters,
            max_gotos: c.max_gotos,
            max_tool_calls_per_turn: c.limits.max_tool_calls_per_turn,
            tool_concurrency: c.limits.tool_concurrency,
            max_tool_result_bytes: c.limits.max_tool_result_bytes,
            tool_timeout: c.tool_timeout,
            hook_timeout: c.hook_timeout,
            max_depth: c.max_depth,
        }
    }
}
