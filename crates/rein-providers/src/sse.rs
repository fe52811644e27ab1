//! A server-sent-events parser whose cost is linear in the bytes received and whose
//! memory is bounded by two limits (the longest line, the largest event).
//!
//! It follows the WHATWG event-stream rules the providers rely on: lines end with LF,
//! CRLF or CR (a CRLF split across two reads is one line end); a leading byte-order
//! mark is skipped; `:` starts a comment; `event` sets the type, each `data` line is
//! appended with a line feed (removed from the last one); `id`, `retry` and unknown
//! fields are ignored; a blank line dispatches the event unless it has no data; an
//! unfinished event at the end of the body is dropped.
//!
//! Each byte is looked at once: the parser scans only the bytes of the current read for
//! a line end (with `memchr`, many bytes per step) and keeps the unfinished line in a
//! buffer it appends to, so a long line costs its length, not its length squared; a
//! line that ends in the read it started in is parsed in place.

use std::collections::VecDeque;

use crate::truncate;

use crate::transport::QUOTE_BYTES;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// The event type (`message` when the stream named none).
    pub(crate) event: String,
    /// The data lines, joined with `\n`.
    pub(crate) data: String,
}

/// Why a stream is not acceptable SSE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A line grew past `limit` bytes before its end.
    LineTooLong {
        /// The limit (`HttpConfig::max_line_bytes`).
        limit: usize,
    },
    /// The data and type of one event grew past `limit` bytes.
    EventTooLarge {
        /// The limit (`HttpConfig::max_event_bytes`).
        limit: usize,
    },
    /// A field value is not UTF-8; the line, lossily decoded and truncated.
    Utf8(String),
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LineTooLong { limit } => write!(
                f,
                "an event-stream line exceeds max_line_bytes ({limit} bytes)"
            ),
            Self::EventTooLarge { limit } => {
                write!(f, "an event exceeds max_event_bytes ({limit} bytes)")
            }
            Self::Utf8(line) => write!(f, "malformed event stream: invalid UTF-8 in `{line}`"),
        }
    }
}

/// The incremental parser of one response body: bytes go in with
/// [`push`](Self::push), events come out of [`next_event`](Self::next_event). An error
/// is reported after the events completed before it, so the outcome does not depend on
/// how the body was split into reads.
#[derive(Clone, Debug)]
pub(crate) struct SseParser {
    /// Events completed and not yet taken.
    ready: VecDeque<Event>,
    /// The error that stopped parsing, reported once `ready` is drained.
    failed: Option<SseError>,
    /// The unfinished line (without its end).
    line: Vec<u8>,
    /// The previous line ended with CR: an LF that follows belongs to it.
    skip_lf: bool,
    /// The first line was seen (the byte-order mark is stripped from it only).
    started: bool,
    /// The event being assembled.
    event_type: String,
    data: String,
    /// Bytes of field values in the event being assembled.
    event_bytes: usize,
    /// The buffers of an event handed back with [`recycle`](Self::recycle), for the
    /// next one (an allocation and a free per event less for each).
    spare: Option<Event>,
    max_line: usize,
    max_event: usize,
}

impl SseParser {
    /// A parser for a fresh body with these limits (bytes).
    pub(crate) fn new(max_line: usize, max_event: usize) -> Self {
        Self {
            ready: VecDeque::new(),
            failed: None,
            line: Vec::new(),
            skip_lf: false,
            started: false,
            event_type: String::new(),
            data: String::new(),
            event_bytes: 0,
            spare: None,
            max_line,
            max_event,
        }
    }

