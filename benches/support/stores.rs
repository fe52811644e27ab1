//! Per-call session-store overhead, shared by `benches/stores.rs` and the `bench_report`
//! example: what a call on a stored session adds to it, timed call by call so p50 and
//! p99 are real percentiles of single calls.
//!
//! - `save`: what an agent with `session_store` writes per call on a session it holds
//!   (it loads only on the first call): one save of what the call added, two messages
//!   over the stored history ([`SessionStore::save_from`]); the `bench_report` keys
//!   `redis_1000_over_10=` and `postgres_1000_over_10=` are this row's p50 at 1,000
//!   messages over its p50 at 10;
//! - `load+save`: a load, then a save of the last two messages over the loaded version
//!   (an agent that reloads every call);
//! - `leased`: acquire the session's lease, load, fenced save of the last two messages,
//!   release (an agent with `leased_session_store`: the traffic of every call);
//! - `journal`: what the effect journal adds per tool call that is not read-only: the
//!   claim before the tool and the settle after it, two saves of the last message (its
//!   metadata changes; fenced under a held lease where the store has leases).
//!
//! Histories of 10 and 1,000 messages (~60 bytes of text each), on the in-memory, file,
//! Redis (feature `redis`, `REIN_REDIS_URL`) and PostgreSQL (feature `postgres`,
//! `REIN_POSTGRES_URL`) stores. An engine row without its feature or its variable is
//! reported as skipped, with the reason. The file store `fsync`s every save, so its row
//! measures the disk as much as the code. Engine rows write under the key prefix
//! `rein-bench:` (Redis) and the table `rein_bench_sessions` (PostgreSQL), with session
//! ids of this process, and delete their sessions at the end.

use std::time::{Duration, Instant};

use rein::*;

/// The history sizes measured.
pub const SIZES: [usize; 2] = [10, 1000];

/// One measured row: a store and mode, and per history size `(p50, p99)` of one call.
pub struct StoreRow {
    pub store: &'static str,
    pub mode: &'static str,
    /// `Ok([(p50, p99); SIZES.len()])`, or why the row was not measured.
    pub result: Result<[(Duration, Duration); 2], String>,
}

/// A history of `n` alternating user/assistant messages.
pub fn store_history(n: usize) -> Vec<Msg> {
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

/// `(p50, p99)` of `samples` (sorted in place); nearest-rank percentiles.
pub fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |p: usize| {
        let rank = (samples.len() * p).div_ceil(100).max(1);
        samples[rank.min(samples.len()) - 1]
    };
    (at(50), at(99))
}

fn key(label: &str, n: usize) -> SessionKey {
    SessionKey::new(
        Some("bench"),
        &format!("{label}-{n}-{}", std::process::id()),
    )
}

/// Times `samples` saves of one call's two messages over a held session of `n`.
async fn save_only<S: SessionStore>(
    store: &S,
    n: usize,
    samples: usize,
) -> Result<(Duration, Duration), StoreError> {
    let key = key("save", n);
    let messages = store_history(n);
    let mut version = store.load(&key).await?.version;
    version = store.save(&key, &messages, version).await?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 + 1 {
        let t = Instant::now();
        version = store.save_from(&key, &messages, n - 2, version).await?;
        if i > samples / 10 {
            times.push(t.elapsed());
        }
    }
    Ok(percentiles(&mut times))
}

/// `p50 at 1,000 / p50 at 10` of the row of `store` and `mode`, when it was measured.
pub fn ratio_1000_over_10(rows: &[StoreRow], store: &str, mode: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.store == store && r.mode == mode)
        .and_then(|r| r.result.as_ref().ok())
        .map(|[(a50, _), (b50, _)]| b50.as_secs_f64() / a50.as_secs_f64())
}

/// Times `samples` calls of load + save (after `samples / 10 + 1` untimed ones).
async fn load_save<S: SessionStore>(
    store: &S,
    n: usize,
    samples: usize,
) -> Result<(Duration, Duration), StoreError> {
    let key = key("load-save", n);
    let messages = store_history(n);
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 + 1 {
        let t = Instant::now();
        let loaded = store.load(&key).await?;
        let unchanged = loaded.messages.len().min(n - 2);
        std::hint::black_box(
            store
                .save_from(&key, &messages, unchanged, loaded.version)
                .await?,
        );
        if i > samples / 10 {
            times.push(t.elapsed());
        }
    }
    Ok(percentiles(&mut times))
}

