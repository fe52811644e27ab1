//! `RedisSessionStore` against a real `redis-server` (`scripts/test-servers` starts one
//! and exports `REIN_REDIS_URL`; `.ci/run` calls it): the shared store and lease
//! contracts, bad configuration, and a server that goes down and comes back.
//!
//! Without `REIN_REDIS_URL` the tests fail under `CI=true` and are skipped, saying so,
//! elsewhere.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rein::store::RedisSessionStore;
use rein::*;
use tokio::time::Instant;

use crate::session::store_contract::{Harness, lease_contract, server_url, store_contract};

const ENV: &str = "REIN_REDIS_URL";

/// The test server's URL, or `None` (outside CI) to skip.
pub fn redis_url() -> Option<String> {
    server_url(ENV, "Redis")
}

/// A key prefix no other test (or run) uses.
pub fn fresh_prefix() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "rein-it:{}:{}:{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

pub fn harness(url: &str) -> Harness<RedisSessionStore> {
    harness_in(url, &fresh_prefix())
}

/// A harness on the keys under `prefix` (another process can share them).
pub fn harness_in(url: &str, prefix: &str) -> Harness<RedisSessionStore> {
    let prefix = prefix.to_owned();
    let (make_url, make_prefix) = (url.to_owned(), prefix.clone());
    let corrupt_url = url.to_owned();
    Harness::new(move || {
        let (url, prefix) = (make_url.clone(), make_prefix.clone());
        async move {
            RedisSessionStore::builder()
                .url(url)
                .key_prefix(prefix)
                .connect()
                .await
                .unwrap()
        }
    })
    .with_corrupt(move |key| {
        let (url, prefix) = (corrupt_url.clone(), prefix.clone());
        async move {
            let store = RedisSessionStore::builder()
                .url(&url)
                .key_prefix(prefix)
                .connect()
                .await
                .unwrap();
            let mut conn = raw(&url).await;
            let _: () = redis::cmd("SET")
                .arg(store.data_key(&key))
                .arg("not a session")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    })
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_shared_store_contract() {
    let Some(url) = redis_url() else { return };
    store_contract(&harness(&url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_shared_lease_contract() {
    let Some(url) = redis_url() else { return };
    lease_contract(&harness(&url)).await;
}

#[tokio::test]
async fn a_redis_hash_with_an_undecodable_history_is_corrupt_on_load() {
    let Some(url) = redis_url() else { return };
    let store = RedisSessionStore::builder()
        .url(&url)
        .key_prefix(fresh_prefix())
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&url).await;
    for (field, value) in [("message", "{\"not\": \"a message\"}"), ("version", "0")] {
        let key = SessionKey::new(Some("u"), &format!("bad-{field}"));
        store.save(&key, &[Msg::user("hi")], 0).await.unwrap();
        let command = if field == "message" {
            redis::cmd("LSET")
                .arg(store.messages_key(&key))
                .arg(0)
                .arg(value)
                .clone()
        } else {
            redis::cmd("HSET")
                .arg(store.data_key(&key))
                .arg(field)
                .arg(value)
                .clone()
        };
        let _: () = command.query_async(&mut conn).await.unwrap();
        let err = store.load(&key).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{field}: {err}");
        assert!(err.to_string().contains(&format!("u/bad-{field}")), "{err}");
    }
}

#[tokio::test]
async fn a_wrong_redis_password_or_url_is_a_config_error_and_a_closed_port_is_unavailable() {
    let Some(url) = redis_url() else { return };
    let (_, host) = url.rsplit_once('@').unwrap();
    let err = RedisSessionStore::connect(&format!("redis://default:wrong@{host}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    assert!(
        !err.to_string().contains("wrong@"),
        "the password is not echoed: {err}"
    );
    let err = RedisSessionStore::connect(&format!("redis://{host}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "no password: {err}");
    let err = RedisSessionStore::connect("not a url").await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    let started = Instant::now();
    let err = RedisSessionStore::builder()
        .url(format!("redis://127.0.0.1:{}", closed_port()))
        .connect_retries(0)
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A port nothing listens on (bound, then closed).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A redis-server of this test's own, on `port`.
fn start_redis(port: u16) -> Child {
    let bin = std::env::var("REIN_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(bin)
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_that_is_down_fails_calls_cleanly_and_the_next_call_after_restart_works() {
    if redis_url().is_none() {
        return;
    }
    let port = closed_port();
    let mut server = start_redis(port);
    let store = RedisSessionStore::builder()
        .url(format!("redis://127.0.0.1:{port}"))
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(1))
        .connect_retries(1)
        .connect()
        .await
        .unwrap();
    let key = SessionKey::new(Some("u"), "restart");
    assert_eq!(
        store.save(&key, &[Msg::user("before")], 0).await.unwrap(),
        1
    );

    server.kill().unwrap();
    server.wait().unwrap();
    let started = Instant::now();
    let err = store.load(&key).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert_eq!(err.session(), Some("u/restart"));
    let err = store
        .save(&key, &[Msg::user("while down")], 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // Let the client's background reconnection attempts fail for good first: the first
    // call after the restart must not get their stale error.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut server = start_redis(port);
    // The server kept nothing (no persistence): the next call sees version 0 and works.
    let loaded = store.load(&key).await.unwrap();
    assert_eq!(loaded.version, 0);
    assert_eq!(store.save(&key, &[Msg::user("after")], 0).await.unwrap(), 1);
    server.kill().unwrap();
    server.wait().unwrap();
}

fn history(n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| Msg::user(format!("question {i}: what is the status of order {i}?")))
        .collect()
}

#[tokio::test]
async fn a_session_saved_in_the_whole_history_format_loads_and_converts_on_its_first_save() {
    let Some(url) = redis_url() else { return };
    let store = RedisSessionStore::builder()
        .url(&url)
        .key_prefix(fresh_prefix())
        .connect()
        .await
        .unwrap();
    let key = SessionKey::new(Some("u"), "old-format");
    let old = history(3);
    let mut conn = raw(&url).await;
    // What the store wrote before append-only saves: the whole history in one field.
    let _: () = redis::cmd("HSET")
        .arg(store.data_key(&key))
        .arg("format")
        .arg("rein-session/1")
        .arg("version")
        .arg("3")
        .arg("key")
        .arg(serde_json::json!([key.user_id, key.session_id]).to_string())
        .arg("fence")
        .arg("0")
        .arg("messages")
        .arg(serde_json::to_string(&old).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    let loaded = store.load(&key).await.unwrap();
    assert_eq!((loaded.messages.clone(), loaded.version), (old.clone(), 3));
    // The first save appends: the store converts the session in the same save.
    let mut new = old.clone();
    new.push(Msg::assistant("appended"));
    assert_eq!(store.save_from(&key, &new, 3, 3).await.unwrap(), 4);
    let (format, field, length): (String, bool, usize) = redis::pipe()
        .cmd("HGET")
        .arg(store.data_key(&key))
        .arg("format")
        .cmd("HEXISTS")
        .arg(store.data_key(&key))
        .arg("messages")
        .cmd("LLEN")
        .arg(store.messages_key(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (format.as_str(), field, length),
        ("rein-session/2", false, 4)
    );
    let loaded = store.load(&key).await.unwrap();
    assert_eq!((loaded.messages, loaded.version), (new.clone(), 4));
    // Deleting removes the list too.
    assert!(store.delete(&key).await.unwrap());
    let exists: usize = redis::cmd("EXISTS")
        .arg(store.messages_key(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

/// The bytes the server received for one save (its `total_net_input_bytes`), on a
/// server of this test's own, so no other test's traffic counts.
async fn bytes_received(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_input_bytes:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_a_save_sends_to_redis_do_not_grow_with_the_history() {
    if redis_url().is_none() {
        return;
    }
    let port = closed_port();
    let mut server = start_redis(port);
    let url = format!("redis://127.0.0.1:{port}");
    let store = RedisSessionStore::connect(&url).await.unwrap();
    let mut conn = raw(&url).await;
    let mut sent = Vec::new();
    for n in [10, 1000] {
        let key = SessionKey::new(Some("u"), &format!("s-{n:04}"));
        let mut messages = history(n);
        let v = store.save(&key, &messages, 0).await.unwrap();
        // One call's worth: two messages appended over the stored history.
        messages.push(Msg::user("next question"));
        messages.push(Msg::assistant("next answer"));
        let before = bytes_received(&mut conn).await;
        store.save_from(&key, &messages, n, v).await.unwrap();
        let after = bytes_received(&mut conn).await;
        sent.push(after - before);
        assert_eq!(store.load(&key).await.unwrap().messages, messages);
    }
    server.kill().unwrap();
    server.wait().unwrap();
    // The same bytes (the INFO request included), give or take a digit.
    assert!(
        sent[1] <= sent[0] + 8,
        "10 messages: {} B, 1,000: {} B",
        sent[0],
        sent[1]
    );
    assert!(sent[1] < 2_000, "{sent:?}");
}
