//! [`AuditHook`] and the [`AuditSink`]s it writes structured [`AuditRecord`]s to.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::masker::SensitiveDataMasker;
use super::msg_flags;
use super::state::{RunStates, next_instance_id};
use crate::agent::{AgentInfo, RunContext, StopReason};
use crate::hook::{EventKind, FailurePolicy, Hook, HookError, HookEvent, Interest};

/// What an [`AuditRecord`] is about. Serialized as the record's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditKind {
    /// A tool call that ran (`tool-call`), with its status and duration.
    ToolCall,
    /// A tool call a `PreActing` hook denied before it ran (`tool-denied`).
    ToolDenied,
    /// A hook made the model reason again (`reasoning-redone`), e.g. a self-correction.
    ReasoningRedone,
    /// The reply of a successful call (`final-answer`).
    FinalAnswer,
    /// A failed call (`error`).
    Error,
}

impl AuditKind {
    /// The serialized name, e.g. `tool-call`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::ToolCall => "tool-call",
            AuditKind::ToolDenied => "tool-denied",
            AuditKind::ReasoningRedone => "reasoning-redone",
            AuditKind::FinalAnswer => "final-answer",
            AuditKind::Error => "error",
        }
    }
}

/// How an audited tool call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditStatus {
    /// The tool returned a result.
    Ok,
    /// The tool failed (invalid arguments, tool error, panic, timeout).
    Error,
    /// A hook denied the call; the tool did not run.
    Denied,
}

/// One audit record: who, in which call, did what. Serialized as one JSON object;
/// fields that do not apply to the record's kind are omitted.
///
/// Personal data is masked per [`AuditConfig`]: `args` with `mask_args`, `answer`
/// with `mask_answer`; `reason` and `error` always.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// The record kind (serialized as `type`).
    #[serde(rename = "type")]
    pub kind: AuditKind,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The agent's name.
    pub agent: String,
    /// The agent's id.
    pub agent_id: String,
    /// The delegating agent's id, for subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// 0 for a top-level agent.
    pub depth: u32,
    /// The session id.
    pub session_id: String,
    /// The run id of the call.
    pub run_id: String,
    /// The user id, if the call has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Tool records: the tool-call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool records: the tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Tool records: the arguments as JSON, as they ran (after guard rewrites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Tool records: how the call ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AuditStatus>,
    /// `tool-call`: milliseconds from the call's `PreActing` (as seen by the audit hook)
    /// to its `PostActing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// `tool-call`: whether a hook (before the audit hook) asked to stop the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_requested: Option<bool>,
    /// `tool-denied`: the denial reason; `reasoning-redone`: the messages the redo
    /// appended to the conversation, if any (a system-role self-correction is placed in
    /// the requests instead, and the turn carries the `self_corrected` flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `tool-denied`: the hook that denied the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_by: Option<String>,
    /// `final-answer`: the reply text; `reasoning-redone`: the text of the turn that
    /// was redone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// `final-answer`: why the loop ended (`final`, `reasoning_stopped`,
    /// `acting_stopped`, `max_iterations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// `error`: the error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `error`: the error kind (e.g. `Model`, `Hook`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// `final-answer`: flags hooks set on the reply (e.g. `self_correction_exhausted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// Milliseconds since the Unix epoch, now.
fn wall_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Turns event timestamps (monotonic, already read once per event for every hook)
/// into wall-clock milliseconds without reading the wall clock per record: a
/// (wall, monotonic) anchor, re-read when an event is more than a second away from it
/// so wall-clock adjustments are followed within a second.
#[derive(Default)]
struct WallClock {
    anchor: Mutex<Option<(u64, Instant)>>,
}

impl WallClock {
    fn ms_at(&self, at: Instant) -> u64 {
        let mut anchor = self.anchor.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((wall, mono)) = *anchor {
            let (ahead, behind) = (
                at.saturating_duration_since(mono),
                mono.saturating_duration_since(at),
            );
            if ahead < Duration::from_secs(1) && behind < Duration::from_secs(1) {
                let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                return wall.saturating_add(ms(ahead)).saturating_sub(ms(behind));
            }
        }
        let wall = wall_ms_now();
        *anchor = Some((wall, at));
        wall
    }
}