/// Times `samples` calls of acquire + load + fenced save + release.
async fn leased<S: SessionStore + SessionLeases>(
    store: &S,
    n: usize,
    samples: usize,
) -> Result<(Duration, Duration), StoreError> {
    let key = key("leased", n);
    let messages = store_history(n);
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 + 1 {
        let t = Instant::now();
        let lease = store
            .acquire(&key, Duration::from_secs(30), Duration::from_secs(5))
            .await?;
        let loaded = store.load(&key).await?;
        let unchanged = loaded.messages.len().min(n - 2);
        std::hint::black_box(
            store
                .save_fenced_from(&lease, &messages, unchanged, loaded.version)
                .await?,
        );
        store.release(&lease).await?;
        if i > samples / 10 {
            times.push(t.elapsed());
        }
    }
    Ok(percentiles(&mut times))
}

/// Times `samples` tool calls' journal writes on a held lease: the claim before the
/// tool and the settle after it, each a fenced save of the last message over the stored
/// history (what the effect journal adds to a call per turn with a tool that is not
/// read-only).
async fn journal_leased<S: SessionStore + SessionLeases>(
    store: &S,
    n: usize,
    samples: usize,
) -> Result<(Duration, Duration), StoreError> {
    let key = key("journal", n);
    let messages = store_history(n);
    let lease = store
        .acquire(&key, Duration::from_secs(300), Duration::from_secs(5))
        .await?;
    let mut version = store.load(&key).await?.version;
    version = store.save_fenced(&lease, &messages, version).await?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 + 1 {
        let t = Instant::now();
        version = store
            .save_fenced_from(&lease, &messages, n - 1, version)
            .await?;
        version = store
            .save_fenced_from(&lease, &messages, n - 1, version)
            .await?;
        if i > samples / 10 {
            times.push(t.elapsed());
        }
    }
    store.release(&lease).await?;
    Ok(percentiles(&mut times))
}

/// The journal's two writes per tool call without a lease (claim, settle).
async fn journal_plain<S: SessionStore>(
    store: &S,
    n: usize,
    samples: usize,
) -> Result<(Duration, Duration), StoreError> {
    let key = key("journal", n);
    let messages = store_history(n);
    let mut version = store.load(&key).await?.version;
    version = store.save(&key, &messages, version).await?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 + 1 {
        let t = Instant::now();
        version = store.save_from(&key, &messages, n - 1, version).await?;
        version = store.save_from(&key, &messages, n - 1, version).await?;
        if i > samples / 10 {
            times.push(t.elapsed());
        }
    }
    Ok(percentiles(&mut times))
}

/// Both sizes of one row (`one(n)` measures size `n`); the first error ends the row.
async fn row<F, Fut>(store: &'static str, mode: &'static str, mut one: F) -> StoreRow
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(Duration, Duration), StoreError>>,
{
    let mut out = [(Duration::ZERO, Duration::ZERO); 2];
    for (slot, n) in out.iter_mut().zip(SIZES) {
        match one(n).await {
            Ok(p) => *slot = p,
            Err(e) => {
                return StoreRow {
                    store,
                    mode,
                    result: Err(format!("failed: {e}")),
                };
            }
        }
    }
    StoreRow {
        store,
        mode,
        result: Ok(out),
    }
}

fn skipped(store: &'static str, why: String) -> StoreRow {
    StoreRow {
        store,
        mode: "",
        result: Err(why),
    }
}

/// The URL in `var`, or why the engine's rows are skipped.
fn server_url(var: &str) -> Result<String, String> {
    std::env::var(var)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| format!("SKIPPED: {var} is unset (run under scripts/test-servers)"))
}

/// Deletes the bench's sessions (`key("load-save"|"leased", n)`) from `store`.
async fn delete_bench_sessions<S: rein::store::SessionAdmin>(store: &S) {
    for n in SIZES {
        for label in ["save", "load-save", "leased", "journal"] {
            let _ = store.delete(&key(label, n)).await;
        }
    }
}

