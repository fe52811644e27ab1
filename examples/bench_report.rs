//! Run with: cargo run --release --example bench_report
//!
//! A quick performance report (well under a minute in release mode): W1 per call with
//! no hooks, with 10 no-op hooks on every event (written as `async fn` hooks, and as
//! `SyncHook`s) and with the production hook set;
//! an unsubscribed event; history scaling; masking throughput (a mixed corpus, and the
//! adversarial worst cases `1 1 1…`, `a@a@…`, `+44 4 4…` and bad IBANs; the summary's
//! `mask_worst_mb_s` is the slower of the first two); W2 (1,000 concurrent W1
//! calls) wall time and peak RSS, each W2 mode measured in a child process so its peak
//! memory is its own. Ratios compare measurements interleaved in this run. The last
//! line is machine-readable:
//! `w1_us= hooks10_ratio= synchooks10_ratio= production_ratio= history1000_ratio=
//! unsubscribed_ns= w2_rss_mb= session_bytes=`, then the other figures (the scale
//! figures below, streaming, masking, and the hooks' absolute cost:
//! `hooks10_added_us= synchooks10_added_us= production_added_us= budget_added_us= labels_added_us=`, the µs each set
//! adds to a W1 call in this run), where `hooks10_ratio` is the `async fn` hooks'
//! ratio (the conservative one). Before it, the regression guards on the hooks' added
//! cost (`synchooks10_added_us` ≤ 1.0, `hooks10_added_us` ≤ 2.5,
//! `production_added_us` ≤ 4.5) are printed as `kept` or `OVER`.
//!
//! Allocations per W1 call are not counted here (a counting allocator would slow
//! every timing): `tests/alloc_guard.rs` guards them. The scale figures, each
//! measured in a child process:
//! - **sessions at scale:** one agent holding `REIN_BENCH_SESSIONS` (default 100,000)
//!   idle sessions of 10 messages: resident bytes per idle session beyond the
//!   message text (`session_bytes`: the RSS growth over the sessions, divided by
//!   their number, minus the text bytes), total RSS, and a call on the last session
//!   vs the first;
//! - **throughput:** `REIN_BENCH_CALLS` (default 100,000) W1 calls over 10,000
//!   sessions by 64 tasks on a 2-worker multi-thread runtime: calls/s and p99 latency
//!   (the fake model is instant: all of it is runtime), with and without the
//!   production hook set;
//! - **streaming:** cost per chunk of a 1,000-chunk reply with no hook, one observing
//!   `SyncHook` and `MaskingHook::mask_stream`, as (time of 1,000 chunks − time of 1
//!   chunk) / 999.
//!
//! - **a million idle sessions** (only with `--million` or `REIN_BENCH_MILLION=1`: ~8 s
//!   and ~0.9 GB): the sessions figures at 1,000,000 sessions, `session_bytes_1m=` and
//!   `last_session_ratio_1m=`;
//! - **the provider path** (features `openai` and `anthropic`, otherwise
//!   `ttft_over_raw=skipped`; `--provider` runs it alone): rein's `OpenAiChatModel`
//!   and `AnthropicModel` through `Model::stream` and through an agent call, against a
//!   raw `reqwest` client, on a loopback server replaying recorded transcripts (`benches/support/provider.rs`):
//!   time to first token (`ttft_over_raw=`, the larger provider's ratio, and
//!   `ttft_added_us=`), ns per chunk (`provider_chunk_ns=`, `raw_chunk_ns=`, …; the
//!   key `chunk_ns=` stays the agent's per-chunk cost on the instant model, above) and
//!   `REIN_BENCH_STREAMS` (default 1,000) concurrent streamed calls
//!   (`stream_throughput_over_raw=`).
//!
//! - **session stores:** per-call store overhead (load + save; leased: acquire + load +
//!   fenced save + release) with histories of 10 and 1,000 messages, p50 and p99 of
//!   `REIN_BENCH_STORE_SAMPLES` (default 500) single calls, on the in-memory and file
//!   stores, and on Redis and PostgreSQL when built with `--features redis,postgres`
//!   and run with `REIN_REDIS_URL` / `REIN_POSTGRES_URL` set (`scripts/test-servers
//!   cargo run --release --all-features --example bench_report`); otherwise those rows
//!   say `SKIPPED` and why. `cargo bench --all-features --bench stores` prints the same
//!   table with 2,000 calls per cell.
//!
//! `--probe <plain|async10|sync10|sync1|production|labels|budget|history|HOOK|kind:KIND> <n>` only
//! runs `n` W1 calls (a driver for `valgrind --tool=callgrind`); `HOOK` is one
//! production hook alone (`latency`, `masking`, `audit`, `tool_guard`,
//! `dynamic_options`), and `kind:PostCall` (any [`EventKind`] name) subscribes one
//! `SyncHook` to that one kind, to price one event.
//!
//! In a debug build (as CI runs every example) it runs a tiny version and says so: the
//! numbers are then not meaningful.

