//! Run with: cargo run --release --example bench_report
//!
//! A quick performance report (well under a minute in release mode): W1 per call with
//! no hooks, with 10 no-op hooks on every event (written as `async fn` hooks, and as
//! `SyncHook`s) and with the production hook set;
//! an unsubscribed event; history scaling; masking throughput; W2 (1,000 concurrent W1
//! calls) wall time and peak RSS, each W2 mode measured in a child process so its peak
//! memory is its own. Ratios compare measurements interleaved in this run. The last
//! line is machine-readable:
//! `w1_us=<median> hooks10_ratio=<x> unsubscribed_ns=<y> w2_rss_mb=<z>`, where
//! `hooks10_ratio` is the `async fn` hooks' ratio (the conservative one).
//!
//! In a debug build (as CI runs every example) it runs a tiny version and says so: the
//! numbers are then not meaningful.

use std::time::{Duration, Instant};

use rein::bench_support::DispatchProbe;
use rein::hooks::SensitiveDataMasker;
use rein::*;

#[path = "../benches/support/mod.rs"]
mod support;

use support::*;

const DEBUG: bool = cfg!(debug_assertions);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median µs per call over `rounds` batches of `batch` calls of each agent, batches
/// interleaved so load changes hit all alike: [no hooks, 10 async no-op hooks, 10 sync
/// no-op hooks, production hook set].
fn interleaved(
    rt: &tokio::runtime::Runtime,
    agents: &[&Agent; 4],
    rounds: usize,
    batch: usize,
) -> [f64; 4] {
    let mut samples: [Vec<f64>; 4] = Default::default();
    let time = |agent: &Agent| {
        let t = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(rt.block_on(w1_call(agent)));
        }
        t.elapsed().as_secs_f64() * 1e6 / batch as f64
    };
    for round in 0..=rounds {
        let measured = agents.map(time);
        if round > 0 {
            for (s, m) in samples.iter_mut().zip(measured) {
                s.push(m);
            }
        }
    }
    samples.map(median)
}

/// Median µs of a W1 call on a fresh session vs on a session holding ~1,000 prior
/// messages (seeded once; it grows by 4 messages per call), batches interleaved.
fn history_ratio(rt: &tokio::runtime::Runtime, rounds: usize, batch: usize) -> (f64, f64) {
    let fresh = w1_agent(0);
    let long = w1_agent(0);
    let mut h = history_of(1000);
    h.reserve(4 * rounds * batch + 64);
    rt.block_on(long.set_messages(&SessionKey::new(None, "h"), h))
        .ok();
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(rt.block_on(w1_call(&fresh)));
        }
        empty.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        let t = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(rt.block_on(history_call(&long)));
        }
        full.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
    }
    (median(empty), median(full))
}

fn unsubscribed_ns() -> f64 {
    let probe = match DispatchProbe::new((0..10).map(|_| Noop {
        interest: Interest::only(EventKind::Error),
        intervene: false,
    })) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("probe: {e}");
            return f64::NAN;
        }
    };
    let n: u64 = if DEBUG { 100_000 } else { 50_000_000 };
    let t = Instant::now();
    let mut hits = 0u64;
    for _ in 0..n {
        if std::hint::black_box(&probe).wants(std::hint::black_box(EventKind::PreActing)) {
            hits += 1;
        }
    }
    std::hint::black_box(hits);
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

