//! Abort vs ignore, panics and timeouts in hooks; the Error event.

use std::time::Duration;

use rein::*;
use serde_json::json;

use crate::support::*;

fn failing(name: &str, kind: EventKind, panic: bool) -> FnHook {
    FnHook::new(name, move |e| {
        if e.kind() == kind {
            if panic {
                panic!("hook exploded");
            }
            return Err(HookError::new("policy store unreachable"));
        }
        Ok(())
    })
    .on(kind)
}

fn tool_turns() -> ScriptedModel {
    ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("3"),
    ])
}

#[tokio::test]
async fn an_erroring_abort_hook_aborts_the_call_with_a_typed_error_and_fires_error() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(failing("gate", EventKind::PreActing, false))
        .hook(Recorder::new("obs", 500, &log).interest(Interest::only(EventKind::Error)))
        .build()
        .unwrap();
    let err = agent
        .run(vec![Msg::user("1+2")], session("a"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    assert_eq!(err.hook_name(), Some("gate"));
    assert_eq!(err.event_kind(), Some(EventKind::PreActing));
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Error));
    assert!(
        err.to_string().contains("policy store unreachable"),
        "{err}"
    );
    assert_eq!(
        log.entries(),
        ["obs:Error"],
        "the tool never ran; Error fired"
    );
    assert_memory_valid(&agent.messages(&key("a")).await);
}

#[tokio::test]
async fn a_panicking_abort_hook_aborts_the_call_and_memory_stays_valid() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("recovered"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(failing("boom", EventKind::PostActing, true))
        .build()
        .unwrap();
    let err = agent
        .run(vec![Msg::user("1+2")], session("p"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Panic));
    assert!(err.to_string().contains("hook exploded"), "{err}");
    let stored = agent.messages(&key("p")).await;
    assert_memory_valid(&stored);
}

#[tokio::test]
async fn the_session_works_again_after_a_hook_aborted_a_call() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::text("fine now"),
    ]);
    let flaky = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flaky2 = flaky.clone();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("flaky", move |_| {
                if flaky2.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    Err(HookError::new("transient"))
                } else {
                    Ok(())
                }
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    assert!(
        agent
            .run(vec![Msg::user("1+2")], session("f"))
            .await
            .is_err()
    );
    let reply = agent
        .call_with(vec![Msg::user("try again")], session("f"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "fine now");
    assert_memory_valid(&agent.messages(&key("f")).await);
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("not executed"), "{r:?}");
}

#[tokio::test]
async fn an_erroring_ignore_hook_is_logged_and_the_call_continues() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(failing("observer", EventKind::PreActing, false).policy(FailurePolicy::Ignore))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(log.entries(), ["add:1+2"]);
}

#[tokio::test]
async fn a_panicking_ignore_hook_does_not_stop_the_call_or_later_hooks() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            failing("panicky", EventKind::PreActing, true)
                .policy(FailurePolicy::Ignore)
                .priority(1),
        )
        .hook(Recorder::new("after", 2, &log).interest(Interest::only(EventKind::PreActing)))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(log.entries(), ["after:PreActing", "add:1+2"]);
}

