//! One model call over the transport: attempts, retries, the idle timer, the total
//! deadline, and the typed errors of HTTP failures (see the [parent module](super)).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde_json::Value;
use tokio::time::{Instant, Sleep};

use super::{Decoder, ERROR_BODY_BYTES, Flow, QUOTE_BYTES, Transport, chain};
use crate::sse::{SseError, SseParser};
use crate::truncate;
use rein_core::model::{ModelChunk, ModelError, ModelErrorKind, ModelStream};

/// The stream of one model call: `decoder` turns the events of each attempt into
/// chunks.
pub(super) fn start<D: Decoder>(
    transport: Transport,
    headers: HeaderMap,
    body: Vec<u8>,
    decoder: D,
) -> ModelStream {
    let state = Call {
        transport,
        headers,
        body,
        template: decoder.clone(),
        decoder,
        events: None,
        pending: VecDeque::new(),
        attempt: 0,
        delivered: false,
        done: false,
        deadline: None,
    };
    // Boxed: each item's future takes the call and hands it back, a pointer rather than
    // the whole state (which under many concurrent calls is mostly cold).
    Box::pin(futures::stream::unfold(
        Box::new(state),
        |mut call| async move { call.next_item().await.map(|item| (item, call)) },
    ))
}

/// One response body being read, with its parser (which holds the events completed but
/// not yet decoded).
struct Body {
    response: Response,
    parser: SseParser,
    /// When the stream last made progress (or its headers arrived).
    progress: Instant,
    /// Armed at the idle (or total) deadline seen when it was set and moved on only
    /// when it fires: re-arming a timer for every read costs more than the read.
    timer: Option<Pin<Box<Sleep>>>,
}

/// A failure and whether another attempt may fix it.
pub(super) struct Failure {
    pub(super) error: ModelError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: ModelError) -> Self {
        Self {
            error,
            retryable: false,
            retry_after: None,
        }
    }

    fn retryable(error: ModelError) -> Self {
        Self {
            error,
            retryable: true,
            retry_after: None,
        }
    }
}

/// One model call in progress.
struct Call<D> {
    transport: Transport,
    headers: HeaderMap,
    body: Vec<u8>,
    template: D,
    decoder: D,
    events: Option<Body>,
    pending: VecDeque<ModelChunk>,
    attempt: u32,
    delivered: bool,
    done: bool,
    /// The call's total deadline, fixed when it is first polled (`Some(None)`: none).
    deadline: Option<Option<Instant>>,
}

/// `Some(now + d)`, or `None` when that is beyond what the clock can represent.
pub(super) fn after(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}

/// The earlier of `limit` and `deadline`, and whether the deadline is the one that
/// applies.
fn cap(limit: Option<Instant>, deadline: Option<Instant>) -> (Option<Instant>, bool) {
    match (limit, deadline) {
        (Some(l), Some(d)) if d <= l => (Some(d), true),
        (None, Some(d)) => (Some(d), true),
        (l, _) => (l, false),
    }
}

/// Runs `f` until `until` (forever when `None`); `None` when the time ran out.
pub(super) async fn within<F: Future>(until: Option<Instant>, f: F) -> Option<F::Output> {
    match until {
        Some(at) => tokio::time::timeout_at(at, f).await.ok(),
        None => Some(f.await),
    }
}

/// The error for a call that passed its total deadline (never retried).
fn deadline_failure(transport: &Transport) -> Failure {
    let total = transport.http.total_timeout.unwrap_or(Duration::MAX);
    Failure::fatal(ModelError::new(
        ModelErrorKind::Deadline,
        format!(
            "the model call to {} did not finish within its total deadline of {total:?} \
             (HttpConfig::total_timeout)",
            transport.url
        ),
    ))
}

