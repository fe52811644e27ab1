//! A stdio server's stderr: drained to its end so the server never blocks on a full
//! pipe, and logged (target `rein::mcp`, level `debug`) within bounds, since the server
//! is someone else's code: each line is cut to [`STDERR_LINE_BYTES`] (the rest is
//! counted, never kept), and at most [`STDERR_LINES_PER_SECOND`] lines a second are
//! logged (the others are counted, and their number is logged in one line with the
//! first line after that second, or when stderr ends).
//! Memory is one read buffer and one line, whatever the server writes.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{STDERR_LINE_BYTES, STDERR_LINES_PER_SECOND};

/// Reads `from` until it ends (or fails), logging its lines within the bounds.
pub(super) async fn drain<R: AsyncRead + Unpin>(mut from: R, server: String) {
    let mut log = Limited::new(Instant::now());
    let mut lines = Lines::new(STDERR_LINE_BYTES);
    let mut chunk = vec![0u8; 8 * 1024];
    let mut emit = |line: &[u8], cut: usize| {
        log.line(&server, line, cut, Instant::now());
    };
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        lines.feed(&chunk[..n], &mut emit);
    }
    lines.finish(&mut emit);
    log.close(&server);
}

/// Splits bytes into lines of at most `max` bytes each (without the line end), counting
/// what is cut.
struct Lines {
    max: usize,
    line: Vec<u8>,
    /// Bytes of the current line past `max`.
    cut: usize,
}

impl Lines {
    fn new(max: usize) -> Self {
        Self {
            max,
            line: Vec::with_capacity(max.min(1024)),
            cut: 0,
        }
    }

    /// Scans `bytes`, calling `emit(line, cut_bytes)` for every line that ends in them.
    fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(&[u8], usize)) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let part = &bytes[..end.unwrap_or(bytes.len())];
            let room = self.max.saturating_sub(self.line.len());
            let kept = part.len().min(room);
            self.line.extend_from_slice(&part[..kept]);
            self.cut = self.cut.saturating_add(part.len() - kept);
            match end {
                Some(i) => {
                    self.emit(emit);
                    bytes = &bytes[i + 1..];
                }
                None => return,
            }
        }
    }

    /// Emits the last line when the stream ended without a newline.
    fn finish(&mut self, emit: &mut impl FnMut(&[u8], usize)) {
        if !self.line.is_empty() || self.cut > 0 {
            self.emit(emit);
        }
    }

    fn emit(&mut self, emit: &mut impl FnMut(&[u8], usize)) {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        emit(line, self.cut);
        self.line.clear();
        self.cut = 0;
    }
}

/// Logs at most [`STDERR_LINES_PER_SECOND`] lines per second, counting the others.
struct Limited {
    window: Instant,
    logged: u32,
    suppressed: u64,
}

impl Limited {
    fn new(now: Instant) -> Self {
        Self {
            window: now,
            logged: 0,
            suppressed: 0,
        }
    }

    /// Logs one line (or counts it when this second's lines are used up); returns
    /// whether it was logged.
    fn line(&mut self, server: &str, line: &[u8], cut: usize, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.close(server);
            self.window = now;
            self.logged = 0;
        }
        if self.logged >= STDERR_LINES_PER_SECOND {
            self.suppressed = self.suppressed.saturating_add(1);
            return false;
        }
        self.logged += 1;
        let text = String::from_utf8_lossy(line);
        if cut > 0 {
            tracing::debug!(
                target: "rein::mcp",
                server = %server,
                "stderr: {text} [{cut} more bytes cut: lines are kept to {STDERR_LINE_BYTES} bytes]"
            );
        } else {
            tracing::debug!(target: "rein::mcp", server = %server, "stderr: {text}");
        }
        true
    }

    /// Reports the lines suppressed since the last report, if any.
    fn close(&mut self, server: &str) {
        if self.suppressed > 0 {
            tracing::debug!(
                target: "rein::mcp",
                server = %server,
                "stderr: {} lines not logged (at most {STDERR_LINES_PER_SECOND} a second)",
                self.suppressed
            );
            self.suppressed = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, input: &[&[u8]]) -> Vec<(String, usize)> {
        let mut lines = Lines::new(max);
        let mut out = Vec::new();
        let mut emit =
            |l: &[u8], cut: usize| out.push((String::from_utf8_lossy(l).into_owned(), cut));
        for part in input {
            lines.feed(part, &mut emit);
        }
        lines.finish(&mut emit);
        out
    }

    #[test]
    fn lines_are_cut_to_the_limit_across_reads_and_the_rest_is_counted() {
        let out = split(4, &[b"ab", b"cdefg\nhi\r\n", b"\n", b"xyzzy"]);
        assert_eq!(
            out,
            [
                ("abcd".to_owned(), 3),
                ("hi".to_owned(), 0),
                (String::new(), 0),
                ("xyzz".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn a_line_without_end_keeps_at_most_the_limit_in_memory() {
        let mut lines = Lines::new(STDERR_LINE_BYTES);
        let block = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            lines.feed(&block, &mut |_, _| panic!("no line ended"));
        }
        assert_eq!(lines.line.len(), STDERR_LINE_BYTES);
        assert!(lines.line.capacity() <= 2 * STDERR_LINE_BYTES);
        assert_eq!(lines.cut, 64 * 64 * 1024 - STDERR_LINE_BYTES);
    }

    #[test]
    fn at_most_the_per_second_number_of_lines_is_logged() {
        let start = Instant::now();
        let mut log = Limited::new(start);
        let logged = (0..1000).filter(|_| log.line("s", b"x", 0, start)).count();
        assert_eq!(logged, STDERR_LINES_PER_SECOND as usize);
        assert_eq!(log.suppressed, 1000 - u64::from(STDERR_LINES_PER_SECOND));
        // The next second logs again (and reports the suppressed count).
        assert!(log.line("s", b"x", 0, start + Duration::from_secs(1)));
        assert_eq!(log.suppressed, 0);
    }
}
