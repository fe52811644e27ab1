//! Tool validation, failures as results, concurrency, and the toolkit API.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rein::*;
use serde_json::json;

use crate::support::*;

async fn one_result(model: ScriptedModel, tools: Toolkit) -> (String, bool, String) {
    let agent = builder(&model).toolkit(tools).build().unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_memory_valid(&agent.messages(&key("default")).await);
    results_in_request(&model, 1).remove(0)
}

fn then_text(turn: ScriptedTurn) -> ScriptedModel {
    ScriptedModel::new([turn, ScriptedTurn::text("ok")])
}

#[tokio::test]
async fn arguments_failing_the_schema_give_an_error_result_naming_the_tool_and_field() {
    let log = Log::default();
    let r = one_result(
        then_text(ScriptedTurn::tool_call("add", json!({"a": "one", "b": 2}))),
        toolkit_with(vec![add_tool(&log)]),
    )
    .await;
    assert!(r.1);
    assert!(r.2.contains("`add`"), "{}", r.2);
    assert!(r.2.contains("/a"), "{}", r.2);
    assert!(log.entries().is_empty());
}

#[tokio::test]
async fn a_missing_required_argument_is_named_in_the_error_result() {
    let log = Log::default();
    let r = one_result(
        then_text(ScriptedTurn::tool_call("add", json!({"a": 1}))),
        toolkit_with(vec![add_tool(&log)]),
    )
    .await;
    assert!(r.1 && r.2.contains("\"b\""), "{}", r.2);
}

#[tokio::test]
async fn malformed_json_arguments_give_an_error_result() {
    let log = Log::default();
    let r = one_result(
        then_text(ScriptedTurn::raw_tool_call("add", "{\"a\": 1, \"b\":")),
        toolkit_with(vec![add_tool(&log)]),
    )
    .await;
    assert!(r.1 && r.2.contains("not valid JSON"), "{}", r.2);
}

#[tokio::test]
async fn non_object_arguments_give_an_error_result() {
    let log = Log::default();
    let r = one_result(
        then_text(ScriptedTurn::tool_call("add", json!([1, 2]))),
        toolkit_with(vec![add_tool(&log)]),
    )
    .await;
    assert!(
        r.1 && r.2.contains("must be a JSON object, got an array"),
        "{}",
        r.2
    );
}

