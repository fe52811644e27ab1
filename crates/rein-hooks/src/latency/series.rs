//! The histograms of a [`LatencyHook`](super::LatencyHook): series per agent label,
//! the recorder that fills them and the snapshots (views) read from them.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::{Outcome, Segment};

/// Percentiles of one series (segment, tool label, outcome) at the time of a
/// [`LatencyHook::snapshot`](super::LatencyHook::snapshot) (or one of the other views), merged over the agents of
/// the view. Durations have two significant decimal digits of
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

/// The series of one view of a [`LatencyHook`](super::LatencyHook) (top-level, one agent, or all),
/// ordered by segment, tool and outcome.
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

/// Which agent a sample belongs to: its name and depth (0 for a top-level agent, 1
/// for a subagent it delegated to, and so on). Agents beyond
/// [`LatencyConfig::max_agent_labels`](super::LatencyConfig::max_agent_labels) share the name `other` at their depth.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct LatencyAgent {
    /// The agent's name ([`AgentInfo::name`](rein_core::AgentInfo)), or `other`.
    pub name: String,
    /// The agent's depth ([`AgentInfo::depth`](rein_core::AgentInfo)).
    pub depth: u32,
}

impl LatencyAgent {
    /// The label of agent `name` at `depth`.
    pub fn new(name: impl Into<String>, depth: u32) -> Self {
        Self {
            name: name.into(),
            depth,
        }
    }
}

/// The histograms of one agent label, indexed so that recording a sample never
/// hashes or allocates once its series exists.
struct AgentSeries {
    label: LatencyAgent,
    /// The label's name, shared with the calls that record into it.
    name: Arc<str>,
    /// Samples without a tool label, by [`Segment`].
    plain: [Row; 5],
    /// Tool samples by label, in first-seen order: at most `max_tool_labels` tool
    /// names, plus `other` for the names beyond them.
    tools: Vec<(Box<str>, Row)>,
    /// The `metrics` keys of `plain`'s rows, built on first use.
    #[cfg(feature = "metrics")]
    plain_keys: [RowKeys; 5],
    /// The `metrics` keys of `tools`' rows, by the same index.
    #[cfg(feature = "metrics")]
    tool_keys: Vec<RowKeys>,
}

/// The `metrics` keys of one row, by [`Outcome`]: built once per series and
/// retained, so recording a sample clones a shared key instead of formatting and
/// allocating its name and labels.
#[cfg(feature = "metrics")]
type RowKeys = [Option<metrics::Key>; 4];

impl AgentSeries {
    /// The index of tool label `label` in `tools`, created if absent.
    fn tool_index(&mut self, label: &str) -> usize {
        match self.tools.iter().position(|(name, _)| **name == *label) {
            Some(i) => i,
            None => {
                self.tools.push((label.into(), Row::default()));
                #[cfg(feature = "metrics")]
                self.tool_keys.push(RowKeys::default());
                self.tools.len() - 1
            }
        }
    }

    /// Every row with its segment and tool label.
    fn rows(&self) -> impl Iterator<Item = (Segment, Option<&str>, &Row)> {
        Segment::ALL
            .iter()
            .map(|&s| (s, None, &self.plain[s as usize]))
            .chain(
                self.tools
                    .iter()
                    .map(|(name, row)| (Segment::Tool, Some(&**name), row)),
            )
    }
}

/// Every agent label a hook has seen, in first-seen order. Labels are never removed
/// (a [`LatencyHook::reset`](super::LatencyHook::reset) clears their samples), so an index stays valid for the
/// hook's lifetime.
#[derive(Default)]
pub(super) struct Series {
    agents: Vec<AgentSeries>,
}

/// An agent's series, resolved once per call: every sample of the call is recorded
/// by index, and the name is shared (no allocation, no string comparison per event).
#[derive(Clone)]
pub(super) struct AgentSlot {
    index: usize,
    name: Arc<str>,
    depth: u32,
}

/// The hook's aggregate: histograms only, no per-call state.
pub(super) struct Recorder {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    prefix: String,
    max_tool_labels: usize,
    max_agent_labels: usize,
    series: Mutex<Series>,
}

