//! Ordering, deduplication, interest and registries.

use std::sync::Arc;

use rein::*;

use crate::support::*;

fn two_turns() -> ScriptedModel {
    ScriptedModel::new([ScriptedTurn::text("hello there")])
}

#[tokio::test]
async fn hooks_run_in_ascending_priority() {
    let log = Log::default();
    let model = two_turns();
    let agent = builder(&model)
        .hook(Recorder::new("late", 900, &log).interest(Interest::only(EventKind::PreCall)))
        .hook(Recorder::new("early", 10, &log).interest(Interest::only(EventKind::PreCall)))
        .hook(Recorder::new("default", 100, &log).interest(Interest::only(EventKind::PreCall)))
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(
        log.entries(),
        ["early:PreCall", "default:PreCall", "late:PreCall"]
    );
}

#[tokio::test]
async fn equal_priority_hooks_run_in_registration_order() {
    let log = Log::default();
    let model = two_turns();
    let mut b = builder(&model);
    for label in ["a", "b", "c", "d"] {
        b = b.hook(Recorder::new(label, 50, &log).interest(Interest::only(EventKind::PostCall)));
    }
    let agent = b.build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(
        log.entries(),
        ["a:PostCall", "b:PostCall", "c:PostCall", "d:PostCall"]
    );
    assert_eq!(agent.hook_names(), ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn default_priority_is_100() {
    struct Plain;
    impl Hook for Plain {
        async fn on_event(&self, _e: &mut HookEvent) -> Result<(), HookError> {
            Ok(())
        }
    }
    assert_eq!(Plain.priority(), 100);
    assert_eq!(Plain.name(), "Plain");
    assert_eq!(Plain.failure_policy(), FailurePolicy::Abort);
    assert_eq!(Plain.interest(), Interest::ALL);
}

#[tokio::test]
async fn the_same_arc_registered_twice_runs_once() {
    let log = Log::default();
    let model = two_turns();
    let hook =
        Arc::new(Recorder::new("once", 100, &log).interest(Interest::only(EventKind::PreCall)));
    let agent = builder(&model)
        .hook(Arc::clone(&hook))
        .hook(Arc::clone(&hook))
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["once:PreCall"]);
}

#[tokio::test]
async fn two_distinct_values_of_one_hook_type_both_run() {
    let log = Log::default();
    let model = two_turns();
    let agent = builder(&model)
        .hook(Recorder::new("x", 100, &log).interest(Interest::only(EventKind::PreCall)))
        .hook(Recorder::new("x", 100, &log).interest(Interest::only(EventKind::PreCall)))
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["x:PreCall", "x:PreCall"]);
}

#[tokio::test]
async fn a_hook_in_a_registry_and_on_the_builder_runs_once_per_event() {
    let log = Log::default();
    let model = two_turns();
    let hook =
        Arc::new(Recorder::new("shared", 100, &log).interest(Interest::only(EventKind::PreCall)));
    let registry = HookRegistry::new();
    registry.register(Arc::clone(&hook));
    let agent = builder(&model)
        .hook(Arc::clone(&hook))
        .hooks_from(&registry)
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["shared:PreCall"]);
}

#[tokio::test]
async fn builder_hooks_run_before_registry_hooks_of_equal_priority() {
    let log = Log::default();
    let model = two_turns();
    let registry = HookRegistry::new();
    registry
        .register(Recorder::new("system", 100, &log).interest(Interest::only(EventKind::PreCall)));
    let agent = builder(&model)
        .hooks_from(&registry)
        .hook(Recorder::new("own", 100, &log).interest(Interest::only(EventKind::PreCall)))
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["own:PreCall", "system:PreCall"]);
}

#[tokio::test]
async fn a_registry_hook_added_after_build_does_not_reach_the_built_agent() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text("one"), ScriptedTurn::text("two")]);
    let registry = HookRegistry::new();
    let b = builder(&model).hooks_from(&registry);
    let before = b.clone().build().unwrap();
    registry
        .register(Recorder::new("late", 100, &log).interest(Interest::only(EventKind::PreCall)));
    let after = b.build().unwrap();
    before.call(Msg::user("hi")).await.unwrap();
    assert!(log.entries().is_empty());
    after.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["late:PreCall"]);
}

