//! The provider path side by side: rig-core's OpenAI chat-completions model and rein's
//! `OpenAiChatModel`, streamed from the same loopback server (`../support/sse_server.rs`,
//! the recorded transcript `benches/fixtures/openai_chat.sse`), with the raw reqwest
//! floor of `../support/provider.rs`: time to first token and per chunk, sequential
//! calls interleaved; then 1,000 concurrent streamed calls, the sides alternating.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rig_core::completion::{CompletionRequest, ToolDefinition};
use rig_core::message::ToolName;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::streaming::{Item, StreamEvent};

use crate::support::provider::{self, Contender, RawClient, Timing, Wire};
use crate::support::sse_server::{self, SseServer};

type RigChat = rig_core::Model<rig_core::providers::openai::wire::Chat>;

fn rig_model(server: &SseServer) -> RigChat {
    OpenAIConfig::new("sk-bench")
        .with_base_url(server.openai_base())
        .client()
        .chat("gpt-4o-mini")
}

fn rig_request() -> CompletionRequest {
    let request = provider::first_request();
    let tool = &request.tools[0];
    CompletionRequest::new(request.messages.iter().last().unwrap().text())
        .preamble(request.messages.iter().next().unwrap().text())
        .tool(ToolDefinition::new(
            ToolName::new(tool.name.clone()).unwrap(),
            tool.description.clone(),
            tool.parameters.clone(),
        ))
}

/// One rig streamed call, drained (the request built outside the timing).
async fn rig_call(model: &RigChat, request: CompletionRequest) -> Timing {
    let t = Instant::now();
    let mut stream = model.stream(request).unwrap();
    let mut ttft = None;
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            Item::Event(StreamEvent::Text { text, .. }) if ttft.is_none() && !text.is_empty() => {
                ttft = Some(t.elapsed())
            }
            other => {
                std::hint::black_box(other);
            }
        }
    }
    Timing { ttft: ttft.unwrap(), total: t.elapsed() }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn rig_concurrent(model: Arc<RigChat>, n: usize) -> Duration {
    let t = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let m = Arc::clone(&model);
            tokio::spawn(async move { rig_call(&m, rig_request()).await })
        })
        .collect();
    for h in handles {
        std::hint::black_box(h.await.unwrap());
    }
    t.elapsed()
}

/// Runs the comparison and prints its table and `RESULT` line.
pub fn run(rounds: usize, batch: usize, streams: usize) {
    let events = sse_server::events_after_first_text(sse_server::OPENAI_TURN);
    // Sequential calls on a current-thread runtime (each client made in it).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let server = SseServer::start();
    let (rig, rein, raw) = rt.block_on(async {
        (rig_model(&server), provider::openai_model(&server), RawClient::new(&server, Wire::OpenAi))
    });
    let mut s: [(Vec<f64>, Vec<f64>, Vec<f64>); 3] = Default::default();
    let mut push = |i: usize, t: Timing| {
        s[i].0.push(t.ttft.as_secs_f64() * 1e6);
        s[i].1.push(t.total.as_secs_f64() * 1e6);
        s[i].2.push((t.total - t.ttft).as_secs_f64() * 1e9 / events as f64);
    };
    rt.block_on(async {
        for round in 0..=rounds {
            for k in 0..batch {
                // Each side goes first in turn: a call after a rig call finds colder caches.
                for side in (0..3).map(|j| (j + k) % 3) {
                    let t = match side {
                        0 => rig_call(&rig, rig_request()).await,
                        1 => provider::model_call(&rein, provider::first_request()).await,
                        _ => raw.call().await,
                    };
                    if round > 0 {
                        push(side, t);
                    }
                }
            }
        }
    });
    let [rig_s, rein_s, raw_s] = s.map(|(a, b, c)| (median(a), median(b), median(c)));
    // 1,000 concurrent calls on a 2-worker runtime, the sides alternating.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = SseServer::start();
    let (rig, rein, raw) = rt.block_on(async {
        (
            Arc::new(rig_model(&server)),
            Arc::new(Contender::OpenAi(provider::openai_model(&server))),
            Arc::new(Contender::Raw(RawClient::new(&server, Wire::OpenAi))),
        )
    });
    let (mut rig_rates, mut rein_rates, mut raw_rates) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for rep in 0..6 {
            let a = rig_concurrent(Arc::clone(&rig), streams).await;
            let b = provider::concurrent(Arc::clone(&rein), streams).await;
            let c = provider::concurrent(Arc::clone(&raw), streams).await;
            // The first repetition opens the connections.
            if rep > 0 {
                rig_rates.push(streams as f64 / a.as_secs_f64());
                rein_rates.push(streams as f64 / b.as_secs_f64());
                raw_rates.push(streams as f64 / c.as_secs_f64());
            }
        }
    });
    let (rig_rate, rein_rate, raw_rate) = (median(rig_rates), median(rein_rates), median(raw_rates));
    println!();
    println!("provider path, OpenAI chat completions on a loopback server ({events} chunks after the first text; medians)");
    println!("{:<44} {:>12} {:>12} {:>12}", "", "rig 0.44", "rein", "raw reqwest");
    println!("{:<44} {:>9.1} µs {:>9.1} µs {:>9.1} µs", "time to first token", rig_s.0, rein_s.0, raw_s.0);
    println!("{:<44} {:>9.1} µs {:>9.1} µs {:>9.1} µs", "streamed call", rig_s.1, rein_s.1, raw_s.1);
    println!("{:<44} {:>9.0} ns {:>9.0} ns {:>9.0} ns", "per chunk", rig_s.2, rein_s.2, raw_s.2);
    println!("{:<44} {:>10.0}/s {:>10.0}/s {:>10.0}/s", format!("{streams} concurrent streamed calls, 2 workers"), rig_rate, rein_rate, raw_rate);
    println!(
        "RESULT stream_throughput_over_rig={:.2} stream_ttft_rig_us={:.1} stream_ttft_rein_us={:.1} \
         stream_ttft_raw_us={:.1} stream_chunk_rig_ns={:.0} stream_chunk_rein_ns={:.0} stream_chunk_raw_ns={:.0} \
         stream_calls_per_s_rig={:.0} stream_calls_per_s_rein={:.0} stream_calls_per_s_raw={:.0}",
        rein_rate / rig_rate, rig_s.0, rein_s.0, raw_s.0, rig_s.2, rein_s.2, raw_s.2, rig_rate, rein_rate, raw_rate
    );
}
