//! MCP server declarations: the configuration values `tools.json` and
//! `AgentBuilder::mcp_server` carry, and the naming and id rules of MCP tools. Plain data:
//! the client that connects the servers is the `rein-mcp` crate (`rein::mcp` with the
//! feature `mcp`), which re-exports these.

use std::fmt;
use std::time::Duration;

mod elicitation;

pub use elicitation::{
    Elicitation, ElicitationDecision, ElicitationHandler, ElicitationHook, ElicitationKind,
};

/// The prefix of every MCP tool name.
pub const TOOL_PREFIX: &str = "mcp__";

/// The default call timeout of an MCP tool call (60 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default connect timeout: spawning or reaching the server, the MCP handshake and
/// listing its tools (30 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`McpLimits::max_list_pages`]: 32 pages of `tools/list`.
pub const DEFAULT_MAX_LIST_PAGES: usize = 32;

/// The default of [`McpLimits::max_tools`]: 1,024 tools per server.
pub const DEFAULT_MAX_TOOLS: usize = 1024;

/// The default of [`McpLimits::max_list_bytes`]: 8 MiB of tool listing per server.
pub const DEFAULT_MAX_LIST_BYTES: usize = 8 << 20;

/// The default of [`McpLimits::max_message_bytes`]: 4 MiB per message (far more than
/// any model context holds).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The default of [`McpLimits::max_json_depth`]: 64 levels of JSON nesting.
pub const DEFAULT_MAX_JSON_DEPTH: usize = 64;

/// The largest accepted [`McpLimits::max_message_bytes`] (15 MiB: below the 16 MiB
/// line limit of `rmcp`'s stdio transport, which would silently drop a larger line).
pub const MAX_MESSAGE_BYTES_CEILING: usize = 15 << 20;

/// The accepted range of [`McpLimits::max_json_depth`] (the JSON parser of `rmcp`
/// stops at 128 levels; a message's envelope takes up to 6).
pub const JSON_DEPTH_RANGE: std::ops::RangeInclusive<usize> = 8..=120;

/// What one MCP server may send (see the module docs). Set with
/// [`McpServerConfig::limits`]; every limit must be greater than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpLimits {
    /// The most `tools/list` pages read at build (default [`DEFAULT_MAX_LIST_PAGES`]).
    /// A server still returning a `nextCursor` after that fails `build_async`.
    pub max_list_pages: usize,
    /// The most tools a server may list (default [`DEFAULT_MAX_TOOLS`]), counted
    /// before `enable_tools` picks some. More fails `build_async`.
    pub max_tools: usize,
    /// The most bytes of tool listing (names, descriptions and schemas as JSON,
    /// summed over the pages; default [`DEFAULT_MAX_LIST_BYTES`]). More fails
    /// `build_async`.
    pub max_list_bytes: usize,
    /// The largest message a stdio server may send, in bytes (default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`], at most [`MAX_MESSAGE_BYTES_CEILING`]). A larger
    /// tool result is an error result saying "too large"; a larger listing page fails
    /// `build_async`. (HTTP servers: `rmcp`'s own 16 MiB event limit applies.)
    pub max_message_bytes: usize,
    /// The deepest JSON nesting a stdio server may send (default
    /// [`DEFAULT_MAX_JSON_DEPTH`], within [`JSON_DEPTH_RANGE`]). A deeper tool result
    /// is an error result saying "too deep"; a deeper input schema fails `build_async`
    /// naming the tool.
    pub max_json_depth: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_list_pages: DEFAULT_MAX_LIST_PAGES,
            max_tools: DEFAULT_MAX_TOOLS,
            max_list_bytes: DEFAULT_MAX_LIST_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
        }
    }
}

impl McpLimits {
    /// The default limits (the `DEFAULT_*` constants of this module).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`max_list_pages`](Self::max_list_pages).
    pub fn max_list_pages(mut self, n: usize) -> Self {
        self.max_list_pages = n;
        self
    }

    /// Sets [`max_tools`](Self::max_tools).
    pub fn max_tools(mut self, n: usize) -> Self {
        self.max_tools = n;
        self
    }

    /// Sets [`max_list_bytes`](Self::max_list_bytes).
    pub fn max_list_bytes(mut self, n: usize) -> Self {
        self.max_list_bytes = n;
        self
    }

    /// Sets [`max_message_bytes`](Self::max_message_bytes).
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }

    /// Sets [`max_json_depth`](Self::max_json_depth).
    pub fn max_json_depth(mut self, n: usize) -> Self {
        self.max_json_depth = n;
        self
    }

    fn validate(&self) -> Result<(), String> {
        let zero = [
            ("max_list_pages", self.max_list_pages),
            ("max_tools", self.max_tools),
            ("max_list_bytes", self.max_list_bytes),
            ("max_message_bytes", self.max_message_bytes),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        if let Some((name, _)) = zero {
            return Err(format!("`{name}` must be greater than zero"));
        }
        if self.max_message_bytes > MAX_MESSAGE_BYTES_CEILING {
            return Err(format!(
                "`max_message_bytes` must be at most {MAX_MESSAGE_BYTES_CEILING}, got {}",
                self.max_message_bytes
            ));
        }
        if !JSON_DEPTH_RANGE.contains(&self.max_json_depth) {
            return Err(format!(
                "`max_json_depth` must be within {}..={}, got {}",
                JSON_DEPTH_RANGE.start(),
                JSON_DEPTH_RANGE.end(),
                self.max_json_depth
            ));
        }
        Ok(())
    }
}

