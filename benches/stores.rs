//! Per-call session-store overhead on loopback: what a call on a stored session adds
//! (load + save; with a lease: acquire and load, then fenced save and release, as an
//! agent sends them, and the same as four separate steps), for histories of 10 and
//! 1,000 messages measured interleaved, on the in-memory, file, Redis and PostgreSQL
//! stores, as p50 and p99 of single calls (`benches/support/stores.rs`; the
//! `bench_report` example prints the same table).
//!
//! Run: `scripts/test-servers cargo bench --all-features --bench stores` (the Redis and
//! PostgreSQL rows need `REIN_REDIS_URL` / `REIN_POSTGRES_URL`; without them those rows
//! print `SKIPPED` and measure nothing). `REIN_BENCH_STORE_SAMPLES` sets the timed calls
//! per cell (default 2,000). Not divan: divan reports medians and means, not p99.
//! Under `cargo test --benches` (no `--bench` argument) it runs 20 calls per cell, to
//! prove it works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "support/mod.rs"]
mod support;

use support::stores::{ratio_1000_over_10, store_rows, store_table};

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let samples = if benching {
        std::env::var("REIN_BENCH_STORE_SAMPLES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000)
    } else {
        20
    };
    let rt = support::runtime();
    let rows = rt.block_on(store_rows(samples));
    print!("{}", store_table(&rows, samples));
    for store in ["redis", "postgres"] {
        match ratio_1000_over_10(&rows, store, "save") {
            Some(r) => println!("{store}_1000_over_10={r:.2}"),
            None => println!("{store}_1000_over_10=skipped"),
        }
    }
}