impl<D: Decoder> Call<D> {
    async fn next_item(&mut self) -> Option<Result<ModelChunk, ModelError>> {
        let total = self.transport.http.total_timeout;
        let deadline = *self.deadline.get_or_insert_with(|| total.and_then(after));
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                // Usage and finish reasons are bookkeeping, not part of the answer: a
                // retry after them shows the caller no second answer.
                if !matches!(chunk, ModelChunk::Usage(_) | ModelChunk::Finish(_)) {
                    self.delivered = true;
                }
                return Some(Ok(chunk));
            }
            if self.done {
                return None;
            }
            let step = match self.events.as_mut() {
                None => self.open(deadline).await.map(|events| {
                    self.events = Some(events);
                }),
                Some(_) => self.read(deadline).await,
            };
            if let Err(failure) = step {
                self.events = None;
                if let Some(wait) = self.retry_delay(&failure, deadline) {
                    tracing::warn!(
                        url = self.transport.url(),
                        attempt = self.attempt,
                        error = %failure.error,
                        "model request failed; retrying in {wait:?}"
                    );
                    tokio::time::sleep(wait).await;
                    self.decoder = self.template.clone();
                    continue;
                }
                self.done = true;
                self.pending.clear();
                return Some(Err(failure.error));
            }
        }
    }

    /// How long to wait before retrying `failure`, or `None` to give up (also when the
    /// retry could not start before `deadline`).
    fn retry_delay(&self, failure: &Failure, deadline: Option<Instant>) -> Option<Duration> {
        let policy = &self.transport.http.retry;
        if !failure.retryable || self.delivered || self.attempt >= policy.max_attempts.max(1) {
            return None;
        }
        let wait = match failure.retry_after {
            Some(wait) if wait > policy.max_retry_after => return None,
            Some(wait) => wait,
            None => policy.backoff(self.attempt),
        };
        match (deadline, after(wait)) {
            (Some(d), Some(at)) if at < d => Some(wait),
            (Some(_), _) => None,
            (None, _) => Some(wait),
        }
    }

    /// Sends the request (one attempt) and checks the response status.
    async fn open(&mut self, deadline: Option<Instant>) -> Result<Body, Failure> {
        self.attempt += 1;
        let t = &self.transport;
        let send = t
            .client
            .post(t.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(self.body.clone())
            .send();
        let (until, by_deadline) = cap(after(t.http.request_timeout), deadline);
        let response = match within(until, send).await {
            None if by_deadline => return Err(deadline_failure(t)),
            None => {
                return Err(Failure::retryable(ModelError::new(
                    ModelErrorKind::Timeout,
                    format!(
                        "no response from {} within {:?}",
                        t.url, t.http.request_timeout
                    ),
                )));
            }
            Some(Err(e)) => return Err(send_failure(&t.url, e)),
            Some(Ok(r)) => r,
        };
        let (body_until, _) = cap(after(t.http.idle_timeout), deadline);
        let status = response.status();
        if !status.is_success() {
            return Err(status_failure(t, response, body_until).await);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let what = match &content_type {
            Some(ct)
                if ct
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream") =>
            {
                None
            }
            None if t.http.accept_missing_content_type => None,
            Some(ct) => Some(format!("`{}`", truncate(ct, QUOTE_BYTES))),
            None => Some(
                "no content type (set `HttpConfig::accept_missing_content_type` for a \
                 server that streams without one)"
                    .to_owned(),
            ),
        };
        if let Some(what) = what {
            let body = read_prefix(response, body_until).await;
            return Err(Failure::fatal(ModelError::new(
                ModelErrorKind::Stream,
                format!(
                    "{} answered {status} with {what} instead of an event stream: {}",
                    t.url,
                    truncate(&body, QUOTE_BYTES)
                ),
            )));
        }
        Ok(Body {
            response,
            parser: SseParser::new(t.http.max_line_bytes, t.http.max_event_bytes),
            progress: Instant::now(),
            timer: None,
        })
    }

    /// Decodes the next SSE event, reading more of the body (until the idle timeout or
    /// the deadline) when no complete event is buffered.
    async fn read(&mut self, deadline: Option<Instant>) -> Result<(), Failure> {
        let t = &self.transport;
        let idle = t.http.idle_timeout;
        loop {
            let Some(body) = self.events.as_mut() else {
                return Ok(());
            };
            if let Some(event) = body.parser.next_event() {
                let event = event.map_err(|e| sse_failure(t, &e))?;
                let before = self.pending.len();
                let decoded = self.decoder.decode(&event, &mut self.pending);
                body.parser.recycle(event);
                return match decoded {
                    Ok(Flow::More) => {
                        if self.pending.len() > before {
                            body.progress = Instant::now();
                        }
                        Ok(())
                    }
                    Ok(Flow::Done) => {
                        self.events = None;
                        self.done = true;
                        Ok(())
                    }
                    Err(error) => {
                        let retryable = matches!(
                            error.kind(),
                            ModelErrorKind::Server | ModelErrorKind::RateLimit
                        );
                        Err(Failure {
                            error,
                            retryable,
                            retry_after: None,
                        })
                    }
                };
            }
            match body.next_chunk(idle, deadline).await {
                Err(true) => return Err(deadline_failure(t)),
                Err(false) => {
                    return Err(Failure::retryable(ModelError::new(
                        ModelErrorKind::Timeout,
                        format!(
                            "the stream made no progress for {idle:?} (HttpConfig::idle_timeout; \
                             pings, comments and empty deltas do not count)"
                        ),
                    )));
                }
                Ok(Err(e)) => {
                    let message = format!("the connection failed mid-stream: {}", chain(&e));
                    return Err(Failure::retryable(
                        ModelError::new(ModelErrorKind::Stream, message).with_source(e),
                    ));
                }
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    self.events = None;
                    if self.decoder.complete_without_terminal() {
                        self.done = true;
                        return Ok(());
                    }
                    return Err(Failure::retryable(ModelError::new(
                        ModelErrorKind::Stream,
                        "the stream ended before its terminal event",
                    )));
                }
            }
        }
    }
}

