//! The scale workloads of `bench_report`: many idle sessions, throughput on a
//! 2-worker runtime, and per-chunk streaming cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rein::*;

use super::*;

/// Text bytes of the 10 messages [`idle_sessions`] stores per session.
pub fn session_text_bytes() -> usize {
    history_of(10).iter().map(|m| m.text().len()).sum()
}

/// Stores `n` idle sessions `s0`, `s1`, … of 10 messages each on `agent`.
pub async fn idle_sessions(agent: &Agent, n: usize) {
    for i in 0..n {
        agent
            .set_messages(&SessionKey::new(None, &format!("s{i}")), history_of(10))
            .await
            .unwrap();
    }
}

/// One W1 call on session `s{i}` (keeps the session).
pub async fn session_call(agent: &Agent, i: usize) -> Msg {
    agent
        .call_with(
            vec![Msg::user("What is 1 + 2?")],
            RunContext::new().with_session_id(format!("s{i}")),
        )
        .await
        .unwrap()
}

/// A multi-thread runtime with 2 workers.
pub fn two_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `calls` W1 calls over `sessions` sessions (call `k` on session `k % sessions`),
/// made by `tasks` concurrent tasks on the current runtime. Returns the wall time and
/// every call's latency, sorted.
pub async fn throughput(
    agent: &Agent,
    calls: usize,
    sessions: usize,
    tasks: usize,
) -> (Duration, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (agent, next) = (agent.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(calls / tasks + 1);
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= calls {
                        return lat;
                    }
                    let s = Instant::now();
                    std::hint::black_box(session_call(&agent, k % sessions).await);
                    lat.push(s.elapsed());
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(calls);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let wall = t.elapsed();
    all.sort();
    (wall, all)
}

/// Answers every request with `chunks` text chunks of 4 bytes, then `Stop`.
pub struct ChunkModel(pub usize);

impl Model for ChunkModel {
    fn name(&self) -> &str {
        "chunks"
    }
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        let chunks = (0..self.0)
            .map(|_| Ok(ModelChunk::Text("abc ".to_owned())))
            .chain(std::iter::once(Ok(ModelChunk::Finish(FinishReason::Stop))));
        Box::pin(futures::stream::iter(chunks))
    }
}

/// An agent whose model replies in `chunks` chunks, with one observing `SyncHook` on
/// every reasoning chunk when `observed`.
pub fn chunk_agent(chunks: usize, observed: bool) -> Agent {
    let b = Agent::builder()
        .name("chunks")
        .model(ChunkModel(chunks))
        .without_global_hooks();
    let b = if observed {
        b.hook(NoopSync {
            interest: Interest::only(EventKind::ReasoningChunk),
            intervene: false,
        })
    } else {
        b
    };
    b.build().unwrap()
}

/// Streams one call of `agent` to its end (masked with `mask` when given); returns
/// how many events it yielded.
pub async fn stream_call(agent: &Agent, mask: Option<&rein::hooks::MaskingHook>) -> usize {
    let ctx = RunContext::new().with_session_id("st");
    let stream = agent.stream(vec![Msg::user("hi")], ctx);
    let n = match mask {
        Some(m) => m.mask_stream(stream).count().await,
        None => stream.count().await,
    };
    agent.forget_session(&SessionKey::new(None, "st"));
    n
}
