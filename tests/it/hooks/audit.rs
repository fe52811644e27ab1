//! AuditHook: structured records for tool calls, denials, redos, final answers and
//! errors; masking; sinks and their failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein::hooks::{
    AuditConfig, AuditHook, AuditKind, AuditRecord, AuditSink, AuditSinkError, AuditStats,
    AuditStatus, JsonlAuditSink, MemoryAuditSink, QueueFull, SelfCorrectionConfig,
    SelfCorrectionHook, SensitiveDataMasker,
};
use rein::*;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::*;

fn audit_with(config: AuditConfig, sink: impl AuditSink) -> Arc<AuditHook> {
    Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..config
        },
        SensitiveDataMasker::default(),
        Arc::new(sink),
    ))
}

fn audit(sink: &MemoryAuditSink) -> Arc<AuditHook> {
    audit_with(AuditConfig::default(), sink.clone())
}

/// Fails every write.
struct FailingSink(Arc<AtomicUsize>);

impl AuditSink for FailingSink {
    async fn write(&self, _: AuditRecord) -> Result<(), AuditSinkError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(AuditSinkError::new("disk full"))
    }
}

/// Waits for a permit before each write.
struct GatedSink {
    gate: Arc<Semaphore>,
    inner: MemoryAuditSink,
}

impl AuditSink for GatedSink {
    async fn write(&self, r: AuditRecord) -> Result<(), AuditSinkError> {
        let permit = self.gate.acquire().await;
        drop(permit);
        self.inner.write(r).await
    }
}

/// Runs one call in which the model calls `queryOrder` with `args`, then answers
/// `answer`, under an audit hook with `config`; returns the flushed records.
async fn audited_query(
    config: AuditConfig,
    args: serde_json::Value,
    answer: &str,
) -> Vec<AuditRecord> {
    let log = Log::default();
    let sink = MemoryAuditSink::new();
    let hook = audit_with(config, sink.clone());
    let model = tool_then_text("queryOrder", args, answer);
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("查")).await.unwrap();
    hook.flush().await.unwrap();
    sink.records()
}

