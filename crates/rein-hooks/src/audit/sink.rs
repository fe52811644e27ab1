//! The [`AuditSink`] trait, its error, and the in-memory and tracing sinks.

use std::collections::VecDeque;
use std::future::Future;
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

/// Where audit records go.
///
/// The [`AuditHook`](super::AuditHook) never calls a sink on the agent's path: records
/// go through a bounded queue to a background task that hands them to
/// [`write_batch`](AuditSink::write_batch) (up to 256 queued records at a time, in
/// order). A record the sink reports as failed is logged and counted in
/// [`AuditStats::dropped`](super::AuditStats::dropped); it never fails the call.
///
/// That task runs on the agent's tokio runtime, so a sink must never block the thread
/// that polls it: do blocking I/O on a thread of its own (as [`JsonlAuditSink`]
/// does) or on the blocking pool, and resolve the future when it is done.
///
/// The methods are `async fn`s (return-position `impl Future + Send`), like
/// [`Hook::on_event`](rein_core::Hook::on_event): implement them with `async fn`. The trait
/// is therefore not object-safe; the hook erases a sink's futures at one private
/// boundary (one boxed future per batch, not per record). To share one sink, pass an
/// `Arc<S>` (it implements `AuditSink` too) and keep a clone.
///
/// ```
/// use rein::hooks::{AuditRecord, AuditSink, AuditSinkError};
///
/// struct Stdout;
///
/// impl AuditSink for Stdout {
///     async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
///         println!("{}", record.to_json_line());
///         Ok(())
///     }
/// }
/// ```
///
/// [`JsonlAuditSink`]: super::JsonlAuditSink
pub trait AuditSink: Send + Sync + 'static {
    /// Writes one record. The sink owns it: keep it (no copy) or drop it once written.
    /// Resolve `Ok` only once the record reached the sink (it is counted as written);
    /// an `Err` counts it as dropped.
    fn write(&self, record: AuditRecord)
    -> impl Future<Output = Result<(), AuditSinkError>> + Send;

    /// Writes several records, in order, and returns one result per record, in the
    /// same order (each counted like a [`write`](AuditSink::write) result; a missing
    /// result counts its record as dropped). This is what the hook's writer calls.
    ///
    /// Default: [`write`](AuditSink::write) each record in turn. Override it when the
    /// sink can do better for many records at once (one system call, one sync: as
    /// [`JsonlAuditSink`](super::JsonlAuditSink) does).
    fn write_batch(
        &self,
        records: Vec<AuditRecord>,
    ) -> impl Future<Output = Vec<Result<(), AuditSinkError>>> + Send {
        async move {
            let mut results = Vec::with_capacity(records.len());
            for record in records {
                results.push(self.write(record).await);
            }
            results
        }
    }

    /// Makes every record written so far durable. Default: nothing to do.
    fn flush(&self) -> impl Future<Output = Result<(), AuditSinkError>> + Send {
        async { Ok(()) }
    }
}

/// A shared sink: the hook writes through the `Arc`, the caller keeps a clone.
impl<S: AuditSink> AuditSink for Arc<S> {
    fn write(
        &self,
        record: AuditRecord,
    ) -> impl Future<Output = Result<(), AuditSinkError>> + Send {
        S::write(self, record)
    }

    fn write_batch(
        &self,
        records: Vec<AuditRecord>,
    ) -> impl Future<Output = Vec<Result<(), AuditSinkError>>> + Send {
        S::write_batch(self, records)
    }

    fn flush(&self) -> impl Future<Output = Result<(), AuditSinkError>> + Send {
        S::flush(self)
    }
}

/// The object-safe twin of [`AuditSink`]: the one place a sink's futures are erased
/// (boxed), so the hook can hold any sink as `Arc<dyn DynAuditSink>`. One box per
/// batch and per flush.
pub(crate) trait DynAuditSink: Send + Sync + 'static {
    fn write_batch_erased(
        &self,
        records: Vec<AuditRecord>,
    ) -> BoxFuture<'_, Vec<Result<(), AuditSinkError>>>;
    fn flush_erased(&self) -> BoxFuture<'_, Result<(), AuditSinkError>>;
}

impl<S: AuditSink> DynAuditSink for S {
    fn write_batch_erased(
        &self,
        records: Vec<AuditRecord>,
    ) -> BoxFuture<'_, Vec<Result<(), AuditSinkError>>> {
        Box::pin(AuditSink::write_batch(self, records))
    }

    fn flush_erased(&self) -> BoxFuture<'_, Result<(), AuditSinkError>> {
        Box::pin(AuditSink::flush(self))
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

impl MemoryAuditSink {
    /// Keeps `record`, making room at the limit.
    fn keep(&self, records: &mut VecDeque<AuditRecord>, record: AuditRecord) {
        if self.limit == Some(0) {
            return;
        }
        if let Some(limit) = self.limit
            && records.len() >= limit
        {
            records.pop_front();
        }
        records.push_back(record);
    }
}

impl AuditSink for MemoryAuditSink {
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        self.keep(&mut self.lock(), record);
        Ok(())
    }

    /// Keeps the records under one lock.
    async fn write_batch(&self, records: Vec<AuditRecord>) -> Vec<Result<(), AuditSinkError>> {
        let n = records.len();
        let mut kept = self.lock();
        for record in records {
            self.keep(&mut kept, record);
        }
        drop(kept);
        (0..n).map(|_| Ok(())).collect()
    }
}

/// Emits each record as one JSON line in an `info` event on the `rein::audit` tracing
/// target (field `record`), so a subscriber can route audit records to their own
/// file. The default sink.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingAuditSink;

impl AuditSink for TracingAuditSink {
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        tracing::info!(target: "rein::audit", record = %record.to_json_line(), "audit");
        Ok(())
    }
}