use std::time::{Duration, Instant};

use rein::bench_support::DispatchProbe;
use rein::hooks::SensitiveDataMasker;
use rein::*;

#[path = "../benches/support/mod.rs"]
mod support;

use support::scale::*;
use support::stores::{ratio_1000_over_10, store_rows, store_table};
use support::*;

const DEBUG: bool = cfg!(debug_assertions);

fn env_size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The regression guards on what hooks add to a W1 call (µs, absolute, so the
/// machine's speed moves them): each with its limit and whether this run kept it.
fn print_guards(guards: &[(&str, f64, f64)]) {
    println!("regression guards (µs added per W1 call in this run, limit):");
    for &(key, value, limit) in guards {
        let verdict = if DEBUG {
            "not judged (debug build)"
        } else if value <= limit {
            "kept"
        } else {
            "OVER"
        };
        println!("  {key:<24} {value:>6.2} ≤ {limit:.2}  {verdict}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median µs per call over `rounds` batches of `batch` calls of each agent, batches
/// interleaved so load changes hit all alike: [no hooks, 10 async no-op hooks, 10 sync
/// no-op hooks, production hook set, call budget, labels and the information-flow
/// policy].
fn interleaved(
    rt: &tokio::runtime::Runtime,
    agents: &[&Agent; 6],
    rounds: usize,
    batch: usize,
) -> [f64; 6] {
    let mut samples: [Vec<f64>; 6] = Default::default();
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

/// Median µs of a W1 call on a session that started empty vs on a session that
/// started with 1,000 prior messages, batches interleaved. Both sessions keep what
/// their calls add (4 messages per call), so both pay the same growth (new heap pages
/// for the stored messages); the ratio is the cost of the history's length alone.
fn history_ratio(rt: &tokio::runtime::Runtime, rounds: usize, batch: usize) -> (f64, f64) {
    let fresh = w1_agent(0);
    let long = w1_agent(0);
    let mut h = history_of(1000);
    h.reserve(4 * rounds * batch + 64);
    rt.block_on(long.set_messages(&SessionKey::new(None, "h"), h))
        .ok();
    rt.block_on(fresh.set_messages(
        &SessionKey::new(None, "h"),
        Vec::with_capacity(4 * rounds * batch + 64),
    ))
    .ok();
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(rt.block_on(history_call(&fresh)));
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
    mask_mb_s(&masking_corpus(1 << 20), if DEBUG { 2 } else { 50 })
}

/// Adversarial inputs of 1 MiB, MB/s each: `1 1 1 …` and `a@a@…` (every other byte a
/// trigger), `+44 4 4 …` (every `+` walks 15 digit groups) and an IBAN with a bad
/// checksum repeated (each one read whole and checked).
fn masking_worst_mb_s() -> [f64; 4] {
    let rounds = if DEBUG { 1 } else { 9 };
    [
        "1 ",
        "a@",
        "+44 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 ",
        "DE89 3704 0044 0532 0130 01 ",
    ]
    .map(|unit| mask_mb_s(&unit.repeat((1 << 20) / unit.len()), rounds))
}

/// Median MB/s of the default masker on `corpus` over `rounds` runs.
fn mask_mb_s(corpus: &str, rounds: usize) -> f64 {
    let masker = SensitiveDataMasker::default();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(masker.mask(std::hint::black_box(corpus)).len());
        samples.push(corpus.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    median(samples)
}

/// Peak resident memory of this process, in MB (Linux `VmHWM`).
fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:")
}

/// A memory figure of this process from `/proc/self/status`, in MB.
fn status_mb(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(key)).and_then(|l| {
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

/// Runs this example with `args` and parses the numbers it prints (NaN if it failed).
fn child<const N: usize>(args: &[&str]) -> [f64; N] {
    let mut out = [f64::NAN; N];
    let Ok(exe) = std::env::current_exe() else {
        return out;
    };
    let Ok(run) = std::process::Command::new(&exe).args(args).output() else {
        return out;
    };
    let text = String::from_utf8_lossy(&run.stdout);
    for (slot, v) in out.iter_mut().zip(
        text.split_whitespace()
            .filter_map(|p| p.parse::<f64>().ok()),
    ) {
        *slot = v;
    }
    out
}

fn w2_in_child(mode: &str) -> (f64, f64) {
    let runs = if DEBUG { 1 } else { 5 };
    let (mut walls, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let [w, r] = child(&["--w2", mode]);
        if !w.is_nan() && !r.is_nan() {
            walls.push(w);
            rss.push(r);
        }
    }
    if walls.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (median(walls), median(rss))
}

/// Child mode: `n` idle sessions of 10 messages on one agent; prints `bytes_per_session
/// rss_mb first_us last_us`: resident bytes per session beyond the message text,
/// resident memory, and the median µs of a call on the first and on the last session (batches
/// interleaved).
fn sessions_child(n: usize) {
    let rt = runtime();
    let agent = w1_agent(0);
    rt.block_on(w1_call(&agent));
    let before = status_mb("VmRSS:");
    rt.block_on(idle_sessions(&agent, n));
    let rss = status_mb("VmRSS:");
    let per_session = (rss - before) * 1024.0 * 1024.0 / n as f64 - session_text_bytes() as f64;
    let (rounds, batch) = if DEBUG { (3, 5) } else { (21, 100) };
    let (mut first, mut last) = (Vec::new(), Vec::new());
    let time = |i: usize| {
        let t = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(rt.block_on(session_call(&agent, i)));
        }
        t.elapsed().as_secs_f64() * 1e6 / batch as f64
    };
    for _ in 0..rounds {
        first.push(time(0));
        last.push(time(n - 1));
    }
    println!(
        "{per_session:.0} {rss:.1} {:.3} {:.3}",
        median(first),
        median(last)
    );
}

/// Child mode: the throughput run; prints `calls_per_s p99_us`.
fn throughput_child(mode: &str, calls: usize) {
    let rt = two_worker_runtime();
    let agent = match mode {
        "production" => w1_production_agent(),
        // One production hook alone, to attribute the set's throughput and p99.
        "latency" | "masking" | "audit" | "tool_guard" | "dynamic_options" => {
            w1_single_hook_agent(mode)
        }
        _ => w1_agent(0),
    };
    let sessions = 10_000.min(calls);
    let (wall, lat) = rt.block_on(throughput(&agent, calls, sessions, 64));
    let p99 = lat
        .get(lat.len() * 99 / 100)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    println!("{:.0} {p99:.2}", calls as f64 / wall.as_secs_f64());
}

/// ns per chunk of a streamed reply: [no hook, one observing hook, `mask_stream`].
fn per_chunk_ns(rt: &tokio::runtime::Runtime, rounds: usize) -> [f64; 3] {
    const CHUNKS: usize = 1000;
    let masking = rein::hooks::MaskingHook::new(Default::default(), SensitiveDataMasker::default());
    let agents = [
        (chunk_agent(1, false), chunk_agent(CHUNKS, false)),
        (chunk_agent(1, true), chunk_agent(CHUNKS, true)),
    ];
    let mut samples: [Vec<f64>; 3] = Default::default();
    let time = |agent: &Agent, mask: Option<&rein::hooks::MaskingHook>, calls: usize| {
        let t = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(rt.block_on(stream_call(agent, mask)));
        }
        t.elapsed().as_secs_f64() * 1e9 / calls as f64
    };
    let [(plain_1, plain_n), (observed_1, observed_n)] = &agents;
    let cases = [
        (plain_1, plain_n, None),
        (observed_1, observed_n, None),
        (plain_1, plain_n, Some(&masking)),
    ];
    for round in 0..=rounds {
        for (i, (one, many, mask)) in cases.iter().enumerate() {
            let base = time(one, *mask, 20);
            let full = time(many, *mask, 2);
            if round > 0 {
                samples[i].push((full - base) / (CHUNKS - 1) as f64);
            }
        }
    }
    samples.map(median)
}

/// The provider path side by side (features `openai` and `anthropic`): the table and
/// the summary keys.
#[cfg(all(feature = "openai", feature = "anthropic"))]
fn provider_report(rt: &tokio::runtime::Runtime) -> (String, String) {
    let (rounds, batch) = if DEBUG { (1, 2) } else { (9, 40) };
    let figures = support::provider::measure(rt, rounds, batch);
    let decode = [
        support::provider::Wire::OpenAi,
        support::provider::Wire::Anthropic,
    ]
    .map(|w| {
        support::provider::decode_only_ns(
            w,
            if DEBUG { 1 } else { 11 },
            if DEBUG { 2 } else { 200 },
        )
    });
    let [raw, openai] = child::<2>(&["--stream-throughput", "openai"]);
    let [raw_an, anthropic] = child::<2>(&["--stream-throughput", "anthropic"]);
    let streams = env_size("REIN_BENCH_STREAMS", if DEBUG { 50 } else { 1000 });
    let table = format!(
        "{}  decoding alone (no HTTP), ns per event: OpenAI rein {:.0} vs floor {:.0}; \
         Anthropic rein {:.0} vs floor {:.0}\n  {streams} concurrent streamed calls, 2 workers: OpenAI raw {raw:.0}/s, \
         Model::stream {openai:.0}/s ({:.2}x); Anthropic raw {raw_an:.0}/s, \
         Model::stream {anthropic:.0}/s ({:.2}x)\n",
        figures.table(),
        decode[0].0,
        decode[0].1,
        decode[1].0,
        decode[1].1,
        openai / raw,
        anthropic / raw_an
    );
    let summary = format!(
        "{} decode_ns={:.0} raw_decode_ns={:.0} stream_calls_per_s={openai:.0} raw_stream_calls_per_s={raw:.0} \
         stream_throughput_over_raw={:.2} anthropic_stream_throughput_over_raw={:.2}",
        figures.summary(),
        decode[0].0,
        decode[0].1,
        openai / raw,
        anthropic / raw_an
    );
    (table, summary)
}

#[cfg(not(all(feature = "openai", feature = "anthropic")))]
fn provider_report(_rt: &tokio::runtime::Runtime) -> (String, String) {
    (
        "provider path: SKIPPED (build with --features openai,anthropic)\n".to_owned(),
        "ttft_over_raw=skipped".to_owned(),
    )
}

/// Child mode: `REIN_BENCH_STREAMS` concurrent streamed calls on the `which` wire
/// (`openai`, `anthropic`) on a 2-worker runtime, the floor and `Model::stream` in
/// turn; prints both calls/s.
#[cfg(all(feature = "openai", feature = "anthropic"))]
fn stream_throughput_child(which: &str) {
    use support::provider::{Wire, stream_throughput};
    let streams = env_size("REIN_BENCH_STREAMS", if DEBUG { 50 } else { 1000 });
    let wire = if which == "anthropic" {
        Wire::Anthropic
    } else {
        Wire::OpenAi
    };
    let reps = if DEBUG { 1 } else { 5 };
    let (raw, rein) = two_worker_runtime().block_on(stream_throughput(wire, streams.max(1), reps));
    println!("{raw:.0} {rein:.0}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i + 1).map_or("", String::as_str);
    if let Some(i) = args.iter().position(|a| a == "--w2") {
        w2_child(args.get(i + 1).map_or("sessions", String::as_str));
        return;
    }
    let sessions = env_size("REIN_BENCH_SESSIONS", if DEBUG { 1000 } else { 100_000 });
    let calls = env_size("REIN_BENCH_CALLS", if DEBUG { 2000 } else { 100_000 });
    if let Some(i) = args.iter().position(|a| a == "--sessions") {
        let n = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(sessions);
        sessions_child(n.max(1));
        return;
    }
    #[cfg(all(feature = "openai", feature = "anthropic"))]
    if let Some(i) = args.iter().position(|a| a == "--stream-throughput") {
        stream_throughput_child(arg(i));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--throughput") {
        throughput_child(arg(i), calls.max(1));
        return;
    }
    if args.iter().any(|a| a == "--provider") {
        // The provider path alone (its table and summary keys).
        let (table, summary) = provider_report(&runtime());
        print!("{table}");
        println!("{summary}");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--probe") {
        let rt = runtime();
        let agent = match arg(i) {
            "production" => w1_production_agent(),
            "async10" => w1_agent(10),
            "sync10" => w1_sync_agent(10),
            "sync1" => w1_sync_agent(1),
            "labels" => support::w1_labels_agent(),
            "budget" => support::w1_budget_agent(),
            // One production hook alone, to attribute the set's cost.
            hook @ ("latency" | "masking" | "audit" | "tool_guard" | "dynamic_options") => {
                w1_single_hook_agent(hook)
            }
            probe if probe.starts_with("kind:") => {
                // One SyncHook subscribed to one event kind: what that kind costs.
                let name = &probe["kind:".len()..];
                let Some(kind) = EventKind::ALL.into_iter().find(|k| k.as_str() == name) else {
                    eprintln!("unknown event kind `{name}` (e.g. kind:PostCall)");
                    std::process::exit(2);
                };
                w1_agent_with(1, move || support::NoopSync {
                    interest: Interest::of([kind]),
                    intervene: false,
                })
            }
            _ => w1_agent(0),
        };
        let n: u64 = args.get(i + 2).and_then(|s| s.parse().ok()).unwrap_or(1000);
        if arg(i) == "history" {
            // W1 on a session seeded with 1,000 messages (as the history row).
            let mut h = history_of(1000);
            h.reserve(4 * n as usize + 64);
            rt.block_on(agent.set_messages(&SessionKey::new(None, "h"), h))
                .ok();
            for _ in 0..n {
                std::hint::black_box(rt.block_on(history_call(&agent)));
            }
            return;
        }
        for _ in 0..n {
            std::hint::black_box(rt.block_on(w1_call(&agent)));
        }
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
    let budgeted = support::w1_budget_agent();
    let labelled = support::w1_labels_agent();
    let w1 = interleaved(
        &rt,
        &[
            &plain,
            &hooked,
            &hooked_sync,
            &production,
            &budgeted,
            &labelled,
        ],
        rounds,
        batch,
    );
    let invocations = hook_calls_per_w1(&rt, 10, if DEBUG { 5 } else { 1000 });
    let (h0, h1000) = history_ratio(&rt, if DEBUG { 2 } else { 21 }, if DEBUG { 5 } else { 50 });
    let unsub = unsubscribed_ns();
    let mask = masking_mb_s();
    let [worst_digits, worst_email, worst_plus, worst_iban] = masking_worst_mb_s();
    let (w2a_wall, w2a_rss) = w2_in_child("agents");
    let (w2s_wall, w2s_rss) = w2_in_child("sessions");
    let [session_bytes, sessions_rss, first_us, last_us] = child(&["--sessions"]);
    // A million idle sessions take ~8 s and ~0.9 GB: only when asked for.
    let million = args.iter().any(|a| a == "--million")
        || std::env::var("REIN_BENCH_MILLION").is_ok_and(|v| v == "1");
    let [m_bytes, m_rss, m_first_us, m_last_us] = if million {
        child(&["--sessions", if DEBUG { "20000" } else { "1000000" }])
    } else {
        [f64::NAN; 4]
    };
    let [tput, p99] = child(&["--throughput", "plain"]);
    let [tput_prod, p99_prod] = child(&["--throughput", "production"]);
    let chunk = per_chunk_ns(&rt, if DEBUG { 1 } else { 11 });
    let store_samples = env_size("REIN_BENCH_STORE_SAMPLES", if DEBUG { 20 } else { 500 });
    let stores = rt.block_on(store_rows(store_samples));
    let (provider_table, provider_summary) = provider_report(&rt);

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
        "{:<52} {:>9.2} µs (+{:.2} µs)",
        "W1 per call, call budget on (tokens, calls)",
        w1[4],
        w1[4] - w1[0]
    );
    println!(
        "{:<52} {:>9.2} µs (+{:.2} µs)",
        "W1 per call, untrusted tool + information-flow policy",
        w1[5],
        w1[5] - w1[0]
    );
    println!(
        "{:<52} {:>9.2} ns",
        "event nobody subscribed to (10 hooks present)", unsub
    );
    println!(
        "{:<52} {:>9.2} µs",
        "W1 call on a session that started empty", h0
    );
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
        "{:<52} {:>9.0} MB/s (`a@a@…` {:.0}, `+44 4 4…` {:.0}, bad IBANs {:.0})",
        "masking worst cases: `1 1 1…`", worst_digits, worst_email, worst_plus, worst_iban
    );
    println!(
        "{:<52} {:>9.3} s, peak RSS {:.1} MB",
        "W2: 1,000 concurrent W1 calls on 1,000 agents", w2a_wall, w2a_rss
    );
    println!(
        "{:<52} {:>9.3} s, peak RSS {:.1} MB",
        "W2: 1,000 concurrent W1 calls, 1 agent", w2s_wall, w2s_rss
    );
    println!("scale (REIN_BENCH_SESSIONS={sessions}, REIN_BENCH_CALLS={calls}):");
    println!(
        "{:<52} {:>9.0} B, RSS {:.1} MB",
        "  idle session of 10 messages, beyond the text", session_bytes, sessions_rss
    );
    println!(
        "{:<52} {:>9.2} µs vs {:.2} µs ({:.2}x)",
        "  call on the last session vs the first",
        last_us,
        first_us,
        last_us / first_us
    );
    if million {
        println!(
            "{:<52} {:>9.0} B, RSS {:.1} MB; call on the last {:.2} µs vs first {:.2} µs ({:.2}x)",
            "  1,000,000 idle sessions: each beyond the text",
            m_bytes,
            m_rss,
            m_last_us,
            m_first_us,
            m_last_us / m_first_us
        );
    }
    println!(
        "{:<52} {:>9.0} /s, p99 {:.1} µs",
        "  W1 calls over 10,000 sessions, 2 workers", tput, p99
    );
    println!(
        "{:<52} {:>9.0} /s, p99 {:.1} µs",
        "  the same with the production hook set", tput_prod, p99_prod
    );
    println!(
        "{:<52} {:>9.1} ns (observing SyncHook {:.1} ns, mask_stream {:.1} ns)",
        "  per chunk of a 1,000-chunk streamed reply", chunk[0], chunk[1], chunk[2]
    );
    print!("{provider_table}");
    print!("{}", store_table(&stores, store_samples.max(1)));
    // Per-call store cost of a held session (the `save` row), 1,000 messages over 10.
    let store_ratio = |store| {
        ratio_1000_over_10(&stores, store, "save")
            .map_or("skipped".to_owned(), |r| format!("{r:.2}"))
    };
    println!(
        "(report took {:.1?})",
        Duration::from_secs_f64(started.elapsed().as_secs_f64())
    );
    print_guards(&[
        ("synchooks10_added_us", w1[2] - w1[0], 1.0),
        ("hooks10_added_us", w1[1] - w1[0], 2.5),
        ("production_added_us", w1[3] - w1[0], 4.5),
    ]);
    let million_keys = if million {
        format!(
            "session_bytes_1m={m_bytes:.0} sessions_1m_rss_mb={m_rss:.1} last_session_ratio_1m={:.2}",
            m_last_us / m_first_us
        )
    } else {
        "session_bytes_1m=skipped".to_owned()
    };
    println!(
        "w1_us={:.2} hooks10_ratio={:.2} synchooks10_ratio={:.2} production_ratio={:.2} \
         history1000_ratio={:.2} unsubscribed_ns={:.2} w2_rss_mb={:.1} session_bytes={:.0} \
         sessions_rss_mb={:.1} \
         last_session_ratio={:.2} calls_per_s={:.0} p99_us={:.1} \
         production_calls_per_s={:.0} production_p99_us={:.1} chunk_ns={:.1} \
         observed_chunk_ns={:.1} masked_chunk_ns={:.1} mask_mb_s={:.0} mask_worst_mb_s={:.0} \
         hooks10_added_us={:.2} synchooks10_added_us={:.2} production_added_us={:.2} \
         budget_added_us={:.2} labels_added_us={:.2} redis_1000_over_10={} postgres_1000_over_10={} \
         {provider_summary} {million_keys}",
        w1[0],
        w1[1] / w1[0],
        w1[2] / w1[0],
        w1[3] / w1[0],
        h1000 / h0,
        unsub,
        w2a_rss.max(w2s_rss),
        session_bytes,
        sessions_rss,
        last_us / first_us,
        tput,
        p99,
        tput_prod,
        p99_prod,
        chunk[0],
        chunk[1],
        chunk[2],
        mask,
        worst_digits.min(worst_email),
        w1[1] - w1[0],
        w1[2] - w1[0],
        w1[3] - w1[0],
        w1[4] - w1[0],
        w1[5] - w1[0],
        store_ratio("redis"),
        store_ratio("postgres"),
    );
}
