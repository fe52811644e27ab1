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

/// A history of about `kib` KiB.
fn history_of(kib: usize) -> Vec<Msg> {
    (0..kib)
        .map(|i| Msg::user(format!("{i:04} {}", "x".repeat(1019))))
        .collect()
}

/// Every store saves and loads up to its maximum session size: a larger save is
/// `TooLarge` (nothing written), and a larger stored value fails its load the same
/// way, before it is read (here: stored by a client with a larger limit).
async fn sessions_over_the_maximum_size_are_refused<S: SessionStore>(small: S, large: S) {
    let k = SessionKey::new(Some("size"), "big");
    small.save(&k, &history_of(8), 0).await.unwrap();
    let err = small.save(&k, &history_of(100), 1).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::TooLarge, "{err}");
    assert!(err.to_string().contains("max_session_bytes"), "{err}");
    assert_eq!(
        small.load(&k).await.unwrap().messages.len(),
        8,
        "nothing written"
    );
    large.save(&k, &history_of(100), 1).await.unwrap();
    let err = small.load(&k).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::TooLarge, "{err}");
    assert_eq!(large.load(&k).await.unwrap().messages.len(), 100);
}

#[tokio::test]
async fn the_file_store_refuses_sessions_over_its_maximum_size() {
    let dir = TempDir::new("size");
    let open = |max| {
        FileSessionStore::open(dir.path())
            .unwrap()
            .max_session_bytes(max)
    };
    sessions_over_the_maximum_size_are_refused(open(64 * 1024), open(1 << 20)).await;
    assert_eq!(rein::store::DEFAULT_MAX_SESSION_BYTES, 32 * 1024 * 1024);
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_refuses_sessions_over_its_maximum_size() {
    let Some(url) = crate::session::store_redis::redis_url() else {
        return;
    };
    let prefix = crate::session::store_redis::fresh_prefix();
    let open = |max: usize| {
        rein::store::RedisSessionStore::builder()
            .url(url.clone())
            .key_prefix(prefix.clone())
            .max_session_bytes(max)
            .connect()
    };
    sessions_over_the_maximum_size_are_refused(
        open(64 * 1024).await.unwrap(),
        open(1 << 20).await.unwrap(),
    )
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_refuses_sessions_over_its_maximum_size() {
    let Some(url) = crate::session::store_postgres::postgres_url() else {
        return;
    };
    let table = crate::session::store_postgres::fresh_table();
    let open = |max: usize| {
        rein::store::PostgresSessionStore::builder()
            .url(url.clone())
            .table(table.clone())
            .max_session_bytes(max)
            .connect()
    };
    let small = open(64 * 1024).await.unwrap();
    sessions_over_the_maximum_size_are_refused(small, open(1 << 20).await.unwrap()).await;
}
