//! LatencyHook: segments, pairing by tool-call id, outcomes, percentiles, no leaks.

use std::sync::Arc;
use std::time::Duration;

use rein::hooks::{LatencyConfig, LatencyHook, LatencySeries, Outcome, Segment, TtftMode};
use rein::*;
use serde_json::json;

use crate::support::*;

fn latency() -> Arc<LatencyHook> {
    Arc::new(LatencyHook::default())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Within the histogram's precision (two significant digits).
fn about(actual: Duration, expected: Duration) -> bool {
    let (a, e) = (actual.as_secs_f64(), expected.as_secs_f64());
    (a - e).abs() <= e * 0.01 + 1e-6
}

/// The series of `segment` (tool label, outcome) after one call of `model` with `add`.
async fn series_after_call(
    hook: &Arc<LatencyHook>,
    model: &ScriptedModel,
    segment: Segment,
    tool: Option<&str>,
    outcome: Outcome,
) -> LatencySeries {
    let log = Log::default();
    let agent = builder_with_tools(model, vec![add_tool(&log), slow_tool()])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    hook.snapshot()
        .get(segment, tool, outcome)
        .cloned()
        .unwrap()
}

/// Calls `add` once, then fails while streaming its second answer (a stateless model,
/// so thousands of calls need no script).
struct HalfwayModel;

impl Model for HalfwayModel {
    fn name(&self) -> &str {
        "halfway"
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let after_tool = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Tool);
        let chunks = if after_tool {
            vec![
                Ok(ModelChunk::Text("partial ".into())),
                Err(ModelError::new(ModelErrorKind::Server, "boom")),
            ]
        } else {
            vec![
                Ok(ModelChunk::ToolCall {
                    index: 0,
                    id: Some("c1".into()),
                    name: Some("add".into()),
                    arguments: r#"{"a": 1, "b": 2}"#.into(),
                }),
                Ok(ModelChunk::Finish(FinishReason::ToolCalls)),
            ]
        };
        Box::pin(futures::stream::iter(chunks))
    }
}

#[tokio::test]
async fn a_successful_call_records_one_end_to_end_sample_and_one_per_reasoning_step() {
    let log = Log::default();
    let model = tool_then_text("add", json!({"a": 1, "b": 2}), "3");
    let hook = latency();
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("1+2")).await.unwrap();
    let snap = hook.snapshot();
    assert_eq!(snap.count(Segment::E2e), 1);
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Ok), 1);
    assert_eq!(snap.count(Segment::Reasoning), 2);
    assert_eq!(snap.count(Segment::Ttft), 1);
    let tool = snap.get(Segment::Tool, Some("add"), Outcome::Ok).unwrap();
    assert_eq!(tool.count, 1);
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_of_the_same_tool_are_paired_by_id_as_separate_samples() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("slow", json!({"ms": 100})),
            ("slow", json!({"ms": 300})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let tool =
        series_after_call(&latency(), &model, Segment::Tool, Some("slow"), Outcome::Ok).await;
    assert_eq!(tool.count, 2, "one sample per call id, no collision");
    // The batch ran concurrently: both segments end when the batch's results are
    // handed to PostActing, after the slower call.
    assert!(about(tool.max, ms(300)), "{tool:?}");
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_keep_separate_timers() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("a").with_delay(ms(100)),
        ScriptedTurn::text("b").with_delay(ms(300)),
    ]);
    let hook = latency();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let (a, b) = tokio::join!(
        agent.call_with(vec![Msg::user("a")], session("one")),
        agent.call_with(vec![Msg::user("b")], session("two")),
    );
    a.unwrap();
    b.unwrap();
    let e2e = hook
        .snapshot()
        .get(Segment::E2e, None, Outcome::Ok)
        .cloned()
        .unwrap();
    assert_eq!(e2e.count, 2);
    assert!(about(e2e.min, ms(100)), "{e2e:?}");
    assert!(about(e2e.max, ms(300)), "{e2e:?}");
}

#[tokio::test]
async fn a_failed_call_records_its_segments_with_outcome_error() {
    let model = ScriptedModel::new([ScriptedTurn::text("half an answer")
        .with_error_mid_stream(ModelError::new(ModelErrorKind::Server, "boom"))]);
    let hook = latency();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap_err();
    let snap = hook.snapshot();
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Error), 1);
    assert_eq!(snap.count_outcome(Segment::Reasoning, Outcome::Error), 1);
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Ok), 0);
}