#[tokio::test(start_paused = true)]
async fn a_hook_past_its_timeout_fails_under_its_policy() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(
            FnHook::new("slow", |_| Ok(()))
                .on(EventKind::PreActing)
                .delay(Duration::from_secs(60))
                .timeout(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    let err = agent.call(Msg::user("1+2")).await.unwrap_err();
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Timeout));
    assert!(log.entries().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_agent_hook_timeout_applies_to_hooks_without_their_own() {
    let log = Log::default();
    let model = tool_turns();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook_timeout(Duration::from_millis(50))
        .hook(
            FnHook::new("slow-observer", |_| Ok(()))
                .on(EventKind::PreActing)
                .policy(FailurePolicy::Ignore)
                .delay(Duration::from_secs(60)),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(log.entries(), ["add:1+2"]);
}

#[tokio::test]
async fn errors_on_chunk_events_never_affect_the_loop_even_with_abort_policy() {
    let model = ScriptedModel::new([ScriptedTurn::text("a reply in several chunks")]);
    let agent = builder(&model)
        .hook(failing("chunk-err", EventKind::ReasoningChunk, false))
        .hook(failing("chunk-panic", EventKind::ReasoningChunk, true))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(reply.text(), "a reply in several chunks");
}

#[tokio::test]
async fn a_failing_error_hook_does_not_replace_the_original_error() {
    let model = ScriptedModel::new([ScriptedTurn::error(ModelError::new(
        ModelErrorKind::Server,
        "upstream 503",
    ))]);
    let agent = builder(&model)
        .hook(failing("error-hook", EventKind::Error, false))
        .build()
        .unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Model);
    assert_eq!(err.model_error().unwrap().kind(), ModelErrorKind::Server);
    assert!(err.to_string().contains("upstream 503"));
}

#[tokio::test]
async fn the_error_event_shows_the_error_the_caller_gets() {
    let log = Log::default();
    let log2 = log.clone();
    let model = ScriptedModel::new([]);
    let agent = builder(&model)
        .hook(
            FnHook::new("err-watch", move |e| {
                if let HookEvent::Error(e) = e {
                    log2.push(e.error().to_string());
                }
                Ok(())
            })
            .on(EventKind::Error),
        )
        .build()
        .unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(log.entries(), [err.to_string()]);
    assert!(err.to_string().contains("no turn 1"), "{err}");
}

#[tokio::test]
async fn a_model_stream_failing_mid_tool_call_leaves_no_dangling_tool_use() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2}))
            .with_error_mid_stream(ModelError::new(ModelErrorKind::Stream, "connection reset")),
        ScriptedTurn::text("second try works"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .build()
        .unwrap();
    let err = agent
        .run(vec![Msg::user("1+2")], session("mid"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Model);
    assert!(log.entries().is_empty());
    assert_memory_valid(&agent.messages(&key("mid")).await);
    let reply = agent
        .call_with(vec![Msg::user("again")], session("mid"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "second try works");
}

struct PanicsBeforeFuture;

impl Hook for PanicsBeforeFuture {
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreCall)
    }
    #[allow(clippy::manual_async_fn, unreachable_code)]
    fn on_event(
        &self,
        _e: &mut HookEvent,
    ) -> impl std::future::Future<Output = Result<(), HookError>> + Send {
        panic!("panicked while creating the future");
        async { Ok(()) }
    }
}

#[tokio::test]
async fn a_hook_that_panics_before_returning_its_future_is_caught() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = builder(&model).hook(PanicsBeforeFuture).build().unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.hook_failure(), Some(HookFailureKind::Panic));
    assert!(
        err.to_string().contains("while creating the future"),
        "{err}"
    );
}

struct SyncPanicTool;

impl Tool for SyncPanicTool {
    fn name(&self) -> &str {
        "sync_panic"
    }
    fn description(&self) -> &str {
        "panics in call() itself"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    #[allow(unreachable_code)]
    fn call(
        &self,
        _input: serde_json::Value,
        _ctx: ToolContext,
    ) -> impl std::future::Future<Output = Result<String, ToolError>> + Send {
        panic!("no future for you");
        std::future::ready(Ok(String::new()))
    }
}

#[tokio::test]
async fn a_tool_that_panics_before_returning_its_future_gives_an_error_result() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("sync_panic", json!({})),
        ScriptedTurn::text("ok"),
    ]);
    let mut tools = Toolkit::new();
    tools.register(SyncPanicTool).unwrap();
    let agent = builder(&model).toolkit(tools).build().unwrap();
    assert_eq!(agent.call(Msg::user("go")).await.unwrap().text(), "ok");
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("panicked: no future for you"), "{r:?}");
}

struct PanickingModel;

impl Model for PanickingModel {
    fn name(&self) -> &str {
        "panicky"
    }
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        Box::pin(futures::stream::poll_fn(
            |_| -> std::task::Poll<Option<Result<ModelChunk, ModelError>>> {
                panic!("provider bug")
            },
        ))
    }
}

#[tokio::test]
async fn a_panicking_model_gives_a_typed_model_error() {
    let agent = Agent::builder()
        .model(PanickingModel)
        .without_global_hooks()
        .build()
        .unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Model);
    assert!(err.to_string().contains("provider bug"), "{err}");
    assert_memory_valid(&agent.messages(&key("default")).await);
}
