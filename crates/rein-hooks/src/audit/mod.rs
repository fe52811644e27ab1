//! [`AuditHook`] and the [`AuditSink`]s it writes structured [`AuditRecord`]s to.
//!
//! Split along its seams: `record` (the record and its clock), `sink` (the sink trait
//! and the memory and tracing sinks), `jsonl` (the JSON-lines file sink, its writer
//! thread and durability policy) and `pipeline` (the queue and the writer task).

mod jsonl;
mod pipeline;
mod record;
mod sink;

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::time::Instant;

pub use jsonl::{Durability, JsonlAuditSink};
pub use record::{AuditKind, AuditRecord, AuditStatus};
pub(crate) use sink::DynAuditSink;
pub use sink::{AuditSink, AuditSinkError, MemoryAuditSink, TracingAuditSink};

use super::msg_flags;
use pipeline::Pipeline;
use record::WallClock;
use rein_core::ToolUse;
use rein_core::agent::StopReason;
use rein_core::hook::StateKey;
use rein_core::hook::{EventKind, FailurePolicy, Hook, HookError, HookEvent, Interest};
use rein_pii::SensitiveDataMasker;

/// What the hook does when the audit queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum QueueFull {
    /// Wait for room (backpressure on the call; no record is lost). Default. A sink
    /// that never returns therefore stalls calls once the queue is full; a call
    /// cancelled (or a hook timeout) while waiting counts its record as dropped.
    #[default]
    Wait,
    /// Drop the record and count it in [`AuditStats::dropped`].
    Drop,
}

/// Which sink a configured audit hook writes to (when no sink is passed in
/// [`HookServices`](super::HookServices)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AuditSinkConfig {
    /// [`TracingAuditSink`] (default).
    #[default]
    Tracing,
    /// [`JsonlAuditSink`] appending to `path`, syncing per `durability`.
    Jsonl {
        /// The file to append to.
        path: PathBuf,
        /// When records are forced to stable storage (default batched, at most
        /// 1000 ms): `every_record`, `none`, or `{ batched: { max_delay_ms: N } }`.
        /// See [`Durability`].
        #[serde(default)]
        durability: Durability,
    },
}

/// Settings of [`AuditHook`] (the `audit` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Mask personal data in tool arguments (default `true`).
    pub mask_args: bool,
    /// Mask personal data in final answers and redone turns (default `true`).
    pub mask_answer: bool,
    /// Capacity of the queue between the hook and the sink (default 1024). `0`
    /// writes to the sink directly on the agent's path instead.
    pub queue_capacity: usize,
    /// What happens when the queue is full (default `wait`).
    pub on_full: QueueFull,
    /// The sink to build (default `{ "type": "tracing" }`).
    pub sink: AuditSinkConfig,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            mask_args: true,
            mask_answer: true,
            queue_capacity: 1024,
            on_full: QueueFull::Wait,
            sink: AuditSinkConfig::Tracing,
        }
    }
}

/// Delivery counters of an [`AuditHook`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditStats {
    /// Records the sink accepted.
    pub written: u64,
    /// Records lost: the sink failed (or panicked), or the queue was full with
    /// `on_full = drop`. Every loss is also logged at `error` level.
    pub dropped: u64,
}

/// Per-call audit state: when each open tool call started, why denied calls were
/// denied and how rewritten calls looked before, by tool-call id (a handful at a
/// time: scanned, not hashed).
#[derive(Default)]
struct AuditRun {
    started: Vec<(String, Instant)>,
    denials: Vec<(String, (String, Option<String>))>,
    rewrites: Vec<(String, Rewrite)>,
}

/// A call hooks rewrote: the call as the model asked for it and who changed it.
struct Rewrite {
    original: ToolUse,
    by: Vec<String>,
}

/// Removes and returns the value stored under `id`.
fn take_by_id<V>(entries: &mut Vec<(String, V)>, id: &str) -> Option<V> {
    let i = entries.iter().position(|(k, _)| k == id)?;
    Some(entries.swap_remove(i).1)
}

/// The value stored under `id`, inserted with `init` if absent.
fn entry_by_id<'a, V>(
    entries: &'a mut Vec<(String, V)>,
    id: &str,
    init: impl FnOnce() -> V,
) -> &'a mut V {
    let i = match entries.iter().position(|(k, _)| k == id) {
        Some(i) => i,
        None => {
            entries.push((id.to_owned(), init()));
            entries.len() - 1
        }
    };
    &mut entries[i].1
}

