//! Hostile model servers (issue 20 items 1–4, issue 13 item 11), all on 127.0.0.1:
//! absurd token counts and `Retry-After` values, endless lines, huge bodies, streams
//! that never end. Every one must end the call with a typed error, promptly, in bounded
//! memory, without a panic. Time bounds are generous ("well under the idle timeout"),
//! memory is the process's peak RSS (`VmHWM`). Compiled with both provider features.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rein::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::providers::mock::*;
use crate::support::*;

const MIB: usize = 1024 * 1024;

/// One step of a hostile response body (chunked encoding).
#[derive(Clone)]
enum Step {
    /// These bytes, as one chunk.
    Send(Vec<u8>),
    /// `times` chunks, cycling through the pieces, one every `Duration`.
    Every(Duration, Vec<String>, usize),
    /// `n` bytes of `x`, generated lazily in 64 KiB chunks (never allocated whole).
    Filler(usize),
    /// Silence.
    Sleep(Duration),
}

/// A server that answers every request with the same status, headers and body steps.
struct Hostile {
    url: String,
    requests: Arc<AtomicUsize>,
}

impl Hostile {
    async fn start(
        status: u16,
        content_type: &str,
        headers: &[(&str, &str)],
        steps: Vec<Step>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // An empty content type sends no `Content-Type` header at all.
        let mut head = format!("HTTP/1.1 {status} Hostile\r\n");
        if !content_type.is_empty() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        let requests = Arc::new(AtomicUsize::new(0));
        let (count, steps) = (Arc::clone(&requests), Arc::new(steps));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (count, steps, head) = (Arc::clone(&count), Arc::clone(&steps), head.clone());
                tokio::spawn(async move {
                    if read_request(&mut socket).await.is_some() {
                        count.fetch_add(1, Ordering::SeqCst);
                        // A write error means the client hung up: stop.
                        let _ = respond(&mut socket, &head, &steps).await;
                    }
                });
            }
        });
        Self { url, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The wire's model pointed at this server.
    async fn model(&self, wire: &dyn Wire, http: HttpConfig) -> Arc<dyn Model> {
        let holder = MockServer::start([]).await.with_url(&self.url);
        wire.model(&holder, http)
    }
}

async fn chunk(socket: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    socket.write_all(&out).await?;
    socket.flush().await
}

async fn respond(socket: &mut TcpStream, head: &str, steps: &[Step]) -> std::io::Result<()> {
    socket.write_all(head.as_bytes()).await?;
    for step in steps {
        match step {
            Step::Send(bytes) => chunk(socket, bytes).await?,
            Step::Every(every, pieces, times) => {
                for i in 0..*times {
                    tokio::time::sleep(*every).await;
                    chunk(socket, pieces[i % pieces.len()].as_bytes()).await?;
                }
            }
            Step::Filler(total) => {
                let block = vec![b'x'; 64 * 1024];
                let mut left = *total;
                while left > 0 {
                    let n = left.min(block.len());
                    chunk(socket, &block[..n]).await?;
                    left -= n;
                }
            }
            Step::Sleep(d) => tokio::time::sleep(*d).await,
        }
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.shutdown().await
}

/// The process's peak resident set size so far, in bytes.
#[cfg(target_os = "linux")]
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Events that open a turn whose text follows (none on OpenAI).
fn opening(wire: &dyn Wire) -> Vec<String> {
    match wire.name() {
        "anthropic" => vec![
            event(
                json!({"type": "message_start", "message": {"id": "m", "type": "message",
                "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}),
            ),
            event(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})),
        ],
        _ => vec![],
    }
}

/// A text delta.
fn text_delta(wire: &dyn Wire, text: &str) -> String {
    match wire.name() {
        "anthropic" => event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}})),
        _ => openai_chunk(json!({"content": text}), None),
    }
}

