//! rein benchmarks (divan: time and allocations per iteration).
//!
//! Run all: `cargo bench --bench rein`; one group: `cargo bench --bench rein -- w1`.
//! The fake model answers instantly and is defined here (not `ScriptedModel`, whose
//! request recording would be measured too). Compare rows of one run with each other:
//! absolute times vary with the machine's load.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use divan::{AllocProfiler, Bencher, black_box};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

fn main() {
    divan::main();
}

#[path = "support/mod.rs"]
mod support;

use support::*;

/// Hook dispatch for one event (the loop's `PreActing` step), by number of hooks.
mod dispatch {
    use super::*;
    use futures::FutureExt;
    use rein::bench_support::DispatchProbe;
    use rein::{EventKind, Interest, ToolUse};

    const N: &[usize] = &[0, 1, 10, 32];

    fn probe(n: usize, interest: Interest, intervene: bool) -> DispatchProbe {
        DispatchProbe::new((0..n).map(|_| Noop {
            interest,
            intervene,
        }))
        .unwrap()
    }

    /// As [`probe`], with [`NoopSync`] hooks.
    fn sync_probe(n: usize, interest: Interest, intervene: bool) -> DispatchProbe {
        DispatchProbe::new((0..n).map(|_| NoopSync {
            interest,
            intervene,
        }))
        .unwrap()
    }

    fn run(bencher: Bencher, probe: DispatchProbe) {
        let tool_use = ToolUse::new("call_1", "add", serde_json::json!({"a": 1, "b": 2}));
        bencher.bench_local(|| {
            let out = probe
                .pre_acting(black_box(&tool_use).clone())
                .now_or_never();
            black_box(out)
        });
    }

    /// Hooks exist but none subscribed to the event: one branch, no event built.
    #[divan::bench(args = N)]
    fn unsubscribed(bencher: Bencher, n: usize) {
        let p = probe(n, Interest::only(EventKind::Error), false);
        bencher.bench_local(|| black_box(&p).wants(black_box(EventKind::PreActing)));
    }

    /// The full step (clone of the input included) with no subscriber.
    #[divan::bench(args = N)]
    fn unsubscribed_step(bencher: Bencher, n: usize) {
        run(bencher, probe(n, Interest::only(EventKind::Error), false));
    }

    #[divan::bench(args = N)]
    fn observing(bencher: Bencher, n: usize) {
        run(bencher, probe(n, Interest::ALL, false));
    }

    #[divan::bench(args = N)]
    fn intervening(bencher: Bencher, n: usize) {
        run(bencher, probe(n, Interest::ALL, true));
    }

    /// As `observing`, with `SyncHook`s (no future per call).
    #[divan::bench(args = N)]
    fn observing_sync(bencher: Bencher, n: usize) {
        run(bencher, sync_probe(n, Interest::ALL, false));
    }

    #[divan::bench(args = N)]
    fn intervening_sync(bencher: Bencher, n: usize) {
        run(bencher, sync_probe(n, Interest::ALL, true));
    }
}

/// W1: one call = tool-call turn → tool → final text turn, fresh session each call.
mod w1 {
    use super::*;

    #[divan::bench]
    fn no_hooks(bencher: Bencher) {
        let rt = runtime();
        let agent = w1_agent(0);
        bencher.bench_local(|| rt.block_on(w1_call(&agent)));
    }

    /// Ten no-op `async fn` hooks.
    #[divan::bench]
    fn noop_hooks_10_every_event(bencher: Bencher) {
        let rt = runtime();
        let agent = w1_agent(10);
        bencher.bench_local(|| rt.block_on(w1_call(&agent)));
    }

    /// The same ten hooks written as `SyncHook`s.
    #[divan::bench]
    fn noop_sync_hooks_10_every_event(bencher: Bencher) {
        let rt = runtime();
        let agent = w1_sync_agent(10);
        bencher.bench_local(|| rt.block_on(w1_call(&agent)));
    }

    /// Each production hook alone, to attribute the set's cost.
    #[divan::bench(args = ["latency", "masking", "audit", "tool_guard", "dynamic_options"])]
    fn single_production_hook(bencher: Bencher, which: &str) {
        let rt = runtime();
        let agent = w1_single_hook_agent(which);
        bencher.bench_local(|| rt.block_on(w1_call(&agent)));
    }

