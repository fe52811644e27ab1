//! The JSONL audit sink against hostile file systems: a pipe nobody reads, a target that
//! fails part-way and recovers, a torn last line left by a crash, and SIGKILL at random
//! moments (the child is the `#[ignore]`d worker `audit_crash_child_worker`, re-run by
//! `support::worker` as in `session::crash`).

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rein::hooks::{
    AuditConfig, AuditHook, AuditKind, AuditRecord, AuditSink, Durability, JsonlAuditSink,
    QueueFull, SensitiveDataMasker,
};
use rein::*;

use crate::support::crash::record_line;
use crate::support::rng::XorShift;
use crate::support::worker::{run_until_killed, worker};
use crate::support::*;

fn hook(sink: JsonlAuditSink, capacity: usize, on_full: QueueFull) -> Arc<AuditHook> {
    Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            queue_capacity: capacity,
            on_full,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        Arc::new(sink),
    ))
}

/// A FIFO at `path` held open for reading (read-write, so neither side blocks on open)
/// and never read: writers block once its 64 KiB buffer is full.
fn stalled_fifo(path: &std::path::Path) -> std::fs::File {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo failed");
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Runs `body` on a `current_thread` runtime in its own thread; fails the test if the
/// body has not finished after `guard` (a frozen runtime never finishes it).
fn on_current_thread<F, T>(guard: Duration, body: impl FnOnce() -> F + Send + 'static) -> T
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(body()));
    });
    rx.recv_timeout(guard)
        .expect("the current_thread runtime froze: the body never finished")
}

/// An agent answering with a 100 KB text per call: one audit record overflows a pipe.
fn big_answers(hook: &Arc<AuditHook>, calls: usize) -> Agent {
    let model = ScriptedModel::new((0..calls).map(|_| ScriptedTurn::text("x".repeat(100_000))));
    builder(&model).hook(Arc::clone(hook)).build().unwrap()
}

#[test]
fn a_sink_stalled_on_a_pipe_nobody_reads_never_freezes_a_current_thread_runtime() {
    let dir = TempDir::new("audit-fifo-wait");
    let fifo = dir.path().join("audit.fifo");
    let reader = stalled_fifo(&fifo);
    let (timed_out, ticks) = on_current_thread(Duration::from_secs(30), move || async move {
        let hook = hook(JsonlAuditSink::open(&fifo).unwrap(), 2, QueueFull::Wait);
        let agent = big_answers(&hook, 10);
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = {
            let ticks = Arc::clone(&ticks);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let mut timed_out = 0;
        for _ in 0..5 {
            let call = agent.call(Msg::user("hi"));
            if tokio::time::timeout(Duration::from_secs(2), call)
                .await
                .is_err()
            {
                timed_out += 1;
                break;
            }
        }
        ticker.abort();
        (timed_out, ticks.load(Ordering::Relaxed))
    });
    drop(reader);
    assert_eq!(
        timed_out, 1,
        "in `wait` mode a full queue makes the call wait, and its timeout fires"
    );
    assert!(ticks >= 100, "other tasks kept running: {ticks} ticks");
}

#[test]
fn with_on_full_drop_a_sink_stalled_on_a_pipe_drops_and_counts_and_every_call_completes() {
    let dir = TempDir::new("audit-fifo-drop");
    let fifo = dir.path().join("audit.fifo");
    let reader = stalled_fifo(&fifo);
    let stats = on_current_thread(Duration::from_secs(30), move || async move {
        let hook = hook(JsonlAuditSink::open(&fifo).unwrap(), 2, QueueFull::Drop);
        let agent = big_answers(&hook, 10);
        for i in 0..10 {
            tokio::time::timeout(Duration::from_secs(2), agent.call(Msg::user("hi")))
                .await
                .unwrap_or_else(|_| panic!("call {i} was frozen by the stalled sink"))
                .unwrap();
        }
        hook.stats()
    });
    drop(reader);
    assert!(stats.dropped >= 7, "{stats:?}");
}

/// A write target that, while `failing`, accepts the first 10 bytes of the first write
/// and then fails every write and flush with "no space left" until it recovers.
#[derive(Clone, Default)]
struct FlakyTarget {
    data: Arc<Mutex<Vec<u8>>>,
    failing: Arc<AtomicBool>,
    partial_done: Arc<AtomicBool>,
}

impl Write for FlakyTarget {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.failing.load(Ordering::SeqCst) {
            if !self.partial_done.swap(true, Ordering::SeqCst) {
                let n = buf.len().min(10);
                self.data.lock().unwrap().extend_from_slice(&buf[..n]);
                return Ok(n);
            }
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        self.data.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        Ok(())
    }
}

#[tokio::test]
async fn after_a_failed_write_the_counts_match_exactly_the_records_in_the_target() {
    let target = FlakyTarget::default();
    let sink = JsonlAuditSink::from_writer(target.clone(), Durability::None).unwrap();
    let hook = hook(sink, 64, QueueFull::Wait);
    let model = ScriptedModel::new((0..7).map(|i| ScriptedTurn::text(format!("answer {i}"))));
    let agent = builder(&model).hook(Arc::clone(&hook)).build().unwrap();
    let call = || async { agent.call(Msg::user("hi")).await.unwrap() };
    for _ in 0..2 {
        call().await;
    }
    hook.flush().await.unwrap();
    target.failing.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        call().await;
    }
    assert!(hook.flush().await.is_err(), "the target is full");
    target.failing.store(false, Ordering::SeqCst);
    for _ in 0..2 {
        call().await;
    }
    hook.flush().await.unwrap();
    let stats = hook.stats();
    assert_eq!((stats.written, stats.dropped), (4, 3), "{stats:?}");
    let data = String::from_utf8(target.data.lock().unwrap().clone()).unwrap();
    assert!(data.ends_with('\n'));
    let lines: Vec<&str> = data.lines().collect();
    let records: Vec<AuditRecord> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let answers: Vec<String> = records.iter().filter_map(|r| r.answer.clone()).collect();
    assert_eq!(
        answers,
        ["answer 0", "answer 1", "answer 5", "answer 6"],
        "exactly the written records, each on its own line; nothing failed was written later"
    );
    assert_eq!(
        lines.len(),
        5,
        "plus the one fragment of the partly written record, on a line of its own: {data}"
    );
}