/// Events that carry nothing: keep-alives and empty deltas.
fn no_progress(wire: &dyn Wire) -> Vec<String> {
    match wire.name() {
        "anthropic" => vec![
            event(json!({"type": "ping"})),
            text_delta(wire, ""),
            ": keep-alive\n\n".into(),
        ],
        _ => vec![
            openai_chunk(json!({"content": ""}), None),
            openai_chunk(json!({}), None),
            data(json!({"id": "c", "choices": []})),
            ": keep-alive\n\n".into(),
        ],
    }
}

/// The turn's opening events, then `then`.
fn opening_then(wire: &dyn Wire, then: Step) -> Vec<Step> {
    let mut steps: Vec<Step> = opening(wire)
        .into_iter()
        .map(|e| Step::Send(e.into_bytes()))
        .collect();
    steps.push(then);
    steps
}

/// Runs one call that must fail: its chunks, the error, and how long it took.
async fn timed_failure(model: &dyn Model) -> (Vec<ModelChunk>, ModelError, Duration) {
    let start = Instant::now();
    let (chunks, err) = collect(model, ask("hi")).await;
    (chunks, err.expect("the call fails"), start.elapsed())
}

/// A server answering 429 with this wait header.
async fn rate_limited(header: &str, value: &str) -> Hostile {
    let body = br#"{"error": {"message": "slow down"}}"#.to_vec();
    Hostile::start(
        429,
        "application/json",
        &[(header, value)],
        vec![Step::Send(body)],
    )
    .await
}

// ---- item 1: token usage overflow ----

/// The agent's usage as `PostCall` saw it, after a two-turn tool conversation whose
/// every model call reports `u64::MAX` tokens.
async fn usage_after_two_max_turns(model: impl Model) -> Usage {
    let log = Log::default();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = Arc::clone(&seen);
    let observer = FnHook::new("usage", move |e| {
        if let HookEvent::PostCall(e) = e {
            *s.lock().unwrap() = Some(e.usage());
        }
        Ok(())
    })
    .on(EventKind::PostCall);
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(observer)
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2?")).await.unwrap();
    assert_eq!(reply.text(), "3");
    assert_eq!(log.entries(), ["add:1+2"]);
    seen.lock().unwrap().take().unwrap()
}

const MAX: Usage = Usage::new(u64::MAX, u64::MAX);

#[tokio::test]
async fn a_usage_count_of_u64_max_never_panics_on_openai() {
    let usage = data(
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": u64::MAX,
        "completion_tokens": u64::MAX, "total_tokens": u64::MAX}}),
    );
    let call = openai_chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]}),
        None,
    );
    let done = "data: [DONE]\n\n".to_owned();
    let server = MockServer::start([
        Reply::sse(&[
            call,
            openai_chunk(json!({}), Some("tool_calls")),
            usage.clone(),
            done.clone(),
        ]),
        Reply::sse(&[
            openai_chunk(json!({"content": "3"}), Some("stop")),
            usage,
            done,
        ]),
    ])
    .await;
    let model = OpenAiWire.model(&server, fast_http(1));
    assert_eq!(usage_after_two_max_turns(model).await, MAX);
}

