//! Governance soundness: what a hostile or sloppy model (or caller) sends cannot get a
//! tool call past the hooks, and what the hooks accepted is exactly what runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rein::hooks::{ApprovalDecisions, pending_approvals, pending_approvals_in};
use rein::*;
use serde_json::{Value, json};

use super::stop_for_human;
use crate::support::*;

/// A model that plays turns and numbers every tool call `call_0`, in every response
/// (as several OpenAI-compatible servers do).
type Script = Vec<Vec<(String, String)>>;

#[derive(Clone)]
struct ReusedIds {
    turns: Arc<Mutex<Script>>,
    final_text: String,
}

impl ReusedIds {
    /// Each turn is a list of `(tool, raw arguments)`; after the turns, `final_text`.
    fn new(turns: Vec<Vec<(&str, &str)>>, final_text: &str) -> Self {
        let mut turns: Script = turns
            .into_iter()
            .map(|t| {
                t.into_iter()
                    .map(|(n, a)| (n.to_owned(), a.to_owned()))
                    .collect()
            })
            .collect();
        turns.reverse();
        Self {
            turns: Arc::new(Mutex::new(turns)),
            final_text: final_text.to_owned(),
        }
    }
}

impl Model for ReusedIds {
    fn name(&self) -> &str {
        "reused-ids"
    }
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        let chunks: Vec<Result<ModelChunk, ModelError>> = match self.turns.lock().unwrap().pop() {
            Some(calls) => calls
                .into_iter()
                .enumerate()
                .map(|(index, (name, arguments))| {
                    Ok(ModelChunk::ToolCall {
                        index,
                        id: Some("call_0".to_owned()),
                        name: Some(name),
                        arguments,
                    })
                })
                .chain([Ok(ModelChunk::Finish(FinishReason::ToolCalls))])
                .collect(),
            None => vec![
                Ok(ModelChunk::Text(self.final_text.clone())),
                Ok(ModelChunk::Finish(FinishReason::Stop)),
            ],
        };
        futures::stream::iter(chunks).boxed()
    }
}

/// Denies `submitRefund` above 100, reading `input["amount"]` as the README's
/// `RefundCap` does. Records every call it saw.
fn refund_cap(seen: &Log) -> FnHook {
    let seen = seen.clone();
    FnHook::new("refund-cap", move |event| {
        if let HookEvent::PreActing(e) = event {
            let u = e.tool_use();
            seen.push(format!("{}:{}", u.name, u.input));
            let amount = u.input["amount"].as_f64().unwrap_or(0.0);
            if u.name == "submitRefund" && amount > 100.0 {
                e.deny("refunds above 100 need a human");
            }
        }
        Ok(())
    })
    .priority(20)
    .on(EventKind::PreActing)
}