    #[divan::bench]
    fn production_hook_set(bencher: Bencher) {
        let rt = runtime();
        let agent = w1_production_agent();
        bencher.bench_local(|| rt.block_on(w1_call(&agent)));
    }
}

/// Masking throughput on a mixed Chinese/English corpus with about 1% personal data, and
/// on adversarial input.
mod masking {
    use super::*;
    use rein::hooks::SensitiveDataMasker;

    #[divan::bench(args = [64 * 1024, 1024 * 1024])]
    fn mixed_corpus(bencher: Bencher, bytes: usize) {
        throughput(bencher, masking_corpus(bytes));
    }

    /// Adversarial input: `1 1 1 …` (`digits`) and `a@a@a@…` (`email`), 1 MiB.
    #[divan::bench(args = ["digits", "email"])]
    fn worst_case(bencher: Bencher, kind: &str) {
        throughput(bencher, masking_worst_case(kind, 1024 * 1024));
    }

    /// The mixed corpus with international personal data (E.164 and NANP numbers, IBANs,
    /// SSNs) inserted as well, one item about every 2.5 KB (about 2% personal data in all).
    #[divan::bench(args = [1024 * 1024])]
    fn mixed_corpus_international(bencher: Bencher, bytes: usize) {
        throughput(bencher, international_corpus(bytes));
    }

    /// Adversarial input for the international kinds, 1 MiB: `+44 4 4 4 …` (`plus`: every
    /// `+` walks 15 digit groups) and an IBAN with a bad checksum repeated (`iban`: every
    /// one is read whole and checked).
    #[divan::bench(args = ["plus", "iban"])]
    fn worst_case_international(bencher: Bencher, kind: &str) {
        let unit = if kind == "plus" {
            "+44 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 "
        } else {
            "DE89 3704 0044 0532 0130 01 "
        };
        throughput(bencher, unit.repeat(1024 * 1024 / unit.len()));
    }

    /// Bytes per second of the default masker on `corpus`.
    fn throughput(bencher: Bencher, corpus: String) {
        let masker = SensitiveDataMasker::default();
        bencher
            .counter(divan::counter::BytesCount::new(corpus.len()))
            .bench_local(|| black_box(masker.mask(black_box(&corpus))).len());
    }

    fn international_corpus(bytes: usize) -> String {
        let personal = [
            " call +1 (415) 555-0134 ",
            " IBAN DE89 3704 0044 0532 0130 00 ",
            " SSN 123-45-6789 ",
            " or (415) 555-0134 ",
            " +44 20 7946 0958 ",
        ];
        let mut out = masking_corpus(bytes);
        // One more item about every 2.5 KB, at char boundaries.
        let mut at = 1200;
        let mut k = 0;
        while at < out.len() {
            let mut cut = at;
            while !out.is_char_boundary(cut) {
                cut += 1;
            }
            out.insert_str(cut, personal[k % personal.len()]);
            k += 1;
            at += 2500;
        }
        out
    }
}

/// A W1 call on a session that already holds N messages.
mod history {
    use super::*;

    #[divan::bench(args = [0, 100, 1000])]
    fn call_on_session_with(bencher: Bencher, prior: usize) {
        let rt = runtime();
        let agent = w1_agent(0);
        let history = history_of(prior);
        bencher
            .with_inputs(|| {
                let key = rein::SessionKey::new(None, "h");
                agent.forget_session(&key);
                rt.block_on(agent.set_messages(&key, history.clone()))
                    .unwrap();
            })
            .bench_local_values(|()| rt.block_on(history_call(&agent)));
    }
}

/// W2: 1,000 concurrent W1 calls.
mod w2 {
    use super::*;

    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn thousand_agents(bencher: Bencher) {
        let rt = multi_thread_runtime();
        bencher.bench_local(|| rt.block_on(w2_agents(1000)));
    }

    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn one_agent_thousand_sessions(bencher: Bencher) {
        let rt = multi_thread_runtime();
        bencher.bench_local(|| rt.block_on(w2_sessions(1000)));
    }
}