impl Body {
    /// Reads the next piece of the body into the parser (`Ok(Ok(false))` at its end),
    /// or `Err(by_deadline)` when no progress came within `idle` (or the call's
    /// `deadline` passed first: `Err(true)`).
    async fn next_chunk(
        &mut self,
        idle: Duration,
        deadline: Option<Instant>,
    ) -> Result<reqwest::Result<bool>, bool> {
        loop {
            let (until, by_deadline) = cap(self.progress.checked_add(idle), deadline);
            let Some(until) = until else {
                let chunk = self.response.chunk().await;
                return Ok(self.push(chunk));
            };
            let timer = match &mut self.timer {
                Some(timer) => timer,
                slot => slot.insert(Box::pin(tokio::time::sleep_until(until))),
            };
            // The body first: a piece already buffered never waits on the timer.
            tokio::select! {
                biased;
                chunk = self.response.chunk() => return Ok(self.push(chunk)),
                () = timer.as_mut() => {}
            }
            if until <= Instant::now() {
                return Err(by_deadline);
            }
            // Progress since the timer was set moved the deadline on.
            timer.as_mut().reset(until);
        }
    }

    fn push<B: AsRef<[u8]>>(&mut self, chunk: reqwest::Result<Option<B>>) -> reqwest::Result<bool> {
        Ok(chunk?
            .map(|bytes| self.parser.push(bytes.as_ref()))
            .is_some())
    }
}

/// The error for a body that is not acceptable SSE (never retried: the server would
/// send the same again).
fn sse_failure(transport: &Transport, e: &SseError) -> Failure {
    let message = match e {
        SseError::Utf8(_) => e.to_string(),
        _ => format!("{}: {e}", transport.url),
    };
    Failure::fatal(ModelError::new(ModelErrorKind::Stream, message))
}

/// A typed failure for a non-success response, with the server's message.
pub(super) async fn status_failure(
    transport: &Transport,
    response: Response,
    until: Option<Instant>,
) -> Failure {
    let status = response.status();
    let headers = response.headers().clone();
    let body = read_prefix(response, until).await;
    let detail = error_message(&body).unwrap_or_else(|| truncate(body.trim(), QUOTE_BYTES));
    let request_id = ["x-request-id", "request-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default();
    let retry_after = retry_after(&headers, SystemTime::now());
    let max = transport.http.retry.max_retry_after;
    let wait = match retry_after {
        Some(d) if d > max => format!(
            "; the server asked to retry after {}, longer than max_retry_after ({max:?}): \
             not retried",
            show_wait(d)
        ),
        Some(d) => format!("; the server asked to retry after {d:?}"),
        None => String::new(),
    };
    let kind = status_kind(status);
    let error = ModelError::new(
        kind,
        format!(
            "{} answered {status}{request_id}: {detail}{wait}",
            transport.url
        ),
    );
    let retryable = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error();
    Failure {
        error,
        retryable,
        retry_after,
    }
}

/// A wait for a message: `Duration::MAX` (what `inf` and huge values saturate to) reads
/// as unbounded.
fn show_wait(d: Duration) -> String {
    if d == Duration::MAX {
        "an unbounded time".to_owned()
    } else {
        format!("{d:?}")
    }
}

/// At most [`ERROR_BODY_BYTES`] of a body, as text (lossy), read until `until`; the
/// response, and with it the connection, is dropped after that. Empty when nothing
/// could be read.
async fn read_prefix(mut response: Response, until: Option<Instant>) -> String {
    let mut out: Vec<u8> = Vec::new();
    let read = async {
        while out.len() < ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    let take = bytes.len().min(ERROR_BODY_BYTES - out.len());
                    out.extend_from_slice(&bytes[..take]);
                }
                _ => break,
            }
        }
    };
    let _ = within(until, read).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The error kind of an HTTP status.
