//! [`LatencyHook`]: end-to-end, reasoning, tool, time-to-first-token and summary
//! timings with p50/p95/p99 percentiles.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::state::{RunStates, next_instance_id};
use crate::hook::{EventKind, FailurePolicy, HookError, HookEvent, Interest, SyncHook};
use crate::model::ModelChunk;

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
            metric_prefix: "rein.agent.latency".to_owned(),
        }
    }
}

/// Percentiles of one series (segment, tool label, outcome) at the time of a
/// [`LatencyHook::snapshot`]. Durations have two significant decimal digits of
/// precision (HDR histogram, microsecond unit).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencySeries {
    /// The segment.
    pub segment: Segment,
    /// The tool label, for [`Segment::Tool`] (`other` beyond the label cap).
    pub tool: Option<String>,
    /// The outcome label.
    pub outcome: Outcome,
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min: Duration,
    /// Largest sample.
    pub max: Duration,
    /// Arithmetic mean.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

/// Every series a [`LatencyHook`] recorded, ordered by segment, tool and outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencySnapshot {
    series: Vec<LatencySeries>,
}

impl LatencySnapshot {
    /// All series.
    pub fn series(&self) -> &[LatencySeries] {
        &self.series
    }

    /// The series of `segment` with this tool label (`None` except for tools) and
    /// outcome.
    pub fn get(
        &self,
        segment: Segment,
        tool: Option<&str>,
        outcome: Outcome,
    ) -> Option<&LatencySeries> {
        self.series
            .iter()
            .find(|s| s.segment == segment && s.tool.as_deref() == tool && s.outcome == outcome)
    }

    /// Samples of `segment` over every tool label and outcome.
    pub fn count(&self, segment: Segment) -> u64 {
        self.series
            .iter()
            .filter(|s| s.segment == segment)
            .map(|s| s.count)
            .sum()
    }

    /// Samples of `segment` with this outcome, over every tool label.
    pub fn count_outcome(&self, segment: Segment, outcome: Outcome) -> u64 {
        self.series
            .iter()
            .filter(|s| s.segment == segment && s.outcome == outcome)
            .map(|s| s.count)
            .sum()
    }

    /// `true` when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

impl fmt::Display for LatencySnapshot {
    /// A fixed-width table: segment, tool, outcome, count, p50, p95, p99, max (ms).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:<14} {:<9} {:>5} {:>9} {:>9} {:>9} {:>9}",
            "segment", "tool", "outcome", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"
        )?;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        for s in &self.series {
            writeln!(
                f,
                "{:<10} {:<14} {:<9} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                s.segment.as_str(),
                s.tool.as_deref().unwrap_or("-"),
                s.outcome.as_str(),
                s.count,
                ms(s.p50),
                ms(s.p95),
                ms(s.p99),
                ms(s.max),
            )?;
        }
        Ok(())
    }
}

/// One histogram per [`Outcome`], created on first sample.
type Row = [Option<Histogram<u64>>; 4];

/// Every histogram of one hook, indexed so that recording a sample never hashes or
/// allocates once its series exists.
#[derive(Default)]
struct Series {
    /// Samples without a tool label, by [`Segment`].
    plain: [Row; 5],
    /// Tool samples by label, in first-seen order: at most `max_tool_labels` tool
    /// names, plus `other` for the names beyond them.
    tools: Vec<(Box<str>, Row)>,
}

impl Series {
    /// The row of tool label `label`, created if absent.
    fn tool_row(&mut self, label: &str) -> &mut Row {
        let i = match self.tools.iter().position(|(name, _)| **name == *label) {
            Some(i) => i,
            None => {
                self.tools.push((label.into(), Row::default()));
                self.tools.len() - 1
            }
        };
        &mut self.tools[i].1
    }
}

