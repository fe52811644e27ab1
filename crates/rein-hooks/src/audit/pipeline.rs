//! The bounded queue between the [`AuditHook`](super::AuditHook) and its sink, the
//! background writer task that drains it, and the delivery counters.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::FutureExt;
use tokio::sync::Notify;

use super::sink::DynAuditSink;
use super::{AuditKind, AuditRecord, AuditSinkError, QueueFull};

/// The most records the writer hands to the sink at once: large enough that a batch
/// amortises the sink's per-call cost (a system call, a sync), small enough that a
/// full queue frees room in steps rather than all at the end of one huge write.
const MAX_BATCH: usize = 256;

#[derive(Default)]
pub(super) struct Counters {
    pub(super) written: AtomicU64,
    pub(super) dropped: AtomicU64,
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

/// Writes a batch, turning each failure (or a panic: the whole batch) into a counted
/// drop. `kinds` are the records' kinds, in order. Returns how many records finished.
async fn deliver(
    sink: &dyn DynAuditSink,
    records: Vec<AuditRecord>,
    kinds: &[AuditKind],
    counters: &Counters,
) -> u64 {
    // Inside an `async` block: a panic while creating the future is caught too.
    match AssertUnwindSafe(async { sink.write_batch_erased(records).await })
        .catch_unwind()
        .await
    {
        Ok(results) => {
            let mut results = results.into_iter();
            for &kind in kinds {
                match results.next() {
                    Some(Ok(())) => counters.written(),
                    Some(Err(e)) => counters.dropped(&e.to_string(), kind),
                    None => counters.dropped("the sink returned no result for the record", kind),
                }
            }
        }
        Err(panic) => {
            let why = format!("sink panicked: {}", crate::util::panic_message(&*panic));
            for &kind in kinds {
                counters.dropped(&why, kind);
            }
        }
    }
    kinds.len() as u64
}

async fn flush_sink(sink: &dyn DynAuditSink) -> Result<(), AuditSinkError> {
    AssertUnwindSafe(async { sink.flush_erased().await })
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
    /// The writer sleeps until a hand-over wakes it: it found the queue empty, or was
    /// just spawned. Records may be queued meanwhile (see `Pipeline::try_submit`).
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
    sink: Arc<dyn DynAuditSink>,
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
    /// The kinds of the batch handed to the sink and not yet finished, in order.
    writing: Vec<AuditKind>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        let lost = self.writing.len() as u64;
        for kind in self.writing.drain(..) {
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
        // It starts asleep: the submitter wakes it when the call's records are in.
        q.idle = true;
        handle.spawn(writer(Writer {
            shared: Arc::clone(self),
            writing: Vec::with_capacity(MAX_BATCH),
        }));
        true
    }

    /// Marks `n` records finished and wakes whoever waits for room or a flush.
    fn finish(&self, n: u64) {
        self.lock().done += n;
        self.finished.notify_waiters();
    }

    /// Accepts a record and writes it on the caller's task (no writer can run).
    async fn write_direct(&self, record: AuditRecord) {
        self.lock().submitted += 1;
        self.write_here(vec![record]).await;
    }

    /// Writes accepted records on the caller's task and marks them finished.
    async fn write_here(&self, records: Vec<AuditRecord>) {
        let kinds: Vec<AuditKind> = records.iter().map(|r| r.kind).collect();
        let n = deliver(&*self.sink, records, &kinds, &self.counters).await;
        self.finish(n);
    }
}

/// The writer task: takes up to [`MAX_BATCH`] queued records at once (one lock, no
/// per-record wake-up) and hands them to the sink as one batch; sleeps while the queue
/// is empty, and ends once the hook is dropped and the queue drained.
async fn writer(mut w: Writer) {
    loop {
        let batch: Option<Vec<AuditRecord>> = {
            let mut q = w.shared.lock();
            if q.idle && !q.closed {
                // Asleep until a hand-over takes `idle` (records may be queued).
                None
            } else if q.records.is_empty() {
                if q.closed {
                    return;
                }
                q.idle = true;
                None
            } else {
                let n = q.records.len().min(MAX_BATCH);
                Some(q.records.drain(..n).collect())
            }
        };
        let Some(batch) = batch else {
            w.shared.wake_writer.notified().await;
            continue;
        };
        // If the task is dropped mid-write, `Writer::drop` counts the batch as dropped.
        w.writing.extend(batch.iter().map(|r| r.kind));
        let n = deliver(&*w.shared.sink, batch, &w.writing, &w.shared.counters).await;
        w.writing.clear();
        w.shared.finish(n);
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
pub(super) enum Blocked {
    /// `on_full = wait` and the queue is full.
    Full(Box<AuditRecord>),
    /// No writer can run (capacity 0, or not on a tokio runtime): write directly.
    Direct(Box<AuditRecord>),
}

/// The bounded queue and its background writer.
pub(super) struct Pipeline {
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
    pub(super) fn new(sink: Arc<dyn DynAuditSink>, capacity: usize, on_full: QueueFull) -> Self {
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

    pub(super) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Wakes the writer if it sleeps while records are queued: hands over what a
    /// call queued without a hand-over (a call cancelled before its final record).
    pub(super) fn hand_over(&self) {
        let mut q = self.shared.lock();
        let wake = !q.records.is_empty() && std::mem::take(&mut q.idle);
        drop(q);
        if wake {
            self.shared.wake_writer.notify_one();
        }
    }

    /// Hands a record over without waiting when possible: one lock and a push. The
    /// sleeping writer is woken once per call, not per record: by the call's last
    /// record (`final-answer` or `error`), or earlier when [`MAX_BATCH`] records are
    /// queued or the queue is full; records queued by a call that ends without one
    /// (a cancelled call) are handed over by the next call's start, the next
    /// [`flush`](Self::flush), or the hook's drop. Ordering, capacity and drop
    /// counting are those of the queue: a record is accepted (and counted against the
    /// capacity) here, whenever the writer wakes. Returns the record when the caller
    /// must wait.
    pub(super) fn try_submit(&self, record: AuditRecord) -> Result<(), Blocked> {
        let shared = &self.shared;
        if shared.capacity == 0 {
            return Err(Blocked::Direct(Box::new(record)));
        }
        let mut q = shared.lock();
        if !shared.ensure_writer(&mut q) {
            return Err(Blocked::Direct(Box::new(record)));
        }
        if q.in_flight() >= shared.capacity {
            // Records queued without a wake-up must drain for room to appear.
            if std::mem::take(&mut q.idle) {
                shared.wake_writer.notify_one();
            }
            return match shared.on_full {
                QueueFull::Wait => Err(Blocked::Full(Box::new(record))),
                QueueFull::Drop => {
                    drop(q);
                    shared.counters.dropped("audit queue full", record.kind);
                    Ok(())
                }
            };
        }
        let last_of_call = matches!(record.kind, AuditKind::FinalAnswer | AuditKind::Error);
        q.records.push_back(record);
        q.submitted += 1;
        let wake = (last_of_call || q.records.len() >= MAX_BATCH) && std::mem::take(&mut q.idle);
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
    pub(super) async fn submit_blocked(&self, blocked: Blocked) {
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

    pub(super) async fn flush(&self) -> Result<(), AuditSinkError> {
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
                if !shared.ensure_writer(&mut q) {
                    // Outside a runtime, with records left by a writer whose runtime
                    // is gone: write them here.
                    q.records.drain(..).collect()
                } else {
                    if !q.records.is_empty() && std::mem::take(&mut q.idle) {
                        // Records queued without a wake-up (see `try_submit`).
                        shared.wake_writer.notify_one();
                    }
                    Vec::new()
                }
            };
            if left.is_empty() {
                progress.await;
            } else {
                shared.write_here(left).await;
            }
        }
        flush_sink(&*shared.sink).await
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryAuditSink;
    use rein_core::agent::{AgentInfo, RunContext};

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
