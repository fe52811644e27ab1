//! The MCP client (feature `mcp`): connections over `rmcp` and the tools they expose.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::NeverRetry;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio::sync::Mutex;

use super::IDEMPOTENCY_META_KEY;
use super::guard::{self, FrameLimits, LIMIT_CODE, TOO_DEEP};
use super::requests::Requests;
use super::stderr;
use super::{McpServerConfig, McpTransport, check_server_id, tool_name};
use rein_core::tool::{EffectClass, SharedTool, Tool, ToolContext, ToolError};
use rein_core::{BuildError, BuildErrorKind};

type Service = RunningService<RoleClient, Requests>;

/// A live connection: the service, and the child process of a stdio server (killed
/// when this is dropped).
struct Live {
    service: Service,
    _child: Option<tokio::process::Child>,
}

/// One server: its configuration and the live connection, if any. Shared by every tool
/// of the server; dropping the last tool drops the service, which closes the transport
/// and kills a stdio server's process.
struct Connection {
    id: String,
    config: McpServerConfig,
    /// The live connection and its generation (bumped on every (re)connect).
    state: Mutex<(Option<Live>, u64)>,
}

impl Connection {
    /// Starts or reaches the server and completes the handshake, within the connect
    /// timeout.
    async fn connect(&self) -> Result<Live, String> {
        let timeout = self.config.connect_timeout_duration();
        match tokio::time::timeout(timeout, self.open()).await {
            Ok(result) => result,
            Err(_) => Err(format!("connecting timed out after {}", secs(timeout))),
        }
    }