/// The status of a call the runtime refused, recognised by the exact error text the
/// runtime gives the model (see the agent's acting step); `None` for any other result.
fn refusal(tool: &str, text: &str) -> Option<AuditStatus> {
    let after = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(tool))
    };
    if after("Unknown tool `").is_some_and(|r| r.starts_with("`. Available tools: [")) {
        Some(AuditStatus::UnknownTool)
    } else if after("Invalid arguments for tool `").is_some_and(|r| r.starts_with("`: ")) {
        Some(AuditStatus::InvalidArguments)
    } else if after("Tool call `")
        .is_some_and(|r| r.starts_with("` was not executed: the model asked for "))
    {
        Some(AuditStatus::TooManyCalls)
    } else {
        None
    }
}

/// Writes an [`AuditRecord`] for every executed tool call, every denied (blocked) tool
/// call, every redone reasoning turn, every final answer and every failed call.
/// Priority **850** (after the governance hooks, before [`MaskingHook`](super::MaskingHook),
/// so it sees the raw reply and masks it itself); off by default in
/// [`HooksConfig`](super::HooksConfig).
///
/// Records carry the agent (name, id, parent, depth), the session, run and user ids,
/// and per kind: tool-call id, tool, arguments as JSON, status and duration; denial
/// reason and denying hook; the answer, stop reason and flags (such as
/// `self_correction_exhausted`); the error message and kind. Arguments are masked with
/// `mask_args`, answers with `mask_answer`, reasons and errors always.
///
/// **Rewritten calls.** When a `PreActing` hook changed a call (a tool-guard cap, an
/// approver's edit), its record holds the arguments that ran (`args`), the ones the
/// model asked for (`original_args`, masked like `args`; `original_tool` if the name
/// changed) and the hooks that changed it (`rewritten_by`). The rewriters named are
/// those that ran before this hook in a pass in which it then saw the call: with the
/// decision trail on (see [`rein_core::observe`]) every such hook, otherwise the last one
/// of each pass — which covers the built-in rewriters (tool guard at 20, approval at
/// 100) unless both change the same call. A hook after this one (priority above 850)
/// that rewrites a call is reflected in `args` and `original_args`, not in
/// `rewritten_by`.
///
/// **Refused calls.** A call the runtime refused before any hook saw it is recorded as
/// a `tool-call` with status `unknown_tool`, `invalid_arguments` or `too_many_calls`
/// (not a generic `error`), with the error the model received as `reason`.
///
/// Records are handed to a bounded queue (`queue_capacity`) drained by a background
/// task on the current tokio runtime, so a slow sink never blocks a call (with
/// `on_full = wait` a full queue applies backpressure instead of losing records). A
/// sink failure is logged and counted ([`AuditHook::stats`]); call
/// [`AuditHook::flush`] before shutting down so nothing queued is lost. The hook never
/// fails a call (failure policy [`Ignore`](FailurePolicy::Ignore)).
pub struct AuditHook {
    id: StateKey,
    config: AuditConfig,
    masker: SensitiveDataMasker,
    pipeline: Pipeline,
    clock: WallClock,
}