/// Measures every row with `samples` timed calls per row and size.
pub async fn store_rows(samples: usize) -> Vec<StoreRow> {
    let samples = samples.max(1);
    let mut rows = Vec::new();
    let memory = InMemorySessionStore::new();
    rows.push(row("in-memory", "save", |n| save_only(&memory, n, samples)).await);
    rows.push(row("in-memory", "load+save", |n| load_save(&memory, n, samples)).await);
    rows.push(row("in-memory", "leased", |n| leased(&memory, n, samples)).await);
    rows.push(
        row("in-memory", "journal", |n| {
            journal_leased(&memory, n, samples)
        })
        .await,
    );

    match tempfile::tempdir() {
        Ok(dir) => match FileSessionStore::open(dir.path()) {
            Ok(file) => {
                rows.push(row("file", "save", |n| save_only(&file, n, samples)).await);
                rows.push(row("file", "load+save", |n| load_save(&file, n, samples)).await);
                rows.push(row("file", "journal", |n| journal_plain(&file, n, samples)).await);
            }
            Err(e) => rows.push(skipped("file", format!("failed: {e}"))),
        },
        Err(e) => rows.push(skipped("file", format!("no temporary directory: {e}"))),
    }

    #[cfg(feature = "redis")]
    match server_url("REIN_REDIS_URL") {
        Ok(url) => match rein::store::RedisSessionStore::builder()
            .url(url)
            .key_prefix("rein-bench:")
            .connect()
            .await
        {
            Ok(redis) => {
                rows.push(row("redis", "save", |n| save_only(&redis, n, samples)).await);
                rows.push(row("redis", "load+save", |n| load_save(&redis, n, samples)).await);
                rows.push(row("redis", "leased", |n| leased(&redis, n, samples)).await);
                rows.push(row("redis", "journal", |n| journal_leased(&redis, n, samples)).await);
                delete_bench_sessions(&redis).await;
            }
            Err(e) => rows.push(skipped("redis", format!("failed: {e}"))),
        },
        Err(why) => rows.push(skipped("redis", why)),
    }
    #[cfg(not(feature = "redis"))]
    rows.push(skipped(
        "redis",
        "SKIPPED: built without the `redis` feature".to_owned(),
    ));

    #[cfg(feature = "postgres")]
    match server_url("REIN_POSTGRES_URL") {
        Ok(url) => match rein::store::PostgresSessionStore::builder()
            .url(url)
            .table("rein_bench_sessions")
            .connect()
            .await
        {
            Ok(pg) => {
                rows.push(row("postgres", "save", |n| save_only(&pg, n, samples)).await);
                rows.push(row("postgres", "load+save", |n| load_save(&pg, n, samples)).await);
                rows.push(row("postgres", "leased", |n| leased(&pg, n, samples)).await);
                rows.push(row("postgres", "journal", |n| journal_leased(&pg, n, samples)).await);
                delete_bench_sessions(&pg).await;
            }
            Err(e) => rows.push(skipped("postgres", format!("failed: {e}"))),
        },
        Err(why) => rows.push(skipped("postgres", why)),
    }
    #[cfg(not(feature = "postgres"))]
    rows.push(skipped(
        "postgres",
        "SKIPPED: built without the `postgres` feature".to_owned(),
    ));
    rows
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// The rows as a table: per size, p50 and p99 of one call in µs.
pub fn store_table(rows: &[StoreRow], samples: usize) -> String {
    let mut out = format!(
        "store overhead per call, µs ({samples} timed calls per cell; save = one call's two messages over a held session; leased = acquire + load + fenced save + release; journal = what the effect journal adds per tool call: claim + settle, two (fenced) saves)\n{:<10} {:<10} {:>10} {:>10} {:>12} {:>12}\n",
        "store", "mode", "10 p50", "10 p99", "1,000 p50", "1,000 p99"
    );
    for r in rows {
        match &r.result {
            Ok([(a50, a99), (b50, b99)]) => out.push_str(&format!(
                "{:<10} {:<10} {:>10} {:>10} {:>12} {:>12}\n",
                r.store,
                r.mode,
                us(*a50),
                us(*a99),
                us(*b50),
                us(*b99)
            )),
            Err(why) => out.push_str(&format!("{:<10} {:<10} {why}\n", r.store, r.mode)),
        }
    }
    out
}
