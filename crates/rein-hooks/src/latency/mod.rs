//! [`LatencyHook`]: end-to-end, reasoning, tool, time-to-first-token and summary
//! timings with p50/p95/p99 percentiles.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use rein_core::hook::StateKey;
use rein_core::hook::{
    CallState, EventKind, FailurePolicy, HookError, HookEvent, Interest, SyncHook,
};
use rein_core::model::ModelChunk;
use series::{AgentSlot, Recorder};
pub use series::{LatencyAgent, LatencySeries, LatencySnapshot};

mod series;

/// One timed segment of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Segment {
    /// `PreCall` → `PostCall` (or the `Error` event, or cancellation): the whole call.
    E2e,
    /// `PreReasoning` → `PostReasoning`: one model call of the loop.
    Reasoning,
    /// `PreActing` → `PostActing` of one tool call, paired by tool-call id. Measured
    /// where the hook runs (priority 50), so it includes the time later `PreActing`
    /// hooks take (an approval wait) and, in a batch, the time until the batch's
    /// results are handed to `PostActing`.
    Tool,
    /// `PreCall` → the first model chunk of the call (at most once per call).
    Ttft,
    /// `PreSummary` → `PostSummary`: the summary step at the iteration limit.
    Summary,
}

impl Segment {
    /// Every segment, in loop order.
    pub const ALL: [Segment; 5] = [
        Segment::E2e,
        Segment::Ttft,
        Segment::Reasoning,
        Segment::Tool,
        Segment::Summary,
    ];

    /// The segment's name: `e2e`, `reasoning`, `tool`, `ttft`, `summary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Segment::E2e => "e2e",
            Segment::Reasoning => "reasoning",
            Segment::Tool => "tool",
            Segment::Ttft => "ttft",
            Segment::Summary => "summary",
        }
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a timed segment ended: the `outcome` label of every sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Completed normally (a tool call: a non-error result).
    Ok,
    /// The call failed (the `Error` event fired while the segment was open), or a tool
    /// returned an error result.
    Error,
    /// A tool call denied by a `PreActing` hook.
    Denied,
    /// The call's future was dropped: recorded when its run context is dropped.
    Cancelled,
}

impl Outcome {
    /// The label value: `ok`, `error`, `denied`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Denied => "denied",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which chunk ends the time-to-first-token segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TtftMode {
    /// The first content chunk of the call: text, thinking or a tool-call fragment
    /// (default).
    #[default]
    FirstChunk,
    /// The first non-empty visible text chunk; thinking and tool calls do not count.
    FirstText,
    /// Time to first token is not measured (the hook then skips chunk events).
    Off,
}

/// Settings of [`LatencyHook`] (the `latency` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyConfig {
    /// Install the hook (default `true`). A disabled hook subscribes to no event.
    pub enabled: bool,
    /// Which chunk ends TTFT (default `first_chunk`).
    pub ttft: TtftMode,
    /// How many distinct tool names get their own `tool` label (default 64); further
    /// names are recorded as `other`, so dynamic tools cannot grow the series without
    /// bound.
    pub max_tool_labels: usize,
    /// How many distinct agent names get their own label per depth (default 64);
    /// further agents are recorded as `other` at their depth (see [`LatencyAgent`]).
    /// Tool labels are capped per agent label.
    pub max_agent_labels: usize,
    /// Prefix of the exported metric names (default `rein.agent.latency`, giving
    /// `rein.agent.latency.e2e` and so on). Used with the `metrics` feature.
    pub metric_prefix: String,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ttft: TtftMode::FirstChunk,
            max_tool_labels: 64,
            max_agent_labels: 64,
            metric_prefix: "rein.agent.latency".to_owned(),
        }
    }
}

/// Open timers of one call of one agent, kept in the run context. Whatever is still
/// open when the state is dropped without finishing (the call was cancelled) is
/// recorded as [`Outcome::Cancelled`].
struct RunTimers {
    recorder: Arc<Recorder>,
    agent: AgentSlot,
    call: Option<Instant>,
    ttft_done: bool,
    reasoning: Option<Instant>,
    summary: Option<Instant>,
    /// Open tool calls by tool-call id, with the tool's name (few at a time: a scan).
    tools: Vec<(String, Instant, String)>,
    /// Tool calls without an id, paired in call order.
    anonymous: VecDeque<(Instant, String)>,
}

impl RunTimers {
    fn new(recorder: &Arc<Recorder>, agent: AgentSlot, now: Instant) -> Self {
        Self {
            recorder: Arc::clone(recorder),
            agent,
            call: Some(now),
            ttft_done: false,
            reasoning: None,
            summary: None,
            tools: Vec::new(),
            anonymous: VecDeque::new(),
        }
    }

