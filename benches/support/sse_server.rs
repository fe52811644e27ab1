//! A loopback HTTP/1.1 server for the provider benchmarks: it answers every `POST` with
//! a recorded server-sent-events transcript (`benches/fixtures/*.sse`) at full speed,
//! each event one HTTP chunk as a streaming server flushes it, over keep-alive
//! connections. `POST …/chat/completions` gets the OpenAI transcripts, `POST
//! …/messages` the Anthropic ones; a request that carries a tool result gets the
//! final-text transcript, any other the turn with text deltas and a tool call.
//!
//! It runs on a thread of its own with its own runtime, as a real server is another
//! process: the client's runtime does none of its work.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The OpenAI chat-completions turn: text deltas, then a `get_order_status` call.
pub const OPENAI_TURN: &str = include_str!("../fixtures/openai_chat.sse");
/// The OpenAI turn after the tool result: text deltas, `stop`.
pub const OPENAI_FINAL: &str = include_str!("../fixtures/openai_chat_final.sse");
/// The Anthropic Messages turn: text deltas, then a `get_order_status` call.
pub const ANTHROPIC_TURN: &str = include_str!("../fixtures/anthropic_messages.sse");
/// The Anthropic turn after the tool result: text deltas, `end_turn`.
pub const ANTHROPIC_FINAL: &str = include_str!("../fixtures/anthropic_messages_final.sse");

/// The events of a transcript (each ends with its blank line).
pub fn events(sse: &str) -> impl Iterator<Item = &str> {
    sse.split_inclusive("\n\n")
}

/// How many events of `sse` follow the first one carrying text (`"content":"x"` or
/// `"text_delta"`): the events a per-chunk figure divides by.
pub fn events_after_first_text(sse: &str) -> usize {
    let first = events(sse)
        .position(|e| {
            e.contains("\"text_delta\"")
                || (e.contains("\"content\":\"") && !e.contains("\"content\":\"\""))
        })
        .unwrap_or(0);
    events(sse).count() - first - 1
}

/// A whole HTTP response streaming `sse`: chunked, one chunk per event.
fn encode(sse: &str) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: \
                    no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec();
    for event in events(sse) {
        out.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
        out.extend_from_slice(event.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// The encoded responses: [OpenAI turn, OpenAI final, Anthropic turn, Anthropic final].
struct Replies([Vec<u8>; 4]);

/// The running server.
pub struct SseServer {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// Requests answered so far.
    pub requests: Arc<AtomicU64>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicU64>,
}

impl SseServer {
    /// Starts the server on a free port of 127.0.0.1.
    pub fn start() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        let connections = Arc::new(AtomicU64::new(0));
        let accepted = Arc::clone(&connections);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
                // 1,000 concurrent connects must not overflow the accept queue.
                let listener = socket.listen(4096).unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let replies = Arc::new(Replies([
                    encode(OPENAI_TURN),
                    encode(OPENAI_FINAL),
                    encode(ANTHROPIC_TURN),
                    encode(ANTHROPIC_FINAL),
                ]));
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    stream.set_nodelay(true).ok();
                    accepted.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(connection(
                        stream,
                        Arc::clone(&replies),
                        Arc::clone(&counter),
                    ));
                }
            });
        });
        Self {
            addr: rx.recv().unwrap(),
            requests,
            connections,
        }
    }

    /// The base URL of an OpenAI-compatible provider (`…/v1`).
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL of an Anthropic provider.
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Serves one keep-alive connection until the client closes it.
async fn connection(mut stream: TcpStream, replies: Arc<Replies>, counter: Arc<AtomicU64>) {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut read = vec![0u8; 64 * 1024];
    loop {
        while let Some((head, body_len, anthropic)) = request_head(&buf) {
            if buf.len() < head + body_len {
                break;
            }
            let body = &buf[head..head + body_len];
            let after_tool = if anthropic {
                contains(body, b"\"tool_result\"")
            } else {
                contains(body, b"\"role\":\"tool\"")
            };
            let reply = &replies.0[usize::from(anthropic) * 2 + usize::from(after_tool)];
            if stream.write_all(reply).await.is_err() {
                return;
            }
            counter.fetch_add(1, Ordering::Relaxed);
            buf.drain(..head + body_len);
        }
        match stream.read(&mut read).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&read[..n]),
        }
    }
}

/// A complete request head at the start of `buf`: its length, the body's
/// `content-length` and whether the path is Anthropic's (`…/messages`).
fn request_head(buf: &[u8]) -> Option<(usize, usize, bool)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?;
    let body_len = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    Some((end, body_len, path.ends_with("/messages")))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
