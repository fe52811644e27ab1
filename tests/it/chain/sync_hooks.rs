//! `SyncHook`s: called without a future, yet ordered, failing and attributed like any
//! hook; and the per-event timestamp hooks share.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::*;
use serde_json::json;

use crate::support::*;

fn tool_turns() -> ScriptedModel {
    ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("3"),
    ])
}

/// A sync hook that logs `"{label}:{kind}"`, optionally panicking or failing on one
/// kind, and optionally rewriting the `add` arguments.
struct SyncRecorder {
    label: &'static str,
    priority: i32,
    log: Log,
    policy: FailurePolicy,
    panic_on: Option<EventKind>,
    fail_on: Option<EventKind>,
    set_b: Option<i64>,
}

impl SyncRecorder {
    fn new(label: &'static str, priority: i32, log: &Log) -> Self {
        Self {
            label,
            priority,
            log: log.clone(),
            policy: FailurePolicy::Abort,
            panic_on: None,
            fail_on: None,
            set_b: None,
        }
    }
}

impl SyncHook for SyncRecorder {
    fn name(&self) -> &str {
        self.label
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing)
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let kind = event.kind();
        if self.panic_on == Some(kind) {
            panic!("sync hook exploded");
        }
        if self.fail_on == Some(kind) {
            return Err(HookError::new("sync hook said no"));
        }
        if let (Some(b), HookEvent::PreActing(e)) = (self.set_b, &mut *event) {
            let mut u = e.tool_use().clone();
            u.input["b"] = json!(b);
            e.set_tool_use(u);
        }
        self.log.push(format!("{}:{kind}", self.label));
        Ok(())
    }
}

#[tokio::test]
async fn sync_and_async_hooks_share_one_priority_order_and_see_each_others_rewrites() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(Recorder::new("async-30", 30, &log).interest(Interest::only(EventKind::PreActing)))
        .hook(SyncRecorder {
            set_b: Some(5),
            ..SyncRecorder::new("sync-20", 20, &log)
        })
        .hook(SyncRecorder::new("sync-40", 40, &log))
        .hook(Recorder::new("async-10", 10, &log).interest(Interest::only(EventKind::PreActing)))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(
        log.entries(),
        [
            "async-10:PreActing",
            "sync-20:PreActing",
            "async-30:PreActing",
            "sync-40:PreActing",
            // The rewrite at 20 is re-checked by the hooks that had not seen it
            // (10, and 20 itself); the second pass changes nothing.
            "async-10:PreActing",
            "sync-20:PreActing",
            // The tool ran with the sync hook's rewrite.
            "add:1+5",
        ]
    );
}

#[tokio::test]
async fn a_panicking_sync_abort_hook_aborts_the_call_naming_it() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(SyncRecorder::new("before", 10, &log))
        .hook(SyncRecorder {
            panic_on: Some(EventKind::PreActing),
            ..SyncRecorder::new("exploding", 20, &log)
        })
        .hook(SyncRecorder::new("after", 30, &log))
        .build()
        .unwrap();
    let err = agent.call(Msg::user("1+2")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Panic));
    assert_eq!(err.hook_name(), Some("exploding"));
    assert!(err.to_string().contains("sync hook exploded"), "{err}");
    assert_eq!(log.entries(), ["before:PreActing"]);
}

#[tokio::test]
async fn a_panicking_sync_ignore_hook_is_skipped_and_the_next_hooks_still_run() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(SyncRecorder {
            panic_on: Some(EventKind::PreActing),
            policy: FailurePolicy::Ignore,
            ..SyncRecorder::new("exploding", 10, &log)
        })
        .hook(SyncRecorder {
            fail_on: Some(EventKind::PreActing),
            policy: FailurePolicy::Ignore,
            ..SyncRecorder::new("failing", 20, &log)
        })
        .hook(Recorder::new("async-after", 30, &log).interest(Interest::only(EventKind::PreActing)))
        .hook(SyncRecorder::new("sync-after", 40, &log))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(
        log.entries(),
        ["async-after:PreActing", "sync-after:PreActing", "add:1+2"]
    );
}

