//! The narrow hook boundary: closure hooks, sync hooks registered through the adapter
//! (also as shared `Arc`s), settings read as one value, and `rein::testing`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein::testing::{HookHarness, decisions};
use rein::*;
use serde_json::json;

use crate::support::*;

fn deny_refunds() -> impl SyncHook {
    hook_fn(EventKind::PreActing, |event| {
        if let HookEvent::PreActing(e) = event
            && e.tool_use().name == "submitRefund"
        {
            e.deny("refunds need a human");
        }
        Ok(())
    })
    .with_name("no_refunds")
    .with_priority(10)
}

#[tokio::test]
async fn a_closure_hook_denies_a_tool_before_it_runs_and_is_named_in_the_chain() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 5}), "ok");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(Recorder::new("later", 50, &log).interest(Interest::only(EventKind::PreActing)))
        .hook(deny_refunds())
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert_eq!(agent.hook_names(), ["no_refunds", "later"]);
    assert!(
        !log.entries().iter().any(|e| e.starts_with("refund:")),
        "the denied tool ran: {:?}",
        log.entries()
    );
    let results = results_in_request(&model, 1);
    assert!(results[0].1, "the model gets an error result");
    assert!(results[0].2.contains("refunds need a human"), "{results:?}");
}

#[test]
fn a_closure_hook_has_the_documented_defaults_and_local_only_stops_propagation() {
    let h = hook_fn(EventKind::PostCall, |_| Ok(()));
    let s = HookSettings::of_sync(&h);
    assert_eq!(&*s.name, "hook_fn");
    assert_eq!(s.priority, 100);
    assert_eq!(s.failure_policy, FailurePolicy::Abort);
    assert_eq!(s.interest, Interest::only(EventKind::PostCall));
    assert!(s.propagate_to_subagents && s.sync && s.timeout.is_none());
    let local = hook_fn(Interest::LIFECYCLE, |_| Ok(()))
        .local_only()
        .with_failure_policy(FailurePolicy::Ignore);
    let s = HookSettings::of_sync(&local);
    assert!(!s.propagate_to_subagents);
    assert_eq!(s.failure_policy, FailurePolicy::Ignore);
    assert_eq!(s.interest, Interest::LIFECYCLE);
}

#[tokio::test]
async fn a_shared_sync_hook_on_the_builder_and_in_a_registry_runs_once_per_event() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let hook = Arc::new(hook_fn(EventKind::PostCall, move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }));
    let registry = HookRegistry::new();
    registry.register(Arc::clone(&hook));
    let agent = Agent::builder()
        .model(ScriptedModel::new([ScriptedTurn::text("hi")]))
        .hook(Arc::clone(&hook))
        .hooks_from(&registry)
        .without_global_hooks()
        .build()
        .unwrap();
    agent.call(Msg::user("x")).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        registry.unregister(&hook),
        "an Arc of a sync hook unregisters"
    );
    assert!(registry.is_empty());
}

#[tokio::test]
async fn an_async_hook_settings_value_carries_its_timeout_and_is_not_sync() {
    let h = FnHook::new("slow", |_| Ok(())).timeout(std::time::Duration::from_millis(5));
    let s = HookSettings::of(&h);
    assert_eq!(s.timeout, Some(std::time::Duration::from_millis(5)));
    assert!(!s.sync);
    assert_eq!(&*s.name, "slow");
}

#[tokio::test]
async fn the_harness_runs_a_hook_on_a_pre_acting_event_without_an_agent() {
    let ctx = RunContext::new()
        .with_user_id("alice")
        .with_session_id("s9");
    let harness = HookHarness::new(deny_refunds()).unwrap().with_context(ctx);
    let mut event = harness.pre_acting(ToolUse::new("c1", "submitRefund", json!({"amount": 5})));
    harness.dispatch(&mut event).await.unwrap();
    let HookEvent::PreActing(e) = &event else {
        panic!("not PreActing")
    };
    assert!(e.is_denied());
    assert_eq!(e.denied_by(), Some("no_refunds"));
    assert_eq!(e.context().user_id(), Some("alice"));
    assert_eq!(e.agent().name, "test-agent");
    let trail = decisions(&event);
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0].hook, "no_refunds");

    let mut other = harness.pre_acting(ToolUse::new("c2", "lookup", json!({})));
    harness.dispatch(&mut other).await.unwrap();
    assert!(matches!(&other, HookEvent::PreActing(e) if !e.is_denied()));
}

