//! The provider path side by side (features `openai` and `anthropic`): rein's
//! `OpenAiChatModel` and `AnthropicModel` driven through `Model::stream` and through
//! an `Agent` call, against a raw `reqwest` client that posts the same request bytes
//! and parses the same SSE bytes (the floor), all on the loopback server of
//! [`super::sse_server`].
//!
//! The floor does the least a client must do to hand text to a caller: SSE framing
//! (split at blank lines, take the `data:` lines) and a typed, borrowing `serde_json`
//! decode of each payload's text and tool-argument fragments; it allocates nothing
//! per event. rein decodes every event into `ModelChunk`s (an owned `String` each)
//! and applies its timeouts and limits.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rein::model::{AnthropicModel, OpenAiChatModel};
use rein::*;
use serde::Deserialize;
use serde_json::json;

use super::sse_server::{self, SseServer};

/// Which wire a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    /// The turn transcript the server sends for a first request.
    pub fn turn(self) -> &'static str {
        match self {
            Wire::OpenAi => sse_server::OPENAI_TURN,
            Wire::Anthropic => sse_server::ANTHROPIC_TURN,
        }
    }
}

/// One streamed call: time to the first text chunk, and to the end of the stream.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ttft: Duration,
    pub total: Duration,
}

const SYSTEM: &str = "You are the support agent of an online shop. Look orders up before \
                      answering; never promise a refund.";
const QUESTION: &str = "My order from 30 November has not arrived. Where is it?";

/// The `get_order_status` tool the transcripts call.
pub fn order_tool() -> FunctionTool {
    FunctionTool::new(
        "get_order_status",
        "Live status and tracking of an order",
        json!({"type":"object","properties":{
            "order_id":{"type":"string"},"include_tracking":{"type":"boolean"},
            "postcode":{"type":"string"},"locale":{"type":"string"}},
            "required":["order_id"]}),
        |_args| async move { Ok("out for delivery today, 12:00-14:00".to_owned()) },
    )
}

/// The request of the agent's first turn: its system prompt, the question, the tool.
pub fn first_request() -> ModelRequest {
    ModelRequest {
        messages: vec![Msg::system(SYSTEM), Msg::user(QUESTION)].into(),
        tools: vec![ToolSchema {
            name: "get_order_status".into(),
            description: "Live status and tracking of an order".into(),
            parameters: order_tool().parameters(),
        }]
        .into(),
        options: GenerateOptions::default(),
    }
}

/// rein's OpenAI provider on `server`.
pub fn openai_model(server: &SseServer) -> OpenAiChatModel {
    OpenAiChatModel::builder()
        .base_url(server.openai_base())
        .api_key("sk-bench")
        .model("gpt-4o-mini")
        .build()
        .unwrap()
}

/// rein's Anthropic provider on `server`.
pub fn anthropic_model(server: &SseServer) -> AnthropicModel {
    AnthropicModel::builder()
        .base_url(server.anthropic_base())
        .api_key("sk-ant-bench")
        .model("claude-sonnet-4-5")
        .build()
        .unwrap()
}

/// An agent on `model` with the order tool.
pub fn provider_agent(model: impl Model + 'static) -> Agent {
    let mut tools = Toolkit::new();
    tools.register(order_tool()).unwrap();
    Agent::builder()
        .name("support")
        .sys_prompt(SYSTEM)
        .model(model)
        .toolkit(tools)
        .without_global_hooks()
        .build()
        .unwrap()
}

/// One `Model::stream` call of `request`, drained (the request is built by the caller,
/// outside the timing, as an agent has it already).
pub async fn model_call(model: &dyn Model, request: ModelRequest) -> Timing {
    let t = Instant::now();
    let mut stream = model.stream(request);
    let mut ttft = None;
    while let Some(chunk) = stream.next().await {
        match chunk.unwrap() {
            ModelChunk::Text(s) if ttft.is_none() && !s.is_empty() => ttft = Some(t.elapsed()),
            other => {
                std::hint::black_box(other);
            }
        }
    }
    Timing {
        ttft: ttft.unwrap(),
        total: t.elapsed(),
    }
}

/// One agent call streamed: time to the first text delta, to the first tool call (the
/// end of the first turn), and to the final reply, on session `session` (forgotten
/// afterwards).
pub async fn agent_call(agent: &Agent, session: &str) -> (Timing, Duration) {
    let t = Instant::now();
    let mut stream = agent.stream(
        vec![Msg::user(QUESTION)],
        RunContext::new().with_session_id(session),
    );
    let (mut ttft, mut turn) = (None, None);
    while let Some(event) = stream.next().await {
        match event {
            AgentEvent::TextDelta(_) if ttft.is_none() => ttft = Some(t.elapsed()),
            AgentEvent::ToolCall(_) if turn.is_none() => turn = Some(t.elapsed()),
            AgentEvent::Error(e) => panic!("agent call failed: {e}"),
            _ => {}
        }
    }
    let total = t.elapsed();
    agent.forget_session(&SessionKey::new(None, session));
    (
        Timing {
            ttft: ttft.unwrap(),
            total,
        },
        turn.unwrap(),
    )
}