#[tokio::test]
async fn an_executed_tool_call_is_audited_with_ids_json_args_status_and_duration() {
    let log = Log::default();
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            "submitRefund",
            json!({"amount": 20, "phone": "13800138000"}),
        ),
        ScriptedTurn::text("已提交"),
    ]);
    let agent = builder(&model)
        .name("cs")
        .toolkit(toolkit_with(vec![refund_tool(&log)]))
        .hook(hook.clone())
        .build()
        .unwrap();
    let ctx = session("s1").with_user_id("u1");
    let run_id = ctx.run_id().to_owned();
    agent.call_with(vec![Msg::user("退款")], ctx).await.unwrap();
    hook.flush().await.unwrap();
    let records = sink.records();
    assert_eq!(sink.kinds(), [AuditKind::ToolCall, AuditKind::FinalAnswer]);
    let r = &records[0];
    assert_eq!(r.agent, "cs");
    assert_eq!(r.agent_id, agent.info().id);
    assert_eq!(r.session_id, "s1");
    assert_eq!(r.user_id.as_deref(), Some("u1"));
    assert_eq!(r.run_id, run_id);
    let stored = agent.messages(&SessionKey::new(Some("u1"), "s1")).await;
    assert_eq!(
        r.tool_call_id.as_deref(),
        Some(stored[1].tool_uses()[0].id.as_str()),
        "the audited id is the call's id in memory"
    );
    assert_eq!(r.tool.as_deref(), Some("submitRefund"));
    assert_eq!(r.args, Some(json!({"amount": 20, "phone": "***"})));
    assert_eq!(r.status, Some(AuditStatus::Ok));
    assert!(r.duration_ms.is_some());
    assert_eq!(r.stop_requested, Some(false));
    // The tool itself got the real number.
    assert!(log.entries()[0].contains("13800138000"));
    let line = r.to_json_line();
    assert!(line.starts_with(r#"{"type":"tool-call""#), "{line}");
}

#[tokio::test]
async fn final_answers_and_errors_are_audited_and_the_error_text_is_masked() {
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let model = ScriptedModel::new([
        ScriptedTurn::text("已受理，电话 13800138000"),
        ScriptedTurn::error(ModelError::new(
            ModelErrorKind::Server,
            "boom for 13800138000",
        )),
    ]);
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    agent.call(Msg::user("a")).await.unwrap();
    agent.call(Msg::user("b")).await.unwrap_err();
    hook.flush().await.unwrap();
    let records = sink.records();
    assert_eq!(sink.kinds(), [AuditKind::FinalAnswer, AuditKind::Error]);
    assert_eq!(records[0].answer.as_deref(), Some("已受理，电话 ***"));
    assert_eq!(records[0].stop_reason.as_deref(), Some("final"));
    let error = records[1].error.as_deref().unwrap();
    assert!(error.contains("boom for ***"), "{error}");
    assert_eq!(records[1].error_kind.as_deref(), Some("Model"));
}

#[tokio::test]
async fn mask_args_and_mask_answer_are_separate_switches() {
    let config = AuditConfig {
        mask_args: false,
        mask_answer: true,
        ..AuditConfig::default()
    };
    let args = json!({"order_id": "20260613001", "phone": 13800138000u64});
    let records = audited_query(config, args.clone(), "联系 13800138000").await;
    assert_eq!(records[0].args, Some(args));
    assert_eq!(records[1].answer.as_deref(), Some("联系 ***"));
}

#[tokio::test]
async fn numbers_in_arguments_that_hold_personal_data_are_masked_as_strings() {
    let args =
        json!({"order_id": "20260613001", "phone": 13800138000u64, "items": [{"email": "a@b.cn"}]});
    let records = audited_query(AuditConfig::default(), args, "ok").await;
    assert_eq!(
        records[0].args,
        Some(json!({"order_id": "20260613001", "phone": "***", "items": [{"email": "***"}]}))
    );
}

#[tokio::test]
async fn a_call_denied_before_it_ran_is_audited_with_reason_and_hook() {
    let log = Log::default();
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let model = tool_then_text("submitRefund", json!({"amount": 20}), "需要人工");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(hook.clone())
        .hook(
            FnHook::new("Policy", |e| {
                if let HookEvent::PreActing(e) = e {
                    e.deny("refunds for 13800138000 need a human");
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    hook.flush().await.unwrap();
    assert!(log.entries().is_empty());
    let records = sink.records();
    assert_eq!(
        sink.kinds(),
        [AuditKind::ToolDenied, AuditKind::FinalAnswer]
    );
    let r = &records[0];
    assert_eq!(r.status, Some(AuditStatus::Denied));
    assert_eq!(r.denied_by.as_deref(), Some("Policy"));
    assert_eq!(r.reason.as_deref(), Some("refunds for *** need a human"));
    assert_eq!(r.duration_ms, None);
}

#[tokio::test]
async fn a_failing_sink_counts_every_dropped_record_and_never_fails_the_call() {
    let log = Log::default();
    let attempts = Arc::new(AtomicUsize::new(0));
    let hook = audit_with(AuditConfig::default(), FailingSink(attempts.clone()));
    let model = tool_then_text("queryOrder", json!({"order_id": "A"}), "ok");
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("查")).await.unwrap();
    assert_eq!(reply.text(), "ok");
    hook.flush().await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let stats = hook.stats();
    assert_eq!(stats.dropped, 2);
    assert_eq!(stats.written, 0);
}

/// An audit hook with a one-record queue in front of a sink that waits for permits,
/// and an agent with four scripted answers.
fn gated(on_full: QueueFull) -> (Arc<Semaphore>, MemoryAuditSink, Arc<AuditHook>, Agent) {
    let gate = Arc::new(Semaphore::new(0));
    let sink = MemoryAuditSink::new();
    let hook = audit_with(
        AuditConfig {
            queue_capacity: 1,
            on_full,
            ..AuditConfig::default()
        },
        GatedSink {
            gate: gate.clone(),
            inner: sink.clone(),
        },
    );
    let model = ScriptedModel::new((0..4).map(|_| ScriptedTurn::text("ok")));
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    (gate, sink, hook, agent)
}

#[tokio::test]
async fn with_on_full_drop_a_full_queue_drops_and_counts_records_without_blocking() {
    let (gate, sink, hook, agent) = gated(QueueFull::Drop);
    for _ in 0..4 {
        agent.call(Msg::user("hi")).await.unwrap();
        tokio::task::yield_now().await;
    }
    gate.add_permits(100);
    hook.flush().await.unwrap();
    let stats = hook.stats();
    // At most one record in the writer and one in the queue: the rest are counted.
    assert!(stats.dropped >= 2, "{stats:?}");
    assert_eq!(stats.written + stats.dropped, 4, "{stats:?}");
    assert_eq!(sink.records().len() as u64, stats.written);
}

#[tokio::test]
async fn with_on_full_wait_a_full_queue_applies_backpressure_and_loses_nothing() {
    let (gate, sink, hook, agent) = gated(QueueFull::Wait);
    let calls = async {
        for i in 0..4 {
            agent
                .call_with(vec![Msg::user("hi")], session(&format!("s{i}")))
                .await
                .unwrap();
        }
    };
    let release = async {
        for _ in 0..4 {
            tokio::task::yield_now().await;
            gate.add_permits(1);
        }
    };
    tokio::join!(calls, release);
    hook.flush().await.unwrap();
    assert_eq!(hook.stats().dropped, 0);
    assert_eq!(sink.records().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_record_abandoned_by_a_hook_timeout_while_waiting_is_counted_as_dropped() {
    let gate = Arc::new(Semaphore::new(0));
    let sink = MemoryAuditSink::new();
    let hook = audit_with(
        AuditConfig {
            queue_capacity: 1,
            ..AuditConfig::default()
        },
        GatedSink {
            gate: gate.clone(),
            inner: sink.clone(),
        },
    );
    let model = ScriptedModel::new((0..3).map(|_| ScriptedTurn::text("ok")));
    let agent = builder(&model)
        .hook_timeout(std::time::Duration::from_millis(100))
        .hook(hook.clone())
        .build()
        .unwrap();
    for _ in 0..3 {
        // The audit hook ignores its own failures: every call succeeds.
        agent.call(Msg::user("hi")).await.unwrap();
    }
    gate.add_permits(100);
    hook.flush().await.unwrap();
    let stats = hook.stats();
    assert!(stats.dropped >= 1, "{stats:?}");
    assert_eq!(stats.written + stats.dropped, 3, "{stats:?}");
}

#[tokio::test]
async fn the_jsonl_sink_writes_one_escaped_object_per_line_and_flush_loses_nothing() {
    let dir = TempDir::new("audit-jsonl");
    let path = dir.path().join("audit.jsonl");
    let hook = audit_with(AuditConfig::default(), JsonlAuditSink::open(&path).unwrap());
    let model = ScriptedModel::new(
        (0..20).map(|i| ScriptedTurn::text(format!("第{i}行\n下一行 \"引号\""))),
    );
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    for i in 0..20 {
        agent
            .call_with(vec![Msg::user("hi")], session(&format!("s{i}")))
            .await
            .unwrap();
    }
    hook.flush().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20);
    for (i, line) in lines.iter().enumerate() {
        let r: AuditRecord = serde_json::from_str(line).unwrap();
        assert_eq!(r.kind, AuditKind::FinalAnswer);
        assert_eq!(r.answer, Some(format!("第{i}行\n下一行 \"引号\"")));
    }
    assert_eq!(hook.stats().written, 20);
}

#[tokio::test]
async fn a_zero_capacity_queue_writes_before_the_hook_returns() {
    let sink = MemoryAuditSink::new();
    let hook = audit_with(
        AuditConfig {
            queue_capacity: 0,
            ..AuditConfig::default()
        },
        sink.clone(),
    );
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let agent = builder(&model).hook(hook).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(sink.kinds(), [AuditKind::FinalAnswer]);
}

#[tokio::test]
async fn a_self_correction_is_audited_and_an_exhausted_budget_flags_the_final_answer() {
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let model = ScriptedModel::new([
        ScriptedTurn::text("已为您退款 500 元"),
        ScriptedTurn::text("款项已退，请查收"),
    ]);
    let agent = builder(&model)
        .hook(SelfCorrectionHook::new(SelfCorrectionConfig {
            enabled: true,
            ..SelfCorrectionConfig::default()
        }))
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("退款")).await.unwrap();
    hook.flush().await.unwrap();
    let records = sink.records();
    assert_eq!(
        sink.kinds(),
        [AuditKind::ReasoningRedone, AuditKind::FinalAnswer]
    );
    assert_eq!(records[0].answer.as_deref(), Some("已为您退款 500 元"));
    // The default (system) correction is a re-ask turn the conversation never keeps;
    // the audit records it as the reason, and the flag says which hook redid the turn.
    assert!(
        records[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("系统纠正"))
    );
    assert_eq!(records[0].flags, ["self_corrected"]);
    assert_eq!(records[1].flags, ["self_correction_exhausted"]);
}

#[tokio::test]
async fn per_call_audit_state_is_removed_when_the_call_ends() {
    let log = Log::default();
    let sink = MemoryAuditSink::new();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("queryOrder", json!({"order_id": "A"})),
        ScriptedTurn::error(ModelError::new(ModelErrorKind::Server, "boom")),
    ]);
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(audit(&sink))
        .build()
        .unwrap();
    let ctx = RunContext::new();
    agent
        .call_with(vec![Msg::user("查")], ctx.clone())
        .await
        .unwrap_err();
    assert!(ctx.extensions().is_empty());
}

#[test]
fn audit_runs_at_priority_850_and_never_fails_a_call() {
    let hook = audit(&MemoryAuditSink::new());
    assert_eq!(Hook::priority(&*hook), 850);
    assert_eq!(Hook::failure_policy(&*hook), FailurePolicy::Ignore);
    let off = AuditHook::new(
        AuditConfig::default(),
        SensitiveDataMasker::default(),
        Arc::new(MemoryAuditSink::new()),
    );
    assert_eq!(Hook::interest(&off), Interest::NONE);
}

#[tokio::test]
async fn a_bounded_memory_sink_keeps_only_the_newest_records() {
    let sink = MemoryAuditSink::bounded(3);
    let hook = audit(&sink);
    let model = ScriptedModel::new((0..5).map(|i| ScriptedTurn::text(format!("answer {i}"))));
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    for i in 0..5 {
        agent
            .call_with(vec![Msg::user("hi")], session(&format!("s{i}")))
            .await
            .unwrap();
    }
    hook.flush().await.unwrap();
    assert_eq!(hook.stats().written, 5);
    assert_eq!(sink.len(), 3);
    let answers: Vec<_> = sink.records().into_iter().map(|r| r.answer).collect();
    assert_eq!(
        answers,
        ["answer 2", "answer 3", "answer 4"].map(|a| Some(a.to_owned()))
    );
    assert!(MemoryAuditSink::bounded(0).is_empty());
}

#[test]
fn records_left_queued_by_a_shut_down_runtime_are_written_by_the_next_flush() {
    let sink = MemoryAuditSink::new();
    let hook = audit(&sink);
    let model = ScriptedModel::new((0..3).map(|i| ScriptedTurn::text(format!("answer {i}"))));
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    {
        // The writer task is spawned on this runtime; the calls complete without
        // yielding to it, and the runtime is then dropped with the task.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for i in 0..3 {
            rt.block_on(agent.call_with(vec![Msg::user("hi")], session(&format!("s{i}"))))
                .unwrap();
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A flush on another runtime neither hangs nor loses what was still queued.
    rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(5), hook.flush())
            .await
            .expect("flush must not hang")
            .unwrap();
    });
    let stats = hook.stats();
    assert_eq!(stats.written + stats.dropped, 3, "{stats:?}");
    assert_eq!(sink.len() as u64, stats.written);
    assert_eq!(stats.dropped, 0, "{stats:?}");
}

