//! Durable sessions: versioned stores, the file store, restart and resume, conflicts,
//! and saving after failed and cancelled calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use rein::*;
use serde_json::json;

use crate::support::*;

fn store_in(dir: &TempDir) -> FileSessionStore {
    FileSessionStore::open(dir.path()).unwrap()
}

#[tokio::test]
async fn a_new_agent_on_the_same_directory_continues_the_conversation() {
    let dir = TempDir::new("restart");
    let model = ScriptedModel::new([ScriptedTurn::text("first"), ScriptedTurn::text("second")]);
    let before = builder(&model)
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    before
        .call_with(vec![Msg::user("one")], session("s"))
        .await
        .unwrap();
    drop(before);
    let after = builder(&model)
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let reply = after
        .call_with(vec![Msg::user("two")], session("s"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "second");
    let texts: Vec<String> = model.requests()[1].messages.iter().map(Msg::text).collect();
    assert_eq!(
        texts,
        ["one", "first", "two"],
        "the restarted agent saw the history"
    );
    assert_eq!(store_in(&dir).load(&key("s")).await.unwrap().version, 2);
}

#[tokio::test]
async fn stop_agent_then_restart_then_resume_runs_the_pending_tool_uses() {
    let dir = TempDir::new("resume");
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 2, "b": 3})),
        ScriptedTurn::text("five"),
    ]);
    let stopper = FnHook::new("approval", |e| {
        if let HookEvent::PostReasoning(e) = e {
            e.stop_agent();
        }
        Ok(())
    })
    .on(EventKind::PostReasoning);
    let first = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .session_store(store_in(&dir))
        .hook(stopper)
        .build()
        .unwrap();
    let outcome = first
        .run(vec![Msg::user("2+3")], session("r"))
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::ReasoningStopped);
    drop(first);
    let stored = store_in(&dir).load(&key("r")).await.unwrap();
    assert_eq!(
        stored.messages.last().unwrap().tool_uses().len(),
        1,
        "the pending tool use was saved"
    );
    assert!(log.entries().is_empty());

    // "Process restart": a new agent, without the stopping hook, on the same directory.
    let second = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let reply = second.call_with(vec![], session("r")).await.unwrap();
    assert_eq!(reply.text(), "five");
    assert_eq!(log.entries(), ["add:2+3"]);
    assert_memory_valid(&assert_saved(&second, &store_in(&dir), &key("r")).await);
}

#[tokio::test]
async fn two_agents_sharing_a_directory_get_a_typed_conflict_instead_of_overwriting() {
    let dir = TempDir::new("conflict");
    let model = ScriptedModel::new([
        ScriptedTurn::text("a1"),
        ScriptedTurn::text("b1"),
        ScriptedTurn::text("a2"),
        ScriptedTurn::text("a3"),
    ]);
    let a = builder(&model)
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let b = builder(&model)
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    a.call_with(vec![Msg::user("from a")], session("shared"))
        .await
        .unwrap();
    b.call_with(vec![Msg::user("from b")], session("shared"))
        .await
        .unwrap();
    // `a` still holds version 1; the file is at version 2 (b's).
    let err = a
        .call_with(vec![Msg::user("a again")], session("shared"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert_eq!(
        err.store_error().unwrap().kind(),
        StoreErrorKind::Conflict,
        "{err}"
    );
    let stored = store_in(&dir).load(&key("shared")).await.unwrap();
    let texts: Vec<String> = stored.messages.iter().map(Msg::text).collect();
    assert_eq!(texts, ["from a", "a1", "from b", "b1"], "b's save was kept");
    // The next call on `a` reloads the stored session and works on top of it.
    a.call_with(vec![Msg::user("a after reload")], session("shared"))
        .await
        .unwrap();
    let stored = store_in(&dir).load(&key("shared")).await.unwrap();
    let texts: Vec<String> = stored.messages.iter().map(Msg::text).collect();
    assert_eq!(
        texts,
        ["from a", "a1", "from b", "b1", "a after reload", "a3"]
    );
    assert_eq!(stored.version, 3);
}

#[tokio::test]
async fn stores_reject_a_save_with_a_stale_version() {
    let dir = TempDir::new("stale");
    stale_version_is_rejected(store_in(&dir)).await;
    stale_version_is_rejected(InMemorySessionStore::new()).await;
}

async fn stale_version_is_rejected(store: impl SessionStore) {
    let k = SessionKey::new(Some("u"), "s");
    assert_eq!(store.load(&k).await.unwrap(), StoredSession::default());
    assert_eq!(store.save(&k, &[Msg::user("1")], 0).await.unwrap(), 1);
    assert_eq!(store.save(&k, &[Msg::user("2")], 1).await.unwrap(), 2);
    let err = store.save(&k, &[Msg::user("x")], 1).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Conflict);
    assert!(err.to_string().contains("u/s"), "{err}");
    let err = store.save(&k, &[Msg::user("x")], 0).await.unwrap_err();
    assert!(err.is_conflict());
    let loaded = store.load(&k).await.unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.messages[0].text(), "2");
}

