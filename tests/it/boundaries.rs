//! Boundaries of what is stored: nothing is saved that cannot be loaded (tool arguments
//! bounded in depth at admission, one depth bound shared by every store's save and
//! load), and one key contract for every store (`store_contract` checks it on all four).

use proptest::prelude::*;
use rein::*;
use serde_json::{Value, json};

use crate::support::{TempDir, builder, key, session};

/// A value nested `n` levels deep, alternating objects and arrays (`n` ≥ 1).
fn nested(n: usize, wide: bool) -> Value {
    let mut v = json!("leaf");
    for i in 1..n {
        v = match (i % 2, wide) {
            (0, true) => json!([1, v, "x"]),
            (0, false) => json!([v]),
            (_, true) => json!({"a": 1, "k": v}),
            (_, false) => json!({"k": v}),
        };
    }
    v
}

/// A model turn whose tool arguments are nested 124 levels deep (under serde_json's
/// 128-level limit, over every store's envelope) is refused at admission with an error
/// result naming the tool; the session saves and loads on every store kind.
#[tokio::test]
async fn deeply_nested_tool_arguments_are_refused_at_admission_and_the_session_stays_loadable() {
    let dir = TempDir::new("deep-args");
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = ran.clone();
    let tool = FunctionTool::new(
        "store_note",
        "Stores a note.",
        json!({"type": "object"}),
        move |_| {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok("stored".to_owned()) }
        },
    );
    let mut tools = Toolkit::new();
    tools.register(tool).unwrap();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("store_note", nested(124, false)),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .toolkit(tools)
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    let reply = agent
        .call_with(vec![Msg::user("save it")], session("deep"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "done");
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the tool never ran"
    );
    let sent = &model.requests()[1];
    let result = sent
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap()
        .clone();
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.contains("store_note") && result.content.contains("nested 124 levels"),
        "{}",
        result.content
    );
    // A fresh agent (another process) loads what was saved.
    let fresh = builder(&ScriptedModel::new([]))
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    let history = fresh.try_messages(&key("deep")).await.unwrap();
    assert_eq!(history.len(), 4);
    // At the bound, the arguments are admitted.
    let at = nested(MAX_ARGUMENT_DEPTH, true);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("store_note", at),
        ScriptedTurn::text("ok"),
    ]);
    let mut tools = Toolkit::new();
    tools
        .register(FunctionTool::new(
            "store_note",
            "Stores.",
            json!({"type": "object"}),
            |_| async { Ok("stored".to_owned()) },
        ))
        .unwrap();
    let agent = builder(&model)
        .toolkit(tools)
        .session_store(FileSessionStore::open(dir.path()).unwrap())
        .build()
        .unwrap();
    agent
        .call_with(vec![Msg::user("again")], session("at"))
        .await
        .unwrap();
    let sent = &model.requests()[1];
    let result = sent
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .unwrap()
        .clone();
    assert!(!result.is_error, "{result:?}");
}

/// A stored session whose values are nested `depth` levels deep (in a tool call's
/// arguments and in metadata).
fn session_at(depth: usize, wide: bool) -> Vec<Msg> {
    let mut call = Msg::assistant("");
    call.content.push(ContentBlock::ToolUse(ToolUse::new(
        "t1",
        "deep",
        nested(depth, wide),
    )));
    call.metadata.insert("note".into(), nested(depth, !wide));
    vec![
        Msg::user("go"),
        call,
        Msg::tool([ToolResult::new("t1", "deep", "ok")]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Everything the file and in-memory stores' save accepts, their load returns
    /// unchanged; what save refuses is `Unstorable` and deeper than the shared bound.
    #[test]
    fn everything_a_store_saves_it_loads_back(depth in 1usize..140, wide in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = TempDir::new("prop-depth");
        let file = FileSessionStore::open(dir.path()).unwrap();
        let memory = InMemorySessionStore::new();
        // serde_json itself refuses to build deeper values from text; build them in Rust.
        let messages = session_at(depth, wide);
        let k = key("p");
        rt.block_on(async {
            for saved in [file.save(&k, &messages, 0).await, memory.save(&k, &messages, 0).await] {
                match saved {
                    Ok(_) => prop_assert!(depth <= rein::store::MAX_STORED_DEPTH),
                    Err(e) => {
                        prop_assert_eq!(e.kind(), StoreErrorKind::Unstorable);
                        prop_assert!(depth > rein::store::MAX_STORED_DEPTH);
                    }
                }
            }
            if depth <= rein::store::MAX_STORED_DEPTH {
                prop_assert_eq!(file.load(&k).await.unwrap().messages, messages.clone());
                prop_assert_eq!(memory.load(&k).await.unwrap().messages, messages);
            }
            Ok(())
        })?;
    }
}