impl Recorder {
    pub(super) fn new(prefix: String, max_tool_labels: usize, max_agent_labels: usize) -> Self {
        Self {
            prefix,
            max_tool_labels,
            max_agent_labels,
            series: Mutex::new(Series::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The series of agent `name` at `depth` (`other` at `depth` beyond the cap),
    /// created if absent.
    pub(super) fn slot(&self, name: &str, depth: u32) -> AgentSlot {
        let mut series = self.lock();
        let find = |s: &Series, n: &str| {
            s.agents
                .iter()
                .position(|a| a.label.depth == depth && a.label.name == n)
        };
        let named = || {
            series
                .agents
                .iter()
                .filter(|a| a.label.name != "other")
                .count()
        };
        let label = match find(&series, name) {
            Some(_) => name,
            None if named() < self.max_agent_labels => name,
            None => "other",
        };
        let index = match find(&series, label) {
            Some(i) => i,
            None => {
                series.agents.push(AgentSeries {
                    label: LatencyAgent::new(label, depth),
                    name: Arc::from(label),
                    plain: Default::default(),
                    tools: Vec::new(),
                    #[cfg(feature = "metrics")]
                    plain_keys: Default::default(),
                    #[cfg(feature = "metrics")]
                    tool_keys: Vec::new(),
                });
                series.agents.len() - 1
            }
        };
        AgentSlot {
            index,
            name: Arc::clone(&series.agents[index].name),
            depth,
        }
    }

    pub(super) fn record(
        &self,
        agent: &AgentSlot,
        segment: Segment,
        tool: Option<&str>,
        outcome: Outcome,
        elapsed: Duration,
    ) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        #[cfg(feature = "metrics")]
        let key;
        let label = {
            let mut guard = self.lock();
            let Some(series) = guard.agents.get_mut(agent.index) else {
                return;
            };
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
            let tool_index = label.map(|l| series.tool_index(l));
            #[cfg(feature = "metrics")]
            {
                let keys = match tool_index {
                    None => &mut series.plain_keys[segment as usize],
                    Some(i) => &mut series.tool_keys[i],
                };
                key = keys[outcome as usize]
                    .get_or_insert_with(|| self.metric_key(agent, segment, label, outcome))
                    .clone();
            }
            let row = match tool_index {
                None => &mut series.plain[segment as usize],
                Some(i) => &mut series.tools[i].1,
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
            agent = &*agent.name,
            depth = agent.depth,
            segment = segment.as_str(),
            tool = label,
            outcome = outcome.as_str(),
            micros,
            "latency sample"
        );
        #[cfg(feature = "metrics")]
        {
            static METADATA: metrics::Metadata<'static> =
                metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
            metrics::with_recorder(|recorder| {
                recorder
                    .register_histogram(&key, &METADATA)
                    .record(elapsed.as_secs_f64());
            });
        }
    }

    /// The `metrics` key of a series: `{prefix}.{segment}` with labels `outcome`,
    /// `agent`, `depth` and (tools only) `tool`, retained (cheap to clone).
    #[cfg(feature = "metrics")]
    fn metric_key(
        &self,
        agent: &AgentSlot,
        segment: Segment,
        tool: Option<&str>,
        outcome: Outcome,
    ) -> metrics::Key {
        let mut labels = vec![
            metrics::Label::new("outcome", outcome.as_str()),
            metrics::Label::new("agent", agent.name.to_string()),
            metrics::Label::new("depth", agent.depth.to_string()),
        ];
        if let Some(t) = tool {
            labels.push(metrics::Label::new("tool", t.to_owned()));
        }
        metrics::Key::from_parts(format!("{}.{}", self.prefix, segment.as_str()), labels)
            .to_retained()
    }

    /// The samples of every agent `keep` accepts, merged per (segment, tool,
    /// outcome).
    pub(super) fn snapshot(&self, keep: impl Fn(&LatencyAgent) -> bool) -> LatencySnapshot {
        let series = self.lock();
        let mut merged: Vec<(Segment, Option<&str>, Outcome, Histogram<u64>)> = Vec::new();
        for agent in series.agents.iter().filter(|a| keep(&a.label)) {
            for (segment, tool, row) in agent.rows() {
                for outcome in OUTCOMES {
                    let Some(h) = row[outcome as usize].as_ref() else {
                        continue;
                    };
                    let same = |m: &&mut (Segment, Option<&str>, Outcome, Histogram<u64>)| {
                        m.0 == segment && m.1 == tool && m.2 == outcome
                    };
                    match merged.iter_mut().find(same) {
                        // Auto-resizing histograms take any value of another.
                        Some(m) => {
                            if m.3.add(h).is_err() {
                                tracing::warn!("latency histograms could not be merged");
                            }
                        }
                        None => merged.push((segment, tool, outcome, h.clone())),
                    }
                }
            }
        }
        let us = Duration::from_micros;
        let mut out: Vec<LatencySeries> = merged
            .into_iter()
            .map(|(segment, tool, outcome, h)| LatencySeries {
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
            .collect();
        // Ordered by segment, tool label (none first), outcome.
        out.sort_by(|a, b| (a.segment, &a.tool, a.outcome).cmp(&(b.segment, &b.tool, b.outcome)));
        LatencySnapshot { series: out }
    }

    /// The labels of the agents with at least one sample, ordered by depth, then name.
    pub(super) fn agents(&self) -> Vec<LatencyAgent> {
        let series = self.lock();
        let mut out: Vec<LatencyAgent> = series
            .agents
            .iter()
            .filter(|a| a.rows().any(|(_, _, row)| row.iter().any(Option::is_some)))
            .map(|a| a.label.clone())
            .collect();
        out.sort_by(|a, b| (a.depth, &a.name).cmp(&(b.depth, &b.name)));
        out
    }

    /// Forgets every sample and tool label; agent labels (and their indexes) stay.
    pub(super) fn reset(&self) {
        for agent in &mut self.lock().agents {
            agent.plain = Default::default();
            agent.tools.clear();
            #[cfg(feature = "metrics")]
            agent.tool_keys.clear();
        }
    }
}

/// Every outcome, in label order.
const OUTCOMES: [Outcome; 4] = [
    Outcome::Ok,
    Outcome::Error,
    Outcome::Denied,
    Outcome::Cancelled,
];