#[tokio::test]
async fn the_harness_threads_rewrites_in_priority_order_across_sync_and_async_hooks() {
    // Registered out of order: the cap (priority 5, sync) runs before the check
    // (priority 20, async), which sees the capped amount.
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen_by_check = Arc::clone(&seen);
    let check = FnHook::new("check", move |event| {
        if let HookEvent::PreActing(e) = event {
            *seen_by_check.lock().unwrap() = e.tool_use().input["amount"].as_f64();
        }
        Ok(())
    })
    .priority(20)
    .on(EventKind::PreActing);
    let cap = hook_fn(EventKind::PreActing, |event| {
        if let HookEvent::PreActing(e) = event {
            let mut call = e.tool_use().clone();
            call.input["amount"] = json!(100);
            e.set_tool_use(call);
        }
        Ok(())
    })
    .with_name("cap")
    .with_priority(5);
    let harness = HookHarness::new(check).unwrap().and(cap).unwrap();
    assert_eq!(harness.hook_names(), ["cap", "check"]);
    let mut event = harness.pre_acting(ToolUse::new("c1", "refund", json!({"amount": 900})));
    harness.dispatch(&mut event).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(100.0));
    let HookEvent::PreActing(e) = &event else {
        panic!("not PreActing")
    };
    assert_eq!(e.tool_use().input["amount"], 100);
    assert_eq!(e.original_tool_use().input["amount"], 900);
}

#[tokio::test]
async fn the_harness_fails_on_an_abort_hook_and_continues_past_an_ignore_hook() {
    let failing = |policy| {
        hook_fn(EventKind::PostCall, |_| Err(HookError::new("boom")))
            .with_name("failing")
            .with_failure_policy(policy)
    };
    let abort = HookHarness::new(failing(FailurePolicy::Abort)).unwrap();
    let mut event = abort.post_call(Msg::assistant("hi"));
    let err = abort.dispatch(&mut event).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    assert_eq!(err.hook_name(), Some("failing"));

    let masker = hook_fn(EventKind::PostCall, |event| {
        if let HookEvent::PostCall(e) = event {
            e.set_final_message(Msg::assistant("***"));
        }
        Ok(())
    })
    .with_priority(200);
    let ignore = HookHarness::new(failing(FailurePolicy::Ignore))
        .unwrap()
        .and(masker)
        .unwrap();
    let mut event = ignore.post_call(Msg::assistant("13800138000"));
    ignore.dispatch(&mut event).await.unwrap();
    assert!(matches!(&event, HookEvent::PostCall(e) if e.final_message().text() == "***"));
}

#[tokio::test]
async fn the_harness_shows_a_post_reasoning_redo_and_stop() {
    let redo = hook_fn(EventKind::PostReasoning, |event| {
        if let HookEvent::PostReasoning(e) = event
            && e.message().text().contains("refunded")
        {
            e.goto_reasoning(vec![Msg::user("You did not call the refund tool.")]);
            e.stop_agent();
        }
        Ok(())
    });
    let harness = HookHarness::new(redo).unwrap();
    let mut event = harness.post_reasoning(Msg::assistant("I refunded you."));
    harness.dispatch(&mut event).await.unwrap();
    let HookEvent::PostReasoning(e) = &event else {
        panic!("not PostReasoning")
    };
    assert_eq!(e.goto_requested().map(<[Msg]>::len), Some(1));
    assert!(e.is_stop_requested());
}

/// A sync hook whose configuration is invalid.
struct Misconfigured;

impl SyncHook for Misconfigured {
    fn validate(&self) -> Result<(), HookError> {
        Err(HookError::new("no tools configured"))
    }
    fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

#[test]
fn a_hook_that_fails_validation_fails_the_harness_like_a_build() {
    let err = HookHarness::new(Misconfigured).unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidHook);
    assert!(err.to_string().contains("no tools configured"), "{err}");
}
