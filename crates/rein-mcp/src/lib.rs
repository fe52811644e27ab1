//! MCP tools: Model Context Protocol servers whose tools become ordinary agent tools.
//!
//! A server is declared in `<workspace>/tools.json` under `"mcpServers"` (see
//! [`ToolsPolicy`](rein_core::subagent::spec::ToolsPolicy)) or in code with
//! `AgentBuilder::mcp_server(id, McpServerConfig)`. With the feature `mcp`,
//! `AgentBuilder::build_async` connects every declared server (over stdio or streamable
//! HTTP, through the official Rust SDK `rmcp`), lists its tools, and adds each one to the
//! agent's **base tools** as `mcp__<server>__<tool>` (see [`tool_name`]) with the server's
//! JSON Schema as its parameters. They are added *before* the tool bound is applied, so
//! they pass the same hook chain, allowlists, `tools.json` allow/deny and subagent bounds as
//! every other tool: a subagent never reaches an MCP tool its parent cannot.
//!
//! # Build time and call time
//! - **Build:** listing tools needs a connection, so `build_async` connects each server
//!   (bounded by its connect timeout) and fails with
//!   [`BuildErrorKind::Mcp`](rein_core::BuildErrorKind::Mcp) naming the server when it cannot
//!   start, connect or list. The synchronous `build()` cannot connect: an agent with
//!   declared servers fails there with `BuildErrorKind::Mcp` pointing to `build_async`.
//!   Without the feature `mcp`, declaring servers (in `tools.json` or otherwise) is a build
//!   error saying the feature is off — never silently ignored.
//! - **Call:** every failure is an error *tool result* naming the server and the tool,
//!   never a crashed call: a server that cannot be (re)started, dies mid-call, exceeds the
//!   call timeout, or answers with an error. The agent keeps working; after a transport
//!   failure the connection is dropped and the next call reconnects (a new child process
//!   for stdio servers, a new session for HTTP servers). Over HTTP, a response stream
//!   lost mid-call fails that call at once rather than being resumed (resumption relies
//!   on the server's event store; against the reference server a resumed stream never
//!   delivered the result and the call waited out its timeout).
//! - **Limits:** a server is someone else's code, so what it may send is bounded (per
//!   server, see [`McpLimits`]): the tool listing is at most [`DEFAULT_MAX_LIST_PAGES`]
//!   pages, [`DEFAULT_MAX_TOOLS`] tools and [`DEFAULT_MAX_LIST_BYTES`] bytes, or
//!   `build_async` fails naming the server and the limit; over stdio every message is
//!   at most [`DEFAULT_MAX_MESSAGE_BYTES`] bytes and [`DEFAULT_MAX_JSON_DEPTH`] levels
//!   deep: a larger or deeper tool result is an error result saying "too large" / "too
//!   deep" as soon as it has arrived (never a silent wait for the call timeout), and a
//!   tool whose input schema is too deep fails `build_async` naming the server and the
//!   tool. A stdio server's stderr is read to its end (so the server never blocks on a
//!   full pipe) and logged at `debug` (target `rein::mcp`) with each line cut to
//!   [`STDERR_LINE_BYTES`] and at most [`STDERR_LINES_PER_SECOND`] lines a second: what
//!   a server writes there never grows the agent's memory.
//! - **Requests from the server:** a server's elicitations (it asks for input while its
//!   tool runs) go to the handler declared with
//!   [`McpServerConfig::on_elicitation`], as untrusted content; without one the client
//!   does not advertise elicitation and declines any that arrives. Sampling is never
//!   offered (refused) and `roots/list` answers an empty list. See [`Elicitation`].
//! - **Shutdown:** the connection is shared by the agent, its subagents and clones; when
//!   the last of them is dropped the connection closes and a stdio server's child process
//!   is killed (it is also spawned with kill-on-drop).

mod build;
pub use build::BuildAsync;
mod client;
mod guard;
mod requests;
mod stderr;

/// The `_meta` key of every MCP tool call that carries the call's idempotency key
/// ([`ToolContext::idempotency_key`](rein_core::ToolContext::idempotency_key)): the same on
/// every retry, resume and replica of that call, so a server that deduplicates by it
/// makes the tool idempotent. MCP tools take their effect class from the server's tool
/// annotations: `readOnlyHint: true` is [`EffectClass::ReadOnly`](rein_core::EffectClass),
/// `idempotentHint: true` is `Idempotent`, anything else `AtMostOnce`.
pub const IDEMPOTENCY_META_KEY: &str = "rein/idempotency_key";

/// The longest line of a stdio server's stderr that is logged, in bytes (4 KiB): the
/// rest of a longer line is counted and dropped, never kept.
pub const STDERR_LINE_BYTES: usize = 4 * 1024;

/// How many lines of a stdio server's stderr are logged per second, at most (64): the
/// others are counted, and their number is logged with the first line after that
/// second, or when stderr ends.
pub const STDERR_LINES_PER_SECOND: u32 = 64;

#[doc(no_inline)]
pub use rein_core::mcp::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_LIST_BYTES,
    DEFAULT_MAX_LIST_PAGES, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TOOLS, DEFAULT_TIMEOUT,
    Elicitation, ElicitationDecision, ElicitationHandler, ElicitationHook, ElicitationKind,
    JSON_DEPTH_RANGE, MAX_MESSAGE_BYTES_CEILING, McpLimits, McpServerConfig, McpTransport,
    TOOL_PREFIX, check_server_id, tool_name,
};

/// Installs rustls's `ring` crypto provider as the process default, once, unless one is
/// installed already (by the application, or by a dependency that enabled another
/// provider). Called before rein builds an HTTP client: reqwest is built without a
/// provider of its own (see `Cargo.toml`) and refuses to build a client without one.
pub(crate) fn ensure_tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err: a provider is installed already (by the application or another
        // thread), which is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