impl AuditRecord {
    fn new(kind: AuditKind, ts_ms: u64, agent: &AgentInfo, ctx: &RunContext) -> Self {
        Self {
            kind,
            ts_ms,
            agent: agent.name.clone(),
            agent_id: agent.id.clone(),
            parent_id: agent.parent_id.clone(),
            depth: agent.depth,
            session_id: ctx.session_id().to_owned(),
            run_id: ctx.run_id().to_owned(),
            user_id: ctx.user_id().map(str::to_owned),
            tool_call_id: None,
            tool: None,
            args: None,
            status: None,
            duration_ms: None,
            stop_requested: None,
            reason: None,
            denied_by: None,
            answer: None,
            stop_reason: None,
            error: None,
            error_kind: None,
            flags: Vec::new(),
        }
    }

    /// The record as one line of JSON (newlines and control characters escaped).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"type\":\"{}\",\"serialization_error\":{}}}",
                self.kind.as_str(),
                Value::String(e.to_string())
            )
        })
    }
}

/// A sink failed to write or flush a record.
#[derive(Debug, thiserror::Error)]
#[error("audit sink failed: {message}")]
pub struct AuditSinkError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl AuditSinkError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<std::io::Error> for AuditSinkError {
    fn from(e: std::io::Error) -> Self {
        Self {
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}

/// Where audit records go. Object-safe: the hook holds an `Arc<dyn AuditSink>`.
///
/// The [`AuditHook`] never calls a sink on the agent's path: records go through a
/// bounded queue to a background task that calls [`write`](AuditSink::write) one
/// record at a time, in order. A failed write is logged and counted in
/// [`AuditStats::dropped`]; it never fails the call.
pub trait AuditSink: Send + Sync + 'static {
    /// Writes one record. The sink owns it: keep it (no copy) or drop it once written.
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditSinkError>>;

    /// Makes every record written so far durable. Default: nothing to do.
    fn flush(&self) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Keeps records in memory, for tests and inspection. Clones share the records.
///
/// [`MemoryAuditSink::new`] keeps every record; [`MemoryAuditSink::bounded`] keeps the
/// newest `n` (a ring: the oldest record is dropped when a new one arrives at the
/// limit), for long-running processes that expose recent decisions.
#[derive(Clone, Debug, Default)]
pub struct MemoryAuditSink {
    records: Arc<Mutex<VecDeque<AuditRecord>>>,
    /// At most this many records are kept (`None`: no limit).
    limit: Option<usize>,
}

impl MemoryAuditSink {
    /// An empty sink that keeps every record.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty sink that keeps the newest `limit` records. A limit of 0 keeps none
    /// (every write succeeds and is forgotten).
    pub fn bounded(limit: usize) -> Self {
        Self {
            records: Arc::new(Mutex::new(VecDeque::with_capacity(limit.min(4096)))),
            limit: Some(limit),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<AuditRecord>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The records kept, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.lock().iter().cloned().collect()
    }

    /// The kinds of the records kept, oldest first.
    pub fn kinds(&self) -> Vec<AuditKind> {
        self.lock().iter().map(|r| r.kind).collect()
    }

    /// How many records are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no record is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every record.
    pub fn clear(&self) {
        self.lock().clear();
    }
}

impl AuditSink for MemoryAuditSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        if self.limit != Some(0) {
            let mut records = self.lock();
            if let Some(limit) = self.limit
                && records.len() >= limit
            {
                records.pop_front();
            }
            records.push_back(record);
        }
        Box::pin(async { Ok(()) })
    }
}

/// Emits each record as one JSON line in an `info` event on the `rein::audit` tracing
/// target (field `record`), so a subscriber can route audit records to their own
/// file. The default sink.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingAuditSink;

impl AuditSink for TracingAuditSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        tracing::info!(target: "rein::audit", record = %record.to_json_line(), "audit");
        Box::pin(async { Ok(()) })
    }
}

/// Appends one JSON object per line to a file, flushing after every record.
///
/// Writes are small synchronous appends made on the audit hook's background task,
/// never on the agent's path. [`AuditHook::flush`] waits until every queued record is
/// written and flushed: call it before an orderly shutdown.
#[derive(Debug)]
pub struct JsonlAuditSink {
    path: PathBuf,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl JsonlAuditSink {
    /// Opens `path` for appending, creating it if needed.
    ///
    /// # Errors
    /// The I/O error of opening the file.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(Self {
            path,
            file: Mutex::new(std::io::BufWriter::new(file)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, line: &str) -> std::io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(line.as_bytes())?;
        file.write_all(b"\n")?;
        file.flush()
    }
}