impl fmt::Debug for AuditHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditHook")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl AuditHook {
    /// A hook writing to `sink`, masking with `masker`. `config.sink` is ignored (it
    /// only says which sink [`HooksConfig`](super::HooksConfig) builds). Pass an
    /// `Arc<S>` to keep a handle on the sink.
    pub fn new(config: AuditConfig, masker: SensitiveDataMasker, sink: impl AuditSink) -> Self {
        Self::with_erased(config, masker, Arc::new(sink))
    }

    /// [`AuditHook::new`] with a sink already erased (see [`DynAuditSink`]).
    pub(crate) fn with_erased(
        config: AuditConfig,
        masker: SensitiveDataMasker,
        sink: Arc<dyn DynAuditSink>,
    ) -> Self {
        Self {
            id: StateKey::new(),
            pipeline: Pipeline::new(sink, config.queue_capacity, config.on_full),
            clock: WallClock::default(),
            config,
            masker,
        }
    }

    /// The settings.
    pub fn config(&self) -> &AuditConfig {
        &self.config
    }

    /// Records written and dropped so far.
    pub fn stats(&self) -> AuditStats {
        let c = self.pipeline.counters();
        AuditStats {
            written: c.written.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }

    /// Waits until every record queued so far has been handed to the sink, then
    /// flushes the sink.
    ///
    /// # Errors
    /// The sink's flush error.
    pub async fn flush(&self) -> Result<(), AuditSinkError> {
        self.pipeline.flush().await
    }

    /// Hands `record` to the queue as an event would (waiting for room when the queue
    /// is full and `on_full = wait`). For the crate's benchmarks.
    pub(crate) async fn submit(&self, record: AuditRecord) {
        if let Err(blocked) = self.pipeline.try_submit(record) {
            self.pipeline.submit_blocked(blocked).await;
        }
    }

    fn mask_text(&self, text: &str) -> String {
        self.masker.mask(text).into_owned()
    }

    fn args(&self, input: &Value) -> Value {
        if self.config.mask_args {
            mask_json(&self.masker, input)
        } else {
            input.clone()
        }
    }

    fn answer(&self, text: &str) -> String {
        if self.config.mask_answer {
            self.mask_text(text)
        } else {
            text.to_owned()
        }
    }

    /// Builds the record for an event, updating the per-call state.
    fn record_for(&self, event: &HookEvent) -> Option<AuditRecord> {
        let ctx = event.context();
        let agent = event.agent();
        let ts = || self.clock.ms_at(event.timestamp());
        match event {
            HookEvent::PreCall(_) => {
                drop(event.state().replace(self.id, AuditRun::default()));
                None
            }
            HookEvent::PreActing(e) => {
                let id = e.tool_use().id.as_str();
                let denial = e
                    .denial_reason()
                    .map(|r| (r.to_owned(), e.denied_by().map(str::to_owned)));
                let by = if e.was_rewritten() {
                    e.rewritten_by()
                } else {
                    Vec::new()
                };
                // A stop for a human with a reason: nothing of the turn runs, so no
                // `PostActing` comes for it; recorded here.
                let stopped = match (e.is_stopped_for_human(), e.stop_reason()) {
                    (true, Some(reason)) => {
                        let mut r = AuditRecord::new(AuditKind::ApprovalRequired, ts(), agent, ctx);
                        r.tool_call_id = Some(id.to_owned());
                        r.tool = Some(e.tool_use().name.clone());
                        r.args = Some(self.args(&e.tool_use().input));
                        r.reason = Some(self.mask_text(reason));
                        Some(r)
                    }
                    _ => None,
                };
                event.state().with(self.id, AuditRun::default, |run| {
                    // The hook runs again when a later hook rewrote the call: one entry
                    // per call, the first start kept.
                    match denial {
                        // A denial is final: the hook does not run again on the call.
                        Some(d) => {
                            entry_by_id(&mut run.denials, id, || d);
                        }
                        None => {
                            entry_by_id(&mut run.started, id, || e.timestamp());
                        }
                    }
                    if e.was_rewritten() {
                        let rewrite = entry_by_id(&mut run.rewrites, id, || Rewrite {
                            original: e.original_tool_use().clone(),
                            by: Vec::new(),
                        });
                        for name in by {
                            if !rewrite.by.iter().any(|b| b == name) {
                                rewrite.by.push(name.to_owned());
                            }
                        }
                    }
                });
                stopped
            }
            HookEvent::PostActing(e) => {
                let tu = e.tool_use();
                let (started, denial, rewrite) = event
                    .state()
                    .update::<AuditRun, _>(self.id, |run| {
                        (
                            take_by_id(&mut run.started, &tu.id),
                            take_by_id(&mut run.denials, &tu.id),
                            take_by_id(&mut run.rewrites, &tu.id),
                        )
                    })
                    .unwrap_or((None, None, None));
                let mut r = AuditRecord::new(
                    if e.was_denied() {
                        AuditKind::ToolDenied
                    } else {
                        AuditKind::ToolCall
                    },
                    ts(),
                    agent,
                    ctx,
                );
                r.tool_call_id = Some(tu.id.clone());
                r.tool = Some(tu.name.clone());
                r.args = Some(self.args(&tu.input));
                if let Some(rewrite) = rewrite {
                    r.original_args = Some(self.args(&rewrite.original.input));
                    if rewrite.original.name != tu.name {
                        r.original_tool = Some(rewrite.original.name);
                    }
                    r.rewritten_by = rewrite.by;
                }
                if e.was_denied() {
                    r.status = Some(AuditStatus::Denied);
                    let (reason, by) = denial.unwrap_or_else(|| (e.tool_result().text(), None));
                    r.reason = Some(self.mask_text(&reason));
                    r.denied_by = by;
                } else {
                    let result = e.tool_result();
                    let refused = if result.is_error {
                        let text = result.text();
                        refusal(&tu.name, &text).map(|status| (status, text))
                    } else {
                        None
                    };
                    r.status = Some(match (&refused, result.is_error) {
                        (Some((status, _)), _) => *status,
                        (None, true) => AuditStatus::Error,
                        (None, false) => AuditStatus::Ok,
                    });
                    if let Some((_, text)) = refused {
                        r.reason = Some(self.mask_text(&text));
                    }
                    r.duration_ms = started.map(|s| (e.timestamp() - s).as_secs_f64() * 1000.0);
                    r.stop_requested = Some(e.is_stop_requested());
                }
                if let Some(h) = e.human_decision() {
                    r.human_decision = Some(h.decision.clone());
                    r.approved_by.clone_from(&h.approver);
                    r.human_reason = h.reason.as_deref().map(|t| self.mask_text(t));
                }
                Some(r)
            }
            HookEvent::PostReasoning(e) => {
                let correction = e.goto_requested()?;
                let mut r = AuditRecord::new(AuditKind::ReasoningRedone, ts(), agent, ctx);
                let hint: Vec<String> = correction.iter().map(|m| m.text()).collect();
                if !hint.is_empty() {
                    r.reason = Some(self.mask_text(&hint.join("\n")));
                }
                r.answer = Some(self.answer(&e.message().text_cow()));
                r.flags = msg_flags(e.message());
                Some(r)
            }
            HookEvent::PostCall(e) => {
                drop(event.state().take::<AuditRun>(self.id));
                let mut r = AuditRecord::new(AuditKind::FinalAnswer, ts(), agent, ctx);
                r.answer = Some(self.answer(&e.final_message().text_cow()));
                r.stop_reason = Some(stop_reason(e.reason()).to_owned());
                r.flags = msg_flags(e.final_message());
                if let Some(Value::Array(calls)) = e
                    .final_message()
                    .metadata
                    .get(rein_core::agent::PENDING_CALLS_KEY)
                {
                    r.pending = calls
                        .iter()
                        .map(|c| {
                            serde_json::json!({
                                "id": c.get("id"), "tool": c.get("name"),
                                "agent": c.get("agent"),
                                "status": c.get("status").cloned().unwrap_or(Value::from("awaiting_approval")),
                            })
                        })
                        .collect();
                }
                Some(r)
            }
            HookEvent::Error(e) => {
                drop(event.state().take::<AuditRun>(self.id));
                let mut r = AuditRecord::new(AuditKind::Error, ts(), agent, ctx);
                r.error = Some(self.mask_text(&e.error().to_string()));
                r.error_kind = Some(format!("{:?}", e.error().kind()));
                Some(r)
            }
            _ => None,
        }
    }
}