#[tokio::test]
async fn after_ten_thousand_calls_that_fail_midway_no_per_call_state_remains() {
    let log = Log::default();
    let hook = latency();
    let agent = Agent::builder()
        .model(HalfwayModel)
        .without_global_hooks()
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(hook.clone())
        .build()
        .unwrap();
    for i in 0..10_000 {
        let ctx = session(&format!("s{i}"));
        let kept = ctx.clone();
        agent
            .call_with(vec![Msg::user("1+2")], ctx)
            .await
            .unwrap_err();
        assert!(kept.extensions().is_empty(), "call {i} left state behind");
        agent.forget_session(&key(&format!("s{i}")));
    }
    let snap = hook.snapshot();
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Error), 10_000);
    assert_eq!(
        snap.count_outcome(Segment::Reasoning, Outcome::Error),
        10_000
    );
    assert_eq!(snap.count_outcome(Segment::Reasoning, Outcome::Ok), 10_000);
    assert_eq!(snap.count_outcome(Segment::Tool, Outcome::Ok), 10_000);
    assert_eq!(snap.count(Segment::Ttft), 10_000);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_records_outcome_cancelled_when_its_context_is_dropped() {
    let model = ScriptedModel::new([ScriptedTurn::text("late").with_delay(ms(1_000))]);
    let hook = latency();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    let timed_out = tokio::time::timeout(ms(10), agent.call(Msg::user("hi"))).await;
    assert!(timed_out.is_err());
    let snap = hook.snapshot();
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Cancelled), 1);
    assert_eq!(
        snap.count_outcome(Segment::Reasoning, Outcome::Cancelled),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn time_to_first_token_is_recorded_once_per_call_from_its_start() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2}))
            .with_text("Adding.")
            .with_delay(ms(200)),
        ScriptedTurn::text("3").with_delay(ms(50)),
    ]);
    let ttft = series_after_call(&latency(), &model, Segment::Ttft, None, Outcome::Ok).await;
    assert_eq!(ttft.count, 1);
    assert!(about(ttft.max, ms(200)), "{ttft:?}");
}

#[tokio::test(start_paused = true)]
async fn first_text_mode_ignores_tool_call_chunks() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_delay(ms(100)),
        ScriptedTurn::text("3").with_delay(ms(100)),
    ]);
    let hook = Arc::new(LatencyHook::new(LatencyConfig {
        ttft: TtftMode::FirstText,
        ..LatencyConfig::default()
    }));
    let ttft = series_after_call(&hook, &model, Segment::Ttft, None, Outcome::Ok).await;
    assert!(about(ttft.max, ms(200)), "{ttft:?}");
}

#[tokio::test]
async fn without_any_model_chunk_ttft_is_not_recorded_but_end_to_end_is() {
    let model = ScriptedModel::new([ScriptedTurn::error(ModelError::new(
        ModelErrorKind::RateLimit,
        "slow down",
    ))]);
    let hook = latency();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap_err();
    let snap = hook.snapshot();
    assert_eq!(snap.count(Segment::Ttft), 0);
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Error), 1);
}

#[tokio::test]
async fn the_summary_step_records_one_summary_sample() {
    let log = Log::default();
    let model = tool_then_text(
        "add",
        json!({"a": 1, "b": 2}),
        "I ran out of steps; the sum is 3.",
    );
    let hook = latency();
    let agent = builder(&model)
        .max_iters(1)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("1+2")).await.unwrap();
    let snap = hook.snapshot();
    assert_eq!(snap.count_outcome(Segment::Summary, Outcome::Ok), 1);
    assert_eq!(snap.count_outcome(Segment::E2e, Outcome::Ok), 1);
}