impl AuditSink for JsonlAuditSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        let result = self.append(&record.to_json_line()).map_err(Into::into);
        Box::pin(async move { result })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        let result = self
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flush()
            .map_err(Into::into);
        Box::pin(async move { result })
    }
}

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
    /// [`JsonlAuditSink`] appending to `path`.
    Jsonl {
        /// The file to append to.
        path: PathBuf,
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

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn dropped(&self, why: &str, kind: AuditKind) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::error!(target: "rein::audit", kind = kind.as_str(), reason = why, "audit record dropped");
        #[cfg(feature = "metrics")]
        metrics::counter!("rein.audit.dropped").increment(1);
    }

    fn written(&self) {
        self.written.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("rein.audit.written").increment(1);
    }
}

/// Writes one record, turning a failure or a panic into a counted drop.
async fn deliver(sink: &dyn AuditSink, record: AuditRecord, counters: &Counters) {
    let kind = record.kind;
    match AssertUnwindSafe(async { sink.write(record).await })
        .catch_unwind()
        .await
    {
        Ok(Ok(())) => counters.written(),
        Ok(Err(e)) => counters.dropped(&e.to_string(), kind),
        Err(panic) => counters.dropped(
            &format!("sink panicked: {}", crate::util::panic_message(&*panic)),
            kind,
        ),
    }
}

async fn flush_sink(sink: &dyn AuditSink) -> Result<(), AuditSinkError> {
    AssertUnwindSafe(async { sink.flush().await })
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            Err(AuditSinkError::new(format!(
                "sink panicked while flushing: {}",
                crate::util::panic_message(&*panic)
            )))
        })
}

/// The queue between the hook and the writer task, under one lock.
#[derive(Default)]
struct Queue {
    /// Records handed over and not yet taken by the writer, oldest first.
    records: VecDeque<AuditRecord>,
    /// Records accepted so far (queued or written directly).
    submitted: u64,
    /// Records the writer (or a direct write) finished, written or dropped.
    done: u64,
    /// A writer task exists for this queue.
    worker: bool,
    /// The writer found the queue empty and waits to be woken.
    idle: bool,
    /// The hook is gone: the writer exits once the queue is empty.
    closed: bool,
}

impl Queue {
    /// Accepted and not finished: what counts against the capacity.
    fn in_flight(&self) -> u64 {
        self.submitted - self.done
    }
}

/// Everything the hook and its writer task share.
struct Shared {
    sink: Arc<dyn AuditSink>,
    capacity: u64,
    on_full: QueueFull,
    queue: Mutex<Queue>,
    /// Wakes an idle writer (one permit: a wake before it waits is not lost).
    wake_writer: Notify,
    /// Signalled whenever the writer finished a record (room, and flush progress).
    finished: Notify,
    counters: Counters,
}