/// A write target that accepts `room` bytes in all, then fails with "no space left".
#[derive(Clone)]
struct CappedTarget {
    data: Arc<Mutex<Vec<u8>>>,
    room: Arc<AtomicU64>,
}

impl Write for CappedTarget {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.room.load(Ordering::SeqCst) as usize;
        if room == 0 {
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        let n = buf.len().min(room);
        self.room.fetch_sub(n as u64, Ordering::SeqCst);
        self.data.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_batch_that_fails_part_way_acknowledges_exactly_the_complete_lines_before_it() {
    // Room for two lines and part of the third.
    let line = record_line(1).len() as u64 + 1;
    let target = CappedTarget {
        data: Arc::default(),
        room: Arc::new(AtomicU64::new(2 * line + 10)),
    };
    let sink = JsonlAuditSink::from_writer(target.clone(), Durability::None).unwrap();
    let results = sink.write_batch((1..=5).map(record).collect()).await;
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, true, false, false, false]);
    // The target recovers: the next batch starts on a line of its own.
    target.room.store(u64::MAX, Ordering::SeqCst);
    let results = sink.write_batch(vec![record(6), record(7)]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let data = String::from_utf8(target.data.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = data.lines().collect();
    assert_eq!(lines.len(), 5, "{data}");
    assert_eq!(lines[0], record_line(1));
    assert_eq!(lines[1], record_line(2));
    assert_eq!(lines[2], &record_line(3)[..10], "the fragment stays apart");
    assert_eq!(lines[3], record_line(6));
    assert_eq!(lines[4], record_line(7));
}

#[tokio::test]
async fn a_batch_on_a_file_writes_one_line_per_record_in_order_under_every_policy() {
    for durability in [
        Durability::EveryRecord,
        Durability::default(),
        Durability::None,
    ] {
        let dir = TempDir::new("audit-batch");
        let path = dir.path().join("audit.jsonl");
        let sink = JsonlAuditSink::open_with(&path, durability).unwrap();
        let results = sink.write_batch((1..=300).map(record).collect()).await;
        assert_eq!(results.len(), 300);
        assert!(results.iter().all(Result::is_ok));
        assert!(sink.write_batch(Vec::new()).await.is_empty());
        sink.flush().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let expected: String = (1..=300).map(|n| record_line(n) + "\n").collect();
        assert_eq!(text, expected, "{durability:?}");
    }
}

fn record(seq: u64) -> AuditRecord {
    crate::support::crash::record(seq).unwrap()
}

#[tokio::test]
async fn a_torn_last_line_is_kept_apart_and_never_merged_with_the_next_record() {
    let dir = TempDir::new("audit-torn");
    let path = dir.path().join("audit.jsonl");
    let torn = &record_line(2)[..40];
    std::fs::write(&path, format!("{}\n{torn}", record_line(1))).unwrap();
    let sink = JsonlAuditSink::open_with(&path, Durability::EveryRecord).unwrap();
    assert!(sink.recovered_torn_tail());
    sink.write(record(3)).await.unwrap();
    sink.write(record(4)).await.unwrap();
    drop(sink);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[1], torn, "the torn line is kept as is, on its own");
    for (i, seq) in [(0, 1), (2, 3), (3, 4)] {
        let r: AuditRecord = serde_json::from_str(lines[i]).unwrap();
        assert_eq!(r.answer.as_deref(), Some(format!("record {seq}").as_str()));
    }
    // A file that ends cleanly gets no extra line.
    let sink = JsonlAuditSink::open(&path).unwrap();
    assert!(!sink.recovered_torn_tail());
    assert_eq!(
        sink.durability(),
        Durability::Batched { max_delay_ms: 1000 }
    );
    sink.write(record(5)).await.unwrap();
    sink.flush().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 5);
    assert!(text.ends_with(&format!("{}\n", record_line(5))));
}