#[tokio::test]
async fn hostile_ids_stay_inside_the_store_directory() {
    let dir = TempDir::new("names");
    let store = store_in(&dir);
    let ids = [
        "../../escape",
        "/etc/passwd",
        "a/../../b",
        "..",
        ".",
        "C:\\x",
        "\0",
        "",
    ];
    for (i, id) in ids.iter().enumerate() {
        let k = SessionKey::new(Some(id), id);
        let path = store.path_of(&k);
        assert_eq!(path.parent().unwrap(), dir.path(), "{id:?} -> {path:?}");
        if id.contains('\0') {
            // No store can hold U+0000 (the one key contract): refused, nothing written.
            let err = store.save(&k, &[Msg::user("x")], 0).await.unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::InvalidKey, "{err}");
            continue;
        }
        store
            .save(&k, &[Msg::user(format!("{i}"))], 0)
            .await
            .unwrap();
        assert_eq!(
            store.load(&k).await.unwrap().messages[0].text(),
            i.to_string()
        );
    }
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        files,
        (ids.len() - 1) * 2,
        "one data and one lock file per stored session"
    );
    let parent_entries: Vec<_> = std::fs::read_dir(dir.path().parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("escape"))
        .collect();
    assert!(parent_entries.is_empty());
}

#[tokio::test]
async fn a_corrupt_session_file_fails_the_call_with_a_typed_store_error() {
    let dir = TempDir::new("corrupt");
    let store = store_in(&dir);
    std::fs::write(
        store.path_of(&key("c")),
        b"{\"format\": \"rein-session/1\", \"vers",
    )
    .unwrap();
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = builder(&model)
        .session_store(store.clone())
        .build()
        .unwrap();
    let err = agent
        .call_with(vec![Msg::user("hi")], session("c"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert_eq!(err.store_error().unwrap().kind(), StoreErrorKind::Corrupt);
    assert!(model.requests().is_empty(), "nothing ran");
    // Nor is it overwritten by a save.
    let err = store
        .save(&key("c"), &[Msg::user("x")], 0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
    assert!(
        std::fs::read_to_string(store.path_of(&key("c")))
            .unwrap()
            .ends_with("\"vers")
    );
    // A file holding another session is not read as this one.
    std::fs::copy(store.path_of(&key("c")), store.path_of(&key("d"))).unwrap();
    store.save(&key("e"), &[Msg::user("e")], 0).await.unwrap();
    std::fs::copy(store.path_of(&key("e")), store.path_of(&key("f"))).unwrap();
    let err = store.load(&key("f")).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
    assert!(err.to_string().contains("another session"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_is_saved_by_a_background_task_without_another_call() {
    let dir = TempDir::new("dropsave");
    // Read-only: not journaled, so the dropped call's repair gives it a result
    // (a tool with an effect stays pending instead: tests/it/session/exactly_once.rs).
    let slow = FunctionTool::new("slow", "slow", json!({"type": "object"}), |_| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok("finished".to_string())
    })
    .read_only();
    let model = ScriptedModel::new([ScriptedTurn::tool_call("slow", json!({}))]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![slow]))
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let call = agent.call_with(vec![Msg::user("go")], session("d"));
    assert!(
        tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .is_err()
    );
    let stored = assert_saved(&agent, &store_in(&dir), &key("d")).await;
    let texts: Vec<String> = stored.iter().map(Msg::text).collect();
    assert_eq!(texts[0], "go");
    assert!(
        stored.last().unwrap().tool_results()[0]
            .content
            .contains("cancelled"),
        "the repaired state was saved: {stored:?}"
    );
}

/// (new version, message texts) of each save.
type Saves = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

/// A store that records every save and can be told to fail the next ones.
#[derive(Clone, Default)]
struct RecordingStore {
    inner: InMemorySessionStore,
    saves: Saves,
    fail_next: Arc<Mutex<u32>>,
}

impl SessionStore for RecordingStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        self.inner.load(key).await
    }
    async fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected: u64,
    ) -> Result<u64, StoreError> {
        {
            let mut fail = self.fail_next.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(StoreError::with_kind(StoreErrorKind::Io, key, "disk full"));
            }
        }
        self.saves
            .lock()
            .unwrap()
            .push((expected + 1, messages.iter().map(Msg::text).collect()));
        self.inner.save(key, messages, expected).await
    }
}

