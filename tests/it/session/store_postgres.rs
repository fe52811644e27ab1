//! `PostgresSessionStore` against a real PostgreSQL (`scripts/test-servers` starts a
//! throwaway cluster and exports `REIN_POSTGRES_URL`; `.ci/run` calls it): the shared
//! store and lease contracts, the migration, bad configuration, and a server that is
//! stopped and restarted.
//!
//! Without `REIN_POSTGRES_URL` the tests fail under `CI=true` and are skipped, saying so,
//! elsewhere.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rein::store::PostgresSessionStore;
use rein::*;
use tokio::time::Instant;

use crate::session::store_contract::{Harness, lease_contract, server_url, store_contract};
use crate::session::store_redis::closed_port;

const ENV: &str = "REIN_POSTGRES_URL";

/// The test server's URL, or `None` (outside CI) to skip.
pub fn postgres_url() -> Option<String> {
    server_url(ENV, "PostgreSQL")
}

/// A table name no other test (or run) uses.
pub fn fresh_table() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "it_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn connect(url: &str, table: &str) -> PostgresSessionStore {
    PostgresSessionStore::builder()
        .url(url)
        .table(table)
        .pool_size(4)
        .connect()
        .await
        .unwrap()
}

/// A plain client, for writing what the store would not.
pub async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

pub fn harness(url: &str) -> Harness<PostgresSessionStore> {
    harness_in(url, &fresh_table())
}