#[tokio::test]
async fn a_usage_count_of_u64_max_never_panics_on_anthropic() {
    // Input plus cache tokens overflow inside one event, and again across the turns.
    let huge = json!({"input_tokens": u64::MAX, "cache_creation_input_tokens": u64::MAX,
        "cache_read_input_tokens": 7, "output_tokens": u64::MAX});
    let turn = |blocks: Vec<String>, stop: &str| {
        let mut events = vec![event(json!({"type": "message_start",
            "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                        "usage": huge}}))];
        events.extend(blocks);
        events.push(event(
            json!({"type": "message_delta", "delta": {"stop_reason": stop},
            "usage": huge}),
        ));
        events.push(event(json!({"type": "message_stop"})));
        events
    };
    let tool = vec![
        event(
            json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}}),
        ),
        event(json!({"type": "content_block_delta", "index": 0, "delta":
            {"type": "input_json_delta", "partial_json": "{\"a\": 1, \"b\": 2}"}})),
    ];
    let server = MockServer::start([
        Reply::sse(&turn(tool, "tool_use")),
        Reply::sse(&turn(
            opening(&AnthropicWire)[1..]
                .iter()
                .cloned()
                .chain([text_delta(&AnthropicWire, "3")])
                .collect(),
            "end_turn",
        )),
    ])
    .await;
    let model = AnthropicWire.model(&server, fast_http(1));
    // The cache reads (7 a turn) are reported as such.
    let expected = Usage {
        cached_input_tokens: 14,
        ..MAX
    };
    assert_eq!(usage_after_two_max_turns(model).await, expected);
}

// ---- issue 13 item 11: Retry-After of any size ----

#[tokio::test]
async fn a_huge_or_infinite_retry_after_is_a_rate_limit_error_without_retry_never_a_panic() {
    for wire in wires() {
        for (header, value) in [
            ("retry-after", "1e30"),
            ("retry-after-ms", "1e300"),
            ("retry-after", "inf"),
            ("retry-after", "18446744073709551616"),
        ] {
            let server = rate_limited(header, value).await;
            let model = server.model(&*wire, fast_http(3)).await;
            let (_, err, _) = timed_failure(&*model).await;
            let what = format!("{} {header}: {value}", wire.name());
            assert_eq!(err.kind(), ModelErrorKind::RateLimit, "{what}: {err}");
            assert!(err.message().contains("max_retry_after"), "{what}: {err}");
            assert_eq!(server.requests(), 1, "{what}: not retried");
        }
    }
}

#[tokio::test]
async fn a_negative_or_nan_retry_after_is_ignored_and_the_backoff_applies() {
    for wire in wires() {
        for value in ["-1", "NaN", "-inf"] {
            let server = rate_limited("retry-after", value).await;
            let model = server.model(&*wire, fast_http(3)).await;
            let (_, err, _) = timed_failure(&*model).await;
            assert_eq!(err.kind(), ModelErrorKind::RateLimit);
            assert_eq!(server.requests(), 3, "{} {value}: retried", wire.name());
        }
    }
}

// ---- item 2: long lines, large events ----

#[tokio::test]
async fn an_sse_line_over_the_limit_fails_fast_with_a_typed_error() {
    for wire in wires() {
        // 4 MiB of one `data:` line and no newline, then the connection stays open.
        let server = Hostile::start(
            200,
            "text/event-stream",
            &[],
            vec![
                Step::Send(b"data: ".to_vec()),
                Step::Filler(4 * MIB),
                Step::Sleep(Duration::from_secs(60)),
            ],
        )
        .await;
        let idle = Duration::from_secs(30);
        let http = HttpConfig {
            idle_timeout: idle,
            ..fast_http(3)
        };
        let model = server.model(&*wire, http).await;
        let (chunks, err, elapsed) = timed_failure(&*model).await;
        let name = wire.name();
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{name}: {err}");
        assert!(err.message().contains("max_line_bytes"), "{name}: {err}");
        assert!(
            err.message().contains(&(2 * MIB).to_string()),
            "{name}: {err}"
        );
        assert!(chunks.is_empty());
        assert!(elapsed < idle / 3, "{name}: took {elapsed:?}");
        assert_eq!(server.requests(), 1, "{name}: not retried");
    }
}

#[tokio::test]
async fn a_large_but_allowed_event_still_parses_across_many_reads() {
    for wire in wires() {
        let text = "abcdefgh".repeat(MIB * 3 / 2 / 8);
        let mut events = opening(&*wire);
        events.push(text_delta(&*wire, &text));
        events.extend(wire.events(&Turn::default()));
        let server = MockServer::start([Reply::sse(&events).in_pieces_of(16 * 1024)]).await;
        let chunks = stream_ok(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        assert_eq!(text_of(&chunks), text, "{}", wire.name());
    }
}

#[tokio::test]
async fn the_line_and_event_limits_are_configurable_and_named_in_the_error() {
    for wire in wires() {
        let http = HttpConfig {
            max_line_bytes: 1024,
            max_event_bytes: 4096,
            ..fast_http(1)
        };
        // A 2 KiB delta passes the defaults but not a 1 KiB line limit.
        let server =
            MockServer::start([Reply::sse(&[text_delta(&*wire, &"y".repeat(2048))])]).await;
        let (_, err) = collect(&*wire.model(&server, http.clone()), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream);
        assert!(
            err.message().contains("max_line_bytes (1024 bytes)"),
            "{err}"
        );
        // Short lines, but too many of them in one event.
        let many = format!("{}\n", "data: 0123456789\n".repeat(500));
        let server = MockServer::start([Reply::sse(&[many])]).await;
        let (_, err) = collect(&*wire.model(&server, http), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream);
        assert!(
            err.message().contains("max_event_bytes (4096 bytes)"),
            "{err}"
        );
    }
}

// ---- item 3: huge error and non-SSE bodies ----

const HUGE: usize = 300 * MIB;
const RSS_GROWTH: usize = 64 * MIB;

/// For each wire: the error of a call whose every answer is `status` with a 300 MB
/// body, and how many requests it made; fails when the peak RSS grew by 64 MB or more.
#[cfg(target_os = "linux")]
async fn huge_body_failures(status: u16) -> Vec<(ModelError, usize)> {
    let mut out = Vec::new();
    for wire in wires() {
        let server =
            Hostile::start(status, "application/json", &[], vec![Step::Filler(HUGE)]).await;
        let model = server.model(&*wire, fast_http(3)).await;
        let before = peak_rss();
        let (_, err, _) = timed_failure(&*model).await;
        let grown = peak_rss().saturating_sub(before);
        let name = wire.name();
        assert!(grown < RSS_GROWTH, "{name}: peak RSS grew {grown} bytes");
        assert!(
            err.message().len() < 1000,
            "{name}: the body is quoted truncated"
        );
        out.push((err, server.requests()));
    }
    out
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_300_mb_json_answer_is_read_only_a_few_kib_far_and_is_a_typed_error() {
    for (err, requests) in huge_body_failures(200).await {
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{err}");
        assert!(
            err.message().contains("instead of an event stream"),
            "{err}"
        );
        assert_eq!(requests, 1);
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_300_mb_error_body_retried_three_times_keeps_memory_small() {
    for (err, requests) in huge_body_failures(500).await {
        assert_eq!(err.kind(), ModelErrorKind::Server, "{err}");
        assert_eq!(requests, 3);
    }
}

// ---- issue 38 item 6: a 2xx answer without a content type ----

#[tokio::test]
async fn a_200_answer_without_a_content_type_is_a_stream_error_naming_it_unless_accepted() {
    for wire in wires() {
        let name = wire.name();
        let steps = wire
            .events(&Turn {
                text: vec!["Hel", "lo"],
                usage: (3, 2),
                ..Turn::default()
            })
            .into_iter()
            .map(|e| Step::Send(e.into_bytes()))
            .collect::<Vec<_>>();
        let server = Hostile::start(200, "", &[], steps).await;
        let model = server.model(&*wire, fast_http(3)).await;
        let (chunks, err, _) = timed_failure(&*model).await;
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{name}: {err}");
        for part in [
            "no content type",
            "instead of an event stream",
            "accept_missing_content_type",
        ] {
            assert!(
                err.message().contains(part),
                "{name}: `{part}` missing: {err}"
            );
        }
        assert!(chunks.is_empty(), "{name}: nothing is read as events");
        assert_eq!(server.requests(), 1, "{name}: not retried");
        // A provider configured to accept it reads the same body as the stream it is.
        let http = HttpConfig {
            accept_missing_content_type: true,
            ..fast_http(1)
        };
        let model = server.model(&*wire, http).await;
        let (chunks, err) = collect(&*model, ask("hi")).await;
        assert!(err.is_none(), "{name}: {err:?}");
        let text: String = chunks
            .iter()
            .filter_map(|c| match c {
                ModelChunk::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Hello", "{name}: {chunks:?}");
    }
}

// ---- item 4: idle progress and the total deadline ----

#[tokio::test]
async fn empty_deltas_and_pings_every_100_ms_do_not_hold_off_the_idle_timeout() {
    for wire in wires() {
        let every = Step::Every(Duration::from_millis(100), no_progress(&*wire), 100);
        let steps = opening_then(&*wire, every);
        let server = Hostile::start(200, "text/event-stream", &[], steps).await;
        let http = HttpConfig {
            idle_timeout: Duration::from_millis(700),
            total_timeout: None,
            ..fast_http(1)
        };
        let model = server.model(&*wire, http).await;
        let (_, err, elapsed) = timed_failure(&*model).await;
        let name = wire.name();
        assert_eq!(err.kind(), ModelErrorKind::Timeout, "{name}: {err}");
        assert!(err.message().contains("idle_timeout"), "{name}: {err}");
        // The server would keep this up for 10 s.
        assert!(elapsed < Duration::from_secs(4), "{name}: took {elapsed:?}");
    }
}

#[tokio::test]
async fn a_stream_of_real_deltas_past_the_total_deadline_fails_with_a_deadline_error() {
    for wire in wires() {
        let every = Step::Every(
            Duration::from_millis(100),
            vec![text_delta(&*wire, "x")],
            100,
        );
        let steps = opening_then(&*wire, every);
        let server = Hostile::start(200, "text/event-stream", &[], steps).await;
        let http = HttpConfig {
            idle_timeout: Duration::from_secs(5),
            total_timeout: Some(Duration::from_secs(1)),
            ..fast_http(3)
        };
        let model = server.model(&*wire, http).await;
        let (chunks, err, elapsed) = timed_failure(&*model).await;
        let name = wire.name();
        assert_eq!(err.kind(), ModelErrorKind::Deadline, "{name}: {err}");
        assert!(err.message().contains("total_timeout"), "{name}: {err}");
        assert!(
            !text_of(&chunks).is_empty(),
            "{name}: deltas arrived before"
        );
        assert!(elapsed < Duration::from_secs(4), "{name}: took {elapsed:?}");
        assert_eq!(server.requests(), 1, "{name}");
    }
}

#[tokio::test]
async fn the_total_deadline_also_bounds_retries_and_waiting_for_headers() {
    for wire in wires() {
        // Every attempt is a 503 that asks for a 2 s wait (allowed by max_retry_after),
        // but the call has 1 s in all: it gives up at once instead of sleeping past it.
        let server = Hostile::start(503, "application/json", &[("retry-after", "2")], vec![]).await;
        let http = HttpConfig {
            total_timeout: Some(Duration::from_secs(1)),
            ..fast_http(3)
        };
        let model = server.model(&*wire, http).await;
        let (_, err, elapsed) = timed_failure(&*model).await;
        assert_eq!(err.kind(), ModelErrorKind::Server);
        assert_eq!(server.requests(), 1, "{}", wire.name());
        assert!(elapsed < Duration::from_millis(900));

        // Headers that take longer than the whole deadline: a Deadline error, no retry.
        let slow = Reply::sse(&wire.events(&Turn::default())).delay(Duration::from_secs(3));
        let server = MockServer::start([slow.clone(), slow]).await;
        let http = HttpConfig {
            request_timeout: Duration::from_secs(10),
            total_timeout: Some(Duration::from_millis(300)),
            ..fast_http(3)
        };
        let (_, err) = collect(&*wire.model(&server, http), ask("hi")).await;
        assert_eq!(
            err.unwrap().kind(),
            ModelErrorKind::Deadline,
            "{}",
            wire.name()
        );
        assert_eq!(server.requests().len(), 1);
    }
}
