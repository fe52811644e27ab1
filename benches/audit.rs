//! Audit pipeline benchmarks (divan): what the audit trail costs and what backpressure
//! does to calls.
//!
//! - `throughput::jsonl`: records/s through an [`AuditHook`]'s queue (default capacity,
//!   `on_full = wait`) into a [`JsonlAuditSink`] on disk, per [`Durability`], flushed at
//!   the end of every sample (so the time counts every record on disk).
//! - `wait_latency::calls`: the mean latency of W1 calls (32 concurrent callers) with
//!   no audit, with audit to a JSONL file, and with audit to a sink slower than the
//!   callers (1 ms per record) in `wait` and in `drop` mode. `main` prints the mean
//!   latency of each as a ratio to the no-audit run of the same process.
//!
//! Run: `cargo bench --bench audit`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use rein::bench_support::{audit_record, audit_submit};
use rein::hooks::{
    AuditConfig, AuditHook, AuditRecord, AuditSink, AuditSinkError, Durability, HookServices,
    HooksConfig, JsonlAuditSink, MemoryAuditSink,
};
use rein::{Msg, RunContext, SessionKey};

#[path = "support/mod.rs"]
mod support;

use support::*;

fn main() {
    divan::main();
    report();
}

/// A fresh file under the target's temporary directory (on disk, not tmpfs).
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("audit-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn durability(name: &str) -> Durability {
    match name {
        "none" => Durability::None,
        "batched" => Durability::default(),
        "every_record" => Durability::EveryRecord,
        other => panic!("unknown durability {other}"),
    }
}

/// Records/s through the hook's queue into the JSONL sink.
mod throughput {
    use super::*;

    /// Records through the pipeline into `sink`, flushed at the end of each sample.
    fn run(bencher: Bencher, records: u64, sink: impl AuditSink) {
        let rt = multi_thread_runtime();
        let config = AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        };
        let hook = rt.block_on(async {
            AuditHook::new(config, rein::hooks::SensitiveDataMasker::default(), sink)
        });
        let batch: Vec<AuditRecord> = (0..records).map(audit_record).collect();
        bencher
            .counter(ItemsCount::new(records))
            .with_inputs(|| batch.clone())
            .bench_local_values(|batch| {
                rt.block_on(async {
                    for r in batch {
                        audit_submit(&hook, r).await;
                    }
                    hook.flush().await.unwrap();
                })
            });
        assert_eq!(hook.stats().dropped, 0);
    }

    /// An fsync per record takes milliseconds on a disk: fewer records keep the sample
    /// short (the counter makes the rows comparable).
    fn records(policy: &str) -> u64 {
        if policy == "every_record" {
            2_000
        } else {
            20_000
        }
    }

    /// The JSONL sink as shipped: up to 256 records per write (and per sync).
    #[divan::bench(args = ["none", "batched", "every_record"], sample_count = 5, sample_size = 1)]
    fn jsonl(bencher: Bencher, policy: &str) {
        let path = scratch(&format!("throughput-{policy}"));
        let sink = JsonlAuditSink::open_with(&path, durability(policy)).unwrap();
        run(bencher, records(policy), sink);
        let _ = std::fs::remove_file(&path);
    }

    /// The same sink written one record at a time (a write and, under
    /// `every_record`, a sync per record): the pipeline before batches.
    #[divan::bench(args = ["none", "batched", "every_record"], sample_count = 5, sample_size = 1)]
    fn jsonl_one_record_at_a_time(bencher: Bencher, policy: &str) {
        let path = scratch(&format!("throughput-single-{policy}"));
        let sink = JsonlAuditSink::open_with(&path, durability(policy)).unwrap();
        run(bencher, records(policy), PerRecord(sink));
        let _ = std::fs::remove_file(&path);
    }
}

/// A sink slower than the callers: 1 ms per record (about 1,000 records/s).
struct SlowSink(MemoryAuditSink);

impl AuditSink for SlowSink {
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.0.write(record).await
    }
}