fn stop_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Final => "final",
        StopReason::ReasoningStopped => "reasoning_stopped",
        StopReason::ActingStopped => "acting_stopped",
        StopReason::MaxIterations => "max_iterations",
        StopReason::SubagentStopped => "subagent_stopped",
        StopReason::OutcomeUnknown => "outcome_unknown",
        StopReason::BudgetExhausted => "budget_exhausted",
        StopReason::Interrupted => "interrupted",
        StopReason::RolledBack => "rolled_back",
        _ => "other",
    }
}

/// `value` with every string (and every number whose digits are sensitive) masked, and
/// every object key, at every depth (a key masked like an earlier one gets a ` #n`
/// suffix, so no entry is lost). A value with nothing to mask is cloned, not rebuilt.
pub(crate) fn mask_json(masker: &SensitiveDataMasker, value: &Value) -> Value {
    masked_json(masker, value).unwrap_or_else(|| value.clone())
}

/// A JSON number's text, formatted without allocating (`Err` past 32 bytes: an
/// arbitrary-precision number is then formatted into a `String`).
#[derive(Default)]
struct NumberText {
    buf: [u8; 32],
    len: usize,
}

impl NumberText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for NumberText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// `Some(masked copy)` when something in `value` is sensitive; `None` (nothing
/// allocated) when nothing is.
fn masked_json(masker: &SensitiveDataMasker, value: &Value) -> Option<Value> {
    match value {
        Value::String(s) => match masker.mask(s) {
            Cow::Owned(m) => Some(Value::String(m)),
            Cow::Borrowed(_) => None,
        },
        Value::Number(n) => {
            // Formatted on the stack: a number is masked far less often than read.
            let mut buf = NumberText::default();
            let owned;
            let text = if std::fmt::Write::write_fmt(&mut buf, format_args!("{n}")).is_ok() {
                buf.as_str()
            } else {
                owned = n.to_string();
                owned.as_str()
            };
            match masker.mask(text) {
                Cow::Owned(m) => Some(Value::String(m)),
                Cow::Borrowed(_) => None,
            }
        }
        Value::Array(items) => {
            let (first, masked) = items
                .iter()
                .enumerate()
                .find_map(|(i, v)| Some((i, masked_json(masker, v)?)))?;
            let mut out = Vec::with_capacity(items.len());
            out.extend(items[..first].iter().cloned());
            out.push(masked);
            out.extend(items[first + 1..].iter().map(|v| mask_json(masker, v)));
            Some(Value::Array(out))
        }
        Value::Object(map) => {
            // Keys hold personal data too (`{"alice@example.com": …}`): masked like
            // values. Two keys masked alike stay distinct entries (`***`, `*** #2`).
            let key_masked = |k: &str| match masker.mask(k) {
                Cow::Owned(m) => Some(m),
                Cow::Borrowed(_) => None,
            };
            let first = map.iter().position(|(k, v)| {
                matches!(masker.mask(k), Cow::Owned(_)) || masked_json(masker, v).is_some()
            })?;
            let mut out = Map::with_capacity(map.len());
            for (i, (k, v)) in map.iter().enumerate() {
                let (key, value) = if i < first {
                    (k.clone(), v.clone())
                } else {
                    (
                        key_masked(k).unwrap_or_else(|| k.clone()),
                        mask_json(masker, v),
                    )
                };
                let key = if out.contains_key(&key) {
                    (2..)
                        .map(|n| format!("{key} #{n}"))
                        .find(|c| !out.contains_key(c) && !map.contains_key(c))
                        .unwrap_or(key)
                } else {
                    key
                };
                out.insert(key, value);
            }
            Some(Value::Object(out))
        }
        Value::Null | Value::Bool(_) => None,
    }
}

