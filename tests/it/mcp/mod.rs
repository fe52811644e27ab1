//! MCP servers: the client against the reference server (stdio and streamable HTTP), and
//! hostile servers (malformed replies, floods, hangs, crashes).

#[cfg(feature = "mcp")]
mod client;
#[cfg(feature = "mcp")]
mod hostile;
