//! The store contract: one suite of guarantees every session store passes — versions,
//! conflicts, corrupt data never overwritten, concurrent savers, unicode and large
//! histories, delete and list — and one for session leases. Run here against
//! `InMemorySessionStore` and `FileSessionStore`; `store_redis.rs` and
//! `store_postgres.rs` run it against the real engines.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use rein::*;
use tokio::time::Instant;

use crate::support::TempDir;
use crate::support::server::needs_env;

/// A store under test: `make` gives a new client on the same namespace each call;
/// `corrupt` (when the store can hold foreign data) writes, for a key, a value that is
/// not a rein session.
pub struct Harness<S> {
    pub make: Arc<dyn Fn() -> BoxFuture<'static, S> + Send + Sync>,
    pub corrupt: Option<Arc<dyn Fn(SessionKey) -> BoxFuture<'static, ()> + Send + Sync>>,
}

impl<S> Harness<S> {
    pub fn new<F, Fut>(make: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = S> + Send + 'static,
    {
        Self {
            make: Arc::new(move || Box::pin(make())),
            corrupt: None,
        }
    }

    pub fn with_corrupt<F, Fut>(mut self, corrupt: F) -> Self
    where
        F: Fn(SessionKey) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.corrupt = Some(Arc::new(move |k| Box::pin(corrupt(k))));
        self
    }

    pub async fn client(&self) -> S {
        (self.make)().await
    }
}

/// The URL of a test server from `env` ([`needs_env`]: a visible `SKIPPED` line when it
/// is unset or empty, a failure under `CI=true`, where CI starts the servers).
#[track_caller]
pub fn server_url(env: &str, what: &str) -> Option<String> {
    needs_env(
        env,
        &format!("a {what} server"),
        |url| !url.is_empty(),
        format_args!(
            "run the tests under `scripts/test-servers` (bash .ci/run does) to run the \
             {what} store tests"
        ),
    )
}

fn texts(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(Msg::text).collect()
}

fn kind<T: std::fmt::Debug>(result: Result<T, StoreError>) -> StoreErrorKind {
    result.expect_err("expected a store error").kind()
}

/// Every guarantee of the session-store contract, in turn.
pub async fn store_contract<S: SessionStore + SessionAdmin>(h: &Harness<S>) {
    versions_start_at_zero_and_grow_by_one_per_save(h).await;
    a_save_over_a_stale_version_conflicts_names_the_session_and_writes_nothing(h).await;
    of_concurrent_savers_of_one_version_exactly_one_wins(h).await;
    unicode_and_large_histories_round_trip_exactly(h).await;
    users_and_odd_ids_are_distinct_sessions(h).await;
    delete_removes_a_session_and_list_shows_a_users_sessions(h).await;
    a_key_no_store_can_hold_fails_the_same_way_on_every_store(h).await;
    everything_a_save_accepts_loads_back_and_deeper_values_are_refused(h).await;
    a_save_after_an_in_place_change_rewrites_from_the_change(h).await;
    unchanged_beyond_what_is_stored_is_refused_or_rewrites_exactly(h).await;
    appends_of_many_saves_load_back_as_one_history(h).await;
    if h.corrupt.is_some() {
        corrupt_data_fails_loads_and_saves_and_is_never_overwritten(h).await;
    }
}

fn numbered(n: usize) -> Vec<Msg> {
    (0..n).map(|i| Msg::user(format!("m{i}"))).collect()
}