/// A model whose stream never yields: the call can only be dropped.
struct Stuck;

impl Model for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        Box::pin(futures::stream::pending())
    }
}

#[test]
fn without_a_runtime_the_next_call_saves_a_dropped_calls_state_first() {
    let store = RecordingStore::default();
    let agent = Agent::builder()
        .model(Stuck)
        .without_global_hooks()
        .session_store(store.clone())
        .build()
        .unwrap();
    let mut call = Box::pin(agent.call_with(vec![Msg::user("lost?")], session("n")));
    assert!((&mut call).now_or_never().is_none());
    drop(call);
    assert!(
        store.saves.lock().unwrap().is_empty(),
        "no runtime, no task"
    );
    // The next call (also stuck) first saves what the dropped one left.
    let mut next = Box::pin(agent.call_with(vec![Msg::user("again")], session("n")));
    assert!((&mut next).now_or_never().is_none());
    assert_eq!(
        *store.saves.lock().unwrap(),
        [(1, vec!["lost?".to_owned()])]
    );
}

#[tokio::test]
async fn a_failed_save_fails_the_call_and_the_next_call_saves_the_conversation() {
    let store = RecordingStore::default();
    let model = ScriptedModel::new([ScriptedTurn::text("one"), ScriptedTurn::text("two")]);
    let agent = builder(&model)
        .session_store(store.clone())
        .build()
        .unwrap();
    *store.fail_next.lock().unwrap() = 1;
    let err = agent
        .call_with(vec![Msg::user("a")], session("f"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert_eq!(err.store_error().unwrap().kind(), StoreErrorKind::Io);
    assert!(store.saves.lock().unwrap().is_empty());
    agent
        .call_with(vec![Msg::user("b")], session("f"))
        .await
        .unwrap();
    let saves = store.saves.lock().unwrap().clone();
    assert_eq!(
        saves,
        [
            (1, vec!["a".to_owned(), "one".to_owned()]),
            (2, vec!["a".into(), "one".into(), "b".into(), "two".into()])
        ],
        "the unsaved state was saved before the next call ran"
    );
}

#[tokio::test]
async fn a_failed_call_is_saved_with_its_repaired_tool_uses() {
    let dir = TempDir::new("failsave");
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})),
        ScriptedTurn::error(ModelError::new(ModelErrorKind::Server, "503")),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&Log::default())]))
        .hook(FnHook::new("gate", |_| Err(HookError::new("no"))).on(EventKind::PostActing))
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let err = agent
        .call_with(vec![Msg::user("1+2")], session("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    let stored = assert_saved(&agent, &store_in(&dir), &key("x")).await;
    assert!(stored.last().unwrap().tool_results()[0].is_error);
}

#[tokio::test]
async fn agent_messages_loads_a_stored_session_it_has_not_seen() {
    let dir = TempDir::new("peek");
    let store = store_in(&dir);
    store
        .save(&key("p"), &[Msg::user("hi"), Msg::assistant("hello")], 0)
        .await
        .unwrap();
    let agent = builder(&ScriptedModel::new([]))
        .session_store(store_in(&dir))
        .build()
        .unwrap();
    let texts: Vec<String> = agent
        .messages(&key("p"))
        .await
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(texts, ["hi", "hello"]);
    let (k, s) = FileSessionStore::read_file(&store.path_of(&key("p"))).unwrap();
    assert_eq!((k, s.version), (key("p"), 1));
}
