//! The [`AuditSink`] trait, its error, and the in-memory and tracing sinks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;

use super::{AuditKind, AuditRecord};

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
/// The [`AuditHook`](super::AuditHook) never calls a sink on the agent's path: records
/// go through a bounded queue to a background task that calls
/// [`write`](AuditSink::write) one record at a time, in order. A failed write is logged
/// and counted in [`AuditStats::dropped`](super::AuditStats::dropped); it never fails
/// the call.
///
/// That task runs on the agent's tokio runtime, so a sink must never block the thread
/// that polls it: do blocking I/O on a thread of its own (as [`JsonlAuditSink`]
/// does) or on the blocking pool, and resolve the future when it is done.
///
/// [`JsonlAuditSink`]: super::JsonlAuditSink
pub trait AuditSink: Send + Sync + 'static {
    /// Writes one record. The sink owns it: keep it (no copy) or drop it once written.
    /// Resolve `Ok` only once the record reached the sink (it is counted as written);
    /// an `Err` counts it as dropped.
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