async fn a_save_after_an_in_place_change_rewrites_from_the_change<S: SessionStore>(h: &Harness<S>) {
    let store = h.client().await;
    let key = SessionKey::new(Some("alice"), "in-place");
    let mut history = numbered(6);
    let v = store.save_from(&key, &history, 0, 0).await.unwrap();
    // Message 3 changes in place (a journal entry, a recorded result), two are
    // appended: the store keeps 0..3 and rewrites from 3 on.
    history[3] = Msg::user("m3 changed");
    history.push(Msg::assistant("m6"));
    history.push(Msg::user("m7"));
    let v = store.save_from(&key, &history, 3, v).await.unwrap();
    let loaded = h.client().await.load(&key).await.unwrap();
    assert_eq!(
        (loaded.messages.clone(), loaded.version),
        (history.clone(), v)
    );
    // A shorter history from an index on (the tail replaced by less) stores exactly it.
    history.truncate(4);
    history.push(Msg::assistant("m4 again"));
    let v = store.save_from(&key, &history, 4, v).await.unwrap();
    let loaded = store.load(&key).await.unwrap();
    assert_eq!(
        (loaded.messages.clone(), loaded.version),
        (history.clone(), v)
    );
    // Nothing new: a save that changes nothing still bumps the version.
    let v2 = store
        .save_from(&key, &history, history.len(), v)
        .await
        .unwrap();
    assert_eq!(v2, v + 1);
    assert_eq!(store.load(&key).await.unwrap().messages, history);
    // A whole rewrite (unchanged 0) over an appended session replaces everything.
    let other = vec![Msg::user("fresh")];
    store.save_from(&key, &other, 0, v2).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().messages, other);
    // A stale version conflicts and writes nothing, whatever `unchanged` says.
    let err = store
        .save_from(&key, &numbered(9), 1, v2)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Conflict, "{err}");
    assert_eq!(store.load(&key).await.unwrap().messages, other);
}

/// `unchanged` larger than what the store holds is the caller's mistake: a store that
/// writes only the tail refuses it as a `Conflict` and writes nothing; a store that
/// rewrites everything stores exactly `messages`. Never a mix.
async fn unchanged_beyond_what_is_stored_is_refused_or_rewrites_exactly<S: SessionStore>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let key = SessionKey::new(Some("alice"), "beyond");
    let two = numbered(2);
    let v = store.save_from(&key, &two, 0, 0).await.unwrap();
    let claimed = numbered(5);
    match store.save_from(&key, &claimed, 4, v).await {
        Err(e) => {
            assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
            assert!(e.to_string().contains("alice/beyond"), "{e}");
            let stored = store.load(&key).await.unwrap();
            assert_eq!((stored.messages, stored.version), (two, v));
        }
        Ok(v2) => {
            let stored = store.load(&key).await.unwrap();
            assert_eq!((stored.messages, stored.version), (claimed, v2));
        }
    }
    // On a session never saved, any `unchanged` above 0 is beyond it.
    let fresh = SessionKey::new(Some("alice"), "beyond-fresh");
    let three = numbered(3);
    match store.save_from(&fresh, &three, 2, 0).await {
        Err(e) => {
            assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
            assert_eq!(store.load(&fresh).await.unwrap(), StoredSession::default());
        }
        Ok(_) => assert_eq!(store.load(&fresh).await.unwrap().messages, three),
    }
}

async fn appends_of_many_saves_load_back_as_one_history<S: SessionStore>(h: &Harness<S>) {
    let store = h.client().await;
    let key = SessionKey::new(None, "appends");
    let mut history = Vec::new();
    let mut version = 0;
    for i in 0..50 {
        let unchanged = history.len();
        history.push(Msg::user(format!("q{i}")));
        history.push(Msg::assistant(format!("a{i} ✓ \"quoted\"")));
        version = store
            .save_from(&key, &history, unchanged, version)
            .await
            .unwrap();
    }
    let loaded = h.client().await.load(&key).await.unwrap();
    assert_eq!((loaded.messages, loaded.version), (history, 50));
}

async fn versions_start_at_zero_and_grow_by_one_per_save<S: SessionStore>(h: &Harness<S>) {
    let store = h.client().await;
    let key = SessionKey::new(Some("alice"), "versions");
    assert_eq!(store.load(&key).await.unwrap(), StoredSession::default());
    assert_eq!(store.save(&key, &[Msg::user("one")], 0).await.unwrap(), 1);
    let loaded = store.load(&key).await.unwrap();
    assert_eq!(
        (texts(&loaded.messages), loaded.version),
        (vec!["one".into()], 1)
    );
    let two = [Msg::user("one"), Msg::assistant("two")];
    assert_eq!(store.save(&key, &two, 1).await.unwrap(), 2);
    // Another client sees the same.
    let other = h.client().await;
    let loaded = other.load(&key).await.unwrap();
    assert_eq!((texts(&loaded.messages), loaded.version), (texts(&two), 2));
}

async fn a_save_over_a_stale_version_conflicts_names_the_session_and_writes_nothing<
    S: SessionStore,