/// The hook's aggregate: histograms only, no per-call state.
struct Recorder {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    prefix: String,
    max_tool_labels: usize,
    series: Mutex<Series>,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, segment: Segment, tool: Option<&str>, outcome: Outcome, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let label = {
            let mut guard = self.lock();
            let series = &mut *guard;
            let label = tool.map(|t| {
                let known = series.tools.iter().any(|(name, _)| **name == *t);
                // The overflow label "other" is not counted as a tool name.
                let named = || series.tools.iter().filter(|(n, _)| &**n != "other").count();
                if known || named() < self.max_tool_labels {
                    t
                } else {
                    "other"
                }
            });
            let row = match label {
                None => &mut series.plain[segment as usize],
                Some(l) => series.tool_row(l),
            };
            let slot = &mut row[outcome as usize];
            if slot.is_none() {
                match Histogram::<u64>::new(2) {
                    Ok(h) => *slot = Some(h),
                    Err(e) => {
                        tracing::warn!(error = %e, "latency histogram could not be created");
                        return;
                    }
                }
            }
            if let Some(h) = slot {
                // Auto-resizing histograms grow to fit; saturate if growing fails.
                if h.record(micros).is_err() {
                    h.saturating_record(micros);
                }
            }
            label
        };
        tracing::debug!(
            target: "rein::latency",
            segment = segment.as_str(),
            tool = label,
            outcome = outcome.as_str(),
            micros,
            "latency sample"
        );
        #[cfg(feature = "metrics")]
        {
            let mut labels = vec![metrics::Label::new("outcome", outcome.as_str())];
            if let Some(t) = label {
                labels.push(metrics::Label::new("tool", t.to_owned()));
            }
            metrics::histogram!(format!("{}.{}", self.prefix, segment.as_str()), labels)
                .record(elapsed.as_secs_f64());
        }
    }

    fn snapshot(&self) -> LatencySnapshot {
        let series = self.lock();
        let us = Duration::from_micros;
        let mut rows: Vec<(Segment, Option<&str>, &Row)> = Segment::ALL
            .iter()
            .map(|&s| (s, None, &series.plain[s as usize]))
            .collect();
        rows.extend(
            series
                .tools
                .iter()
                .map(|(name, row)| (Segment::Tool, Some(&**name), row)),
        );
        let mut out: Vec<LatencySeries> = rows
            .into_iter()
            .flat_map(|(segment, tool, row)| {
                OUTCOMES.iter().filter_map(move |&outcome| {
                    let h = row[outcome as usize].as_ref()?;
                    Some(LatencySeries {
                        segment,
                        tool: tool.map(str::to_owned),
                        outcome,
                        count: h.len(),
                        min: us(h.min()),
                        max: us(h.max()),
                        mean: Duration::try_from_secs_f64(h.mean() / 1e6).unwrap_or_default(),
                        p50: us(h.value_at_quantile(0.50)),
                        p95: us(h.value_at_quantile(0.95)),
                        p99: us(h.value_at_quantile(0.99)),
                    })
                })
            })
            .collect();
        // Ordered by segment, tool label (none first), outcome.
        out.sort_by(|a, b| (a.segment, &a.tool, a.outcome).cmp(&(b.segment, &b.tool, b.outcome)));
        LatencySnapshot { series: out }
    }
}

/// Every outcome, in label order.
const OUTCOMES: [Outcome; 4] = [
    Outcome::Ok,
    Outcome::Error,
    Outcome::Denied,
    Outcome::Cancelled,
];

