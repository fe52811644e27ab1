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
//! - `leased`: what an agent with `leased_session_store` sends per call: acquire the
//!   session's lease and load it ([`SessionLeases::acquire_and_load`]), then the fenced
//!   save of the last two messages and the release
//!   ([`SessionLeases::save_fenced_and_release`]); two round trips on Redis and
//!   PostgreSQL;
//! - `leased-4`: the same as four separate steps (acquire, load, fenced save, release),
//!   for comparison;
//! - `journal`: what the effect journal adds per tool call that is not read-only: the
//!   claim before the tool and the settle after it, two saves of the last message (its
//!   metadata changes; fenced under a held lease where the store has leases).
//!
//! Histories of 10 and 1,000 messages (~60 bytes of text each), measured interleaved
//! (one call at each size per round, so the machine's load affects both alike), on the
//! in-memory, file,
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

/// The timed calls per size and the untimed warm-up calls before them.
fn rounds(samples: usize) -> (usize, usize) {
    (samples / 10 + 1, samples)
}

/// Both sizes' measurements, interleaved: in round `i` one call at each size, the
/// order alternating, so load from elsewhere on the machine falls on both sizes alike
/// (run one after the other, a busy spell can land on one size only and move the
/// ratio).
struct Interleaved {
    warmup: usize,
    samples: usize,
    times: [Vec<Duration>; 2],
}

impl Interleaved {
    fn new(samples: usize) -> Self {
        let (warmup, samples) = rounds(samples);
        Self {
            warmup,
            samples,
            times: [Vec::with_capacity(samples), Vec::with_capacity(samples)],
        }
    }

    /// The rounds to run (warm-up included).
    fn total(&self) -> usize {
        self.warmup + self.samples
    }

    /// The size indexes of round `i`, in the order to run them.
    fn order(i: usize) -> [usize; 2] {
        if i.is_multiple_of(2) { [0, 1] } else { [1, 0] }
    }

    fn record(&mut self, i: usize, size: usize, elapsed: Duration) {
        if i >= self.warmup {
            self.times[size].push(elapsed);
        }
    }

    fn finish(mut self) -> [(Duration, Duration); 2] {
        let [a, b] = &mut self.times;
        [percentiles(a), percentiles(b)]
    }
}

/// Times saves of one call's two messages over a held session of each size.
async fn save_only<S: SessionStore>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("save", n));
    let histories = SIZES.map(store_history);
    let mut versions = [0; 2];
    for j in 0..2 {
        let version = store.load(&keys[j]).await?.version;
        versions[j] = store.save(&keys[j], &histories[j], version).await?;
    }
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            versions[j] = store
                .save_from(&keys[j], &histories[j], n - 2, versions[j])
                .await?;
            m.record(i, j, t.elapsed());
        }
    }
    Ok(m.finish())
}

/// `p50 at 1,000 / p50 at 10` of the row of `store` and `mode`, when it was measured.
pub fn ratio_1000_over_10(rows: &[StoreRow], store: &str, mode: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.store == store && r.mode == mode)
        .and_then(|r| r.result.as_ref().ok())
        .map(|[(a50, _), (b50, _)]| b50.as_secs_f64() / a50.as_secs_f64())
}

/// Times calls of load + save.
async fn load_save<S: SessionStore>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("load-save", n));
    let histories = SIZES.map(store_history);
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            let loaded = store.load(&keys[j]).await?;
            let unchanged = loaded.messages.len().min(n - 2);
            std::hint::black_box(
                store
                    .save_from(&keys[j], &histories[j], unchanged, loaded.version)
                    .await?,
            );
            m.record(i, j, t.elapsed());
        }
    }
    Ok(m.finish())
}

/// Times leased calls as an agent makes them: acquire and load
/// ([`SessionLeases::acquire_and_load`], a separate load when the store does not load
/// with the lease), then the fenced save and the release
/// ([`SessionLeases::save_fenced_and_release`]).
async fn leased<S: SessionStore + SessionLeases>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("leased", n));
    let histories = SIZES.map(store_history);
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            let (lease, loaded) = store
                .acquire_and_load(&keys[j], Duration::from_secs(30), Duration::from_secs(5))
                .await?;
            let loaded = match loaded {
                Some(loaded) => loaded,
                None => store.load(&keys[j]).await?,
            };
            let unchanged = loaded.messages.len().min(n - 2);
            std::hint::black_box(
                store
                    .save_fenced_and_release(&lease, &histories[j], unchanged, loaded.version)
                    .await?,
            );
            m.record(i, j, t.elapsed());
        }
    }
    Ok(m.finish())
}

/// Times leased calls made of the four separate steps: acquire, load, fenced save,
/// release (four round trips on an engine; what `leased` did before the combined
/// methods).
async fn leased_steps<S: SessionStore + SessionLeases>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("leased-4", n));
    let histories = SIZES.map(store_history);
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            let lease = store
                .acquire(&keys[j], Duration::from_secs(30), Duration::from_secs(5))
                .await?;
            let loaded = store.load(&keys[j]).await?;
            let unchanged = loaded.messages.len().min(n - 2);
            std::hint::black_box(
                store
                    .save_fenced_from(&lease, &histories[j], unchanged, loaded.version)
                    .await?,
            );
            store.release(&lease).await?;
            m.record(i, j, t.elapsed());
        }
    }
    Ok(m.finish())
}