/// The longest tool name providers accept.
const MAX_NAME: usize = 64;

/// How to reach an MCP server.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP over its stdin/stdout (`"transport": "stdio"`).
    Stdio {
        /// The program (looked up on `PATH` when it has no path separator).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables, added to the inherited environment.
        env: Vec<(String, String)>,
    },
    /// A streamable-HTTP server (`"transport": "http"`).
    Http {
        /// The endpoint URL, e.g. `https://host/mcp`.
        url: String,
        /// Extra headers sent with every request (e.g. `Authorization`).
        headers: Vec<(String, String)>,
    },
}

/// One MCP server: its transport, timeouts and an optional tool allowlist.
///
/// `Debug` shows environment variable and header *names* only: their values often hold
/// secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub(crate) transport: McpTransport,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) enable_tools: Option<Vec<String>>,
    pub(crate) limits: McpLimits,
    pub(crate) capabilities: crate::label::ToolCapabilities,
    pub(crate) elicitation: Option<ElicitationHook>,
}

impl McpServerConfig {
    /// A stdio server run as `command` (no arguments, inherited environment, default
    /// timeouts, every tool enabled).
    pub fn stdio(command: impl Into<String>) -> Self {
        Self::with_transport(McpTransport::Stdio {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
        })
    }

    /// A streamable-HTTP server at `url` (no extra headers, default timeouts, every tool
    /// enabled).
    pub fn http(url: impl Into<String>) -> Self {
        Self::with_transport(McpTransport::Http {
            url: url.into(),
            headers: Vec::new(),
        })
    }

    /// A server reached through `transport`, with default timeouts and every tool enabled.
    pub fn with_transport(transport: McpTransport) -> Self {
        Self {
            transport,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            enable_tools: None,
            limits: McpLimits::default(),
            capabilities: crate::label::ToolCapabilities::remote(),
            elicitation: None,
        }
    }

    /// Appends one argument (stdio only; ignored for HTTP).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        if let McpTransport::Stdio { args, .. } = &mut self.transport {
            args.push(arg.into());
        }
        self
    }

    /// Appends arguments (stdio only; ignored for HTTP).
    pub fn args<I>(mut self, new: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        if let McpTransport::Stdio { args, .. } = &mut self.transport {
            args.extend(new.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of the child process (stdio only; ignored for HTTP).
    /// A later value for the same name wins.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            push_pair(env, name.into(), value.into());
        }
        self
    }

    /// Sets a header sent with every request (HTTP only; ignored for stdio). A later
    /// value for the same name (compared case-insensitively) wins. Invalid header names
    /// or values fail `build_async`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Http { headers, .. } = &mut self.transport {
            let name = name.into();
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
            headers.push((name, value.into()));
        }
        self
    }

    /// The timeout of one tool call, from sending the request to the result (default
    /// [`DEFAULT_TIMEOUT`]; must be greater than zero). A call that exceeds it is an error
    /// result; the connection is kept.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// The timeout of connecting: starting or reaching the server, the MCP handshake and
    /// (at build) listing its tools (default [`DEFAULT_CONNECT_TIMEOUT`]; must be greater
    /// than zero).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Only these server tools (their names on the server, not the `mcp__` names) become
    /// agent tools; naming a tool the server does not offer fails `build_async`. Default:
    /// every tool the server lists.
    pub fn enable_tools<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.enable_tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Sets what the server may send (default [`McpLimits::default`]); invalid limits
    /// fail `build_async` naming the limit.
    pub fn limits(mut self, limits: McpLimits) -> Self {
        self.limits = limits;
        self
    }

    /// What every tool of this server declares for information-flow control (default
    /// [`ToolCapabilities::remote`](crate::label::ToolCapabilities::remote): untrusted
    /// results, changes state, communicates outside — nothing is known about a remote
    /// tool, so the default fails closed; the server's own tool annotations are hints
    /// from the server and are not trusted for this). In `tools.json`, the server's
    /// `capabilities` object.
    pub fn capabilities(mut self, capabilities: crate::label::ToolCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Lets this server ask for input while its tools run: its elicitations
    /// (`elicitation/create`, form or URL) go to `handler`, labelled as the server's
    /// content (see [`Elicitation`]), and the client advertises elicitation to it.
    /// Default: none — the client does not advertise elicitation and declines any that
    /// arrives (a server cannot get an answer the application did not give).
    pub fn on_elicitation(mut self, handler: impl ElicitationHandler) -> Self {
        self.elicitation = Some(ElicitationHook::new(handler));
        self
    }

    /// The server's elicitation handler ([`McpServerConfig::on_elicitation`]), if any.
    pub fn elicitation(&self) -> Option<&ElicitationHook> {
        self.elicitation.as_ref()
    }

    /// What every tool of this server declares ([`McpServerConfig::capabilities`]).
    pub fn tool_capabilities(&self) -> crate::label::ToolCapabilities {
        self.capabilities
    }

    /// What the server may send.
    pub fn mcp_limits(&self) -> &McpLimits {
        &self.limits
    }

    /// The transport.
    pub fn transport(&self) -> &McpTransport {
        &self.transport
    }

    /// The call timeout.
    pub fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// The connect timeout.
    pub fn connect_timeout_duration(&self) -> Duration {
        self.connect_timeout
    }

    /// The enabled server tools, `None` meaning all.
    pub fn enabled_tools(&self) -> Option<&[String]> {
        self.enable_tools.as_deref()
    }

    /// Checks what can be checked without connecting.
    ///
    /// # Errors
    /// A message naming the setting that is out of range (a zero timeout, a limit
    /// outside its range, an empty command or URL).
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("timeouts must be greater than zero".to_owned());
        }
        self.limits.validate()?;
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err("`command` must not be empty".to_owned())
            }
            McpTransport::Http { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(format!(
                    "`url` must be an http:// or https:// URL, got {url:?}"
                ))
            }
            _ if self
                .enable_tools
                .as_ref()
                .is_some_and(|t| t.is_empty() || t.iter().any(|n| n.trim().is_empty())) =>
            {
                Err("`enable_tools` must list at least one non-empty tool name".to_owned())
            }
            _ => Ok(()),
        }
    }
}