#[tokio::test]
async fn records_carry_the_wall_clock_time_of_their_event() {
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let before = now_ms();
    let records = audited_query(AuditConfig::default(), json!({"id": "A1"}), "done").await;
    let after = now_ms();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert!(
            r.ts_ms >= before && r.ts_ms <= after,
            "{before} {} {after}",
            r.ts_ms
        );
    }
}

/// Notes the size of every batch it is handed (each waits for a permit), and reports
/// `results` results per batch (`None`: one per record).
struct BatchSizes {
    sizes: Arc<std::sync::Mutex<Vec<usize>>>,
    gate: Arc<Semaphore>,
    results: Option<usize>,
}

impl AuditSink for BatchSizes {
    async fn write(&self, _: AuditRecord) -> Result<(), AuditSinkError> {
        Ok(())
    }

    async fn write_batch(&self, records: Vec<AuditRecord>) -> Vec<Result<(), AuditSinkError>> {
        drop(self.gate.acquire().await);
        self.sizes.lock().unwrap().push(records.len());
        let n = self.results.unwrap_or(records.len());
        (0..n).map(|_| Ok(())).collect()
    }
}

async fn batched_run(calls: usize, results: Option<usize>) -> (Vec<usize>, AuditStats) {
    let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = Arc::new(Semaphore::new(0));
    let hook = audit_with(
        AuditConfig::default(),
        BatchSizes {
            sizes: sizes.clone(),
            gate: gate.clone(),
            results,
        },
    );
    let model = ScriptedModel::new((0..calls).map(|_| ScriptedTurn::text("ok")));
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    for i in 0..calls {
        agent
            .call_with(vec![Msg::user("hi")], session(&format!("s{i}")))
            .await
            .unwrap();
    }
    gate.add_permits(calls);
    hook.flush().await.unwrap();
    let sizes = sizes.lock().unwrap().clone();
    (sizes, hook.stats())
}

#[tokio::test]
async fn the_writer_hands_queued_records_to_the_sink_in_batches_of_at_most_256() {
    let (sizes, stats) = batched_run(300, None).await;
    assert_eq!(sizes.iter().sum::<usize>(), 300, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 256), "{sizes:?}");
    assert!(
        sizes.iter().any(|&n| n > 1),
        "records queued behind a slow write go in one batch: {sizes:?}"
    );
    assert_eq!((stats.written, stats.dropped), (300, 0));
}

#[tokio::test]
async fn a_sink_that_reports_fewer_results_than_records_has_the_rest_counted_as_dropped() {
    let (sizes, stats) = batched_run(5, Some(0)).await;
    assert_eq!(sizes.iter().sum::<usize>(), 5, "{sizes:?}");
    assert_eq!((stats.written, stats.dropped), (0, 5));
}