#[tokio::test]
async fn explicit_null_for_an_optional_argument_is_ignored() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let tool = FunctionTool::new(
        "greet",
        "Greets.",
        json!({"type": "object", "properties": {"name": {"type": "string"}, "title": {"type": "string"}}, "required": ["name"]}),
        move |args| {
            let seen = seen2.clone();
            async move {
                seen.push(args.to_string());
                Ok("hi".to_string())
            }
        },
    );
    let r = one_result(
        then_text(ScriptedTurn::tool_call(
            "greet",
            json!({"name": "Ann", "title": null}),
        )),
        toolkit_with(vec![tool]),
    )
    .await;
    assert!(!r.1, "{}", r.2);
    assert_eq!(seen.entries(), [r#"{"name":"Ann"}"#]);
}

#[tokio::test]
async fn an_unknown_tool_gives_an_error_result_listing_the_available_ones() {
    let log = Log::default();
    let r = one_result(
        then_text(ScriptedTurn::tool_call("subtract", json!({}))),
        toolkit_with(vec![add_tool(&log)]),
    )
    .await;
    assert!(
        r.1 && r.2.contains("Unknown tool `subtract`") && r.2.contains("add"),
        "{}",
        r.2
    );
}

#[tokio::test]
async fn a_tool_error_becomes_an_error_result_and_the_loop_continues() {
    let tool = FunctionTool::new("fail", "Fails.", json!({"type": "object"}), |_| async {
        Err(ToolError::new("disk full"))
    });
    let r = one_result(
        then_text(ScriptedTurn::tool_call("fail", json!({}))),
        toolkit_with(vec![tool]),
    )
    .await;
    assert_eq!(r.2, "Tool `fail` failed: disk full");
    assert!(r.1);
}

#[tokio::test]
async fn a_tool_panic_becomes_an_error_result() {
    let tool = FunctionTool::new("boom", "Panics.", json!({"type": "object"}), |_| async {
        if true {
            panic!("index out of bounds");
        }
        Ok(String::new())
    });
    let r = one_result(
        then_text(ScriptedTurn::tool_call("boom", json!({}))),
        toolkit_with(vec![tool]),
    )
    .await;
    assert!(
        r.1 && r.2.contains("panicked: index out of bounds"),
        "{}",
        r.2
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_timeout_becomes_an_error_result() {
    let tool = FunctionTool::new("hang", "Hangs.", json!({"type": "object"}), |_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(String::new())
    })
    .with_timeout(Duration::from_secs(2));
    let r = one_result(
        then_text(ScriptedTurn::tool_call("hang", json!({}))),
        toolkit_with(vec![tool]),
    )
    .await;
    assert!(r.1 && r.2.contains("timed out after 2s"), "{}", r.2);
}

/// A tool that records how many calls overlap.
fn probe(
    name: &str,
    active: &Arc<AtomicUsize>,
    peak: &Arc<AtomicUsize>,
    log: &Log,
    safe: bool,
) -> FunctionTool {
    let (active, peak, log, n) = (active.clone(), peak.clone(), log.clone(), name.to_string());
    let t = FunctionTool::new(name, "probe", json!({"type": "object"}), move |args| {
        let (active, peak, log, n) = (active.clone(), peak.clone(), log.clone(), n.clone());
        async move {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            log.push(format!("start:{n}:{}", args["i"]));
            tokio::time::sleep(Duration::from_millis(10)).await;
            log.push(format!("end:{n}:{}", args["i"]));
            active.fetch_sub(1, Ordering::SeqCst);
            Ok(format!("{n}{}", args["i"]))
        }
    });
    if safe { t } else { t.not_concurrency_safe() }
}

#[tokio::test(start_paused = true)]
async fn tool_calls_of_one_turn_run_concurrently_with_results_in_call_order() {
    let (active, peak, log) = (Arc::default(), Arc::default(), Log::default());
    let model = then_text(ScriptedTurn::tool_calls(vec![
        ("p", json!({"i": 1})),
        ("p", json!({"i": 2})),
        ("p", json!({"i": 3})),
    ]));
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![probe("p", &active, &peak, &log, true)]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    let texts: Vec<String> = results_in_request(&model, 1)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(texts, ["p1", "p2", "p3"]);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_is_not_concurrency_safe_runs_alone() {
    let (active, peak, log) = (Arc::default(), Arc::default(), Log::default());
    let model = then_text(ScriptedTurn::tool_calls(vec![
        ("safe", json!({"i": 1})),
        ("safe", json!({"i": 2})),
        ("unsafe", json!({"i": 3})),
        ("safe", json!({"i": 4})),
    ]));
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            probe("safe", &active, &peak, &log, true),
            probe("unsafe", &active, &peak, &log, false),
        ]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let entries = log.entries();
    let start_unsafe = entries.iter().position(|e| e == "start:unsafe:3").unwrap();
    let end_unsafe = entries.iter().position(|e| e == "end:unsafe:3").unwrap();
    assert_eq!(
        end_unsafe,
        start_unsafe + 1,
        "nothing overlaps the unsafe tool: {entries:?}"
    );
    assert!(entries.iter().position(|e| e == "end:safe:2").unwrap() < start_unsafe);
    assert!(entries.iter().position(|e| e == "start:safe:4").unwrap() > end_unsafe);
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    let texts: Vec<String> = results_in_request(&model, 1)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(texts, ["safe1", "safe2", "unsafe3", "safe4"]);
}

#[tokio::test]
async fn tool_progress_reaches_acting_chunk_hooks_but_not_the_model() {
    let seen = Log::default();
    let seen2 = seen.clone();
    let tool = FunctionTool::with_context(
        "work",
        "Works.",
        json!({"type": "object"}),
        |_, ctx| async move {
            ctx.emit("25%");
            ctx.emit("100%");
            Ok("done".to_string())
        },
    );
    let model = then_text(ScriptedTurn::tool_call("work", json!({})));
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![tool]))
        .hook(
            FnHook::new("progress", move |e| {
                if let HookEvent::ActingChunk(e) = e {
                    seen2.push(format!("{}:{}", e.tool_use().name, e.chunk()));
                }
                Ok(())
            })
            .on(EventKind::ActingChunk),
        )
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(seen.entries(), ["work:25%", "work:100%"]);
    assert_eq!(results_in_request(&model, 1)[0].2, "done");
}