/// The writer task's state. Dropping it (the task ends, or its runtime shut down)
/// marks the writer gone, so the next record spawns a new one, and counts the records
/// it had taken but not written as dropped.
struct Writer {
    shared: Arc<Shared>,
    /// Records taken from the queue, being written in order.
    batch: VecDeque<AuditRecord>,
    /// The kind of the record handed to the sink and not yet finished.
    writing: Option<AuditKind>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        let lost = (self.batch.len() + usize::from(self.writing.is_some())) as u64;
        let kinds = self.writing.take().into_iter();
        for kind in kinds.chain(self.batch.drain(..).map(|r| r.kind)) {
            self.shared.counters.dropped(
                "the audit writer stopped before writing the record (its runtime shut down)",
                kind,
            );
        }
        let mut q = self.shared.lock();
        q.worker = false;
        q.idle = false;
        q.done += lost;
        drop(q);
        self.shared.finished.notify_waiters();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns the writer on the current tokio runtime if there is none. Returns
    /// whether a writer exists afterwards (`false` outside a runtime).
    fn ensure_writer(self: &Arc<Self>, q: &mut Queue) -> bool {
        if q.worker {
            return true;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        q.worker = true;
        q.idle = false;
        handle.spawn(writer(Writer {
            shared: Arc::clone(self),
            batch: VecDeque::new(),
            writing: None,
        }));
        true
    }

    /// Marks one record finished and wakes whoever waits for room or a flush.
    fn finish_one(&self) {
        self.lock().done += 1;
        self.finished.notify_waiters();
    }

    /// Accepts a record and writes it on the caller's task (no writer can run).
    async fn write_direct(&self, record: AuditRecord) {
        self.lock().submitted += 1;
        self.write_here(record).await;
    }

    /// Writes an accepted record on the caller's task and marks it finished.
    async fn write_here(&self, record: AuditRecord) {
        deliver(&*self.sink, record, &self.counters).await;
        self.finish_one();
    }
}

/// The writer task: takes every queued record in one batch (one lock, no per-record
/// wake-up) and writes them in order; sleeps while the queue is empty, and ends once
/// the hook is dropped and the queue drained.
async fn writer(mut w: Writer) {
    loop {
        let sleep = {
            let mut q = w.shared.lock();
            if q.records.is_empty() {
                if q.closed {
                    return;
                }
                q.idle = true;
                true
            } else {
                // Swap buffers: both keep their capacity, so a steady stream of
                // records allocates nothing here.
                std::mem::swap(&mut q.records, &mut w.batch);
                false
            }
        };
        if sleep {
            w.shared.wake_writer.notified().await;
            continue;
        }
        // If the task is dropped mid-write, `Writer::drop` counts the record.
        while let Some(record) = w.batch.pop_front() {
            w.writing = Some(record.kind);
            deliver(&*w.shared.sink, record, &w.shared.counters).await;
            w.writing = None;
            w.shared.finish_one();
        }
    }
}

/// Counts a record as dropped unless disarmed (the submission completed).
struct Pending<'a> {
    counters: &'a Counters,
    kind: AuditKind,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.counters.dropped(
                "submission cancelled before the record was queued",
                self.kind,
            );
        }
    }
}

/// What the fast path could not do without waiting.
enum Blocked {
    /// `on_full = wait` and the queue is full.
    Full(Box<AuditRecord>),
    /// No writer can run (capacity 0, or not on a tokio runtime): write directly.
    Direct(Box<AuditRecord>),
}

/// The bounded queue and its background writer.
struct Pipeline {
    shared: Arc<Shared>,
}

impl Drop for Pipeline {
    /// Lets the writer finish what is queued and end, instead of sleeping forever.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake_writer.notify_one();
    }
}