/// A harness on `table` (another process can share it).
pub fn harness_in(url: &str, table: &str) -> Harness<PostgresSessionStore> {
    let table = table.to_owned();
    let (make_url, make_table) = (url.to_owned(), table.clone());
    let corrupt_url = url.to_owned();
    Harness::new(move || {
        let (url, table) = (make_url.clone(), make_table.clone());
        async move { connect(&url, &table).await }
    })
    .with_corrupt(move |key| {
        let (url, table) = (corrupt_url.clone(), table.clone());
        async move {
            let key_text = serde_json::json!([key.user_id, key.session_id]).to_string();
            let n = raw(&url)
                .await
                .execute(
                    &format!(
                        "UPDATE {table} SET format = 'not-rein', messages = '{{ garbage' \
                         WHERE session_key = $1"
                    ),
                    &[&key_text],
                )
                .await
                .unwrap();
            assert_eq!(n, 1);
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_passes_the_shared_store_contract() {
    let Some(url) = postgres_url() else { return };
    store_contract(&harness(&url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_passes_the_shared_lease_contract() {
    let Some(url) = postgres_url() else { return };
    lease_contract(&harness(&url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_is_idempotent_and_safe_for_replicas_starting_together() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let stores = futures::future::join_all((0..4).map(|_| connect(&url, &table))).await;
    let key = SessionKey::new(None, "migrated");
    stores[0].save(&key, &[Msg::user("hi")], 0).await.unwrap();
    // Connecting again (migration again) keeps the data.
    let again = connect(&url, &table).await;
    assert_eq!(again.load(&key).await.unwrap().version, 1);
    // With the migration off, a missing table is a Config error naming the session.
    let store = PostgresSessionStore::builder()
        .url(&url)
        .table(fresh_table())
        .migrate(false)
        .connect()
        .await
        .unwrap();
    let err = store.load(&key).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    assert!(err.to_string().contains("migrated"), "{err}");
}

/// A replica that starts (and migrates) while another replica's calls hold their tables
/// takes no table lock when the schema is current: an `ALTER TABLE` there would wait for
/// the readers and deadlock with a load that waits for it (seen in the two-replica run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_migrating_while_another_reads_its_tables_waits_for_no_lock() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let store = connect(&url, &table).await;
    store
        .save(&SessionKey::new(None, "busy"), &[Msg::user("hi")], 0)
        .await
        .unwrap();
    // Another replica's transaction reads every table of the store and stays open.
    let reader = raw(&url).await;
    reader
        .batch_execute(&format!(
            "BEGIN; SELECT count(*) FROM {table}; SELECT count(*) FROM {table}_leases; \
             SELECT count(*) FROM {table}_messages; SELECT count(*) FROM {table}_waiters"
        ))
        .await
        .unwrap();
    let started = Instant::now();
    let again = tokio::time::timeout(Duration::from_secs(20), connect(&url, &table)).await;
    assert!(
        again.is_ok(),
        "the migration waited for the open reader ({:?})",
        started.elapsed()
    );
    reader.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test]
async fn a_postgres_row_with_an_undecodable_history_is_corrupt_on_load() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let store = connect(&url, &table).await;
    let key = SessionKey::new(Some("u"), "bad-history");
    store.save(&key, &[Msg::user("hi")], 0).await.unwrap();
    raw(&url)
        .await
        .execute(
            &format!("UPDATE {table}_messages SET message = '{{\"not\": 1}}'"),
            &[],
        )
        .await
        .unwrap();
    let err = store.load(&key).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("u/bad-history"), "{err}");
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_any_sql_runs() {
    for name in [
        "",
        "Sessions",
        "1st",
        "a-b",
        "x; DROP TABLE y",
        "a.b.c",
        "\"q\"",
        &"x".repeat(49),
    ] {
        // The URL points nowhere: the name is checked first.
        let err = PostgresSessionStore::builder()
            .url("postgres://nobody@127.0.0.1:1/none")
            .table(name)
            .connect()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Config, "{name:?}: {err}");
        assert!(err.to_string().contains("table name"), "{err}");
    }
}

#[tokio::test]
async fn a_wrong_postgres_password_or_database_is_a_config_error_and_a_closed_port_is_unavailable()
{
    let Some(url) = postgres_url() else { return };
    let (creds, host_db) = url.split_once('@').unwrap();
    let (user, _) = creds.rsplit_once(':').unwrap();
    let err = PostgresSessionStore::connect(&format!("{user}:wrong@{host_db}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    assert!(err.to_string().contains("password"), "{err}");
    let (host, _) = host_db.split_once('/').unwrap();
    let err = PostgresSessionStore::connect(&format!("{creds}@{host}/no_such_db"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    let err = PostgresSessionStore::connect("postgres://rein@127.0.0.1:notaport/postgres")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Config, "{err}");
    let started = Instant::now();
    let err = PostgresSessionStore::builder()
        .url(format!(
            "postgres://rein@127.0.0.1:{}/postgres",
            closed_port()
        ))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Runs `$REIN_PG_SPARE_CTL <action>` (stop / start the spare cluster).
fn spare_ctl(action: &str) {
    let ctl = std::env::var("REIN_PG_SPARE_CTL").unwrap();
    let status = std::process::Command::new("bash")
        .args(["-c", &format!("{ctl} {action} >/dev/null")])
        .status()
        .unwrap();
    assert!(status.success(), "pg_ctl {action}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_that_is_stopped_fails_calls_cleanly_and_the_next_call_after_restart_works()
 {
    if postgres_url().is_none() {
        return;
    }
    let Some(url) = crate::support::server::needs_env(
        "REIN_PG_SPARE_URL",
        "a spare PostgreSQL cluster",
        |_| true,
        "`scripts/test-servers` starts one (bash .ci/run does)",
    ) else {
        return;
    };
    let store = PostgresSessionStore::builder()
        .url(&url)
        .table(fresh_table())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let key = SessionKey::new(Some("u"), "restart");
    assert_eq!(
        store.save(&key, &[Msg::user("before")], 0).await.unwrap(),
        1
    );

    spare_ctl("stop -m fast");
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

    spare_ctl("start");
    // Nothing half-saved: the stored session is the one from before the outage.
    let loaded = store.load(&key).await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(
        loaded.messages.iter().map(Msg::text).collect::<Vec<_>>(),
        ["before"]
    );
    assert_eq!(store.save(&key, &[Msg::user("after")], 1).await.unwrap(), 2);
}

fn history(n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| Msg::user(format!("question {i}: what is the status of order {i}?")))
        .collect()
}

#[tokio::test]
async fn a_row_saved_in_the_whole_history_format_loads_and_converts_on_its_first_save() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let store = connect(&url, &table).await;
    let key = SessionKey::new(Some("u"), "old-format");
    let k = serde_json::json!([key.user_id, key.session_id]).to_string();
    let old = history(3);
    let raw = raw(&url).await;
    // What the store wrote before append-only saves: the whole history in the row.
    raw.execute(
        &format!(
            "INSERT INTO {table} (session_key, user_id, session_id, version, fence, format, messages)
             VALUES ($1, 'u', 'old-format', 3, 0, 'rein-session/1', $2)"
        ),
        &[&k, &serde_json::to_string(&old).unwrap()],
    )
    .await
    .unwrap();
    let loaded = store.load(&key).await.unwrap();
    assert_eq!((loaded.messages.clone(), loaded.version), (old.clone(), 3));
    let mut new = old.clone();
    new.push(Msg::assistant("appended"));
    assert_eq!(store.save_from(&key, &new, 3, 3).await.unwrap(), 4);
    let row = raw
        .query_one(
            &format!(
                "SELECT format, messages, msg_count,
                        (SELECT count(*) FROM {table}_messages WHERE session_key = $1)
                 FROM {table} WHERE session_key = $1"
            ),
            &[&k],
        )
        .await
        .unwrap();
    let (format, messages, count, rows): (String, String, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (format.as_str(), messages.as_str(), count, rows),
        ("rein-session/2", "", 4, 4)
    );
    let loaded = store.load(&key).await.unwrap();
    assert_eq!((loaded.messages, loaded.version), (new, 4));
    assert!(store.delete(&key).await.unwrap());
    let rows: i64 = raw
        .query_one(
            &format!("SELECT count(*) FROM {table}_messages WHERE session_key = $1"),
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}

/// The WAL one save writes (`pg_current_wal_lsn` before and after), the least of a few
/// tries: other tests write WAL too, which only adds.
async fn wal_of_one_save(
    raw: &tokio_postgres::Client,
    store: &PostgresSessionStore,
    key: &SessionKey,
    messages: &[Msg],
) -> i64 {
    let mut least = i64::MAX;
    let mut version = store.load(key).await.unwrap().version;
    for _ in 0..5 {
        let before: String = raw
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        // One call's worth: the last two messages rewritten over the stored history.
        version = store
            .save_from(key, messages, messages.len() - 2, version)
            .await
            .unwrap();
        let wal: i64 = raw
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::bigint",
                &[&before],
            )
            .await
            .unwrap()
            .get(0);
        least = least.min(wal);
    }
    least
}

#[tokio::test]
async fn wal_a_save_writes_does_not_grow_with_the_history() {
    let Some(url) = postgres_url() else { return };
    let store = connect(&url, &fresh_table()).await;
    let raw = raw(&url).await;
    let mut wal = Vec::new();
    for n in [10, 1000] {
        let key = SessionKey::new(Some("u"), &format!("s-{n:04}"));
        let messages = history(n);
        store.save(&key, &messages, 0).await.unwrap();
        wal.push(wal_of_one_save(&raw, &store, &key, &messages).await);
        assert_eq!(store.load(&key).await.unwrap().messages, messages);
    }
    // A whole rewrite of 1,000 messages is over 60 kB of WAL; two rows are a few hundred
    // bytes, whatever the history's length.
    assert!(
        wal[1] <= wal[0] * 2 + 1024,
        "10 messages: {} B of WAL, 1,000: {} B",
        wal[0],
        wal[1]
    );
    assert!(wal[1] < 8_000, "{wal:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_refusal_waits_no_longer_than_the_lease_wait_even_when_the_pool_is_exhausted() {
    let Some(url) = postgres_url() else { return };
    let table = fresh_table();
    let store = PostgresSessionStore::builder()
        .url(&url)
        .table(&table)
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    let key = SessionKey::new(None, "pool");
    store.save(&key, &[Msg::user("hi")], 0).await.unwrap();
    // The pool's only connection is held by a load blocked behind a table lock.
    let raw = raw(&url).await;
    raw.batch_execute(&format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    let blocked = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move { store.load(&key).await }
    });
    let waiting = format!(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = '{table}'::regclass"
    );
    while raw.query_one(&waiting, &[]).await.unwrap().get::<_, i64>(0) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ttl = Duration::from_secs(30);
    // Wait zero: refused at once, while the pool's connection is still taken (the
    // pool's own wait timeout is 10 s; the bound below only guards against a hang).
    let started = Instant::now();
    let err = store.acquire(&key, ttl, Duration::ZERO).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    assert!(err.to_string().contains("pool"), "{err}");
    assert!(!blocked.is_finished());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A wait of 300 ms: refused after it, not after the pool's timeout.
    let started = Instant::now();
    let err = store
        .acquire(&key, ttl, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(!blocked.is_finished());
    raw.batch_execute("COMMIT").await.unwrap();
    assert_eq!(blocked.await.unwrap().unwrap().version, 1);
    // With the connection back, the lease is free.
    let lease = store.acquire(&key, ttl, Duration::ZERO).await.unwrap();
    assert!(store.release(&lease).await.unwrap());
}
