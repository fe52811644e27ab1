//! LatencyHook per agent: samples labelled by agent name and depth, a top-level view
//! that counts user calls, per-agent views.

use std::sync::Arc;
use std::time::Duration;

use rein::hooks::{LatencyAgent, LatencyConfig, LatencyHook, Outcome, Segment};
use rein::*;
use serde_json::json;

use crate::support::*;

fn helper() -> SubagentDeclaration {
    SubagentDeclaration::builder("helper")
        .description("the helper subagent")
        .tools(["add"])
        .build()
        .unwrap()
}

/// A parent `boss` that delegates once to `helper` (which answers after `child_ms`),
/// then answers itself after `parent_ms`; one user call, under `hook`.
async fn delegate_once(hook: &Arc<LatencyHook>, child_ms: u64, parent_ms: u64) {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "helper", "task": "add"})),
        ScriptedTurn::text("child done").with_delay(Duration::from_millis(child_ms)),
        ScriptedTurn::text("parent done").with_delay(Duration::from_millis(parent_ms)),
    ]);
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .name("boss")
        .subagent(helper())
        .hook(hook.clone())
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(reply.text(), "parent done");
}

#[tokio::test]
async fn one_user_call_that_delegates_counts_one_top_level_e2e_sample_and_one_child_sample() {
    let hook = Arc::new(LatencyHook::default());
    delegate_once(&hook, 0, 0).await;
    let top = hook.snapshot();
    assert_eq!(top.count(Segment::E2e), 1, "{top}");
    assert_eq!(top.count(Segment::Reasoning), 2, "{top}");
    assert_eq!(
        top.get(Segment::Tool, Some(SPAWN_TOOL), Outcome::Ok)
            .map(|s| s.count),
        Some(1)
    );
    let child = hook.snapshot_agent("helper", 1);
    assert_eq!(child.count(Segment::E2e), 1, "{child}");
    assert_eq!(child.count(Segment::Reasoning), 1, "{child}");
    assert_eq!(child.count(Segment::Tool), 0, "{child}");
    let all = hook.snapshot_all();
    assert_eq!(all.count(Segment::E2e), 2, "{all}");
    assert_eq!(all.count(Segment::Reasoning), 3, "{all}");
}

#[tokio::test(start_paused = true)]
async fn latency_samples_are_labelled_by_agent_name_and_depth() {
    let hook = Arc::new(LatencyHook::default());
    delegate_once(&hook, 300, 10).await;
    assert_eq!(
        hook.agents(),
        [LatencyAgent::new("boss", 0), LatencyAgent::new("helper", 1)]
    );
    let e2e =
        |s: &rein::hooks::LatencySnapshot| s.get(Segment::E2e, None, Outcome::Ok).unwrap().p50;
    let (top, child) = (hook.snapshot(), hook.snapshot_agent("boss", 0));
    assert_eq!(top, child, "the top-level view is boss's own here");
    // The parent's call includes the child's 300 ms and its own 10 ms; the child's
    // is the child's alone: the top-level median is not the child's.
    let (parent_ms, child_ms) = (
        e2e(&top).as_millis(),
        e2e(&hook.snapshot_agent("helper", 1)).as_millis(),
    );
    assert!((308..=315).contains(&parent_ms), "{parent_ms}");
    assert!((298..=303).contains(&child_ms), "{child_ms}");
    assert!(hook.snapshot_agent("helper", 0).is_empty());
    assert!(hook.snapshot_agent("nobody", 1).is_empty());
}

#[tokio::test]
async fn agents_beyond_the_label_cap_are_recorded_as_other_at_their_depth() {
    let hook = Arc::new(LatencyHook::new(LatencyConfig {
        max_agent_labels: 1,
        ..LatencyConfig::default()
    }));
    delegate_once(&hook, 0, 0).await;
    assert_eq!(
        hook.agents(),
        [LatencyAgent::new("boss", 0), LatencyAgent::new("other", 1)]
    );
    assert_eq!(hook.snapshot_agent("other", 1).count(Segment::E2e), 1);
    assert_eq!(hook.snapshot().count(Segment::E2e), 1);
}

#[tokio::test]
async fn reset_forgets_the_samples_of_every_agent_and_recording_goes_on() {
    let hook = Arc::new(LatencyHook::default());
    delegate_once(&hook, 0, 0).await;
    hook.reset();
    assert!(hook.snapshot_all().is_empty());
    assert!(hook.agents().is_empty());
    delegate_once(&hook, 0, 0).await;
    assert_eq!(hook.snapshot().count(Segment::E2e), 1);
    assert_eq!(hook.snapshot_agent("helper", 1).count(Segment::E2e), 1);
}
