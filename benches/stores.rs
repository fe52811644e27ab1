//! Per-call session-store overhead on loopback: what a call on a stored session adds
//! (load + save; with a lease: acquire + load + fenced save + release), for histories
//! of 10 and 1,000 messages, on the in-memory, file, Redis and PostgreSQL stores.
//!
//! Run: `scripts/test-servers cargo bench --all-features --bench stores` (the Redis and
//! PostgreSQL rows need `REIN_REDIS_URL` / `REIN_POSTGRES_URL`; without them those rows
//! print `SKIPPED` and measure nothing). The file store `fsync`s every save, so its row
//! measures the disk as much as the code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use divan::Bencher;
use rein::store::{PostgresSessionStore, RedisSessionStore};
use rein::*;
use tokio::runtime::Runtime;

fn main() {
    divan::main();
}

const SIZES: [usize; 2] = [10, 1000];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn history(n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Msg::user(format!("question {i}: what is the status of order {i}?"))
            } else {
                Msg::assistant(format!(
                    "answer {i}: order {i} shipped yesterday, tracking 1Z{i:08}."
                ))
            }
        })
        .collect()
}

fn url(var: &str) -> Option<String> {
    let url = std::env::var(var).ok().filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!("SKIPPED: {var} is unset (run under scripts/test-servers)");
    }
    url
}

fn unique(label: &str) -> String {
    format!(
        "bench_{label}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

/// One call's store traffic: load, then save over the loaded version.
fn load_save<S: SessionStore>(bencher: Bencher, rt: &Runtime, store: &S, n: usize) {
    let key = SessionKey::new(Some("bench"), &format!("load-save-{n}"));
    let messages = history(n);
    rt.block_on(async {
        let v = store.load(&key).await.unwrap().version;
        store.save(&key, &messages, v).await.unwrap();
    });
    bencher.bench_local(|| {
        rt.block_on(async {
            let loaded = store.load(&key).await.unwrap();
            store.save(&key, &messages, loaded.version).await.unwrap()
        })
    });
}

/// One call's store traffic under a lease: acquire, load, fenced save, release.
fn leased<S: SessionStore + SessionLeases>(bencher: Bencher, rt: &Runtime, store: &S, n: usize) {
    let key = SessionKey::new(Some("bench"), &format!("leased-{n}"));
    let messages = history(n);
    bencher.bench_local(|| {
        rt.block_on(async {
            let lease = store
                .acquire(&key, Duration::from_secs(30), Duration::from_secs(5))
                .await
                .unwrap();
            let loaded = store.load(&key).await.unwrap();
            let v = store
                .save_fenced(&lease, &messages, loaded.version)
                .await
                .unwrap();
            store.release(&lease).await.unwrap();
            v
        })
    });
}

#[divan::bench(args = SIZES)]
fn memory_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    load_save(bencher, &rt, &InMemorySessionStore::new(), n);
}

#[divan::bench(args = SIZES)]
fn file_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    let dir = std::env::temp_dir().join(unique("file"));
    load_save(bencher, &rt, &FileSessionStore::open(&dir).unwrap(), n);
    let _ = std::fs::remove_dir_all(&dir);
}

fn redis(rt: &Runtime) -> Option<RedisSessionStore> {
    let url = url("REIN_REDIS_URL")?;
    Some(rt.block_on(async {
        RedisSessionStore::builder()
            .url(url)
            .key_prefix(format!("{}:", unique("redis")))
            .connect()
            .await
            .unwrap()
    }))
}

fn postgres(rt: &Runtime) -> Option<PostgresSessionStore> {
    let url = url("REIN_POSTGRES_URL")?;
    Some(rt.block_on(async {
        PostgresSessionStore::builder()
            .url(url)
            .table(unique("pg"))
            .connect()
            .await
            .unwrap()
    }))
}

#[divan::bench(args = SIZES)]
fn redis_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    if let Some(store) = redis(&rt) {
        load_save(bencher, &rt, &store, n);
    }
}

#[divan::bench(args = SIZES)]
fn redis_leased_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    if let Some(store) = redis(&rt) {
        leased(bencher, &rt, &store, n);
    }
}

#[divan::bench(args = SIZES)]
fn postgres_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    if let Some(store) = postgres(&rt) {
        load_save(bencher, &rt, &store, n);
    }
}

#[divan::bench(args = SIZES)]
fn postgres_leased_load_save(bencher: Bencher, n: usize) {
    let rt = runtime();
    if let Some(store) = postgres(&rt) {
        leased(bencher, &rt, &store, n);
    }
}