fn push_pair(pairs: &mut Vec<(String, String)>, name: String, value: String) {
    pairs.retain(|(n, _)| *n != name);
    pairs.push((name, value));
}

impl fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(n, _)| n.clone()).collect()
        };
        match self {
            McpTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env (names)", &names(env))
                .finish(),
            McpTransport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers (names)", &names(headers))
                .finish(),
        }
    }
}

impl fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("transport", &self.transport)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("enable_tools", &self.enable_tools)
            .field("capabilities", &self.capabilities)
            .field("limits", &self.limits)
            .field("elicitation", &self.elicitation.is_some())
            .finish()
    }
}

/// Checks an MCP server id: 1-32 characters from `[A-Za-z0-9_.-]`, no `__`, not ending
/// in `_` — which makes `mcp__<server>__<tool>` unambiguous.
///
/// # Errors
/// A message saying which rule the id breaks.
pub fn check_server_id(id: &str) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if id.is_empty() || id.len() > 32 || !id.chars().all(valid) {
        return Err(format!(
            "invalid MCP server id {id:?}: use 1-32 characters from [A-Za-z0-9_.-]"
        ));
    }
    if id.contains("__") || id.ends_with('_') {
        return Err(format!(
            "invalid MCP server id {id:?}: it must not contain `__` or end with `_` \
             (tool names are `mcp__<server>__<tool>`)"
        ));
    }
    Ok(())
}

/// The agent tool name of the MCP tool `tool` on server `server`:
/// `mcp__<server>__<tool>`.
///
/// When that is not a valid tool name as is (a character outside `[A-Za-z0-9_.-]`, or
/// longer than 64 characters), every other character is replaced by `_`, the result is
/// cut to 55 characters and `_` plus 8 hex digits of a stable hash (FNV-1a) of the
/// original server and tool names are appended — deterministic across runs and platforms,
/// and distinct for names that sanitize alike. Server ids accepted by rein contain no
/// `__` and do not end in `_`, so unchanged names never collide either.
pub fn tool_name(server: &str, tool: &str) -> String {
    let plain = format!("{TOOL_PREFIX}{server}__{tool}");
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if plain.len() <= MAX_NAME && plain.chars().all(valid) {
        return plain;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in server.bytes().chain([0]).chain(tool.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let folded = (hash ^ (hash >> 32)) & 0xffff_ffff;
    let mut name: String = plain
        .chars()
        .map(|c| if valid(c) { c } else { '_' })
        .take(MAX_NAME - 9)
        .collect();
    name.push_str(&format!("_{folded:08x}"));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept_and_odd_names_are_sanitized_deterministically() {
        assert_eq!(tool_name("files", "read"), "mcp__files__read");
        let odd = tool_name("files", "read file");
        assert!(odd.starts_with("mcp__files__read_file_"), "{odd}");
        assert_eq!(odd, tool_name("files", "read file"));
        assert_ne!(odd, tool_name("files", "read/file"));
        let long = tool_name("server", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, tool_name("server", &"x".repeat(101)));
    }

    #[test]
    fn server_ids_that_would_make_names_ambiguous_are_rejected() {
        assert!(check_server_id("files").is_ok());
        assert!(check_server_id("my_files-2.x").is_ok());
        for bad in ["", "a__b", "a_", "a b", "ü"] {
            assert!(check_server_id(bad).is_err(), "{bad}");
        }
    }
}