/// The floor: a plain `reqwest` client posting fixed request bytes.
#[derive(Clone)]
pub struct RawClient {
    client: reqwest::Client,
    url: String,
    body: Vec<u8>,
    wire: Wire,
}

impl RawClient {
    /// A client for `wire` on `server` that posts the bytes rein's provider posts for
    /// [`first_request`].
    pub fn new(server: &SseServer, wire: Wire) -> Self {
        let (url, body) = match wire {
            Wire::OpenAi => (
                format!("{}/chat/completions", server.openai_base()),
                openai_model(server).request_body(&first_request()),
            ),
            Wire::Anthropic => (
                format!("{}/v1/messages", server.anthropic_base()),
                anthropic_model(server).request_body(&first_request()),
            ),
        };
        // Building a rein model above installed rustls's process-wide crypto provider.
        Self {
            client: reqwest::Client::new(),
            url,
            body: serde_json::to_vec(&body.unwrap()).unwrap(),
            wire,
        }
    }

    /// One call, streamed to its end.
    pub async fn call(&self) -> Timing {
        let t = Instant::now();
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        request = match self.wire {
            Wire::OpenAi => request.header("authorization", "Bearer sk-bench"),
            Wire::Anthropic => request
                .header("x-api-key", "sk-ant-bench")
                .header("anthropic-version", "2023-06-01"),
        };
        let mut response = request.body(self.body.clone()).send().await.unwrap();
        let (mut buf, mut ttft, mut done) = (Vec::<u8>::new(), None, false);
        while !done && let Some(bytes) = response.chunk().await.unwrap() {
            buf.extend_from_slice(&bytes);
            let mut start = 0;
            while let Some(end) = find_blank_line(&buf[start..]) {
                let event = &buf[start..start + end];
                start += end + 2;
                for line in lines(event) {
                    let Some(data) = line.strip_prefix(b"data: ") else {
                        continue;
                    };
                    if data == b"[DONE]" || data.starts_with(br#"{"type":"message_stop""#) {
                        done = true;
                    } else if self.decode(data) && ttft.is_none() {
                        ttft = Some(t.elapsed());
                    }
                }
            }
            buf.drain(..start);
        }
        Timing {
            ttft: ttft.unwrap(),
            total: t.elapsed(),
        }
    }

    /// Decodes one payload; whether it carried text.
    fn decode(&self, data: &[u8]) -> bool {
        match self.wire {
            Wire::OpenAi => {
                let chunk: OaChunk<'_> = serde_json::from_slice(data).unwrap();
                let mut text = false;
                for choice in &chunk.choices {
                    if let Some(t) = &choice.delta.content {
                        text |= !t.is_empty();
                        std::hint::black_box(t);
                    }
                    for call in choice.delta.tool_calls.iter().flatten() {
                        std::hint::black_box(&call.function);
                    }
                }
                text
            }
            Wire::Anthropic => {
                let event: AnEvent<'_> = serde_json::from_slice(data).unwrap();
                let delta = event.delta.unwrap_or_default();
                std::hint::black_box(&delta.partial_json);
                delta.text.is_some_and(|t| !t.is_empty())
            }
        }
    }
}

/// The lines of an event, split with `memchr` as rein's parser does.
fn lines(mut event: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if event.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', event).unwrap_or(event.len());
        let line = &event[..end];
        event = event.get(end + 1..).unwrap_or(&[]);
        Some(line)
    })
}

fn find_blank_line(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\n\n")
}

#[derive(Deserialize)]
struct OaChunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<OaChoice<'a>>,
}

#[derive(Deserialize)]
struct OaChoice<'a> {
    #[serde(borrow)]
    delta: OaDelta<'a>,
}

#[derive(Deserialize)]
struct OaDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<OaCall<'a>>>,
}

#[derive(Deserialize)]
struct OaCall<'a> {
    #[serde(borrow, default)]
    function: Option<OaFunction<'a>>,
}

#[derive(Debug, Deserialize)]
struct OaFunction<'a> {
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct AnEvent<'a> {
    #[serde(borrow, default)]
    delta: Option<AnDelta<'a>>,
}

#[derive(Default, Deserialize)]
struct AnDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
}

/// What one client is, for [`Contender::call`]: each measured side.
pub enum Contender {
    Raw(RawClient),
    OpenAi(OpenAiChatModel),
    Anthropic(AnthropicModel),
    Agent(Agent),
}