#[test]
fn toolkit_names_follow_registration_order() {
    let log = Log::default();
    let mut t = Toolkit::new();
    for n in ["c", "a", "b"] {
        t.register(FunctionTool::new(
            n,
            "x",
            json!({"type": "object"}),
            |_| async { Ok(String::new()) },
        ))
        .unwrap();
    }
    t.register(add_tool(&log)).unwrap();
    assert_eq!(t.names(), ["c", "a", "b", "add"]);
    assert!(t.remove("a").unwrap());
    assert!(!t.remove("a").unwrap());
    assert_eq!(t.names(), ["c", "b", "add"]);
}

#[test]
fn registering_a_duplicate_name_is_an_error_unless_replacement_is_asked_for() {
    let log = Log::default();
    let mut t = Toolkit::new();
    t.register(add_tool(&log)).unwrap();
    assert_eq!(
        t.register(add_tool(&log)),
        Err(ToolkitError::DuplicateName("add".into()))
    );
    let replaced = t.register_or_replace(add_tool(&log)).unwrap();
    assert!(replaced.is_some());
    assert_eq!(t.names(), ["add"]);
}

#[test]
fn removing_from_a_toolkit_without_deletion_is_an_error() {
    let log = Log::default();
    let mut t = Toolkit::new();
    t.register(add_tool(&log)).unwrap();
    t.disable_deletion();
    assert_eq!(
        t.remove("add"),
        Err(ToolkitError::DeletionDisabled("add".into()))
    );
    assert!(t.register_or_replace(add_tool(&log)).is_err());
    assert_eq!(t.names(), ["add"]);
    assert!(!t.copy().deletion_allowed(), "copies keep the setting");
}

#[test]
fn copy_shares_tool_instances_but_not_the_registry() {
    let log = Log::default();
    let tool = SharedTool::new(add_tool(&log));
    let mut t = Toolkit::new();
    t.register(tool.clone()).unwrap();
    let mut c = t.copy();
    assert!(SharedTool::ptr_eq(
        &t.get("add").unwrap(),
        &c.get("add").unwrap()
    ));
    assert!(SharedTool::ptr_eq(&tool, &c.get("add").unwrap()));
    c.remove("add").unwrap();
    assert!(t.contains("add"));
}

#[test]
fn an_invalid_parameter_schema_is_rejected_at_registration() {
    let bad = FunctionTool::new(
        "bad",
        "x",
        json!({"type": "object", "properties": {"a": {"type": 5}}}),
        |_| async { Ok(String::new()) },
    );
    let err = Toolkit::new().register(bad).unwrap_err();
    assert!(
        matches!(err, ToolkitError::InvalidSchema { ref tool, .. } if tool == "bad"),
        "{err}"
    );
    let not_object = FunctionTool::new("arr", "x", json!({"type": "array"}), |_| async {
        Ok(String::new())
    });
    assert!(
        Toolkit::new()
            .register(not_object)
            .unwrap_err()
            .to_string()
            .contains("`arr`")
    );
}

#[test]
fn a_tool_name_providers_would_reject_is_an_error() {
    let t = FunctionTool::new("has space", "x", json!({"type": "object"}), |_| async {
        Ok(String::new())
    });
    assert_eq!(
        Toolkit::new().register(t),
        Err(ToolkitError::InvalidName("has space".into()))
    );
}