>(
    h: &Harness<S>,
) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(Some("alice"), "conflict");
    let seen = a.load(&key).await.unwrap();
    b.save(&key, &[Msg::user("b wins")], seen.version)
        .await
        .unwrap();
    let err = a
        .save(&key, &[Msg::user("a loses")], seen.version)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Conflict, "{err}");
    assert_eq!(err.session(), Some("alice/conflict"));
    assert!(err.to_string().contains("alice/conflict"), "{err}");
    let stored = a.load(&key).await.unwrap();
    assert_eq!(
        (texts(&stored.messages), stored.version),
        (vec!["b wins".into()], 1)
    );
    // A save far ahead of the stored version conflicts too.
    assert_eq!(kind(a.save(&key, &[], 7).await), StoreErrorKind::Conflict);
}

async fn of_concurrent_savers_of_one_version_exactly_one_wins<S: SessionStore>(h: &Harness<S>) {
    let key = SessionKey::new(None, "race");
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(h.client().await);
    }
    for round in 0..3u64 {
        let results = join_all(clients.iter().enumerate().map(|(i, c)| {
            let key = &key;
            async move {
                let msg = [Msg::user(format!("round {round} writer {i}"))];
                c.save(key, &msg, round).await
            }
        }))
        .await;
        let winners: Vec<usize> = (0..results.len()).filter(|i| results[*i].is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
            }
        }
        let stored = clients[0].load(&key).await.unwrap();
        assert_eq!(stored.version, round + 1);
        assert_eq!(
            texts(&stored.messages),
            [format!("round {round} writer {}", winners[0])]
        );
    }
}

async fn unicode_and_large_histories_round_trip_exactly<S: SessionStore>(h: &Harness<S>) {
    let store = h.client().await;
    let key = SessionKey::new(Some("用户 ü"), "ünïcödé 🦀 \"quoted\" :colon: \\slash/");
    let mut history = vec![
        Msg::user("héllo wörld — 你好 — مرحبا — 🦀🚀 — \u{0} nul — \u{202e} rtl — \"q\" \\ \n\t"),
        Msg::assistant("x".repeat(200_000)),
    ];
    for i in 0..1_000 {
        history.push(Msg::user(format!("message {i} ✓")));
    }
    let version = store.save(&key, &history, 0).await.unwrap();
    let loaded = h.client().await.load(&key).await.unwrap();
    assert_eq!(loaded.version, version);
    assert_eq!(loaded.messages, history);
}

async fn users_and_odd_ids_are_distinct_sessions<S: SessionStore>(h: &Harness<S>) {
    let store = h.client().await;
    let keys = [
        SessionKey::new(None, "s"),
        SessionKey::new(Some(""), "s"),
        SessionKey::new(Some("u"), "s"),
        SessionKey::new(Some("u\",\"s"), ""),
        SessionKey::new(Some("null"), "s"),
        SessionKey::new(None, "S"),
    ];
    for (i, key) in keys.iter().enumerate() {
        store
            .save(key, &[Msg::user(format!("session {i}"))], 0)
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    }
    for (i, key) in keys.iter().enumerate() {
        let loaded = store.load(key).await.unwrap();
        assert_eq!(texts(&loaded.messages), [format!("session {i}")], "{key:?}");
    }
}

/// One key contract for every store: U+0000 in either id, or an id over
/// `MAX_KEY_BYTES`, is `InvalidKey` at construction (`SessionKey::try_new`), at load and
/// at save; nothing is written. Everything else (the empty string, quotes, globs) works.
async fn a_key_no_store_can_hold_fails_the_same_way_on_every_store<S: SessionStore>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let long = "x".repeat(rein::store::MAX_KEY_BYTES + 1);
    for (user, session) in [
        (Some("u"), "nul\0session"),
        (Some("nul\0user"), "s"),
        (None, long.as_str()),
        (Some(long.as_str()), "s"),
    ] {
        let err = SessionKey::try_new(user, session).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::InvalidKey, "{err}");
        let key = SessionKey::new(user, session);
        let err = store.save(&key, &[Msg::user("x")], 0).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::InvalidKey, "{err}");
        let err = store.load(&key).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::InvalidKey, "{err}");
    }
    let fine =
        SessionKey::try_new(Some("ünï*%_?[]"), &"y".repeat(rein::store::MAX_KEY_BYTES)).unwrap();
    store.save(&fine, &[Msg::user("ok")], 0).await.unwrap();
    assert_eq!(texts(&store.load(&fine).await.unwrap().messages), ["ok"]);
}

