//! The crash test's child process (`tests/it/crash.rs`): saves the sessions of
//! `crash_shared.rs` round-robin through a `FileSessionStore` in the directory given as
//! its only argument, forever, printing `ack <session> <version>` after each save
//! returned. The test kills it with SIGKILL at random moments.
//!
//! A `[[bin]]` with `test = false` (not a `#[test]` that passes by doing nothing): Cargo
//! builds it for the integration tests and hands them its path as
//! `CARGO_BIN_EXE_rein-crash-child`.

use std::io::Write;

use futures::FutureExt;
use rein::*;

#[path = "crash_shared.rs"]
mod crash_shared;
use crash_shared::{SESSIONS, crash_key, expected};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or("usage: rein-crash-child <session directory>")?;
    let store = FileSessionStore::open(dir)?;
    // No runtime: the store does its file I/O inline, so every future is ready at once.
    let now = |what: &str| format!("the store's {what} future was not ready at once");
    let mut versions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let loaded = store
            .load(&crash_key(i))
            .now_or_never()
            .ok_or(now("load"))??;
        versions.push(loaded.version);
    }
    let mut out = std::io::stdout().lock();
    for round in 0.. {
        let i = round % SESSIONS;
        let next = versions[i] + 1;
        let saved = store
            .save(&crash_key(i), &expected(i, next), versions[i])
            .now_or_never()
            .ok_or(now("save"))??;
        if saved != next {
            return Err(format!("session {i}: saved version {saved}, expected {next}").into());
        }
        versions[i] = saved;
        writeln!(out, "ack {i} {saved}")?;
        out.flush()?;
    }
    Ok(())
}