/// The worker test of the child process.
const CHILD: &str = "hooks::audit_jsonl::audit_crash_child_worker";

/// The child process (`REIN_AUDIT_CRASH_FILE` set): appends audit records to that JSONL
/// file through a [`JsonlAuditSink`] with `EveryRecord` durability, numbering on from
/// the file's last complete record, in batches of 1 to 7 records
/// (`AuditSink::write_batch`: one write and one sync each), forever, printing `ack <seq>`
/// for each record once its batch resolved. The test kills it with SIGKILL at random
/// moments.
#[test]
#[ignore = "a worker process of sigkill_at_random_moments_loses_no_acknowledged_record_and_merges_no_lines"]
fn audit_crash_child_worker() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::var_os("REIN_AUDIT_CRASH_FILE") else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let last = text
        .lines()
        .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
        .map(|r| r.ts_ms)
        .max()
        .unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let sink = JsonlAuditSink::open_with(&path, Durability::EveryRecord)?;
    let mut out = std::io::stdout().lock();
    let mut seq = last + 1;
    loop {
        let batch: Vec<u64> = (seq..seq + 1 + seq % 7).collect();
        seq += batch.len() as u64;
        let records = batch
            .iter()
            .map(|&n| crate::support::crash::record(n))
            .collect::<Result<_, _>>()?;
        let results = rt.block_on(sink.write_batch(records));
        if results.len() != batch.len() {
            return Err(format!("{} results for {} records", results.len(), batch.len()).into());
        }
        for (n, result) in batch.iter().zip(results) {
            result?;
            writeln!(out, "ack {n}")?;
        }
        out.flush()?;
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_record_and_merges_no_lines() {
    let rounds: usize = std::env::var("REIN_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    let mut rng = XorShift::new(seed);
    let dir = TempDir::new("audit-crash");
    let path = dir.path().join("audit.jsonl");
    let mut acked = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        let mut child = worker(CHILD);
        child.env("REIN_AUDIT_CRASH_FILE", &path);
        let out = run_until_killed(child, Duration::from_millis(30 + rng.below(120)));
        acked.extend(
            out.lines()
                .filter_map(|l| l.find("ack ").map(|at| l[at + 4..].parse::<u64>().unwrap())),
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut seqs = Vec::new();
        for line in text.lines() {
            match serde_json::from_str::<AuditRecord>(line) {
                Ok(r) => {
                    assert_eq!(r.kind, AuditKind::FinalAnswer);
                    assert_eq!(
                        line,
                        record_line(r.ts_ms),
                        "round {round}: one record per line"
                    );
                    seqs.push(r.ts_ms);
                }
                // A line torn by the kill (never acknowledged): kept on its own line.
                Err(_) => assert!(
                    record_line(u64::MAX).len() > line.len(),
                    "round {round}: a merged line: {line}"
                ),
            }
        }
        for seq in &acked {
            assert!(
                seqs.contains(seq),
                "round {round}: acknowledged record {seq} is missing"
            );
        }
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "round {round}: records in order, none written twice"
        );
    }
    assert!(!acked.is_empty(), "the child never wrote anything");
    eprintln!(
        "audit crash test: seed {seed}, {rounds} SIGKILLs in {:?}, {} acknowledged records, \
         all present, no merged lines",
        started.elapsed(),
        acked.len()
    );
}