/// A value nested `n` levels deep (`n` ≥ 1).
fn nested(n: usize) -> serde_json::Value {
    let mut v = serde_json::json!(1);
    for i in 1..n {
        v = if i % 2 == 0 {
            serde_json::json!([v])
        } else {
            serde_json::json!({"k": v})
        };
    }
    v
}

/// Nothing is saved that cannot be loaded: a tool input or metadata value nested up to
/// `MAX_STORED_DEPTH` levels saves and loads back equal; one level more is
/// `Unstorable`, nothing written.
async fn everything_a_save_accepts_loads_back_and_deeper_values_are_refused<S: SessionStore>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let key = SessionKey::new(Some("deep"), "depth");
    let at = |n: usize| {
        let mut call = Msg::assistant("");
        call.content
            .push(ContentBlock::ToolUse(ToolUse::new("t1", "deep", nested(n))));
        call.metadata.insert("note".into(), nested(n));
        vec![
            Msg::user("go"),
            call,
            Msg::tool([ToolResult::new("t1", "deep", "ok")]),
        ]
    };
    let limit = rein::store::MAX_STORED_DEPTH;
    let ok = at(limit);
    store.save(&key, &ok, 0).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().messages, ok);
    let err = store.save(&key, &at(limit + 1), 1).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unstorable, "{err}");
    assert!(err.to_string().contains("nested"), "{err}");
    assert_eq!(
        store.load(&key).await.unwrap().version,
        1,
        "nothing written"
    );
}

async fn delete_removes_a_session_and_list_shows_a_users_sessions<
    S: SessionStore + SessionAdmin,
>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let keys = [
        SessionKey::new(Some("lister"), "b"),
        SessionKey::new(Some("lister"), "a"),
        SessionKey::new(Some("other"), "a"),
        SessionKey::new(None, "listed-without-user"),
    ];
    for key in &keys {
        store.save(key, &[Msg::user("hi")], 0).await.unwrap();
    }
    let ids = |keys: Vec<SessionKey>| keys.into_iter().map(|k| k.session_id).collect::<Vec<_>>();
    assert_eq!(ids(store.list(Some("lister")).await.unwrap()), ["a", "b"]);
    assert_eq!(ids(store.list(Some("other")).await.unwrap()), ["a"]);
    assert!(store.list(Some("nobody")).await.unwrap().is_empty());
    let without = store.list(None).await.unwrap();
    assert!(without.iter().all(|k| k.user_id.is_none()), "{without:?}");
    assert!(ids(without).contains(&"listed-without-user".to_owned()));

    assert!(store.delete(&keys[0]).await.unwrap());
    assert!(!store.delete(&keys[0]).await.unwrap());
    assert_eq!(
        store.load(&keys[0]).await.unwrap(),
        StoredSession::default()
    );
    assert_eq!(ids(store.list(Some("lister")).await.unwrap()), ["a"]);
    // A deleted session starts again at version 0.
    assert_eq!(
        store
            .save(&keys[0], &[Msg::user("again")], 0)
            .await
            .unwrap(),
        1
    );
    assert_eq!(ids(store.list(Some("lister")).await.unwrap()), ["a", "b"]);
}

async fn corrupt_data_fails_loads_and_saves_and_is_never_overwritten<
    S: SessionStore + SessionAdmin,
>(
    h: &Harness<S>,
) {
    let store = h.client().await;
    let key = SessionKey::new(Some("alice"), "corrupt");
    store.save(&key, &[Msg::user("fine")], 0).await.unwrap();
    (h.corrupt.as_ref().unwrap())(key.clone()).await;
    for _ in 0..2 {
        let err = store.load(&key).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
        assert_eq!(err.session(), Some("alice/corrupt"), "{err}");
        for expected in [0, 1, 2] {
            let err = store
                .save(&key, &[Msg::user("overwrite")], expected)
                .await
                .unwrap_err();
            assert_eq!(
                err.kind(),
                StoreErrorKind::Corrupt,
                "save over {expected}: {err}"
            );
        }
    }
    // Deleting is the way out.
    assert!(store.delete(&key).await.unwrap());
    assert_eq!(store.save(&key, &[Msg::user("fresh")], 0).await.unwrap(), 1);
}

