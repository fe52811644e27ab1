//! Provider test helpers: an in-process HTTP/1.1 server on 127.0.0.1 that replays
//! scripted responses (SSE in chunked encoding, errors, stalls, cut connections) and
//! records every request; and [`Wire`], one implementation per provider wire format,
//! so behaviour common to both providers is tested once for each.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Value,
}

/// How a scripted response ends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// The terminating chunk is sent.
    Complete,
    /// The connection is closed mid-body, without the terminating chunk.
    Cut,
}

/// A scripted response.
#[derive(Clone, Debug)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    pieces: Vec<Vec<u8>>,
    end: End,
    delay: Option<Duration>,
    stall: Option<(usize, Duration)>,
}

impl Reply {
    /// `200 text/event-stream`, each event written (and flushed) as its own chunk.
    pub fn sse<S: AsRef<str>>(events: &[S]) -> Self {
        Self {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            pieces: events
                .iter()
                .map(|e| e.as_ref().as_bytes().to_vec())
                .collect(),
            end: End::Complete,
            delay: None,
            stall: None,
        }
    }

    /// A JSON response with the given status.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            pieces: vec![body.to_string().into_bytes()],
            end: End::Complete,
            delay: None,
            stall: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Appends raw bytes as one more piece.
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.pieces.push(bytes.to_vec());
        self
    }

    /// Re-splits the body into pieces of `n` bytes (events straddle chunks).
    pub fn in_pieces_of(mut self, n: usize) -> Self {
        let all: Vec<u8> = self.pieces.concat();
        self.pieces = all.chunks(n).map(<[u8]>::to_vec).collect();
        self
    }

    /// Closes the connection after the pieces, without the terminating chunk.
    pub fn cut(mut self) -> Self {
        self.end = End::Cut;
        self
    }

    /// Waits before sending the status line.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }

    /// Goes silent for `d` after `n` pieces.
    pub fn stall_after(mut self, n: usize, d: Duration) -> Self {
        self.stall = Some((n, d));
        self
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<Recorded>,
}

/// The server. Dropping the test's runtime stops it.
#[derive(Clone)]
pub struct MockServer {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl MockServer {
    /// Starts a server that answers requests with `replies`, in order; a request beyond
    /// them gets a 418.
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            replies: replies.into_iter().collect(),
            requests: Vec::new(),
        }));
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, Arc::clone(&st)));
            }
        });
        Self { url, state }
    }

    /// Points at another address (e.g. one nobody listens on).
    pub fn with_url(mut self, url: &str) -> Self {
        self.url = url.to_owned();
        self
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.requests().into_iter().map(|r| r.body).collect()
    }
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let reply = {
        let mut s = state.lock().unwrap();
        s.requests.push(request);
        s.replies.pop_front()
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::json(
            418,
            json!({"error": {"message": "mock server: no scripted reply left"}}),
        )
    });
    if let Some(d) = reply.delay {
        tokio::time::sleep(d).await;
    }
    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for (i, piece) in reply.pieces.iter().enumerate() {
        if let Some((n, d)) = reply.stall
            && i == n
        {
            tokio::time::sleep(d).await;
        }
        let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
        chunk.extend_from_slice(piece);
        chunk.extend_from_slice(b"\r\n");
        if socket.write_all(&chunk).await.is_err() || socket.flush().await.is_err() {
            return;
        }
    }
    if reply.end == End::Complete {
        let _ = socket.write_all(b"0\r\n\r\n").await;
    }
    let _ = socket.shutdown().await;
}

pub async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

/// HTTP settings for tests: millisecond backoffs, short timeouts.
pub fn fast_http(attempts: u32) -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: attempts,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            max_retry_after: Duration::from_secs(60),
        },
        ..HttpConfig::default()
    }
}

/// Runs one model call to the end: its chunks, or the error that ended it.
pub async fn collect(
    model: &dyn Model,
    request: ModelRequest,
) -> (Vec<ModelChunk>, Option<ModelError>) {
    use futures::StreamExt;
    let mut stream = model.stream(request);
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(c) => chunks.push(c),
            Err(e) => return (chunks, Some(e)),
        }
    }
    (chunks, None)
}