#[tokio::test]
async fn double_encoded_arguments_are_decoded_once_so_the_cap_hook_sees_the_real_amount() {
    let (log, seen) = (Log::default(), Log::default());
    let model = ScriptedModel::new([
        ScriptedTurn::raw_tool_call("submitRefund", r#""{\"amount\": 5000}""#),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(refund_cap(&seen))
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert!(log.entries().is_empty(), "the capped refund never ran");
    assert_eq!(seen.entries(), [r#"submitRefund:{"amount":5000}"#]);
    let stored = agent.messages(&key("default")).await;
    assert_eq!(
        stored[1].tool_uses()[0].input,
        json!({"amount": 5000}),
        "memory holds the value the hooks saw"
    );
    assert!(stored[2].tool_results()[0].content.contains("need a human"));
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_refused_before_any_hook_or_tool_sees_them() {
    for raw in ["[5000]", "42", r#""just text""#, "{not json", "null"] {
        let (log, seen) = (Log::default(), Log::default());
        let model = ScriptedModel::new([
            ScriptedTurn::raw_tool_call("submitRefund", raw),
            ScriptedTurn::text("done"),
        ]);
        let agent = builder_with_tools(&model, vec![refund_tool(&log)])
            .hook(refund_cap(&seen))
            .build()
            .unwrap();
        let outcome = agent
            .run(vec![Msg::user("go")], session("s"))
            .await
            .unwrap();
        assert!(log.entries().is_empty(), "{raw}: the tool never ran");
        assert!(seen.entries().is_empty(), "{raw}: no hook was asked");
        let results = results_in_request(&model, 1);
        assert!(results[0].1, "{raw}: an error result");
        assert!(
            results[0].2.contains("Invalid arguments"),
            "{raw}: {}",
            results[0].2
        );
        assert!(outcome.reply.text().contains("done"));
        assert_memory_valid(&agent.messages(&key("s")).await);
    }
}

#[tokio::test]
async fn a_call_to_an_unknown_tool_never_reaches_a_pre_acting_hook() {
    let seen = Log::default();
    let model = tool_then_text("delete_everything", json!({}), "ok");
    let agent = builder(&model).hook(refund_cap(&seen)).build().unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert!(seen.entries().is_empty());
    let results = results_in_request(&model, 1);
    assert!(results[0].1 && results[0].2.contains("Unknown tool"));
}

#[tokio::test]
async fn a_rename_by_a_later_hook_is_rechecked_by_the_earlier_deny_hook() {
    let (log, seen) = (Log::default(), Log::default());
    let model = tool_then_text("lookup", json!({"amount": 5000}), "done");
    let lookup = FunctionTool::new(
        "lookup",
        "Looks up an order.",
        json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
        |_| async { Ok("found".to_owned()) },
    );
    let renamer = FnHook::new("renamer", |event| {
        if let HookEvent::PreActing(e) = event {
            let mut u = e.tool_use().clone();
            u.name = "submitRefund".into();
            e.set_tool_use(u);
        }
        Ok(())
    })
    .priority(150)
    .on(EventKind::PreActing);
    let agent = builder_with_tools(&model, vec![refund_tool(&log), lookup])
        .hook(refund_cap(&seen))
        .hook(renamer)
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    assert!(log.entries().is_empty(), "the renamed refund never ran");
    assert_eq!(
        seen.entries(),
        [
            r#"lookup:{"amount":5000}"#,
            r#"submitRefund:{"amount":5000}"#
        ],
        "the deny hook saw the call again in its final form"
    );
    let results = results_in_request(&model, 1);
    assert!(results[0].1 && results[0].2.contains("need a human"));
    assert!(outcome.reply.text().contains("done"));
}

#[tokio::test]
async fn hooks_that_never_agree_on_a_call_get_it_denied_after_the_pass_limit() {
    let log = Log::default();
    let flip = |name: &str, p: i32, b: i64| {
        FnHook::new(name, move |event| {
            if let HookEvent::PreActing(e) = event {
                let mut u = e.tool_use().clone();
                u.input["b"] = json!(b);
                e.set_tool_use(u);
            }
            Ok(())
        })
        .priority(p)
        .on(EventKind::PreActing)
    };
    let model = tool_then_text("add", json!({"a": 1, "b": 2}), "done");
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .hook(flip("up", 10, 100))
        .hook(flip("down", 20, -100))
        .decision_trail(true)
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    assert!(log.entries().is_empty(), "no form of the call ran");
    let results = results_in_request(&model, 1);
    assert!(results[0].1);
    assert!(
        results[0].2.contains("did not agree") && results[0].2.contains("down"),
        "{}",
        results[0].2
    );
    assert!(
        outcome
            .decisions
            .iter()
            .any(|d| d.kind == DecisionKind::ToolDenied && d.hook == "<runtime>")
    );
    assert_eq!(rein::agent::MAX_PRE_ACTING_PASSES, 4);
}

#[tokio::test]
async fn reused_model_call_ids_get_runtime_ids_and_the_stored_session_reloads() {
    let dir = TempDir::new("reused-ids");
    let log = Log::default();
    let model = ReusedIds::new(
        vec![
            vec![("add", r#"{"a":1,"b":2}"#), ("add", r#"{"a":3,"b":4}"#)],
            vec![("add", r#"{"a":5,"b":6}"#)],
        ],
        "done",
    );
    let store = Arc::new(FileSessionStore::open(dir.path()).unwrap());
    let build = || {
        Agent::builder()
            .model(model.clone())
            .without_global_hooks()
            .toolkit(toolkit_with(vec![add_tool(&log)]))
            .session_store(Arc::clone(&store))
            .build()
            .unwrap()
    };
    build()
        .call_with(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    assert_eq!(log.entries(), ["add:1+2", "add:3+4", "add:5+6"]);
    // A restart: a new agent loads the session from disk and continues it.
    let restarted = build();
    let stored = restarted.messages(&key("s")).await;
    assert_memory_valid(&stored);
    let ids: Vec<String> = stored
        .iter()
        .flat_map(|m| m.tool_uses())
        .map(|u| u.id.clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| id != "call_0"), "{ids:?}");
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 3, "every call has its own id: {ids:?}");
    restarted
        .call_with(vec![Msg::user("again")], session("s"))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_approval_decision_never_approves_a_later_call_that_reuses_the_model_id() {
    let log = Log::default();
    let model = ReusedIds::new(
        vec![
            vec![("submitRefund", r#"{"amount":1}"#)],
            vec![("submitRefund", r#"{"amount":10000}"#)],
        ],
        "done",
    );
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .toolkit(toolkit_with(vec![refund_tool(&log)]))
        .hook(stop_for_human())
        .build()
        .unwrap();
    let first = agent
        .run(vec![Msg::user("refund 1")], session("s"))
        .await
        .unwrap();
    let waiting = pending_approvals(&first.reply);
    assert_eq!(waiting.len(), 1);
    // The human approves the refund of 1 by its id, and the caller keeps using the
    // context with that decision.
    let ctx = session("s");
    ctx.extensions()
        .insert(ApprovalDecisions::new().approve(waiting[0].id.clone()));
    let second = agent.run(vec![], ctx.clone()).await.unwrap();
    assert_eq!(log.entries(), [r#"refund:{"amount":1}"#]);
    // The model's next call (again `call_0` on the wire) stops for a new decision.
    assert_eq!(second.reason, StopReason::ReasoningStopped);
    let again = pending_approvals(&second.reply);
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].id, waiting[0].id);
    // Resuming again on the old decision: its call already has its result, so the
    // resume is stale and runs nothing (the new call stays pending for a human).
    let stale = agent.run(vec![], ctx).await.unwrap_err();
    assert_eq!(
        stale.store_error().map(StoreError::kind),
        Some(StoreErrorKind::Conflict),
        "{stale}"
    );
    assert_eq!(
        log.entries(),
        [r#"refund:{"amount":1}"#],
        "the refund of 10000 never ran on the old decision"
    );
    // Valid, with the new call still pending (a valid history may end with pending
    // calls: setting it back is accepted).
    let history = agent.messages(&key("s")).await;
    assert_eq!(pending_approvals_in(&history), again);
    agent.set_messages(&key("s"), history).await.unwrap();
}

#[tokio::test]
async fn a_decision_bound_to_a_call_does_not_apply_once_a_hook_changed_the_call() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 20}), "done");
    // On resume (only then), a hook raises the amount after the human saw 20.
    let resuming = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on = resuming.clone();
    let raise = FnHook::new("raise", move |event| {
        if let HookEvent::PreActing(e) = event
            && on.load(std::sync::atomic::Ordering::SeqCst)
        {
            let mut u = e.tool_use().clone();
            u.input = json!({"amount": 900});
            e.set_tool_use(u);
        }
        Ok(())
    })
    .priority(10)
    .on(EventKind::PreActing);
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(stop_for_human())
        .hook(raise)
        .build()
        .unwrap();
    let first = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    let waiting = pending_approvals(&first.reply);
    resuming.store(true, std::sync::atomic::Ordering::SeqCst);
    let ctx = session("s");
    ctx.extensions()
        .insert(ApprovalDecisions::new().approve_call(&waiting[0]));
    agent.run(vec![], ctx).await.unwrap();
    assert!(
        log.entries().is_empty(),
        "the changed call was not approved"
    );
    let stored = agent.messages(&key("s")).await;
    let result = stored.iter().flat_map(|m| m.tool_results()).next().unwrap();
    assert!(
        result.is_error && result.content.contains("changed"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn call_input_with_a_tool_use_and_no_result_is_refused_and_memory_stays_valid() {
    let log = Log::default();
    let model = ScriptedModel::new([ScriptedTurn::text("hi")]);
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .build()
        .unwrap();
    let dangling = Msg::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse(ToolUse::new(
            "x1",
            "add",
            json!({"a": 1, "b": 2}),
        ))],
    );
    let err = agent
        .call_with(vec![Msg::user("hi"), dangling], session("s"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("without a result"), "{err}");
    assert!(log.entries().is_empty());
    assert_memory_valid(&agent.messages(&key("s")).await);
    assert!(model.requests().is_empty(), "the model was never called");
}

#[tokio::test]
async fn a_complete_tool_exchange_in_call_input_is_accepted_and_reloads() {
    let dir = TempDir::new("exchange-input");
    let model = ScriptedModel::new([ScriptedTurn::text("3, as computed")]);
    let store = Arc::new(FileSessionStore::open(dir.path()).unwrap());
    let agent = builder(&model)
        .session_store(Arc::clone(&store))
        .build()
        .unwrap();
    let input = vec![
        Msg::user("what is 1+2?"),
        Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                "x1",
                "add",
                json!({"a": 1, "b": 2}),
            ))],
        ),
        Msg::tool([ToolResult::new("x1", "add", "3")]),
    ];
    let reply = agent.call_with(input, session("s")).await.unwrap();
    assert_eq!(reply.text(), "3, as computed");
    let reloaded = builder(&model).session_store(store).build().unwrap();
    let stored = reloaded.messages(&key("s")).await;
    assert_eq!(stored.len(), 4);
    assert_memory_valid(&stored);
}

/// Keeps a per-run list in the context's extensions and records, at `PostCall`, what
/// it held and the run id.
/// `(session, run id, what the run's list held)` per finished call.
type Probed = Arc<Mutex<Vec<(String, String, Vec<String>)>>>;

fn run_probe(out: &Probed) -> FnHook {
    let out = Arc::clone(out);
    FnHook::new("run-probe", move |event| {
        let (ctx, session) = match event {
            HookEvent::PreCall(e) => (e.context().clone(), e.context().session_id().to_owned()),
            HookEvent::PostCall(e) => (e.context().clone(), e.context().session_id().to_owned()),
            _ => return Ok(()),
        };
        let list = ctx
            .extensions()
            .get_or_insert_with(|| Mutex::new(Vec::<String>::new()));
        if matches!(event, HookEvent::PreCall(_)) {
            list.lock().unwrap().push(session);
        } else {
            let held = list.lock().unwrap().clone();
            out.lock()
                .unwrap()
                .push((session, ctx.run_id().to_owned(), held));
        }
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_clones_of_one_context_never_share_run_state() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        ScriptedTurn::text("one").with_delay(Duration::from_millis(50)),
        ScriptedTurn::text("two").with_delay(Duration::from_millis(50)),
    ]);
    let agent = builder(&model).hook(run_probe(&out)).build().unwrap();
    let shared = RunContext::new();
    shared
        .extensions()
        .insert(ApprovalDecisions::new().approve("c1"));
    let a = agent.call_with(vec![Msg::user("a")], shared.clone().with_session_id("a"));
    let b = agent.call_with(vec![Msg::user("b")], shared.clone().with_session_id("b"));
    let (ra, rb) = tokio::join!(a, b);
    ra.unwrap();
    rb.unwrap();
    let out = out.lock().unwrap().clone();
    assert_eq!(out.len(), 2);
    for (session, _, held) in &out {
        assert_eq!(
            held,
            std::slice::from_ref(session),
            "each call saw only its own run state"
        );
    }
    assert_ne!(out[0].1, out[1].1, "two concurrent calls are two runs");
    // The value stored before the calls is visible to both; a later sequential call
    // with the same context continues its run.
    assert!(shared.extensions().get::<ApprovalDecisions>().is_some());
}

#[tokio::test]
async fn a_turn_with_more_tool_calls_than_the_limit_runs_only_the_limit() {
    let log = Log::default();
    let calls: Vec<(&str, Value)> = (0..5).map(|i| ("add", json!({"a": i, "b": 0}))).collect();
    let model = ScriptedModel::new([ScriptedTurn::tool_calls(calls), ScriptedTurn::text("ok")]);
    let agent = builder_with_tools(&model, vec![add_tool(&log)])
        .max_tool_calls_per_turn(3)
        .decision_trail(true)
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    assert_eq!(log.entries().len(), 3);
    let results = results_in_request(&model, 1);
    assert_eq!(results.len(), 5, "every call has a result");
    assert!(results[3].1 && results[3].2.contains("at most 3"));
    assert_eq!(
        outcome
            .decisions
            .iter()
            .filter(|d| d.kind == DecisionKind::ToolCallRejected)
            .count(),
        2
    );
}

#[tokio::test]
async fn a_tool_result_over_the_limit_is_cut_with_a_marker_and_recorded() {
    let big = FunctionTool::new(
        "big",
        "Returns a lot.",
        json!({"type": "object"}),
        |_| async { Ok("é".repeat(1000)) },
    );
    let model = tool_then_text("big", json!({}), "ok");
    let agent = builder_with_tools(&model, vec![big])
        .max_tool_result_bytes(101)
        .decision_trail(true)
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    let results = results_in_request(&model, 1);
    let text = &results[0].2;
    assert!(text.starts_with(&"é".repeat(50)), "cut on a char boundary");
    assert!(text.contains("truncated by the runtime") && text.contains("2000 bytes"));
    assert!(text.len() < 300);
    assert!(
        outcome
            .decisions
            .iter()
            .any(|d| d.kind == DecisionKind::ToolResultTruncated)
    );
}

#[tokio::test]
async fn tool_concurrency_bounds_how_many_calls_of_a_turn_run_at_once() {
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    let slow = FunctionTool::new("slow", "Waits.", json!({"type": "object"}), move |_| {
        let (r, p) = (Arc::clone(&r), Arc::clone(&p));
        async move {
            use std::sync::atomic::Ordering::SeqCst;
            let now = r.fetch_add(1, SeqCst) + 1;
            p.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            r.fetch_sub(1, SeqCst);
            Ok("done".to_owned())
        }
    });
    let calls: Vec<(&str, Value)> = (0..10).map(|_| ("slow", json!({}))).collect();
    let model = ScriptedModel::new([ScriptedTurn::tool_calls(calls), ScriptedTurn::text("ok")]);
    let agent = builder_with_tools(&model, vec![slow])
        .tool_concurrency(3)
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(results_in_request(&model, 1).len(), 10);
}

/// Redoes any reply that claims a refund was paid.
fn no_paid_promises() -> FnHook {
    FnHook::new("no-promises", |event| {
        if let HookEvent::PostReasoning(e) = event
            && e.message().text().contains("paid")
        {
            e.goto_reasoning(vec![Msg::user("Do not claim a refund was paid.")]);
        }
        Ok(())
    })
    .on(EventKind::PostReasoning)
}

async fn streamed_texts(release: StreamRelease) -> (Vec<String>, bool) {
    let model = ScriptedModel::new([
        ScriptedTurn::text("Your refund was paid already."),
        ScriptedTurn::text("A colleague will review your refund."),
    ]);
    let agent = builder(&model)
        .hook(no_paid_promises())
        .stream_release(release)
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("refund?")], session("s"))
        .collect()
        .await;
    let mut texts = Vec::new();
    let mut redone = false;
    for e in events {
        match e {
            AgentEvent::TextDelta(t) => texts.push(t),
            AgentEvent::ReasoningRedone => redone = true,
            AgentEvent::Final(o) => {
                assert_eq!(o.reply.text(), "A colleague will review your refund.");
            }
            _ => {}
        }
    }
    (texts, redone)
}

#[tokio::test]
async fn with_release_after_acceptance_a_withdrawn_reply_never_reaches_the_stream() {
    let (texts, redone) = streamed_texts(StreamRelease::AfterAcceptance).await;
    assert_eq!(texts, ["A colleague will review your refund."]);
    assert!(!redone, "nothing was shown, so nothing is withdrawn");
    // The default streams as the model produces, and withdraws the rejected turn.
    let (texts, redone) = streamed_texts(StreamRelease::Immediate).await;
    assert!(texts.concat().contains("paid"));
    assert!(redone);
}

#[tokio::test]
async fn a_subagents_call_waiting_for_a_human_surfaces_on_the_top_level_reply_and_runs_once_when_approved()
 {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            SPAWN_TOOL,
            json!({"agent_id": "refunder", "task": "refund 20"}),
        ),
        ScriptedTurn::tool_call("submitRefund", json!({"amount": 20})),
        // After the approval: the child answers, then the parent.
        ScriptedTurn::text("refunded 20"),
        ScriptedTurn::text("done: refunded"),
    ]);
    let child = SubagentDeclaration::builder("refunder")
        .description("files refunds")
        .tools(["submitRefund"])
        .build()
        .unwrap();
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .name("support")
        .hook(stop_for_human())
        .subagent(child)
        .build()
        .unwrap();
    let first = agent
        .run(vec![Msg::user("refund me")], session("s"))
        .await
        .unwrap();
    assert_eq!(first.reason, StopReason::SubagentStopped);
    assert!(log.entries().is_empty(), "nothing ran before the decision");
    let waiting = pending_approvals(&first.reply);
    assert_eq!(waiting.len(), 1, "{:?}", first.reply.metadata);
    assert_eq!(waiting[0].name, "submitRefund");
    assert_eq!(waiting[0].input, json!({"amount": 20}));
    let calls = first.reply.metadata[rein::agent::PENDING_CALLS_KEY].clone();
    assert_eq!(calls[0]["agent"], "support/refunder");
    // The delegation call is what stays pending in the parent's session.
    let stored = agent.messages(&key("s")).await;
    let last = stored.last().unwrap();
    assert_eq!(last.tool_uses()[0].name, SPAWN_TOOL);

    // A human approves the call they saw; the resumed top-level call carries the
    // decision down to the child that waits.
    let ctx = session("s");
    ctx.extensions()
        .insert(ApprovalDecisions::new().approve_call(&waiting[0]));
    let second = agent.run(vec![], ctx.clone()).await.unwrap();
    assert_eq!(second.reason, StopReason::Final);
    assert_eq!(second.reply.text(), "done: refunded");
    assert_eq!(
        log.entries(),
        [r#"refund:{"amount":20}"#],
        "ran exactly once"
    );
    assert_memory_valid(&agent.messages(&key("s")).await);
}