/// Every guarantee of the lease contract, with two clients on one server.
pub async fn lease_contract<S: SessionStore + SessionLeases>(h: &Harness<S>) {
    a_lease_excludes_other_holders_until_released(h).await;
    a_lease_expires_after_its_ttl_unless_renewed(h).await;
    a_stale_holder_cannot_save_and_a_fenced_save_writes_for_the_holder(h).await;
    a_waiter_gets_the_lease_when_it_is_released(h).await;
    two_replicas_interleaving_appends_under_leases_never_lose_a_message(h, false).await;
    two_replicas_interleaving_appends_under_leases_never_lose_a_message(h, true).await;
    acquire_and_load_and_save_and_release_keep_the_lease_contract(h).await;
    let store = h.client().await;
    let key = SessionKey::new(None, "ttl");
    assert_eq!(
        kind(store.acquire(&key, Duration::ZERO, Duration::ZERO).await),
        StoreErrorKind::Config
    );
}

async fn two_replicas_interleaving_appends_under_leases_never_lose_a_message<
    S: SessionStore + SessionLeases,
>(
    h: &Harness<S>,
    combined: bool,
) {
    // `combined`: the agent's two steps (acquire_and_load, save_fenced_and_release),
    // where the next holder's load must see the save its acquisition waited for.
    let id = if combined {
        "interleaved-combined"
    } else {
        "interleaved"
    };
    let key = SessionKey::new(Some("alice"), id);
    let (a, b) = (h.client().await, h.client().await);
    let rounds = 25;
    async fn run<S: SessionStore + SessionLeases>(
        store: &S,
        key: &SessionKey,
        name: &str,
        rounds: usize,
        combined: bool,
    ) {
        let (ttl, wait) = (Duration::from_secs(10), Duration::from_secs(10));
        for i in 0..rounds {
            let (lease, loaded) = if combined {
                store.acquire_and_load(key, ttl, wait).await.unwrap()
            } else {
                (store.acquire(key, ttl, wait).await.unwrap(), None)
            };
            let loaded = match loaded {
                Some(loaded) => loaded,
                None => store.load(key).await.unwrap(),
            };
            let mut history = loaded.messages;
            let unchanged = history.len();
            history.push(Msg::user(format!("{name} {i}")));
            if combined {
                store
                    .save_fenced_and_release(&lease, &history, unchanged, loaded.version)
                    .await
                    .unwrap();
            } else {
                store
                    .save_fenced_from(&lease, &history, unchanged, loaded.version)
                    .await
                    .unwrap();
                store.release(&lease).await.unwrap();
            }
            tokio::task::yield_now().await;
        }
    }
    futures::future::join(
        run(&a, &key, "a", rounds, combined),
        run(&b, &key, "b", rounds, combined),
    )
    .await;
    let stored = h.client().await.load(&key).await.unwrap();
    assert_eq!(stored.version, 2 * rounds as u64);
    let mut got = texts(&stored.messages);
    got.sort();
    let mut want: Vec<String> = (0..rounds)
        .flat_map(|i| [format!("a {i}"), format!("b {i}")])
        .collect();
    want.sort();
    assert_eq!(got, want);
}

/// The two combined steps of a leased call keep the lease contract: the load comes
/// with the lease (or the caller loads), a save releases whatever its outcome, a stale
/// holder's save-and-release neither writes nor frees the new holder's lease, and a
/// load that fails leaves no lease held.
async fn acquire_and_load_and_save_and_release_keep_the_lease_contract<
    S: SessionStore + SessionLeases,