    /// Records the call and every open segment with `outcome`; leaves nothing open.
    fn close_all(&mut self, outcome: Outcome, now: Instant) {
        let (r, a) = (&self.recorder, &self.agent);
        if let Some(start) = self.call.take() {
            r.record(a, Segment::E2e, None, outcome, now - start);
        }
        if let Some(start) = self.reasoning.take() {
            r.record(a, Segment::Reasoning, None, outcome, now - start);
        }
        if let Some(start) = self.summary.take() {
            r.record(a, Segment::Summary, None, outcome, now - start);
        }
        for (start, name) in self
            .tools
            .drain(..)
            .map(|(_, start, name)| (start, name))
            .chain(self.anonymous.drain(..))
        {
            r.record(a, Segment::Tool, Some(&name), outcome, now - start);
        }
    }
}

impl RunTimers {
    fn is_open(&self) -> bool {
        self.call.is_some()
            || self.reasoning.is_some()
            || self.summary.is_some()
            || !self.tools.is_empty()
            || !self.anonymous.is_empty()
    }
}

impl Drop for RunTimers {
    fn drop(&mut self) {
        if self.is_open() {
            self.close_all(Outcome::Cancelled, Instant::now());
        }
    }
}

/// Times every call of the agents it is installed on. Priority **50**; on by default
/// in [`HooksConfig`](super::HooksConfig).
///
/// Segments (see [`Segment`]): end to end, each reasoning step, each tool call (paired
/// by tool-call id, so parallel calls of one tool are separate samples; calls without
/// an id pair in call order), time to first token (once per call, on the first model
/// chunk; see [`TtftMode`]) and the summary step. Every sample carries an
/// [`Outcome`] label: a failed call records its end-to-end time (and any segment it
/// interrupted) as `error` instead of dropping it; a dropped call's future records
/// `cancelled` when its run context is dropped.
///
/// **Per agent.** A hook installed on an agent also runs in the subagents it
/// delegates to (inherited hooks), and every sample is labelled with the agent that
/// made it: its name and depth ([`LatencyAgent`]). So one user call that delegates
/// once gives one `e2e` sample at depth 0 (the whole call, the child's time
/// included) and one at depth 1 (the child's own call). The views:
/// - [`snapshot`](LatencyHook::snapshot): **top-level only** (depth 0) — what the
///   agent's callers experience; use it for user-facing latency;
/// - [`snapshot_agent`](LatencyHook::snapshot_agent): one agent label;
///   [`agents`](LatencyHook::agents) lists the labels;
/// - [`snapshot_all`](LatencyHook::snapshot_all): every agent merged (counts agent
///   calls, not user calls).
///
/// Percentiles come from HDR histograms (two significant digits). With the `metrics`
/// cargo feature every sample is also recorded as a `metrics` histogram named
/// `{metric_prefix}.{segment}` (seconds) with labels `outcome`, `agent`, `depth` and,
/// for tools, `tool`, so any exporter works (filter on `depth="0"` for the top-level
/// view). Every sample is also a `debug` event on the `rein::latency` tracing target,
/// with the same fields.
///
/// Recording costs no allocation and no string comparison per event once a series
/// exists: the agent's series is resolved once per call (on `PreCall`) and samples
/// are recorded by index.
///
/// Per-call state lives in the run context ([`RunContext::extensions`](rein_core::RunContext::extensions)),
/// keyed by this hook instance and the agent id, and is removed on `PostCall` and
/// `Error`: the hook itself holds only the histograms, however many calls fail or are
/// cancelled. The hook never fails a call (failure policy
/// [`Ignore`](FailurePolicy::Ignore)).
pub struct LatencyHook {
    id: StateKey,
    config: LatencyConfig,
    recorder: Arc<Recorder>,
}

impl fmt::Debug for LatencyHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for LatencyHook {
    fn default() -> Self {
        Self::new(LatencyConfig::default())
    }
}

