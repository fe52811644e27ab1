//! A decision trail as a fixture: what a recorded run's hooks decided, stored next to
//! the recording (`rein-trail/1`), and compared with a replayed run's trail.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hook::{Decision, DecisionKind};
use crate::message::Msg;
use crate::model::replay::{FixtureError, FixtureErrorKind, Redactor, redact_text};

/// The format name and version of a trail file.
pub const TRAIL_FORMAT: &str = "rein-trail/1";

/// One decision, in the form that is the same on every run of the same conversation:
/// no timestamps, no agent ids, no runtime call ids (a call is named `call#1`,
/// `call#2`, … in order of first appearance in the trail), no value digests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TrailEntry {
    /// The agent that decided: its name, or `parent/child` for a subagent's decision.
    pub agent: String,
    /// The event (`PreActing`, …: [`EventKind::as_str`](crate::EventKind::as_str)).
    pub event: String,
    /// What was done ([`DecisionKind::as_str`], e.g. `tool_denied`).
    pub kind: String,
    /// The hook (or `runtime`) that decided.
    pub hook: String,
    /// The field changed, e.g. `tool_use.input`.
    pub field: String,
    /// The tool concerned, when the decision is about a call and the call is in the
    /// messages the trail was made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The call concerned, as `call#N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The reason given (denials, stops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For runtime decisions whose `before` is a name, not a digest: the rejection
    /// status, the cut result's length, the human decision, the effect class, the
    /// budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The revealed numeric changes (`/amount: 5000 -> 1000`, see `RevealNumbers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

impl fmt::Display for TrailEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} by {}",
            self.agent, self.event, self.kind, self.hook
        )?;
        match (&self.tool, &self.call) {
            (Some(t), Some(c)) => write!(f, " on {t} ({c})")?,
            (None, Some(c)) => write!(f, " on {c}")?,
            (Some(t), None) => write!(f, " on {t}")?,
            (None, None) => {}
        }
        write!(f, " [{}]", self.field)?;
        if let Some(d) = &self.detail {
            write!(f, " {d}")?;
        }
        if !self.changes.is_empty() {
            write!(f, " {}", self.changes.join(", "))?;
        }
        if let Some(r) = &self.reason {
            write!(f, ": {r:?}")?;
        }
        Ok(())
    }
}

/// The file form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrailFile {
    format: String,
    decisions: Vec<TrailEntry>,
}

/// A run's decisions as a fixture (see [`TrailEntry`] for what is kept), to store next
/// to a recording and compare a replayed run with.
///
/// ```
/// use rein::testing::DecisionTrail;
/// let recorded = DecisionTrail::new(&[], &[]);
/// assert!(recorded.compare(&DecisionTrail::new(&[], &[])).is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecisionTrail {
    entries: Vec<TrailEntry>,
}