#[tokio::test]
async fn global_registry_hooks_apply_unless_opted_out() {
    // The global registry is process-wide: this hook only records events of the one
    // agent id it was made for, so other tests running in parallel are unaffected.
    let log = Log::default();
    let log2 = log.clone();
    let hook = Arc::new(
        FnHook::new("global-probe", move |e| {
            if e.agent().id == "global-probe-agent" {
                log2.push(format!("global:{}", e.kind()));
            }
            Ok(())
        })
        .on(EventKind::PreCall)
        .policy(FailurePolicy::Ignore),
    );
    let guard = HookRegistry::global().register_scoped(Arc::clone(&hook));
    let model = ScriptedModel::new([ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    let with = Agent::builder()
        .id("global-probe-agent")
        .model(model.clone())
        .build()
        .unwrap();
    let without = Agent::builder()
        .id("global-probe-agent")
        .model(model.clone())
        .without_global_hooks()
        .build()
        .unwrap();
    with.call(Msg::user("hi")).await.unwrap();
    without.call(Msg::user("hi")).await.unwrap();
    drop(guard);
    assert_eq!(log.entries(), ["global:PreCall"]);
}

#[tokio::test]
async fn a_hook_not_subscribed_to_reasoning_chunk_is_never_called_for_it() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text(
        "a fairly long answer streamed in many chunks",
    )]);
    let agent = builder(&model)
        .hook(Recorder::new("quiet", 100, &log).interest(Interest::LIFECYCLE))
        .hook(
            Recorder::new("chunky", 100, &log).interest(Interest::only(EventKind::ReasoningChunk)),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    let entries = log.entries();
    assert!(entries.iter().all(|e| e != "quiet:ReasoningChunk"));
    assert!(log.count("chunky:ReasoningChunk") >= 2, "{entries:?}");
    assert!(
        entries
            .iter()
            .all(|e| e.starts_with("chunky:ReasoningChunk") || e.starts_with("quiet:"))
    );
    assert_eq!(log.count("quiet:PreCall"), 1);
}

#[tokio::test]
async fn a_simple_call_fires_the_lifecycle_events_in_loop_order() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", serde_json::json!({"a": 1, "b": 2})),
        ScriptedTurn::text("3"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(Recorder::new("r", 100, &log).interest(Interest::LIFECYCLE))
        .build()
        .unwrap();
    agent.call(Msg::user("1+2?")).await.unwrap();
    assert_eq!(
        log.entries(),
        [
            "r:PreCall",
            "r:PreReasoning",
            "r:PostReasoning",
            "r:PreActing",
            "add:1+2",
            "r:PostActing",
            "r:PreReasoning",
            "r:PostReasoning",
            "r:PostCall",
        ]
    );
}

#[tokio::test]
async fn building_twice_from_one_builder_gives_identical_hook_lists() {
    let log = Log::default();
    let model = two_turns();
    let b = builder(&model)
        .hook(Recorder::new("a", 5, &log))
        .hook(Recorder::new("b", 1, &log));
    let first = b.clone().build().unwrap();
    let second = b.build().unwrap();
    assert_eq!(first.hook_names(), ["b", "a"]);
    assert_eq!(first.hook_names(), second.hook_names());
    assert_ne!(first.info().id, second.info().id);
}

#[tokio::test]
async fn every_event_carries_the_agent_identity_and_run_context() {
    let log = Log::default();
    let log2 = log.clone();
    let model = two_turns();
    let agent = builder(&model)
        .id("agent-7")
        .name("helper")
        .hook(FnHook::new("ids", move |e| {
            log2.push(format!(
                "{}|{}|{:?}|{}|{}|{:?}|{}",
                e.agent().id,
                e.agent().name,
                e.agent().parent_id,
                e.agent().depth,
                e.context().session_id(),
                e.context().user_id(),
                e.context().run_id()
            ));
            Ok(())
        }))
        .build()
        .unwrap();
    let ctx = RunContext::new()
        .with_session_id("s1")
        .with_user_id("u1")
        .with_run_id("run-1");
    agent.call_with(vec![Msg::user("hi")], ctx).await.unwrap();
    let entries = log.entries();
    assert!(entries.len() >= 4);
    for e in entries {
        assert_eq!(e, "agent-7|helper|None|0|s1|Some(\"u1\")|run-1");
    }
}

#[tokio::test]
async fn hooks_keep_per_run_state_in_the_run_context_extensions() {
    use std::sync::atomic::{AtomicU32, Ordering};
    #[derive(Default)]
    struct Counter(AtomicU32);
    let log = Log::default();
    let log2 = log.clone();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", serde_json::json!({"a": 1, "b": 1})),
        ScriptedTurn::text("done"),
        ScriptedTurn::text("again"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(FnHook::new("count", move |e| {
            match e.kind() {
                EventKind::PreReasoning => {
                    e.context()
                        .extensions()
                        .get_or_insert_with(Counter::default)
                        .0
                        .fetch_add(1, Ordering::SeqCst);
                }
                EventKind::PostCall => {
                    let n = e
                        .context()
                        .extensions()
                        .get::<Counter>()
                        .unwrap()
                        .0
                        .load(Ordering::SeqCst);
                    log2.push(format!("reasoning steps: {n}"));
                }
                _ => {}
            }
            Ok(())
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("a")).await.unwrap();
    agent.call(Msg::user("b")).await.unwrap();
    let entries: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.starts_with("reasoning"))
        .collect();
    assert_eq!(entries, ["reasoning steps: 2", "reasoning steps: 1"]);
}