/// Replays `events` to the model `make` builds for a fresh server and returns the
/// chunks, failing the test on an error.
pub async fn replay<M: Model>(
    make: impl FnOnce(&MockServer) -> M,
    events: &[String],
) -> Vec<ModelChunk> {
    let server = MockServer::start([Reply::sse(events)]).await;
    stream_ok(&make(&server), ask("hi")).await
}

/// Runs one model call that must succeed; its chunks.
pub async fn stream_ok(model: &dyn Model, request: ModelRequest) -> Vec<ModelChunk> {
    let (chunks, err) = collect(model, request).await;
    assert!(err.is_none(), "{err:?}");
    chunks
}

/// A system prompt, a question, an assistant turn (thinking signed with `signature`,
/// text, tool uses `{prefix}_1` with valid and `{prefix}_2` with garbled arguments) and
/// its results (the second an error).
pub fn two_sums(prefix: &str, signature: Option<&str>) -> Vec<Msg> {
    let assistant = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(Thinking {
                text: "two sums".into(),
                signature: signature.map(Into::into),
            }),
            ContentBlock::Text("Adding.".into()),
            ContentBlock::ToolUse(ToolUse::new(
                format!("{prefix}_1"),
                "add",
                json!({"a": 1, "b": 2}),
            )),
            ContentBlock::ToolUse(ToolUse::new(
                format!("{prefix}_2"),
                "add",
                json!("{\"a\": 3,"),
            )),
        ],
    );
    vec![
        Msg::system("Be brief."),
        Msg::user("What is 1+2 and 3+4?"),
        assistant,
        Msg::tool([
            ToolResult::new(format!("{prefix}_1"), "add", "3"),
            ToolResult::error(format!("{prefix}_2"), "add", "Invalid arguments"),
        ]),
    ]
}

/// Asks an agent with the `add` tool (on `model`) for two sums, which the transcripts
/// answer with two tool calls, then "3 and 7."; checks both ran and the reply.
pub async fn agent_adds_twice(model: impl Model) {
    let log = crate::support::Log::default();
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .toolkit(crate::support::toolkit_with(vec![
            crate::support::add_tool(&log),
        ]))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("1+2 and 3+4?")).await.unwrap();
    assert_eq!(reply.text(), "3 and 7.");
    assert_eq!(log.entries(), ["add:1+2", "add:3+4"]);
}

/// `(id, content)` pairs, as [`Wire::tool_results`] returns them.
pub fn results(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(id, c)| ((*id).to_owned(), (*c).to_owned()))
        .collect()
}

/// The schema of the `add` tool, as a request offers it.
pub fn add_schema_tool() -> ToolSchema {
    ToolSchema {
        name: "add".into(),
        description: "Adds two numbers.".into(),
        parameters: crate::support::add_schema(),
    }
}

