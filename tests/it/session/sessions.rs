//! Sessions: isolation, concurrency, FIFO, cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use rein::*;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn sessions_have_separate_conversations() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("a1"),
        ScriptedTurn::text("b1"),
        ScriptedTurn::text("a2"),
    ]);
    let agent = builder(&model).build().unwrap();
    agent
        .call_with(vec![Msg::user("to a")], session("a"))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("to b")], session("b"))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("to a again")], session("a"))
        .await
        .unwrap();
    let a: Vec<String> = agent
        .messages(&key("a"))
        .await
        .iter()
        .map(Msg::text)
        .collect();
    let b: Vec<String> = agent
        .messages(&key("b"))
        .await
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(a, ["to a", "a1", "to a again", "a2"]);
    assert_eq!(b, ["to b", "b1"]);
    // The third request saw session a's history only.
    let third: Vec<String> = model.requests()[2].messages.iter().map(Msg::text).collect();
    assert_eq!(third, ["to a", "a1", "to a again"]);
}

#[tokio::test]
async fn the_same_session_id_for_two_users_is_two_conversations() {
    let model = ScriptedModel::new([ScriptedTurn::text("x"), ScriptedTurn::text("y")]);
    let agent = builder(&model).build().unwrap();
    let c1 = RunContext::new().with_session_id("s").with_user_id("u1");
    let c2 = RunContext::new().with_session_id("s").with_user_id("u2");
    agent.call_with(vec![Msg::user("one")], c1).await.unwrap();
    agent.call_with(vec![Msg::user("two")], c2).await.unwrap();
    assert_eq!(
        agent
            .messages(&SessionKey::new(Some("u1"), "s"))
            .await
            .len(),
        2
    );
    assert_eq!(
        agent
            .messages(&SessionKey::new(Some("u2"), "s"))
            .await
            .len(),
        2
    );
    assert!(agent.messages(&key("s")).await.is_empty());
}