    async fn open(&self) -> Result<Live, String> {
        match self.config.transport() {
            McpTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                let mut child = cmd
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    return Err(format!("cannot start `{command}`: no stdio pipes"));
                };
                if let Some(stderr) = child.stderr.take() {
                    tokio::spawn(stderr::drain(stderr, self.id.clone()));
                }
                // Every message passes the frame guard on its way to rmcp.
                let (reader, relay_end) = tokio::io::duplex(64 * 1024);
                let limits = FrameLimits {
                    max_bytes: self.config.mcp_limits().max_message_bytes,
                    max_depth: self.config.mcp_limits().max_json_depth,
                };
                tokio::spawn(guard::relay(stdout, relay_end, limits, self.id.clone()));
                let service = self
                    .requests()
                    .serve((reader, stdin))
                    .await
                    .map_err(|e| format!("MCP handshake failed: {e}"))?;
                Ok(Live {
                    service,
                    _child: Some(child),
                })
            }
            McpTransport::Http { url, headers } => {
                let mut map = HashMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| format!("invalid header name `{name}`: {e}"))?;
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|e| format!("invalid value for header `{name}`: {e}"))?;
                    map.insert(name, value);
                }
                let mut config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
                // A response stream lost mid-call fails that call (the next call opens a
                // new session) instead of being resumed: resumption depends on the server's
                // event store, and against the reference server a resumed stream never
                // delivered the result, so the call waited for its whole timeout.
                config.retry_config = Arc::new(NeverRetry::default());
                crate::ensure_tls_provider();
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = self
                    .requests()
                    .serve(transport)
                    .await
                    .map_err(|e| format!("cannot connect to `{url}`: {e}"))?;
                Ok(Live {
                    service,
                    _child: None,
                })
            }
            _ => Err("this transport is not supported by this client version".to_owned()),
        }
    }

    /// What the client answers this server's requests with (see `requests`).
    fn requests(&self) -> Requests {
        Requests {
            server: self.id.clone(),
            label: self.config.tool_capabilities().result,
            elicitation: self.config.elicitation().cloned(),
        }
    }

    /// The live peer, reconnecting first when there is none or its transport closed.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), String> {
        let mut state = self.state.lock().await;
        if let Some(live) = &state.0
            && !live.service.is_closed()
            && !live.service.peer().is_transport_closed()
        {
            return Ok((live.service.peer().clone(), state.1));
        }
        // Drop a dead service (and its process) before starting a new one.
        state.0 = None;
        let live = self.connect().await?;
        state.1 += 1;
        let peer = live.service.peer().clone();
        state.0 = Some(live);
        tracing::debug!(target: "rein::mcp", server = %self.id, generation = state.1, "connected");
        Ok((peer, state.1))
    }

    /// Drops the service of `generation` (if still current) so the next call reconnects.
    async fn invalidate(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.1 == generation {
            state.0 = None;
        }
    }

    /// Calls `tool`; the request's `_meta` carries the call's idempotency key under
    /// [`IDEMPOTENCY_META_KEY`] (a server that deduplicates by it can be declared
    /// idempotent).
    async fn call(&self, tool: &str, input: Value, key: String) -> Result<String, ToolError> {
        let fail = |what: String| {
            ToolError::new(format!("MCP server `{}`, tool `{tool}`: {what}", self.id))
        };
        let arguments = match input {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => return Err(fail(format!("arguments must be an object, got {other}"))),
        };
        let (peer, generation) = self
            .peer()
            .await
            .map_err(|e| fail(format!("server unavailable: {e}")))?;
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let mut meta = serde_json::Map::new();
        meta.insert(IDEMPOTENCY_META_KEY.to_owned(), Value::String(key));
        params.meta = Some(rmcp::model::RequestMetaObject::from(meta));
        let timeout = self.config.call_timeout();
        match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => Err(fail(format!("the call timed out after {}", secs(timeout)))),
            Ok(Err(ServiceError::McpError(e))) if e.code.0 == LIMIT_CODE => {
                Err(fail(e.message.replace("response", "result")))
            }
            Ok(Err(ServiceError::McpError(e))) => {
                Err(fail(format!("the server rejected the call: {}", e.message)))
            }
            Ok(Err(e)) => {
                self.invalidate(generation).await;
                Err(fail(format!(
                    "the connection failed ({e}); the next call reconnects"
                )))
            }
            Ok(Ok(result)) => {
                let text = render(&result.content, result.structured_content.as_ref());
                if result.is_error == Some(true) {
                    Err(fail(format!("the tool returned an error: {text}")))
                } else {
                    Ok(text)
                }
            }
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// The text the model reads: text blocks joined by newlines, other blocks as JSON; the
/// structured content as JSON when there is nothing else.
fn render<T: serde::Serialize>(content: &[T], structured: Option<&Value>) -> String {
    let mut parts = Vec::new();
    for block in content {
        let value = serde_json::to_value(block).unwrap_or(Value::Null);
        match value.get("text").and_then(Value::as_str) {
            Some(text) if value.get("type").and_then(Value::as_str) == Some("text") => {
                parts.push(text.to_owned());
            }
            _ => parts.push(value.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = structured
    {
        parts.push(structured.to_string());
    }
    parts.join("\n")
}

/// One MCP tool as an agent tool.
struct McpTool {
    conn: Arc<Connection>,
    /// The tool's name on the server.
    remote: String,
    /// `mcp__<server>__<tool>`.
    name: String,
    description: String,
    parameters: Value,
    /// From the server's tool annotations (`readOnlyHint`, `idempotentHint`);
    /// at-most-once without them.
    effect: EffectClass,
    /// The server's declared capabilities (`McpServerConfig::capabilities`).
    capabilities: rein_core::ToolCapabilities,
}

/// The effect class an MCP tool's annotations declare: read-only for `readOnlyHint:
/// true`, idempotent for `idempotentHint: true`, at-most-once otherwise (annotations are
/// the server's hints; a tool without them is never re-run when its outcome is unknown).
fn effect_of(annotations: Option<&rmcp::model::ToolAnnotations>) -> EffectClass {
    match annotations {
        Some(a) if a.read_only_hint == Some(true) => EffectClass::ReadOnly,
        Some(a) if a.idempotent_hint == Some(true) => EffectClass::Idempotent,
        _ => EffectClass::AtMostOnce,
    }
}

impl Tool for McpTool {
    fn effect_class(&self) -> EffectClass {
        self.effect
    }

    fn capabilities(&self) -> rein_core::ToolCapabilities {
        self.capabilities
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        self.conn
            .call(&self.remote, input, ctx.idempotency_key())
            .await
    }
}

/// Connects every server concurrently and returns their tools, in server then listing
/// order.
pub(crate) async fn connect_all(
    servers: &[(String, McpServerConfig)],
) -> Result<Vec<SharedTool>, BuildError> {
    let lists =
        futures::future::try_join_all(servers.iter().map(|(id, c)| server_tools(id, c))).await?;
    Ok(lists.into_iter().flatten().collect())
}

async fn server_tools(id: &str, config: &McpServerConfig) -> Result<Vec<SharedTool>, BuildError> {
    let err = |m: String| BuildError::new(BuildErrorKind::Mcp, format!("MCP server `{id}`: {m}"));
    check_server_id(id).map_err(err)?;
    config.validate().map_err(err)?;
    let conn = Arc::new(Connection {
        id: id.to_owned(),
        config: config.clone(),
        state: Mutex::new((None, 0)),
    });
    let (peer, _) = conn.peer().await.map_err(err)?;
    let listed = tokio::time::timeout(config.connect_timeout_duration(), list_tools(&peer, config))
        .await
        .map_err(|_| {
            err(format!(
                "listing tools timed out after {}",
                secs(config.connect_timeout_duration())
            ))
        })?
        .map_err(err)?;
    if let Some(enabled) = config.enabled_tools()
        && let Some(missing) = enabled
            .iter()
            .find(|n| !listed.iter().any(|t| t.name == **n))
    {
        return Err(err(format!(
            "`enable_tools` names `{missing}`, which the server does not offer"
        )));
    }
    let mut tools: Vec<SharedTool> = Vec::new();
    for tool in listed {
        let remote = tool.name.to_string();
        if config
            .enabled_tools()
            .is_some_and(|enabled| !enabled.contains(&remote))
        {
            continue;
        }
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("")
            .to_owned();
        let parameters = Value::Object((*tool.input_schema).clone());
        if contains_marker(&parameters) {
            return Err(err(format!(
                "tool `{remote}`: its input schema is nested too deep: more than {} levels \
                 (`max_json_depth`)",
                config.mcp_limits().max_json_depth
            )));
        }
        tools.push(SharedTool::new(McpTool {
            conn: Arc::clone(&conn),
            name: tool_name(id, &remote),
            remote,
            description: format!("{description} (MCP server `{id}`)"),
            parameters,
            effect: effect_of(tool.annotations.as_ref()),
            capabilities: config.tool_capabilities(),
        }));
    }
    Ok(tools)
}

/// Lists the server's tools page by page within its [`McpLimits`](super::McpLimits).
async fn list_tools(
    peer: &Peer<RoleClient>,
    config: &McpServerConfig,
) -> Result<Vec<rmcp::model::Tool>, String> {
    let limits = config.mcp_limits();
    let (mut tools, mut bytes, mut cursor) = (Vec::new(), 0usize, None);
    for page in 1.. {
        if page > limits.max_list_pages {
            return Err(format!(
                "the tool listing exceeds `max_list_pages` ({} pages): the server still \
                 returns a `nextCursor`",
                limits.max_list_pages
            ));
        }
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let result = peer.list_tools(Some(params)).await.map_err(|e| match e {
            ServiceError::McpError(e) if e.code.0 == LIMIT_CODE => {
                format!("cannot list tools: {}", e.message)
            }
            e => format!("cannot list tools: {e}"),
        })?;
        for tool in result.tools {
            bytes = bytes.saturating_add(listed_size(&tool));
            if bytes > limits.max_list_bytes {
                return Err(format!(
                    "the tool listing exceeds `max_list_bytes` ({} bytes)",
                    limits.max_list_bytes
                ));
            }
            tools.push(tool);
            if tools.len() > limits.max_tools {
                return Err(format!(
                    "the server lists more than `max_tools` ({}) tools",
                    limits.max_tools
                ));
            }
        }
        match result.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(tools)
}

/// The bytes a listed tool takes as JSON (what `max_list_bytes` counts).
fn listed_size(tool: &rmcp::model::Tool) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a listed tool cannot fail; an error only leaves the count short.
    let _ = serde_json::to_writer(&mut count, tool);
    count.0
}

/// Whether the frame guard cut a value of `schema` for being nested too deep.
fn contains_marker(schema: &Value) -> bool {
    match schema {
        Value::String(s) => s == TOO_DEEP,
        Value::Array(items) => items.iter().any(contains_marker),
        Value::Object(map) => map.values().any(contains_marker),
        _ => false,
    }
}