/// Open timers of one call of one agent, kept in the run context. Whatever is still
/// open when the state is dropped without finishing (the call was cancelled) is
/// recorded as [`Outcome::Cancelled`].
struct RunTimers {
    recorder: Arc<Recorder>,
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
    fn new(recorder: &Arc<Recorder>, now: Instant) -> Self {
        Self {
            recorder: Arc::clone(recorder),
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
        let r = &self.recorder;
        if let Some(start) = self.call.take() {
            r.record(Segment::E2e, None, outcome, now - start);
        }
        if let Some(start) = self.reasoning.take() {
            r.record(Segment::Reasoning, None, outcome, now - start);
        }
        if let Some(start) = self.summary.take() {
            r.record(Segment::Summary, None, outcome, now - start);
        }
        for (start, name) in self
            .tools
            .drain(..)
            .map(|(_, start, name)| (start, name))
            .chain(self.anonymous.drain(..))
        {
            r.record(Segment::Tool, Some(&name), outcome, now - start);
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
/// Percentiles come from HDR histograms (two significant digits); read them with
/// [`LatencyHook::snapshot`]. With the `metrics` cargo feature every sample is also
/// recorded as a `metrics` histogram named `{metric_prefix}.{segment}` (seconds) with
/// labels `outcome` and, for tools, `tool`, so any exporter works. Every sample is
/// also a `debug` event on the `rein::latency` tracing target.
///
/// Per-call state lives in the run context ([`RunContext::extensions`](crate::RunContext::extensions)),
/// keyed by this hook instance and the agent id, and is removed on `PostCall` and
/// `Error`: the hook itself holds only the histograms, however many calls fail or are
/// cancelled. The hook never fails a call (failure policy
/// [`Ignore`](FailurePolicy::Ignore)).
pub struct LatencyHook {
    id: u64,
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
            id: next_instance_id(),
            recorder: Arc::new(Recorder {
                prefix: config.metric_prefix.clone(),
                max_tool_labels: config.max_tool_labels,
                series: Mutex::new(Series::default()),
            }),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LatencyConfig {
        &self.config
    }

    /// Percentiles of every series recorded so far (since the last [`reset`](Self::reset)).
    pub fn snapshot(&self) -> LatencySnapshot {
        self.recorder.snapshot()
    }

    /// Forgets every sample and tool label.
    pub fn reset(&self) {
        *self.recorder.lock() = Series::default();
    }

    fn open(&self, ctx: &crate::RunContext, agent: &str, f: impl FnOnce(&mut RunTimers)) {
        RunStates::<RunTimers>::update(ctx, self.id, agent, f);
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
        let ctx = event.context();
        let agent = event.agent().id.as_str();
        let r = &self.recorder;
        match event {
            HookEvent::PreCall(e) => {
                // A context reused for a new call: the old state (if any) is dropped
                // outside the lock and records its open segments as cancelled.
                let _old = RunStates::reset(ctx, self.id, agent, RunTimers::new(r, e.timestamp()));
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
                    self.open(ctx, agent, |t| {
                        if !t.ttft_done {
                            t.ttft_done = true;
                            if let Some(start) = t.call {
                                r.record(Segment::Ttft, None, Outcome::Ok, e.timestamp() - start);
                            }
                        }
                    });
                }
            }
            HookEvent::PreReasoning(e) => {
                self.open(ctx, agent, |t| t.reasoning = Some(e.timestamp()));
            }
            HookEvent::PostReasoning(e) => self.open(ctx, agent, |t| {
                if let Some(start) = t.reasoning.take() {
                    r.record(Segment::Reasoning, None, Outcome::Ok, e.timestamp() - start);
                }
            }),
            HookEvent::PreSummary(e) => self.open(ctx, agent, |t| t.summary = Some(e.timestamp())),
            HookEvent::PostSummary(e) => self.open(ctx, agent, |t| {
                if let Some(start) = t.summary.take() {
                    r.record(Segment::Summary, None, Outcome::Ok, e.timestamp() - start);
                }
            }),
            HookEvent::PreActing(e) => {
                let tool_use = e.tool_use();
                self.open(ctx, agent, |t| {
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
                self.open(ctx, agent, |t| {
                    let started = if id.is_empty() {
                        t.anonymous.pop_front()
                    } else {
                        t.tools.iter().position(|(open, _, _)| open == id).map(|i| {
                            let (_, start, name) = t.tools.swap_remove(i);
                            (start, name)
                        })
                    };
                    if let Some((start, name)) = started {
                        r.record(Segment::Tool, Some(&name), outcome, e.timestamp() - start);
                    }
                });
            }
            HookEvent::PostCall(e) => {
                if let Some(mut t) = RunStates::<RunTimers>::take(ctx, self.id, agent) {
                    // Segments still open after a stop are not call failures.
                    t.reasoning = None;
                    t.summary = None;
                    t.tools.clear();
                    t.anonymous.clear();
                    t.close_all(Outcome::Ok, e.timestamp());
                }
            }
            HookEvent::Error(e) => {
                if let Some(mut t) = RunStates::<RunTimers>::take(ctx, self.id, agent) {
                    t.close_all(Outcome::Error, e.timestamp());
                }
            }
            _ => {}
        }
        Ok(())
    }
}