impl LatencyHook {
    /// A hook with these settings.
    pub fn new(config: LatencyConfig) -> Self {
        Self {
            id: StateKey::new(),
            recorder: Arc::new(Recorder::new(
                config.metric_prefix.clone(),
                config.max_tool_labels,
                config.max_agent_labels,
            )),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LatencyConfig {
        &self.config
    }

    /// The **top-level view**: percentiles of the samples of top-level agents (depth
    /// 0) only, recorded since the last [`reset`](Self::reset). Its `e2e` series is
    /// what callers of the agent experience, one sample per user call, however many
    /// subagents the call delegated to (their calls are timed separately: see
    /// [`snapshot_agent`](Self::snapshot_agent) and [`snapshot_all`](Self::snapshot_all)).
    /// A hook installed only on subagents has an empty top-level view.
    pub fn snapshot(&self) -> LatencySnapshot {
        self.recorder.snapshot(|a| a.depth == 0)
    }

    /// Percentiles of the samples of one agent label (name and depth; see
    /// [`agents`](Self::agents)). Empty for a label with no samples.
    pub fn snapshot_agent(&self, name: &str, depth: u32) -> LatencySnapshot {
        self.recorder
            .snapshot(|a| a.depth == depth && a.name == name)
    }

    /// Percentiles of every sample of every agent, merged: a delegated call counts
    /// once for the parent and once for each subagent call it made (the `e2e` count
    /// is then the number of agent calls, not of user calls).
    pub fn snapshot_all(&self) -> LatencySnapshot {
        self.recorder.snapshot(|_| true)
    }

    /// The agent labels that have samples, ordered by depth, then name.
    pub fn agents(&self) -> Vec<LatencyAgent> {
        self.recorder.agents()
    }

    /// Forgets every sample and tool label.
    pub fn reset(&self) {
        self.recorder.reset();
    }

    fn open(&self, meta: CallState<'_>, f: impl FnOnce(&mut RunTimers)) {
        meta.update::<RunTimers, _>(self.id, f);
    }
}

impl SyncHook for LatencyHook {
    fn name(&self) -> &str {
        "LatencyHook"
    }

    fn priority(&self) -> i32 {
        50
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled {
            return Interest::NONE;
        }
        let base = Interest::of([
            EventKind::PreCall,
            EventKind::PreReasoning,
            EventKind::PostReasoning,
            EventKind::PreActing,
            EventKind::PostActing,
            EventKind::PreSummary,
            EventKind::PostSummary,
            EventKind::PostCall,
            EventKind::Error,
        ]);
        match self.config.ttft {
            TtftMode::Off => base,
            _ => base.with(EventKind::ReasoningChunk),
        }
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        // The event's shared timestamp: one clock read per event, however many hooks
        // look at it, and none for chunks after the first token.
        let event: &HookEvent = event;
        let meta = event.state();
        let info = event.agent();
        let r = &self.recorder;
        match event {
            HookEvent::PreCall(e) => {
                // The agent's series is resolved once per call; every later sample of
                // the call records by index.
                let timers = RunTimers::new(r, r.slot(&info.name, info.depth), e.timestamp());
                // A context reused for a new call: the old state (if any) is dropped
                // outside the lock and records its open segments as cancelled.
                let _old = meta.replace(self.id, timers);
            }
            HookEvent::ReasoningChunk(e) => {
                let counts = match (self.config.ttft, e.chunk()) {
                    (TtftMode::Off, _) => false,
                    (TtftMode::FirstText, ModelChunk::Text(t)) => !t.is_empty(),
                    (TtftMode::FirstText, _) => false,
                    (
                        _,
                        ModelChunk::Text(_) | ModelChunk::Thinking(_) | ModelChunk::ToolCall { .. },
                    ) => true,
                    _ => false,
                };
                if counts {
                    self.open(meta, |t| {
                        if !t.ttft_done {
                            t.ttft_done = true;
                            if let Some(start) = t.call {
                                let elapsed = e.timestamp() - start;
                                r.record(&t.agent, Segment::Ttft, None, Outcome::Ok, elapsed);
                            }
                        }
                    });
                }
            }
            HookEvent::PreReasoning(e) => {
                self.open(meta, |t| t.reasoning = Some(e.timestamp()));
            }
            HookEvent::PostReasoning(e) => self.open(meta, |t| {
                if let Some(start) = t.reasoning.take() {
                    let elapsed = e.timestamp() - start;
                    r.record(&t.agent, Segment::Reasoning, None, Outcome::Ok, elapsed);
                }
            }),
            HookEvent::PreSummary(e) => self.open(meta, |t| t.summary = Some(e.timestamp())),
            HookEvent::PostSummary(e) => self.open(meta, |t| {
                if let Some(start) = t.summary.take() {
                    let elapsed = e.timestamp() - start;
                    r.record(&t.agent, Segment::Summary, None, Outcome::Ok, elapsed);
                }
            }),
            HookEvent::PreActing(e) => {
                let tool_use = e.tool_use();
                self.open(meta, |t| {
                    let now = e.timestamp();
                    if tool_use.id.is_empty() {
                        t.anonymous.push_back((now, tool_use.name.clone()));
                    } else {
                        t.tools
                            .push((tool_use.id.clone(), now, tool_use.name.clone()));
                    }
                });
            }
            HookEvent::PostActing(e) => {
                let outcome = if e.was_denied() {
                    Outcome::Denied
                } else if e.tool_result().is_error {
                    Outcome::Error
                } else {
                    Outcome::Ok
                };
                let id = e.tool_use().id.as_str();
                self.open(meta, |t| {
                    let started = if id.is_empty() {
                        t.anonymous.pop_front()
                    } else {
                        t.tools.iter().position(|(open, _, _)| open == id).map(|i| {
                            let (_, start, name) = t.tools.swap_remove(i);
                            (start, name)
                        })
                    };
                    if let Some((start, name)) = started {
                        let elapsed = e.timestamp() - start;
                        r.record(&t.agent, Segment::Tool, Some(&name), outcome, elapsed);
                    }
                });
            }
            HookEvent::PostCall(e) => {
                if let Some(mut t) = meta.take::<RunTimers>(self.id) {
                    // Segments still open after a stop are not call failures.
                    t.reasoning = None;
                    t.summary = None;
                    t.tools.clear();
                    t.anonymous.clear();
                    t.close_all(Outcome::Ok, e.timestamp());
                }
            }
            HookEvent::Error(e) => {
                if let Some(mut t) = meta.take::<RunTimers>(self.id) {
                    t.close_all(Outcome::Error, e.timestamp());
                }
            }
            _ => {}
        }
        Ok(())
    }
}
