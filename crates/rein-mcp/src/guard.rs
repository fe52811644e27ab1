//! The frame guard between a stdio server's stdout and `rmcp`: bounds the size and the
//! nesting depth of every message, so an oversized or too-deep message fails its
//! request at once instead of being dropped by the transport (which leaves the request
//! waiting for its full timeout).
//!
//! Messages are newline-delimited JSON. The guard scans each line once (linear in its
//! bytes, memory bounded by the size limit) and forwards it unchanged when it is within
//! the limits. Otherwise:
//! - a *response* (it has an `id` and no `method`) that is too large, or too deep
//!   anywhere but inside a tool listing, is replaced by a JSON-RPC error response with
//!   the same id and code [`LIMIT_CODE`], whose message says "too large" or "too deep"
//!   and names the limit;
//! - in a tool listing (`result.tools`), each value nested deeper than the limit is
//!   replaced by the string [`TOO_DEEP`], so the listing still arrives and the build
//!   can name the offending tool;
//! - anything else (a request or notification from the server, a line without an id)
//!   is dropped and logged.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The JSON-RPC error code of a response the guard substituted.
pub(super) const LIMIT_CODE: i32 = -32_099;

/// What a value nested deeper than the limit inside a tool listing becomes.
pub(super) const TOO_DEEP: &str = "\u{0}rein: nested too deep\u{0}";

/// The longest key or id the guard remembers (longer ones are never `id`, `method`,
/// `result` or `tools`, and an id this long is not echoed).
const SHORT: usize = 256;

/// The limits the guard enforces.
#[derive(Clone, Copy, Debug)]
pub(super) struct FrameLimits {
    pub(super) max_bytes: usize,
    pub(super) max_depth: usize,
}

/// Copies `from` to `to` line by line through the guard until `from` ends (or `to` is
/// closed). Dropping `to` at the end closes the reading side for `rmcp`.
pub(super) async fn relay<R, W>(mut from: R, mut to: W, limits: FrameLimits, server: String)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut scanner = Scanner::new(limits);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while let Some(consumed) = scanner.feed(rest) {
            rest = &rest[consumed..];
            let out = scanner.finish_line(&server);
            if let Some(out) = out
                && (to.write_all(&out).await.is_err() || to.flush().await.is_err())
            {
                return;
            }
        }
    }
}

/// A streaming scanner of one line of JSON at a time.
struct Scanner {
    limits: FrameLimits,
    /// The bytes to forward (possibly rewritten); stops growing past the size limit.
    line: Vec<u8>,
    /// Bytes of the current line seen so far.
    seen: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The string just closed (its raw bytes, up to [`SHORT`]), a candidate key.
    last_string: Vec<u8>,
    string_overflow: bool,
    /// The keys of the open objects at depth 1 and 2 (`result`, `tools`).
    key1: Vec<u8>,
    key2: Vec<u8>,
    /// Capturing the raw value of the top-level `id`.
    capturing_id: bool,
    id: Vec<u8>,
    has_method: bool,
    /// Inside a value deeper than the limit: skip until depth returns to this.
    skip_to: Option<usize>,
    /// The line went deeper than the limit outside a tool listing.
    too_deep: bool,
}