impl DecisionTrail {
    /// The trail of `decisions` (e.g. `CallOutcome::decisions`, recorded with
    /// `AgentBuilder::decision_trail(true)`). `messages` are the conversation the
    /// decisions' tool calls are in (e.g. `agent.messages(&key).await`): a decision's
    /// tool is named when its call is among them; pass `&[]` to leave tools unnamed.
    pub fn new(decisions: &[Decision], messages: &[Msg]) -> Self {
        let tools: HashMap<&str, &str> = messages
            .iter()
            .flat_map(|m| m.tool_uses())
            .map(|u| (u.id.as_str(), u.name.as_str()))
            .collect();
        let mut aliases: HashMap<&str, String> = HashMap::new();
        let entries = decisions
            .iter()
            .map(|d| {
                let call = d.tool_call_id.as_deref().map(|id| {
                    let next = aliases.len() + 1;
                    aliases
                        .entry(id)
                        .or_insert_with(|| format!("call#{next}"))
                        .clone()
                });
                let tool = d
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| tools.get(id))
                    .map(|t| (*t).to_owned());
                let named = matches!(
                    d.kind,
                    DecisionKind::ToolCallRejected
                        | DecisionKind::ToolResultTruncated
                        | DecisionKind::HumanDecision
                        | DecisionKind::OutcomeUnknown
                        | DecisionKind::BudgetExhausted
                );
                TrailEntry {
                    agent: d.agent_path.clone(),
                    event: d.event.as_str().to_owned(),
                    kind: d.kind.as_str().to_owned(),
                    hook: d.hook.clone(),
                    field: d.field.to_owned(),
                    tool,
                    call,
                    reason: d.reason.clone(),
                    detail: named.then(|| d.before.clone()),
                    changes: d
                        .changes
                        .iter()
                        .map(|c| {
                            let show = |n: &Option<serde_json::Number>| {
                                n.as_ref().map_or("absent".to_owned(), ToString::to_string)
                            };
                            format!("{}: {} -> {}", c.pointer, show(&c.before), show(&c.after))
                        })
                        .collect(),
                }
            })
            .collect();
        Self { entries }
    }

    /// The same trail with its reasons, details and changes redacted (a hook may quote
    /// what it judged): redact both trails alike before comparing them.
    #[must_use]
    pub fn redacted(mut self, redactor: &dyn Redactor) -> Self {
        for e in &mut self.entries {
            for text in e
                .reason
                .iter_mut()
                .chain(e.detail.iter_mut())
                .chain(e.changes.iter_mut())
            {
                *text = redact_text(redactor, text).into_owned();
            }
        }
        self
    }

    /// The entries, in decision order.
    pub fn entries(&self) -> &[TrailEntry] {
        &self.entries
    }

    /// Whether no decision was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where the trail of the recording at `recording` is kept: next to it, its
    /// extension replaced by `trail.json` (`refund.jsonl` → `refund.trail.json`).
    pub fn path_next_to(recording: impl AsRef<Path>) -> PathBuf {
        recording.as_ref().with_extension("trail.json")
    }

    /// The trail as a `rein-trail/1` document: pretty JSON, one field per line.
    pub fn to_json(&self) -> String {
        let file = TrailFile {
            format: TRAIL_FORMAT.to_owned(),
            decisions: self.entries.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Writes [`to_json`](Self::to_json) to `path` (replacing the file).
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] of kind `Io` when the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), FixtureError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json()).map_err(|e| {
            FixtureError::new(
                FixtureErrorKind::Io,
                path,
                0,
                "",
                format!("cannot write it: {e}"),
            )
        })
    }

    /// Reads a trail file.
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] naming the file, line and field: `Io` when it cannot be read,
    /// `Syntax` when it is not JSON, `Field` when a field is missing, unknown or wrong
    /// or the format is not `rein-trail/1`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            FixtureError::new(
                FixtureErrorKind::Io,
                path,
                0,
                "",
                format!("cannot read it: {e}"),
            )
        })?;
        Self::parse(&text, path)
    }

    /// Parses trail `text`; `path` names it in errors. See [`DecisionTrail::load`].
    ///
    /// # Errors
    ///
    /// As [`DecisionTrail::load`], except for `Io`.
    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let mut de = serde_json::Deserializer::from_str(text);
        let file: TrailFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            let kind = if inner.is_data() {
                FixtureErrorKind::Field
            } else {
                FixtureErrorKind::Syntax
            };
            let field = if field == "." { String::new() } else { field };
            FixtureError::new(kind, path, inner.line(), field, inner.to_string())
        })?;
        if file.format != TRAIL_FORMAT {
            let line = text
                .lines()
                .position(|l| l.contains("\"format\""))
                .map_or(0, |i| i + 1);
            return Err(FixtureError::new(
                FixtureErrorKind::Field,
                path,
                line,
                "format",
                format!(
                    "`{}` is not a format this version reads (it reads `{TRAIL_FORMAT}`)",
                    file.format
                ),
            ));
        }
        Ok(Self {
            entries: file.decisions,
        })
    }

    /// Compares this (the recorded) trail with `actual` (a replayed run's).
    ///
    /// # Errors
    ///
    /// A [`TrailMismatch`] whose `Display` is a line diff of the two trails when they
    /// differ in any entry or in length.
    pub fn compare(&self, actual: &DecisionTrail) -> Result<(), TrailMismatch> {
        if self.entries == actual.entries {
            return Ok(());
        }
        Err(TrailMismatch {
            expected: self.entries.clone(),
            actual: actual.entries.clone(),
        })
    }
}

/// Two decision trails that differ: the recorded and the replayed entries. `Display`
/// shows a line diff (`=` in both, `-` recorded only, `+` replayed only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrailMismatch {
    /// The recorded trail's entries.
    pub expected: Vec<TrailEntry>,
    /// The replayed trail's entries.
    pub actual: Vec<TrailEntry>,
}

impl fmt::Display for TrailMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a: Vec<String> = self.expected.iter().map(ToString::to_string).collect();
        let b: Vec<String> = self.actual.iter().map(ToString::to_string).collect();
        writeln!(
            f,
            "the decision trail differs from the recording ({} recorded, {} replayed; - recorded only, + replayed only):",
            a.len(),
            b.len()
        )?;
        // Longest common subsequence, then walk it.
        let (n, m) = (a.len(), b.len());
        let mut lcs = vec![vec![0usize; m + 1]; n + 1];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i][j] = if a[i] == b[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && a[i] == b[j] {
                writeln!(f, "  = {}", a[i])?;
                i += 1;
                j += 1;
            } else if j >= m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1]) {
                writeln!(f, "  - {}", a[i])?;
                i += 1;
            } else {
                writeln!(f, "  + {}", b[j])?;
                j += 1;
            }
        }
        Ok(())
    }
}

impl std::error::Error for TrailMismatch {}