/// The JSONL sink one record at a time (the default `write_batch`, looping over
/// `write`): what the pipeline did before batches, for comparison.
struct PerRecord(JsonlAuditSink);

impl AuditSink for PerRecord {
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        self.0.write(record).await
    }

    async fn flush(&self) -> Result<(), AuditSinkError> {
        self.0.flush().await
    }
}

/// Mean call latency and dropped records per variant, for [`report`].
static LATENCY: Mutex<BTreeMap<&'static str, (Duration, u64, u64)>> = Mutex::new(BTreeMap::new());

fn report() {
    let rows = LATENCY.lock().unwrap();
    let Some(&(base, base_n, _)) = rows.get("no_audit") else {
        return;
    };
    let base_mean = base.as_secs_f64() / base_n.max(1) as f64;
    eprintln!("\nmean call latency (32 concurrent callers), ratio to no_audit:");
    for (name, &(total, n, dropped)) in rows.iter() {
        let mean = total.as_secs_f64() / n.max(1) as f64;
        eprintln!(
            "  {name:<16} {:>10.1} µs  x{:<8.2} ({n} calls, {dropped} records dropped)",
            mean * 1e6,
            mean / base_mean
        );
    }
}

/// Call latency with and without audit, and with a sink slower than the callers.
mod wait_latency {
    use super::*;

    const CALLERS: usize = 32;
    const CALLS_PER_CALLER: usize = 25;

    fn agent(which: &str) -> (rein::Agent, Option<std::sync::Arc<AuditHook>>) {
        let on_full = if which == "slow_sink_drop" {
            "drop"
        } else {
            "wait"
        };
        let config: HooksConfig = serde_json::from_value(serde_json::json!({
            "latency": {"enabled": false},
            "audit": {"enabled": which != "no_audit", "on_full": on_full}
        }))
        .unwrap();
        let services = match which {
            "jsonl" => HookServices::new().audit_sink(
                JsonlAuditSink::open_with(scratch("latency"), Durability::default()).unwrap(),
            ),
            "slow_sink_wait" | "slow_sink_drop" => {
                HookServices::new().audit_sink(SlowSink(MemoryAuditSink::bounded(16)))
            }
            _ => HookServices::new(),
        };
        let hooks = config.build_with(services).unwrap();
        let audit = hooks.audit().cloned();
        (hooks.install(base_builder()).build().unwrap(), audit)
    }

    #[divan::bench(
        args = ["no_audit", "jsonl", "slow_sink_wait", "slow_sink_drop"],
        sample_count = 5,
        sample_size = 1
    )]
    fn calls(bencher: Bencher, which: &'static str) {
        let rt = multi_thread_runtime();
        let (agent, audit) = rt.block_on(async { agent(which) });
        let total = CALLERS * CALLS_PER_CALLER;
        bencher.counter(ItemsCount::new(total)).bench_local(|| {
            let spent = rt.block_on(async {
                let callers = (0..CALLERS).map(|c| {
                    let agent = agent.clone();
                    tokio::spawn(async move {
                        let mut spent = Duration::ZERO;
                        for _ in 0..CALLS_PER_CALLER {
                            let session = format!("caller-{c}");
                            let ctx = RunContext::new().with_session_id(session.as_str());
                            let started = Instant::now();
                            let reply = agent
                                .call_with(vec![Msg::user("What is 1 + 2?")], ctx)
                                .await
                                .unwrap();
                            spent += started.elapsed();
                            agent.forget_session(&SessionKey::new(None, &session));
                            black_box(reply);
                        }
                        spent
                    })
                });
                let mut spent = Duration::ZERO;
                for h in futures::future::join_all(callers).await {
                    spent += h.unwrap();
                }
                spent
            });
            let dropped = audit.as_ref().map_or(0, |a| a.stats().dropped);
            let mut rows = LATENCY.lock().unwrap();
            let row = rows.entry(which).or_default();
            row.0 += spent;
            row.1 += total as u64;
            row.2 = dropped;
        });
        if let Some(audit) = audit {
            rt.block_on(audit.flush()).unwrap();
        }
    }
}