    /// Parses the next bytes of the body. Ignored after an error.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let mut ready = std::mem::take(&mut self.ready);
        if let Err(e) = self.feed(bytes, &mut ready) {
            self.failed = Some(e);
        }
        self.ready = ready;
    }

    /// The next complete event; then the error that stopped parsing, if any; `None`
    /// when more bytes are needed.
    pub(crate) fn next_event(&mut self) -> Option<Result<Event, SseError>> {
        match self.ready.pop_front() {
            Some(event) => Some(Ok(event)),
            None => self.failed.clone().map(Err),
        }
    }

    /// Parses `bytes`, pushing every event they complete onto `out`.
    fn feed(&mut self, mut bytes: &[u8], out: &mut VecDeque<Event>) -> Result<(), SseError> {
        while let Some(&first) = bytes.first() {
            if std::mem::take(&mut self.skip_lf) && first == b'\n' {
                bytes = &bytes[1..];
                continue;
            }
            let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) else {
                self.extend_line(bytes)?;
                break;
            };
            let (line, rest) = (&bytes[..end], &bytes[end + 1..]);
            self.skip_lf = bytes[end] == b'\r';
            bytes = rest;
            if self.line.is_empty() {
                // The whole line is in this read: parsed where it is, not copied.
                if line.len() > self.max_line {
                    return Err(SseError::LineTooLong {
                        limit: self.max_line,
                    });
                }
                self.line_done(line, out)?;
                continue;
            }
            self.extend_line(line)?;
            let line = std::mem::take(&mut self.line);
            let done = self.line_done(&line, out);
            // Keep the allocation for the next line.
            self.line = line;
            self.line.clear();
            done?;
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len().saturating_add(bytes.len()) > self.max_line {
            return Err(SseError::LineTooLong {
                limit: self.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut VecDeque<Event>) -> Result<(), SseError> {
        let mut line = line;
        if !std::mem::replace(&mut self.started, true) {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(p) => {
                let value = &line[p + 1..];
                (&line[..p], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if field != b"event" && field != b"data" {
            // `id`, `retry` and unknown fields.
            return Ok(());
        }
        self.event_bytes = self.event_bytes.saturating_add(value.len());
        if self.event_bytes > self.max_event {
            return Err(SseError::EventTooLarge {
                limit: self.max_event,
            });
        }
        let value = std::str::from_utf8(value)
            .map_err(|_| SseError::Utf8(truncate(&String::from_utf8_lossy(line), QUOTE_BYTES)))?;
        if field == b"event" {
            value.clone_into(&mut self.event_type);
        } else {
            self.data.push_str(value);
            self.data.push('\n');
        }
        Ok(())
    }

    /// Takes back the buffers of an event the caller is done with.
    pub(crate) fn recycle(&mut self, mut event: Event) {
        event.event.clear();
        event.data.clear();
        self.spare = Some(event);
    }

    fn dispatch(&mut self, out: &mut VecDeque<Event>) {
        self.event_bytes = 0;
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        let spare = self.spare.take().unwrap_or_default();
        let mut data = std::mem::replace(&mut self.data, spare.data);
        let mut event = std::mem::replace(&mut self.event_type, spare.event);
        data.pop();
        if event.is_empty() {
            event.push_str("message");
        }
        out.push_back(Event { event, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pieces: &[&[u8]], max: usize) -> Result<Vec<Event>, SseError> {
        let mut p = SseParser::new(max, max);
        let mut out = Vec::new();
        for piece in pieces {
            p.push(piece);
            while let Some(event) = p.next_event() {
                out.push(event?);
            }
        }
        Ok(out)
    }

    fn ev(event: &str, data: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_are_the_same_however_the_body_is_split() {
        let body: &[u8] = b"\xef\xbb\xbf: hi\r\nevent: a\r\ndata: 1\r\ndata:2\r\n\r\ndata: x\rid: 7\rretry: 5\r\r\n\ndata\nbogus: q\n\ndata: tail";
        let want = vec![ev("a", "1\n2"), ev("message", "x"), ev("message", "")];
        assert_eq!(parse(&[body], 1 << 20).unwrap(), want);
        for split in 0..=body.len() {
            let (a, b) = body.split_at(split);
            assert_eq!(parse(&[a, b], 1 << 20).unwrap(), want, "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(parse(&bytes, 1 << 20).unwrap(), want);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched() {
        assert_eq!(parse(&[b"event: ping\n\n: c\n\n"], 64).unwrap(), vec![]);
    }

    #[test]
    fn a_line_or_an_event_over_its_limit_is_an_error_naming_it() {
        let long = [b'a'; 65];
        assert_eq!(
            parse(&[b"data: ", &long], 64),
            Err(SseError::LineTooLong { limit: 64 })
        );
        let mut p = SseParser::new(64, 10);
        p.push(b"data: 1\n\ndata: 123456\ndata: 12345\n");
        // The event before the error first, then the error, for good.
        assert_eq!(p.next_event(), Some(Ok(ev("message", "1"))));
        let too_large = Some(Err(SseError::EventTooLarge { limit: 10 }));
        assert_eq!(p.next_event(), too_large);
        p.push(b"\ndata: more\n\n");
        assert_eq!(p.next_event(), too_large);
        assert!(
            SseError::LineTooLong { limit: 64 }
                .to_string()
                .contains("max_line_bytes")
        );
    }

    #[test]
    fn invalid_utf8_in_a_field_is_an_error_quoting_the_line() {
        let err = parse(&[b"data: \xff\xfe\n\n"], 64).unwrap_err();
        assert!(
            matches!(err, SseError::Utf8(ref l) if l.starts_with("data: ")),
            "{err:?}"
        );
        // In a comment it is ignored.
        assert_eq!(parse(&[b": \xff\n\n"], 64).unwrap(), vec![]);
    }
}