impl Contender {
    /// One call of this contender (an agent's on session `session`).
    pub async fn call(&self, session: &str) -> Timing {
        match self {
            Contender::Raw(raw) => raw.call().await,
            Contender::OpenAi(m) => model_call(m, first_request()).await,
            Contender::Anthropic(m) => model_call(m, first_request()).await,
            Contender::Agent(a) => agent_call(a, session).await.0,
        }
    }
}

/// Wall time of `n` calls of `contender` started at once (each its own task) on the
/// current runtime.
pub async fn concurrent(contender: std::sync::Arc<Contender>, n: usize) -> Duration {
    let t = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let c = std::sync::Arc::clone(&contender);
            tokio::spawn(async move { c.call(&format!("c{i}")).await })
        })
        .collect();
    for h in handles {
        std::hint::black_box(h.await.unwrap());
    }
    t.elapsed()
}

/// Medians of one measured side.
#[derive(Clone, Copy, Debug, Default)]
pub struct Side {
    /// Time to the first text chunk, µs.
    pub ttft_us: f64,
    /// The whole call, µs.
    pub call_us: f64,
    /// Per event after the first text one: (end of the turn − first text) / events, ns.
    pub chunk_ns: f64,
}

/// The sequential figures: per wire (OpenAI, Anthropic) the floor, `Model::stream` and
/// an agent call (two turns and the tool; its `chunk_ns` is over its first turn).
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub raw: [Side; 2],
    pub model: [Side; 2],
    pub agent: [Side; 2],
    /// Requests the server answered, over how many connections (keep-alive works when
    /// these are far apart).
    pub requests: u64,
    pub connections: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Samples of one side: (ttft, call, per-chunk).
#[derive(Default)]
struct Samples(Vec<f64>, Vec<f64>, Vec<f64>);

impl Samples {
    fn push(&mut self, t: Timing, turn_end: Duration, events: usize) {
        self.0.push(t.ttft.as_secs_f64() * 1e6);
        self.1.push(t.total.as_secs_f64() * 1e6);
        self.2
            .push((turn_end - t.ttft).as_secs_f64() * 1e9 / events as f64);
    }

    fn side(self) -> Side {
        Side {
            ttft_us: median(self.0),
            call_us: median(self.1),
            chunk_ns: median(self.2),
        }
    }
}

/// Sequential calls on the current-thread runtime `rt`: `rounds` rounds of `batch`
/// calls of each side, interleaved so load changes hit all alike (the first round is a
/// warm-up: connections are opened there).
pub fn measure(rt: &tokio::runtime::Runtime, rounds: usize, batch: usize) -> Figures {
    let server = SseServer::start();
    let wires = [Wire::OpenAi, Wire::Anthropic];
    let raws = wires.map(|w| RawClient::new(&server, w));
    let (oa, an) = (openai_model(&server), anthropic_model(&server));
    let agents = [
        provider_agent(openai_model(&server)),
        provider_agent(anthropic_model(&server)),
    ];
    let events = wires.map(|w| sse_server::events_after_first_text(w.turn()));
    let mut samples: [[Samples; 3]; 2] = Default::default();
    for round in 0..=rounds {
        for (i, wire) in wires.into_iter().enumerate() {
            let model: &dyn Model = if wire == Wire::OpenAi { &oa } else { &an };
            for _ in 0..batch {
                let raw = rt.block_on(raws[i].call());
                let rein = rt.block_on(model_call(model, first_request()));
                let (agent, turn) = rt.block_on(agent_call(&agents[i], "p"));
                if round > 0 {
                    samples[i][0].push(raw, raw.total, events[i]);
                    samples[i][1].push(rein, rein.total, events[i]);
                    samples[i][2].push(agent, turn, events[i]);
                }
            }
        }
    }
    let connections = server
        .connections
        .load(std::sync::atomic::Ordering::Relaxed);
    let [[r0, m0, a0], [r1, m1, a1]] = samples;
    Figures {
        raw: [r0.side(), r1.side()],
        model: [m0.side(), m1.side()],
        agent: [a0.side(), a1.side()],
        requests: server.answered(),
        connections,
    }
}