>(
    h: &Harness<S>,
) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(Some("u"), "combined");
    let ttl = Duration::from_secs(30);
    async fn open<S: SessionStore + SessionLeases>(
        store: &S,
        key: &SessionKey,
        ttl: Duration,
    ) -> Result<(Lease, StoredSession), StoreError> {
        let (lease, loaded) = store.acquire_and_load(key, ttl, Duration::ZERO).await?;
        let loaded = match loaded {
            Some(loaded) => loaded,
            None => store.load(key).await?,
        };
        Ok((lease, loaded))
    }
    let (lease, loaded) = open(&a, &key, ttl).await.unwrap();
    assert_eq!((loaded.version, loaded.messages.len()), (0, 0));
    assert_eq!(lease.key(), &key);
    assert_eq!(kind(open(&b, &key, ttl).await), StoreErrorKind::Busy);
    let history = numbered(3);
    assert_eq!(
        a.save_fenced_and_release(&lease, &history, 0, 0)
            .await
            .unwrap(),
        1
    );
    // Released with the save: the next holder gets it at once and sees the save.
    let (next, loaded) = open(&b, &key, ttl).await.unwrap();
    assert!(next.fence() > lease.fence());
    assert_eq!(loaded.version, 1);
    assert_eq!(texts(&loaded.messages), texts(&history));
    // A stale holder writes nothing and does not free the new holder's lease.
    assert_eq!(
        kind(a.save_fenced_and_release(&lease, &numbered(4), 3, 1).await),
        StoreErrorKind::LeaseLost
    );
    assert_eq!(kind(open(&a, &key, ttl).await), StoreErrorKind::Busy);
    // A save that fails (a stale version) still releases the lease.
    assert_eq!(
        kind(b.save_fenced_and_release(&next, &numbered(4), 3, 7).await),
        StoreErrorKind::Conflict
    );
    let (third, loaded) = open(&a, &key, ttl).await.unwrap();
    assert_eq!(loaded.version, 1, "nothing was written");
    assert_eq!(
        a.save_fenced_and_release(&third, &numbered(5), 3, 1)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        texts(&a.load(&key).await.unwrap().messages),
        texts(&numbered(5))
    );
    // A session that does not load leaves no lease held.
    if let Some(corrupt) = &h.corrupt {
        let bad = SessionKey::new(Some("u"), "combined-corrupt");
        a.save(&bad, &numbered(1), 0).await.unwrap();
        corrupt(bad.clone()).await;
        match a.acquire_and_load(&bad, ttl, Duration::ZERO).await {
            Err(e) => {
                assert_eq!(e.kind(), StoreErrorKind::Corrupt, "{e}");
                let lease = b.acquire(&bad, ttl, Duration::ZERO).await.unwrap();
                assert!(b.release(&lease).await.unwrap());
            }
            // A store that does not load with the lease: the load is the caller's.
            Ok((lease, None)) => {
                assert_eq!(kind(a.load(&bad).await), StoreErrorKind::Corrupt);
                assert!(a.release(&lease).await.unwrap());
            }
            Ok((_, Some(_))) => panic!("a corrupt session loaded"),
        }
    }
}

async fn a_lease_excludes_other_holders_until_released<S: SessionLeases>(h: &Harness<S>) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(Some("u"), "exclusion");
    let ttl = Duration::from_secs(30);
    let lease = a.acquire(&key, ttl, Duration::ZERO).await.unwrap();
    assert_eq!(lease.key(), &key);
    let err = b.acquire(&key, ttl, Duration::ZERO).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    assert_eq!(err.session(), Some("u/exclusion"));
    let started = Instant::now();
    let err = b
        .acquire(&key, ttl, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    // Another session is free.
    let other = b
        .acquire(
            &SessionKey::new(Some("u"), "exclusion-2"),
            ttl,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert!(b.release(&other).await.unwrap());

    assert!(a.release(&lease).await.unwrap());
    assert!(
        !a.release(&lease).await.unwrap(),
        "a second release finds nothing"
    );
    let next = b.acquire(&key, ttl, Duration::ZERO).await.unwrap();
    assert!(next.fence() > lease.fence(), "{next:?} after {lease:?}");
    assert_ne!(next.token(), lease.token());
    assert!(
        !a.release(&lease).await.unwrap(),
        "a stale release leaves the new holder's lease"
    );
    assert_eq!(
        kind(a.acquire(&key, ttl, Duration::ZERO).await),
        StoreErrorKind::Busy
    );
    assert!(b.release(&next).await.unwrap());
}

async fn a_lease_expires_after_its_ttl_unless_renewed<S: SessionLeases>(h: &Harness<S>) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(None, "expiry");
    let short = Duration::from_millis(400);
    // Renewed: held past several TTLs.
    let lease = a.acquire(&key, short, Duration::ZERO).await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(lease.renew_interval()).await;
        a.renew(&lease).await.unwrap();
        assert_eq!(
            kind(b.acquire(&key, short, Duration::ZERO).await),
            StoreErrorKind::Busy
        );
    }
    // Not renewed (the holder "died"): another client gets it after the TTL.
    let started = Instant::now();
    let next = b
        .acquire(&key, Duration::from_secs(30), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(next.fence() > lease.fence());
    let err = a.renew(&lease).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::LeaseLost, "{err}");
    assert!(!a.release(&lease).await.unwrap());
    assert!(b.release(&next).await.unwrap());
}