fn status_kind(status: StatusCode) -> ModelErrorKind {
    match status.as_u16() {
        401 | 403 => ModelErrorKind::Authentication,
        429 => ModelErrorKind::RateLimit,
        408 => ModelErrorKind::Timeout,
        400..=499 => ModelErrorKind::BadRequest,
        500..=599 => ModelErrorKind::Server,
        _ => ModelErrorKind::Other,
    }
}

/// `error.message` (or `message`) of a JSON error body, as both providers send it.
fn error_message(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let err = v.get("error").unwrap_or(&v);
    let msg = match err {
        Value::String(s) => s.clone(),
        _ => err.get("message")?.as_str()?.to_owned(),
    };
    Some(truncate(&msg, 1000))
}

/// The error and retry decision for a failed `send()`.
pub(super) fn send_failure(url: &reqwest::Url, e: reqwest::Error) -> Failure {
    if e.is_builder() {
        let message = format!("cannot build the request to {url}: {}", chain(&e));
        return Failure::fatal(ModelError::new(ModelErrorKind::BadRequest, message).with_source(e));
    }
    let (kind, what) = if e.is_timeout() {
        (ModelErrorKind::Timeout, "timed out")
    } else if e.is_connect() {
        (ModelErrorKind::Other, "could not connect")
    } else {
        (ModelErrorKind::Other, "failed")
    };
    let message = format!("the request to {url} {what}: {}", chain(&e));
    Failure::retryable(ModelError::new(kind, message).with_source(e))
}

/// The server-requested wait: `retry-after-ms`, else `Retry-After` as seconds or as
/// an HTTP date (relative to `now`). Values of any size are accepted: huge and infinite
/// ones saturate to `Duration::MAX` (longer than any `max_retry_after`); negative and
/// `NaN` ones are ignored.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(wait) = get("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| seconds(ms / 1000.0))
    {
        return Some(wait);
    }
    let value = get(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A number of seconds off the wire as a wait, never panicking (unlike
/// `Duration::from_secs_f64`): `None` for `NaN` and negative values, `Duration::MAX`
/// for values too large to represent (`1e300`, `inf`).
fn seconds(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    if secs == 0.0 {
        return Some(Duration::ZERO);
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn retry_after_accepts_milliseconds_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let h = headers(&[("retry-after-ms", "250")]);
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(250)));
        let h = headers(&[("retry-after", "120")]);
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(120)));
        let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")]);
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
        let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]);
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO));
        let h = headers(&[("retry-after", "soon")]);
        assert_eq!(retry_after(&h, now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_of_any_size_saturates_and_never_panics() {
        let now = SystemTime::UNIX_EPOCH;
        for (name, value, want) in [
            ("retry-after", "1e30", Some(Duration::MAX)),
            ("retry-after", "inf", Some(Duration::MAX)),
            ("retry-after", "1.8446744073709552e19", Some(Duration::MAX)),
            ("retry-after-ms", "1e300", Some(Duration::MAX)),
            ("retry-after", "-5", None),
            ("retry-after", "-0", Some(Duration::ZERO)),
            ("retry-after", "NaN", None),
            ("retry-after-ms", "-1", None),
            ("retry-after", "0.5", Some(Duration::from_millis(500))),
        ] {
            assert_eq!(
                retry_after(&headers(&[(name, value)]), now),
                want,
                "{name}: {value}"
            );
        }
        // An unusable `retry-after-ms` falls back to `Retry-After`.
        let h = headers(&[("retry-after-ms", "NaN"), ("retry-after", "2")]);
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(2)));
    }

    #[test]
    fn statuses_map_to_typed_kinds() {
        for (code, kind) in [
            (401, ModelErrorKind::Authentication),
            (403, ModelErrorKind::Authentication),
            (429, ModelErrorKind::RateLimit),
            (400, ModelErrorKind::BadRequest),
            (404, ModelErrorKind::BadRequest),
            (422, ModelErrorKind::BadRequest),
            (408, ModelErrorKind::Timeout),
            (500, ModelErrorKind::Server),
            (529, ModelErrorKind::Server),
        ] {
            assert_eq!(status_kind(StatusCode::from_u16(code).unwrap()), kind);
        }
    }

    #[test]
    fn error_messages_are_read_from_both_providers_bodies() {
        let openai = r#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#;
        let anthropic =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"no"}}"#;
        assert_eq!(error_message(openai).as_deref(), Some("bad model"));
        assert_eq!(error_message(anthropic).as_deref(), Some("no"));
        assert_eq!(error_message("<html>"), None);
    }
}