/// A tool that waits until `n` calls are inside it at once ("met"), or gives up after
/// half a second ("alone").
fn rendezvous(n: usize, inside: &Arc<AtomicUsize>) -> FunctionTool {
    let inside = inside.clone();
    let met = Arc::new(std::sync::atomic::AtomicBool::new(false));
    FunctionTool::new("meet", "waits", json!({"type": "object"}), move |_| {
        let (inside, met) = (inside.clone(), met.clone());
        async move {
            if inside.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                met.store(true, Ordering::SeqCst);
            }
            for _ in 0..100 {
                if met.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            Ok(if met.load(Ordering::SeqCst) {
                "met"
            } else {
                "alone"
            }
            .to_string())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_sessions_run_concurrently_on_one_agent() {
    let inside = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("meet", json!({})),
        ScriptedTurn::tool_call("meet", json!({})),
        ScriptedTurn::text("done"),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![rendezvous(2, &inside)]))
        .build()
        .unwrap();
    let (a, b) = tokio::join!(
        agent.call_with(vec![Msg::user("x")], session("one")),
        agent.call_with(vec![Msg::user("y")], session("two")),
    );
    a.unwrap();
    b.unwrap();
    for s in ["one", "two"] {
        let stored = agent.messages(&key(s)).await;
        assert_memory_valid(&stored);
        assert_eq!(
            stored[2].tool_results()[0].content,
            "met",
            "both calls were inside the tool at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_the_same_session_are_serialized_in_arrival_order() {
    let inside = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("meet", json!({})),
        ScriptedTurn::text("first done"),
        ScriptedTurn::tool_call("meet", json!({})),
        ScriptedTurn::text("second done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![rendezvous(2, &inside)]))
        .build()
        .unwrap();
    let a1 = agent.clone();
    let first = tokio::spawn(async move {
        a1.call_with(vec![Msg::user("first")], session("same"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a2 = agent.clone();
    let second = tokio::spawn(async move {
        a2.call_with(vec![Msg::user("second")], session("same"))
            .await
    });
    assert_eq!(first.await.unwrap().unwrap().text(), "first done");
    assert_eq!(second.await.unwrap().unwrap().text(), "second done");
    let stored = agent.messages(&key("same")).await;
    assert_memory_valid(&stored);
    let texts: Vec<String> = stored.iter().map(Msg::text).collect();
    assert_eq!(texts[0], "first");
    assert_eq!(texts[3], "first done");
    assert_eq!(texts[4], "second");
    // Serialized: the tool never had two calls inside at once.
    for m in &stored {
        for r in m.tool_results() {
            assert_eq!(r.content, "alone");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_leaves_memory_valid_and_the_session_usable() {
    let started = Arc::new(AtomicUsize::new(0));
    let s2 = started.clone();
    let slow = FunctionTool::new("slow", "slow", json!({"type": "object"}), move |_| {
        let s2 = s2.clone();
        async move {
            s2.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok("finished".to_string())
        }
    });
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![("slow", json!({})), ("slow", json!({}))]),
        ScriptedTurn::text("after the drop"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![slow]))
        .build()
        .unwrap();
    let call = agent.call_with(vec![Msg::user("go")], session("d"));
    let timed_out = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert!(
        timed_out.is_err(),
        "the call was still running and is now dropped"
    );
    assert_eq!(started.load(Ordering::SeqCst), 2);
    let stored = agent.messages(&key("d")).await;
    assert_memory_valid(&stored);
    assert!(
        stored.last().unwrap().tool_results()[0]
            .content
            .contains("cancelled")
    );
    let reply = agent
        .call_with(vec![Msg::user("hello?")], session("d"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "after the drop");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_the_model_streams_leaves_memory_valid() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("too slow").with_delay(Duration::from_secs(30)),
        ScriptedTurn::text("fast"),
    ]);
    let agent = builder(&model).build().unwrap();
    let mut call = Box::pin(agent.call_with(vec![Msg::user("one")], session("m")));
    assert!((&mut call).now_or_never().is_none());
    drop(call);
    let reply = agent
        .call_with(vec![Msg::user("two")], session("m"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "fast");
    let stored = agent.messages(&key("m")).await;
    assert_memory_valid(&stored);
    let texts: Vec<String> = stored.iter().map(Msg::text).collect();
    assert_eq!(texts, ["one", "two", "fast"]);
}

/// A rich history: names, a thinking block, tool uses with arguments, an error
/// result, metadata, an imported (non-generated) id.
fn rich_history() -> Vec<Msg> {
    let mut asked = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(Thinking {
                text: "look it up".into(),
                signature: Some("sig-1".into()),
            }),
            ContentBlock::ToolUse(ToolUse::new(
                "call_1",
                "lookup",
                json!({"id": 42, "deep": {"x": [1.5, null]}}),
            )),
            ContentBlock::ToolUse(ToolUse::new("call_2", "lookup", json!({"id": "é"}))),
        ],
    );
    asked.name = Some("support".into());
    let mut results = Msg::tool([
        ToolResult::new("call_1", "lookup", "found 🚀"),
        ToolResult::error("call_2", "lookup", "no such id"),
    ]);
    results
        .metadata
        .insert("source".into(), json!({"replica": 2}));
    let mut answer = Msg::assistant("order 42 is on its way");
    answer.name = Some("support".into());
    let mut imported = Msg::user("imported from elsewhere");
    imported.id = "external-7".into();
    vec![imported, asked, results, answer]
}

#[tokio::test]
async fn an_idle_session_packed_away_comes_back_whole_for_its_next_call() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("b"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("again"),
    ]);
    // One hot session: opening any other session packs the idle one.
    let agent = builder(&model).hot_sessions(1).build().unwrap();
    let history = rich_history();
    agent
        .set_messages(&key("a"), history.clone())
        .await
        .unwrap();
    for s in ["b", "c"] {
        agent
            .call_with(vec![Msg::user(s)], session(s))
            .await
            .unwrap();
    }
    let input = Msg::user("and now?");
    agent
        .call_with(vec![input.clone()], session("a"))
        .await
        .unwrap();
    let mut expected = history;
    expected.push(input);
    assert_eq!(
        model.requests()[2].messages,
        expected,
        "the model saw a different history"
    );
    let stored = agent.messages(&key("a")).await;
    assert_eq!(stored[..expected.len()], expected[..]);
    assert_eq!(stored.last().map(Msg::text).as_deref(), Some("again"));
    // Sessions b and c were packed in turn; their snapshots are whole too.
    let b: Vec<String> = agent
        .messages(&key("b"))
        .await
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(b, ["b", "b"]);
}

/// A comparable form of a conversation (ids aside: each agent generates its own).
fn shape(messages: &[Msg]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let uses: Vec<String> = m
                .tool_uses()
                .iter()
                .map(|u| format!("{}({})", u.name, u.input))
                .collect();
            let results: Vec<String> = m
                .tool_results()
                .iter()
                .map(|r| format!("{}={}/{}", r.name, r.content, r.is_error))
                .collect();
            format!("{:?} {:?} {uses:?} {results:?}", m.role, m.text())
        })
        .collect()
}

#[tokio::test]
async fn agents_that_pack_idle_sessions_hold_the_same_conversations_as_agents_that_never_do() {
    const SESSIONS: usize = 5;
    // Which session each call goes to, and whether it calls a tool first.
    let calls: Vec<(usize, bool)> = (0..30)
        .map(|i| ((i * 7 + i / 3) % SESSIONS, i % 3 == 0))
        .collect();
    let script = || {
        let mut turns = Vec::new();
        for (i, &(_, tool)) in calls.iter().enumerate() {
            if tool {
                turns.push(ScriptedTurn::tool_call("add", json!({"a": i, "b": 1})));
            }
            turns.push(ScriptedTurn::text(format!("reply {i}")));
        }
        turns
    };
    for with_store in [false, true] {
        let dir = TempDir::new("packing");
        let run = |hot: usize| {
            let model = ScriptedModel::new(script());
            let mut b =
                builder_with_tools(&model, vec![add_tool(&Log::default())]).hot_sessions(hot);
            if with_store {
                b = b.session_store(
                    FileSessionStore::open(dir.path().join(format!("hot{hot}"))).unwrap(),
                );
            }
            let agent = b.build().unwrap();
            let calls = calls.clone();
            async move {
                for (i, (s, _)) in calls.into_iter().enumerate() {
                    agent
                        .call_with(
                            vec![Msg::user(format!("question {i}"))],
                            session(&format!("s{s}")),
                        )
                        .await
                        .unwrap();
                }
                let mut all = Vec::new();
                for s in 0..SESSIONS {
                    let messages = agent.messages(&key(&format!("s{s}"))).await;
                    assert_memory_valid(&messages);
                    all.push(shape(&messages));
                }
                all
            }
        };
        // One hot session: every session but the last one used is packed between its
        // calls. Zero: never packed.
        let packed = run(1).await;
        let plain = run(0).await;
        assert_eq!(packed, plain, "with_store = {with_store}");
        assert!(
            packed.iter().all(|s| s.len() >= 8),
            "every session took several calls"
        );
    }
}