impl Pipeline {
    fn new(sink: Arc<dyn AuditSink>, capacity: usize, on_full: QueueFull) -> Self {
        Self {
            shared: Arc::new(Shared {
                sink,
                capacity: u64::try_from(capacity).unwrap_or(u64::MAX),
                on_full,
                queue: Mutex::new(Queue::default()),
                wake_writer: Notify::new(),
                finished: Notify::new(),
                counters: Counters::default(),
            }),
        }
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Hands a record over without waiting when possible: one lock, a push, and a
    /// wake-up only if the writer sleeps. Returns the record when the caller must wait.
    fn try_submit(&self, record: AuditRecord) -> Result<(), Blocked> {
        let shared = &self.shared;
        if shared.capacity == 0 {
            return Err(Blocked::Direct(Box::new(record)));
        }
        let mut q = shared.lock();
        if !shared.ensure_writer(&mut q) {
            return Err(Blocked::Direct(Box::new(record)));
        }
        if q.in_flight() >= shared.capacity {
            return match shared.on_full {
                QueueFull::Wait => Err(Blocked::Full(Box::new(record))),
                QueueFull::Drop => {
                    drop(q);
                    shared.counters.dropped("audit queue full", record.kind);
                    Ok(())
                }
            };
        }
        q.records.push_back(record);
        q.submitted += 1;
        let wake = std::mem::take(&mut q.idle);
        drop(q);
        if wake {
            shared.wake_writer.notify_one();
        }
        Ok(())
    }

    /// Hands a record over, waiting for room when the queue is full (`on_full =
    /// wait`). If this future is dropped before the record is handed over (an
    /// agent-wide hook timeout while the queue is full, a cancelled call), the loss is
    /// counted.
    async fn submit_blocked(&self, blocked: Blocked) {
        let shared = &self.shared;
        let mut record = match blocked {
            Blocked::Full(record) => record,
            Blocked::Direct(record) => {
                return shared.write_direct(*record).await;
            }
        };
        let mut pending = Pending {
            counters: &shared.counters,
            kind: record.kind,
            armed: true,
        };
        loop {
            let room = shared.finished.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_submit(*record) {
                Ok(()) => break,
                Err(Blocked::Full(back)) => record = back,
                Err(Blocked::Direct(back)) => {
                    pending.armed = false;
                    return shared.write_direct(*back).await;
                }
            }
            room.await;
        }
        pending.armed = false;
    }

    async fn flush(&self) -> Result<(), AuditSinkError> {
        let shared = &self.shared;
        let target = shared.lock().submitted;
        loop {
            let progress = shared.finished.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let left: Vec<AuditRecord> = {
                let mut q = shared.lock();
                if q.done >= target {
                    break;
                }
                if !q.worker && !shared.ensure_writer(&mut q) {
                    // Outside a runtime, with records left by a writer whose runtime
                    // is gone: write them here.
                    q.records.drain(..).collect()
                } else {
                    Vec::new()
                }
            };
            if left.is_empty() {
                progress.await;
            } else {
                for record in left {
                    shared.write_here(record).await;
                }
            }
        }
        flush_sink(&*shared.sink).await
    }
}

/// Per-call audit state: when each open tool call started and why denied calls were
/// denied, by tool-call id (a handful at a time: scanned, not hashed).
#[derive(Default)]
struct AuditRun {
    started: Vec<(String, Instant)>,
    denials: Vec<(String, (String, Option<String>))>,
}

/// Removes and returns the value stored under `id`.
fn take_by_id<V>(entries: &mut Vec<(String, V)>, id: &str) -> Option<V> {
    let i = entries.iter().position(|(k, _)| k == id)?;
    Some(entries.swap_remove(i).1)
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
/// Records are handed to a bounded queue (`queue_capacity`) drained by a background
/// task on the current tokio runtime, so a slow sink never blocks a call (with
/// `on_full = wait` a full queue applies backpressure instead of losing records). A
/// sink failure is logged and counted ([`AuditHook::stats`]); call
/// [`AuditHook::flush`] before shutting down so nothing queued is lost. The hook never
/// fails a call (failure policy [`Ignore`](FailurePolicy::Ignore)).
pub struct AuditHook {
    id: u64,
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
    /// only says which sink [`HooksConfig`](super::HooksConfig) builds).
    pub fn new(config: AuditConfig, masker: SensitiveDataMasker, sink: Arc<dyn AuditSink>) -> Self {
        Self {
            id: next_instance_id(),
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
                drop(RunStates::reset(
                    ctx,
                    self.id,
                    &agent.id,
                    AuditRun::default(),
                ));
                None
            }
            HookEvent::PreActing(e) => {
                let id = e.tool_use().id.clone();
                let denial = e
                    .denial_reason()
                    .map(|r| (r.to_owned(), e.denied_by().map(str::to_owned)));
                RunStates::with(
                    ctx,
                    self.id,
                    &agent.id,
                    AuditRun::default,
                    |run| match denial {
                        Some(d) => run.denials.push((id, d)),
                        None => run.started.push((id, e.timestamp())),
                    },
                );
                None
            }
            HookEvent::PostActing(e) => {
                let tu = e.tool_use();
                let (started, denial) =
                    RunStates::<AuditRun>::update(ctx, self.id, &agent.id, |run| {
                        (
                            take_by_id(&mut run.started, &tu.id),
                            take_by_id(&mut run.denials, &tu.id),
                        )
                    })
                    .unwrap_or((None, None));
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
                if e.was_denied() {
                    r.status = Some(AuditStatus::Denied);
                    let (reason, by) = denial.unwrap_or_else(|| (e.tool_result().text(), None));
                    r.reason = Some(self.mask_text(&reason));
                    r.denied_by = by;
                } else {
                    r.status = Some(if e.tool_result().is_error {
                        AuditStatus::Error
                    } else {
                        AuditStatus::Ok
                    });
                    r.duration_ms = started.map(|s| (e.timestamp() - s).as_secs_f64() * 1000.0);
                    r.stop_requested = Some(e.is_stop_requested());
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
                r.answer = Some(self.answer(&e.message().text()));
                r.flags = msg_flags(e.message());
                Some(r)
            }
            HookEvent::PostCall(e) => {
                drop(RunStates::<AuditRun>::take(ctx, self.id, &agent.id));
                let mut r = AuditRecord::new(AuditKind::FinalAnswer, ts(), agent, ctx);
                r.answer = Some(self.answer(&e.final_message().text()));
                r.stop_reason = Some(stop_reason(e.reason()).to_owned());
                r.flags = msg_flags(e.final_message());
                Some(r)
            }
            HookEvent::Error(e) => {
                drop(RunStates::<AuditRun>::take(ctx, self.id, &agent.id));
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
    }
}

/// `value` with every string (and every number whose digits are sensitive) masked.
/// Object keys are kept. A value with nothing to mask is cloned, not rebuilt.
pub(crate) fn mask_json(masker: &SensitiveDataMasker, value: &Value) -> Value {
    masked_json(masker, value).unwrap_or_else(|| value.clone())
}

/// `Some(masked copy)` when something in `value` is sensitive; `None` (nothing
/// allocated) when nothing is.
fn masked_json(masker: &SensitiveDataMasker, value: &Value) -> Option<Value> {
    match value {
        Value::String(s) => match masker.mask(s) {
            Cow::Owned(m) => Some(Value::String(m)),
            Cow::Borrowed(_) => None,
        },
        Value::Number(n) => match masker.mask(&n.to_string()) {
            Cow::Owned(m) => Some(Value::String(m)),
            Cow::Borrowed(_) => None,
        },
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
            let (first, masked) = map
                .iter()
                .enumerate()
                .find_map(|(i, (_, v))| Some((i, masked_json(masker, v)?)))?;
            let mut out = map.clone();
            let mut masked = Some(masked);
            for (i, (_, v)) in out.iter_mut().enumerate().skip(first) {
                let replacement = if i == first {
                    masked.take()
                } else {
                    masked_json(masker, v)
                };
                if let Some(m) = replacement {
                    *v = m;
                }
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
    use crate::hook::{EventMeta, PreActingEvent};
    use crate::{RunContext, ToolUse};

    /// The hook future is erased inline (no allocation per event) when it fits the
    /// chain's 64-byte slot: no record may be held across its await.
    #[test]
    fn the_audit_hook_future_fits_the_inline_slot() {
        let hook = AuditHook::new(
            AuditConfig::default(),
            SensitiveDataMasker::default(),
            Arc::new(MemoryAuditSink::new()),
        );
        let info = Arc::new(AgentInfo {
            id: "a".into(),
            name: "a".into(),
            parent_id: None,
            depth: 0,
        });
        let meta = EventMeta::new(
            &info,
            &RunContext::new(),
            Arc::from(Vec::new()),
            Default::default(),
        );
        let mut event = HookEvent::PreActing(PreActingEvent {
            meta,
            tool_use: ToolUse::new("1", "x", serde_json::json!({})),
            denial: None,
            changed: false,
            changed_by: None,
        });
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

    #[test]
    fn event_times_become_wall_clock_milliseconds_from_one_anchor() {
        let clock = WallClock::default();
        let start = Instant::now();
        let before = wall_ms_now();
        let t0 = clock.ms_at(start);
        assert!(t0 >= before && t0 <= wall_ms_now(), "{before} {t0}");
        // Within a second of the anchor: pure arithmetic, in both directions.
        assert_eq!(clock.ms_at(start + Duration::from_millis(300)), t0 + 300);
        assert_eq!(clock.ms_at(start + Duration::from_millis(999)), t0 + 999);
        // Further away: the wall clock is read again (and becomes the anchor).
        let far = start + Duration::from_secs(5);
        let t1 = clock.ms_at(far);
        assert!(t1 >= before && t1 <= wall_ms_now(), "{t1}");
        assert_eq!(clock.ms_at(far + Duration::from_millis(10)), t1 + 10);
    }

    #[tokio::test]
    async fn dropping_the_hook_ends_its_writer_after_the_queued_records() {
        let sink = MemoryAuditSink::new();
        let pipeline = Pipeline::new(Arc::new(sink.clone()), 8, QueueFull::Wait);
        let info = AgentInfo {
            id: "a".into(),
            name: "a".into(),
            parent_id: None,
            depth: 0,
        };
        let record = AuditRecord::new(AuditKind::FinalAnswer, 0, &info, &RunContext::new());
        assert!(pipeline.try_submit(record).is_ok());
        let shared = Arc::downgrade(&pipeline.shared);
        drop(pipeline);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sink.len(), 1, "the queued record is still written");
        assert!(shared.upgrade().is_none(), "the writer task ended");
    }
}