impl Figures {
    /// The table `bench_report` prints.
    pub fn table(&self) -> String {
        let mut out = format!(
            "provider path (loopback server, recorded transcripts; medians; {} requests over {} \
             connections):\n\
             \x20 side                                             TTFT µs     call µs  ns/chunk\n",
            self.requests, self.connections
        );
        for (i, wire) in ["OpenAI", "Anthropic"].into_iter().enumerate() {
            let rows = [
                ("raw reqwest + SSE parse (the floor)", self.raw[i]),
                ("Model::stream", self.model[i]),
                ("Agent call (2 turns + tool; chunks: turn 1)", self.agent[i]),
            ];
            for (what, s) in rows {
                out.push_str(&format!(
                    "  {:<47} {:>8.1} {:>11.1} {:>9.0}",
                    format!("{wire} {what}"),
                    s.ttft_us,
                    s.call_us,
                    s.chunk_ns
                ));
                if what == "Model::stream" {
                    out.push_str(&format!(
                        "  ({:.3}x TTFT, {:.2}x per chunk)",
                        s.ttft_us / self.raw[i].ttft_us,
                        s.chunk_ns / self.raw[i].chunk_ns
                    ));
                }
                out.push('\n');
            }
        }
        out
    }

    /// The summary keys: `ttft_over_raw` (the larger of the two providers'
    /// `Model::stream` ratios), `ttft_added_us` (the larger absolute difference), the
    /// per-chunk figures and the agent's TTFT ratio.
    pub fn summary(&self) -> String {
        let ratio = |i: usize| self.model[i].ttft_us / self.raw[i].ttft_us;
        let added = |i: usize| self.model[i].ttft_us - self.raw[i].ttft_us;
        let agent = |i: usize| self.agent[i].ttft_us / self.raw[i].ttft_us;
        format!(
            "ttft_over_raw={:.3} ttft_added_us={:.1} raw_ttft_us={:.1} agent_ttft_over_raw={:.3} \
             provider_chunk_ns={:.0} raw_chunk_ns={:.0} anthropic_chunk_ns={:.0} \
             raw_anthropic_chunk_ns={:.0} agent_chunk_ns={:.0}",
            ratio(0).max(ratio(1)),
            added(0).max(added(1)),
            self.raw[0].ttft_us,
            agent(0).max(agent(1)),
            self.model[0].chunk_ns,
            self.raw[0].chunk_ns,
            self.model[1].chunk_ns,
            self.raw[1].chunk_ns,
            self.agent[0].chunk_ns,
        )
    }
}

/// Calls per second of `n` concurrent streamed calls on `wire`: `(the floor,
/// Model::stream)`, medians of `reps` repetitions that alternate the two, after one
/// warm-up of each (which opens the connections), on the current runtime.
pub async fn stream_throughput(wire: Wire, n: usize, reps: usize) -> (f64, f64) {
    let server = SseServer::start();
    let raw = std::sync::Arc::new(Contender::Raw(RawClient::new(&server, wire)));
    let rein = std::sync::Arc::new(match wire {
        Wire::OpenAi => Contender::OpenAi(openai_model(&server)),
        Wire::Anthropic => Contender::Anthropic(anthropic_model(&server)),
    });
    let (mut raw_rates, mut rein_rates) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let a = concurrent(std::sync::Arc::clone(&raw), n).await;
        let b = concurrent(std::sync::Arc::clone(&rein), n).await;
        if rep > 0 {
            raw_rates.push(n as f64 / a.as_secs_f64());
            rein_rates.push(n as f64 / b.as_secs_f64());
        }
    }
    (median(raw_rates), median(rein_rates))
}

/// ns per event of decoding `wire`'s turn transcript without HTTP, one event per read:
/// `(rein's SSE parser and decoder, the floor's framing and typed decode)`, medians of
/// `rounds` runs of `reps` transcripts each.
pub fn decode_only_ns(wire: Wire, rounds: usize, reps: usize) -> (f64, f64) {
    use rein::model::sse_probe;
    let sse = wire.turn();
    let pieces: Vec<&[u8]> = sse_server::events(sse).map(str::as_bytes).collect();
    let n = (pieces.len() * reps) as f64;
    let (max_line, max_event) = sse_probe::default_limits();
    let probe_wire = match wire {
        Wire::OpenAi => sse_probe::Wire::OpenAi,
        Wire::Anthropic => sse_probe::Wire::Anthropic,
    };
    let floor = RawClient {
        client: reqwest::Client::new(),
        url: String::new(),
        body: Vec::new(),
        wire,
    };
    let (mut rein_ns, mut floor_ns) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..reps {
            let decoded = sse_probe::decode(probe_wire, &pieces, max_line, max_event);
            assert!(decoded.complete && decoded.error.is_none());
            std::hint::black_box(decoded);
        }
        rein_ns.push(t.elapsed().as_secs_f64() * 1e9 / n);
        let t = Instant::now();
        for _ in 0..reps {
            for piece in &pieces {
                for line in lines(piece) {
                    if let Some(data) = line.strip_prefix(b"data: ")
                        && data != b"[DONE]"
                    {
                        std::hint::black_box(floor.decode(data));
                    }
                }
            }
        }
        floor_ns.push(t.elapsed().as_secs_f64() * 1e9 / n);
    }
    (median(rein_ns), median(floor_ns))
}