impl Hook for AuditHook {
    fn name(&self) -> &str {
        "AuditHook"
    }

    fn priority(&self) -> i32 {
        850
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled {
            return Interest::NONE;
        }
        Interest::of([
            EventKind::PreCall,
            EventKind::PostReasoning,
            EventKind::PreActing,
            EventKind::PostActing,
            EventKind::PostCall,
            EventKind::Error,
        ])
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        // Built and handed over in a plain call, so no record lives in this future:
        // it stays small enough to be erased without allocating.
        if matches!(event, HookEvent::PreCall(_)) {
            // Whatever an earlier call left queued (it was cancelled before its last
            // record) goes to the writer now.
            self.pipeline.hand_over();
        }
        let blocked = self
            .record_for(event)
            .and_then(|record| self.pipeline.try_submit(record).err());
        if let Some(blocked) = blocked {
            // The rare waiting path (a full queue, or no runtime) is boxed for the
            // same reason.
            Box::pin(self.pipeline.submit_blocked(blocked)).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use rein_core::ToolUse;

    /// The hook future is erased inline (no allocation per event) when it fits the
    /// chain's 64-byte slot: no record may be held across its await.
    #[test]
    fn the_audit_hook_future_fits_the_inline_slot() {
        let hook = AuditHook::new(
            AuditConfig::default(),
            SensitiveDataMasker::default(),
            Arc::new(MemoryAuditSink::new()),
        );
        let harness = rein_core::testing::HookHarness::new(rein_core::hook_fn(
            Interest::NONE,
            |_: &mut HookEvent| Ok(()),
        ))
        .unwrap();
        let mut event = harness.pre_acting(ToolUse::new("1", "x", serde_json::json!({})));
        let fut = Hook::on_event(&hook, &mut event);
        assert!(
            std::mem::size_of_val(&fut) <= 64,
            "{}",
            std::mem::size_of_val(&fut)
        );
    }

    #[test]
    fn mask_json_masks_every_sensitive_leaf_and_keeps_the_rest_and_the_keys() {
        let masker = SensitiveDataMasker::default();
        let input = serde_json::json!({
            "a": 1,
            "b": {"list": ["ok", "call 13812345678", 2, {"deep": 13812345678u64}]},
            "c": "plain",
            "d": [true, null, "li.wei@example.com"],
            "z": "13812345678"
        });
        let out = mask_json(&masker, &input);
        assert_eq!(
            out,
            serde_json::json!({
                "a": 1,
                "b": {"list": ["ok", "call ***", 2, {"deep": "***"}]},
                "c": "plain",
                "d": [true, null, "***"],
                "z": "***"
            })
        );
        let clean = serde_json::json!({"a": [1, "x", {"b": false}], "c": 2.5});
        assert_eq!(mask_json(&masker, &clean), clean);
        assert!(masked_json(&masker, &clean).is_none());
    }
}