impl Scanner {
    fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            line: Vec::new(),
            seen: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            last_string: Vec::new(),
            string_overflow: false,
            key1: Vec::new(),
            key2: Vec::new(),
            capturing_id: false,
            id: Vec::new(),
            has_method: false,
            skip_to: None,
            too_deep: false,
        }
    }

    fn reset(&mut self) {
        self.line.clear();
        if self.line.capacity() > 1 << 20 {
            self.line.shrink_to(64 * 1024);
        }
        self.seen = 0;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
        self.last_string.clear();
        self.string_overflow = false;
        self.key1.clear();
        self.key2.clear();
        self.capturing_id = false;
        self.id.clear();
        self.has_method = false;
        self.skip_to = None;
        self.too_deep = false;
    }

    fn oversized(&self) -> bool {
        self.seen > self.limits.max_bytes
    }

    /// Scans `bytes`; returns how many were consumed when a line ended there (the
    /// newline included), `None` when all were consumed mid-line.
    fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                return Some(i + 1);
            }
            self.seen += 1;
            let keep = self.step(b);
            if keep && !self.oversized() && !self.too_deep {
                self.line.push(b);
            }
        }
        None
    }

    /// Advances the state by one byte; returns whether the byte is forwarded.
    fn step(&mut self, b: u8) -> bool {
        if self.capturing_id {
            self.capture_id(b);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                return self.skip_to.is_none();
            }
            if self.last_string.len() < SHORT {
                self.last_string.push(b);
            } else {
                self.string_overflow = true;
            }
            return self.skip_to.is_none();
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.last_string.clear();
                self.string_overflow = false;
            }
            b':' if self.skip_to.is_none() => {
                let key = if self.string_overflow {
                    &b""[..]
                } else {
                    &self.last_string[..]
                };
                match self.depth {
                    1 => {
                        self.key1 = key.to_vec();
                        self.has_method |= key == b"method";
                        if key == b"id" {
                            self.capturing_id = true;
                            self.id.clear();
                        }
                    }
                    2 => self.key2 = key.to_vec(),
                    _ => {}
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth > self.limits.max_depth && self.skip_to.is_none() {
                    if self.key1 == b"result" && self.key2 == b"tools" {
                        self.skip_to = Some(self.depth - 1);
                        let marker = serde_json::Value::String(TOO_DEEP.to_owned()).to_string();
                        if !self.oversized() {
                            self.line.extend_from_slice(marker.as_bytes());
                        }
                    } else {
                        self.too_deep = true;
                    }
                }
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.skip_to == Some(self.depth) {
                    self.skip_to = None;
                    return false;
                }
            }
            _ => {}
        }
        self.skip_to.is_none()
    }

    /// Collects the raw bytes of the top-level `id` value (after its `:`).
    fn capture_id(&mut self, b: u8) {
        let ends = !self.in_string && self.depth == 1 && matches!(b, b',' | b'}');
        if ends || self.depth > 1 || self.id.len() > SHORT {
            self.capturing_id = false;
            return;
        }
        if b != b':' || !self.id.is_empty() {
            self.id.push(b);
        }
    }

    /// The bytes to forward for the line just ended (with its newline), if any, and
    /// resets for the next line.
    fn finish_line(&mut self, server: &str) -> Option<Vec<u8>> {
        let out = self.verdict(server);
        self.reset();
        out
    }

    fn verdict(&mut self, server: &str) -> Option<Vec<u8>> {
        let problem = if self.oversized() {
            format!(
                "the response is too large: {} bytes, over the limit of {} bytes \
                 (`max_message_bytes`)",
                self.seen, self.limits.max_bytes
            )
        } else if self.too_deep {
            format!(
                "the response is nested too deep: more than {} levels (`max_json_depth`)",
                self.limits.max_depth
            )
        } else {
            let mut line = std::mem::take(&mut self.line);
            line.push(b'\n');
            return Some(line);
        };
        let id = std::str::from_utf8(&self.id)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s.trim()).ok())
            .filter(|id| id.is_number() || id.is_string());
        match id {
            Some(id) if !self.has_method => {
                tracing::warn!(target: "rein::mcp", server = %server, "{problem}");
                let reply = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {"code": LIMIT_CODE, "message": problem},
                });
                let mut out = reply.to_string().into_bytes();
                out.push(b'\n');
                Some(out)
            }
            _ => {
                tracing::warn!(
                    target: "rein::mcp",
                    server = %server,
                    "dropped a message that is not a response: {problem}"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limits: FrameLimits, input: &str) -> Vec<String> {
        let mut s = Scanner::new(limits);
        let mut out = Vec::new();
        let mut rest = input.as_bytes();
        while let Some(n) = s.feed(rest) {
            rest = &rest[n..];
            if let Some(line) = s.finish_line("t") {
                out.push(String::from_utf8(line).unwrap());
            }
        }
        out
    }

    const LIMITS: FrameLimits = FrameLimits {
        max_bytes: 200,
        max_depth: 6,
    };

    #[test]
    fn lines_within_the_limits_pass_unchanged() {
        let line = r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1,{"b":"x:{[\"y"}]}}"#;
        assert_eq!(run(LIMITS, &format!("{line}\n")), [format!("{line}\n")]);
    }

    #[test]
    fn an_oversized_response_becomes_an_error_with_its_id_even_when_the_id_comes_last() {
        let big = "x".repeat(500);
        let out = run(
            LIMITS,
            &format!("{{\"jsonrpc\":\"2.0\",\"result\":{{\"t\":\"{big}\"}},\"id\":\"abc\"}}\n"),
        );
        let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(v["id"], "abc");
        assert_eq!(v["error"]["code"], LIMIT_CODE);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("too large")
        );
    }

    #[test]
    fn a_deep_value_in_a_listing_is_replaced_and_elsewhere_fails_the_response() {
        let deep = format!("{}1{}", "[".repeat(20), "]".repeat(20));
        let listing = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"tools\":[{{\"name\":\"d\",\"inputSchema\":{{\"a\":{deep}}}}}],\"x\":1}}}}\n"
        );
        let out = run(LIMITS, &listing);
        let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(v["result"]["tools"][0]["inputSchema"]["a"][0], TOO_DEEP);
        assert_eq!(v["result"]["x"], 1);
        let call = format!("{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"a\":{deep}}}}}\n");
        let v: serde_json::Value = serde_json::from_str(&run(LIMITS, &call)[0]).unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("too deep"));
        assert_eq!(v["id"], 4);
        // A request from the server is never answered in its name: it is dropped.
        let request =
            format!("{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\",\"params\":{deep}}}\n");
        assert!(run(LIMITS, &request).is_empty());
    }
}