#[tokio::test]
async fn an_erroring_sync_abort_hook_aborts_with_its_error() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(SyncRecorder {
            fail_on: Some(EventKind::PreActing),
            ..SyncRecorder::new("guard", 10, &log)
        })
        .build()
        .unwrap();
    let err = agent.call(Msg::user("1+2")).await.unwrap_err();
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Error));
    assert_eq!(err.hook_name(), Some("guard"));
    assert!(log.entries().is_empty());
}

#[test]
fn a_sync_hook_reports_no_timeout_and_its_settings_in_one_value() {
    let log = Log::default();
    let h = SyncRecorder {
        policy: FailurePolicy::Ignore,
        ..SyncRecorder::new("s", 7, &log)
    };
    let s = HookSettings::of_sync(&h);
    assert_eq!(s.timeout, None);
    assert_eq!(s.priority, 7);
    assert_eq!(&*s.name, "s");
    assert_eq!(s.failure_policy, FailurePolicy::Ignore);
    assert_eq!(s.interest, Interest::only(EventKind::PreActing));
    assert!(s.sync);
}

/// Records the timestamp each hook saw, per event kind, and sleeps between hooks.
struct Stamps {
    seen: Arc<Mutex<Vec<(EventKind, tokio::time::Instant)>>>,
    priority: i32,
}

impl Hook for Stamps {
    fn priority(&self) -> i32 {
        self.priority
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let stamp = event.timestamp();
        self.seen.lock().unwrap().push((event.kind(), stamp));
        // Time passes inside the dispatch: later hooks must still see the same stamp.
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn every_hook_of_one_event_sees_the_same_timestamp_and_each_chunk_gets_its_own() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([ScriptedTurn::text("a reply in several chunks")]);
    let agent = builder(&model)
        .hook(Stamps {
            seen: seen.clone(),
            priority: 1,
        })
        .hook(Stamps {
            seen: seen.clone(),
            priority: 2,
        })
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    // Hooks of one dispatch come in pairs (priority 1, then 2): same stamp.
    assert!(seen.len() >= 8, "{seen:?}");
    for pair in seen.chunks(2) {
        assert_eq!(pair[0].0, pair[1].0);
        assert_eq!(pair[0].1, pair[1].1, "{pair:?}");
    }
    // Successive dispatches are stamped anew (5 ms passed between any two).
    let chunk_stamps: Vec<_> = seen
        .chunks(2)
        .filter(|p| p[0].0 == EventKind::ReasoningChunk)
        .map(|p| p[0].1)
        .collect();
    assert!(chunk_stamps.len() >= 2, "{seen:?}");
    assert!(
        chunk_stamps.windows(2).all(|w| w[1] > w[0]),
        "{chunk_stamps:?}"
    );
    let all: Vec<_> = seen.chunks(2).map(|p| p[0].1).collect();
    assert!(all.windows(2).all(|w| w[1] > w[0]), "{all:?}");
}

#[tokio::test(start_paused = true)]
async fn each_pre_acting_pass_is_stamped_anew() {
    let log = Log::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        // Runs first and sleeps: the rewrite after it sends the call back to it for a
        // second pass, 5 ms later.
        .hook(Stamps {
            seen: seen.clone(),
            priority: 1,
        })
        .hook(SyncRecorder {
            set_b: Some(5),
            ..SyncRecorder::new("rewriter", 20, &log)
        })
        .build()
        .unwrap();
    agent.call(Msg::user("1+2")).await.unwrap();
    let passes: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(kind, _)| *kind == EventKind::PreActing)
        .map(|(_, stamp)| *stamp)
        .collect();
    assert_eq!(passes.len(), 2, "{passes:?}");
    assert!(passes[1] > passes[0], "{passes:?}");
}