#[tokio::test]
async fn a_denied_tool_call_is_recorded_with_outcome_denied() {
    let log = Log::default();
    let model = tool_then_text("add", json!({"a": 1, "b": 2}), "denied");
    let hook = latency();
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .hook(hook.clone())
        .hook(
            FnHook::new("deny", |e| {
                if let HookEvent::PreActing(e) = e {
                    e.deny("no");
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("1+2")).await.unwrap();
    let snap = hook.snapshot();
    assert_eq!(
        snap.get(Segment::Tool, Some("add"), Outcome::Denied)
            .map(|s| s.count),
        Some(1)
    );
}

#[tokio::test]
async fn tool_labels_beyond_the_cap_are_recorded_as_other() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("add", json!({"a": 1, "b": 2})),
            ("slow", json!({"ms": 0})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let hook = Arc::new(LatencyHook::new(LatencyConfig {
        max_tool_labels: 1,
        ..LatencyConfig::default()
    }));
    let agent = builder_with_tools(&model, vec![add_tool(&log), slow_tool()])
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let snap = hook.snapshot();
    assert!(snap.get(Segment::Tool, Some("add"), Outcome::Ok).is_some());
    assert!(
        snap.get(Segment::Tool, Some("other"), Outcome::Ok)
            .is_some()
    );
    assert!(snap.get(Segment::Tool, Some("slow"), Outcome::Ok).is_none());
}

#[tokio::test(start_paused = true)]
async fn snapshot_percentiles_come_from_the_recorded_samples() {
    let model = ScriptedModel::new((1..=100).map(|i| ScriptedTurn::text("ok").with_delay(ms(i))));
    let hook = latency();
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    for i in 0..100 {
        agent
            .call_with(vec![Msg::user("hi")], session(&format!("s{i}")))
            .await
            .unwrap();
    }
    let e2e = hook
        .snapshot()
        .get(Segment::E2e, None, Outcome::Ok)
        .cloned()
        .unwrap();
    assert_eq!(e2e.count, 100);
    assert!(about(e2e.p50, ms(50)), "{e2e:?}");
    assert!(about(e2e.p95, ms(95)), "{e2e:?}");
    assert!(about(e2e.p99, ms(99)), "{e2e:?}");
    assert!(about(e2e.min, ms(1)), "{e2e:?}");
    assert!(about(e2e.max, ms(100)), "{e2e:?}");
    let table = hook.snapshot().to_string();
    assert!(table.contains("e2e") && table.contains("p95 ms"), "{table}");
    hook.reset();
    assert!(hook.snapshot().is_empty());
}

#[tokio::test]
async fn a_disabled_latency_hook_subscribes_to_nothing_and_records_nothing() {
    let model = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let hook = Arc::new(LatencyHook::new(LatencyConfig {
        enabled: false,
        ..LatencyConfig::default()
    }));
    assert_eq!(SyncHook::interest(&*hook), Interest::NONE);
    let agent = builder(&model).hook(hook.clone()).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert!(hook.snapshot().is_empty());
}

#[test]
fn the_latency_hook_runs_at_priority_50_and_never_fails_a_call() {
    let hook = LatencyHook::default();
    assert_eq!(SyncHook::priority(&hook), 50);
    assert_eq!(SyncHook::failure_policy(&hook), FailurePolicy::Ignore);
}

#[cfg(feature = "metrics")]
mod metrics_export {
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };

    use super::*;

    type Samples = Arc<Mutex<Vec<(String, Vec<(String, String)>, f64)>>>;

    struct Capture {
        key: Key,
        samples: Samples,
    }

    impl HistogramFn for Capture {
        fn record(&self, value: f64) {
            let labels = self
                .key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            self.samples
                .lock()
                .unwrap()
                .push((self.key.name().to_owned(), labels, value));
        }
    }

    struct TestRecorder(Samples);

    impl Recorder for TestRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Capture {
                key: key.clone(),
                samples: self.0.clone(),
            }))
        }
    }

    #[tokio::test]
    async fn with_the_metrics_feature_every_sample_is_exported_through_the_facade() {
        let samples: Samples = Arc::default();
        let recorder = TestRecorder(samples.clone());
        // Thread-local: the current-thread test runtime records on this thread.
        let _guard = metrics::set_default_local_recorder(&recorder);
        let log = Log::default();
        let model = tool_then_text("add", json!({"a": 1, "b": 2}), "3");
        let hook = Arc::new(LatencyHook::new(LatencyConfig {
            metric_prefix: "test.metrics_export".into(),
            ..LatencyConfig::default()
        }));
        let agent = builder_with_tools(&model, vec![add_tool(&log)])
            .hook(hook)
            .build()
            .unwrap();
        agent.call(Msg::user("1+2")).await.unwrap();
        let got = samples.lock().unwrap().clone();
        let ours: Vec<_> = got
            .iter()
            .filter(|(name, _, _)| name.starts_with("test.metrics_export."))
            .collect();
        let names: Vec<&str> = ours.iter().map(|(n, _, _)| n.as_str()).collect();
        for segment in ["e2e", "reasoning", "tool", "ttft"] {
            assert!(
                names.contains(&format!("test.metrics_export.{segment}").as_str()),
                "{names:?}"
            );
        }
        let (_, labels, _) = ours
            .iter()
            .find(|(n, _, _)| n == "test.metrics_export.tool")
            .unwrap();
        assert!(
            labels.contains(&("tool".into(), "add".into())),
            "{labels:?}"
        );
        assert!(
            labels.contains(&("outcome".into(), "ok".into())),
            "{labels:?}"
        );
        assert!(labels.contains(&("depth".into(), "0".into())), "{labels:?}");
        assert!(labels.iter().any(|(k, _)| k == "agent"), "{labels:?}");
    }
}