/// Concatenated text chunks.
pub fn text_of(chunks: &[ModelChunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            ModelChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// A request with one user message and no tools.
pub fn ask(text: &str) -> ModelRequest {
    ModelRequest {
        messages: vec![Msg::user(text)].into(),
        ..Default::default()
    }
}

/// What a model turn streams, independent of the wire format.
#[derive(Clone, Debug, Default)]
pub struct Turn {
    pub thinking: Vec<&'static str>,
    /// The thinking signature (wires without one ignore it).
    #[cfg_attr(not(feature = "anthropic"), allow(dead_code))]
    pub signature: Option<&'static str>,
    pub text: Vec<&'static str>,
    /// (id, name, argument fragments)
    pub calls: Vec<(&'static str, &'static str, Vec<&'static str>)>,
    pub usage: (u64, u64),
}

/// A provider wire format.
pub trait Wire: Send + Sync {
    fn name(&self) -> &'static str;
    /// The provider's model pointed at `server`.
    fn model(&self, server: &MockServer, http: HttpConfig) -> Arc<dyn Model>;
    /// The path requests must go to.
    fn path(&self) -> &'static str;
    /// The SSE events of a complete turn, terminal event last.
    fn events(&self, turn: &Turn) -> Vec<String>;
    /// An event whose JSON is malformed.
    fn malformed_event(&self) -> String;
    /// (tool call id, content) of the tool results in a request body.
    fn tool_results(&self, body: &Value) -> Vec<(String, String)>;
}

/// The wires of the enabled provider features.
pub fn wires() -> Vec<Box<dyn Wire>> {
    vec![
        #[cfg(feature = "openai")]
        Box::new(OpenAiWire),
        #[cfg(feature = "anthropic")]
        Box::new(AnthropicWire),
    ]
}

#[cfg(feature = "openai")]
pub fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

#[cfg(feature = "anthropic")]
pub fn event(v: Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

#[cfg(feature = "openai")]
pub struct OpenAiWire;

#[cfg(feature = "openai")]
pub fn openai_chunk(delta: Value, finish: Option<&str>) -> String {
    data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    }))
}

#[cfg(feature = "openai")]
impl Wire for OpenAiWire {
    fn name(&self) -> &'static str {
        "openai"
    }
    fn model(&self, server: &MockServer, http: HttpConfig) -> Arc<dyn Model> {
        Arc::new(
            OpenAiChatModel::builder()
                .base_url(format!("{}/v1", server.url))
                .api_key("sk-test")
                .model("gpt-test")
                .http(http)
                .build()
                .unwrap(),
        )
    }
    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }
    fn events(&self, turn: &Turn) -> Vec<String> {
        let mut out = vec![openai_chunk(
            json!({"role": "assistant", "content": ""}),
            None,
        )];
        for t in &turn.thinking {
            out.push(openai_chunk(json!({"reasoning_content": t}), None));
        }
        for t in &turn.text {
            out.push(openai_chunk(json!({"content": t}), None));
        }
        for (i, (id, name, frags)) in turn.calls.iter().enumerate() {
            out.push(openai_chunk(
                json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                       "function": {"name": name, "arguments": ""}}]}),
                None,
            ));
            for f in frags {
                out.push(openai_chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": f}}]}),
                    None,
                ));
            }
        }
        let finish = if turn.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        out.push(openai_chunk(json!({}), Some(finish)));
        out.push(data(json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": turn.usage.0, "completion_tokens": turn.usage.1,
                      "total_tokens": turn.usage.0 + turn.usage.1}
        })));
        out.push("data: [DONE]\n\n".into());
        out
    }
    fn malformed_event(&self) -> String {
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"x\"}\n\n".into()
    }
    fn tool_results(&self, body: &Value) -> Vec<(String, String)> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                let id = m["tool_call_id"].as_str().unwrap().to_owned();
                (id, m["content"].as_str().unwrap().to_owned())
            })
            .collect()
    }
}

#[cfg(feature = "anthropic")]
pub struct AnthropicWire;

#[cfg(feature = "anthropic")]
impl Wire for AnthropicWire {
    fn name(&self) -> &'static str {
        "anthropic"
    }
    fn model(&self, server: &MockServer, http: HttpConfig) -> Arc<dyn Model> {
        Arc::new(
            AnthropicModel::builder()
                .base_url(&server.url)
                .api_key("sk-ant-test")
                .model("claude-test")
                .http(http)
                .build()
                .unwrap(),
        )
    }
    fn path(&self) -> &'static str {
        "/v1/messages"
    }
    fn events(&self, turn: &Turn) -> Vec<String> {
        let mut out = vec![event(json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": turn.usage.0, "output_tokens": 1}}}))];
        out.push(event(json!({"type": "ping"})));
        let mut index = 0;
        if !turn.thinking.is_empty() {
            out.push(event(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
            for t in &turn.thinking {
                out.push(event(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "thinking_delta", "thinking": t}})));
            }
            if let Some(sig) = turn.signature {
                out.push(event(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": sig}})));
            }
            out.push(event(json!({"type": "content_block_stop", "index": index})));
            index += 1;
        }
        if !turn.text.is_empty() {
            out.push(event(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}})));
            for t in &turn.text {
                out.push(event(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": t}})));
            }
            out.push(event(json!({"type": "content_block_stop", "index": index})));
            index += 1;
        }
        for (id, name, frags) in &turn.calls {
            out.push(event(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
            for f in frags {
                out.push(event(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f}})));
            }
            out.push(event(json!({"type": "content_block_stop", "index": index})));
            index += 1;
        }
        let stop = if turn.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        out.push(event(json!({"type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": turn.usage.1}})));
        out.push(event(json!({"type": "message_stop"})));
        out
    }
    fn malformed_event(&self) -> String {
        "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"x\"}\n\n".into()
    }
    fn tool_results(&self, body: &Value) -> Vec<(String, String)> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                let id = b["tool_use_id"].as_str().unwrap().to_owned();
                (id, b["content"].as_str().unwrap().to_owned())
            })
            .collect()
    }
}