async fn a_stale_holder_cannot_save_and_a_fenced_save_writes_for_the_holder<
    S: SessionStore + SessionLeases,
>(
    h: &Harness<S>,
) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(Some("u"), "fencing");
    let stale = a
        .acquire(&key, Duration::from_millis(200), Duration::ZERO)
        .await
        .unwrap();
    let seen = a.load(&key).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Expired but not yet taken over: still refused.
    let err = a
        .save_fenced(&stale, &[Msg::user("stale")], seen.version)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::LeaseLost, "{err}");
    assert_eq!(err.session(), Some("u/fencing"));
    let holder = b
        .acquire(&key, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        kind(
            a.save_fenced(&stale, &[Msg::user("stale")], seen.version)
                .await
        ),
        StoreErrorKind::LeaseLost
    );
    assert_eq!(
        b.load(&key).await.unwrap(),
        StoredSession::default(),
        "nothing written"
    );
    assert_eq!(
        b.save_fenced(&holder, &[Msg::user("holder")], 0)
            .await
            .unwrap(),
        1
    );
    // The holder's fenced save still checks the version.
    assert_eq!(
        kind(b.save_fenced(&holder, &[Msg::user("again")], 0).await),
        StoreErrorKind::Conflict
    );
    assert_eq!(
        b.save_fenced(&holder, &[Msg::user("holder"), Msg::user("2")], 1)
            .await
            .unwrap(),
        2
    );
    // After the holder releases, its lease cannot save either.
    assert!(b.release(&holder).await.unwrap());
    assert_eq!(
        kind(b.save_fenced(&holder, &[], 2).await),
        StoreErrorKind::LeaseLost
    );
    // A hand-made lease with a made-up token is not held.
    let forged = Lease::new(
        key.clone(),
        "forged".into(),
        u64::MAX / 4,
        Duration::from_secs(1),
    );
    assert_eq!(
        kind(a.save_fenced(&forged, &[], 2).await),
        StoreErrorKind::LeaseLost
    );
    let stored = a.load(&key).await.unwrap();
    assert_eq!(
        (texts(&stored.messages), stored.version),
        (vec!["holder".into(), "2".into()], 2)
    );
}

async fn a_waiter_gets_the_lease_when_it_is_released<S: SessionLeases>(h: &Harness<S>) {
    let (a, b) = (h.client().await, h.client().await);
    let key = SessionKey::new(None, "waiting");
    let ttl = Duration::from_secs(30);
    let lease = a.acquire(&key, ttl, Duration::ZERO).await.unwrap();
    let started = Instant::now();
    let (got, released) = tokio::join!(b.acquire(&key, ttl, Duration::from_secs(10)), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        a.release(&lease).await
    });
    assert!(released.unwrap());
    let got = got.unwrap();
    // Well under the TTL and the wait: it came from the release, not an expiry.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(got.fence() > lease.fence());
    assert!(b.release(&got).await.unwrap());
}

#[tokio::test]
async fn the_in_memory_store_passes_the_shared_store_contract() {
    let shared = InMemorySessionStore::new();
    store_contract(&Harness::new(move || std::future::ready(shared.clone()))).await;
}

#[tokio::test]
async fn the_in_memory_store_passes_the_shared_lease_contract() {
    let shared = InMemorySessionStore::new();
    lease_contract(&Harness::new(move || std::future::ready(shared.clone()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_passes_the_shared_store_contract() {
    let dir = Arc::new(TempDir::workspace("store-contract"));
    let make_dir = dir.clone();
    let corrupt_store = FileSessionStore::open(dir.path()).unwrap();
    let harness =
        Harness::new(move || std::future::ready(FileSessionStore::open(make_dir.path()).unwrap()))
            .with_corrupt(move |key| {
                std::fs::write(corrupt_store.path_of(&key), b"{ not a session").unwrap();
                std::future::ready(())
            });
    store_contract(&harness).await;
}