fn masking_mb_s() -> f64 {
    let masker = SensitiveDataMasker::default();
    let corpus = masking_corpus(1 << 20);
    let rounds = if DEBUG { 2 } else { 50 };
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(masker.mask(std::hint::black_box(&corpus)).len());
        samples.push(corpus.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    median(samples)
}

/// Peak resident memory of this process, in MB (Linux `VmHWM`).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Child mode: one W2 run, printing `wall_s rss_mb`.
fn w2_child(mode: &str) {
    let rt = multi_thread_runtime();
    let t = Instant::now();
    match mode {
        "agents" => rt.block_on(w2_agents(1000)),
        _ => rt.block_on(w2_sessions(1000)),
    };
    println!("{:.4} {:.1}", t.elapsed().as_secs_f64(), peak_rss_mb());
}

fn w2_in_child(mode: &str) -> (f64, f64) {
    let Ok(exe) = std::env::current_exe() else {
        return (f64::NAN, f64::NAN);
    };
    let runs = if DEBUG { 1 } else { 5 };
    let (mut walls, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let out = std::process::Command::new(&exe)
            .args(["--w2", mode])
            .output();
        let Ok(out) = out else { continue };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text
            .split_whitespace()
            .filter_map(|p| p.parse::<f64>().ok());
        if let (Some(w), Some(r)) = (parts.next(), parts.next()) {
            walls.push(w);
            rss.push(r);
        }
    }
    if walls.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (median(walls), median(rss))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--w2") {
        w2_child(args.get(i + 1).map_or("sessions", String::as_str));
        return;
    }
    let started = Instant::now();
    if DEBUG {
        println!("(debug build: a tiny run to prove the report works; use --release for numbers)");
    }
    let rt = runtime();
    let (rounds, batch) = if DEBUG { (3, 20) } else { (41, 500) };
    let plain = w1_agent(0);
    let hooked = w1_agent(10);
    let hooked_sync = w1_sync_agent(10);
    let production = w1_production_agent();
    let w1 = interleaved(
        &rt,
        &[&plain, &hooked, &hooked_sync, &production],
        rounds,
        batch,
    );
    let invocations = hook_calls_per_w1(&rt, 10, if DEBUG { 5 } else { 1000 });
    let (h0, h1000) = history_ratio(&rt, if DEBUG { 2 } else { 21 }, if DEBUG { 5 } else { 50 });
    let unsub = unsubscribed_ns();
    let mask = masking_mb_s();
    let (w2a_wall, w2a_rss) = w2_in_child("agents");
    let (w2s_wall, w2s_rss) = w2_in_child("sessions");

    println!("{:<52} {:>12}", "measure", "median");
    println!("{:<52} {:>9.2} µs", "W1 per call, no hooks", w1[0]);
    println!(
        "{:<52} {:>9.2} µs ({:.2}x)",
        "W1 per call, 10 no-op hooks on every event (async)",
        w1[1],
        w1[1] / w1[0]
    );
    println!(
        "{:<52} {:>9.2} µs ({:.2}x)",
        "W1 per call, 10 no-op SyncHooks on every event",
        w1[2],
        w1[2] / w1[0]
    );
    println!(
        "{:<52} {:>9.1}",
        "  hook invocations per call with 10 hooks", invocations
    );
    println!(
        "{:<52} {:>9.2} µs ({:.2}x)",
        "W1 per call, production hook set",
        w1[3],
        w1[3] / w1[0]
    );
    println!(
        "{:<52} {:>9.2} ns",
        "event nobody subscribed to (10 hooks present)", unsub
    );
    println!("{:<52} {:>9.2} µs", "W1 call on an empty session", h0);
    println!(
        "{:<52} {:>9.2} µs ({:.2}x)",
        "W1 call on a 1,000-message session",
        h1000,
        h1000 / h0
    );
    println!(
        "{:<52} {:>9.0} MB/s",
        "masking, mixed zh/en corpus, ~1% personal data", mask
    );
    println!(
        "{:<52} {:>9.3} s, peak RSS {:.1} MB",
        "W2: 1,000 concurrent W1 calls on 1,000 agents", w2a_wall, w2a_rss
    );
    println!(
        "{:<52} {:>9.3} s, peak RSS {:.1} MB",
        "W2: 1,000 concurrent W1 calls, 1 agent", w2s_wall, w2s_rss
    );
    println!(
        "(report took {:.1?})",
        Duration::from_secs_f64(started.elapsed().as_secs_f64())
    );
    println!(
        "w1_us={:.2} hooks10_ratio={:.2} unsubscribed_ns={:.2} w2_rss_mb={:.1}",
        w1[0],
        w1[1] / w1[0],
        unsub,
        w2a_rss.max(w2s_rss)
    );
}