/// Times tool calls' journal writes on a held lease: the claim before the tool and the
/// settle after it, each a fenced save of the last message over the stored history
/// (what the effect journal adds to a call per turn with a tool that is not
/// read-only).
async fn journal_leased<S: SessionStore + SessionLeases>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("journal", n));
    let histories = SIZES.map(store_history);
    let mut leases = Vec::with_capacity(2);
    let mut versions = [0; 2];
    for j in 0..2 {
        let lease = store
            .acquire(&keys[j], Duration::from_secs(300), Duration::from_secs(5))
            .await?;
        let version = store.load(&keys[j]).await?.version;
        versions[j] = store.save_fenced(&lease, &histories[j], version).await?;
        leases.push(lease);
    }
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            for _ in 0..2 {
                versions[j] = store
                    .save_fenced_from(&leases[j], &histories[j], n - 1, versions[j])
                    .await?;
            }
            m.record(i, j, t.elapsed());
        }
    }
    for lease in &leases {
        store.release(lease).await?;
    }
    Ok(m.finish())
}

/// The journal's two writes per tool call without a lease (claim, settle).
async fn journal_plain<S: SessionStore>(
    store: &S,
    samples: usize,
) -> Result<[(Duration, Duration); 2], StoreError> {
    let keys = SIZES.map(|n| key("journal", n));
    let histories = SIZES.map(store_history);
    let mut versions = [0; 2];
    for j in 0..2 {
        let version = store.load(&keys[j]).await?.version;
        versions[j] = store.save(&keys[j], &histories[j], version).await?;
    }
    let mut m = Interleaved::new(samples);
    for i in 0..m.total() {
        for j in Interleaved::order(i) {
            let n = SIZES[j];
            let t = Instant::now();
            for _ in 0..2 {
                versions[j] = store
                    .save_from(&keys[j], &histories[j], n - 1, versions[j])
                    .await?;
            }
            m.record(i, j, t.elapsed());
        }
    }
    Ok(m.finish())
}

/// One row: both sizes, measured interleaved; an error ends the row.
async fn row<Fut>(store: &'static str, mode: &'static str, measured: Fut) -> StoreRow
where
    Fut: std::future::Future<Output = Result<[(Duration, Duration); 2], StoreError>>,
{
    StoreRow {
        store,
        mode,
        result: measured.await.map_err(|e| format!("failed: {e}")),
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
        for label in ["save", "load-save", "leased", "leased-4", "journal"] {
            let _ = store.delete(&key(label, n)).await;
        }
    }
}

/// Measures every row with `samples` timed calls per row and size.
pub async fn store_rows(samples: usize) -> Vec<StoreRow> {
    let samples = samples.max(1);
    let mut rows = Vec::new();
    let memory = InMemorySessionStore::new();
    rows.push(row("in-memory", "save", save_only(&memory, samples)).await);
    rows.push(row("in-memory", "load+save", load_save(&memory, samples)).await);
    rows.push(row("in-memory", "leased", leased(&memory, samples)).await);
    rows.push(row("in-memory", "leased-4", leased_steps(&memory, samples)).await);
    rows.push(row("in-memory", "journal", journal_leased(&memory, samples)).await);

    match tempfile::tempdir() {
        Ok(dir) => match FileSessionStore::open(dir.path()) {
            Ok(file) => {
                rows.push(row("file", "save", save_only(&file, samples)).await);
                rows.push(row("file", "load+save", load_save(&file, samples)).await);
                rows.push(row("file", "journal", journal_plain(&file, samples)).await);
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
                rows.push(row("redis", "save", save_only(&redis, samples)).await);
                rows.push(row("redis", "load+save", load_save(&redis, samples)).await);
                rows.push(row("redis", "leased", leased(&redis, samples)).await);
                rows.push(row("redis", "leased-4", leased_steps(&redis, samples)).await);
                rows.push(row("redis", "journal", journal_leased(&redis, samples)).await);
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
                rows.push(row("postgres", "save", save_only(&pg, samples)).await);
                rows.push(row("postgres", "load+save", load_save(&pg, samples)).await);
                rows.push(row("postgres", "leased", leased(&pg, samples)).await);
                rows.push(row("postgres", "leased-4", leased_steps(&pg, samples)).await);
                rows.push(row("postgres", "journal", journal_leased(&pg, samples)).await);
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
        "store overhead per call, µs ({samples} timed calls per cell; save = one call's two messages over a held session; leased = acquire+load, fenced save+release (the agent's two steps); leased-4 = the four as separate steps; journal = what the effect journal adds per tool call: claim + settle, two (fenced) saves)\n{:<10} {:<10} {:>10} {:>10} {:>12} {:>12}\n",
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
